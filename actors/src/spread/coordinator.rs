//! The coordinator's part of the spreader (the master's rank): one state
//! machine ([`Spread`]) per spread, created by its first member's message
//! and dropped once nothing more can happen to it.

use crate::outbox::Outbox;
use std::collections::HashMap;
use taskfold_core::spread::{Action, Event, Spread};
use taskfold_core::wire::spread::{Opening, SpreadMsg};
use taskfold_core::wire::Msg;
use taskfold_core::{Rank, RankSet};

/// The spreads this rank coordinates, by key.
#[derive(Default)]
pub(super) struct Coordinated {
    spreads: HashMap<u64, (Opening, Spread)>,
}

impl Coordinated {
    /// Forgets every spread (the coordinator moved, or this rank is out).
    pub(super) fn clear(&mut self) {
        self.spreads.clear();
    }

    /// `msg` from member `from`; `dead` the ranks known failed.
    pub(super) fn on(&mut self, from: Rank, msg: SpreadMsg, dead: &RankSet, out: &Outbox) {
        let (key, ev) = match msg {
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
            let spread = Spread::new(o.group.iter().copied(), o.source, &dead).with_nodes(
                o.group
                    .iter()
                    .map(|&r| (r, nodes.get(r as usize).copied().unwrap_or(0))),
            );
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
            }
        }
        if s.is_over() {
            self.spreads.remove(&key);
        }
    }
}

fn send(out: &Outbox, to: u32, m: SpreadMsg) {
    if let Err(e) = out.send(Rank(to), &Msg::Spread(m)) {
        // A dead member: the coordinator hears of its death.
        tracing::debug!(to, error = %e, "a spread message was not sent");
    }
}
