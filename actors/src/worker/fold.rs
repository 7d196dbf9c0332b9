//! Folding a task's fetched data into this rank's value, and reporting the
//! new data to the master.

use super::prepare::Finished;
use super::Worker;
use crate::hooks::{self, Point};
use crate::perf::TaskTimed;
use actix::prelude::*;
use bytes::Bytes;
use std::time::Instant;
use taskfold_core::reducer::FoldInto;
use taskfold_core::replica::{self, HEADER_LEN};
use taskfold_core::wire::{DataSource, Msg, Task, TaskDone, TaskFailure};
use taskfold_core::{FoldError, RankSet, ReduceValue};
use taskfold_transports::{BufferKey, Received};

impl Worker {
    /// Folds task `task`'s data `buf` into this rank's value: inline if
    /// small, else on the fold pool ([`Folded`] either way).
    pub(super) fn fold_fetched(
        &mut self,
        mut task: Task,
        buf: Received,
        more: Vec<(RankSet, Received)>,
        started: Instant,
        ctx: &mut Context<Self>,
    ) {
        let key = task.key;
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        let offset = if task.source == DataSource::Data {
            0
        } else {
            HEADER_LEN
        };
        let Some(value) = local.value.take() else {
            return self.task_failed(&task, TaskFailure::Unknown);
        };
        let life = local.life;
        let point = if more.is_empty() {
            Point::BeforeFold
        } else {
            Point::BeforeGatheredFold
        };
        let hold = hooks::hold(&self.hooks, self.rank.0, point, &local.join.id);
        let is_root = local.state.setup().root;
        if !is_root && matches!(buf, Received::Shared(_)) {
            // Folding from a view writes into our own value: it can do so
            // in place only if no one else holds its bytes. No one should
            // fetch them while this rank receives (the master schedules a
            // rank in one task at a time), and they are exposed again,
            // folded, before the next report.
            self.out.transport().withdraw(BufferKey(key));
        }
        let small = fold_inline(buf.len());
        let from_owner = task.source == DataSource::Original;
        let job = move || {
            let mut bytes = buf.len() as u64;
            let (mut value, mut result) = fold(value, buf, offset, from_owner, is_root);
            // The further providers' data, read in place (each small): the
            // task's provider path then names every one folded.
            for (path, view) in more {
                if result.is_err() {
                    break;
                }
                result = value.fold_bytes(&view);
                bytes += view.len() as u64;
                task.provider_path = task.provider_path.union(&path);
            }
            Folded {
                task,
                life,
                value,
                result,
                started,
                bytes,
            }
        };
        let addr = ctx.address();
        match hold {
            None if small => {
                let m = job();
                self.handle(m, ctx);
            }
            None => self.pool.submit(move || addr.do_send(job())),
            Some(wait) => {
                ctx.spawn(
                    wait.into_actor(self)
                        .map(move |_, act, _| act.pool.submit(move || addr.do_send(job()))),
                );
            }
        }
    }

    /// Task `done`'s new data of `key` is serialised (`bytes`; `None` at
    /// the root): exposed, and reported to the master. The root whose value
    /// became whole ends the reduction here.
    pub(super) fn report(&mut self, key: u64, bytes: Option<Bytes>, done: Finished) {
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        let t = self.out.transport();
        let direct = bytes.and_then(|b| {
            let direct = super::locate(t, &b);
            t.expose(BufferKey(key), b);
            direct
        });
        let whole = local.state.reported(done.task_id);
        // A task of a dead master: its new data is in this rank's report
        // to the new master instead.
        let old = self.settle_old_task(key, done.task_id);
        let Some(local) = self.locals.get(&key) else {
            return;
        };
        let msg = Msg::TaskDone(TaskDone {
            key,
            rank: self.rank.0,
            task_id: done.task_id,
            path: local.state.path().clone(),
            nanos: done.nanos,
            bytes: done.bytes,
            direct,
        });
        if whole && self.keeps_result(key) {
            // Its report waits until the result's copy is settled; a dead
            // master's task has none to send (this rank's report to the
            // new master holds it), but its result is kept all the same.
            return self.keep_result(key, (!old).then_some(msg));
        }
        if !old {
            self.to_master(&msg);
        }
        if whole {
            // The root holds every original, each folded once (its path
            // is the union of disjoint paths, checked at every task): the
            // result is final. The application has it now, two messages
            // sooner than the master's completion notice, which is still
            // what ends the reduction everywhere else.
            self.ended_early.insert(key);
            self.finish(key, None);
        }
    }
}

