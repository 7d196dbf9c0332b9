//! The master actor (rank 0): membership, one queue + scheduler per live
//! reduction, completion notices, barriers (DESIGN.md §1, §3).
//!
//! Only control messages reach the master: ready messages in, tasks and
//! completions out. Data moves between workers.
//!
//! What a crash of the master loses: everything here (queues, the task log,
//! the performance table, the barriers in progress). Every rank then fails
//! its live reductions and barriers with
//! [`taskfold_core::ReduceError::MasterLost`]; the master is not replicated.

mod barrier;
mod handlers;
mod infer;
mod state;
mod stats;

pub use stats::{MasterStats, TaskRecord};

use crate::outbox::Outbox;
use actix::prelude::*;
use state::Reduction;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::SystemTime;
use taskfold_core::perf::PerfTable;
use taskfold_core::schedule::Source;
use taskfold_core::wire::DataSource;
use taskfold_core::{wire::Msg, Rank, ReduceError};

pub(crate) use barrier::BarrierIn;
pub(crate) use handlers::{
    ExitReport, FinalizeIn, GetStats, RankDown, ReadyIn, ReplicatedIn, TaskFailedIn,
};

/// Reductions that ended in an error while some members had not joined yet:
/// they get the error when they join. Bounded so it cannot grow forever.
const ENDED_LIMIT: usize = 16_384;

/// The master of a job.
pub struct Master {
    size: u32,
    out: Outbox,
    reductions: HashMap<u64, Reduction>,
    ended: HashMap<u64, (ReduceError, HashSet<u32>)>,
    ended_order: std::collections::VecDeque<u64>,
    /// Replica notices for reductions the master has not seen yet.
    early_replicas: HashMap<u64, Vec<(u32, u32, bool)>>,
    /// This actor's address (for its own timers).
    me: Option<Addr<Master>>,
    dead: HashSet<u32>,
    /// When each dead rank was declared failed.
    dead_at: HashMap<u32, SystemTime>,
    /// Finding the disk copies of ranks that died before announcing them
    /// (only with a shared replica directory).
    infer: Option<infer::DiskInference>,
    finalized: HashSet<u32>,
    /// Barrier number → the ranks that reached it, each with whether it
    /// reads the release on the board (see `barrier`).
    barriers: std::collections::BTreeMap<u64, std::collections::BTreeMap<u32, bool>>,
    perf: PerfTable,
    stats: MasterStats,
    task_log_limit: usize,
    detector: Option<Addr<crate::detector::FailureDetector>>,
    /// The notice board where released barriers are posted, if any.
    board: Option<std::sync::Arc<taskfold_transports::board::Board>>,
}

impl Master {
    /// Connects the failure detector (it needs the master's address first).
    pub(crate) fn set_detector(&mut self, d: Addr<crate::detector::FailureDetector>) {
        self.detector = Some(d);
    }

    /// Posts released barriers on `board` too; every other rank is told
    /// where it lies when the master starts.
    pub(crate) fn set_board(&mut self, board: std::sync::Arc<taskfold_transports::board::Board>) {
        self.board = Some(board);
    }

    /// Lets the master infer the disk copies of ranks that died before
    /// announcing them (see `infer`): every rank's directory is
    /// `<root>/rank-<r>`, and no file of this job was written before
    /// `since` (rank 0's start). `own_dir` (rank 0's directory) holds the
    /// probe of the file system's clock: if its timestamps run ahead of this
    /// process's clock, stale files could pass the guard, so nothing is
    /// inferred.
    pub(crate) fn enable_disk_inference(
        &mut self,
        root: PathBuf,
        own_dir: &std::path::Path,
        since: SystemTime,
    ) {
        match crate::replica::disk::clock_lead(own_dir) {
            Ok(lead) if lead.is_zero() => {
                self.infer = Some(infer::DiskInference::new(root, since));
            }
            Ok(lead) => tracing::warn!(
                dir = %own_dir.display(),
                ?lead,
                "the replica directory's clock runs ahead of this node's: \
                 disk copies of ranks that die before announcing them will not be inferred"
            ),
            Err(e) => tracing::warn!(
                dir = %own_dir.display(),
                error = %e,
                "cannot probe the replica directory's clock: \
                 disk copies of ranks that die before announcing them will not be inferred"
            ),
        }
    }

