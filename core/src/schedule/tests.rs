use super::*;
use proptest::prelude::*;

fn never(_: usize, _: usize) -> bool {
    false
}

#[test]
fn single_rank_completes_at_once() {
    let mut s = Schedule::new(1, 0);
    assert_eq!(s.next(never), None);
    s.join(0).unwrap();
    assert_eq!(s.next(never), Some(Step::Complete));
    assert!(s.is_complete());
    assert_eq!(s.next(never), None);
}

#[test]
fn a_member_that_left_without_joining_ends_the_reduction() {
    let mut s = Schedule::new(4, 1);
    s.join(0).unwrap();
    s.join(1).unwrap();
    // Position 0 joined: its leaving changes nothing.
    assert_eq!(s.left(0), Ok(()));
    assert_eq!(
        s.left(3),
        Err(Unrecoverable {
            lost: vec![3],
            root: false
        })
    );
    // The root that left without joining: nobody can hold the result.
    let s = Schedule::new(4, 2);
    assert_eq!(
        s.left(2),
        Err(Unrecoverable {
            lost: vec![2],
            root: true
        })
    );
    // Outside the group, or after completion: nothing is lost.
    assert_eq!(s.left(7), Ok(()));
    let mut s = Schedule::new(1, 0);
    s.join(0).unwrap();
    assert_eq!(s.next(never), Some(Step::Complete));
    assert_eq!(s.left(0), Ok(()));
}

#[test]
fn root_always_receives() {
    let mut s = Schedule::new(3, 2);
    s.join(2).unwrap();
    s.join(0).unwrap();
    let Some(Step::Task(t)) = s.next(|_, _| true) else {
        panic!()
    };
    assert_eq!((t.receiver.index, t.provider.index), (2, 0));
    let mut s = Schedule::new(3, 2);
    s.join(0).unwrap();
    s.join(2).unwrap();
    let Some(Step::Task(t)) = s.next(never) else {
        panic!()
    };
    assert_eq!((t.receiver.index, t.provider.index), (2, 0));
}

#[test]
fn faster_rank_receives() {
    let mut s = Schedule::new(3, 0);
    s.join(1).unwrap();
    s.join(2).unwrap();
    let Some(Step::Task(t)) = s.next(|a, b| a == 1 && b == 2) else {
        panic!()
    };
    assert_eq!(t.receiver.index, 2);
    let mut s = Schedule::new(3, 0);
    s.join(1).unwrap();
    s.join(2).unwrap();
    let Some(Step::Task(t)) = s.next(never) else {
        panic!()
    };
    assert_eq!(t.receiver.index, 1);
}

#[test]
fn completion_needs_the_full_path() {
    let mut s = Schedule::new(2, 1);
    s.join(0).unwrap();
    assert_eq!(s.next(never), None);
    assert!(s.needs(1));
    s.join(1).unwrap();
    let Some(Step::Task(t)) = s.next(never) else {
        panic!()
    };
    assert_eq!(s.next(never), None, "nothing to do while the task runs");
    let provider = s
        .task_done(t.task_id, 1, &RankSet::full(2))
        .unwrap()
        .remove(0);
    assert_eq!(provider.index, 0);
    assert_eq!(provider.path, RankSet::single(0));
    assert!(!s.needs(0), "the provider's data was consumed");
    assert_eq!(s.next(never), Some(Step::Complete));
}

#[test]
fn protocol_violations_are_errors() {
    let mut s = Schedule::new(2, 0);
    assert_eq!(s.join(2), Err(ScheduleError::OutOfGroup(2)));
    s.join(0).unwrap();
    assert_eq!(s.join(0), Err(ScheduleError::DuplicateJoin(0)));
    s.join(1).unwrap();
    let Some(Step::Task(t)) = s.next(never) else {
        panic!()
    };
    assert!(matches!(
        s.task_done(t.task_id, 1, &RankSet::full(2)),
        Err(ScheduleError::UnknownTask(..))
    ));
    assert!(matches!(
        s.task_done(t.task_id, 0, &RankSet::single(0)),
        Err(ScheduleError::BadPath { .. })
    ));
    assert!(matches!(
        s.task_done(99, 0, &RankSet::full(2)),
        Err(ScheduleError::UnknownTask(..))
    ));
}

