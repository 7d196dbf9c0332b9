//! A dead member whose replacement is expected: its lost original is
//! awaited, never lost, and every original is folded exactly once.

use super::*;
use proptest::prelude::*;

#[derive(Debug)]
enum Ev {
    Join(usize),
    Kill(usize),
    /// The replacement of a killed rank is in and joins again.
    Back(usize),
    /// A task, with the incarnations of its receiver and provider when
    /// it was handed out.
    Task(Assignment, u32, u32),
}

/// Runs one reduction in which `victims` die at their times and their
/// replacements come back `delay` later; copies exist for the originals
/// `replicated` says. Returns the root's counts.
fn simulate_respawns(
    n: usize,
    root: usize,
    arrivals: &[f64],
    victims: &[(usize, f64)],
    delay: f64,
    replicated: &dyn Fn(usize) -> bool,
) -> Result<Vec<u32>, Unrecoverable> {
    let unit = |k: usize| (0..n).map(|i| u32::from(i == k)).collect::<Vec<u32>>();
    let mut s = Schedule::new(n, root);
    let mut data: Vec<Vec<u32>> = (0..n).map(unit).collect();
    let (mut dead, mut replaced) = (vec![false; n], vec![false; n]);
    let mut gen = vec![0u32; n];
    let mut events: Vec<(f64, Ev)> = (0..n).map(|i| (arrivals[i], Ev::Join(i))).collect();
    for &(k, t) in victims {
        events.push((t, Ev::Kill(k)));
        events.push((t + delay, Ev::Back(k)));
    }
    for _ in 0..(60 * n + 60) {
        let Some(k) = (0..events.len()).min_by(|&a, &b| events[a].0.total_cmp(&events[b].0)) else {
            break;
        };
        let (now, ev) = events.swap_remove(k);
        match ev {
            // The first incarnation joins unless it died first; a
            // replacement's join is its own event.
            Ev::Join(i) if dead[i] || replaced[i] => {}
            Ev::Join(i) => s.join(i).unwrap(),
            Ev::Kill(i) => {
                dead[i] = true;
                data[i] = vec![0; n];
                s.await_replacement(i);
                s.fail(i, replicated)?;
            }
            Ev::Back(i) => {
                (dead[i], replaced[i]) = (false, true);
                gen[i] += 1;
                data[i] = unit(i);
                s.revive(i);
                s.join_replacement(i).unwrap();
            }
            Ev::Task(t, gr, gp) => {
                let (r, p) = (t.receiver.index, t.provider.index);
                let gone = |k: usize, g: u32| dead[k] || gen[k] != g;
                if gone(r, gr) {
                    // A dead receiver never reports.
                } else if gone(p, gp) && t.source != Source::Replica {
                    s.fetch_failed(t.task_id, r, replicated).unwrap();
                    s.check_recoverable(replicated)?;
                } else {
                    if t.restore {
                        data[r] = unit(r);
                    }
                    let theirs = match t.source {
                        Source::Data => std::mem::replace(&mut data[p], vec![0; n]),
                        Source::Original | Source::Replica => unit(p),
                    };
                    for (c, m) in data[r].iter_mut().zip(theirs) {
                        *c += m;
                    }
                    let path = t.receiver.path.union(&t.provider.path);
                    s.task_done(t.task_id, r, &path).unwrap();
                }
            }
        }
        while let Some(step) = s.next(|_, _| false) {
            match step {
                Step::Complete => return Ok(data[root].clone()),
                Step::Task(a) => {
                    assert!(!s.is_dead(a.receiver.index), "a dead rank was given a task");
                    let g = (gen[a.receiver.index], gen[a.provider.index]);
                    events.push((now + 1.0, Ev::Task(a, g.0, g.1)));
                }
            }
        }
    }
    panic!("the reduction neither completed nor failed");
}

#[test]
fn a_dead_root_is_awaited_and_receives_the_result_in_its_replacement() {
    let got = simulate_respawns(4, 0, &[0.0, 0.0, 0.0, 0.0], &[(0, 0.5)], 3.0, &|_| true);
    assert_eq!(got, Ok(vec![1, 1, 1, 1]));
}

#[test]
fn an_original_with_no_copy_is_awaited_not_lost() {
    let got = simulate_respawns(4, 0, &[0.0, 0.0, 0.0, 0.0], &[(2, 0.5)], 2.0, &|_| false);
    assert_eq!(got, Ok(vec![1, 1, 1, 1]));
    // Without a replacement the same death is a loss.
    let mut s = Schedule::new(4, 0);
    (0..4).for_each(|i| s.join(i).unwrap());
    assert!(s.fail(2, |_| false).is_err());
}

