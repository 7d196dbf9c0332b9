use super::scanned::{scanned, Decision};
use super::*;
use proptest::prelude::*;

fn never(_: usize, _: usize) -> bool {
    false
}

/// Every message admitted, on node 1, the root's (`HOME`).
fn all(_: &Entry) -> Option<u64> {
    Some(HOME)
}

const HOME: u64 = 1;

fn path(ks: &[usize]) -> RankSet {
    ks.iter().copied().collect()
}

fn task(s: &mut Schedule, node: impl Fn(&Entry) -> Option<u64>, cap: usize) -> Assignment {
    match s.next_gathering(never, HOME, node, cap) {
        Some(Step::Task(t)) => t,
        other => panic!("expected a task, got {other:?}"),
    }
}

fn indices(es: &[Entry]) -> Vec<usize> {
    es.iter().map(|e| e.index).collect()
}

#[test]
fn everybody_ready_at_once_is_one_task() {
    let mut s = Schedule::new(8, 3);
    for i in [5, 0, 3, 1, 7, 2, 6, 4] {
        s.join(i).unwrap();
    }
    let t = task(&mut s, all, 64);
    assert_eq!(t.receiver.index, 3);
    assert_eq!(t.provider.index, 5, "the first ready provider");
    assert_eq!(
        indices(&t.more),
        vec![0, 1, 7, 2, 6, 4],
        "the rest, in order"
    );
    assert_eq!(t.source, Source::Data);
    assert_eq!(s.next_gathering(never, HOME, all, 64), None);
    let folded = s.task_done(t.task_id, 3, &RankSet::full(8)).unwrap();
    assert_eq!(indices(&folded), vec![5, 0, 1, 7, 2, 6, 4]);
    assert_eq!(s.next_gathering(never, HOME, all, 64), Some(Step::Complete));
}

#[test]
fn members_of_the_roots_node_wait_for_the_root_once_it_joined() {
    let mut s = Schedule::new(5, 0);
    s.join(0).unwrap();
    s.join(1).unwrap();
    let t = task(&mut s, all, 64);
    for i in [2, 3, 4] {
        s.join(i).unwrap();
        assert_eq!(
            s.next_gathering(never, HOME, all, 64),
            None,
            "nobody but the root receives"
        );
    }
    s.task_done(t.task_id, 0, &path(&[0, 1])).unwrap();
    let u = task(&mut s, all, 64);
    assert_eq!((u.provider.index, indices(&u.more)), (2, vec![3, 4]));
}

#[test]
fn before_the_root_joins_and_after_it_died_nobody_waits() {
    let mut s = Schedule::new(5, 0);
    s.join(1).unwrap();
    s.join(2).unwrap();
    let t = task(&mut s, all, 64);
    assert_eq!(
        (t.receiver.index, t.provider.index),
        (1, 2),
        "no root to wait for"
    );
    s.task_done(t.task_id, 1, &path(&[1, 2])).unwrap();
    s.join(3).unwrap();
    s.join(0).unwrap();
    let u = task(&mut s, all, 64);
    assert_eq!(u.receiver.index, 0);
    assert_eq!(
        (u.provider.index, indices(&u.more)),
        (1, vec![3]),
        "what is left, the pair's data too"
    );
    // The root dies holding its task, its replacement awaited: the
    // members pair again meanwhile.
    s.await_replacement(0);
    s.fail(0, |_| true).unwrap();
    s.join(4).unwrap();
    let v = task(&mut s, all, 64);
    assert_eq!(
        (v.receiver.index, v.provider.index, indices(&v.more)),
        (1, 3, vec![4]),
        "the first two ready pair, the receiver takes its node's others"
    );
    assert!(
        s.needs(0),
        "the root's original, recovering, is not gathered"
    );
}

#[test]
fn late_members_are_gathered_by_the_roots_next_task() {
    let mut s = Schedule::new(5, 0);
    s.join(0).unwrap();
    s.join(1).unwrap();
    let t = task(&mut s, all, 64);
    assert!(t.more.is_empty());
    s.join(2).unwrap();
    s.join(4).unwrap();
    assert_eq!(
        s.next_gathering(never, HOME, all, 64),
        None,
        "the root is busy"
    );
    s.task_done(t.task_id, 0, &path(&[0, 1])).unwrap();
    let u = task(&mut s, all, 64);
    assert_eq!((u.provider.index, indices(&u.more)), (2, vec![4]));
    s.task_done(u.task_id, 0, &path(&[0, 1, 2, 4])).unwrap();
    s.join(3).unwrap();
    let v = task(&mut s, all, 64);
    assert_eq!(v.provider.index, 3, "the last one in one step");
    s.task_done(v.task_id, 0, &RankSet::full(5)).unwrap();
    assert_eq!(s.next_gathering(never, HOME, all, 64), Some(Step::Complete));
}

