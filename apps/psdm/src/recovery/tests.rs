use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

/// Drives a schedule as the rank loop does (issue until `in_flight + 1`
/// are live, then settle the oldest), with outcomes from `outcome`.
/// Returns the attempts in issue order and the batches each success
/// delivered.
fn drive(
    s: &mut Schedule,
    in_flight: usize,
    mut outcome: impl FnMut(usize, &Attempt) -> Result<(), Vec<u32>>,
) -> Result<(Vec<Attempt>, Vec<usize>), Fatal> {
    let mut live: VecDeque<(usize, Attempt)> = VecDeque::new();
    let (mut issued, mut delivered) = (Vec::new(), Vec::new());
    for _ in 0..=s.most_attempts() {
        while live.len() <= in_flight {
            let Some(a) = s.next_attempt() else { break };
            live.push_back((issued.len(), a.clone()));
            issued.push(a);
        }
        let Some((i, a)) = live.pop_front() else {
            return Ok((issued, delivered));
        };
        match outcome(i, &a) {
            Ok(()) => {
                s.succeeded();
                delivered.push(a.batch);
            }
            Err(ranks) => {
                s.failed(&a, &ranks)?;
            }
        }
    }
    panic!("the schedule did not end");
}

#[test]
fn without_failures_every_batch_once_in_order() {
    let mut s = Schedule::new(4, 0, 1, 5);
    let (issued, delivered) = drive(&mut s, 2, |_, _| Ok(())).unwrap();
    assert_eq!(delivered, vec![0, 1, 2, 3, 4]);
    assert!(issued.iter().all(|a| a.lost.is_empty()));
    assert_eq!(issued[3].id(), "psdm-batch-3");
    assert_eq!(s.redone(), 0);
}

#[test]
fn a_failed_batch_is_redone_over_the_survivors_with_a_new_id() {
    let mut s = Schedule::new(4, 0, 1, 4);
    let a = s.next_attempt().unwrap();
    assert_eq!(
        (a.id(), a.group(4)),
        ("psdm-batch-0".into(), vec![0, 1, 2, 3])
    );
    assert_eq!(s.failed(&a, &[3]), Ok(vec![3]));
    let again = s.next_attempt().unwrap();
    assert_eq!(again.batch, 0, "the redo comes before fresh batches");
    assert_eq!(
        (again.id(), again.group(4)),
        ("psdm-batch-0-1".into(), vec![0, 1, 2])
    );
    // Later batches start over the survivors.
    let b1 = s.next_attempt().unwrap();
    assert_eq!((b1.batch, b1.lost.clone()), (1, vec![3]));
    // An attempt issued before the loss fails naming the known rank: it is
    // redone, nothing new learnt.
    let old = Attempt {
        batch: 2,
        lost: vec![],
    };
    assert_eq!(s.failed(&old, &[3]), Ok(vec![]));
    // A redo that fails again with a new lost rank is redone again.
    assert_eq!(s.failed(&again, &[2]), Ok(vec![2]));
    assert_eq!(s.lost(), &[2, 3]);
    assert_eq!(s.survivors(), vec![0, 1]);
    let third = s.next_attempt().unwrap();
    assert_eq!(third.id(), "psdm-batch-2-2");
    assert_eq!(s.next_attempt().unwrap().id(), "psdm-batch-0-2");
    assert_eq!(s.redone(), 3);
}

#[test]
fn losses_that_cannot_be_redone_are_fatal() {
    let mut s = Schedule::new(4, 2, 1, 4);
    let a = s.next_attempt().unwrap();
    assert_eq!(s.failed(&a, &[0, 2]), Err(Fatal::RootLost(2)));
    assert_eq!(s.failed(&a, &[1]), Err(Fatal::ThisRank(1)));
    assert_eq!(s.failed(&a, &[]), Err(Fatal::NotMembers(vec![])));
    s.failed(&a, &[3]).unwrap();
    let redo = s.next_attempt().unwrap();
    // Rank 3 was not a member of the redo: the runtime cannot blame it.
    assert_eq!(s.failed(&redo, &[3]), Err(Fatal::NotMembers(vec![3])));
    assert!(Fatal::RootLost(2).to_string().contains("root, rank 2"));
}

/// Two ranks that settle the same outcomes issue the same attempts.
#[test]
fn the_same_outcomes_give_the_same_attempts_on_every_rank() {
    let fail = |i: usize, a: &Attempt| match (i, a.lost.len()) {
        (3 | 4, 0) => Err(vec![2]),
        (9, 1) => Err(vec![3, 2]),
        _ => Ok(()),
    };
    let mut s0 = Schedule::new(5, 0, 0, 8);
    let mut s1 = Schedule::new(5, 0, 1, 8);
    let (a0, d0) = drive(&mut s0, 3, fail).unwrap();
    let (a1, d1) = drive(&mut s1, 3, fail).unwrap();
    assert_eq!((a0, d0), (a1, d1));
    assert_eq!(s0.lost(), &[2, 3]);
}

proptest! {
    /// Ranks die after having issued some of the attempts (they took the
    /// same decisions as everyone until then); an attempt fails, naming
    /// them, if its group holds a dead rank that did not issue it. Every
    /// batch is then delivered exactly once, every attempt id is fresh,
    /// and the redos are bounded.
    #[test]
    fn every_batch_is_delivered_once_whoever_dies_when(
        size in 2u32..7,
        root in 0u32..7,
        batches in 1usize..12,
        in_flight in 0usize..4,
        deaths in proptest::collection::vec((0u32..7, 0usize..40), 0..4),
    ) {
        let root = root % size;
        let mut died: HashMap<u32, usize> = HashMap::new();
        for (r, k) in deaths {
            let r = r % size;
            if r != root {
                died.entry(r).or_insert(k);
            }
        }
        let me = (0..size).find(|r| !died.contains_key(r)).unwrap();
        let mut s = Schedule::new(size, root, me, batches);
        let (issued, mut delivered) = drive(&mut s, in_flight, |i, a| {
            let mut gone: Vec<u32> = a
                .group(size)
                .into_iter()
                .filter(|r| died.get(r).is_some_and(|&k| i >= k))
                .collect();
            gone.sort_unstable();
            if gone.is_empty() { Ok(()) } else { Err(gone) }
        })
        .unwrap();
        delivered.sort_unstable();
        prop_assert_eq!(delivered, (0..batches).collect::<Vec<_>>());
        let mut ids: Vec<String> = issued.iter().map(Attempt::id).collect();
        ids.sort();
        let n = ids.len();
        ids.dedup();
        prop_assert_eq!(ids.len(), n, "an id was reused");
        prop_assert!(n <= s.most_attempts());
        prop_assert!(s.lost().iter().all(|r| died.contains_key(r)));
    }
}