    /// Records how reduction `r` (key `key`) ended, for the stale-file guard.
    fn note_end(&mut self, key: u64, r: &Reduction) {
        if let Some(inf) = &mut self.infer {
            inf.ends
                .ended(key, SystemTime::now(), infer::unannounced(r));
        }
    }

    /// Looks for the unannounced disk copies of `key`'s dead members.
    fn infer_disks(&mut self, key: u64) {
        let (Some(inf), Some(r)) = (&self.infer, self.reductions.get_mut(&key)) else {
            return;
        };
        let found = inf.infer(key, r, &self.dead, &self.dead_at);
        self.stats.disk_copies_inferred += found.len() as u64;
    }

    pub(crate) fn new(size: u32, out: Outbox, task_log_limit: usize) -> Self {
        Master {
            size,
            out,
            reductions: HashMap::new(),
            ended: HashMap::new(),
            ended_order: Default::default(),
            early_replicas: HashMap::new(),
            me: None,
            dead: HashSet::new(),
            dead_at: HashMap::new(),
            infer: None,
            finalized: HashSet::new(),
            barriers: Default::default(),
            perf: PerfTable::new(),
            stats: MasterStats::new(size),
            task_log_limit,
            detector: None,
            board: None,
        }
    }

    /// Sends to a rank, counting the master's outgoing load. A failed send is
    /// logged: the link-down event that follows declares the rank failed.
    fn send(&mut self, to: Rank, msg: &Msg) -> bool {
        if self.dead.contains(&to.0) {
            return false;
        }
        match self.out.send(to, msg) {
            Ok(len) => {
                self.stats.msgs_out += 1;
                self.stats.bytes_out += len as u64;
                metrics::counter!(crate::metrics::MASTER_MSGS_OUT).increment(1);
                metrics::counter!(crate::metrics::MASTER_BYTES_OUT).increment(len as u64);
                true
            }
            Err(e) => {
                tracing::warn!(%to, error = %e, "master could not send");
                false
            }
        }
    }

    fn count_in(&mut self, bytes: usize) {
        self.stats.msgs_in += 1;
        self.stats.bytes_in += bytes as u64;
        metrics::counter!(crate::metrics::MASTER_MSGS_IN).increment(1);
        metrics::counter!(crate::metrics::MASTER_BYTES_IN).increment(bytes as u64);
    }

    /// Ends reduction `key` with `error` on every member that joined; members
    /// that join later get the error then.
    fn fail(&mut self, key: u64, error: ReduceError) {
        let Some(r) = self.reductions.remove(&key) else {
            return;
        };
        self.note_end(key, &r);
        tracing::warn!(id = %r.id, %error, "reduction failed");
        if let ReduceError::RanksLost { ranks, .. } = &error {
            // Say which copies were missing, for the post-mortem.
            for &lost in ranks {
                let Some(i) = r.group.index_of(Rank(lost)) else {
                    continue;
                };
                tracing::warn!(
                    id = %r.id,
                    rank = lost,
                    buddy_copy = ?r.replicas.get(&i),
                    disk_copy = ?r.disks.get(&i),
                    "original lost: no live replica and no readable disk copy"
                );
            }
        }
        self.stats.reductions_failed += 1;
        metrics::counter!(crate::metrics::REDUCTIONS_FAILED).increment(1);
        let msg = Msg::Complete {
            key,
            error: Some(error.clone()),
        };
        let mut pending = HashSet::new();
        for (i, &rank) in r.group.members().iter().enumerate() {
            if r.schedule.missing().any(|m| m == i) {
                if !self.dead.contains(&rank.0) {
                    pending.insert(rank.0);
                }
            } else {
                self.send(rank, &msg);
            }
        }
        if !pending.is_empty() {
            self.remember_ended(key, error, pending);
        }
        self.update_queue_gauge();
    }

