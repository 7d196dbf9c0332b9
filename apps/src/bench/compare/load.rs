//! Scenario d's background load: one CPU-bound process per core running a
//! migration-like kernel beside the ranks, for both sides alike.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of one load process (internal).
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// Stop by itself after this many seconds (the harness kills it sooner).
    #[arg(long, default_value_t = 600)]
    pub seconds: u64,
}

/// Runs the kernel until the deadline.
pub fn main(a: LoadArgs) -> std::process::ExitCode {
    let sum = taskfold_benches::delay::load_until(Instant::now() + Duration::from_secs(a.seconds));
    std::hint::black_box(sum);
    std::process::ExitCode::SUCCESS
}

/// The running load processes; killed when dropped.
pub struct Load(Vec<Child>);

impl Load {
    /// Starts `n` load processes of `exe`, each bounded by `limit`.
    pub fn start(exe: &Path, n: usize, limit: Duration) -> std::io::Result<Load> {
        let mut children = Vec::new();
        for _ in 0..n {
            let child = Command::new(exe)
                .args([
                    "bench-load",
                    "--seconds",
                    &limit.as_secs().max(1).to_string(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn();
            match child {
                Ok(c) => children.push(c),
                Err(e) => {
                    drop(Load(children));
                    return Err(e);
                }
            }
        }
        Ok(Load(children))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
