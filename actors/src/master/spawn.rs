//! Starting a master and its failure detector: rank 0's when the job
//! starts ([`first_master`]), a standby's when it takes over from a dead
//! master ([`standby_master`], from the [`Spare`] parts every rank keeps).

use super::Master;
use crate::config::Config;
use crate::detector::FailureDetector;
use crate::outbox::Outbox;
use crate::replica::ReplicaDisk;
use actix::prelude::*;
use std::sync::Arc;
use std::time::SystemTime;
use taskfold_core::Rank;
use taskfold_transports::board::Board;

/// What a standby starts a master from, should it take over.
pub(crate) struct Spare {
    pub(crate) config: Config,
    pub(crate) epoch: SystemTime,
    pub(crate) disk: Arc<ReplicaDisk>,
}

/// A standby's master, taking over from `lost` with `dead` the ranks known
/// dead before, and its failure detector.
pub(crate) fn standby_master(
    s: &Spare,
    out: &Outbox,
    lost: Rank,
    dead: &taskfold_core::RankSet,
) -> (Addr<Master>, Addr<FailureDetector>) {
    let ((ctx, mut m), d) = master_and_detector(&s.config, out);
    if let (Some(root), Some(own)) = (&s.config.replica_dir, s.disk.shared_dir()) {
        m.enable_disk_inference(root.clone(), std::path::Path::new(&own), s.epoch);
    }
    m.set_keep_results(s.config.keeps_results());
    m.take_over(lost, dead);
    (ctx.run(m), d)
}

/// A master (not started: its context and itself) and its failure
/// detector (started), each knowing the other.
fn master_and_detector(
    c: &Config,
    out: &Outbox,
) -> ((Context<Master>, Master), Addr<FailureDetector>) {
    let size = out.transport().size();
    // The detector needs the master's address and the master the
    // detector's: the master's context comes first.
    let master_ctx = Context::<Master>::new();
    let detector = FailureDetector::new(
        size,
        out.clone(),
        master_ctx.address().recipient(),
        c.ping_period,
        c.failure_timeout,
    )
    .start();
    let mut m = Master::new(size, out.clone(), c.task_log_limit);
    m.set_max_reductions(c.max_reductions);
    m.set_gather_max(c.gather_max);
    if out.transport().replaces() {
        // Replacements and spares find whichever rank runs the master (a
        // standby rewrites the rendezvous file; spares look through the
        // table).
        m.set_respawn(&c.respawn);
    }
    m.set_detector(detector.clone());
    ((master_ctx, m), detector)
}

/// Rank 0's master and its failure detector, each knowing the other;
/// `board`: the notice board the master posts on, if the rank has one;
/// `epoch`: no replica file of this job was written before it.
pub(crate) fn first_master(
    c: &Config,
    board: Option<&Arc<Board>>,
    out: &Outbox,
    disk: &ReplicaDisk,
    epoch: SystemTime,
) -> (Addr<Master>, Addr<FailureDetector>) {
    let ((master_ctx, mut m), detector) = master_and_detector(c, out);
    m.set_keep_results(c.keeps_results());
    if let Some(b) = board {
        m.set_board(b.clone());
    }
    if let (Some(root), Some(own)) = (&c.replica_dir, disk.shared_dir()) {
        // Every rank's directory is under the same root (the layout of
        // `ReplicaDisk::open`).
        m.enable_disk_inference(root.clone(), std::path::Path::new(&own), epoch);
    }
    (master_ctx.run(m), detector)
}