    fn remember_ended(&mut self, key: u64, error: ReduceError, pending: HashSet<u32>) {
        if self.ended.len() >= ENDED_LIMIT {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
        self.ended.insert(key, (error, pending));
        self.ended_order.push_back(key);
    }

    /// Hands out every task the queue of `key` allows, and completes it when
    /// the root holds every original.
    fn drive(&mut self, key: u64) {
        if self
            .reductions
            .get(&key)
            .is_some_and(|r| !r.awaiting.is_empty())
        {
            // Held: a dead member's buddy has yet to say whether it keeps
            // that member's original (see `Reduction::awaiting`).
            return;
        }
        let mut unreachable_receiver = None;
        loop {
            let Some(r) = self.reductions.get_mut(&key) else {
                return;
            };
            let perf = &self.perf;
            let group = &r.group;
            let step = r
                .schedule
                .next(|a, b| perf.prefers(group.rank_at(a), group.rank_at(b)));
            match step {
                None => break,
                Some(taskfold_core::schedule::Step::Complete) => {
                    let r = self.reductions.remove(&key).expect("present above");
                    self.note_end(key, &r);
                    self.stats.reductions_completed += 1;
                    metrics::counter!(crate::metrics::REDUCTIONS_COMPLETED).increment(1);
                    metrics::histogram!(crate::metrics::REDUCTION_SECONDS)
                        .record(r.started.elapsed().as_secs_f64());
                    // The board first: the members on this node waiting for
                    // it wake at once (their futures take it there), before
                    // the notices below wake the rest.
                    if let Some(b) = &self.board {
                        b.post_complete(key);
                    }
                    let msg = Msg::Complete { key, error: None };
                    let own = self.out.transport().rank();
                    for rank in completion_order(r.group.members(), r.root, own) {
                        self.send(rank, &msg);
                    }
                    break;
                }
                Some(taskfold_core::schedule::Step::Task(a)) => {
                    let receiver = r.group.rank_at(a.receiver.index);
                    let provider = r.group.rank_at(a.provider.index);
                    let source = match a.source {
                        Source::Data => DataSource::Data,
                        Source::Original => DataSource::Original,
                        Source::Replica => match (
                            r.replicas.get(&a.provider.index),
                            r.disks.get(&a.provider.index),
                        ) {
                            (Some(&holder), _) if !self.dead.contains(&holder) => {
                                DataSource::Replica { holder }
                            }
                            (_, Some(dir)) => DataSource::Disk { dir: dir.clone() },
                            _ => {
                                let error = ReduceError::RanksLost {
                                    id: r.id.clone(),
                                    ranks: vec![provider.0],
                                };
                                self.fail(key, error);
                                break;
                            }
                        },
                    };
                    let direct = match source {
                        DataSource::Data => r.directs.get(&a.provider.index).cloned(),
                        _ => None,
                    };
                    let record = TaskRecord::new(&r.id, &a, &r.group);
                    let msg = Msg::Task(taskfold_core::wire::Task {
                        key,
                        task_id: a.task_id,
                        provider: provider.0,
                        provider_path: a.provider.path,
                        receiver_path: a.receiver.path,
                        restore: a.restore,
                        source,
                        direct,
                    });
                    self.stats.record_task(record, self.task_log_limit);
                    if !self.send(receiver, &msg) {
                        // Failure place 1: the receiver is dead when its task
                        // is sent.
                        unreachable_receiver = Some(receiver);
                        break;
                    }
                }
            }
        }
        if let Some(rank) = unreachable_receiver {
            self.rank_down(rank, "a task could not be sent to it".into(), None);
        }
        self.update_queue_gauge();
    }

    fn update_queue_gauge(&mut self) {
        let depth: usize = self
            .reductions
            .values()
            .map(|r| r.schedule.queue_len())
            .sum();
        self.stats.queue_depth = depth as u64;
        metrics::gauge!(crate::metrics::MASTER_QUEUE_DEPTH).set(depth as f64);
        metrics::gauge!(crate::metrics::LIVE_REDUCTIONS).set(self.reductions.len() as f64);
    }

    /// Declares `rank` failed (DESIGN.md §2): fences it, tells every rank,
    /// and recovers or ends every reduction that needed its data.
    fn rank_down(&mut self, rank: Rank, reason: String, latency: Option<std::time::Duration>) {
        if rank.0 >= self.size || rank.0 == 0 || !self.dead.insert(rank.0) {
            return;
        }
        if self.finalized.contains(&rank.0) {
            return; // it finished its work and left: not a failure
        }
        self.dead_at.insert(rank.0, SystemTime::now());
        tracing::error!(%rank, %reason, "rank declared failed");
        if let Some(b) = &self.board {
            // Before any completion posted from now on, which may go on
            // without it: it hears it was fenced by message.
            b.fence(rank.0);
        }
        if let Some(d) = &self.detector {
            d.do_send(crate::detector::Forget { rank });
        }
        self.stats.dead.push(rank.0);
        metrics::counter!(crate::metrics::FAILURES_DETECTED).increment(1);
        if let Some(l) = latency {
            metrics::histogram!(crate::metrics::DETECTION_SECONDS).record(l.as_secs_f64());
        }
        // Before the notice that the rank failed: a buddy holding a
        // standing copy of one of its originals is offered it first, on
        // the same ordered link, so that it still maps the dead rank's
        // memory when it reads the offer (it lets go of that mapping once
        // it hears of the death).
        self.offer_standing_copies(rank);
        let notice = Msg::RankFailed { rank: rank.0 };
        for r in 0..self.size {
            if r != rank.0 {
                self.send(Rank(r), &notice);
            }
        }
        // Tell the fenced rank too: if it was only stopped, it learns on
        // resuming that it is out of the run.
        let _ = self.out.send(rank, &notice);
        self.fail_barriers();
        let keys: Vec<u64> = self.reductions.keys().copied().collect();
        for key in keys {
            // Before the scheduler decides whether the lost originals can be
            // had: a copy found on disk counts.
            self.infer_disks(key);
            let Some(r) = self.reductions.get_mut(&key) else {
                continue;
            };
            let dead = &self.dead;
            let member = r.group.index_of(rank);
            // This rank's original has a standing copy whose buddy was just
            // offered it: the buddy's answer says whether the original can
            // be had, and the scheduler hears of this death then (or when
            // the wait runs out).
            let verdict = member.filter(|i| r.awaiting.contains_key(i));
            // Dead members whose buddy this rank was: it can no longer
            // answer, so they are decided now, without a copy.
            let released: Vec<usize> = r
                .awaiting
                .iter()
                .filter(|(_, &buddy)| buddy == rank.0)
                .map(|(i, _)| *i)
                .collect();
            let (replicas, disks) = (&r.replicas, &r.disks);
            let has = |k: usize| state::has_copy(replicas, disks, dead, k);
            let outcome = match member {
                Some(i) if verdict.is_none() => r.schedule.fail(i, has),
                _ => r.schedule.check_recoverable(has),
            };
            if outcome.is_ok() {
                for i in released {
                    self.decide(key, i);
                }
            }
            self.settle(key, outcome, member.is_some() && verdict.is_none());
        }
        self.check_finalize();
    }

    /// Offers every standing copy of `rank`'s originals (`Ready::standing`)
    /// to the buddy that maps it, on behalf of `rank`, which was just
    /// declared failed, and holds those reductions until the buddy answers
    /// (at most [`VERDICT_WAIT`]).
    fn offer_standing_copies(&mut self, rank: Rank) {
        let mut offers = Vec::new();
        for (&key, r) in self.reductions.iter_mut() {
            let Some(i) = r.group.index_of(rank) else {
                continue;
            };
            let Some(s) = r.standing.remove(&i) else {
                continue;
            };
            // A copy whose buddy died before went with it: nothing to ask.
            if !self.dead.contains(&s.buddy) {
                r.awaiting.insert(i, s.buddy);
                offers.push((key, i, s));
            }
        }
        for (key, index, s) in offers {
            tracing::warn!(%rank, buddy = s.buddy, key, "offering a dead rank's original to the buddy that maps it");
            metrics::counter!(crate::metrics::STANDING_COPIES_OFFERED).increment(1);
            let offer = Msg::ReplicaOffer {
                key,
                owner: rank.0,
                len: s.len,
                crc: s.crc,
                node: s.node,
                file: None,
                heap: Some(s.heap),
                warm: None,
                wants_ack: false,
            };
            // If it cannot be sent, the buddy's link is down: its death, or
            // the wait, decides.
            self.send(Rank(s.buddy), &offer);
            if let Some(me) = &self.me {
                let me = me.clone();
                actix::spawn(async move {
                    actix_rt::time::sleep(VERDICT_WAIT).await;
                    me.do_send(handlers::VerdictDue { key, index });
                });
            }
        }
    }

    /// Goes on with reduction `key` after the scheduler took in a death
    /// (`recovered`: of one of its members), or ends it if an original
    /// is lost.
    fn settle(
        &mut self,
        key: u64,
        outcome: Result<(), taskfold_core::schedule::Unrecoverable>,
        recovered: bool,
    ) {
        match outcome {
            Ok(()) => {
                if recovered {
                    metrics::counter!(crate::metrics::RECOVERIES).increment(1);
                }
                self.drive(key);
            }
            Err(u) => {
                if let Some(r) = self.reductions.get(&key) {
                    let error = r.lost(&u);
                    self.fail(key, error);
                }
            }
        }
    }

    /// Sends the finalize acknowledgement once every live rank finalized.
    fn check_finalize(&mut self) {
        let all = (0..self.size).all(|r| self.finalized.contains(&r) || self.dead.contains(&r));
        if all && !self.finalized.is_empty() {
            let ranks: Vec<u32> = self.finalized.iter().copied().collect();
            for r in ranks {
                self.send(Rank(r), &Msg::FinalizeAck);
            }
        }
    }
}

impl Actor for Master {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.me = Some(ctx.address());
        if let Some(b) = &self.board {
            let r = b.reference();
            let msg = Msg::Board {
                pid: r.pid,
                fd: r.fd,
                ino: r.ino,
                node: r.node,
            };
            let own = self.out.transport().rank().0;
            for rank in (0..self.size).filter(|&x| x != own) {
                self.send(Rank(rank), &msg);
            }
        }
    }
}

