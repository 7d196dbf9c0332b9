//! Tasks whose data is streamed (another node, or no same-node reads):
//! each segment of the provider's data is folded on the fold pool as soon
//! as it arrives, while the transport reads the next one, so that fetch and
//! fold overlap (see `taskfold_core::pieces`).
//!
//! The fold writes into a new buffer: until every segment is in, the
//! receiver's value is unchanged, and a transfer that fails half-way gives
//! it back intact (the master then reschedules the task).
//! Exactly one of three parties ends a piecewise task: the last segment's
//! job, the end of the get, or the cancellation of the fetch when its
//! provider is declared failed.
//!
//! What a crash loses: nothing more than a whole fetch would. The
//! receiver's value sits in the shared state while segments arrive; a crash
//! of the receiver loses it as it would lose its value anyway.

use super::fold::Folded;
use super::{Fetching, Worker};
use crate::pool::Submitter;
use actix::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use taskfold_core::pieces::PieceFold;
use taskfold_core::wire::{DataSource, Task};
use taskfold_core::{FoldError, Rank, ReduceValue};
use taskfold_transports::{BufferKey, Segment, TransportError};

/// What the segments' jobs, the get and a cancellation share.
pub(crate) struct PieceJob {
    /// The fold; taken by whoever ends the task.
    fold: Option<Box<dyn PieceFold>>,
    /// The first segment that could not be folded.
    error: Option<FoldError>,
    /// Segments handed over by the transport, and folded (or skipped).
    handed: usize,
    processed: usize,
    /// How the get ended, once it did.
    ended: Option<Result<(), TransportError>>,
}

