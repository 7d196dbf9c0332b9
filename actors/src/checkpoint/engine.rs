//! A rank's checkpoint engine: one thread (`taskfold-ckpt-<rank>`) that
//! writes this rank's pieces, sends its L2 copy and L3 shard, codes its
//! group's parity if it is the group's encoder, and stores and serves the
//! pieces it holds for others. Its inputs come over one channel: the
//! application's checkpoints, the checkpoint messages the router hands
//! over, and the deaths the runtime learns.
//!
//! Data flow of a version (see the book's Checkpoints chapter):
//!
//! - **L1, L4**: written here, synced and renamed into place.
//! - **L2**: the piece is exposed and offered to the partner
//!   ([`CheckpointMsg::Offer`]), which fetches it with a one-sided get,
//!   verifies it, writes it in its `held-r<owner>` directory and answers
//!   [`CheckpointMsg::Stored`]. Bytes on the wire: one piece, `S`.
//! - **L3**: each member exposes its state and tells its group's encoder
//!   (the group's first member; [`CheckpointMsg::Shard`]); the encoder
//!   fetches the `k` states (`(k - 1) S` on the wire), codes the `m`
//!   parity pieces, exposes them and offers each to its holder
//!   ([`CheckpointMsg::Parity`], `m S` on the wire), which stores it in
//!   its `held-g<group>` directory and answers; once every holder did, the
//!   encoder tells the members ([`CheckpointMsg::Coded`], with every
//!   state's length), and each member writes its own data piece locally.
//!   A group moves `(k - 1 + m) S` bytes per version, `S` the longest
//!   state, plus `2 (k + m)` control frames.
//!
//! What a failure does: a holder or encoder that dies, refuses, or does
//! not answer before `Config::finalize_timeout` fails that level only; the
//! checkpoint's future then names it ([`CheckpointError::Levels`]) and the
//! levels written still count. A rank that dies mid-checkpoint leaves its
//! previous versions whole everywhere: every write is atomic, and a
//! member writes its L3 data piece only once the parity is durable.

use super::ctx::Ctx;
use super::future::{Completer, Written};
use super::{CheckpointError, Level};
use crate::hooks;
use crate::hooks::Point;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold_core::checkpoint::{Coding, Header, Progress};
use taskfold_core::wire::checkpoint::{buffer_key, Body, CheckpointMsg};

/// One checkpoint from the application.
pub(crate) struct Job {
    pub(crate) version: u64,
    pub(crate) type_tag: u64,
    pub(crate) payload: rkyv::util::AlignedVec,
    pub(crate) levels: Vec<Level>,
    pub(crate) done: Completer,
}

/// What the engine's thread is given.
pub(crate) enum Input {
    /// A checkpoint to write.
    Job(Job),
    /// A checkpoint message from `from`.
    Msg { from: u32, msg: CheckpointMsg },
    /// A rank died.
    Dead(u32),
}

/// One of this rank's checkpoints whose remote levels are under way.
pub(super) struct Own {
    pub(super) progress: Progress,
    pub(super) done: Option<Completer>,
    pub(super) type_tag: u64,
    /// The state, kept for the L3 data piece written once coded.
    pub(super) payload: Bytes,
    /// The partner asked to store the L2 copy.
    pub(super) partner: Option<u32>,
    /// The encoder of this rank's group.
    pub(super) encoder: Option<u32>,
    pub(super) until: Instant,
}

/// One version of a group's L3 at its encoder.
pub(super) struct Encoding {
    pub(super) coding: Coding,
    pub(super) type_tag: u64,
    pub(super) shards: Vec<Option<Vec<u8>>>,
    pub(super) until: Instant,
}

/// A restarted rank's request for one piece.
pub(super) struct FetchReq {
    pub(super) req: u64,
    pub(super) level: u8,
    pub(super) owner: u32,
    pub(super) group: u32,
    pub(super) index: u16,
    pub(super) version: u64,
    pub(super) type_tag: u64,
}

/// A piece exposed for a restarted rank, until it says it has it.
pub(super) struct Lent {
    pub(super) key: u64,
    pub(super) until: Instant,
}

/// The engine's state, on its thread.
pub(crate) struct Engine {
    pub(super) ctx: Arc<Ctx>,
    pub(super) own: HashMap<u64, Own>,
    pub(super) encoding: HashMap<(u32, u64), Encoding>,
    pub(super) lent: HashMap<(u32, u64), Lent>,
    /// The L3 coder, its working space kept between versions.
    pub(super) coder: taskfold_core::checkpoint::erasure::Coder,
}

/// How often deadlines are checked.
const TICK: Duration = Duration::from_millis(100);

impl Engine {
    /// Runs the engine until every sender of `rx` is gone; then the
    /// checkpoints still waiting for a holder fail with
    /// [`CheckpointError::Shutdown`].
    pub(crate) fn run(ctx: Arc<Ctx>, rx: flume::Receiver<Input>) {
        let mut e = Engine {
            ctx,
            own: HashMap::new(),
            encoding: HashMap::new(),
            lent: HashMap::new(),
            coder: Default::default(),
        };
        loop {
            match rx.recv_timeout(TICK) {
                Ok(Input::Job(job)) => e.job(job),
                Ok(Input::Msg { from, msg }) => e.message(from, msg),
                Ok(Input::Dead(rank)) => e.dead(rank),
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => break,
            }
            e.expire(Instant::now());
        }
        for (_, lent) in e.lent.drain() {
            e.ctx.withdraw(lent.key);
        }
    }

