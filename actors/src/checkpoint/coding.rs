//! L3 in the engine: the encoder's side (gather the group's states, code
//! the parity, have it stored, tell the members) and the member's (write
//! its own data piece once the parity is durable). The encoder's progress
//! is the pure [`Coding`] machine; this file carries out its steps.

use super::engine::{Encoding, Engine};
use super::holder::MAX_BODY;
use super::Level;
use bytes::Bytes;
use std::time::Instant;
use taskfold_core::checkpoint::erasure::Stamp;
use taskfold_core::checkpoint::flow::{Next, Role};
use taskfold_core::checkpoint::{Coding, EcGroup, Header, Shard};
use taskfold_core::wire::checkpoint::{buffer_key, Body, CheckpointMsg};

impl Engine {
    /// The group `group` this rank encodes, if it does.
    fn encoded_group(&self, group: u32) -> Result<EcGroup, String> {
        let p = self.ctx.placement()?;
        let g = p.groups().get(group as usize).ok_or("no such group")?;
        if g.members[0] != self.ctx.rank {
            return Err(format!("this rank is not group {group}'s encoder"));
        }
        Ok(g.clone())
    }

    /// Member `from` offers its state of `version` to this encoder.
    pub(super) fn shard(&mut self, from: u32, version: u64, group: u32, len: u64, type_tag: u64) {
        let g = match self.encoded_group(group) {
            Ok(g) => g,
            Err(reason) => {
                tracing::warn!(from, version, group, %reason, "an L3 shard refused");
                let msg = CheckpointMsg::CodingFailed {
                    version,
                    group,
                    reason,
                };
                let _ = self.ctx.send(from, msg);
                return;
            }
        };
        let Some(i) = g.members.iter().position(|&r| r == from) else {
            tracing::warn!(
                from,
                version,
                group,
                "an L3 shard from a rank outside the group; refused"
            );
            return;
        };
        let (k, m) = (g.members.len(), g.parity.len());
        let until = Instant::now() + self.ctx.deadline;
        let entry = self
            .encoding
            .entry((group, version))
            .or_insert_with(|| Encoding {
                coding: Coding::new(k, m),
                type_tag,
                shards: vec![None; k],
                until,
            });
        if entry.coding.settled() {
            return;
        }
        let key = buffer_key(Body::Shard, from, version, group);
        let fetched =
            self.ctx
                .get(from, key, len.min(MAX_BODY))
                .and_then(|b| match b.len() as u64 == len {
                    true => Ok(b),
                    false => Err(format!("{} bytes, {len} announced", b.len())),
                });
        let Some(entry) = self.encoding.get_mut(&(group, version)) else {
            return;
        };
        let next = match fetched {
            Ok(bytes) => {
                let next = entry.coding.shard(i, len, type_tag);
                if next == Next::Encode || matches!(entry.coding, Coding::Gathering { .. }) {
                    entry.shards[i] = Some(bytes);
                }
                next
            }
            Err(reason) => entry.coding.lost(Role::Member(i), &reason),
        };
        self.coding_next(&g, version, next);
    }

    /// Carries out the encoder's next step for `g`'s `version`.
    fn coding_next(&mut self, g: &EcGroup, version: u64, next: Next) {
        let next = match next {
            Next::Encode => self.encode(g, version),
            other => other,
        };
        match next {
            Next::Wait | Next::Encode => return,
            Next::Announce(lens) => {
                let msg = CheckpointMsg::Coded {
                    version,
                    group: g.index,
                    lens,
                };
                for &r in &g.members {
                    let _ = self.ctx.send(r, msg.clone());
                }
            }
            Next::Fail(reason) => {
                tracing::warn!(rank = self.ctx.rank, version, group = g.index, %reason, "L3 coding failed");
                let msg = CheckpointMsg::CodingFailed {
                    version,
                    group: g.index,
                    reason,
                };
                for &r in g.members.iter().filter(|&&r| !self.ctx.is_dead(r)) {
                    let _ = self.ctx.send(r, msg.clone());
                }
            }
        }
        // Settled: the parity bodies are no longer needed.
        for j in 0..g.parity.len() {
            let index = (g.members.len() + j) as u32;
            self.ctx
                .withdraw(buffer_key(Body::Parity, index, version, g.index));
        }
        self.encoding.remove(&(g.index, version));
    }

    /// Codes the gathered states into parity pieces and offers each to
    /// its holder.
    fn encode(&mut self, g: &EcGroup, version: u64) -> Next {
        let Some(e) = self.encoding.get_mut(&(g.index, version)) else {
            return Next::Wait;
        };
        let coder = &mut self.coder;
        let shards: Vec<Vec<u8>> = e
            .shards
            .iter_mut()
            .map(|s| s.take().unwrap_or_default())
            .collect();
        let data: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
        let stamp = Stamp {
            job: self.ctx.job,
            version,
            type_tag: e.type_tag,
        };
        let pieces = match coder.encode_pieces(stamp, g, &data) {
            Ok(p) => p,
            Err(err) => return e.coding.abort(&format!("coding: {err}")),
        };
        e.coding.sent();
        let k = g.members.len();
        for (j, piece) in pieces.into_iter().skip(k).enumerate() {
            let index = (k + j) as u16;
            let key = buffer_key(Body::Parity, u32::from(index), version, g.index);
            let len = piece.len() as u64;
            self.ctx.expose(key, Bytes::from(piece));
            let msg = CheckpointMsg::Parity {
                version,
                group: g.index,
                index,
                len,
            };
            if let Err(reason) = self.ctx.send(g.parity[j], msg) {
                if let Some(e) = self.encoding.get_mut(&(g.index, version)) {
                    return e.coding.lost(Role::Holder(j), &reason);
                }
            }
        }
        Next::Wait
    }

