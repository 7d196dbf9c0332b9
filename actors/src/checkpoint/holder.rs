//! The engine as a holder of other ranks' pieces: it stores a partner's
//! L2 copy and a group's parity, and serves a restarted rank its pieces.
//!
//! Every message is untrusted. A copy is taken only from a rank whose
//! partner this rank is; parity only from its group's encoder, for a
//! piece this rank is to hold; a question only from the owner of the
//! piece (L2) or a member of the group (L3). Every piece fetched is
//! verified — intact, of this job, of the level, owner, version and group
//! announced — before it is written; a refusal is logged with its reason
//! and answered, never a panic.

use super::ctx::Held;
use super::engine::{Engine, FetchReq, Lent};
use super::store::{FileStore, PieceKey};
use super::Level;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;
use taskfold_core::checkpoint::piece::{self, Expect};
use taskfold_core::wire::checkpoint::{buffer_key, Body, CheckpointMsg};

/// Bound on a piece or state a peer may announce (64 GiB).
pub(super) const MAX_BODY: u64 = 1 << 36;
/// Pieces lent at once to one restarted rank; an older loan is withdrawn.
const MAX_LENT: usize = 64;

/// Where a holder looks for the pieces asked for.
#[derive(Clone, Copy)]
enum Place {
    /// This rank's local directory (its own L3 data pieces).
    Local,
    /// The pieces it holds for others.
    Held(Held),
}

fn refused(from: u32, what: &str, reason: &str) {
    tracing::warn!(from, what, reason, "checkpoint piece refused");
}

impl Engine {
    /// `from` offers its L2 copy of `version`.
    pub(super) fn hold_copy(&mut self, from: u32, version: u64, len: u64) {
        let result = self.take_copy(from, version, len);
        if let Err(reason) = &result {
            refused(from, "L2 copy", reason);
        }
        let (ok, reason) = (result.is_ok(), result.err().unwrap_or_default());
        let msg = CheckpointMsg::Stored {
            level: 2,
            version,
            group: 0,
            index: 0,
            ok,
            reason,
        };
        let _ = self.ctx.send(from, msg);
    }