    /// Writes `job`'s local levels and starts its remote ones.
    fn job(&mut self, job: Job) {
        let rank = self.ctx.rank;
        if let Some(hold) = hooks::hold_blocking(
            &self.ctx.hooks,
            rank,
            Point::Checkpoint,
            &job.version.to_string(),
        ) {
            hold();
        }
        // A checkpoint of this version still under way is given up first:
        // its bodies share the new one's keys.
        if let Some(old) = self.own.remove(&job.version) {
            let why = "superseded by a newer checkpoint of that version";
            self.finish(job.version, old, Some(why));
        }
        let mut own = Own {
            progress: Progress::new(job.version, &job.levels),
            done: Some(job.done),
            type_tag: job.type_tag,
            payload: Bytes::copy_from_slice(&job.payload),
            partner: None,
            encoder: None,
            until: Instant::now() + self.ctx.deadline,
        };
        for &level in &job.levels {
            let started = match level {
                Level::L1 | Level::L4 => self.write_local(&own, level),
                Level::L2 => self.offer_copy(&mut own),
                Level::L3 => self.offer_shard(&mut own),
            };
            match started {
                Ok(true) => {
                    own.progress.durable(level);
                }
                Ok(false) => {}
                Err(reason) => {
                    tracing::warn!(rank, version = job.version, %level, %reason, "checkpoint level failed");
                    own.progress.failed(level, reason);
                }
            }
        }
        self.settle(job.version, own);
    }

    /// Writes `own`'s piece at the local `level`: `Ok(true)` once durable.
    fn write_local(&self, own: &Own, level: Level) -> Result<bool, String> {
        let stores = self.ctx.stores().map_err(|e| e.to_string())?;
        let store = match level {
            Level::L4 => stores.shared.as_ref().ok_or("no shared directory")?,
            _ => &stores.local,
        };
        let header = self.header(own, level);
        store
            .write(&header, &own.payload)
            .map_err(|e| e.to_string())?;
        Ok(true)
    }

    fn header(&self, own: &Own, level: Level) -> Header {
        Header {
            job: self.ctx.job,
            owner: self.ctx.rank,
            version: own.progress.version(),
            type_tag: own.type_tag,
            level,
            shard: None,
        }
    }

    /// Offers `own`'s L2 piece to the partner: `Ok(false)`, awaiting its
    /// answer.
    fn offer_copy(&self, own: &mut Own) -> Result<bool, String> {
        let p = self.ctx.placement()?;
        let partner = p
            .partner(self.ctx.rank)
            .ok_or("no partner (a job of one rank)")?;
        if self.ctx.is_dead(partner) {
            return Err(format!("partner {partner} is dead"));
        }
        let piece =
            taskfold_core::checkpoint::piece::encode(&self.header(own, Level::L2), &own.payload)
                .map_err(|e| e.to_string())?;
        let version = own.progress.version();
        let key = buffer_key(Body::Copy, self.ctx.rank, version, 0);
        let len = piece.len() as u64;
        self.ctx.expose(key, Bytes::from(piece));
        own.partner = Some(partner);
        if let Err(e) = self
            .ctx
            .send(partner, CheckpointMsg::Offer { version, len })
        {
            self.ctx.withdraw(key);
            return Err(format!("partner {partner}: {e}"));
        }
        Ok(false)
    }

    /// Offers `own`'s state to its group's encoder: `Ok(false)`, awaiting
    /// the encoder's word that the parity is durable.
    fn offer_shard(&self, own: &mut Own) -> Result<bool, String> {
        let p = self.ctx.placement()?;
        let group = p.group_of(self.ctx.rank).ok_or("no L3 group")?;
        let encoder = group.members[0];
        if self.ctx.is_dead(encoder) {
            return Err(format!("the group's encoder {encoder} is dead"));
        }
        let version = own.progress.version();
        let key = buffer_key(Body::Shard, self.ctx.rank, version, group.index);
        self.ctx.expose(key, own.payload.clone());
        own.encoder = Some(encoder);
        let msg = CheckpointMsg::Shard {
            version,
            group: group.index,
            len: own.payload.len() as u64,
            type_tag: own.type_tag,
        };
        if let Err(e) = self.ctx.send(encoder, msg) {
            self.ctx.withdraw(key);
            return Err(format!("encoder {encoder}: {e}"));
        }
        Ok(false)
    }

    /// Completes `own`'s future if every level settled; else keeps it.
    pub(super) fn settle(&mut self, version: u64, own: Own) {
        match own.progress.outcome() {
            Some(_) => self.finish(version, own, None),
            None => {
                self.own.insert(version, own);
            }
        }
    }