/// How long the master waits for the answer of a dead rank's buddy about
/// the standing copy of that rank's original (see `Ready::standing`). The
/// answer normally comes within a millisecond (the buddy maps the
/// original where it lies); it does not come if the buddy is stopped
/// without being declared failed, and then the original is taken as lost:
/// the reduction ends with `RanksLost` after this wait instead of waiting
/// forever.
pub(crate) const VERDICT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The order in which the master tells a reduction's members that it is
/// complete: the root first, then the other ranks, and the master's own
/// rank last.
///
/// Why: each send to another rank is a system call that also runs the
/// loopback's delivery, and the members' futures resolve in the order the
/// messages go out. The master's own rank hears at once, through its own
/// mailbox; told first, it started its next operation (a barrier's next
/// timed reduction, say) while the others still waited, which is the
/// spread a barrier exists to remove.
fn completion_order(members: &[Rank], root: Rank, own: Rank) -> impl Iterator<Item = Rank> + '_ {
    let root_first = members
        .iter()
        .copied()
        .filter(move |&r| r == root && r != own);
    let others = members
        .iter()
        .copied()
        .filter(move |&r| r != root && r != own);
    let own_last = members.iter().copied().filter(move |&r| r == own);
    root_first.chain(others).chain(own_last)
}

#[cfg(test)]
mod completion_tests {
    use super::*;

