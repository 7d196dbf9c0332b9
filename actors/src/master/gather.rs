//! Which ready messages a small reduction's root gathers (see
//! `taskfold_core::schedule::Schedule::next_gathering` and the book's
//! Architecture chapter, "Small contributions"), and how a gathering task
//! names them.

use crate::outbox::Outbox;
use taskfold_core::roster::Roster;
use taskfold_core::schedule::{Assignment, Entry};
use taskfold_core::wire::Gathered;
use taskfold_core::{Group, Rank};
use taskfold_transports::same_node::located_len;

/// Providers per task at most: a root with more members on its node takes
/// them in several tasks, so that no task message grows with the node.
pub(super) const CAP: usize = 64;

/// Whether a ready message is one the root gathers: its data lies on the
/// root's node, where the root reads it in place (its holder announced
/// where), and it is no larger than `max` bytes. `None` when nothing is
/// gathered (`max` is 0, or the nodes are unknown).
pub(super) fn near_root<'a, T>(
    out: &'a Outbox,
    max: u64,
    group: &'a Group,
    root: Rank,
    roster: &'a Roster<T>,
) -> Option<impl Fn(&Entry) -> bool + 'a> {
    if max == 0 {
        return None;
    }
    // Read under the view's lock for one decision: no copy of every
    // rank's node per message.
    let view = out.view().read();
    let home = view.node(root.0);
    if home == 0 {
        return None;
    }
    Some(move |e: &Entry| {
        e.index < group.len()
            && view.node(group.rank_at(e.index).0) == home
            && roster
                .direct(e.index)
                .is_some_and(|d| located_len(d) <= max)
    })
}

/// The further providers of task `a`, as its receiver reads them: each
/// with where its data lies. One whose holder announced no place any more
/// is left out: the receiver cannot fold it, and the master schedules it
/// again when the task is done.
pub(super) fn gathered<T>(a: &Assignment, group: &Group, roster: &Roster<T>) -> Vec<Gathered> {
    a.more
        .iter()
        .filter_map(|e| {
            Some(Gathered {
                provider: group.rank_at(e.index).0,
                path: e.path.clone(),
                direct: roster.direct(e.index)?.clone(),
            })
        })
        .collect()
}
