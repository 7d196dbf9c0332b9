//! Serialising a contribution's data (after the start, and after each
//! fold) and handing it back to the actor: [`Prepared`], which goes on to
//! the join (see `join.rs`) or to the task's report (see `fold.rs`).

use super::Worker;
use actix::prelude::*;
use bytes::Bytes;
use taskfold_core::replica::{self, HEADER_LEN};
use taskfold_core::{FoldError, ReduceError, ReduceValue};

/// Data of `key` became ready (after joining or after a task): serialised
/// and exposed if another rank may fetch it, then announced to the master.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Prepared {
    key: u64,
    /// The reduction's life ([`super::Local::life`]).
    life: u64,
    value: Box<dyn ReduceValue>,
    encoded: Option<Result<Bytes, FoldError>>,
    done: Option<Finished>,
}

/// A task this rank finished: its id and timing, for the master.
pub(super) struct Finished {
    pub(super) task_id: u64,
    pub(super) nanos: u64,
    pub(super) bytes: u64,
}

impl Worker {
    /// Serialises `key`'s data (`done`: after a task; else the first time,
    /// as the original) and hands it back as [`Prepared`], inline if small,
    /// else from the fold pool.
    pub(super) fn prepare(
        &mut self,
        key: u64,
        value: Box<dyn ReduceValue>,
        done: Option<Finished>,
        ctx: &mut Context<Self>,
    ) {
        let Some(local) = self.locals.get(&key) else {
            return; // ended meanwhile
        };
        let life = local.life;
        if local.state.setup().root {
            // The root always receives (the master pairs it as the
            // receiver of every task it takes part in): its data is never
            // fetched, so it is never serialised (and, since losing the
            // root is unrecoverable anyway, never replicated).
            return ctx.notify(Prepared {
                key,
                life,
                value,
                encoded: None,
                done,
            });
        }
        if let Some(bytes) = value.encoded() {
            // Held as an archive (a fold into the receive buffer): served
            // as it is, with no encoding and no trip to the pool.
            return ctx.notify(Prepared {
                key,
                life,
                value,
                encoded: Some(Ok(bytes)),
                done,
            });
        }
        // An original that is never copied needs no checksum (a pass over
        // the data): its header says so, and nothing will accept it as a
        // replica.
        let checksum = local.state.keeps_original();
        let header = done.is_none().then(|| Header {
            checksum,
            // An original that its buddy on this node will view in place
            // (see `Worker::serialised`) is not copied either: its header
            // names it with a tag instead of a checksum (a pass over the
            // data, on the way to the join). If it ends up with a disk
            // copy after all, that copy gets its checksum then.
            viewed: checksum && self.viewing_buddy(key).is_some(),
            tag: replica::view_tag(key, self.rank.0),
        });
        // From now on this rank only folds and serves the value (it is not
        // the root): it holds the original's archive if it can, and the
        // native value is freed.
        let value = match header {
            Some(h) => match self.prepare_wire_form(key, life, value, h, ctx) {
                Some(value) => value,
                None => return,
            },
            None => value,
        };
        self.encode(key, life, value, header, done, ctx);
    }

    /// An array built in its wire form gives up its buffer at no cost: only
    /// a checksum, if any, is work for the pool. Gives the value back if it
    /// is not one.
    fn prepare_wire_form(
        &mut self,
        key: u64,
        life: u64,
        value: Box<dyn ReduceValue>,
        h: Header,
        ctx: &mut Context<Self>,
    ) -> Option<Box<dyn ReduceValue>> {
        let (buf, hold) = match value.into_encoded(HEADER_LEN) {
            Ok(parts) => parts,
            Err(value) => return Some(value),
        };
        let buf_len = buf.len();
        let viewed = h.viewed && super::locate(self.out.transport(), &buf).is_some();
        let job = move || {
            let (shared, bytes) = h.seal(buf, viewed);
            Prepared {
                key,
                life,
                value: hold(shared, HEADER_LEN),
                encoded: Some(Ok(bytes)),
                done: None,
            }
        };
        if !h.checksum || viewed || original_inline(buf_len) {
            let m = job();
            self.handle(m, ctx);
        } else {
            let addr = ctx.address();
            self.pool.submit(move || addr.do_send(job()));
        }
        None
    }