/// Folds of fetched data up to this size run on the actor's own thread.
///
/// Why larger than the serialising threshold: a fold of a few MiB runs at
/// memory speed, while handing it to the fold thread and the result back
/// costs two thread wake-ups, each tens to hundreds of microseconds on a
/// node whose cores are all busy (the book's Architecture chapter, The
/// actors, gives the measurement). The actor is busy meanwhile, so larger
/// folds still go to the fold thread: control messages are not held up
/// for longer than a fold of this size takes.
const FOLD_INLINE_BYTES: usize = 4 << 20;

/// Whether a fold of `len` fetched bytes runs inline.
fn fold_inline(len: usize) -> bool {
    len <= FOLD_INLINE_BYTES
}

/// Folds the peer's data in `buf` (its archive at `offset`, after a replica
/// header if `offset` is not 0; `from_owner`: an original served by its
/// live owner, which may carry no checksum) with `value`; returns the
/// result.
///
/// The peer's archive is validated and read in place, never deserialised.
/// A view of a same-node peer's memory is folded into `value` (in place if
/// no one else holds `value`'s bytes) and then returned to its owner. A
/// private copy, on a rank other than the root and for a type that folds
/// archives, has `value` folded into it instead, and the copy becomes the
/// value: it will be served as it is, never serialised (the root keeps a
/// native value for the application).
fn fold(
    mut value: Box<dyn ReduceValue>,
    buf: Received,
    offset: usize,
    from_owner: bool,
    is_root: bool,
) -> (Box<dyn ReduceValue>, Result<(), FoldError>) {
    if offset > 0 {
        // (From a buddy: its copy in memory, checksummed unless it is a
        // view of an original kept in memory, which carries a tag.)
        let checked = if from_owner {
            replica::original_payload(&buf)
        } else {
            replica::verify_held(&buf)
        };
        if let Err(e) = checked {
            return (value, Err(FoldError::Corrupt(e.to_string())));
        }
    }
    let buf = match buf {
        Received::Shared(view) => {
            let result = value.fold_bytes(&view[offset..]);
            return (value, result);
        }
        Received::Owned(buf) => buf,
    };
    let buf = if is_root {
        buf
    } else {
        match value.fold_into(buf, offset) {
            FoldInto::Folded(v) => return (v, Ok(())),
            FoldInto::Failed(v, e) => return (v, Err(e)),
            FoldInto::Unsupported(v, buf) => {
                value = v;
                buf
            }
        }
    };
    let result = value.fold_bytes(&buf[offset..]);
    taskfold_core::pool::give(buf);
    (value, result)
}

/// A fold ended (on the pool, or piecewise).
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Folded {
    pub(super) task: Task,
    /// The reduction's life ([`super::Local::life`]).
    pub(super) life: u64,
    /// The value, folded unless `result` says otherwise.
    pub(super) value: Box<dyn ReduceValue>,
    pub(super) result: Result<(), FoldError>,
    pub(super) started: Instant,
    /// Bytes fetched.
    pub(super) bytes: u64,
}

impl Handler<Folded> for Worker {
    type Result = ();

    fn handle(&mut self, m: Folded, ctx: &mut Context<Self>) {
        let key = m.task.key;
        let Some(local) = self.locals.get_mut(&key).filter(|l| l.life == m.life) else {
            // Its reduction ended; the key may be a later one's now,
            // whose value this one's must not replace.
            return;
        };
        if let Err(error) = m.result {
            if !local.state.setup().root {
                // Serve the (unchanged) value again: a fold from a view
                // withdrew it.
                if let Some(b) = m.value.encoded() {
                    self.out.transport().expose(BufferKey(key), b);
                }
            }
            local.value = Some(m.value);
            return self.task_failed(&m.task, TaskFailure::Fold((&error).into()));
        }
        local.state.folded(m.task.task_id, &m.task.provider_path);
        let nanos = m.started.elapsed().as_nanos() as u64;
        self.perf.do_send(TaskTimed {
            nanos,
            bytes: m.bytes,
        });
        let done = Finished {
            task_id: m.task.task_id,
            nanos,
            bytes: m.bytes,
        };
        self.prepare(key, m.value, Some(done), ctx);
    }
}