#[test]
fn a_task_takes_at_most_cap_providers() {
    let mut s = Schedule::new(6, 0);
    for i in 0..6 {
        s.join(i).unwrap();
    }
    let t = task(&mut s, all, 3);
    assert_eq!((t.provider.index, indices(&t.more)), (1, vec![2, 3]));
    s.task_done(t.task_id, 0, &path(&[0, 1, 2, 3])).unwrap();
    let u = task(&mut s, all, 3);
    assert_eq!((u.provider.index, indices(&u.more)), (4, vec![5]));
    // A cap of 0 is taken for 1: one provider, as `next` would.
    let mut s = Schedule::new(3, 0);
    for i in 0..3 {
        s.join(i).unwrap();
    }
    assert!(task(&mut s, all, 0).more.is_empty());
}

#[test]
fn other_nodes_pair_among_themselves_while_the_root_is_busy() {
    // Positions 0-3 on the root's node, 4-7 elsewhere.
    let near = |e: &Entry| (e.index < 4).then_some(HOME);
    let mut s = Schedule::new(8, 0);
    for i in [4, 5, 0, 1, 2, 3, 6, 7] {
        s.join(i).unwrap();
    }
    let t = task(&mut s, near, 64);
    assert_eq!(t.receiver.index, 0);
    assert_eq!(t.provider.index, 4, "the first ready, of any node");
    assert_eq!(
        indices(&t.more),
        vec![1, 2, 3],
        "only the root's node's, behind it"
    );
    let u = task(&mut s, near, 64);
    assert_eq!((u.receiver.index, u.provider.index), (5, 6));
    assert!(u.more.is_empty());
    assert_eq!(s.next_gathering(never, HOME, near, 64), None, "7 waits");
}

#[test]
fn every_other_node_folds_at_its_first_ready_pair() {
    // Positions 0-3 on the root's node (1), 4-7 on node 2, 8-9 on node 3;
    // 9's data is not admitted (too large, say).
    let node = |e: &Entry| match e.index {
        0..4 => Some(HOME),
        4..8 => Some(2),
        8 => Some(3),
        _ => None,
    };
    let mut s = Schedule::new(10, 0);
    for i in [4, 8, 5, 1, 6, 9, 7] {
        s.join(i).unwrap();
    }
    // The root has not joined: nobody waits, 1 pairs too.
    let t = task(&mut s, node, 64);
    assert_eq!((t.receiver.index, t.provider.index), (4, 8));
    assert_eq!(indices(&t.more), vec![5, 6, 7], "its node's, not 1 or 9");
    let u = task(&mut s, node, 64);
    assert_eq!((u.receiver.index, u.provider.index), (1, 9));
    assert!(u.more.is_empty(), "nobody else on 1's node is ready");
    assert_eq!(s.next_gathering(never, HOME, node, 64), None);
    // The root joins, and 2, 3: they wait for it; a pair elsewhere goes.
    s.join(0).unwrap();
    s.join(2).unwrap();
    s.join(3).unwrap();
    let v = task(&mut s, node, 64);
    assert_eq!((v.receiver.index, v.provider.index), (0, 2));
    assert_eq!(indices(&v.more), vec![3]);
    s.task_done(t.task_id, 4, &path(&[4, 5, 6, 7, 8])).unwrap();
    s.task_done(u.task_id, 1, &path(&[1, 9])).unwrap();
    assert_eq!(
        s.next_gathering(never, HOME, node, 64),
        None,
        "4 waits for nobody but the busy root; 1 waits for the root"
    );
    s.task_done(v.task_id, 0, &path(&[0, 2, 3])).unwrap();
    let w = task(&mut s, node, 64);
    assert_eq!((w.receiver.index, w.provider.index), (0, 4));
    assert_eq!(indices(&w.more), vec![1]);
    s.task_done(w.task_id, 0, &RankSet::full(10)).unwrap();
    assert_eq!(
        s.next_gathering(never, HOME, node, 64),
        Some(Step::Complete)
    );
}

