//! A contribution's way to its join: start, keep the original (disk copy,
//! offer to the buddy), announce it to the master. The state machine
//! ([`Contribution`]) decides each step; these functions carry them out.

use super::{Local, Worker};
use crate::config::Durability;
use crate::future::Slot;
use crate::hooks::{self, Point};
use crate::replica::ReplicaDisk;
use actix::prelude::*;
use bytes::Bytes;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use taskfold_core::contribution::{Action, Contribution, JoinFields, Setup};
use taskfold_core::replica::{self, original_key, HEADER_LEN};
use taskfold_core::wire::{Join, Joining, Msg, Standing};
use taskfold_core::{Group, Rank, ReduceValue};
use taskfold_transports::BufferKey;

/// The largest replica buffer an offer carries to a buddy not known to be
/// on this rank's node. Below it a get's round trip between nodes costs
/// more than the bytes; above it they would hold up the control messages
/// behind them on the connection, and a get streams them (or lends them,
/// on one node) instead.
const OFFER_CARRIES_BYTES: usize = 64 << 10;

/// The smallest original whose disk copy is mapped to stand in for it in
/// memory: below it, opening, checking and mapping the file (and
/// unmapping it at the end) cost more than copying the bytes once for the
/// first fold.
const MAP_DISK_COPY_FROM: usize = 64 << 10;

/// The application started a reduction (sent by `Runtime::reduce`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StartReduce {
    /// The global restart's epoch the application called `reduce` in.
    pub(crate) epoch: u32,
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
        // Called before a rollback this worker heard of: it ended with it.
        let stale = (m.epoch < self.epoch)
            .then_some(taskfold_core::ReduceError::Reinit { epoch: self.epoch });
        if let Some(e) = self.gone().or(stale) {
            m.slot.fill(Err(e));
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
        let flight = self.start_flight(m.value.encoded_len_hint());
        let hold = hooks::hold(&self.hooks, self.rank.0, Point::BeforeJoin, &m.join.id);
        let state = Contribution::new(Setup {
            root: is_root,
            durability: m.durability,
            early: m.join.early,
            index: m.index,
            members: m.group.len(),
            // Roots keep their results exactly when the job allows
            // replacements (`Config::keeps_results`).
            replaceable: self.results.kept.on(),
        });
        let mut join = m.join;
        // Named in the join only if the disk copy is written.
        join.disk = if is_root {
            None
        } else {
            self.disk.shared_dir()
        };
        let life = self.new_life();
        self.locals.insert(
            key,
            Local {
                state,
                decode: m.value.decoder(),
                join,
                group: m.group,
                value: None,
                slot: m.slot,
                original: None,
                disk_live: Arc::new(AtomicBool::new(true)),
                direct: None,
                held: Vec::new(),
                fetch: None,
                flight,
                announced: Default::default(),
                holder: None,
                life,
            },
        );
        let value = m.value;
        match hold {
            None => self.prepare(key, value, None, ctx),
            Some(wait) => {
                ctx.spawn(wait.into_actor(self).map(move |_, act, ctx| {
                    if act.local_of(key, life).is_some() {
                        act.prepare(key, value, None, ctx)
                    }
                }));
            }
        }
    }
}

impl Worker {
    /// Counts a new reduction's data in flight (about two buffers of
    /// `hint` bytes while it lives: the original kept for recovery and the
    /// value folded beside it; the buffer pool may keep that much for the
    /// next reductions, see `Config`). Returns the bytes counted.
    fn start_flight(&mut self, hint: usize) -> usize {
        let flight = hint.saturating_mul(2);
        taskfold_core::pool::start_flight(flight);
        // More in flight than ever before: the buffers it may need are made
        // now, off the folds' path (each buffer holds an archive after a
        // replica header; see `taskfold_core::pool::reserve`).
        let capacity = hint.saturating_add(HEADER_LEN);
        let ahead = taskfold_core::pool::reserve(capacity);
        self.pool.prefill(ahead, capacity);
        flight
    }

