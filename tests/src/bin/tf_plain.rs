//! A rank program that installs no `tracing` subscriber, as an
//! application might: rank 1 aborts once the job is up, and rank 0 (the
//! master and the root) reduces without it. The runtime's own logger must
//! say on stderr that rank 1 was declared failed (`TASKFOLD_LOG=off`
//! silences it). Rank 0 prints how its reduction ended and exits 0. With
//! `TF_PLAIN_ALL_LIVE` set, no rank aborts. `TF_PLAIN_LATE=R` makes the
//! process of launcher rank `R` (`PMI_RANK`) start 3 s late, holding the
//! job's start open.

use taskfold::{Reduce, Runtime, Sum};

fn main() -> std::process::ExitCode {
    let late = std::env::var("TF_PLAIN_LATE").ok();
    if late.is_some() && late == std::env::var("PMI_RANK").ok() {
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
    let rt = match Runtime::from_env() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tf_plain: {e}");
            return std::process::ExitCode::from(3);
        }
    };
    if rt.rank() == 1 && std::env::var_os("TF_PLAIN_ALL_LIVE").is_none() {
        std::process::abort();
    }
    let outcome = rt
        .reduce(Sum(vec![1.0f32; 4]), Reduce::root(0).id("plain"))
        .and_then(|f| f.get());
    match outcome {
        Ok(_) => println!("tf_plain: rank {}: the reduction ended", rt.rank()),
        Err(e) => println!("tf_plain: rank {}: the reduction failed: {e}", rt.rank()),
    }
    let _ = rt.shutdown();
    std::process::ExitCode::SUCCESS
}
