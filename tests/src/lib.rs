//! Support for taskfold's multi-process tests: locating the binaries,
//! running jobs with bounded time, sending signals.
//!
//! The tests themselves live in `tests/`; the rank program they launch is
//! `src/bin/tf_check.rs`.

pub mod faults;
pub mod launchers;
pub mod netns;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The total of the counter `name` (over its labels) in a debugging
/// recorder's snapshot: how a test reads the runtime's metrics.
pub fn counter(snap: &metrics_util::debugging::Snapshotter, name: &str) -> u64 {
    use metrics_util::debugging::DebugValue;
    snap.snapshot()
        .into_vec()
        .iter()
        .filter(|(k, ..)| k.key().name() == name)
        .map(|(.., v)| match v {
            DebugValue::Counter(c) => *c,
            _ => 0,
        })
        .sum()
}

/// The `taskfold` binary of this workspace, built once per test process
/// (a test run builds this crate's binaries, not other crates') as a user
/// builds it: without the test hooks. Only that binary is built, so the
/// programs this crate's tests run with hooks are left as they are.
pub fn taskfold_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| built("taskfold-cli", "taskfold", &[]))
        .clone()
}

/// The `psdm` binary of this workspace, built once per test process, with
/// the test hooks (its own tests hold its ranks with them).
pub fn psdm_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        built(
            "taskfold-psdm",
            "psdm",
            &["--features", "taskfold/test-hooks"],
        )
    })
    .clone()
}

/// Builds binary `bin` of `package` into this test's target directory.
fn built(package: &str, bin: &str, extra: &[&str]) -> PathBuf {
    let path = target_dir().join(format!("{bin}{}", std::env::consts::EXE_SUFFIX));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", package, "--bin", bin])
        .args(extra)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building {bin} failed");
    assert!(path.exists(), "{} missing after build", path.display());
    path
}

/// The directory holding this test's binaries (`target/<profile>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// Runs `cmd` to completion, killing it after `limit`. Returns its output,
/// or panics with what it printed if it did not finish in time.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn");
    wait_bounded(child, limit)
}

/// Waits for `child` at most `limit`, then kills it and panics.
pub fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    // Drained as it comes: a child blocked on a full pipe would never end.
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|o| Box::new(o) as _));
    let stderr = drain(child.stderr.take().map(|e| Box::new(e) as _));
    let deadline = Instant::now() + limit;
    let (status, late) = loop {
        match child.try_wait().expect("try_wait") {
            Some(status) => break (status, false),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                break (child.wait().expect("wait"), true);
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let out = Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    if late {
        panic!(
            "command did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

pub use rustix::process::Signal;

/// Sends `signal` to `pid`.
pub fn signal(pid: i32, signal: Signal) -> std::io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| std::io::Error::other(format!("not a process id: {pid}")))?;
    rustix::process::kill_process(pid, signal).map_err(std::io::Error::from)
}

/// Polls for a file holding a pid (written by `tf_check --pid-dir`).
pub fn wait_for_pid(path: &Path, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(pid) = s.trim().parse() {
                return pid;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no pid file at {} within {limit:?}", path.display());
}

/// A uniform instant in `[0, span)` drawn from `seed` (splitmix64): the
/// failure instants of the multi-process tests, reproducible by seed.
pub fn drawn_instant(seed: u64, span: Duration) -> Duration {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    span.mul_f64((z >> 11) as f64 / (1u64 << 53) as f64)
}

/// A fresh job key, as `TASKFOLD_JOB_KEY` takes it: what a user gives the
/// ranks of a job started by `mpiexec` or `srun` (`taskfold run` makes
/// its own).
pub fn job_key() -> String {
    taskfold_transports::auth::fresh_key()
        .expect("a job key")
        .to_hex()
}

/// Writes a fresh job key to `dir/job.key`, readable by its owner alone,
/// as `TASKFOLD_JOB_KEY_FILE` takes it; returns the file's path.
pub fn job_key_file(dir: &Path) -> PathBuf {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("job.key");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("creating the key file");
    writeln!(f, "{}", job_key()).expect("writing the key file");
    path
}

/// Text of an output, both streams.
pub fn text(out: &Output) -> String {
    format!(
        "status: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