    /// `key`'s first serialisation ended (`bytes`: its original as a
    /// replica buffer; `None` at the root): exposed, then kept as its
    /// state machine says, on the way to the join.
    pub(super) fn serialised(&mut self, key: u64, bytes: Option<Bytes>, ctx: &mut Context<Self>) {
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        let Some(original) = bytes else {
            let action = local.state.serialised(None); // the root
            return self.act(key, action, ctx);
        };
        let t = self.out.transport();
        // Expose `O_i` before announcing it: a task may fetch it as soon as
        // the master has the join. The data key serves the archive inside
        // the replica buffer (no copy).
        let data = original.slice(HEADER_LEN..);
        local.direct = super::locate(t, &data);
        t.expose(BufferKey(key), data);
        if !local.state.keeps_original() {
            // No copies. Held in memory where replacements are allowed
            // (`Contribution::holds_original`; holding it keeps the first
            // fold out of its bytes); else nothing but the exposure refers
            // to the buffer, and the first fold goes into it in place.
            if local.state.holds_original() {
                t.expose(BufferKey(original_key(key)), original.clone());
                local.original = Some(original);
            }
            let action = local.state.serialised(None);
            return self.act(key, action, ctx);
        }
        // Kept until the disk copy replaces it: if another rank fails,
        // recovery may ask this rank for its original.
        t.expose(BufferKey(original_key(key)), original.clone());
        // The buddy is on this node and maps this rank's shared heap (it
        // said so when it stored an earlier original here): its mapping
        // keeps this very buffer if this process dies, as a disk copy
        // would be kept, and this rank keeps the buffer unchanged until
        // the reduction ends (and for good if it ends abnormally here, see
        // `Worker::fail_all`). No disk copy then (the copy into the page
        // cache was most of what durability cost on one node), and with
        // asynchronous durability no offer either: the join names the
        // original's place (`Joining::standing`), and only if this rank
        // dies while the original is still needed does the master offer it
        // to the buddy on its behalf, holding the reduction until the
        // buddy answers. With synchronous durability the join still waits
        // for the buddy's answer to an offer. The first fold here goes
        // into a new buffer.
        let buddy = super::buddy(&local.group, self.rank, self.out.view());
        let viewing = super::viewing_buddy(buddy, self.same_node_buddy);
        let in_place = viewing.and_then(|b| super::locate(t, &original).map(|heap| (b, heap)));
        let action = local.state.serialised(in_place.as_ref().map(|(b, _)| b.0));
        let standing = match action {
            Action::Join(JoinFields {
                standing: Some(buddy),
                ..
            }) => in_place.map(|(_, heap)| Standing {
                buddy,
                crc: replica::stored_crc(&original).unwrap_or(0),
                len: original.len() as u64,
                node: taskfold_transports::shared_file::node_token(),
                heap,
            }),
            _ => None,
        };
        local.original = Some(original);
        match (action, standing) {
            (Action::Join(fields), Some(standing)) => {
                metrics::counter!(crate::metrics::ORIGINALS_IN_MEMORY).increment(1);
                self.send_join(key, fields, Some(standing), ctx);
            }
            (action, _) => self.act(key, action, ctx),
        }
    }

    /// Carries out `action`, an answer of `key`'s state machine on the way
    /// to the join.
    pub(super) fn act(&mut self, key: u64, action: Action, ctx: &mut Context<Self>) {
        match action {
            Action::Nothing => {}
            Action::WriteDisk => self.write_original(key, ctx),
            Action::Offer { file, awaited } => {
                let (to, heap) = self.offer(key, file, awaited);
                let Some(l) = self.locals.get_mut(&key) else {
                    return;
                };
                let next = l.state.offered(to.map(|r| r.0), heap);
                self.act(key, next, ctx);
            }
            Action::AwaitBuddy { in_memory } => {
                if in_memory {
                    metrics::counter!(crate::metrics::ORIGINALS_IN_MEMORY).increment(1);
                }
            }
            Action::Join(fields) => self.send_join(key, fields, None, ctx),
        }
    }

