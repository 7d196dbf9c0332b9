//! [`Runtime`]: the handle an application holds; starts and stops the actors.

use crate::checkpoint::{Checkpointer, Checkpoints};

use crate::commands::Command;
use crate::config::{Config, Durability, Settings};
use crate::future::{ReduceFuture, Slot};
use crate::master::MasterStats;
use crate::numbering::Taken;
use crate::options::Reduce;
use crate::perf::LocalStats;
use crate::worker::{FinalizeReq, StartReduce};
use crate::StartError;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use taskfold_core::reducer::type_tag;
use taskfold_core::wire::Join;
use taskfold_core::{Group, Rank, ReduceError, ReduceValue, ReductionId, ReductionKey};
use taskfold_transports::Transport;

/// One rank's taskfold runtime: its actors run on their own threads, and
/// [`Runtime::reduce`] returns at once.
///
/// Dropping the runtime finalizes it (see [`Runtime::shutdown`]).
pub struct Runtime {
    rank: u32,
    size: u32,
    pub(crate) cmd: flume::Sender<Command>,
    live: Arc<Mutex<HashSet<u64>>>,
    /// Numbers of unnamed reductions (see `crate::numbering`).
    pub(crate) auto_ids: crate::numbering::Counters,
    pub(crate) barriers: std::sync::atomic::AtomicU64,
    notices: crate::notices::Notices,
    thread: Option<JoinHandle<()>>,
    transport: Arc<dyn Transport>,
    pub(crate) config: Config,
    pub(crate) checkpoints: Checkpoints,
    recovery: crate::lifecycle::Recovery,
    pub(crate) rollbacks: crate::reinit::Rollbacks,
    /// This rank's membership view.
    view: crate::membership::View,
    /// Results handed to the application and kept for a replacement root
    /// (see `crate::results`).
    results: crate::results::Kept,
    /// Call numbers of allreduces and broadcasts (see `crate::collective`).
    pub(crate) spreads: crate::numbering::Counters,
}

impl Runtime {
    /// Starts from the environment set by `taskfold run`, `mpiexec`,
    /// `mpirun` or `srun` (see [`crate::env`]), over the transport the
    /// settings choose (TCP by default): [`Settings::from_env`], then
    /// [`Runtime::from_settings`]. A bad `TASKFOLD_*` value is an error
    /// naming the variable.
    pub fn from_env() -> Result<Runtime, StartError> {
        Runtime::builder().build()
    }

    /// Starts from `settings` (its launch part gives rank, size and
    /// master); the environment is not read.
    pub fn from_settings(settings: Settings) -> Result<Runtime, StartError> {
        Runtime::builder().settings(settings).build()
    }

    /// Starts the actors of this rank over `transport`.
    pub fn start(transport: Arc<dyn Transport>, config: Config) -> Result<Runtime, StartError> {
        Runtime::start_at(transport, config, std::time::SystemTime::now())
    }

    /// [`Runtime::start`], knowing that no rank of the job could write a
    /// replica file before `epoch` (rank 0's master uses it to tell a
    /// dead rank's disk copy from a stale file of an earlier job).
    pub(crate) fn start_at(
        transport: Arc<dyn Transport>,
        config: Config,
        epoch: std::time::SystemTime,
    ) -> Result<Runtime, StartError> {
        let rank = transport.rank().0;
        let size = transport.size();
        crate::logger::install_default(config.log);
        crate::metrics::describe();
        taskfold_core::pool::set_limit(usize::try_from(config.buffer_pool).unwrap_or(usize::MAX));
        taskfold_core::pool::follow_peak(config.buffer_pool_follows_peak);
        taskfold_core::pool::set_prefill(config.buffer_pool_prefill);
        let (cmd_tx, cmd_rx) = flume::unbounded::<Command>();
        let live = Arc::new(Mutex::new(HashSet::new()));
        let notices = crate::notices::Notices::default();
        if transport.master_rank().0 == rank && config.notice_board {
            match taskfold_transports::board::Board::create() {
                Ok(b) => notices.set(Arc::new(b)),
                Err(e) => {
                    tracing::warn!(error = %e, "no notice board; released barriers and completions come by message only")
                }
            }
        }
        let recovery = crate::lifecycle::Recovery::new(transport.incarnation());
        let rollbacks = crate::reinit::Rollbacks::default();
        let view = crate::membership::View::joined(&*transport);
        let (checkpoints, inbox) = Checkpoints::start(transport.clone(), view.clone(), &config)
            .map_err(StartError::Thread)?;
        let results = crate::results::Kept::new(config.keeps_results());
        let thread = crate::start::spawn(crate::start::Parts {
            transport: transport.clone(),
            config: config.clone(),
            epoch,
            live: live.clone(),
            notices: notices.clone(),
            commands: cmd_rx,
            recovery: recovery.clone(),
            rollbacks: rollbacks.clone(),
            checkpoints: inbox,
            view: view.clone(),
            results: results.clone(),
        })?;
        tracing::debug!(rank, size, transport = transport.name(), "runtime started");
        Ok(Runtime {
            rank,
            size,
            cmd: cmd_tx,
            live,
            auto_ids: Default::default(),
            barriers: Default::default(),
            notices,
            thread: Some(thread),
            transport,
            checkpoints,
            config,
            recovery,
            rollbacks,
            view,
            results,
            spreads: Default::default(),
        })
    }

