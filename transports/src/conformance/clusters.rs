//! Jobs to run the cases on ([`Cluster`]s of every transport) and the
//! bounded waits the cases use.

use crate::tcp::{MasterAddr, TcpConfig, TcpTransport};
use crate::{Event, Rank, Transport};
use bytes::Bytes;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold_core::auth::JobAuth;

/// The longest any single step of a case may take.
pub const WAIT: Duration = Duration::from_secs(20);

/// A running job: one transport per rank, and a way to kill a rank.
pub struct Cluster {
    /// The transports, indexed by rank.
    pub transports: Vec<Arc<dyn Transport>>,
    /// Simulates the death of a rank (no goodbye; its peers must notice).
    pub crash: Box<dyn Fn(Rank) + Send + Sync>,
}

/// Starts a job of `n` ranks.
pub type Factory<'a> = &'a dyn Fn(u32) -> Cluster;

/// `n` loopback ranks; a crash is [`crate::loopback::LoopbackHub::kill`].
pub fn loopback_cluster(n: u32) -> Cluster {
    let (hub, ts) = crate::loopback::LoopbackHub::new(n);
    Cluster {
        transports: ts.into_iter().map(|t| t as Arc<dyn Transport>).collect(),
        crash: Box::new(move |r| hub.kill(r)),
    }
}

/// `n` TCP ranks in this process on 127.0.0.1; a crash is
/// [`TcpTransport::abort`].
pub fn tcp_cluster(n: u32) -> Cluster {
    tcp_cluster_with(n, &|_| {})
}

/// Like [`tcp_cluster`], with same-node loans turned off: every get is
/// streamed over the socket, as between nodes.
pub fn tcp_streamed_cluster(n: u32) -> Cluster {
    tcp_cluster_with(n, &|c| c.loans = false)
}

/// TCP ranks that seal every frame (`TcpConfig::integrity`,
/// `TASKFOLD_INTEGRITY=mac`), run by callers' threads as the runtime runs
/// them, every get streamed (so that every byte crosses a socket).
pub fn tcp_sealed_cluster(n: u32) -> Cluster {
    let ts = tcp_ranks(n, &|c| {
        c.integrity = true;
        c.loans = false;
    });
    cluster_of(ts, TcpTransport::abort)
}

/// TCP ranks with no threads of their own (`threads: 0`), each run by a
/// thread of this test (as the runtime's actors run theirs), forever.
pub fn tcp_driven_cluster(n: u32) -> Cluster {
    let ts = tcp_ranks(n, &|c| c.threads = 0);
    for t in &ts {
        let rt = t
            .driven()
            .and_then(|d| d.take_driver())
            .expect("a transport with no threads has a driver");
        std::thread::Builder::new()
            .name("tcp-driver".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))
            .expect("spawning a driver thread");
    }
    cluster_of(ts, TcpTransport::abort)
}

fn tcp_cluster_with(n: u32, tweak: &(dyn Fn(&mut TcpConfig) + Sync)) -> Cluster {
    cluster_of(tcp_ranks(n, tweak), TcpTransport::abort)
}

/// A cluster of `ts`, where a crash of rank `r` is `abort(ts[r])`.
fn cluster_of<T: Transport>(ts: Vec<Arc<T>>, abort: fn(&T)) -> Cluster {
    let killers = ts.clone();
    Cluster {
        transports: ts.into_iter().map(|t| t as Arc<dyn Transport>).collect(),
        crash: Box::new(move |r| {
            if let Some(t) = killers.get(r.0 as usize) {
                abort(t);
            }
        }),
    }
}

/// `n` libfabric ranks of `provider` in this process (bootstrapping over
/// TCP on 127.0.0.1); a crash is
/// [`crate::libfabric::LibfabricTransport::abort`].
#[cfg(feature = "libfabric")]
pub fn libfabric_cluster(n: u32, provider: &str) -> Cluster {
    cluster_of(
        libfabric_ranks(n, provider, &|_| {}),
        crate::libfabric::LibfabricTransport::abort,
    )
}

