//! The gathering rule computed from scratch, by scanning the whole queue
//! and every task in flight: the reference the gathering tests hold
//! [`Schedule::next_gathering`]'s index to, decision by decision.

use super::*;

/// A decision, as [`scanned`] names it.
#[derive(Debug, PartialEq)]
pub(super) enum Decision {
    Complete,
    /// Receiver, provider, further providers.
    Task(Entry, Entry, Vec<Entry>),
}

impl From<&Step> for Decision {
    fn from(step: &Step) -> Self {
        match step {
            Step::Complete => Decision::Complete,
            Step::Task(a) => Decision::Task(a.receiver.clone(), a.provider.clone(), a.more.clone()),
        }
    }
}

/// The gathering rule's decision in the state `s` is in, computed from
/// scratch by scanning the whole queue and every task in flight, as the
/// rule reads in the module's doc: what `next_gathering`'s index must
/// decide, whatever happened before.
pub(super) fn scanned(
    s: &Schedule,
    home: u64,
    node: &dyn Fn(&Entry) -> Option<u64>,
    cap: usize,
) -> Option<Decision> {
    let q: Vec<&Entry> = s.queue.iter().collect();
    if s.complete {
        return None;
    }
    if q.first().is_some_and(|e| e.path.is_full(s.n)) {
        return Some(Decision::Complete);
    }
    let cap = cap.max(1);
    let at: Vec<Option<u64>> = q.iter().map(|e| s.admitted(e, node)).collect();
    let root_waits = s.joined.contains(s.root) && !s.dead.contains(s.root);
    let root_at = q.iter().position(|e| e.index == s.root);
    let pick = |is: &[usize]| is.iter().map(|&i| q[i].clone()).collect::<Vec<_>>();
    if let Some(r) = root_at.filter(|_| root_waits) {
        if let Some(first) = (0..q.len()).find(|&i| i != r) {
            let more: Vec<usize> = (first + 1..q.len())
                .filter(|&i| i != r && at[i] == Some(home))
                .take(cap - 1)
                .collect();
            return Some(Decision::Task(q[r].clone(), q[first].clone(), pick(&more)));
        }
    }
    let busy: Vec<u64> = s
        .in_flight
        .values()
        .filter_map(|t| s.admitted(&t.receiver, node))
        .collect();
    let eligible = |i: usize| match at[i] {
        Some(n) if root_waits && n == home => false,
        Some(n) => !busy.contains(&n),
        None => !root_waits || Some(i) != root_at,
    };
    let dead = |i: usize| s.dead.contains(q[i].index);
    let mut open = (0..q.len()).filter(|&i| eligible(i));
    let i = open.next()?;
    let j = if dead(i) {
        open.find(|&j| !dead(j))?
    } else {
        open.next()?
    };
    let (r, p) = if choose_b(q[i], q[j], s.root, &s.dead, |_, _| false) {
        (j, i)
    } else {
        (i, j)
    };
    let more: Vec<usize> = match at[r] {
        Some(n) => (0..q.len())
            .filter(|&k| k != i && k != j && eligible(k) && at[k] == Some(n))
            .take(cap - 1)
            .collect(),
        None => Vec::new(),
    };
    Some(Decision::Task(q[r].clone(), q[p].clone(), pick(&more)))
}
