//! The worker's messages, one type each, and their handlers.

use super::{Local, Worker};
use crate::future::Slot;
use crate::perf::TaskTimed;
use actix::prelude::*;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;
use taskfold_core::wire::{Join, Msg, Ready, Task, TaskDone, TaskFailed, TaskFailure};
use taskfold_core::{FoldError, Rank, RankSet, ReduceError, ReduceValue};
use taskfold_transports::{BufferKey, RecvBuf, TransportError};

/// The application started a reduction (sent by `Runtime::reduce`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StartReduce {
    pub(crate) key: u64,
    pub(crate) join: Join,
    pub(crate) index: usize,
    pub(crate) value: Box<dyn ReduceValue>,
    pub(crate) slot: Arc<Slot>,
}

impl Handler<StartReduce> for Worker {
    type Result = ();

    fn handle(&mut self, m: StartReduce, ctx: &mut Context<Self>) {
        let is_root = m.join.root == self.rank.0;
        let local = Local {
            join: m.join,
            value: None,
            path: RankSet::single(m.index),
            slot: m.slot,
            is_root,
        };
        self.locals.insert(m.key, local);
        // Expose `O_i` before announcing it: the master may hand out a task
        // that fetches it as soon as the ready message arrives.
        self.prepare(m.key, m.value, None, ctx);
    }
}

/// Data of `key` became ready (after joining or after a task): serialised
/// and exposed if another rank may fetch it, then announced to the master.
#[derive(Message)]
#[rtype(result = "()")]
struct Prepared {
    key: u64,
    value: Box<dyn ReduceValue>,
    encoded: Option<Result<Bytes, FoldError>>,
    done: Option<TaskDone>,
}

impl Worker {
    fn prepare(
        &mut self,
        key: u64,
        value: Box<dyn ReduceValue>,
        done: Option<TaskDone>,
        ctx: &mut Context<Self>,
    ) {
        let is_root = self.locals.get(&key).is_some_and(|l| l.is_root);
        if is_root {
            // The root always receives (DESIGN.md §1 step 4): its data is
            // never fetched, so it is never serialised.
            ctx.notify(Prepared {
                key,
                value,
                encoded: None,
                done,
            });
            return;
        }
        let addr = ctx.address();
        self.pool.submit(move || {
            let encoded = value.encode().map(Bytes::from_owner);
            addr.do_send(Prepared {
                key,
                value,
                encoded: Some(encoded),
                done,
            });
        });
    }
}

impl Handler<Prepared> for Worker {
    type Result = ();

    fn handle(&mut self, m: Prepared, _: &mut Context<Self>) {
        let rank = self.rank;
        let Some(local) = self.locals.get_mut(&m.key) else {
            return; // ended meanwhile (e.g. failed elsewhere)
        };
        if let Some(encoded) = m.encoded {
            match encoded {
                Ok(bytes) => self.out.transport().expose(BufferKey(m.key), bytes),
                Err(error) => {
                    let error = ReduceError::Fold {
                        id: local.join.id.clone(),
                        error,
                    };
                    self.finish(m.key, Some(error));
                    return;
                }
            }
        }
        local.value = Some(m.value);
        let join = if m.done.is_none() {
            Some(local.join.clone())
        } else {
            None
        };
        let ready = Msg::Ready(Ready {
            key: m.key,
            rank: rank.0,
            path: local.path.clone(),
            join,
            done: m.done,
        });
        self.to_master(&ready);
    }
}

/// A task from the master: fetch the provider's data and fold it into ours.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct TaskIn(pub(crate) Task);

impl Handler<TaskIn> for Worker {
    type Result = ();

    fn handle(&mut self, TaskIn(task): TaskIn, ctx: &mut Context<Self>) {
        let key = task.key;
        let value = self.locals.get_mut(&key).and_then(|l| {
            (l.path == task.receiver_path)
                .then(|| l.value.take())
                .flatten()
        });
        let Some(value) = value else {
            tracing::warn!(rank = %self.rank, key, "task for data this rank does not hold");
            self.to_master(&Msg::TaskFailed(TaskFailed {
                key,
                task_id: task.task_id,
                reason: TaskFailure::Unknown,
            }));
            return;
        };
        let started = Instant::now();
        let fetch = self
            .out
            .transport()
            .get(Rank(task.provider), BufferKey(key));
        ctx.spawn(fetch.into_actor(self).map(move |res, act, ctx| {
            act.fetched(task, value, started, res, ctx);
        }));
    }
}