    /// Encodes `value`: as the original, in a replica buffer (`header`),
    /// or as the data a task made.
    fn encode(
        &mut self,
        key: u64,
        life: u64,
        value: Box<dyn ReduceValue>,
        header: Option<Header>,
        done: Option<Finished>,
        ctx: &mut Context<Self>,
    ) {
        let small = inline(value.encoded_len_hint());
        let t = self.out.transport().clone();
        let job = move || {
            let (value, encoded) = match header {
                Some(h) => match value.encode_after(HEADER_LEN) {
                    Ok(buf) => {
                        let viewed = h.viewed && super::locate(&t, &buf).is_some();
                        let (shared, bytes) = h.seal(buf, viewed);
                        (value.into_archived(shared, HEADER_LEN), Ok(bytes))
                    }
                    Err(e) => (value, Err(e)),
                },
                None => {
                    let encoded = value.encode().map(taskfold_core::pool::bytes);
                    (value, encoded)
                }
            };
            Prepared {
                key,
                life,
                value,
                encoded: Some(encoded),
                done,
            }
        };
        if small {
            let m = job();
            self.handle(m, ctx);
        } else {
            let addr = ctx.address();
            self.pool.submit(move || addr.do_send(job()));
        }
    }
}

/// How an original's replica header is written.
#[derive(Clone, Copy)]
struct Header {
    /// With a checksum (it may be copied).
    checksum: bool,
    /// Its buddy on this node may view it in place (if it lies in the
    /// shared heap): with a tag instead of a checksum.
    viewed: bool,
    /// That tag.
    tag: u32,
}

impl Header {
    /// The original, as a replica buffer: header, then archive. The value
    /// is held in the same buffer (no copy), and folds into it in place
    /// once nothing else refers to it. `viewed`: it lies in the heap its
    /// buddy views.
    fn seal(
        self,
        mut buf: taskfold_core::reducer::EncodedBuf,
        viewed: bool,
    ) -> (taskfold_core::pool::SharedBuf, Bytes) {
        let (head, payload) = buf.split_at_mut(HEADER_LEN);
        if viewed {
            replica::write_view_header(head, payload, self.tag);
        } else if self.checksum {
            replica::write_header(head, payload);
        } else {
            replica::write_unchecked_header(head, payload);
        }
        let shared = taskfold_core::pool::SharedBuf::new(buf);
        let bytes = shared.bytes();
        (shared, bytes)
    }
}

impl Handler<Prepared> for Worker {
    type Result = ();

    fn handle(&mut self, m: Prepared, ctx: &mut Context<Self>) {
        let key = m.key;
        let Some(local) = self.local_of(key, m.life) else {
            // Ended meanwhile (e.g. failed elsewhere), and the key may
            // belong to a later reduction now.
            return;
        };
        let bytes = match m.encoded {
            None => None,
            Some(Ok(b)) => Some(b),
            Some(Err(error)) => {
                let error = ReduceError::Fold {
                    id: local.join.id.clone(),
                    error,
                };
                return self.finish(key, Some(error));
            }
        };
        local.value = Some(m.value);
        match m.done {
            Some(done) => self.report(key, bytes, done),
            None => self.serialised(key, bytes, ctx),
        }
    }
}

/// Values up to this size are serialised and folded on the actor's own
/// thread: two thread hops (to the pool and back) cost more than the work,
/// which takes tens of microseconds at this size.
const INLINE_BYTES: usize = 256 << 10;

/// Whether work on `len` bytes runs inline (0 means unknown: not inline).
fn inline(len: usize) -> bool {
    len > 0 && len <= INLINE_BYTES
}

/// Originals up to this size (replica header and archive included, so a
/// 4 MiB array itself is just over it) have their checksum computed and
/// their disk copy written on the actor's own thread: crc32fast runs at
/// about 30 GB/s here (about 36 µs for 2 MiB) and a copy into the page
/// cache of a recycled file took about 60 µs for 2 MiB and 0.5 ms for
/// 8 MiB, less at the small end than the two thread hops to the pool or a
/// blocking thread and back cost on a busy node; the join waits for both
/// either way. Larger ones go elsewhere, so that control messages are not
/// held up.
const ORIGINAL_INLINE_BYTES: usize = 4 << 20;

/// Whether the checksum and the disk copy of an original of `len` bytes
/// are made inline.
pub(crate) fn original_inline(len: usize) -> bool {
    len <= ORIGINAL_INLINE_BYTES
}
