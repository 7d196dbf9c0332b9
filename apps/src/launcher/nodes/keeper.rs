//! A node's keeper: a shell in the node's network namespace and in a mount
//! namespace of its own with a private tmpfs on `/dev/shm`. The node's
//! ranks join both namespaces (`nsenter --target <keeper>`), so that they
//! share that `/dev/shm` with each other and with no other node.
//!
//! The keeper waits on its standard input, a pipe from the launcher: it
//! ends when the launcher closes it ([`Keeper::stop`]) or dies, however it
//! dies, so it never outlives its job. Its mount namespace (and with it
//! the tmpfs) ends with the last of the keeper and the node's ranks.

use super::NodesError;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// How long the keeper may take to mount its tmpfs.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// What the keeper runs (`ip netns exec` has given it a mount namespace of
/// its own, a slave of ours: what it mounts stays in it).
const SCRIPT: &str =
    "mount -t tmpfs -o mode=1777 taskfold-node-shm /dev/shm && echo ready && read _";

/// A running keeper.
#[derive(Debug)]
pub(super) struct Keeper {
    child: Child,
    /// Held open: the keeper ends when it closes.
    stdin: Option<ChildStdin>,
}

impl Keeper {
    /// Starts the keeper of the node whose network namespace is `netns`;
    /// returns once its `/dev/shm` is mounted.
    pub(super) fn start(netns: &str) -> Result<Keeper, NodesError> {
        let failed = |detail: String| NodesError::Tool {
            command: format!("ip netns exec {netns} sh -c '{SCRIPT}'"),
            detail,
        };
        let mut child = Command::new(super::tool("ip"))
            .args(["netns", "exec", netns, "sh", "-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failed(e.to_string()))?;
        let stdin = child.stdin.take();
        let mut keeper = Keeper { child, stdin };
        match keeper.wait_ready() {
            Ok(()) => Ok(keeper),
            Err(detail) => {
                keeper.stop();
                let mut err = String::new();
                if let Some(mut e) = keeper.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                Err(failed(format!("{detail} {}", err.trim())))
            }
        }
    }

    /// Waits (at most [`READY_WITHIN`]) for the keeper's `ready` line.
    fn wait_ready(&mut self) -> Result<(), String> {
        let out = self.child.stdout.take().ok_or("no output pipe")?;
        let (tx, rx) = std::sync::mpsc::channel();
        // Ends at the keeper's first line or end of output, which
        // `stop` brings if the wait below gives up.
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = tx.send(BufReader::new(out).read_line(&mut line).map(|_| line));
        });
        match rx.recv_timeout(READY_WITHIN) {
            Ok(Ok(line)) if line.trim() == "ready" => Ok(()),
            Ok(Ok(_)) => Err("the keeper ended before mounting /dev/shm:".into()),
            Ok(Err(e)) => Err(format!("reading the keeper's output: {e}")),
            Err(_) => Err(format!("no /dev/shm mounted within {READY_WITHIN:?}")),
        }
    }

    /// The keeper's pid: its namespaces are `/proc/<pid>/ns/{net,mnt}`.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ends the keeper and reaps it.
    pub(super) fn stop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop();
    }
}