    #[test]
    fn the_root_hears_first_and_the_masters_own_rank_last() {
        let m: Vec<Rank> = (0..5).map(Rank).collect();
        let order: Vec<u32> = completion_order(&m, Rank(3), Rank(0))
            .map(|r| r.0)
            .collect();
        assert_eq!(order, vec![3, 1, 2, 4, 0]);
        // The master's rank is the root: still last (it hears at once).
        let order: Vec<u32> = completion_order(&m, Rank(0), Rank(0))
            .map(|r| r.0)
            .collect();
        assert_eq!(order, vec![1, 2, 3, 4, 0]);
        // A group without the master's rank.
        let m: Vec<Rank> = vec![Rank(2), Rank(5), Rank(7)];
        let order: Vec<u32> = completion_order(&m, Rank(7), Rank(0))
            .map(|r| r.0)
            .collect();
        assert_eq!(order, vec![7, 2, 5]);
    }
}

#[cfg(test)]
pub(super) mod standing_tests {
    //! Joins naming a standing copy (`Ready::standing`), the deaths that
    //! make the master ask the buddy for it, and the releases of consumed
    //! data, driven message by message over the serialising loopback.
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;
    use taskfold_core::wire::{self, Join, Locator, Ready, Standing, TaskFailed, TaskFailure};
    use taskfold_core::RankSet;
    use taskfold_transports::loopback::{LoopbackHub, LoopbackTransport};
    use taskfold_transports::{Event, Transport};

    const KEY: u64 = 11;

    fn join(rank: u32, buddy: Option<u32>) -> ReadyIn {
        join_as(rank, buddy, false)
    }

    /// The standing copy of `rank`'s original that `buddy` maps.
    fn standing(rank: u32, buddy: u32) -> Standing {
        Standing {
            buddy,
            crc: 0x5446_0000 | rank,
            len: 4160,
            node: 9,
            heap: Locator([rank as u8; wire::LOCATOR_LEN]),
        }
    }