#[test]
fn a_replacement_that_never_comes_ends_the_reduction_when_given_up() {
    let mut s = Schedule::new(3, 0);
    s.join(0).unwrap();
    s.await_replacement(2);
    s.fail(2, |_| false).unwrap();
    assert_eq!(
        s.give_up(2, |_| false),
        Err(Unrecoverable {
            lost: vec![2],
            root: false
        })
    );
}

#[test]
fn a_replacement_that_never_joins_again_ends_the_reduction_when_given_up() {
    let mut s = Schedule::new(3, 0);
    (0..3).for_each(|i| s.join(i).unwrap());
    s.await_replacement(2);
    s.fail(2, |_| false).unwrap();
    s.revive(2);
    assert!(!s.is_dead(2), "its replacement is awaited as a member");
    assert_eq!(
        s.give_up(2, |_| false),
        Err(Unrecoverable {
            lost: vec![2],
            root: false
        })
    );
    // Joined in time: nothing to give up.
    let mut s = Schedule::new(3, 0);
    (0..3).for_each(|i| s.join(i).unwrap());
    s.await_replacement(2);
    s.fail(2, |_| false).unwrap();
    s.revive(2);
    s.join_replacement(2).unwrap();
    assert_eq!(s.give_up(2, |_| false), Ok(()));
}

#[test]
fn a_copied_original_makes_the_replacements_join_a_duplicate() {
    let mut s = Schedule::new(3, 0);
    (0..3).for_each(|i| s.join(i).unwrap());
    s.await_replacement(1);
    s.fail(1, |_| true).unwrap();
    s.revive(1);
    assert!(
        s.is_dead(1),
        "read from its buddy, not from the replacement"
    );
    assert_eq!(s.join_replacement(1), Ok(Replacement::Held));
}

/// Without a takeover: member 2's buddy took the copy of its original,
/// then 2 died before its join reached the master, its replacement
/// awaited. The copy is read at once; the reduction does not wait for the
/// replacement.
#[test]
fn a_copy_taken_before_a_lost_join_is_read_while_the_replacement_is_awaited() {
    let mut s = Schedule::new(4, 1);
    for i in [0, 1, 3] {
        s.join(i).unwrap();
    }
    let copied = |k: usize| k == 2;
    s.await_replacement(2);
    s.fail(2, copied).unwrap();
    let mut read = Vec::new();
    while let Some(Step::Task(t)) = s.next(|_, _| false) {
        read.push((t.provider.index, t.source));
        let path = t.receiver.path.union(&t.provider.path);
        s.task_done(t.task_id, t.receiver.index, &path).unwrap();
    }
    assert!(s.is_complete(), "complete before any replacement came");
    assert!(read.contains(&(2, Source::Replica)), "{read:?}");
}

/// As a standby rebuilds a reduction after its master died: member 2 (the
/// dead master) reported nothing, so its original is not counted in, yet
/// a live buddy reported a copy of it, and its replacement is awaited.
/// The copy is read: the replacement that never comes (or never joins
/// again) costs nothing, as a single live copy must suffice.
#[test]
fn a_copied_original_not_counted_in_is_read_from_its_copy_not_awaited() {
    let entries = [0, 1, 3].map(|i| Entry::single(i, false)).to_vec();
    let mut s = Schedule::resume(4, 1, [0, 1, 3].into_iter().collect(), entries);
    let copied = |k: usize| k == 2;
    s.await_replacement(2);
    s.fail(2, copied).unwrap();
    assert_eq!(s.give_up(2, copied), Ok(()), "its copy is alive");
    let mut read_from_copy = false;
    loop {
        match s.next(|_, _| false) {
            Some(Step::Complete) => break,
            Some(Step::Task(t)) => {
                read_from_copy |= t.provider.index == 2 && t.source == Source::Replica;
                let path = t.receiver.path.union(&t.provider.path);
                s.task_done(t.task_id, t.receiver.index, &path).unwrap();
            }
            None => panic!("the reduction stalled"),
        }
    }
    assert!(read_from_copy, "2's original comes from its copy");
    // Its replacement, should it come after all, stands in only.
    let mut s = Schedule::resume(4, 1, [0, 1, 3].into_iter().collect(), Vec::new());
    s.await_replacement(2);
    s.fail(2, copied).unwrap();
    s.revive(2);
    assert_eq!(s.join_replacement(2), Ok(Replacement::Held));
}