    fn take_copy(&self, from: u32, version: u64, len: u64) -> Result<(), String> {
        let p = self.ctx.placement()?;
        if p.partner(from) != Some(self.ctx.rank) {
            return Err(format!("this rank is not rank {from}'s partner"));
        }
        let bytes = self.ctx.get(
            from,
            buffer_key(Body::Copy, from, version, 0),
            len.min(MAX_BODY),
        )?;
        let piece = piece::decode(&bytes).map_err(|e| e.to_string())?;
        let h = &piece.header;
        if h.job != self.ctx.job || h.owner != from || h.version != version || h.level != Level::L2
        {
            return Err(format!(
                "not rank {from}'s L2 piece of version {version} of this job (job {}, owner {}, version {}, {})",
                h.job, h.owner, h.version, h.level
            ));
        }
        let store = self
            .ctx
            .stores()
            .and_then(|s| s.held(Held::Copies(from), self.ctx.rank));
        let store = store.map_err(|e| e.to_string())?;
        store.write(h, piece.payload).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// `from` (its group's encoder) offers parity piece `index` of `group`.
    pub(super) fn hold_parity(
        &mut self,
        from: u32,
        version: u64,
        group: u32,
        index: u16,
        len: u64,
    ) {
        let result = self.take_parity(from, version, group, index, len);
        if let Err(reason) = &result {
            refused(from, "L3 parity", reason);
        }
        let (ok, reason) = (result.is_ok(), result.err().unwrap_or_default());
        let msg = CheckpointMsg::Stored {
            level: 3,
            version,
            group,
            index,
            ok,
            reason,
        };
        let _ = self.ctx.send(from, msg);
    }

    fn take_parity(
        &self,
        from: u32,
        version: u64,
        group: u32,
        index: u16,
        len: u64,
    ) -> Result<(), String> {
        let p = self.ctx.placement()?;
        let g = p.groups().get(group as usize).ok_or("no such group")?;
        let j = usize::from(index)
            .checked_sub(g.members.len())
            .ok_or("not a parity index")?;
        if g.members[0] != from || g.parity.get(j) != Some(&self.ctx.rank) {
            return Err(format!(
                "rank {from} may not give this rank parity {index} of group {group}"
            ));
        }
        let key = buffer_key(Body::Parity, u32::from(index), version, group);
        let bytes = self.ctx.get(from, key, len.min(MAX_BODY))?;
        let piece = piece::decode(&bytes).map_err(|e| e.to_string())?;
        let h = &piece.header;
        let place = h.shard.as_ref().map(|s| (s.group, s.index, &s.members));
        if h.job != self.ctx.job
            || h.owner != self.ctx.rank
            || h.version != version
            || place != Some((group, index, &g.members))
        {
            return Err(format!(
                "not parity {index} of group {group}'s version {version} of this job"
            ));
        }
        let store = self
            .ctx
            .stores()
            .and_then(|s| s.held(Held::Parity(group), self.ctx.rank));
        let store = store.map_err(|e| e.to_string())?;
        store.write(h, piece.payload).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// A holder answered: this rank's L2 copy (from its partner), or a
    /// parity piece of the group it encodes.
    pub(super) fn stored(
        &mut self,
        from: u32,
        level: u8,
        version: u64,
        at: (u32, u16),
        ok: bool,
        reason: String,
    ) {
        let result = if ok {
            Ok(())
        } else {
            Err(format!("rank {from} refused: {reason}"))
        };
        match Level::from_number(level) {
            Some(Level::L2)
                if self
                    .own
                    .get(&version)
                    .is_some_and(|o| o.partner == Some(from)) =>
            {
                self.ctx
                    .withdraw(buffer_key(Body::Copy, self.ctx.rank, version, 0));
                self.remote_settled(version, Level::L2, result)
            }
            Some(Level::L3) => self.parity_stored(from, version, at, ok, &reason),
            _ => tracing::warn!(
                from,
                level,
                version,
                "an unexpected checkpoint answer; dropped"
            ),
        }
    }

    /// The stores a question about `level` may look in, and the owner of
    /// the pieces there; `Err` if `from` may not ask.
    fn holdings(
        &self,
        from: u32,
        level: u8,
        owner: u32,
        group: u32,
    ) -> Result<Vec<(Place, u32, Level)>, String> {
        let p = self.ctx.placement()?;
        let me = self.ctx.rank;
        match Level::from_number(level) {
            Some(Level::L2) if owner == from && p.partner(from) == Some(me) => {
                Ok(vec![(Place::Held(Held::Copies(from)), from, Level::L2)])
            }
            Some(Level::L3) => {
                let g = p.groups().get(group as usize).ok_or("no such group")?;
                if !g.members.contains(&from) {
                    return Err(format!("rank {from} is not a member of group {group}"));
                }
                let mut places = Vec::new();
                if g.members.contains(&me) {
                    // This rank's own data piece, in its local directory.
                    places.push((Place::Local, me, Level::L3));
                }
                if g.parity.contains(&me) {
                    places.push((Place::Held(Held::Parity(group)), me, Level::L3));
                }
                Ok(places)
            }
            _ => Err(format!(
                "rank {from} may not ask for level {level} of rank {owner}"
            )),
        }
    }

    fn store_of(&self, place: Place) -> Result<Arc<FileStore>, String> {
        let stores = self.ctx.stores().map_err(|e| e.to_string())?;
        match place {
            Place::Local => Ok(stores.local.clone()),
            Place::Held(h) => stores.held(h, self.ctx.rank).map_err(|e| e.to_string()),
        }
    }

    /// A restarted rank asks which versions this rank holds.
    pub(super) fn query(&mut self, from: u32, req: u64, level: u8, owner: u32, group: u32) {
        let listed = self.holdings(from, level, owner, group).and_then(|places| {
            let mut pieces = Vec::new();
            for (held, who, lvl) in places {
                for key in self.store_of(held)?.list().map_err(|e| e.to_string())? {
                    let shard_ok = key.shard.is_none_or(|(g, _)| g == group);
                    if key.owner == who && key.level == lvl && shard_ok {
                        pieces.push((key.version, key.shard.map_or(0, |(_, i)| i)));
                    }
                }
            }
            Ok(pieces)
        });
        let msg = match listed {
            Ok(pieces) => CheckpointMsg::Holding { req, pieces },
            Err(reason) => {
                refused(from, "query", &reason);
                CheckpointMsg::Missing { req, reason }
            }
        };
        let _ = self.ctx.send(from, msg);
    }

    /// A restarted rank asks for one piece: verified here, exposed for it.
    pub(super) fn fetch(&mut self, from: u32, f: FetchReq) {
        let msg = match self.lend(from, &f) {
            Ok(len) => CheckpointMsg::Piece { req: f.req, len },
            Err(reason) => {
                tracing::warn!(from, version = f.version, level = f.level, %reason, "checkpoint piece not served");
                CheckpointMsg::Missing { req: f.req, reason }
            }
        };
        let _ = self.ctx.send(from, msg);
    }

    fn lend(&mut self, from: u32, f: &FetchReq) -> Result<u64, String> {
        let places = self.holdings(from, f.level, f.owner, f.group)?;
        let level = Level::from_number(f.level).ok_or("bad level")?;
        let (owner, shard) = match level {
            Level::L3 => (self.ctx.rank, Some((f.group, f.index))),
            _ => (f.owner, None),
        };
        let key = PieceKey {
            owner,
            level,
            shard,
            version: f.version,
        };
        let expect = Expect {
            job: self.ctx.job,
            type_tag: f.type_tag,
            owner: Some(owner),
            version: Some(f.version),
            level: Some(level),
        };
        let mut last = String::from("no such piece here");
        for (held, _, _) in places {
            let store = self.store_of(held)?;
            if !store.path(&key).exists() {
                continue;
            }
            match store.read(&key, &expect) {
                Ok(stored) => {
                    let bytes = piece::encode(&stored.header, &stored.payload)
                        .map_err(|e| e.to_string())?;
                    let len = bytes.len() as u64;
                    self.lend_bytes(from, f.req, bytes);
                    return Ok(len);
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    fn lend_bytes(&mut self, to: u32, req: u64, bytes: Vec<u8>) {
        if self.lent.keys().filter(|(t, _)| *t == to).count() >= MAX_LENT {
            let oldest = self.lent.keys().filter(|(t, _)| *t == to).min().copied();
            if let Some(k) = oldest.and_then(|k| self.lent.remove(&k)) {
                self.ctx.withdraw(k.key);
            }
        }
        let key = buffer_key(Body::Fetched, to, req, 0);
        self.ctx.expose(key, Bytes::from(bytes));
        let until = Instant::now() + self.ctx.deadline;
        self.lent.insert((to, req), Lent { key, until });
    }
}
