//! The coordinator's part of the spreader (the master's rank): one state
//! machine ([`Spread`]) per spread, created by its first member's message
//! and dropped once nothing more can happen to it.
//!
//! A coordinator that took over from a dead one ([`Coordinated::take_over`])
//! rebuilds the spreads from every live rank's report
//! ([`SpreadMsg::Report`]); until a rank has reported, no spread it is a
//! member of is declared lost (it may hold the value).

use crate::outbox::Outbox;
use std::collections::{BTreeSet, HashMap};
use taskfold_core::spread::recent::Recent;
use taskfold_core::spread::{Action, Event, Phase, Spread};
use taskfold_core::wire::spread::{Opening, Report, SpreadMsg};
use taskfold_core::wire::Msg;
use taskfold_core::{Rank, RankSet};

/// Keys of spreads that finished, kept to answer a holder that reports
/// one late (after a takeover: told to let go at once) and a replacement
/// that redoes one (told it is lost). As many as the master keeps of
/// ended reductions for replacements that join them again.
const DONE_KEPT: usize = 65_536;

/// The spreads this rank coordinates, by key.
pub(super) struct Coordinated {
    spreads: HashMap<u64, (Opening, Spread)>,
    /// Since a takeover: the live ranks whose report is still awaited.
    awaited: BTreeSet<u32>,
    /// The newest spreads that finished (every live member held them).
    done: Recent,
}

impl Default for Coordinated {
    fn default() -> Self {
        Coordinated {
            spreads: HashMap::new(),
            awaited: BTreeSet::new(),
            done: Recent::new(DONE_KEPT),
        }
    }
}

impl Coordinated {
    /// Forgets every spread (the coordinator moved, or this rank is out).
    pub(super) fn clear(&mut self) {
        self.spreads.clear();
        self.awaited.clear();
        self.done.clear();
    }

    /// This rank coordinates from now on, in place of a dead coordinator:
    /// every spread is rebuilt from the reports of `live`.
    pub(super) fn take_over(&mut self, live: impl IntoIterator<Item = u32>) {
        self.clear();
        self.awaited = live.into_iter().collect();
    }

    /// Rank `from`'s report to this coordinator, after a takeover.
    fn report(&mut self, from: Rank, r: Report, dead: &RankSet, out: &Outbox) {
        for o in r.holding {
            if self.done.contains(o.key) {
                send(out, from.0, SpreadMsg::Finished { key: o.key });
            } else if let Some(key) = self.open(from, o, dead, out) {
                self.apply(key, Event::Holds(from.0), out);
            }
        }
        for (o, holder) in r.wanting {
            // A replacement redoing a spread another report said finished.
            if self.done.contains(o.key) {
                send(out, from.0, SpreadMsg::Finished { key: o.key });
                continue;
            }
            if let Some(key) = self.open(from, o, dead, out) {
                let ev = match holder {
                    Some(holder) => Event::Fetching {
                        fetcher: from.0,
                        holder,
                    },
                    None => Event::Want(from.0),
                };
                self.apply(key, ev, out);
            }
        }
        for key in r.finished {
            if self.spreads.contains_key(&key) {
                self.apply(key, Event::Finished(from.0), out);
            } else {
                self.finished(key);
            }
        }
        self.awaited.remove(&from.0);
        let keys: Vec<u64> = self.spreads.keys().copied().collect();
        for key in keys {
            self.apply(key, Event::Reported(from.0), out);
        }
    }

    fn finished(&mut self, key: u64) {
        self.done.insert(key);
    }

