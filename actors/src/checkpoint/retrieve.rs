//! Retrieval of this rank's state, on the calling thread: from its local
//! directory (L1), its partner's copy (L2), its group's surviving shards
//! and parity, decoded (L3), or the shared directory (L4).
//!
//! Two ways to choose the levels ([`Retrieval`]):
//!
//! - **aware**: knowing the failure, straight to the cheapest level that
//!   survived it ([`taskfold_core::checkpoint::Placement::cheapest`]),
//!   asking only holders that are alive; the next surviving level if that
//!   one holds nothing fit.
//! - **probing** (FTI-style): L1, L2, L3, L4 in turn, asking every holder;
//!   a holder that is dead or does not answer costs the failure detection
//!   timeout (`Config::failure_timeout`) before the level is given up.
//!
//! Either way, a piece that is damaged, of another job, type, owner or
//! version is skipped with a warning naming the reason, and the version
//! before (or the next level) is tried: nothing unchecked is restored.

use super::ctx::Ctx;
use super::store::FileStore;
use super::{CheckpointError, Level};
use std::collections::BTreeMap;
use std::time::Instant;
use taskfold_core::checkpoint::erasure;
use taskfold_core::checkpoint::piece::{self, Expect};
use taskfold_core::checkpoint::{EcGroup, Failure};
use taskfold_core::wire::checkpoint::{buffer_key, Body, CheckpointMsg};

/// How a rank chooses the levels it reads from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retrieval {
    /// Knowing `Failure`: only the levels that survived it, cheapest first,
    /// and only holders that are alive are asked.
    Aware(Failure),
    /// FTI-style: every level written, L1 to L4, every holder asked; a
    /// dead holder costs the failure detection timeout.
    Probing,
}

/// A state restored, and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Restored<T> {
    /// Its version.
    pub version: u64,
    /// The state.
    pub state: T,
    /// The level it was read from.
    pub level: Level,
    /// The levels tried, in order, the last one being `level`.
    pub tried: Vec<Level>,
}

/// A question to a holder, given its number.
type Question<'a> = Box<dyn Fn(u64) -> CheckpointMsg + 'a>;

/// Reads one level, asking holders, with a decoder for the state.
pub(crate) struct Reader<'a, T> {
    pub(crate) ctx: &'a Ctx,
    pub(crate) type_tag: u64,
    pub(crate) decode: &'a dyn Fn(&[u8]) -> Result<T, String>,
    /// Ask dead holders too, and wait out their silence.
    pub(crate) probing: bool,
    pub(crate) failure: Failure,
    /// No version above this one (a global restart's agreed version).
    pub(crate) max: Option<u64>,
}