/// Shared by the jobs of one piecewise task.
pub(crate) type Shared = Arc<Mutex<PieceJob>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, PieceJob> {
    // Every update is a few assignments: consistent after any panic.
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a piecewise task ended.
enum Outcome {
    /// Every segment folded: the new value.
    Folded(Box<dyn ReduceValue>),
    /// The segments did not make an archive like the value's (corrupt or
    /// mismatched data): the unchanged value.
    Refused(Box<dyn ReduceValue>, FoldError),
    /// The get failed: the unchanged value.
    Failed(Box<dyn ReduceValue>, TransportError),
}

/// A piecewise task ended (sent by whoever ended it).
#[derive(Message)]
#[rtype(result = "()")]
struct PiecesDone {
    task: Task,
    /// The reduction's life ([`super::Local::life`]).
    life: u64,
    started: Instant,
    bytes: u64,
    outcome: Outcome,
}

impl PieceJob {
    /// If the get ended and every handed segment was processed, takes the
    /// fold and ends the task (once).
    fn end(&mut self) -> Option<Outcome> {
        let ended = self.ended.as_ref()?;
        if self.processed < self.handed {
            return None;
        }
        let fold = self.fold.take()?;
        Some(match (ended, self.error.take()) {
            (Err(e), _) => Outcome::Failed(fold.abort(), e.clone()),
            (Ok(()), Some(e)) => Outcome::Refused(fold.abort(), e),
            (Ok(()), None) => match fold.finish() {
                Ok(v) => Outcome::Folded(v),
                Err((v, e)) => Outcome::Refused(v, e),
            },
        })
    }
}

impl Worker {
    /// Starts `task` piecewise if it fetches a provider's data and this
    /// rank's value can fold in pieces; gives the task back otherwise
    /// (`Some`).
    pub(super) fn start_pieces(
        &mut self,
        task: Task,
        from: Rank,
        ctx: &mut Context<Self>,
    ) -> Option<Task> {
        let key = task.key;
        let Some(local) = self.locals.get_mut(&key) else {
            return Some(task);
        };
        if task.restore || task.source != DataSource::Data {
            return Some(task);
        }
        let Some(value) = local.value.take() else {
            return Some(task);
        };
        let fold = match value.fold_pieces() {
            Ok(f) => f,
            Err(v) => {
                local.value = Some(v);
                return Some(task);
            }
        };
        let bytes = fold.len() as u64;
        let shared: Shared = Arc::new(Mutex::new(PieceJob {
            fold: Some(fold),
            error: None,
            handed: 0,
            processed: 0,
            ended: None,
        }));
        let end = Ending {
            addr: ctx.address(),
            life: local.life,
            task: task.clone(),
            started: Instant::now(),
            bytes,
            rank: self.rank.0.to_string(),
        };
        // A test may hold the transport's thread after the first segment.
        let mut hold = crate::hooks::hold_blocking(
            &self.hooks,
            self.rank.0,
            crate::hooks::Point::MidGet,
            &local.join.id,
        );
        let sink = {
            let (shared, pool, end) = (shared.clone(), self.pool.submitter(), end.clone());
            move |seg: Segment| {
                lock(&shared).handed += 1;
                pool_fold(&pool, shared.clone(), seg, end.clone());
                if let Some(hold) = hold.take() {
                    hold();
                }
            }
        };
        let get = self
            .out
            .transport()
            .get_segments(from, BufferKey(key), Box::new(sink));
        let s2 = shared.clone();
        let handle = ctx.spawn(get.into_actor(self).map(move |res, _act, ctx| {
            let done = {
                let mut j = lock(&s2);
                j.ended = Some(res);
                j.end()
            };
            if let Some(outcome) = done {
                ctx.notify(end.done(outcome));
            }
        }));
        if let Some(local) = self.locals.get_mut(&key) {
            local.fetch = Some(Fetching {
                task,
                from,
                handle,
                pieces: Some(shared),
            });
        }
        None
    }

    /// Takes the piece fold (and with it the value) from its jobs, unless
    /// the job that ends it has it already.
    pub(super) fn take_pieces(shared: &Shared) -> Option<Box<dyn PieceFold>> {
        lock(shared).fold.take()
    }
}

/// What ends a piecewise task, wherever it ends.
#[derive(Clone)]
struct Ending {
    addr: Addr<Worker>,
    task: Task,
    life: u64,
    started: Instant,
    bytes: u64,
    /// This rank, as the metrics' label.
    rank: String,
}

impl Ending {
    fn done(self, outcome: Outcome) -> PiecesDone {
        PiecesDone {
            task: self.task,
            life: self.life,
            started: self.started,
            bytes: self.bytes,
            outcome,
        }
    }
}

/// Folds one segment on the pool; the job that folds the last one after
/// the get ended ends the task.
fn pool_fold(pool: &Submitter, shared: Shared, seg: Segment, end: Ending) {
    pool.submit(move || {
        let done = {
            let mut j = lock(&shared);
            let j = &mut *j;
            if let (Some(fold), None) = (j.fold.as_mut(), &j.error) {
                let wrong_total = seg.total != fold.len();
                let r = if wrong_total {
                    Err(FoldError::Mismatch {
                        mine: fold.len() as u64,
                        theirs: seg.total as u64,
                    })
                } else {
                    fold.piece(seg.offset, &seg.bytes)
                };
                match r {
                    Ok(()) => {
                        metrics::counter!(crate::metrics::FOLD_SEGMENTS, "rank" => end.rank.clone())
                            .increment(1)
                    }
                    Err(e) => j.error = Some(e),
                }
            }
            j.processed += 1;
            j.end()
        };
        taskfold_core::pool::give(seg.bytes);
        if let Some(outcome) = done {
            let addr = end.addr.clone();
            addr.do_send(end.done(outcome));
        }
    });
}

impl Handler<PiecesDone> for Worker {
    type Result = ();

    fn handle(&mut self, m: PiecesDone, ctx: &mut Context<Self>) {
        let key = m.task.key;
        let Some(local) = self.local_of(key, m.life) else {
            return; // ended meanwhile (the key may be a later one's now)
        };
        if !local.state.fetched(m.task.task_id) {
            return; // cancelled: the value was given back then
        }
        local.fetch = None;
        let (value, result) = match m.outcome {
            Outcome::Folded(value) => (value, Ok(())),
            Outcome::Refused(value, e) => (value, Err(e)),
            Outcome::Failed(value, e) => {
                local.value = Some(value);
                return self.task_failed(&m.task, super::task::fetch_failure(&e));
            }
        };
        let folded = Folded {
            task: m.task,
            life: m.life,
            value,
            result,
            started: m.started,
            bytes: m.bytes,
        };
        self.handle(folded, ctx);
    }
}