    /// `msg` from member `from`; `dead` the ranks known failed.
    pub(super) fn on(&mut self, from: Rank, msg: SpreadMsg, dead: &RankSet, out: &Outbox) {
        let (key, ev) = match msg {
            SpreadMsg::Report(r) => return self.report(from, r, dead, out),
            // A holder of a spread that finished: it lets go at once. A
            // member that asks for it now is a replacement redoing it (a
            // live member is waited for): nobody holds the value any more,
            // and it is told so rather than left waiting.
            SpreadMsg::Have(o) | SpreadMsg::Want(o) if self.done.contains(o.key) => {
                return send(out, from.0, SpreadMsg::Finished { key: o.key })
            }
            SpreadMsg::Have(o) => match self.open(from, o, dead, out) {
                Some(key) => (key, Event::Have(from.0)),
                None => return,
            },
            SpreadMsg::Want(o) => match self.open(from, o, dead, out) {
                Some(key) => (key, Event::Want(from.0)),
                None => return,
            },
            // The source gives up: as its death, for this spread only.
            SpreadMsg::Gone { key } => match self.spreads.get(&key) {
                Some((_, s)) if s.source() == from.0 => (key, Event::Dead(from.0)),
                _ => return,
            },
            SpreadMsg::Fetched { key, ok: true } => (key, Event::Fetched(from.0)),
            SpreadMsg::Fetched { key, ok: false } => (key, Event::FetchFailed(from.0)),
            _ => return,
        };
        self.apply(key, ev, out);
    }

    /// The master declared `rank` failed: every spread hears it.
    pub(super) fn dead(&mut self, rank: u32, out: &Outbox) {
        self.awaited.remove(&rank);
        let keys: Vec<u64> = self.spreads.keys().copied().collect();
        for key in keys {
            self.apply(key, Event::Dead(rank), out);
        }
    }

    /// The spread `o` names, made on its first message; `None` (and the
    /// sender told, if it differs) if `from` may not speak of it.
    fn open(&mut self, from: Rank, o: Opening, dead: &RankSet, out: &Outbox) -> Option<u64> {
        if !o.group.contains(&from.0) || !o.group.contains(&o.source) {
            tracing::warn!(%from, id = %o.id, "a spread message from outside its group; dropped");
            return None;
        }
        let key = o.key;
        let (first, _) = self.spreads.entry(key).or_insert_with(|| {
            let dead: Vec<u32> = o
                .group
                .iter()
                .copied()
                .filter(|r| dead.contains(*r as usize))
                .collect();
            // Nodes as the view has them now: they set only who serves
            // whom first, never whether a member gets the value.
            let nodes = out.view().nodes().unwrap_or_default();
            let spread = Spread::new(o.group.iter().copied(), o.source, &dead)
                .with_nodes(
                    o.group
                        .iter()
                        .map(|&r| (r, nodes.get(r as usize).copied().unwrap_or(0))),
                )
                .awaiting_reports(self.awaited.iter().copied());
            (o.clone(), spread)
        });
        let detail = if first.id != o.id || first.group != o.group {
            Some(format!("rank {} names another id or group", from.0))
        } else if first.source != o.source {
            Some(format!(
                "rank {} names root {}, another rank named {}",
                from.0, o.source, first.source
            ))
        } else if first.type_tag != o.type_tag {
            Some(format!("rank {} gives another type", from.0))
        } else {
            None
        };
        match detail {
            Some(detail) => {
                send(out, from.0, SpreadMsg::Refused { key, detail });
                None
            }
            None => Some(key),
        }
    }

    fn apply(&mut self, key: u64, ev: Event, out: &Outbox) {
        let Some((_, s)) = self.spreads.get_mut(&key) else {
            return;
        };
        let root = s.source();
        for a in s.on(ev) {
            match a {
                Action::Fetch { fetcher, holder } => {
                    send(out, fetcher, SpreadMsg::Fetch { key, from: holder })
                }
                Action::Fail { rank } => send(out, rank, SpreadMsg::Lost { key, root }),
                Action::Finish { holders } => {
                    for h in holders {
                        send(out, h, SpreadMsg::Finished { key });
                    }
                }
                // A member that does not hold the value takes `Finished`
                // as its loss (`ResultLost`).
                Action::TooLate { rank } => send(out, rank, SpreadMsg::Finished { key }),
            }
        }
        if s.is_over() {
            let done = s.phase() == &Phase::Done;
            self.spreads.remove(&key);
            if done {
                self.finished(key);
            }
        }
    }
}

