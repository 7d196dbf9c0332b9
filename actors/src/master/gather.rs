//! Where a small reduction's ready messages lie, for gathering by node (see
//! `taskfold_core::schedule::Schedule::next_gathering` and the book's
//! Architecture chapter, "Small contributions"), and how a gathering task
//! names them.

use crate::outbox::Outbox;
use taskfold_core::roster::Roster;
use taskfold_core::schedule::{Assignment, Entry};
use taskfold_core::wire::Gathered;
use taskfold_core::{Group, Rank};
use taskfold_transports::same_node::located_len;

/// Where a ready message's data lies, for gathering (see
/// `Schedule::next_gathering`): the root's node, and for each message
/// the node where a rank reads it in place (its holder announced where),
/// if it is no larger than `max` bytes. `None` when nothing is gathered
/// (`max` is 0, or the nodes are unknown).
pub(super) fn nodes<'a, T>(
    out: &'a Outbox,
    max: u64,
    group: &'a Group,
    root: Rank,
    roster: &'a Roster<T>,
) -> Option<(u64, impl Fn(&Entry) -> Option<u64> + 'a)> {
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
    let node = move |e: &Entry| {
        let small = e.index < group.len()
            && roster
                .direct(e.index)
                .is_some_and(|d| located_len(d) <= max);
        // 0: a node the view does not know, never gathered.
        small
            .then(|| view.node(group.rank_at(e.index).0))
            .filter(|&n| n != 0)
    };
    Some((home, node))
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