/// Runs a whole reduction as a discrete-event simulation: ranks join at
/// `arrivals[i]`, a task takes `1 / speed[receiver]`. Folds real values
/// (`u64` exactly, `f64` approximately) and counts every original.
fn simulate(
    n: usize,
    root: usize,
    arrivals: &[f64],
    speeds: &[f64],
) -> (Vec<u32>, u64, f64, Vec<usize>) {
    let mut s = Schedule::new(n, root);
    // Per position: multiplicity of each original folded in, and the values.
    let mut counts: Vec<Vec<u32>> = (0..n)
        .map(|i| {
            let mut v = vec![0; n];
            v[i] = 1;
            v
        })
        .collect();
    let mut ints: Vec<u64> = (0..n as u64).map(|i| i * 1_000_003 + 7).collect();
    let mut floats: Vec<f64> = (0..n).map(|i| 1.0 / (i as f64 + 1.0)).collect();
    let mut last_speed: Vec<Option<f64>> = vec![None; n];
    // Events: (time, kind) where kind = join(i) or done(task).
    let mut events: Vec<(f64, Option<usize>, Option<Assignment>)> =
        (0..n).map(|i| (arrivals[i], Some(i), None)).collect();
    let mut order = Vec::new();
    let mut done = false;
    let mut now;
    for _ in 0..(10 * n + 10) {
        if events.is_empty() {
            break;
        }
        let k = (0..events.len())
            .min_by(|&a, &b| events[a].0.total_cmp(&events[b].0))
            .unwrap();
        let (t, join, task) = events.swap_remove(k);
        now = t;
        if let Some(i) = join {
            s.join(i).unwrap();
        }
        if let Some(task) = task {
            let (r, p) = (task.receiver.index, task.provider.index);
            let moved = std::mem::replace(&mut counts[p], vec![0; n]);
            for (c, m) in counts[r].iter_mut().zip(moved) {
                *c += m;
            }
            ints[r] = ints[r].wrapping_add(ints[p]);
            floats[r] += floats[p];
            last_speed[r] = Some(speeds[r]);
            let path = task.receiver.path.union(&task.provider.path);
            s.task_done(task.task_id, r, &path).unwrap();
            order.push(p);
        }
        let prefers = |a: usize, b: usize| match (last_speed[a], last_speed[b]) {
            (Some(x), Some(y)) => y > x,
            (Some(_), None) => true,
            _ => false,
        };
        while let Some(step) = s.next(prefers) {
            match step {
                Step::Complete => done = true,
                Step::Task(a) => {
                    let r = a.receiver.index;
                    events.push((now + 1.0 / speeds[r], None, Some(a)));
                }
            }
        }
    }
    assert!(done, "reduction did not complete");
    (counts[root].clone(), ints[root], floats[root], order)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn every_original_folded_exactly_once(
        n in 1usize..=64,
        root_seed in any::<usize>(),
        arrivals in proptest::collection::vec(0.0f64..10.0, 64),
        speeds in proptest::collection::vec(0.1f64..10.0, 64),
    ) {
        let root = root_seed % n;
        let (counts, ints, floats, _) = simulate(n, root, &arrivals[..n], &speeds[..n]);
        prop_assert!(counts.iter().all(|&c| c == 1), "counts {:?}", counts);
        let want_int = (0..n as u64).fold(0u64, |a, i| a.wrapping_add(i * 1_000_003 + 7));
        prop_assert_eq!(ints, want_int);
        let want_float: f64 = (0..n).map(|i| 1.0 / (i as f64 + 1.0)).sum();
        // Reassociating n terms of magnitude <= 1 moves the sum by at most
        // n * eps * sum; 1e-12 relative is far above that and far below any
        // lost or doubled term (>= 1/64).
        prop_assert!((floats - want_float).abs() <= 1e-12 * want_float);
    }

    #[test]
    fn a_late_rank_is_folded_last(n in 3usize..=32, root_seed in any::<usize>(), late_seed in any::<usize>()) {
        let root = root_seed % n;
        let late = (root + 1 + late_seed % (n - 1)) % n;
        let mut arrivals = vec![0.0; n];
        arrivals[late] = 1e6;
        let (_, _, _, order) = simulate(n, root, &arrivals, &vec![1.0; n]);
        prop_assert_eq!(*order.last().unwrap(), late);
    }
}

