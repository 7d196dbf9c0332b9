//! Tasks this rank receives: check one against the state machine, fetch
//! the provider's data (read in place, asked for, or streamed piecewise,
//! see `pieces.rs`), and hand it to the fold (see `fold.rs`).

use super::{Fetching, Worker};
use crate::hooks::{self, Point};
use crate::replica::ReplicaDisk;
use actix::prelude::*;
use std::time::Instant;
use taskfold_core::contribution::{TaskCheck, TaskVerdict};
use taskfold_core::replica::{self, original_key, replica_key, HEADER_LEN};
use taskfold_core::wire::{DataSource, Msg, Task, TaskFailed, TaskFailure};
use taskfold_core::{FoldError, Rank, RankSet, ReduceValue};
use taskfold_transports::{BufferKey, Received, TransportError};

/// A task from the master: fetch the provider's data and fold it into ours.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct TaskIn(pub(crate) Task);

impl Handler<TaskIn> for Worker {
    type Result = ();

    fn handle(&mut self, TaskIn(task): TaskIn, ctx: &mut Context<Self>) {
        let key = task.key;
        let Some(local) = self.locals.get_mut(&key) else {
            tracing::warn!(rank = %self.rank, key, "task for a reduction this rank does not hold");
            return self.fail_task(&task, TaskFailure::Unknown);
        };
        // Every provider's path, the further ones' included: they must not
        // overlap one another (nor the receiver's, checked below).
        let Some(providers) = providers_path(&task) else {
            let e = FoldError::Custom(
                "the task's providers overlap: an original would be folded twice".into(),
            );
            return self.fail_task(&task, TaskFailure::Fold((&e).into()));
        };
        let verdict = local.state.task_arrived(TaskCheck {
            id: task.task_id,
            receiver_path: &task.receiver_path,
            provider_path: &providers,
            restore: task.restore,
            has_value: local.value.is_some(),
        });
        tracing::debug!(rank = %self.rank, key, task_id = task.task_id, provider = task.provider, ?verdict, "task arrived");
        match verdict {
            TaskVerdict::Queue => local.held.push(task),
            TaskVerdict::Overlap => {
                // Folding would count some original twice: never do it.
                let e = FoldError::Custom(
                    "the task's paths overlap: an original would be folded twice".into(),
                );
                self.fail_task(&task, TaskFailure::Fold((&e).into()));
            }
            TaskVerdict::Unknown => self.fail_task(&task, TaskFailure::Unknown),
            TaskVerdict::Start => {
                let point = if task.more.is_empty() {
                    Point::BeforeGet
                } else {
                    Point::BeforeGather
                };
                match hooks::hold(&self.hooks, self.rank.0, point, &local.join.id) {
                    None => self.start_task(task, ctx),
                    Some(wait) => {
                        let life = local.life;
                        ctx.spawn(wait.into_actor(self).map(move |_, act, ctx| {
                            if act.local_of(task.key, life).is_some() {
                                act.start_task(task, ctx)
                            }
                        }));
                    }
                }
            }
        }
    }
}

/// A task's data arrived (and the receiver's original was reloaded if the
/// task asked for it).
pub(super) struct Fetched {
    task: Task,
    /// Further providers' data, read in place when the task started, with
    /// their paths.
    more: Vec<(RankSet, Received)>,
    /// The reduction's life ([`super::Local::life`]).
    life: u64,
    restored: Option<Result<Box<dyn ReduceValue>, String>>,
    data: Result<Received, TransportError>,
    started: Instant,
}

impl Worker {
    pub(super) fn fail_task(&mut self, task: &Task, reason: TaskFailure) {
        if self.settle_old_task(task.key, task.task_id) {
            return; // the dead master's: the new one schedules anew
        }
        self.to_master(&Msg::TaskFailed(TaskFailed {
            key: task.key,
            task_id: task.task_id,
            reason,
        }));
    }

    /// Task `task` ended without a fold: its state machine is told, and
    /// the master.
    pub(super) fn task_failed(&mut self, task: &Task, reason: TaskFailure) {
        if let Some(l) = self.locals.get_mut(&task.key) {
            l.state.task_failed(task.task_id);
        }
        self.fail_task(task, reason);
    }