    /// Announces `key`'s contribution to the master, with the fields its
    /// state machine decided and, if it names one, the standing copy.
    pub(super) fn send_join(
        &mut self,
        key: u64,
        fields: JoinFields,
        standing: Option<Standing>,
        ctx: &mut Context<Self>,
    ) {
        let rank = self.rank;
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        if !fields.disk {
            local.join.disk = None;
        }
        // One reading of the master for the record and the send: a
        // standby may take over in between.
        let master = self.out.master();
        local.announced = super::failover::Announced {
            replica: fields.replica,
            standing: standing.clone(),
            to: Some(master),
        };
        let msg = Msg::Join(Joining {
            key,
            rank: rank.0,
            join: local.join.clone(),
            replica: fields.replica,
            standing,
            direct: local.direct.take(),
        });
        tracing::debug!(rank = %rank, key, "joined");
        if let Err(e) = self.out.send(master, &msg) {
            tracing::warn!(rank = %rank, error = %e, "could not reach the master");
        }
        if fields.safe {
            // Its state machine's safe event: the join naming a copy
            // outside this process is out (a `wait_safe` may return, and a
            // synchronous `reduce` with it).
            if let Some(l) = self.locals.get(&key) {
                l.slot.mark_safe();
            }
        }
        // After the join: a finalize may have waited for it.
        self.finalize_if_joined();
        // The test hooks after the join mark it held once the join went
        // out (a test may kill this rank as soon as it sees the mark).
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        let held = hooks::hold(&self.hooks, rank.0, Point::AfterJoin, &local.join.id);
        let _ = hooks::hold(&self.hooks, rank.0, Point::Joined, &local.join.id);
        if let Some(wait) = held {
            // Tasks cannot come before this handler returns: none is missed.
            local.state.hold_tasks();
            let life = local.life;
            ctx.spawn(wait.into_actor(self).map(move |_, act, ctx| {
                let Some(l) = act.local_of(key, life) else {
                    return;
                };
                l.state.resume_tasks();
                for t in std::mem::take(&mut l.held) {
                    act.handle(super::TaskIn(t), ctx);
                }
            }));
        }
    }

    /// Offers this rank's original of `key` to its buddy, naming its disk
    /// copy (`file`) or, without one, its place in the shared heap.
    /// Returns the buddy it went to, and whether the heap place was named
    /// (that buddy may view the original in place).
    pub(super) fn offer(&mut self, key: u64, file: bool, awaited: bool) -> (Option<Rank>, bool) {
        let Some(local) = self.locals.get(&key) else {
            return (None, false);
        };
        let Some(original) = local.original.as_ref() else {
            return (None, false);
        };
        let Some(buddy) = self.buddy(&local.group) else {
            return (None, false);
        };
        let file = file.then(|| {
            self.disk
                .path(key, self.rank.0)
                .to_string_lossy()
                .into_owned()
        });
        // Without a disk copy to map, a buddy on this node may view the
        // original where it lies in this rank's shared heap.
        let heap = if file.is_none() {
            super::locate(self.out.transport(), original)
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
        let in_heap = heap.is_some();
        // A buddy on another node would fetch the original with a get, a
        // round trip between nodes: a small one goes with the offer. Its
        // answer would tell nothing new (it cannot view this rank's heap)
        // unless the join waits for it; a refusal is answered anyway.
        let elsewhere = super::on_another_node(self.rank, buddy, self.out.view());
        let data = (elsewhere && original.len() <= OFFER_CARRIES_BYTES).then(|| original.to_vec());
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
            // the buddy views this rank's heap (a refusal is always
            // answered).
            wants_ack: awaited || (self.same_node_buddy != Some(buddy) && !elsewhere),
            data,
            after: self.completions.last(key),
        };
        match self.out.send(buddy, &msg) {
            Ok(_) => {
                tracing::debug!(rank = %self.rank, %buddy, key, "replica offered");
                if let Some(l) = self.locals.get_mut(&key) {
                    l.holder = Some(buddy);
                }
                (Some(buddy), in_heap)
            }
            Err(e) => {
                tracing::warn!(rank = %self.rank, %buddy, error = %e, "cannot offer a replica");
                (None, in_heap)
            }
        }
    }