/// What a rank holds in the failure simulation: how many times each
/// original is folded into its data.
type Counts = Vec<u32>;

/// A simulated event: (time, rank that joins, rank that dies, task that ends).
type Event = (f64, Option<usize>, Option<usize>, Option<Assignment>);

fn unit(n: usize, k: usize) -> Counts {
    let mut v = vec![0; n];
    v[k] = 1;
    v
}

/// Simulates a reduction in which the ranks in `kills` die at the given
/// times. Replicas exist for every original whose rank is in `replicated`.
/// Returns the root's counts, or the unrecoverable error.
fn simulate_failures(
    n: usize,
    root: usize,
    arrivals: &[f64],
    durations: &[f64],
    kills: &[(usize, f64)],
    replicated: &dyn Fn(usize) -> bool,
) -> Result<Counts, Unrecoverable> {
    let mut s = Schedule::new(n, root);
    let mut data: Vec<Counts> = (0..n).map(|i| unit(n, i)).collect();
    let mut dead = vec![false; n];
    // (time, join, kill, task)
    let mut events: Vec<Event> = Vec::new();
    for (i, &at) in arrivals.iter().enumerate().take(n) {
        events.push((at, Some(i), None, None));
    }
    for &(k, t) in kills {
        events.push((t, None, Some(k), None));
    }
    for _ in 0..(50 * n + 50) {
        if events.is_empty() {
            break;
        }
        let k = (0..events.len())
            .min_by(|&a, &b| events[a].0.total_cmp(&events[b].0))
            .unwrap();
        let (now, join, kill, task) = events.swap_remove(k);
        if let Some(i) = join {
            if dead[i] {
                continue; // died before contributing
            }
            s.join(i).unwrap();
        }
        if let Some(k) = kill {
            if dead[k] {
                continue;
            }
            dead[k] = true;
            data[k] = vec![0; n];
            s.fail(k, replicated)?;
        }
        if let Some(t) = task {
            let (r, p) = (t.receiver.index, t.provider.index);
            if dead[r] {
                // The receiver died: its task never reports.
            } else if dead[p] && t.source != Source::Replica {
                // The provider died during the fetch: the receiver reports.
                s.fetch_failed(t.task_id, r, replicated).unwrap();
                s.check_recoverable(replicated)?;
            } else {
                if t.restore {
                    data[r] = unit(n, r);
                }
                let theirs = match t.source {
                    Source::Data => std::mem::replace(&mut data[p], vec![0; n]),
                    Source::Original | Source::Replica => unit(n, p),
                };
                for (c, m) in data[r].iter_mut().zip(theirs) {
                    *c += m;
                }
                let path = t.receiver.path.union(&t.provider.path);
                s.task_done(t.task_id, r, &path).unwrap();
            }
        }
        while let Some(step) = s.next(never) {
            match step {
                Step::Complete => return Ok(data[root].clone()),
                Step::Task(a) => {
                    assert!(!dead[a.receiver.index], "a dead rank was given a task");
                    if a.source == Source::Replica {
                        assert!(dead[a.provider.index]);
                    }
                    let d = durations[a.receiver.index];
                    events.push((now + d, None, None, Some(a)));
                }
            }
        }
    }
    panic!("the reduction neither completed nor failed");
}

#[test]
fn receiver_dies_mid_task_is_recovered() {
    // 0 root; 1 and 2 pair at t=0 (1 receives), 1 dies at 0.5 while folding.
    let got = simulate_failures(4, 0, &[5.0, 0.0, 0.0, 6.0], &[1.0; 4], &[(1, 0.5)], &|_| {
        true
    })
    .unwrap();
    assert_eq!(got, vec![1; 4]);
}

#[test]
fn provider_dies_mid_fetch_is_recovered() {
    // 1 and 2 pair at t=0, 1 receives and fetches from 2 until t=1; 2 dies.
    let got = simulate_failures(4, 0, &[5.0, 0.0, 0.0, 6.0], &[1.0; 4], &[(2, 0.5)], &|_| {
        true
    })
    .unwrap();
    assert_eq!(got, vec![1; 4]);
}