    /// What this process is, as far as failures go: started with the job
    /// ([`Lifecycle::New`]), a replacement of a dead process of its rank
    /// ([`Lifecycle::Restarted`]: restore and redo), or a survivor told of
    /// replacements ([`Lifecycle::Reinited`]). See the book's chapter
    /// Surviving failures of the application.
    ///
    /// [`Lifecycle::New`]: crate::Lifecycle::New
    /// [`Lifecycle::Restarted`]: crate::Lifecycle::Restarted
    /// [`Lifecycle::Reinited`]: crate::Lifecycle::Reinited
    pub fn lifecycle(&self) -> crate::Lifecycle {
        self.recovery.lifecycle()
    }

    /// The job's failure events as this rank hears them (ranks declared
    /// failed, replacements let in), in order: block on it, poll it, or
    /// `.recv_async().await` it: no polling of the runtime needed. Every
    /// receiver shares one queue (an event goes to one of them); the
    /// newest 1,024 unread events are kept.
    pub fn recovery_events(&self) -> flume::Receiver<crate::RecoveryEvent> {
        self.recovery.events()
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Ranks in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The rank that runs the master now, as this rank knows it: rank 0
    /// at the start, then each standby that took over from a dead master
    /// (see the book's Fault tolerance chapter, A master that dies).
    pub fn master(&self) -> u32 {
        self.view.master().0
    }

    /// The transport's name (`"tcp"`, `"loopback"`).
    pub fn transport_name(&self) -> &'static str {
        self.transport.name()
    }