fn send(out: &Outbox, to: u32, m: SpreadMsg) {
    if let Err(e) = out.send(Rank(to), &Msg::Spread(m)) {
        // A dead member: the coordinator hears of its death.
        tracing::debug!(to, error = %e, "a spread message was not sent");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use taskfold_core::wire;
    use taskfold_transports::loopback::{LoopbackHub, LoopbackTransport};
    use taskfold_transports::{Event, Transport};

    fn opening(key: u64) -> Opening {
        Opening {
            key,
            id: format!("s{key}"),
            group: vec![0, 1, 2],
            source: 1,
            type_tag: 7,
        }
    }

    /// A replacement (rank 2) that redoes a spread which finished long
    /// ago, past the old bound of 1,024 but within this one, is told it
    /// finished rather than left waiting; one older than the bound is
    /// not recognised (it would be waited for).
    #[test]
    fn a_replacement_redoing_an_old_finished_spread_is_told() {
        let (_hub, ts) = LoopbackHub::new(3);
        let t: Arc<dyn Transport> = ts[0].clone();
        let out = Outbox::of(t);
        let mut c = Coordinated::default();
        let first = 1_000u64;
        // As many as the master keeps of ended reductions, and 100 more.
        let n = 65_536 + 100;
        for k in first..first + n {
            c.finished(k);
        }
        let old_but_kept = first + 100;
        let forgotten = first + 99;
        let dead = RankSet::default();
        c.on(Rank(2), SpreadMsg::Want(opening(old_but_kept)), &dead, &out);
        c.on(Rank(2), SpreadMsg::Want(opening(forgotten)), &dead, &out);
        let got = sent_to(&ts, 2);
        assert!(
            matches!(got.as_slice(), [SpreadMsg::Finished { key }] if *key == old_but_kept),
            "{got:?}"
        );
    }

    /// The spread messages rank `r` received so far.
    fn sent_to(ts: &[Arc<LoopbackTransport>], r: usize) -> Vec<SpreadMsg> {
        ts[r]
            .events()
            .try_iter()
            .filter_map(|e| match e {
                Event::Message { frame, .. } => match wire::decode(&frame) {
                    Ok(Msg::Spread(m)) => Some(m),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    /// After a takeover, a replacement (rank 2) reports that it wants a
    /// spread that another member reports the dead coordinator had
    /// finished: in either order, the replacement is told `Finished` (it
    /// then ends with `ResultLost`) instead of waiting for ever.
    #[test]
    fn a_wanting_report_of_a_finished_spread_is_answered_in_either_order() {
        for finished_first in [true, false] {
            let (_hub, ts) = LoopbackHub::new(3);
            let t: Arc<dyn Transport> = ts[0].clone();
            let out = Outbox::of(t);
            let mut c = Coordinated::default();
            c.take_over([0, 1, 2]);
            let dead = RankSet::default();
            let finished = Report {
                finished: vec![7],
                ..Report::default()
            };
            let wanting = Report {
                wanting: vec![(opening(7), None)],
                ..Report::default()
            };
            let (a, b) = match finished_first {
                true => ((Rank(1), finished), (Rank(2), wanting)),
                false => ((Rank(2), wanting), (Rank(1), finished)),
            };
            c.on(a.0, SpreadMsg::Report(a.1), &dead, &out);
            c.on(b.0, SpreadMsg::Report(b.1), &dead, &out);
            c.on(Rank(0), SpreadMsg::Report(Report::default()), &dead, &out);
            let got = sent_to(&ts, 2);
            assert!(
                matches!(got.as_slice(), [SpreadMsg::Finished { key: 7 }]),
                "finished first: {finished_first}: {got:?}"
            );
        }
    }
}