#[test]
fn a_rank_dead_before_its_ready_arrived_joins_from_its_replica() {
    let mut s = Schedule::new(3, 0);
    s.join(0).unwrap();
    s.join(2).unwrap();
    s.fail(1, |k| k == 1).unwrap();
    let Some(Step::Task(t)) = s.next(never) else {
        panic!()
    };
    assert_eq!((t.receiver.index, t.provider.index), (0, 2));
    assert_eq!(
        s.next(never),
        None,
        "a dead rank's message waits for a live partner"
    );
    s.task_done(t.task_id, 0, &[0, 2].into_iter().collect())
        .unwrap();
    let Some(Step::Task(u)) = s.next(never) else {
        panic!()
    };
    assert!(u.provider.index == 1 && u.source == Source::Replica && u.receiver.index == 0);
    // Without a replica it is lost.
    let mut s = Schedule::new(3, 0);
    s.join(0).unwrap();
    assert_eq!(
        s.fail(1, |_| false),
        Err(Unrecoverable {
            lost: vec![1],
            root: false
        })
    );
}

#[test]
fn unrecoverable_cases() {
    // Dead before contributing (so nobody has a copy of its original).
    let e =
        simulate_failures(3, 0, &[0.0, 0.0, 5.0], &[1.0; 3], &[(2, 1.0)], &|k| k != 2).unwrap_err();
    assert_eq!(
        e,
        Unrecoverable {
            lost: vec![2],
            root: false
        }
    );
    // Root dies.
    let e =
        simulate_failures(3, 0, &[0.0, 0.0, 5.0], &[1.0; 3], &[(0, 1.0)], &|_| true).unwrap_err();
    assert!(e.root);
    // The dead rank's data held originals without replicas.
    let e = simulate_failures(4, 0, &[5.0, 0.0, 0.0, 6.0], &[1.0; 4], &[(1, 0.5)], &|k| {
        k != 1
    })
    .unwrap_err();
    assert_eq!(e.lost, vec![1]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn failures_are_recovered_exactly_once(
        n in 2usize..=24,
        root_seed in any::<usize>(),
        arrivals in proptest::collection::vec(0.0f64..10.0, 24),
        durations in proptest::collection::vec(0.1f64..3.0, 24),
        kill_seeds in proptest::collection::vec((any::<usize>(), 0.0f64..20.0), 1..4),
    ) {
        let root = root_seed % n;
        // Kill non-root ranks that have contributed (arrival before the kill).
        let mut kills: Vec<(usize, f64)> = kill_seeds
            .iter()
            .map(|&(k, t)| (k % n, t))
            .filter(|&(k, t)| k != root && arrivals[k] < t)
            .collect();
        kills.sort_by_key(|k| k.0);
        kills.dedup_by_key(|k| k.0);
        match simulate_failures(n, root, &arrivals[..n], &durations[..n], &kills, &|_| true) {
            Ok(counts) => prop_assert!(counts.iter().all(|&c| c == 1), "counts {:?} kills {:?}", counts, kills),
            Err(e) => prop_assert!(false, "replicas everywhere, yet unrecoverable: {:?}", e),
        }
    }

    #[test]
    fn missing_replicas_give_errors_never_wrong_results(
        n in 2usize..=16,
        arrivals in proptest::collection::vec(0.0f64..10.0, 16),
        durations in proptest::collection::vec(0.1f64..3.0, 16),
        kill in any::<usize>(),
        at in 0.0f64..20.0,
        replicated_mask in any::<u16>(),
    ) {
        let victim = 1 + kill % (n - 1);
        let kills = if arrivals[victim] < at { vec![(victim, at)] } else { vec![] };
        let replicated = |k: usize| replicated_mask & (1 << k) != 0;
        if let Ok(counts) = simulate_failures(n, 0, &arrivals[..n], &durations[..n], &kills, &replicated) {
            prop_assert!(counts.iter().all(|&c| c == 1), "counts {:?}", counts);
        }
    }
}