#[test]
fn another_nodes_receiver_takes_at_most_cap_providers() {
    let node = |e: &Entry| (e.index > 0).then_some(2);
    let mut s = Schedule::new(7, 0);
    for i in 1..7 {
        s.join(i).unwrap();
    }
    let t = task(&mut s, node, 3);
    assert_eq!(
        (t.receiver.index, t.provider.index, indices(&t.more)),
        (1, 2, vec![3, 4])
    );
    assert_eq!(
        s.next_gathering(never, HOME, node, 3),
        None,
        "5 and 6 wait for 1, busy on their node"
    );
    s.task_done(t.task_id, 1, &path(&[1, 2, 3, 4])).unwrap();
    let u = task(&mut s, node, 3);
    assert_eq!(
        (u.receiver.index, u.provider.index, indices(&u.more)),
        (5, 6, vec![1])
    );
}

#[test]
fn a_nodes_members_wait_for_its_busy_receiver_not_another_nodes() {
    // 1-3 on node 2, 4-5 on node 3, the root (0) absent.
    let node = |e: &Entry| match e.index {
        1..4 => Some(2),
        4..6 => Some(3),
        _ => None,
    };
    let mut s = Schedule::new(6, 0);
    s.join(1).unwrap();
    s.join(2).unwrap();
    let t = task(&mut s, node, 64);
    assert_eq!((t.receiver.index, t.provider.index), (1, 2));
    s.join(3).unwrap();
    s.join(4).unwrap();
    s.join(5).unwrap();
    let u = task(&mut s, node, 64);
    assert_eq!(
        (u.receiver.index, u.provider.index),
        (4, 5),
        "3 waits for 1; node 3 pairs"
    );
    assert_eq!(s.next_gathering(never, HOME, node, 64), None);
    // 1 dies in its task: 2 is requeued, and nothing waits for 1 any more.
    s.fail(1, |_| true).unwrap();
    let v = task(&mut s, node, 64);
    assert_eq!(
        (v.receiver.index, v.provider.index, indices(&v.more)),
        (3, 2, vec![]),
        "3 no longer waits; 1's original, dead, is not gathered"
    );
}

#[test]
fn dead_or_recovering_messages_are_never_gathered() {
    let mut s = Schedule::new(4, 0);
    for i in [1, 2, 3] {
        s.join(i).unwrap();
    }
    // 2 dies after its join: its message re-enters as a recovering one.
    s.fail(2, |_| true).unwrap();
    s.join(0).unwrap();
    let t = task(&mut s, all, 64);
    assert_eq!((t.provider.index, indices(&t.more)), (1, vec![3]));
    s.task_done(t.task_id, 0, &path(&[0, 1, 3])).unwrap();
    let u = task(&mut s, all, 64);
    assert_eq!(u.provider.index, 2);
    assert_eq!(u.source, Source::Replica);
}

#[test]
fn a_queued_message_whose_holder_is_declared_dead_is_no_longer_gathered() {
    // Root 0 has not joined: its node is gathered like any other.
    let mut s = Schedule::new(6, 0);
    for i in [1, 2, 3, 4] {
        s.join(i).unwrap();
    }
    let t = task(&mut s, all, 2);
    assert_eq!(
        (t.receiver.index, t.provider.index, indices(&t.more)),
        (1, 2, vec![3])
    );
    // 4 waits for the busy receiver; then a standby finds 4's original
    // folded in already and its rank replaced: dead here, with its
    // message still queued (classified on the busy node).
    s.stand_in(4);
    s.join(5).unwrap();
    let off = |e: &Entry| (e.index != 5).then_some(HOME);
    assert_eq!(
        scanned(&s, HOME, &off, 2).map(|d| matches!(d, Decision::Task(..))),
        Some(true)
    );
    let u = task(&mut s, off, 2);
    assert_eq!((u.receiver.index, u.provider.index), (5, 4));
    assert_eq!(u.source, Source::Replica);
    assert!(u.more.is_empty());
}