    /// Writes the disk copy of `key`'s original (with a checksum).
    ///
    /// The local copy is written (to the page cache: about a memcpy)
    /// before the join, so that from the moment this contribution is
    /// announced a copy exists that survives this process; with
    /// synchronous durability the join also waits for the buddy. The offer
    /// to the buddy follows the disk write, so that a buddy on this node
    /// can map the file instead of copying the bytes.
    fn write_original(&mut self, key: u64, ctx: &mut Context<Self>) {
        let rank = self.rank;
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        let Some(original) = local.original.clone() else {
            return;
        };
        // Sealed to be viewed in place, but its buddy changed meanwhile (or
        // cannot be told): the disk copy needs a checksum, so this one
        // original is copied once more to get one.
        let original = match replica::with_checksum(&original) {
            None => original,
            Some(checked) => {
                let checked = Bytes::from(checked);
                let t = self.out.transport();
                t.expose(BufferKey(original_key(key)), checked.clone());
                local.original = Some(checked.clone());
                checked
            }
        };
        let disk = self.disk.clone();
        let live = local.disk_live.clone();
        let (id, life) = (local.join.id.clone(), local.life);
        if super::prepare::original_inline(original.len()) {
            let res = write_and_map(&disk, key, rank, &original, &live);
            return self.original_written(key, life, id, res, ctx);
        }
        let write = actix_rt::task::spawn_blocking(move || {
            write_and_map(&disk, key, rank, &original, &live)
        });
        ctx.spawn(
            async move { write.await.map_err(|e| e.to_string()).and_then(|r| r) }
                .into_actor(self)
                .map(move |res, act, ctx| act.original_written(key, life, id, res, ctx)),
        );
    }

    /// The disk copy of `key`'s original was written (or could not be):
    /// the offer to the buddy and the join follow.
    fn original_written(
        &mut self,
        key: u64,
        life: u64,
        id: String,
        res: Written,
        ctx: &mut Context<Self>,
    ) {
        let Some(l) = self.locals.get_mut(&key).filter(|l| l.life == life) else {
            return; // ended meanwhile (the key may be a later one's now)
        };
        let copy = match res {
            Ok((true, mapped)) => {
                if let Some(m) = mapped {
                    let t = self.out.transport();
                    t.expose(BufferKey(original_key(key)), m.clone());
                    l.original = Some(m);
                }
                true
            }
            // Its directory was emptied under it: no copy to name.
            Ok((false, _)) => false,
            Err(e) => {
                // The buddy copy still protects the original; a full disk
                // is reported, not fatal.
                metrics::counter!(crate::metrics::REPLICA_ERRORS).increment(1);
                tracing::error!(rank = %self.rank, error = %e, "cannot write a replica to the local disk");
                false
            }
        };
        let next = l.state.disk_written(copy);
        // A test hook may hold this rank once its disk copy is written and
        // before anything else leaves it.
        match hooks::hold(&self.hooks, self.rank.0, Point::DiskWritten, &id) {
            None => self.act(key, next, ctx),
            Some(wait) => {
                ctx.spawn(wait.into_actor(self).map(move |_, act, ctx| {
                    if act.local_of(key, life).is_some() {
                        act.act(key, next, ctx)
                    }
                }));
            }
        }
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
    live: &AtomicBool,
) -> Written {
    let written = disk
        .write_original(key, rank.0, original, live)
        .map_err(|e| e.to_string())?;
    // Once written, the file's pages (mapped read-only) stand in for the
    // original in memory: the buffer is then the value's alone, and the
    // first fold goes into it without a copy. A small original is not
    // mapped: the mapping costs more system calls than the copy it saves.
    let mapped = (written && original.len() >= MAP_DISK_COPY_FROM)
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
