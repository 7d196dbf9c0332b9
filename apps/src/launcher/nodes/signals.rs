//! SIGINT and SIGTERM while a job runs on simulated nodes: the launcher
//! must not die with its namespaces in place. A thread waits for either;
//! when one comes, it asks every process in the job's node namespaces to
//! end (SIGTERM), kills those still there after [`GRACE`] (SIGKILL), and
//! notes the signal ([`Interrupts::caught`]); until the thread is
//! stopped, it kills any process that appears there. The launcher's watch then
//! sees its ranks end as usual, and the cluster's guard removes the
//! namespaces.

use super::ip;
use rustix::process::Signal;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, SignalKind};

/// How long the ranks have to end after SIGTERM before they are killed.
const GRACE: Duration = Duration::from_secs(3);

/// After a signal, how often the nodes are swept for processes to kill.
const RESWEEP: Duration = Duration::from_millis(100);

/// The thread that waits for SIGINT and SIGTERM.
#[derive(Debug)]
pub(super) struct Interrupts {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    caught: Arc<OnceLock<&'static str>>,
}

impl Interrupts {
    /// Starts waiting; a signal stops every process in `namespaces`.
    pub(super) fn start(namespaces: Vec<String>) -> std::io::Result<Interrupts> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let (mut int, mut term) = {
            let _guard = rt.enter();
            (
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
            )
        };
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let caught = Arc::new(OnceLock::new());
        let noted = caught.clone();
        let thread = std::thread::Builder::new()
            .name("taskfold-signals".into())
            .spawn(move || {
                let got = rt.block_on(async {
                    tokio::select! {
                        _ = int.recv() => Some("SIGINT"),
                        _ = term.recv() => Some("SIGTERM"),
                        _ = &mut rx => None,
                    }
                });
                let Some(name) = got else { return };
                let _ = noted.set(name);
                eprintln!("taskfold run: {name} received: stopping the ranks, removing the nodes");
                stop_all(&namespaces);
                // A rank started while the others were being stopped is
                // killed too, until the cluster is removed.
                rt.block_on(async {
                    loop {
                        tokio::select! {
                            _ = &mut rx => break,
                            _ = tokio::time::sleep(RESWEEP) => {
                                signal_all(&namespaces, Signal::KILL);
                            }
                        }
                    }
                });
            })?;
        Ok(Interrupts {
            stop: Some(tx),
            thread: Some(thread),
            caught,
        })
    }

    /// The signal that stopped the job, if one did.
    pub(super) fn caught(&self) -> Option<&'static str> {
        self.caught.get().copied()
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends `signal` to every process in `namespaces`; how many there were.
pub(super) fn signal_all(namespaces: &[String], signal: Signal) -> usize {
    let mut n = 0;
    for ns in namespaces {
        for pid in ip::pids_in(ns).unwrap_or_default() {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                n += usize::from(rustix::process::kill_process(pid, signal).is_ok());
            }
        }
    }
    n
}

/// SIGTERM to every process in `namespaces`, SIGKILL to those left after
/// [`GRACE`].
fn stop_all(namespaces: &[String]) {
    if signal_all(namespaces, Signal::TERM) == 0 {
        return;
    }
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let left: usize = namespaces
            .iter()
            .map(|ns| ip::pids_in(ns).map_or(0, |p| p.len()))
            .sum();
        if left == 0 {
            return;
        }
    }
    signal_all(namespaces, Signal::KILL);
}