#[test]
fn a_provider_left_out_goes_back_and_a_split_one_is_refused() {
    let mut s = Schedule::new(4, 0);
    for i in 0..4 {
        s.join(i).unwrap();
    }
    let t = task(&mut s, all, 64);
    assert!(
        matches!(
            s.clone().task_done(t.task_id, 0, &path(&[0, 2, 3])),
            Err(ScheduleError::BadPath { .. })
        ),
        "the task's provider must be folded"
    );
    let folded = s.task_done(t.task_id, 0, &path(&[0, 1, 3])).unwrap();
    assert_eq!(indices(&folded), vec![1, 3]);
    let u = task(&mut s, all, 64);
    assert_eq!(u.provider.index, 2, "left out, it comes back");
    s.task_done(u.task_id, 0, &RankSet::full(4)).unwrap();
    assert_eq!(s.next_gathering(never, HOME, all, 64), Some(Step::Complete));
    // A further provider's path halfway in: refused.
    let mut s = Schedule::new(4, 0);
    s.join(3).unwrap();
    s.join(1).unwrap();
    s.join(2).unwrap();
    let Some(Step::Task(a)) = s.next(never) else {
        panic!()
    };
    assert_eq!((a.receiver.index, a.provider.index), (3, 1));
    s.task_done(a.task_id, 3, &path(&[1, 3])).unwrap();
    s.join(0).unwrap();
    let t = task(&mut s, all, 64);
    assert_eq!((t.provider.index, indices(&t.more)), (2, vec![3]));
    assert!(matches!(
        s.task_done(t.task_id, 0, &path(&[0, 2, 3])),
        Err(ScheduleError::BadPath { .. })
    ));
}

#[test]
fn the_receivers_death_or_a_failed_fetch_requeues_every_provider() {
    let mut s = Schedule::new(5, 0);
    for i in 0..5 {
        s.join(i).unwrap();
    }
    s.await_replacement(0);
    let t = task(&mut s, all, 64);
    assert_eq!(t.more.len(), 3);
    s.fail(0, |_| true).unwrap();
    for i in 1..5 {
        assert!(s.needs(i), "{i} is queued again");
    }
    assert_eq!(s.queue_len(), 4);
    let mut s = Schedule::new(4, 0);
    for i in 0..4 {
        s.join(i).unwrap();
    }
    let t = task(&mut s, all, 64);
    s.fetch_failed(t.task_id, 0, |_| true).unwrap();
    assert_eq!(s.queue_len(), 4);
    let u = task(&mut s, all, 64);
    assert_eq!(u.more.len(), 2, "gathered again");
}

/// A gathering reduction as a discrete-event simulation with failures:
/// ranks join at `arrivals`, tasks take `durations[receiver]`, the ranks
/// of `kills` die, and a further provider is unreadable when `unread`
/// says so (its view failed: left out of the report). A further
/// provider is read when its task starts (a view of its memory outlives
/// it); the task's provider when the task ends, as a get. Returns the
/// root's counts.
struct Run<'a> {
    n: usize,
    root: usize,
    /// Each rank's node, if its data is admitted (small, read in place).
    node: &'a [Option<u64>],
    arrivals: &'a [f64],
    durations: &'a [f64],
    kills: &'a [(usize, f64)],
    cap: usize,
}