    /// Holder `from` answered for parity piece `index` of `group`.
    pub(super) fn parity_stored(
        &mut self,
        from: u32,
        version: u64,
        at: (u32, u16),
        ok: bool,
        reason: &str,
    ) {
        let (group, index) = at;
        let Ok(g) = self.encoded_group(group) else {
            tracing::warn!(
                from,
                version,
                group,
                "a parity answer for a group this rank does not encode; dropped"
            );
            return;
        };
        let j = usize::from(index).wrapping_sub(g.members.len());
        if g.parity.get(j) != Some(&from) {
            tracing::warn!(
                from,
                version,
                group,
                index,
                "a parity answer from another rank than its holder; dropped"
            );
            return;
        }
        let Some(e) = self.encoding.get_mut(&(group, version)) else {
            return;
        };
        let next = e.coding.stored(j, ok, reason);
        self.coding_next(&g, version, next);
    }

    /// `rank` died: the codings that still needed it fail.
    pub(super) fn encoder_lost(&mut self, rank: u32) {
        let under_way: Vec<(u32, u64)> = self.encoding.keys().copied().collect();
        for (group, version) in under_way {
            let Ok(g) = self.encoded_group(group) else {
                continue;
            };
            let roles = g
                .members
                .iter()
                .enumerate()
                .filter(|(_, &r)| r == rank)
                .map(|(i, _)| Role::Member(i))
                .chain(
                    g.parity
                        .iter()
                        .enumerate()
                        .filter(|(_, &r)| r == rank)
                        .map(|(j, _)| Role::Holder(j)),
                );
            let mut next = Next::Wait;
            for role in roles.collect::<Vec<_>>() {
                if let Some(e) = self.encoding.get_mut(&(group, version)) {
                    let n = e.coding.lost(role, &format!("rank {rank} died"));
                    if n != Next::Wait {
                        next = n;
                    }
                }
            }
            self.coding_next(&g, version, next);
        }
    }

    /// Fails the codings past their deadline.
    pub(super) fn encoding_expire(&mut self, now: Instant) {
        let late: Vec<(u32, u64)> = self
            .encoding
            .iter()
            .filter(|(_, e)| e.until <= now)
            .map(|(k, _)| *k)
            .collect();
        for (group, version) in late {
            let Ok(g) = self.encoded_group(group) else {
                continue;
            };
            let why = format!("no answer within {:?}", self.ctx.deadline);
            let next = match self.encoding.get_mut(&(group, version)) {
                Some(e) => e.coding.abort(&why),
                None => continue,
            };
            self.coding_next(&g, version, next);
        }
    }

    /// The encoder says the parity of `version` is durable: this rank
    /// writes its own data piece, and its L3 is done.
    pub(super) fn coded(&mut self, from: u32, version: u64, group: u32, lens: Vec<u64>) {
        let Some(own) = self.own.get(&version).filter(|o| o.encoder == Some(from)) else {
            tracing::warn!(
                from,
                version,
                "an L3 notice for no checkpoint of this rank's; dropped"
            );
            return;
        };
        let result = self.write_data_piece(own, group, lens);
        self.ctx
            .withdraw(buffer_key(Body::Shard, self.ctx.rank, version, group));
        self.remote_settled(version, Level::L3, result);
    }

    fn write_data_piece(
        &self,
        own: &super::engine::Own,
        group: u32,
        lens: Vec<u64>,
    ) -> Result<(), String> {
        let p = self.ctx.placement()?;
        let g = p.group_of(self.ctx.rank).ok_or("no L3 group")?;
        let i = g
            .members
            .iter()
            .position(|&r| r == self.ctx.rank)
            .ok_or("not a member")?;
        if g.index != group || lens.len() != g.members.len() || lens[i] != own.payload.len() as u64
        {
            return Err(format!(
                "the encoder's geometry does not match group {}",
                g.index
            ));
        }
        let header = Header {
            job: self.ctx.job,
            owner: self.ctx.rank,
            version: own.progress.version(),
            type_tag: own.type_tag,
            level: Level::L3,
            shard: Some(Shard {
                group,
                members: g.members.clone(),
                m: g.parity.len() as u16,
                index: i as u16,
                lens,
            }),
        };
        let stores = self.ctx.stores().map_err(|e| e.to_string())?;
        stores
            .local
            .write(&header, &own.payload)
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The encoder says the L3 of `version` failed.
    pub(super) fn coding_failed(&mut self, from: u32, version: u64, group: u32, reason: String) {
        if self
            .own
            .get(&version)
            .is_some_and(|o| o.encoder == Some(from))
        {
            self.ctx
                .withdraw(buffer_key(Body::Shard, self.ctx.rank, version, group));
            let why = format!("the group's encoder {from}: {reason}");
            self.remote_settled(version, Level::L3, Err(why));
        }
    }
}
