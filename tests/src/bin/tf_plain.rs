//! A rank program that installs no `tracing` subscriber, as an
//! application might: rank 1 aborts once the job is up, and rank 0 (the
//! master and the root) reduces without it. The runtime's own logger must
//! say on stderr that rank 1 was declared failed (`TASKFOLD_LOG=off`
//! silences it). Rank 0 prints how its reduction ended and exits 0. With
//! `TF_PLAIN_ALL_LIVE` set, no rank aborts. `TF_PLAIN_LATE=R` makes the
//! process of launcher rank `R` (`PMI_RANK`) start late (3 s, or
//! `TF_PLAIN_LATE_MS`), holding the job's start open. A process that ends
//! as a spare the job did not need says so and exits 0.

use taskfold::{Reduce, Runtime, Sum};

fn main() -> std::process::ExitCode {
    let late = std::env::var("TF_PLAIN_LATE").ok();
    if late.is_some() && late == std::env::var("PMI_RANK").ok() {
        let ms = std::env::var("TF_PLAIN_LATE_MS")
            .ok()
            .and_then(|v| v.parse().ok());
        std::thread::sleep(std::time::Duration::from_millis(ms.unwrap_or(3000)));
    }
    let rt = match Runtime::from_env() {
        Ok(rt) => rt,
        Err(taskfold::StartError::Spare) => {
            eprintln!("tf_plain: a spare the job did not need");
            return std::process::ExitCode::SUCCESS;
        }
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