fn simulate(run: Run<'_>, unread: &dyn Fn(u64, usize) -> bool) -> Result<Vec<u32>, Unrecoverable> {
    let Run {
        n,
        root,
        node,
        arrivals,
        durations,
        kills,
        cap,
    } = run;
    let unit = |k: usize| {
        let mut v = vec![0u32; n];
        v[k] = 1;
        v
    };
    // The root's node: where its own data lies, admitted or not.
    let home = node[root].unwrap_or(0);
    let mut s = Schedule::new(n, root);
    let mut data: Vec<Vec<u32>> = (0..n).map(unit).collect();
    let mut dead = vec![false; n];
    // (time, join, kill, task and the views read at its start)
    type Ev = (
        f64,
        Option<usize>,
        Option<usize>,
        Option<(Assignment, Vec<(Entry, Vec<u32>)>)>,
    );
    let mut events: Vec<Ev> = (0..n).map(|i| (arrivals[i], Some(i), None, None)).collect();
    events.extend(kills.iter().map(|&(k, t)| (t, None, Some(k), None)));
    for _ in 0..(60 * n + 60) {
        let Some(k) = (0..events.len()).min_by(|&a, &b| events[a].0.total_cmp(&events[b].0)) else {
            break;
        };
        let (now, join, kill, task) = events.swap_remove(k);
        if let Some(i) = join.filter(|&i| !dead[i]) {
            s.join(i).unwrap();
        }
        if let Some(k) = kill.filter(|&k| !dead[k]) {
            dead[k] = true;
            data[k] = vec![0; n];
            s.fail(k, |_| true)?;
        }
        if let Some((t, views)) = task {
            let (r, p) = (t.receiver.index, t.provider.index);
            if dead[r] || s.task(t.task_id).is_none() {
                // The receiver died: its task never reports.
            } else if dead[p] && t.source != Source::Replica {
                s.fetch_failed(t.task_id, r, |_| true).unwrap();
            } else {
                if t.restore {
                    data[r] = unit(r);
                }
                let theirs = match t.source {
                    Source::Data => std::mem::replace(&mut data[p], vec![0; n]),
                    Source::Original | Source::Replica => unit(p),
                };
                let mut got = t.receiver.path.union(&t.provider.path);
                for (c, m) in data[r].iter_mut().zip(theirs) {
                    *c += m;
                }
                for (e, view) in views {
                    for (c, m) in data[r].iter_mut().zip(view) {
                        *c += m;
                    }
                    data[e.index] = vec![0; n];
                    got = got.union(&e.path);
                }
                s.task_done_with(t.task_id, r, &got, |_| true).unwrap();
            }
        }
        if events.iter().any(|e| e.0 == now) {
            // What happens at one instant reaches the master before it
            // decides: joins at once queue together.
            continue;
        }
        let node_of = |e: &Entry| node[e.index];
        loop {
            let expected = scanned(&s, home, &node_of, cap);
            let got = s.next_gathering(never, home, node_of, cap);
            assert_eq!(
                got.as_ref().map(Decision::from),
                expected,
                "the index decides as a scan"
            );
            let Some(step) = got else {
                break;
            };
            match step {
                Step::Complete => return Ok(data[root].clone()),
                Step::Task(a) => {
                    assert!(!dead[a.receiver.index], "a dead rank was given a task");
                    for e in &a.more {
                        let here = node[a.receiver.index];
                        assert!(
                            here.is_some() || a.receiver.index == root,
                            "only an admitted rank or the root gathers"
                        );
                        let here = here.unwrap_or(home);
                        assert_eq!(node[e.index], Some(here), "read in place, on its node");
                        assert!(!dead[e.index] && e.index != root);
                    }
                    let views = a
                        .more
                        .iter()
                        .filter(|e| !unread(a.task_id, e.index))
                        .map(|e| (e.clone(), data[e.index].clone()))
                        .collect();
                    events.push((
                        now + durations[a.receiver.index],
                        None,
                        None,
                        Some((a, views)),
                    ));
                }
            }
        }
    }
    panic!("the reduction neither completed nor failed");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn every_original_is_gathered_exactly_once_whatever_fails(
        n in 1usize..=24,
        root_seed in any::<usize>(),
        node in proptest::collection::vec(proptest::option::weighted(0.8, 0u64..3), 24),
        // Whole instants: several ranks often join at once.
        arrivals in proptest::collection::vec((0u8..8).prop_map(f64::from), 24),
        durations in proptest::collection::vec(0.1f64..3.0, 24),
        kill_seeds in proptest::collection::vec((any::<usize>(), 0.0f64..20.0), 0..4),
        unread_seed in any::<u64>(),
        cap in 1usize..=8,
    ) {
        let root = root_seed % n;
        let kills: Vec<(usize, f64)> = kill_seeds
            .iter()
            .map(|&(k, t)| (k % n, t))
            .filter(|&(k, t)| k != root && arrivals[k] < t)
            .collect();
        // About one view in four fails.
        let unread = |task: u64, k: usize| {
            (unread_seed ^ task.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k as u64 * 31)).is_multiple_of(4)
        };
        let run = Run { n, root, node: &node, arrivals: &arrivals, durations: &durations, kills: &kills, cap };
        let got = simulate(run, &unread);
        match got {
            Ok(counts) => prop_assert!(counts.iter().all(|&c| c == 1), "counts {:?}", counts),
            Err(e) => prop_assert!(false, "replicas everywhere, yet unrecoverable: {:?}", e),
        }
    }
}