/// A fold finished on the pool.
#[derive(Message)]
#[rtype(result = "()")]
struct Folded {
    task: Task,
    value: Box<dyn ReduceValue>,
    result: Result<(), FoldError>,
    started: Instant,
    bytes: u64,
}

impl Worker {
    fn fetched(
        &mut self,
        task: Task,
        value: Box<dyn ReduceValue>,
        started: Instant,
        res: Result<RecvBuf, TransportError>,
        ctx: &mut Context<Self>,
    ) {
        match res {
            Ok(buf) => {
                let addr = ctx.address();
                self.pool.submit(move || {
                    let mut value = value;
                    // Fold in place from the receive buffer: the peer's
                    // archive is validated and read, never deserialised.
                    let result = value.fold_bytes(&buf);
                    let bytes = buf.len() as u64;
                    drop(buf);
                    addr.do_send(Folded {
                        task,
                        value,
                        result,
                        started,
                        bytes,
                    });
                });
            }
            Err(e) => {
                if let Some(l) = self.locals.get_mut(&task.key) {
                    l.value = Some(value);
                }
                self.to_master(&Msg::TaskFailed(TaskFailed {
                    key: task.key,
                    task_id: task.task_id,
                    reason: TaskFailure::Fetch(e.to_string()),
                }));
            }
        }
    }
}

impl Handler<Folded> for Worker {
    type Result = ();

    fn handle(&mut self, m: Folded, ctx: &mut Context<Self>) {
        let key = m.task.key;
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        if let Err(error) = m.result {
            local.value = Some(m.value);
            self.to_master(&Msg::TaskFailed(TaskFailed {
                key,
                task_id: m.task.task_id,
                reason: TaskFailure::Fold(error),
            }));
            return;
        }
        local.path = local.path.union(&m.task.provider_path);
        let nanos = m.started.elapsed().as_nanos() as u64;
        self.perf.do_send(TaskTimed {
            nanos,
            bytes: m.bytes,
        });
        let done = TaskDone {
            task_id: m.task.task_id,
            nanos,
            bytes: m.bytes,
        };
        self.prepare(key, m.value, Some(done), ctx);
    }
}

/// The master says our data of `key` was consumed.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReleaseIn {
    pub(crate) key: u64,
}

impl Handler<ReleaseIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: ReleaseIn, _: &mut Context<Self>) {
        self.out.transport().withdraw(BufferKey(m.key));
        if let Some(l) = self.locals.get_mut(&m.key) {
            l.value = None;
        }
    }
}

/// The master says reduction `key` ended.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CompleteIn {
    pub(crate) key: u64,
    pub(crate) error: Option<ReduceError>,
}

impl Handler<CompleteIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: CompleteIn, _: &mut Context<Self>) {
        self.finish(m.key, m.error);
    }
}

/// The link to a peer broke.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PeerDown {
    pub(crate) peer: Rank,
    pub(crate) reason: String,
}

impl Handler<PeerDown> for Worker {
    type Result = ();

    fn handle(&mut self, m: PeerDown, _: &mut Context<Self>) {
        if m.peer == Rank(0) && self.rank != Rank(0) {
            let error = ReduceError::MasterLost(m.reason);
            self.fail_all(error.clone());
            for tx in self.finalize.drain(..) {
                let _ = tx.send(Err(error.clone()));
            }
        }
    }
}

/// The application shuts the runtime down: tell the master and wait for
/// every rank (replied through `reply`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct FinalizeReq {
    pub(crate) reply: flume::Sender<Result<(), ReduceError>>,
}

impl Handler<FinalizeReq> for Worker {
    type Result = ();

    fn handle(&mut self, m: FinalizeReq, _: &mut Context<Self>) {
        self.finalize.push(m.reply);
        self.to_master(&Msg::Finalize);
    }
}

/// Every rank finalized.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct FinalizeAckIn;

impl Handler<FinalizeAckIn> for Worker {
    type Result = ();

    fn handle(&mut self, _: FinalizeAckIn, _: &mut Context<Self>) {
        for tx in self.finalize.drain(..) {
            let _ = tx.send(Ok(()));
        }
    }
}
