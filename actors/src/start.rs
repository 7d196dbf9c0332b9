//! Starting a rank's actors on a thread of their own: the fold pool, the
//! performance counter, the replica store, on rank 0 the master and its
//! failure detector, the worker, and the router that connects them to the
//! transport and to the application's commands.

use crate::commands::Command;
use crate::config::Config;
use crate::notices::Notices;
use crate::outbox::Outbox;
use crate::perf::PerformanceCounter;
use crate::pool::FoldPool;
use crate::replica::{ReplicaDisk, ReplicaStore};
use crate::router::Router;
use crate::worker::{Worker, WorkerParts};
use crate::StartError;
use actix::prelude::*;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::SystemTime;
use taskfold_core::watch::{MasterWatch, Timing};
use taskfold_core::Rank;
use taskfold_transports::Transport;

/// What a rank's actors are started from.
pub(crate) struct Parts {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) config: Config,
    /// No rank of the job could write a replica file before this instant
    /// (rank 0's master tells a dead rank's disk copy from an earlier
    /// job's file by it).
    pub(crate) epoch: SystemTime,
    /// Keys of this rank's live reductions, shared with the runtime.
    pub(crate) live: Arc<Mutex<HashSet<u64>>>,
    pub(crate) notices: Notices,
    pub(crate) commands: flume::Receiver<Command>,
    /// This process's lifecycle and failure events, shared with the
    /// runtime.
    pub(crate) recovery: crate::lifecycle::Recovery,
    /// The global restart's state, shared with the runtime.
    pub(crate) rollbacks: crate::reinit::Rollbacks,
    /// The rank's checkpoint engine, for the router.
    pub(crate) checkpoints: crate::checkpoint::Inbox,
    /// This rank's membership view, shared with the runtime.
    pub(crate) view: crate::membership::View,
    /// Results kept for a replacement root, shared with the runtime.
    pub(crate) results: crate::results::Kept,
}

/// Starts the actors of rank `p.transport.rank()` on a thread of their own
/// (`taskfold-rt-<rank>`), on the transport's runtime if it hands one
/// over; returns once they run, or with the error that stopped them.
pub(crate) fn spawn(p: Parts) -> Result<JoinHandle<()>, StartError> {
    let rank = p.transport.rank().0;
    let (ready_tx, ready_rx) = flume::bounded::<Result<(), StartError>>(1);
    let driver = p.transport.driven().and_then(|d| d.take_driver());
    let thread = std::thread::Builder::new()
        .name(format!("taskfold-rt-{rank}"))
        .spawn(move || {
            let sys = match driver {
                Some(rt) => actix_rt::System::with_tokio_rt(move || rt),
                None => actix_rt::System::new(),
            };
            let started = sys.block_on(async move { actors(p) });
            let ok = started.is_ok();
            let _ = ready_tx.send(started);
            if ok {
                let _ = sys.run();
            }
        })
        .map_err(StartError::Thread)?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(StartError::Identity(
            "runtime thread died while starting".into(),
        )),
    }
}

/// Starts the actors on the current actix system.
fn actors(p: Parts) -> Result<(), StartError> {
    let rank = p.transport.rank().0;
    let c = &p.config;
    let pool = FoldPool::new(c.fold_threads, rank).map_err(StartError::Thread)?;
    let out = Outbox::new(p.transport.clone(), p.view.clone());
    let perf = PerformanceCounter::new(rank).start();
    let disk = Arc::new(
        ReplicaDisk::open(c.replica_dir.as_deref(), rank).map_err(StartError::ReplicaDir)?,
    );
    let store = ReplicaStore::new(rank, out.clone(), disk.clone(), c.replica_limit)
        .with_further_result_copies(c.further_result_copies())
        .start();
    // The rank that ran the master when this process joined: rank 0's
    // first process, or a standby after a takeover (a replacement of rank
    // 0 then joins as any rank).
    let hosts = p.transport.master_rank().0 == rank;
    let (master, detector) = match hosts {
        true => {
            let (m, d) = crate::master::spawn::first_master(
                &p.config,
                p.notices.get(),
                &out,
                &disk,
                p.epoch,
            );
            (Some(m), Some(d))
        }
        false => (None, None),
    };
    let worker = Worker::new(WorkerParts {
        rank: Rank(rank),
        out: out.clone(),
        pool,
        perf: perf.clone(),
        store: store.clone(),
        disk: disk.clone(),
        hooks: crate::hooks::of(c),
        live: p.live.clone(),
        results: p.results.clone(),
        since: p.epoch,
    })
    .start();
    // Every rank but the master's own watches its master.
    let watch = (!hosts).then(|| {
        let timing = Timing {
            period: c.ping_period,
            timeout: c.failure_timeout,
        };
        (MasterWatch::new(std::time::Instant::now()), timing)
    });
    let events = p.transport.events();
    let spare = crate::master::spawn::Spare {
        config: p.config.clone(),
        epoch: p.epoch,
        disk: disk.clone(),
    };
    let (commands, notices, recovery) = (p.commands, p.notices, p.recovery);
    let (rollbacks, checkpoints) = (p.rollbacks, p.checkpoints);
    let spread = crate::spread::Spreader::new(Rank(rank), out.clone(), crate::hooks::of(c)).start();
    Router::create(move |ctx| {
        ctx.add_stream(events.into_stream());
        ctx.add_stream(commands.into_stream());
        Router {
            rank: Rank(rank),
            worker,
            master,
            perf,
            store,
            detector,
            out,
            notices,
            watch,
            standby: crate::router::standby::Standby::new(spare),
            recovery,
            rollbacks,
            checkpoints,
            spread,
        }
    });
    Ok(())
}