    fn join_as(rank: u32, buddy: Option<u32>, early: bool) -> ReadyIn {
        ReadyIn {
            from: Rank(rank),
            ready: Ready {
                key: KEY,
                rank,
                path: RankSet::single(rank as usize),
                join: Some(Join {
                    id: "standing".into(),
                    group: vec![0, 1, 2, 3],
                    root: 1,
                    type_tag: 7,
                    shape: None,
                    disk: None,
                    early,
                }),
                done: None,
                replica: None,
                standing: buddy.map(|b| standing(rank, b)),
                direct: None,
            },
            wire: 0,
        }
    }

    fn replicated(owner: u32, holder: u32, ok: bool) -> ReplicatedIn {
        ReplicatedIn {
            holder: Rank(holder),
            key: KEY,
            owner,
            ok,
            wire: 0,
        }
    }

    /// Every message sent to the four ranks so far: (to, message).
    fn sent(ts: &[Arc<LoopbackTransport>]) -> Vec<(u32, Msg)> {
        let mut out = Vec::new();
        for (r, t) in ts.iter().enumerate() {
            for e in t.events().try_iter() {
                if let Event::Message { frame, .. } = e {
                    out.push((r as u32, wire::decode(&frame).expect("a valid frame")));
                }
            }
        }
        out
    }

    fn tasks_naming(msgs: &[(u32, Msg)], rank: u32) -> usize {
        msgs.iter()
            .filter(|(to, m)| matches!(m, Msg::Task(t) if t.provider == rank || *to == rank))
            .count()
    }

    /// Rank `to` reports task `t` done.
    async fn report(m: &Addr<Master>, to: u32, t: &wire::Task) {
        let done = Ready {
            key: KEY,
            rank: to,
            path: t.receiver_path.union(&t.provider_path),
            join: None,
            done: Some(wire::TaskDone {
                task_id: t.task_id,
                nanos: 1,
                bytes: 1,
            }),
            replica: None,
            standing: None,
            direct: None,
        };
        m.send(ReadyIn {
            from: Rank(to),
            ready: done,
            wire: 0,
        })
        .await
        .unwrap();
    }

    /// Ranks 0, 1 and 3 join; rank 2's join names a standing copy on its
    /// buddy, 3.
    async fn joined(m: &Addr<Master>) {
        for j in [
            join(0, None),
            join(1, None),
            join(2, Some(3)),
            join(3, None),
        ] {
            m.send(j).await.unwrap();
        }
    }

    /// The master declares `rank` failed.
    pub(in crate::master) async fn down(m: &Addr<Master>, rank: u32) {
        m.send(RankDown {
            rank: Rank(rank),
            reason: "killed".into(),
            latency: None,
        })
        .await
        .unwrap();
    }

    async fn settle() {
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }

    fn master(ts: &[Arc<LoopbackTransport>]) -> Addr<Master> {
        let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
        Master::new(4, Outbox::new(t), 1000).start()
    }