    fn start_task(&mut self, mut task: Task, ctx: &mut Context<Self>) {
        let key = task.key;
        let Some(local) = self.locals.get(&key) else {
            return;
        };
        let life = local.life;
        // A provider's data: read in place where the master says it lies, if
        // it is on this node (a one-sided get through shared memory); else
        // streamed and folded segment by segment as it arrives, if the value
        // can (unless a test holds this rank before its fold).
        let mut view = None;
        if task.source == DataSource::Data && !task.restore {
            let from = Rank(task.provider);
            view = task.direct.as_ref().and_then(|d| self.view(from, d));
            let held = hooks::armed(&self.hooks, self.rank.0, Point::BeforeFold, &local.join.id);
            if view.is_none() && !held && task.more.is_empty() {
                match self.start_pieces(task, from, ctx) {
                    None => return,
                    Some(t) => task = t,
                }
            }
        }
        let (from, bkey) = match &task.source {
            DataSource::Data => (Rank(task.provider), key),
            DataSource::Original => (Rank(task.provider), original_key(key)),
            DataSource::Replica { holder } => (Rank(*holder), replica_key(key, task.provider)),
            DataSource::Disk { .. } => (Rank(task.provider), 0),
        };
        let restore = if task.restore {
            self.restore_original(key)
        } else {
            None
        };
        // Read now, where their holders said: one that cannot be read is
        // left out (reported without it, it is scheduled again).
        let more: Vec<(RankSet, Received)> = task
            .more
            .iter()
            .filter_map(|g| Some((g.path.clone(), self.view(Rank(g.provider), &g.direct)?)))
            .collect();
        let fetch = match (&task.source, view) {
            // A dead rank's disk copy: read it from its directory.
            (DataSource::Disk { dir }, _) => read_disk_copy(dir, key, task.provider),
            // Read in place (above).
            (_, Some(view)) => Box::pin(async move { Ok(view) }),
            // Else asked for: a same-node peer's data may still come back
            // as a view of its memory (a loan), read in place too.
            (_, None) => self.get(from, BufferKey(bkey)),
        };
        let started = Instant::now();
        let task2 = task.clone();
        let fut = async move {
            let restored = match restore {
                None => None,
                Some(h) => Some(h.await.map_err(|e| e.to_string()).and_then(|r| r)),
            };
            (restored, fetch.await)
        };
        let handle = ctx.spawn(fut.into_actor(self).map(move |(restored, data), act, ctx| {
            let f = Fetched {
                task: task2,
                more,
                life,
                restored,
                data,
                started,
            };
            act.fetched(f, ctx);
        }));
        if let Some(local) = self.locals.get_mut(&key) {
            local.fetch = Some(Fetching {
                task,
                from,
                handle,
                pieces: None,
            });
        }
    }

    /// A view of `from`'s data where `at` says it lies in its shared heap.
    fn view(&self, from: Rank, at: &taskfold_transports::Locator) -> Option<Received> {
        self.out.transport().same_node()?.view(from, at)
    }

    /// Asks `from` for its buffer `key` (a same-node peer may lend a view
    /// of its memory).
    fn get(&self, from: Rank, key: BufferKey) -> taskfold_transports::GetFuture {
        self.out.transport().get(from, key)
    }

    /// Reloads `key`'s own original for a task that restores it: reads the
    /// local disk first, then the copy in memory; both are verified against
    /// the checksum.
    fn restore_original(
        &self,
        key: u64,
    ) -> Option<actix_rt::task::JoinHandle<Result<Box<dyn ReduceValue>, String>>> {
        let local = self.locals.get(&key)?;
        // Without durability no disk copy was written: the one in memory.
        let disk = local.state.keeps_original().then(|| self.disk.clone());
        let (rank, decode, mem) = (self.rank.0, local.decode, local.original.clone());
        Some(actix_rt::task::spawn_blocking(move || {
            let buf = match disk.map(|d| d.read(key, rank)) {
                Some(Ok(b)) => b,
                read => {
                    if let Some(Err(e)) = read {
                        tracing::warn!(rank, error = %e, "local replica unreadable; using the copy in memory");
                    }
                    let b = mem.ok_or("no copy of the original is left")?;
                    replica::original_payload(&b).map_err(|e| e.to_string())?;
                    b
                }
            };
            decode(&buf[HEADER_LEN..]).map_err(|e| e.to_string())
        }))
    }