    /// Fails what still waits in `own` (if `reason`), withdraws its
    /// bodies and completes its future.
    fn finish(&self, version: u64, mut own: Own, reason: Option<&str>) {
        if let Some(r) = reason {
            own.progress.fail_waiting(r);
        }
        let rank = self.ctx.rank;
        self.ctx.withdraw(buffer_key(Body::Copy, rank, version, 0));
        if let Ok(g) = self
            .ctx
            .placement()
            .map(|p| p.group_of(rank).map(|g| g.index))
        {
            self.ctx
                .withdraw(buffer_key(Body::Shard, rank, version, g.unwrap_or(0)));
        }
        let outcome = match own.progress.outcome() {
            Some(Ok(levels)) => Ok(Written { version, levels }),
            Some(Err(p)) => Err(CheckpointError::Levels {
                version,
                written: p.written,
                failed: p.failed,
            }),
            None => Err(CheckpointError::Shutdown),
        };
        if let Some(done) = own.done.take() {
            done.fill(outcome);
        }
    }

    /// A level of this rank's checkpoint `version` settled remotely.
    pub(super) fn remote_settled(
        &mut self,
        version: u64,
        level: Level,
        result: Result<(), String>,
    ) {
        let Some(mut own) = self.own.remove(&version) else {
            return;
        };
        match result {
            Ok(()) => {
                own.progress.durable(level);
            }
            Err(reason) => {
                tracing::warn!(rank = self.ctx.rank, version, %level, %reason, "checkpoint level failed");
                own.progress.failed(level, reason);
            }
        }
        self.settle(version, own);
    }

    /// `rank` died: the levels and codings that needed it fail.
    fn dead(&mut self, rank: u32) {
        let versions: Vec<u64> = self.own.keys().copied().collect();
        for v in versions {
            let needs = |o: &Own, l: Level, who: Option<u32>| {
                who == Some(rank)
                    && o.progress.step(l) == Some(&taskfold_core::checkpoint::flow::Step::Waiting)
            };
            let own = &self.own[&v];
            if needs(own, Level::L2, own.partner) {
                self.remote_settled(v, Level::L2, Err(format!("partner {rank} died")));
            }
            let Some(own) = self.own.get(&v) else {
                continue;
            };
            if needs(own, Level::L3, own.encoder) {
                self.remote_settled(
                    v,
                    Level::L3,
                    Err(format!("the group's encoder {rank} died")),
                );
            }
        }
        self.encoder_lost(rank);
        self.lent.retain(|(to, _), lent| {
            let keep = *to != rank;
            if !keep {
                self.ctx.withdraw(lent.key);
            }
            keep
        });
    }

    /// Fails what passed its deadline.
    fn expire(&mut self, now: Instant) {
        let late: Vec<u64> = self
            .own
            .iter()
            .filter(|(_, o)| o.until <= now)
            .map(|(v, _)| *v)
            .collect();
        for v in late {
            if let Some(own) = self.own.remove(&v) {
                let why = format!("no answer within {:?}", self.ctx.deadline);
                self.finish(v, own, Some(&why));
            }
        }
        self.encoding_expire(now);
        let ctx = &self.ctx;
        self.lent.retain(|_, lent| {
            let keep = lent.until > now;
            if !keep {
                ctx.withdraw(lent.key);
            }
            keep
        });
    }

    /// Dispatches a checkpoint message from `from`.
    fn message(&mut self, from: u32, msg: CheckpointMsg) {
        match msg {
            CheckpointMsg::Offer { version, len } => self.hold_copy(from, version, len),
            CheckpointMsg::Parity {
                version,
                group,
                index,
                len,
            } => self.hold_parity(from, version, group, index, len),
            CheckpointMsg::Stored {
                level,
                version,
                group,
                index,
                ok,
                reason,
            } => self.stored(from, level, version, (group, index), ok, reason),
            CheckpointMsg::Shard {
                version,
                group,
                len,
                type_tag,
            } => self.shard(from, version, group, len, type_tag),
            CheckpointMsg::Coded {
                version,
                group,
                lens,
            } => self.coded(from, version, group, lens),
            CheckpointMsg::CodingFailed {
                version,
                group,
                reason,
            } => self.coding_failed(from, version, group, reason),
            CheckpointMsg::Query {
                req,
                level,
                owner,
                group,
            } => self.query(from, req, level, owner, group),
            CheckpointMsg::Fetch {
                req,
                level,
                owner,
                group,
                index,
                version,
                type_tag,
            } => {
                let f = FetchReq {
                    req,
                    level,
                    owner,
                    group,
                    index,
                    version,
                    type_tag,
                };
                self.fetch(from, f)
            }
            CheckpointMsg::Release { req } => {
                if let Some(lent) = self.lent.remove(&(from, req)) {
                    self.ctx.withdraw(lent.key);
                }
            }
            other @ (CheckpointMsg::Holding { .. }
            | CheckpointMsg::Piece { .. }
            | CheckpointMsg::Missing { .. }) => {
                tracing::warn!(from, msg = ?other, "a checkpoint answer reached the engine; dropped");
            }
        }
    }
}