    /// Every member joins (`early` as given), then every task of the first
    /// round is reported done: the ranks released, as (rank, whether its
    /// data was a single original).
    fn releases_after_first_round(early: bool) -> Vec<u32> {
        let (_hub, ts) = LoopbackHub::new(4);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            for r in 0..4 {
                m.send(join_as(r, None, early)).await.unwrap();
            }
            settle().await;
            let tasks: Vec<(u32, wire::Task)> = sent(&ts)
                .into_iter()
                .filter_map(|(to, m)| match m {
                    Msg::Task(t) => Some((to, t)),
                    _ => None,
                })
                .collect();
            assert_eq!(tasks.len(), 2, "two pairs of single originals: {tasks:?}");
            for (to, t) in &tasks {
                assert_eq!(t.provider_path.len(), 1);
                report(&m, *to, t).await;
            }
            settle().await;
            let mut released: Vec<u32> = sent(&ts)
                .into_iter()
                .filter_map(|(to, m)| matches!(m, Msg::Release { .. }).then_some(to))
                .collect();
            released.sort_unstable();
            let mut providers: Vec<u32> = tasks.iter().map(|(_, t)| t.provider).collect();
            providers.sort_unstable();
            if early {
                assert_eq!(released, providers, "every consumed original is released");
            }
            released
        })
    }

    #[test]
    fn a_single_original_is_released_only_to_a_member_that_waits_for_it() {
        assert_eq!(
            releases_after_first_round(false),
            Vec::<u32>::new(),
            "by default a single original is kept without a message"
        );
        assert_eq!(releases_after_first_round(true).len(), 2);
    }

    #[test]
    fn a_join_with_a_standing_copy_counts_at_once() {
        let (_hub, ts) = LoopbackHub::new(4);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            joined(&m).await;
            settle().await;
            let msgs = sent(&ts);
            assert_eq!(tasks_naming(&msgs, 2), 1, "{msgs:?}");
            assert!(
                !msgs
                    .iter()
                    .any(|(_, m)| matches!(m, Msg::ReplicaOffer { .. })),
                "nothing is offered while rank 2 lives: {msgs:?}"
            );
        });
    }

    /// Rank 2 (standing copy on 3) is declared failed after every member
    /// joined: what was sent until then, and what the master sent then.
    async fn rank_2_dies(m: &Addr<Master>, ts: &[Arc<LoopbackTransport>]) -> Vec<(u32, Msg)> {
        joined(m).await;
        settle().await;
        let _ = sent(ts);
        down(m, 2).await;
        settle().await;
        sent(ts)
    }

    #[test]
    fn a_rank_that_dies_with_a_standing_copy_is_recovered_from_its_buddy() {
        let (_hub, ts) = LoopbackHub::new(4);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            let at_death = rank_2_dies(&m, &ts).await;
            // The buddy is offered the original first, then told of the
            // death (it lets go of rank 2's memory then).
            let to_3: Vec<&Msg> = at_death
                .iter()
                .filter(|(to, _)| *to == 3)
                .map(|(_, m)| m)
                .collect();
            assert!(
                matches!(
                    to_3.as_slice(),
                    [Msg::ReplicaOffer { owner: 2, heap: Some(h), wants_ack: false, .. }, Msg::RankFailed { rank: 2 }, ..]
                        if *h == standing(2, 3).heap
                ),
                "{to_3:?}"
            );
            assert!(
                !at_death
                    .iter()
                    .any(|(_, m)| matches!(m, Msg::Task(_) | Msg::Complete { .. })),
                "the reduction waits for the buddy's answer: {at_death:?}"
            );
            m.send(replicated(2, 3, true)).await.unwrap();
            settle().await;
            let after = sent(&ts);
            assert!(
                after.iter().any(|(_, m)| matches!(
                    m,
                    Msg::Task(t) if t.provider == 2 && t.source == DataSource::Replica { holder: 3 }
                )),
                "rank 2's original comes from its buddy's copy: {after:?}"
            );
            assert!(
                !after
                    .iter()
                    .any(|(_, m)| matches!(m, Msg::Complete { error: Some(_), .. })),
                "{after:?}"
            );
        });
    }

    /// Reports every task in `msgs` whose receiver is not `except` done.
    async fn report_done(m: &Addr<Master>, msgs: &[(u32, Msg)], except: u32) {
        for (to, msg) in msgs {
            match msg {
                Msg::Task(t) if *to != except => report(m, *to, t).await,
                _ => {}
            }
        }
    }

    #[test]
    fn no_task_goes_out_while_a_dead_ranks_buddy_is_asked() {
        let (_hub, ts) = LoopbackHub::new(4);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            // Rank 2 first, then the root: rank 2's data goes to the root.
            for j in [
                join(2, Some(3)),
                join(1, None),
                join(0, None),
                join(3, None),
            ] {
                m.send(j).await.unwrap();
            }
            settle().await;
            let first = sent(&ts);
            assert!(
                first
                    .iter()
                    .any(|(to, m)| *to == 1 && matches!(m, Msg::Task(t) if t.provider == 2)),
                "{first:?}"
            );
            // Rank 2 dies after the root read its data; both tasks of the
            // first round end.
            down(&m, 2).await;
            report_done(&m, &first, 2).await;
            settle().await;
            let held = sent(&ts);
            assert!(
                !held.iter().any(|(_, m)| matches!(m, Msg::Task(_))),
                "two partial results wait for the buddy's answer: {held:?}"
            );
            m.send(replicated(2, 3, true)).await.unwrap();
            settle().await;
            let after = sent(&ts);
            assert!(
                after
                    .iter()
                    .any(|(to, m)| *to == 1 && matches!(m, Msg::Task(t) if t.provider != 2)),
                "then they are paired (rank 2's original is already in the root's): {after:?}"
            );
        });
    }

    #[test]
    fn a_fetch_failure_from_the_dead_rank_meanwhile_ends_nothing() {
        let (_hub, ts) = LoopbackHub::new(4);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            joined(&m).await;
            settle().await;
            // The task that reads rank 2's data (or gives rank 2 data).
            let task = sent(&ts)
                .into_iter()
                .find_map(|(to, m)| match m {
                    Msg::Task(t) if t.provider == 2 || to == 2 => Some((to, t)),
                    _ => None,
                })
                .expect("rank 2 is in a task");
            down(&m, 2).await;
            if task.0 != 2 {
                // Its receiver's fetch from rank 2 fails, before the
                // buddy answers.
                m.send(TaskFailedIn {
                    from: Rank(task.0),
                    failed: TaskFailed {
                        key: KEY,
                        task_id: task.1.task_id,
                        reason: TaskFailure::Fetch {
                            reason: "link down".into(),
                            peer_down: true,
                        },
                    },
                    wire: 0,
                })
                .await
                .unwrap();
            }
            settle().await;
            let held = sent(&ts);
            assert!(
                !held
                    .iter()
                    .any(|(_, m)| matches!(m, Msg::Task(_) | Msg::Complete { .. })),
                "{held:?}"
            );
            m.send(replicated(2, 3, true)).await.unwrap();
            settle().await;
            let after = sent(&ts);
            assert!(
                !after
                    .iter()
                    .any(|(_, m)| matches!(m, Msg::Complete { error: Some(_), .. })),
                "the failure is read with the copy known: {after:?}"
            );
            assert!(
                after.iter().any(|(_, m)| matches!(
                    m,
                    Msg::Task(t) if t.provider == 2 && t.source == DataSource::Replica { holder: 3 }
                )),
                "{after:?}"
            );
        });
    }

    #[test]
    fn a_refusal_or_no_answer_about_a_dead_ranks_original_is_a_typed_error() {
        for answer in [Some(false), None] {
            let (_hub, ts) = LoopbackHub::new(4);
            actix_rt::System::new().block_on(async move {
                let m = master(&ts);
                rank_2_dies(&m, &ts).await;
                match answer {
                    Some(ok) => m.send(replicated(2, 3, ok)).await.unwrap(),
                    // Bounded: the wait runs out.
                    None => actix_rt::time::sleep(VERDICT_WAIT).await,
                }
                settle().await;
                let msgs = sent(&ts);
                for r in [0, 1, 3] {
                    assert!(
                        msgs.iter().any(|(to, m)| *to == r
                            && matches!(
                                m,
                                Msg::Complete {
                                    error: Some(ReduceError::RanksLost { .. }),
                                    ..
                                }
                            )),
                        "rank {r} hears that rank 2's original is lost ({answer:?}): {msgs:?}"
                    );
                }
            });
        }
    }

    #[test]
    fn a_standing_copy_is_gone_with_its_buddy() {
        let (_hub, ts) = LoopbackHub::new(4);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            joined(&m).await;
            // Rank 3's own original has a copy (on rank 0): its death loses
            // nothing of its own.
            m.send(replicated(3, 0, true)).await.unwrap();
            down(&m, 3).await;
            settle().await;
            let msgs = sent(&ts);
            assert!(
                !msgs
                    .iter()
                    .any(|(_, m)| matches!(m, Msg::Complete { error: Some(_), .. })),
                "{msgs:?}"
            );
            // Rank 2 then dies: its copy went with rank 3, nobody is asked.
            down(&m, 2).await;
            settle().await;
            let msgs = sent(&ts);
            assert!(
                !msgs
                    .iter()
                    .any(|(_, m)| matches!(m, Msg::ReplicaOffer { .. })),
                "{msgs:?}"
            );
            assert!(
                msgs.iter().any(|(_, m)| matches!(
                    m,
                    Msg::Complete {
                        error: Some(ReduceError::RanksLost { .. }),
                        ..
                    }
                )),
                "{msgs:?}"
            );
        });
    }

    #[test]
    fn a_dead_ranks_buddy_that_dies_before_answering_loses_the_original() {
        let (_hub, ts) = LoopbackHub::new(4);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            rank_2_dies(&m, &ts).await;
            down(&m, 3).await;
            settle().await;
            let msgs = sent(&ts);
            for r in [0, 1] {
                assert!(
                    msgs.iter().any(|(to, m)| *to == r
                        && matches!(
                            m,
                            Msg::Complete {
                                error: Some(ReduceError::RanksLost { .. }),
                                ..
                            }
                        )),
                    "rank {r}: {msgs:?}"
                );
            }
        });
    }
}