    fn fetched(&mut self, f: Fetched, ctx: &mut Context<Self>) {
        let task = f.task;
        tracing::debug!(rank = %self.rank, key = task.key, task_id = task.task_id, ok = f.data.is_ok(), "fetched");
        let Some(local) = self.local_of(task.key, f.life) else {
            // Its reduction ended; the key may be a later one's now, with
            // a task of the same id (their ids start at 0 in each).
            return;
        };
        if !local.state.fetched(task.task_id) {
            // The fetch was cancelled (its source was declared failed) and
            // its failure already reported: the master has rescheduled the
            // task. actix may still run a cancelled future that completed in
            // the same turn; folding its data now would do the task twice.
            return;
        }
        local.fetch = None;
        let restored = match f.restored {
            None => false,
            Some(Ok(v)) => {
                local.value = Some(v);
                local.state.restored(task.task_id);
                true
            }
            Some(Err(e)) => {
                let e = FoldError::Corrupt(format!("own original: {e}"));
                return self.task_failed(&task, TaskFailure::Fold((&e).into()));
            }
        };
        match f.data {
            Ok(buf) => self.fold_fetched(task, buf, f.more, f.started, ctx),
            Err(e) => {
                if restored {
                    self.serve_restored(task.key);
                }
                self.task_failed(&task, fetch_failure(&e))
            }
        }
    }

    /// A task reloaded this rank's own original, then its fetch failed:
    /// the value is that original alone, as the master hears (a reloaded
    /// value is what a rank whose data was taken and lost holds), and it
    /// is served as this rank's data, as any held value is. Unserved, a
    /// master that names this rank a provider next (this one, or a
    /// standby from its report) sees every get of it fail.
    fn serve_restored(&mut self, key: u64) {
        let Some(l) = self.locals.get(&key) else {
            return;
        };
        if l.state.setup().root {
            return;
        }
        // A reloaded original is decoded native: encoded here (a rare
        // recovery path, on the actor's thread).
        let bytes = l.value.as_ref().and_then(|v| {
            v.encoded()
                .or_else(|| v.encode().ok().map(taskfold_core::pool::bytes))
        });
        if let Some(b) = bytes {
            self.out.transport().expose(BufferKey(key), b);
        }
    }
}

/// The union of a task's providers' paths, the further ones' included;
/// `None` if two of them overlap.
fn providers_path(task: &Task) -> Option<RankSet> {
    task.more
        .iter()
        .try_fold(task.provider_path.clone(), |acc, g| {
            acc.is_disjoint(&g.path).then(|| acc.union(&g.path))
        })
}

/// How a task whose get failed with `e` failed, for the master.
pub(super) fn fetch_failure(e: &TransportError) -> TaskFailure {
    let peer_down = matches!(
        e,
        TransportError::LinkDown { .. } | TransportError::NoSuchRank(_)
    );
    TaskFailure::Fetch {
        reason: e.to_string(),
        peer_down,
    }
}

/// Reads `owner`'s disk copy of `key`'s original from the directory `dir`
/// (the owner is dead), off the actor's thread.
fn read_disk_copy(dir: &str, key: u64, owner: u32) -> taskfold_transports::GetFuture {
    let dir = std::path::PathBuf::from(dir);
    let read = actix_rt::task::spawn_blocking(move || {
        ReplicaDisk::read_other(&dir, key, owner)
            .map(|b| Received::Owned(taskfold_transports::recv_buf_from(&b)))
    });
    Box::pin(async move {
        read.await
            .map_err(|e| e.to_string())
            .and_then(|r| r)
            .map_err(|detail| TransportError::Protocol {
                peer: owner,
                detail,
            })
    })
}
