//! The worker's messages for the normal path, one type each, and their
//! handlers: start, prepare (serialise + expose), task (get + fold),
//! release, completion, finalize.

use super::{Fetching, Local, Worker};
use crate::config::Durability;
use crate::future::Slot;
use crate::hooks::{self, Point};
use crate::perf::TaskTimed;
use crate::replica::ReplicaDisk;
use actix::prelude::*;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;
use taskfold_core::reducer::FoldInto;
use taskfold_core::replica::{self, original_key, replica_key, HEADER_LEN};
use taskfold_core::wire::{DataSource, Join, Msg, Ready, Task, TaskDone, TaskFailed, TaskFailure};
use taskfold_core::{FoldError, Group, Rank, RankSet, ReduceError, ReduceValue};
use taskfold_transports::{BufferKey, Received, TransportError};

/// The application started a reduction (sent by `Runtime::reduce`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StartReduce {
    pub(crate) key: u64,
    pub(crate) join: Join,
    pub(crate) group: Group,
    pub(crate) index: usize,
    pub(crate) value: Box<dyn ReduceValue>,
    pub(crate) slot: Arc<Slot>,
    pub(crate) durability: Durability,
}

impl Handler<StartReduce> for Worker {
    type Result = ();

    fn handle(&mut self, m: StartReduce, ctx: &mut Context<Self>) {
        if self.fenced {
            m.slot.fill(Err(ReduceError::Fenced));
            self.live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&m.key);
            return;
        }
        let is_root = m.join.root == self.rank.0;
        let key = m.key;
        if self.locals.get(&key).is_some_and(|l| l.slot.by_board()) {
            // The last reduction with this id: its future took its
            // completion from the master's notice board and gave the id
            // back, and its notice has not come yet. It ended (the master
            // posts only completions): end it here as the notice would,
            // which is dropped when it comes, as after a root's early end.
            self.ended_early.insert(key);
            self.finish(key, None);
        }
        // The notice board may complete this future (a member waiting for
        // the result; see `BoardLink`) unless an earlier reduction with this
        // key may still be posted: one this rank ended early as its root,
        // or whose future took it from the board, until the master's
        // notice of it arrives.
        if !is_root
            && !m.join.early
            && !self.ended_early.contains(&key)
            && !self.locals.contains_key(&key)
        {
            m.slot.arm();
        }
        // About two buffers of its size while it lives: the original kept
        // for recovery and the value folded beside it (the buffer pool may
        // keep that much for the next reductions, see `Config`).
        let hint = m.value.encoded_len_hint();
        let flight = hint.saturating_mul(2);
        taskfold_core::pool::start_flight(flight);
        // More in flight than ever before: the buffers it may need are made
        // now, off the folds' path (each buffer holds an archive after a
        // replica header; see `taskfold_core::pool::reserve`).
        let capacity = hint.saturating_add(HEADER_LEN);
        let ahead = taskfold_core::pool::reserve(capacity);
        self.pool.prefill(ahead, capacity);
        let hold = hooks::hold(&self.hooks, self.rank.0, Point::BeforeJoin, &m.join.id);
        self.locals.insert(
            key,
            Local {
                decode: m.value.decoder(),
                join: m.join,
                group: m.group,
                index: m.index,
                value: None,
                path: RankSet::single(m.index),
                slot: m.slot,
                is_root,
                original: None,
                durability: m.durability,
                buddy: None,
                joined: false,
                disk_written: false,
                disk_copy: false,
                disk_live: Arc::new(std::sync::atomic::AtomicBool::new(true)),
                buddy_acked: false,
                in_memory: false,
                standing: None,
                heap_offered: false,
                direct: None,
                held: None,
                fetch: None,
                flight,
            },
        );
        if let Some(l) = self.locals.get_mut(&key) {
            l.join.disk = if is_root {
                None
            } else {
                self.disk.shared_dir()
            };
        }
        let value = m.value;
        match hold {
            None => self.prepare(key, value, None, ctx),
            Some(wait) => {
                ctx.spawn(
                    wait.into_actor(self)
                        .map(move |_, act, ctx| act.prepare(key, value, None, ctx)),
                );
            }
        }
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
            // never fetched, so it is never serialised (and, since losing
            // the root is unrecoverable anyway, never replicated).
            ctx.notify(Prepared {
                key,
                value,
                encoded: None,
                done,
            });
            return;
        }
        if let Some(bytes) = value.encoded() {
            // Held as an archive (a fold into the receive buffer): served
            // as it is, with no encoding and no trip to the pool.
            ctx.notify(Prepared {
                key,
                value,
                encoded: Some(Ok(bytes)),
                done,
            });
            return;
        }
        let first = done.is_none();
        // An original that is never copied needs no checksum (a pass over
        // the data): its header says so, and nothing will accept it as a
        // replica.
        let checksum = self
            .locals
            .get(&key)
            .is_some_and(|l| l.durability != Durability::Off);
        // An original that its buddy on this node will view in place (see
        // `Prepared`) is not copied either: its header names it with a tag
        // instead of a checksum (a pass over the data, on the way to the
        // join). If it ends up with a disk copy after all, that copy gets
        // its checksum then.
        let viewed_by = self.viewing_buddy(key).filter(|_| checksum);
        let tag = replica::view_tag(key, self.rank.0);
        let small = inline(value.encoded_len_hint());
        // The original, as a replica buffer: header, then archive. The
        // value is held in the same buffer (no copy), and folds into it in
        // place once nothing else refers to it (see `Prepared`).
        let seal = move |mut buf: taskfold_core::reducer::EncodedBuf, viewed: bool| {
            let (head, payload) = buf.split_at_mut(HEADER_LEN);
            if viewed {
                replica::write_view_header(head, payload, tag);
            } else if checksum {
                replica::write_header(head, payload);
            } else {
                replica::write_unchecked_header(head, payload);
            }
            let shared = taskfold_core::pool::SharedBuf::new(buf);
            let bytes = shared.bytes();
            (shared, bytes)
        };
        // From now on this rank only folds and serves the value (it is not
        // the root): it holds the original's archive if it can, and the
        // native value is freed.
        let value = if first {
            // An array built in its wire form gives up its buffer at no
            // cost: only a checksum, if any, is work for the pool.
            match value.into_encoded(HEADER_LEN) {
                Ok((buf, hold)) => {
                    let buf_len = buf.len();
                    let viewed =
                        viewed_by.is_some() && locate(self.out.transport(), &buf).is_some();
                    let job = move || {
                        let (shared, bytes) = seal(buf, viewed);
                        Prepared {
                            key,
                            value: hold(shared, HEADER_LEN),
                            encoded: Some(Ok(bytes)),
                            done,
                        }
                    };
                    if !checksum || viewed || original_inline(buf_len) {
                        let m = job();
                        self.handle(m, ctx);
                    } else {
                        let addr = ctx.address();
                        self.pool.submit(move || addr.do_send(job()));
                    }
                    return;
                }
                Err(value) => value,
            }
        } else {
            value
        };
        let t = self.out.transport().clone();
        let job = move || {
            let (value, encoded) = if first {
                match value.encode_after(HEADER_LEN) {
                    Ok(buf) => {
                        let viewed = viewed_by.is_some() && locate(&t, &buf).is_some();
                        let (shared, bytes) = seal(buf, viewed);
                        (value.into_archived(shared, HEADER_LEN), Ok(bytes))
                    }
                    Err(e) => (value, Err(e)),
                }
            } else {
                let encoded = value.encode().map(taskfold_core::pool::bytes);
                (value, encoded)
            };
            Prepared {
                key,
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

    /// Announces `key`'s contribution to the master.
    pub(super) fn send_join(&mut self, key: u64, replica: Option<Rank>, ctx: &mut Context<Self>) {
        let rank = self.rank;
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        local.joined = true;
        // An original kept in memory, whose copy is the buddy's mapping of
        // this rank's heap.
        let standing = local.standing.take();
        let ready = Msg::Ready(Ready {
            key,
            rank: rank.0,
            path: local.path.clone(),
            join: Some(local.join.clone()),
            done: None,
            replica: replica.map(|r| r.0),
            standing,
            direct: local.direct.take(),
        });
        if let Some(wait) = hooks::hold(&self.hooks, rank.0, Point::AfterJoin, &local.join.id) {
            local.held = Some(Vec::new());
            ctx.spawn(wait.into_actor(self).map(move |_, act, ctx| {
                let tasks = act
                    .locals
                    .get_mut(&key)
                    .and_then(|l| l.held.take())
                    .unwrap_or_default();
                for t in tasks {
                    act.handle(TaskIn(t), ctx);
                }
            }));
        }
        tracing::debug!(rank = %rank, key, "joined");
        self.to_master(&ready);
        if let Some(l) = self.locals.get(&key) {
            let _ = hooks::hold(&self.hooks, rank.0, Point::Joined, &l.join.id);
        }
    }

    /// Offers this rank's original of `key` to its buddy; returns the buddy.
    pub(super) fn offer(&mut self, key: u64) -> Option<Rank> {
        let local = self.locals.get_mut(&key)?;
        local.buddy = None;
        let original = local.original.as_ref()?;
        let buddy = replica::buddy(&local.group, self.rank, &self.dead)?;
        let file = local.disk_copy.then(|| {
            self.disk
                .path(key, self.rank.0)
                .to_string_lossy()
                .into_owned()
        });
        // Without a disk copy to map, a buddy on this node may view the
        // original where it lies in this rank's shared heap.
        let heap = if file.is_none() {
            locate(self.out.transport(), original)
        } else {
            None
        };
        // With one, the buddy still maps this rank's heap (named by the
        // place of its data, with no bytes to read), ahead of the originals
        // it will view there.
        let warm = match heap {
            None => local
                .direct
                .clone()
                .map(|d| taskfold_transports::same_node::heap_of(&d)),
            Some(_) => None,
        };
        local.heap_offered |= heap.is_some();
        let msg = Msg::ReplicaOffer {
            key,
            owner: self.rank.0,
            len: original.len() as u64,
            crc: replica::stored_crc(original).unwrap_or(0),
            node: taskfold_transports::shared_file::node_token(),
            file,
            heap,
            warm,
            // The join waits for the answer, or the answer says whether
            // the buddy is on this node (a refusal is always answered).
            wants_ack: local.waits_for_buddy() || self.same_node_buddy != Some(buddy),
        };
        match self.out.send(buddy, &msg) {
            Ok(_) => {
                tracing::debug!(rank = %self.rank, %buddy, key, "replica offered");
                local.buddy = Some(buddy);
                Some(buddy)
            }
            Err(e) => {
                tracing::warn!(rank = %self.rank, %buddy, error = %e, "cannot offer a replica");
                None
            }
        }
    }
}

impl Handler<Prepared> for Worker {
    type Result = ();

    fn handle(&mut self, m: Prepared, ctx: &mut Context<Self>) {
        let rank = self.rank;
        let key = m.key;
        let Some(local) = self.locals.get_mut(&key) else {
            return; // ended meanwhile (e.g. failed elsewhere)
        };
        let t = self.out.transport().clone();
        let bytes = match m.encoded {
            None => None,
            Some(Ok(b)) => Some(b),
            Some(Err(error)) => {
                let error = ReduceError::Fold {
                    id: local.join.id.clone(),
                    error,
                };
                self.finish(key, Some(error));
                return;
            }
        };
        local.value = Some(m.value);
        if let Some(done) = m.done {
            let direct = bytes.and_then(|b| {
                let direct = locate(&t, &b);
                t.expose(BufferKey(key), b);
                direct
            });
            let ready = Msg::Ready(Ready {
                key,
                rank: rank.0,
                path: local.path.clone(),
                join: None,
                done: Some(done),
                replica: None,
                standing: None,
                direct,
            });
            let whole = local.is_root && local.path.is_full(local.group.len());
            self.to_master(&ready);
            if whole {
                // The root holds every original, each folded once (its path
                // is the union of disjoint paths, checked at every task): the
                // result is final. The application has it now, two messages
                // sooner than the master's completion notice, which is still
                // what ends the reduction everywhere else.
                self.ended_early.insert(key);
                self.finish(key, None);
            }
            return;
        }
        let Some(original) = bytes else {
            return self.send_join(key, None, ctx); // the root
        };
        // Expose `O_i` before announcing it: a task may fetch it as soon as
        // the master has the ready message. The data key serves the archive
        // inside the replica buffer (no copy).
        let data = original.slice(HEADER_LEN..);
        local.direct = locate(&t, &data);
        t.expose(BufferKey(key), data);
        let durability = local.durability;
        if durability == Durability::Off {
            // No copies: a failure of any rank whose data is still needed
            // ends the reduction (its own original is gone with it), so
            // this rank's original is never asked for again. Nothing but the
            // exposure refers to the buffer, and the first fold here goes
            // into it in place.
            local.join.disk = None;
            return self.send_join(key, None, ctx);
        }
        // Kept until the disk copy replaces it: if another rank fails,
        // recovery may ask this rank for its original.
        t.expose(BufferKey(original_key(key)), original.clone());
        local.original = Some(original.clone());
        let viewing = self.viewing_buddy(key).is_some();
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        let heap = if viewing { locate(&t, &original) } else { None };
        if let Some(heap) = heap {
            // The buddy is on this node and maps this rank's shared heap
            // (it said so when it stored an earlier original here): its
            // mapping keeps this very buffer if this process dies, as a
            // disk copy would be kept, and this rank keeps the buffer
            // unchanged until the reduction ends (and for good if it ends
            // abnormally here, see `fail_all`). No disk copy then (the copy
            // into the page cache was most of what durability cost on one
            // node), and with asynchronous durability no offer either: the
            // join names the original's place (`Ready::standing`), and only
            // if this rank dies while the original is still needed does the
            // master offer it to the buddy on its behalf, holding the
            // reduction until the buddy answers. Until 2026-11-26 every
            // such original was offered, and the buddy told the master and
            // the owner: two messages and a wake-up of the buddy in every
            // reduction (quiet reductions over 8 ranks took 0.86 ms instead
            // of 0.76 at 128 KiB, 2.18 instead of 2.02 ms at 2 MiB; see
            // the book's benchmarks).
            // With synchronous durability the join still waits for the
            // buddy's answer to an offer. The first fold here goes into a
            // new buffer.
            let dir = local.join.disk.take();
            local.in_memory = true;
            local.heap_offered = true;
            let waits = local.waits_for_buddy();
            let buddy = self.viewing_buddy(key);
            if let (Some(buddy), false) = (buddy, waits) {
                if let Some(l) = self.locals.get_mut(&key) {
                    l.standing = Some(taskfold_core::wire::Standing {
                        buddy: buddy.0,
                        crc: replica::stored_crc(&original).unwrap_or(0),
                        len: original.len() as u64,
                        node: taskfold_transports::shared_file::node_token(),
                        heap,
                    });
                }
                metrics::counter!(crate::metrics::ORIGINALS_IN_MEMORY).increment(1);
                return self.disk_written(key, ctx);
            }
            if self.offer(key).is_some() {
                metrics::counter!(crate::metrics::ORIGINALS_IN_MEMORY).increment(1);
                return self.disk_written(key, ctx);
            }
            // The buddy cannot be told: a disk copy after all.
            if let Some(l) = self.locals.get_mut(&key) {
                l.in_memory = false;
                l.join.disk = dir;
            }
        }
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        // Sealed to be viewed in place, but its buddy changed meanwhile (or
        // cannot be told): the disk copy needs a checksum, so this one
        // original is copied once more to get one.
        let original = match replica::with_checksum(&original) {
            None => original,
            Some(checked) => {
                let checked = Bytes::from(checked);
                t.expose(BufferKey(original_key(key)), checked.clone());
                local.original = Some(checked.clone());
                checked
            }
        };
        let disk = self.disk.clone();
        let live = local.disk_live.clone();
        let id = local.join.id.clone();
        // The local copy is written (to the page cache: about a memcpy)
        // before the join, so that from the moment this contribution is
        // announced a copy exists that survives this process; with
        // synchronous durability the join also waits for the buddy. The
        // offer to the buddy follows the disk write, so that a buddy on
        // this node can map the file instead of copying the bytes.
        if original_inline(original.len()) {
            let res = write_and_map(&disk, key, rank, &original, &live);
            return self.original_written(key, id, res, ctx);
        }
        let write = actix_rt::task::spawn_blocking(move || {
            write_and_map(&disk, key, rank, &original, &live)
        });
        ctx.spawn(
            async move { write.await.map_err(|e| e.to_string()).and_then(|r| r) }
                .into_actor(self)
                .map(move |res, act, ctx| act.original_written(key, id, res, ctx)),
        );
    }
}

/// What writing an original's disk copy gave: whether it was written (not
/// if the reduction's directory was emptied meanwhile), and the file's
/// pages mapped read-only, if they could be.
type Written = Result<(bool, Option<Bytes>), String>;

/// Writes `original` (replica header included) to this rank's disk copy of
/// `key` and maps the file.
fn write_and_map(
    disk: &ReplicaDisk,
    key: u64,
    rank: Rank,
    original: &Bytes,
    live: &std::sync::atomic::AtomicBool,
) -> Written {
    let written = disk
        .write_original(key, rank.0, original, live)
        .map_err(|e| e.to_string())?;
    // Once written, the file's pages (mapped read-only) stand in for the
    // original in memory: the buffer is then the value's alone, and the
    // first fold goes into it without a copy.
    let mapped = written
        .then(|| {
            let path = disk.path(key, rank.0);
            taskfold_transports::shared_file::map(&path, original.len() as u64)
                .inspect_err(|e| tracing::debug!(rank = rank.0, error = %e, "cannot map the disk copy; keeping the original in memory"))
                .ok()
        })
        .flatten()
        // The same length was checked; the header (which holds the
        // checksum) must match too.
        .filter(|m| m.get(..HEADER_LEN) == original.get(..HEADER_LEN));
    Ok((written, mapped))
}

impl Worker {
    /// The disk copy of `key`'s original was written (or could not be):
    /// the offer to the buddy and the join follow.
    fn original_written(&mut self, key: u64, id: String, res: Written, ctx: &mut Context<Self>) {
        let Some(l) = self.locals.get_mut(&key) else {
            return; // ended meanwhile
        };
        match res {
            Ok((true, mapped)) => {
                l.disk_copy = true;
                if let Some(m) = mapped {
                    let t = self.out.transport();
                    t.expose(BufferKey(original_key(key)), m.clone());
                    l.original = Some(m);
                }
            }
            // Its directory was emptied under it: no copy to name.
            Ok((false, _)) => l.join.disk = None,
            Err(e) => {
                // The buddy copy still protects the original; a full disk
                // is reported, not fatal.
                l.join.disk = None;
                metrics::counter!(crate::metrics::REPLICA_ERRORS).increment(1);
                tracing::error!(rank = %self.rank, error = %e, "cannot write a replica to the local disk");
            }
        }
        // A test hook may hold this rank once its disk copy is written and
        // before anything else leaves it.
        match hooks::hold(&self.hooks, self.rank.0, Point::DiskWritten, &id) {
            None => {
                self.offer(key);
                self.disk_written(key, ctx);
            }
            Some(wait) => {
                ctx.spawn(wait.into_actor(self).map(move |_, act, ctx| {
                    act.offer(key);
                    act.disk_written(key, ctx);
                }));
            }
        }
    }
}

impl Worker {
    /// The local disk copy of `key`'s original was written (or could not
    /// be): the join goes now, or once the buddy acknowledged its copy.
    fn disk_written(&mut self, key: u64, ctx: &mut Context<Self>) {
        let Some(l) = self.locals.get_mut(&key) else {
            return;
        };
        l.disk_written = true;
        if l.waits_for_buddy() && l.buddy.is_some() && !l.buddy_acked {
            return; // the join waits for the buddy's acknowledgement
        }
        let replica = if l.buddy_acked { l.buddy } else { None };
        self.send_join(key, replica, ctx);
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
        let Some(local) = self.locals.get_mut(&key) else {
            tracing::warn!(rank = %self.rank, key, "task for a reduction this rank does not hold");
            return self.fail_task(&task, TaskFailure::Unknown);
        };
        if let Some(held) = &mut local.held {
            held.push(task);
            return;
        }
        if !task.receiver_path.is_disjoint(&task.provider_path) {
            // Folding would count some original twice: never do it.
            let e = FoldError::Custom(
                "the task's paths overlap: an original would be folded twice".into(),
            );
            return self.fail_task(&task, TaskFailure::Fold(e));
        }
        let holds = if task.restore {
            task.receiver_path == RankSet::single(local.index)
        } else {
            local.path == task.receiver_path && local.value.is_some()
        };
        if !holds {
            return self.fail_task(&task, TaskFailure::Unknown);
        }
        match hooks::hold(&self.hooks, self.rank.0, Point::BeforeGet, &local.join.id) {
            None => self.start_task(task, ctx),
            Some(wait) => {
                ctx.spawn(
                    wait.into_actor(self)
                        .map(move |_, act, ctx| act.start_task(task, ctx)),
                );
            }
        }
    }
}

/// A task's data arrived (and the receiver's original was reloaded if the
/// task asked for it).
struct Fetched {
    task: Task,
    restored: Option<Result<Box<dyn ReduceValue>, String>>,
    data: Result<Received, TransportError>,
    started: Instant,
}

impl Worker {
    pub(super) fn fail_task(&self, task: &Task, reason: TaskFailure) {
        self.to_master(&Msg::TaskFailed(TaskFailed {
            key: task.key,
            task_id: task.task_id,
            reason,
        }));
    }

    /// A fold ended (on the pool, or piecewise): as [`Folded`].
    pub(super) fn folded(
        &mut self,
        task: Task,
        value: Box<dyn ReduceValue>,
        result: Result<(), FoldError>,
        started: Instant,
        bytes: u64,
        ctx: &mut Context<Self>,
    ) {
        self.handle(
            Folded {
                task,
                value,
                result,
                started,
                bytes,
            },
            ctx,
        );
    }

    fn start_task(&mut self, mut task: Task, ctx: &mut Context<Self>) {
        let key = task.key;
        let Some(local) = self.locals.get(&key) else {
            return;
        };
        // A provider's data: read in place where the master says it lies, if
        // it is on this node (a one-sided get through shared memory); else
        // streamed and folded segment by segment as it arrives, if the value
        // can (unless a test holds this rank before its fold).
        let mut view = None;
        if task.source == DataSource::Data && !task.restore {
            let from = Rank(task.provider);
            view = task
                .direct
                .as_ref()
                .and_then(|d| self.out.transport().same_node()?.view(from, d));
            let held = hooks::armed(&self.hooks, self.rank.0, Point::BeforeFold, &local.join.id);
            if view.is_none() && !held {
                match self.start_pieces(task, from, ctx) {
                    None => return,
                    Some(t) => task = t,
                }
            }
        }
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        let (from, bkey) = match &task.source {
            DataSource::Data => (Rank(task.provider), key),
            DataSource::Original => (Rank(task.provider), original_key(key)),
            DataSource::Replica { holder } => (Rank(*holder), replica_key(key, task.provider)),
            DataSource::Disk { .. } => (Rank(task.provider), 0),
        };
        // Reloading our own original reads the local disk first, then the
        // copy in memory; both are verified against the checksum.
        let restore = task.restore.then(|| {
            let disk = self.disk.clone();
            let (rank, decode, mem) = (self.rank.0, local.decode, local.original.clone());
            actix_rt::task::spawn_blocking(move || {
                let buf = match disk.read(key, rank) {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::warn!(rank, error = %e, "local replica unreadable; using the copy in memory");
                        let b = mem.ok_or("no copy of the original is left")?;
                        replica::original_payload(&b).map_err(|e| e.to_string())?;
                        b
                    }
                };
                decode(&buf[HEADER_LEN..]).map_err(|e| e.to_string())
            })
        });
        let fetch = match &task.source {
            // A dead rank's disk copy: read it from its directory.
            DataSource::Disk { dir } => {
                let (dir, owner) = (std::path::PathBuf::from(dir), task.provider);
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
                }) as taskfold_transports::GetFuture
            }
            // Read in place (above).
            _ if view.is_some() => {
                let view = view.take().expect("checked");
                Box::pin(async move { Ok(view) })
            }
            // Else asked for: a same-node peer's data may still come back
            // as a view of its memory (a loan), read in place too.
            _ => self.out.transport().get(from, BufferKey(bkey)),
        };
        let started = Instant::now();
        let _ = local;
        let task2 = task.clone();
        let fut = async move {
            let restored = match restore {
                None => None,
                Some(h) => Some(h.await.map_err(|e| e.to_string()).and_then(|r| r)),
            };
            (restored, fetch.await)
        };
        let handle = ctx.spawn(fut.into_actor(self).map(move |(restored, data), act, ctx| {
            act.fetched(
                Fetched {
                    task: task2,
                    restored,
                    data,
                    started,
                },
                ctx,
            );
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

    fn fetched(&mut self, f: Fetched, ctx: &mut Context<Self>) {
        let task = f.task;
        let key = task.key;
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        if local.fetch.as_ref().map(|f| f.task.task_id) != Some(task.task_id) {
            // The fetch was cancelled (its source was declared failed) and
            // its failure already reported: the master has rescheduled the
            // task. actix may still run a cancelled future that completed in
            // the same turn; folding its data now would do the task twice.
            return;
        }
        local.fetch = None;
        match f.restored {
            None => {}
            Some(Ok(v)) => {
                local.value = Some(v);
                local.path = RankSet::single(local.index);
            }
            Some(Err(e)) => {
                return self.fail_task(
                    &task,
                    TaskFailure::Fold(FoldError::Corrupt(format!("own original: {e}"))),
                );
            }
        }
        let buf = match f.data {
            Ok(buf) => buf,
            Err(e) => {
                let peer_down = matches!(
                    e,
                    TransportError::LinkDown { .. } | TransportError::NoSuchRank(_)
                );
                return self.fail_task(
                    &task,
                    TaskFailure::Fetch {
                        reason: e.to_string(),
                        peer_down,
                    },
                );
            }
        };
        let offset = if task.source == DataSource::Data {
            0
        } else {
            HEADER_LEN
        };
        let Some(value) = local.value.take() else {
            return self.fail_task(&task, TaskFailure::Unknown);
        };
        let hold = hooks::hold(&self.hooks, self.rank.0, Point::BeforeFold, &local.join.id);
        let is_root = local.is_root;
        if !is_root && matches!(buf, Received::Shared(_)) {
            // Folding from a view writes into our own value: it can do so
            // in place only if no one else holds its bytes. No one should
            // fetch them while this rank receives (the master schedules a
            // rank in one task at a time), and they are exposed again,
            // folded, before the next ready message.
            self.out.transport().withdraw(BufferKey(key));
        }
        let small = fold_inline(buf.len());
        let from_owner = task.source == DataSource::Original;
        let job = move || {
            let bytes = buf.len() as u64;
            let (value, result) = fold(value, buf, offset, from_owner, is_root);
            Folded {
                task,
                value,
                result,
                started: f.started,
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
}

/// Values up to this size are serialised and folded on the actor's own
/// thread: two thread hops (to the pool and back) cost more than the work,
/// which takes tens of microseconds at this size.
const INLINE_BYTES: usize = 256 << 10;

/// Whether work on `len` bytes runs inline (0 means unknown: not inline).
fn inline(len: usize) -> bool {
    len > 0 && len <= INLINE_BYTES
}

/// Folds of fetched data up to this size run on the actor's own thread.
///
/// Why larger than [`INLINE_BYTES`]: a fold of 2 MiB takes about 0.25 ms
/// here, and handing it to the fold thread and the result back costs two
/// thread wake-ups, each tens to hundreds of microseconds on a node whose
/// cores are all busy. Quiet 2 MiB reductions over 8 ranks on 2 cores took
/// 3.86 ms instead of 4.12 ms (means of 14 interleaved pairs of
/// `compare-rank` medians). The actor is busy meanwhile (its other
/// messages wait up to about half a millisecond); larger folds still go
/// to the fold thread so that control messages are not held up longer.
const FOLD_INLINE_BYTES: usize = 4 << 20;

/// Whether a fold of `len` fetched bytes runs inline.
fn fold_inline(len: usize) -> bool {
    len <= FOLD_INLINE_BYTES
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
fn original_inline(len: usize) -> bool {
    len <= ORIGINAL_INLINE_BYTES
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

impl Handler<Folded> for Worker {
    type Result = ();

    fn handle(&mut self, m: Folded, ctx: &mut Context<Self>) {
        let key = m.task.key;
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        local.value = Some(m.value);
        if let Err(error) = m.result {
            if !local.is_root {
                // Serve the (unchanged) value again: a fold from a view
                // withdrew it.
                if let Some(b) = local.value.as_ref().and_then(|v| v.encoded()) {
                    self.out.transport().expose(BufferKey(key), b);
                }
            }
            return self.fail_task(&m.task, TaskFailure::Fold(error));
        }
        local.path = local.path.union(&m.task.provider_path);
        let value = local.value.take().expect("just stored");
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
        self.prepare(key, value, Some(done), ctx);
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
        let Some(l) = self.locals.get_mut(&m.key) else {
            // Ended here already (its places were withdrawn then).
            return;
        };
        // A single original is kept as it is until the reduction ends
        // (the master releases one only for a member that asked, below).
        if l.path.len() > 1 {
            // The original stays exposed: recovery may still need it.
            self.out.transport().withdraw(BufferKey(m.key));
            l.value = None;
        }
        if l.join.early {
            // `Completion::Contributed`: this member's part is done. The
            // reduction goes on here (originals kept for recovery) until
            // the master's completion notice, whose outcome then finds the
            // future filled and is dropped.
            l.slot.fill(Ok(None));
            metrics::counter!(crate::metrics::REDUCTIONS_CONTRIBUTED).increment(1);
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
        if self.ended_early.remove(&m.key) {
            // This root ended the reduction when its last fold made it whole
            // (a later reduction with the same id may be live here now).
            return;
        }
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
            self.fail_waiters(&error);
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
        if self.fenced {
            let _ = m.reply.send(Err(ReduceError::Fenced));
            return;
        }
        if let Err(e) = self.out.send(Rank(0), &Msg::Finalize) {
            // A dead transport cannot finalize: do not wait for an answer.
            let _ = m.reply.send(Err(ReduceError::Transport(e.to_string())));
            return;
        }
        self.finalize.push(m.reply);
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

/// Where a peer on this node may read `data` in place, if the transport
/// offers same-node reads ([`taskfold_transports::SameNode::locate`]).
fn locate(
    t: &std::sync::Arc<dyn taskfold_transports::Transport>,
    data: &[u8],
) -> Option<taskfold_transports::Locator> {
    t.same_node()?.locate(data)
}