    /// This rank's checkpoints: write a version of its state, restore
    /// the newest that survived (see [`Checkpointer`] and the book's
    /// Checkpoints chapter).
    pub fn checkpoints(&self) -> Checkpointer<'_> {
        Checkpointer::new(&self.checkpoints, &self.results, &self.cmd)
    }

    /// Starts a reduction of `value`.
    ///
    /// With [`Durability::Async`](crate::Durability::Async) (the default)
    /// and [`Durability::Off`](crate::Durability::Off) it returns at once;
    /// [`ReduceFuture::is_safe`] says when this rank's contribution
    /// survives this rank's death. With
    /// [`Durability::Sync`](crate::Durability::Sync) it returns only once
    /// that is so (for a member, once its buddy acknowledged its replica
    /// and the announcement naming it went out; see the book's Fault
    /// tolerance chapter, "The durability window"), or once the reduction
    /// ended (the future then holds the outcome), and fails with
    /// [`ReduceError::Timeout`] if neither happened within
    /// [`Config::finalize_timeout`] (the reduction then goes on without a
    /// handle, and its id stays in use until it ends).
    ///
    /// Errors right away for invalid options (root or this rank outside the
    /// group, bad id), for an id already live in this group on this rank,
    /// and with [`ReduceError::TooManyReductions`] when
    /// [`Config::max_reductions`] are live on this rank; every other
    /// failure arrives through the future (the master's refusal of one
    /// reduction too many among them).
    pub fn reduce<T: ReduceValue>(
        &self,
        value: T,
        opts: Reduce,
    ) -> Result<ReduceFuture<T>, ReduceError> {
        let (f, durability) = self.start_reduce(value, opts, None)?;
        self.settle(f.slot(), durability)?;
        Ok(f)
    }

    /// Starts [`Runtime::reduce`], its outcome handed to `relay` if given
    /// (the first half of an allreduce: every member then waits for the
    /// result, and the future's slot never completes through the board).
    /// An error here means the call was refused and nothing started: the
    /// automatic number it took is given back. The durability to settle
    /// is returned with the future.
    pub(crate) fn start_reduce<T: ReduceValue>(
        &self,
        value: T,
        opts: Reduce,
        relay: Option<crate::future::Relay>,
    ) -> Result<(ReduceFuture<T>, Durability), ReduceError> {
        let group = self.group_of(&opts)?;
        let (id, auto) = self.id_of(&opts, &group, "auto")?;
        self.start_as(value, opts, relay, group, id)
            .inspect_err(|_| self.give_back(auto, None))
    }

    /// [`Runtime::start_reduce`] under `id`, in `group`.
    fn start_as<T: ReduceValue>(
        &self,
        value: T,
        opts: Reduce,
        relay: Option<crate::future::Relay>,
        group: Group,
        id: ReductionId,
    ) -> Result<(ReduceFuture<T>, Durability), ReduceError> {
        let root = Rank(opts.root);
        let index = group
            .index_of(Rank(self.rank))
            .expect("group_of checked that this rank is a member");
        let key = ReductionKey::of(&id, &group).0;
        // The epoch it starts in: a rollback that overtakes it ends it.
        let epoch = self.claim(key, &id)?;
        let join = Join {
            id: id.to_string(),
            group: group.members().iter().map(|r| r.0).collect(),
            root: root.0,
            type_tag: type_tag::<T>(),
            shape: value.shape_hint(),
            disk: None, // filled in by the worker, which owns the replica store
            early: root.0 != self.rank
                && relay.is_none()
                && opts.completion.unwrap_or(self.config.completion)
                    == crate::config::Completion::Contributed,
        };
        // A member that waits for the result may take it from the master's
        // notice board (if this rank has mapped it; see `BoardLink`).
        let slot = match (self.notices.get(), relay) {
            (_, Some(relay)) => Arc::new(Slot::relayed(relay)),
            (Some(_), None) if root.0 != self.rank && !join.early => {
                Arc::new(Slot::with_board(crate::future::BoardLink {
                    notices: self.notices.clone(),
                    live: self.live.clone(),
                    key,
                    rank: self.rank,
                }))
            }
            _ => Arc::new(Slot::default()),
        };
        let durability = opts.durability.unwrap_or(self.config.durability);
        let start = StartReduce {
            epoch,
            key,
            join,
            group,
            index,
            value: Box::new(value),
            slot: slot.clone(),
            durability,
        };
        if self.cmd.send(Command::Start(start)).is_err() {
            self.live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
            return Err(ReduceError::Shutdown);
        }
        Ok((ReduceFuture::new(slot, id.to_string()), durability))
    }

    /// `opts`' group, with its root and this rank in it.
    pub(crate) fn group_of(&self, opts: &Reduce) -> Result<Group, ReduceError> {
        let group = opts
            .resolve_group(self.size())
            .map_err(|e| ReduceError::InvalidOptions(e.to_string()))?;
        if !group.contains(Rank(opts.root)) {
            return Err(ReduceError::InvalidOptions(format!(
                "root {} is not in the group",
                opts.root
            )));
        }
        if group.index_of(Rank(self.rank())).is_none() {
            return Err(ReduceError::InvalidOptions(format!(
                "rank {} is not a member of the group it reduces over",
                self.rank()
            )));
        }
        Ok(group)
    }

    /// `opts`' id, or the group's next automatic one (numbered as
    /// [`Reduce::id`] says) under `prefix`, with the number taken (to give
    /// back if the call is refused: see `crate::numbering`).
    pub(crate) fn id_of(
        &self,
        opts: &Reduce,
        group: &Group,
        prefix: &str,
    ) -> Result<(ReductionId, Option<Taken>), ReduceError> {
        if let Some(id) = &opts.id {
            return Ok((ReductionId::new(id.clone())?, None));
        }
        let gkey = ReductionKey::of(&ReductionId::new(prefix)?, group).0;
        let taken = self.auto_ids.take(gkey);
        Ok((
            ReductionId::new(format!("{prefix}-{}", taken.n))?,
            Some(taken),
        ))
    }

    /// Gives back the numbers a refused call took.
    pub(crate) fn give_back(&self, auto: Option<Taken>, spread: Option<Taken>) {
        if let Some(t) = auto {
            self.auto_ids.give_back(t);
        }
        if let Some(t) = spread {
            self.spreads.give_back(t);
        }
    }

    /// Marks reduction `key` (`id`) live on this rank: refused if it is
    /// already, or if [`Config::max_reductions`] are.
    fn claim(&self, key: u64, id: &ReductionId) -> Result<u32, ReduceError> {
        // A job rolling back takes no reduction until its entry point.
        let epoch = self.rollbacks.running()?;
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if live.contains(&key) {
            return Err(ReduceError::DuplicateId(id.to_string()));
        }
        if live.len() >= self.config.max_reductions {
            return Err(ReduceError::TooManyReductions {
                limit: self.config.max_reductions as u64,
            });
        }
        live.insert(key);
        Ok(epoch)
    }

    /// Synchronous durability: waits until the contribution in `slot` is
    /// safe (or its reduction ended), at most [`Config::finalize_timeout`].
    pub(crate) fn settle(&self, slot: &Slot, durability: Durability) -> Result<(), ReduceError> {
        if durability != Durability::Sync {
            return Ok(());
        }
        let bound = self.config.finalize_timeout;
        if slot.wait_settled(Some(bound)) {
            Ok(())
        } else {
            tracing::warn!(
                rank = self.rank,
                "a synchronous reduce timed out before its contribution was safe"
            );
            Err(ReduceError::Timeout(bound))
        }
    }

    /// Blocks until every rank of the job called `barrier` (barriers are
    /// numbered in call order).
    ///
    /// Each rank tells the master and waits for its answer: one message
    /// each way per rank, none back to a rank on the master's node, which
    /// reads the release on the master's notice board. A barrier carries
    /// no data: a rank declared failed before or during it, or one that
    /// finalized without reaching it, makes it fail on the others with
    /// [`ReduceError::RanksLost`] naming the dead ranks (a barrier cannot
    /// wait for a rank that will never come). Fails with
    /// [`ReduceError::MasterLost`] if the master is gone, and
    /// [`ReduceError::Fenced`] on a rank declared failed.
    pub fn barrier(&self) -> Result<(), ReduceError> {
        self.rollbacks.check()?;
        let seq = self
            .barriers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = flume::bounded(1);
        self.cmd
            .send(Command::Barrier(crate::worker::BarrierReq {
                seq,
                // Set once, never unset: `wait_barrier` below reads it too.
                board: self.notices.get().is_some(),
                reply: crate::notices::Reply::new(tx, self.notices.clone()),
            }))
            .map_err(|_| ReduceError::Shutdown)?;
        self.notices.wait_barrier(seq, &rx)
    }

    /// A snapshot of the master's counters and task log (rank 0 only).
    pub fn master_stats(&self) -> Option<MasterStats> {
        let (tx, rx) = flume::bounded(1);
        self.cmd.send(Command::MasterStats(tx)).ok()?;
        rx.recv_timeout(std::time::Duration::from_secs(10)).ok()
    }

    /// This rank's task counters.
    pub fn local_stats(&self) -> LocalStats {
        let (tx, rx) = flume::bounded(1);
        let mut stats = if self.cmd.send(Command::LocalStats(tx)).is_err() {
            LocalStats::default()
        } else {
            rx.recv_timeout(std::time::Duration::from_secs(10))
                .unwrap_or_default()
        };
        stats.barriers_by_board = self.notices.barriers_by_board();
        stats.reductions_by_board = self.notices.reductions_by_board();
        stats
    }

    /// Starts finalizing: tells the master this rank is done. Ranks keep
    /// serving data until every rank finalized, like `MPI_Finalize`.
    pub(crate) fn begin_shutdown(&self) -> Option<flume::Receiver<Result<(), ReduceError>>> {
        self.thread.as_ref()?;
        let (tx, rx) = flume::bounded(1);
        self.cmd
            .send(Command::Finalize(FinalizeReq { reply: tx }))
            .ok()?;
        Some(rx)
    }

    pub(crate) fn finish_shutdown(
        &mut self,
        rx: Option<flume::Receiver<Result<(), ReduceError>>>,
    ) -> Result<(), ReduceError> {
        let result = match rx {
            None => Ok(()),
            Some(rx) => match rx.recv_timeout(self.config.finalize_timeout) {
                Ok(r) => r,
                Err(flume::RecvTimeoutError::Timeout) => {
                    Err(ReduceError::Timeout(self.config.finalize_timeout))
                }
                Err(flume::RecvTimeoutError::Disconnected) => Err(ReduceError::Shutdown),
            },
        };
        let _ = self.cmd.send(Command::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.transport.shutdown();
        result
    }

    /// Waits until every rank finalized (bounded by
    /// [`Config::finalize_timeout`]), then stops this rank's actors and
    /// closes its links. Reductions still live on this rank end with
    /// [`ReduceError::Shutdown`].
    ///
    /// Finalizing tells the master that this rank joins nothing more: the
    /// reductions of other ranks that wait for a contribution of this rank
    /// end at once with [`ReduceError::RanksLost`] naming it. With its
    /// master lost, this fails at once with [`ReduceError::MasterLost`]
    /// (no wait for the finalize timeout).
    pub fn shutdown(mut self) -> Result<(), ReduceError> {
        let rx = self.begin_shutdown();
        self.finish_shutdown(rx)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let rx = self.begin_shutdown();
            if let Err(e) = self.finish_shutdown(rx) {
                tracing::warn!(rank = self.rank, error = %e, "shutdown did not finalize cleanly");
            }
        }
    }
}