/// Starts `n` libfabric ranks of `provider`, one thread each, like
/// [`tcp_ranks`]; `tweak` adjusts each rank's config.
#[cfg(feature = "libfabric")]
pub fn libfabric_ranks(
    n: u32,
    provider: &str,
    tweak: &(dyn Fn(&mut crate::libfabric::LibfabricConfig) + Sync),
) -> Vec<Arc<crate::libfabric::LibfabricTransport>> {
    use crate::libfabric::{LibfabricConfig, LibfabricTransport};
    start_ranks(n, provider, &|tcp| {
        let mut cfg = LibfabricConfig::new(tcp, Some(provider.to_string()));
        tweak(&mut cfg);
        LibfabricTransport::start(cfg)
    })
}

/// Starts `n` ranks with `start(tcp)`, one thread each, `tcp` being each
/// rank's TCP configuration: a fresh job id and a fresh job key, the
/// ranks meeting through a rendezvous file in a fresh temporary
/// directory, [`WAIT`] to connect. Panics naming `what` if one cannot
/// start.
fn start_ranks<T, E>(
    n: u32,
    what: &str,
    start: &(dyn Fn(TcpConfig) -> Result<Arc<T>, E> + Sync),
) -> Vec<Arc<T>>
where
    T: Send + Sync,
    E: std::fmt::Display + Send,
{
    let dir = fresh_dir();
    let master = MasterAddr::Rendezvous(dir.join("master"));
    let job = fresh_job();
    let key = crate::auth::fresh_key().expect("a job key");
    let ts = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let mut tcp = TcpConfig::new(r, n, job, master.clone());
                tcp.auth = JobAuth::Key(key.clone());
                tcp.connect_timeout = WAIT;
                s.spawn(move || start(tcp))
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(r, h)| match h.join() {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => panic!("rank {r} failed to start over {what}: {e}"),
                Err(_) => panic!("rank {r} panicked while starting"),
            })
            .collect()
    });
    let _ = std::fs::remove_dir_all(&dir);
    ts
}

/// A job id no other job of this process uses.
pub fn fresh_job() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (u64::from(std::process::id()) << 32) ^ nanos ^ NEXT.fetch_add(1, Ordering::Relaxed) << 48
}

/// A fresh empty private directory ([`crate::private::fresh_dir`]).
pub fn fresh_dir() -> std::path::PathBuf {
    crate::private::fresh_dir("taskfold-test-").expect("creating a temporary directory")
}

/// Starts `n` TCP ranks, one thread each, meeting through a rendezvous file
/// in a fresh temporary directory, with a fresh job key; `tweak` adjusts
/// each rank's config (a test that needs to know the key sets its own).
pub fn tcp_ranks(n: u32, tweak: &(dyn Fn(&mut TcpConfig) + Sync)) -> Vec<Arc<TcpTransport>> {
    start_ranks(n, "tcp", &|mut cfg| {
        tweak(&mut cfg);
        TcpTransport::start(cfg)
    })
}

/// Runs a future to completion on a thread of its own (with the `futures`
/// executor: not tokio), failing if it takes longer than [`WAIT`].
pub fn wait<T: Send + 'static>(what: &str, fut: impl Future<Output = T> + Send + 'static) -> T {
    let (tx, rx) = flume::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(futures::executor::block_on(fut));
    });
    match rx.recv_timeout(WAIT) {
        Ok(v) => v,
        Err(_) => panic!("{what}: no result within {WAIT:?}"),
    }
}

/// The next event of `t`, failing after [`WAIT`].
pub fn next_event(t: &dyn Transport, what: &str) -> Event {
    match t.events().recv_timeout(WAIT) {
        Ok(e) => e,
        Err(_) => panic!(
            "rank {}: no event within {WAIT:?} while waiting for {what}",
            t.rank().0
        ),
    }
}

/// Every event `t` receives during `d`.
pub fn events_during(t: &dyn Transport, d: Duration) -> Vec<Event> {
    let end = Instant::now() + d;
    let rx = t.events();
    let mut out = Vec::new();
    while let Ok(e) = rx.recv_deadline(end) {
        out.push(e);
    }
    out
}

/// Waits for one message on `t` and returns it; any other event fails.
pub fn expect_message(t: &dyn Transport, what: &str) -> (Rank, Bytes) {
    match next_event(t, what) {
        Event::Message { from, frame } => (from, frame),
        e => panic!("rank {}: expected {what}, got {e:?}", t.rank().0),
    }
}