impl<T> Reader<'_, T> {
    /// Whether `version` may be restored (not above [`Reader::max`]).
    fn fits(&self, version: u64) -> bool {
        self.max.is_none_or(|m| version <= m)
    }

    fn skipped(&self, version: u64, level: Level, reason: &dyn std::fmt::Display) {
        tracing::warn!(rank = self.ctx.rank, version, %level, %reason, "checkpoint piece skipped");
    }

    fn expect(&self, owner: u32, version: u64, level: Level) -> Expect {
        Expect {
            job: self.ctx.job,
            type_tag: self.type_tag,
            owner: Some(owner),
            version: Some(version),
            level: Some(level),
        }
    }

    /// The newest fit version of this rank's state at `level`.
    pub(crate) fn level(&self, level: Level) -> Result<Option<(u64, T)>, CheckpointError> {
        match level {
            Level::L1 => {
                let stores = self.ctx.stores()?;
                Ok(self.local(&stores.local, level))
            }
            Level::L4 => {
                let stores = self.ctx.stores()?;
                Ok(stores.shared.as_ref().and_then(|s| self.local(s, level)))
            }
            Level::L2 => Ok(self.partner_copy()),
            Level::L3 => Ok(self.group()),
        }
    }

    fn local(&self, store: &FileStore, level: Level) -> Option<(u64, T)> {
        let rank = self.ctx.rank;
        let versions = match store.versions(rank, level) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(rank, %level, reason = %e, "checkpoint level unreadable, skipped");
                return None;
            }
        };
        for version in versions.into_iter().filter(|&v| self.fits(v)) {
            let key = super::PieceKey {
                owner: rank,
                level,
                shard: None,
                version,
            };
            match store.read(&key, &self.expect(rank, version, level)) {
                Ok(stored) => match (self.decode)(&stored.payload) {
                    Ok(state) => return Some((version, state)),
                    Err(e) => {
                        self.skipped(version, level, &format!("its state does not decode: {e}"))
                    }
                },
                Err(e) => self.skipped(version, level, &e),
            }
        }
        None
    }

    /// Whether `holder` is to be asked.
    fn asks(&self, holder: u32) -> bool {
        if self.probing {
            return true;
        }
        self.ctx
            .placement()
            .is_ok_and(|p| p.serves(holder, self.ctx.rank, &self.failure))
    }

    /// Asks each `(rank, question)` at once; the answers, in order
    /// (`None`: no answer, within the failure timeout). A dead holder is
    /// given up at once, unless probing: then it costs the timeout, as a
    /// silent one does.
    fn ask_all(&self, questions: Vec<(u32, Question<'_>)>) -> Vec<Option<CheckpointMsg>> {
        let until = Instant::now() + self.ctx.answer_timeout;
        let mut waiting = Vec::new();
        for (to, q) in questions {
            let (req, rx) = self.ctx.requests.open(to);
            let sent = self.ctx.send(to, q(req));
            if let Err(e) = &sent {
                tracing::debug!(rank = self.ctx.rank, to, reason = %e, "checkpoint question not sent");
            }
            waiting.push((req, rx, sent.is_ok()));
        }
        let answers = waiting
            .iter()
            .map(|(_, rx, sent)| match sent {
                true => rx.recv_deadline(until).ok(),
                false => None,
            })
            .collect::<Vec<_>>();
        if self.probing && answers.iter().any(Option::is_none) {
            // A holder FTI cannot tell from a slow one: its timeout.
            if let Some(left) = until.checked_duration_since(Instant::now()) {
                std::thread::sleep(left);
            }
        }
        for (req, _, _) in &waiting {
            self.ctx.requests.close(*req);
        }
        answers
    }

    /// One piece `holder` lends, fetched and given back.
    fn fetched(
        &self,
        holder: u32,
        answer: Option<CheckpointMsg>,
        req: u64,
    ) -> Result<Vec<u8>, String> {
        match answer {
            Some(CheckpointMsg::Piece { len, .. }) => {
                let key = buffer_key(Body::Fetched, self.ctx.rank, req, 0);
                let bytes = self.ctx.get(holder, key, len.min(super::holder::MAX_BODY));
                let _ = self.ctx.send(holder, CheckpointMsg::Release { req });
                bytes
            }
            Some(CheckpointMsg::Missing { reason, .. }) => Err(format!("rank {holder}: {reason}")),
            Some(other) => Err(format!("rank {holder} answered {other:?}")),
            None => Err(format!(
                "no answer from rank {holder} within {:?}",
                self.ctx.answer_timeout
            )),
        }
    }

    /// Asks `holder` for one piece: its bytes.
    fn fetch(&self, holder: u32, q: impl Fn(u64) -> CheckpointMsg) -> Result<Vec<u8>, String> {
        let (req, rx) = self.ctx.requests.open(holder);
        let sent = self.ctx.send(holder, q(req));
        let answer = match sent {
            Ok(()) => rx.recv_timeout(self.ctx.answer_timeout).ok(),
            Err(_) => None,
        };
        self.ctx.requests.close(req);
        self.fetched(holder, answer, req)
    }

    /// The newest fit version of this rank's copy at its partner.
    fn partner_copy(&self) -> Option<(u64, T)> {
        let me = self.ctx.rank;
        let partner = self.ctx.placement().ok()?.partner(me)?;
        if !self.asks(partner) {
            return None;
        }
        let versions = self.partner_listing(partner)?;
        for (version, _) in versions.into_iter().filter(|&(v, _)| self.fits(v)) {
            let q = |req| CheckpointMsg::Fetch {
                req,
                level: 2,
                owner: me,
                group: 0,
                index: 0,
                version,
                type_tag: self.type_tag,
            };
            let checked = self.fetch(partner, q).and_then(|bytes| {
                let p = piece::check(&bytes, &self.expect(me, version, Level::L2))
                    .map_err(|e| e.to_string())?;
                (self.decode)(p.payload).map_err(|e| format!("its state does not decode: {e}"))
            });
            match checked {
                Ok(state) => return Some((version, state)),
                Err(reason) => self.skipped(version, Level::L2, &reason),
            }
        }
        None
    }

    /// The versions of this rank's state `partner` lists as its L2 copies
    /// (`None`: no answer).
    pub(crate) fn partner_listing(&self, partner: u32) -> Option<Vec<(u64, u16)>> {
        let me = self.ctx.rank;
        let query = move |req| CheckpointMsg::Query {
            req,
            level: 2,
            owner: me,
            group: 0,
        };
        match self
            .ask_all(vec![(partner, Box::new(query))])
            .pop()
            .flatten()
        {
            Some(CheckpointMsg::Holding { pieces, .. }) => Some(pieces),
            other => {
                tracing::warn!(rank = me, partner, answer = ?other, "no L2 copy listed by the partner");
                None
            }
        }
    }

    /// The newest version of this rank's state its group can rebuild.
    fn group(&self) -> Option<(u64, T)> {
        let me = self.ctx.rank;
        let g = self.ctx.placement().ok()?.group_of(me)?.clone();
        let mut holders: Vec<u32> = g.members.iter().chain(&g.parity).copied().collect();
        holders.sort_unstable();
        holders.dedup();
        holders.retain(|&h| self.asks(h));
        let group = g.index;
        let questions = holders
            .iter()
            .map(|&h| {
                let q: Question<'_> = Box::new(move |req| CheckpointMsg::Query {
                    req,
                    level: 3,
                    owner: me,
                    group,
                });
                (h, q)
            })
            .collect();
        // version → the (holder, shard index) pairs listed.
        let mut listed: BTreeMap<u64, Vec<(u32, u16)>> = BTreeMap::new();
        for (&h, answer) in holders.iter().zip(self.ask_all(questions)) {
            if let Some(CheckpointMsg::Holding { pieces, .. }) = answer {
                for (v, i) in pieces {
                    listed.entry(v).or_default().push((h, i));
                }
            }
        }
        let k = g.members.len();
        let usable = |(v, p): &(&u64, &Vec<(u32, u16)>)| p.len() >= k && self.fits(**v);
        for (&version, pieces) in listed.iter().rev().filter(usable) {
            match self.rebuild(&g, version, pieces) {
                Ok(state) => return Some((version, state)),
                Err(reason) => self.skipped(version, Level::L3, &reason),
            }
        }
        None
    }

    /// Fetches `pieces` of `g`'s `version`, verifies each, and decodes
    /// this rank's state from any `k` of them.
    fn rebuild(&self, g: &EcGroup, version: u64, pieces: &[(u32, u16)]) -> Result<T, String> {
        let mut good: Vec<Vec<u8>> = Vec::new();
        for &(holder, index) in pieces {
            let q = |req| CheckpointMsg::Fetch {
                req,
                level: 3,
                owner: holder,
                group: g.index,
                index,
                version,
                type_tag: self.type_tag,
            };
            let checked = self.fetch(holder, q).and_then(|bytes| {
                let p = piece::check(&bytes, &self.expect(holder, version, Level::L3))
                    .map_err(|e| e.to_string())?;
                match p.header.shard.as_ref() {
                    Some(s) if s.group == g.index && s.index == index && s.members == g.members => {
                        Ok(())
                    }
                    _ => Err("a piece of another group or shard".to_string()),
                }?;
                Ok(bytes)
            });
            match checked {
                Ok(bytes) => good.push(bytes),
                Err(reason) => self.skipped(
                    version,
                    Level::L3,
                    &format!("shard {index} of rank {holder}: {reason}"),
                ),
            }
        }
        let views: Vec<&[u8]> = good.iter().map(Vec::as_slice).collect();
        let expect = Expect {
            owner: None,
            ..self.expect(0, version, Level::L3)
        };
        let (members, mut states) =
            erasure::rebuild_pieces(&views, &expect).map_err(|e| e.to_string())?;
        let i = members
            .iter()
            .position(|&r| r == self.ctx.rank)
            .ok_or("not a member")?;
        (self.decode)(&std::mem::take(&mut states[i]))
            .map_err(|e| format!("its state does not decode: {e}"))
    }
}