/// Member 0 died with a copy of its original at its buddy, and its
/// replacement came (its join held, or not yet sent); then the buddy
/// died with the copy. The replacement's join stands in: the reduction
/// completes with every original once, never `RanksLost` (`bench chaos`,
/// seed 650: the dead master's node-mate held the copy).
#[test]
fn a_copy_lost_after_the_replacement_came_is_replaced_by_its_join() {
    for held_first in [false, true] {
        let mut s = Schedule::new(4, 2);
        (0..4).for_each(|i| s.join(i).unwrap());
        let copy = std::cell::Cell::new(true);
        // 3's own original has a copy elsewhere, alive throughout.
        let has = |k: usize| (k == 0 && copy.get()) || k == 3;
        s.await_replacement(0);
        s.fail(0, has).unwrap();
        s.revive(0);
        if held_first {
            assert_eq!(s.join_replacement(0), Ok(Replacement::Held));
        }
        // Position 3, the buddy, dies, and the copy of 0's original with it.
        copy.set(false);
        assert_eq!(s.fail(3, has), Ok(()), "held first: {held_first}");
        if !held_first {
            assert_eq!(s.join_replacement(0), Ok(Replacement::Joined));
        }
        let mut folded = RankSet::single(2);
        loop {
            match s.next(|_, _| false) {
                Some(Step::Complete) => break,
                Some(Step::Task(t)) => {
                    let path = t.receiver.path.union(&t.provider.path);
                    s.task_done(t.task_id, t.receiver.index, &path).unwrap();
                    if t.receiver.index == 2 {
                        folded = path;
                    }
                }
                None => panic!("stalled, held first: {held_first}"),
            }
        }
        assert_eq!(folded.len(), 4, "every original once");
    }
}

#[test]
fn a_held_replacement_that_dies_leaves_its_place_to_the_next() {
    let mut s = Schedule::new(4, 1);
    (0..4).for_each(|i| s.join(i).unwrap());
    // Rank 2's original is being read when it dies; a copy is kept.
    while s.next(|_, _| true).is_some() {}
    s.await_replacement(2);
    s.fail(2, |k| k == 2).unwrap();
    s.revive(2);
    assert_eq!(s.join_replacement(2), Ok(Replacement::Held));
    // Its replacement dies, the next one joins: held in its place.
    s.await_replacement(2);
    s.fail(2, |k| k == 2).unwrap();
    s.revive(2);
    assert_eq!(s.join_replacement(2), Ok(Replacement::Held));
}

#[test]
fn a_stand_in_after_a_rebuild_is_held_as_a_revived_replacements_join() {
    // A standby's rebuild: 1's original is in 2's data, and 1's rank is a
    // replacement that has not joined since.
    let entries = vec![
        Entry::single(0, false),
        Entry {
            index: 2,
            path: [1, 2].into_iter().collect(),
            recovering: false,
        },
    ];
    let mut s = Schedule::resume(3, 0, [0, 1, 2].into_iter().collect(), entries);
    s.stand_in(1);
    assert_eq!(s.join_replacement(1), Ok(Replacement::Held));
    assert_eq!(s.join_replacement(1), Err(ScheduleError::DuplicateJoin(1)));
    // A position whose original is not in stands in for nothing.
    let mut fresh = Schedule::new(3, 0);
    fresh.stand_in(1);
    assert_eq!(fresh.join_replacement(1), Ok(Replacement::Joined));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn replaced_ranks_count_exactly_once(
        n in 2usize..=16,
        root_seed in any::<usize>(),
        arrivals in proptest::collection::vec(0.0f64..10.0, 16),
        victims in proptest::collection::vec((any::<usize>(), 0.0f64..20.0), 1..4),
        delay in 0.1f64..8.0,
        replicated_mask in any::<u16>(),
    ) {
        let root = root_seed % n;
        let mut victims: Vec<(usize, f64)> = victims.iter().map(|&(k, t)| (k % n, t)).collect();
        victims.sort_by_key(|v| v.0);
        victims.dedup_by_key(|v| v.0);
        let replicated = |k: usize| replicated_mask & (1 << k) != 0;
        let got = simulate_respawns(n, root, &arrivals[..n], &victims, delay, &replicated);
        // Every original is awaited or copied: nothing is ever lost.
        prop_assert_eq!(got, Ok(vec![1; n]));
    }
}
