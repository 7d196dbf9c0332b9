//! Simulated nodes in tests: whether network namespaces can be made here,
//! jobs on them, and which namespaces a launcher left.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// True if this machine can make network namespaces; otherwise says why
/// `test` is skipped, or fails in CI (`CI` set), where it must run.
pub fn namespaces_or_skip(test: &str) -> bool {
    static PROBES: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "tf-probe{}x{}",
        std::process::id(),
        PROBES.fetch_add(1, Ordering::Relaxed)
    );
    let made = Command::new("ip").args(["netns", "add", &name]).output();
    let why = match made {
        Ok(out) if out.status.success() => {
            let _ = Command::new("ip").args(["netns", "delete", &name]).output();
            return true;
        }
        Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
        Err(e) => format!("cannot run `ip`: {e}"),
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the multi-node tests (as root, with iproute2): `ip netns add` failed: {why}"
    );
    // Written past the test harness's capture, so that the skip shows.
    let _ = writeln!(
        std::io::stderr(),
        "skipping {test}: cannot make network namespaces here ({why}); run as root"
    );
    false
}

/// The namespaces the launcher `pid` made that still have names.
pub fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("tf-{pid}-");
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// `taskfold run --sim-nodes NODES -n RANKS [EXTRA] -- PROGRAM ARGS`.
pub fn launch(nodes: u32, ranks: u32, extra: &[&str], program: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(crate::taskfold_bin());
    cmd.args([
        "run",
        "--sim-nodes",
        &nodes.to_string(),
        "-n",
        &ranks.to_string(),
    ])
    .args(["--timeout", "200s"])
    .args(extra)
    .arg("--")
    .arg(program)
    .args(args);
    cmd
}

/// Starts `cmd` with its output piped.
pub fn start(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().expect("spawn taskfold")
}
