//! Allreduce and broadcast over the serialising loopback, through the
//! public API (the book's chapter on reductions, "Every rank gets the
//! result", and its Architecture chapter, "Allreduce and broadcast"):
//! every member gets the value; a rank that dies before, while or after
//! the value exists leaves every survivor with the same value or the same
//! typed error. Test hooks hold ranks at the exact instants.

use rkyv::{Archive, Deserialize, Serialize};
use std::time::{Duration, Instant};
use taskfold::hooks::{Hook, Point};
use taskfold::{
    Completion, Config, Durability, FoldError, InPlace, LocalCluster, Reduce, ReduceError,
    ReducerBody, SpreadFuture, Sum,
};
use taskfold_tests::faults::{contribution, full_sum, held, hook, release};

const WAIT: Duration = Duration::from_secs(30);
const LEN: usize = 10_000;

fn config(hooks: Vec<Hook>) -> Config {
    Config {
        finalize_timeout: Duration::from_secs(5),
        durability: Durability::Sync,
        hooks,
        ..Config::default()
    }
}

fn start(c: &LocalCluster, rank: u32, id: &str) -> SpreadFuture<Sum<i64>> {
    c.rank(rank)
        .allreduce(contribution(rank, LEN), Reduce::root(1).id(id))
        .unwrap()
}

fn wait_dead(c: &LocalCluster, rank: u32) {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if c.rank(0)
            .master_stats()
            .is_some_and(|s| s.dead.contains(&rank))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("rank {rank} was not declared failed");
}

/// Every survivor's outcome: all the full sum of `p` ranks, or all the
/// same error (which is returned).
fn all_alike(
    fs: Vec<(u32, SpreadFuture<Sum<i64>>)>,
    dead: &[u32],
    p: u32,
) -> Result<(), ReduceError> {
    let mut outcomes = Vec::new();
    for (r, mut f) in fs {
        if dead.contains(&r) {
            continue;
        }
        let got = f.wait_timeout(WAIT);
        assert!(
            !matches!(got, Err(ReduceError::Timeout(_))),
            "rank {r} never ended"
        );
        outcomes.push((r, got.map(|s| s.0)));
    }
    let first = outcomes[0].1.clone();
    for (r, o) in &outcomes {
        assert_eq!(o, &first, "rank {r} differs from rank {}", outcomes[0].0);
    }
    first.map(|sum| assert_eq!(sum, full_sum(p, LEN)))
}

/// A user reducer: count and maximum.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq, Clone)]
#[rkyv(crate = taskfold::rkyv)]
struct Stats {
    count: u64,
    max: i64,
}

impl ReducerBody for Stats {
    fn fold(&mut self, other: &ArchivedStats) -> Result<(), FoldError> {
        self.count += other.count.to_native();
        self.max = self.max.max(other.max.to_native());
        Ok(())
    }
}

#[test]
fn every_member_gets_the_result_of_a_custom_reducer_again_and_again() {
    let c = LocalCluster::new(6).unwrap();
    // The same id each round: a round's spread is told from the last.
    for round in 0..3i64 {
        let fs: Vec<_> = c
            .ranks()
            .iter()
            .map(|rt| {
                let v = Stats {
                    count: 1,
                    max: rt.rank() as i64 * 10 + round,
                };
                rt.allreduce(v, Reduce::root(4).id("stats")).unwrap()
            })
            .collect();
        for mut f in fs {
            let got = f.wait_timeout(WAIT).unwrap();
            assert_eq!(
                got,
                Stats {
                    count: 6,
                    max: 50 + round
                }
            );
        }
    }
}

#[test]
fn a_group_with_automatic_ids_gets_the_group_sum_only() {
    let c = LocalCluster::new(5).unwrap();
    let group = [1u32, 3, 4];
    let mut fs = Vec::new();
    for _ in 0..2 {
        for &r in &group {
            let v = Sum(vec![r as u64; 4]);
            fs.push(
                c.rank(r)
                    .allreduce(v, Reduce::root(3).group(group))
                    .unwrap(),
            );
        }
    }
    for mut f in fs {
        assert_eq!(f.wait_timeout(WAIT).unwrap().0, vec![8; 4]);
    }
}

#[test]
fn bad_calls_are_refused_at_once() {
    let c = LocalCluster::new(3).unwrap();
    let rt = c.rank(1);
    let contributed = Reduce::root(0).completion(Completion::Contributed);
    assert!(matches!(
        rt.allreduce(Sum(vec![1u32]), contributed),
        Err(ReduceError::InvalidOptions(_))
    ));
    assert!(matches!(
        rt.allreduce(Sum(vec![1u32]), Reduce::root(2).group([0, 1])),
        Err(ReduceError::InvalidOptions(_))
    ));
    assert!(matches!(
        rt.broadcast(Some(1u32), Reduce::root(0)),
        Err(ReduceError::InvalidOptions(m)) if m.contains("only the root")
    ));
    assert!(matches!(
        rt.broadcast::<u32>(None, Reduce::root(1)),
        Err(ReduceError::InvalidOptions(_))
    ));
    assert!(matches!(
        c.rank(2)
            .broadcast::<u32>(None, Reduce::root(0).group([0, 1])),
        Err(ReduceError::InvalidOptions(_))
    ));
}

/// Before the result exists: a member dies once its contribution is safe
/// (holding its tasks): recovered from its replica, every survivor gets
/// the full sum.
#[test]
fn a_member_dead_before_the_result_exists_is_recovered_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c =
        LocalCluster::with_config(5, config(vec![hook(3, Point::AfterJoin, "pre", d)])).unwrap();
    let mut fs = vec![(3, start(&c, 3, "pre"))];
    held(d, &[3], "after-join");
    c.kill(3);
    for r in [0, 1, 2, 4] {
        fs.push((r, start(&c, r, "pre")));
    }
    all_alike(fs, &[3], 5).unwrap();
}

/// Before the result exists: the root dies; every survivor gets the
/// same typed error.
#[test]
fn the_root_dead_before_the_result_exists_fails_every_survivor_alike() {
    let c = LocalCluster::with_config(4, config(vec![])).unwrap();
    let fs: Vec<_> = [0, 2, 3]
        .iter()
        .map(|&r| (r, start(&c, r, "pre-root")))
        .collect();
    c.kill(1);
    match all_alike(fs, &[1], 4) {
        Err(ReduceError::RootLost { root: 1, .. }) => {}
        other => panic!("expected RootLost, got {other:?}"),
    }
}

/// The result exists at the root only: the root dies before serving it;
/// every survivor gets the same typed error, none the result.
#[test]
fn the_root_dead_with_the_only_copy_fails_every_survivor_alike() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c =
        LocalCluster::with_config(5, config(vec![hook(1, Point::BeforeShare, "only", d)])).unwrap();
    let fs: Vec<_> = (0..5).map(|r| (r, start(&c, r, "only"))).collect();
    held(d, &[1], "before-share");
    c.kill(1);
    match all_alike(fs, &[1], 5) {
        Err(ReduceError::RootLost { root: 1, .. }) => {}
        other => panic!("expected RootLost, got {other:?}"),
    }
}

/// While the result is fetched: a member is held before its fetch, the
/// others get the result (a holder serves two at once, so one stalled
/// member holds up nobody), the root dies meanwhile; the held member
/// fetches from a live holder, and every survivor has the full sum.
#[test]
fn the_root_dead_while_a_member_fetches_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let hooks = vec![hook(3, Point::BeforeSpreadGet, "mid", d)];
    let c = LocalCluster::with_config(6, config(hooks)).unwrap();
    let mut fs: Vec<_> = (0..6).map(|r| (r, start(&c, r, "mid"))).collect();
    held(d, &[3], "before-spread-get");
    for (r, f) in fs.iter_mut().filter(|(r, _)| [0, 2, 4, 5].contains(r)) {
        assert_eq!(
            f.wait_timeout(WAIT).unwrap().0,
            full_sum(6, LEN),
            "rank {r}"
        );
    }
    c.kill(1);
    wait_dead(&c, 1);
    release(d, 3, "before-spread-get");
    let rest = fs.into_iter().filter(|(r, _)| *r == 3).collect();
    all_alike(rest, &[1], 6).unwrap();
}

#[test]
fn a_broadcast_reaches_every_member_of_its_group() {
    let c = LocalCluster::new(6).unwrap();
    let group = [0u32, 2, 3, 5];
    let fs: Vec<_> = group
        .iter()
        .map(|&r| {
            let v = (r == 3).then(|| String::from("model v7"));
            c.rank(r)
                .broadcast(v, Reduce::root(3).group(group).id("m"))
                .unwrap()
        })
        .collect();
    for mut f in fs {
        assert_eq!(f.wait_timeout(WAIT).unwrap(), "model v7");
    }
}

/// A value whose decoding records the thread that decodes it.
struct Probe(u32);

/// The threads that decoded a [`Probe`].
static DECODED_ON: std::sync::Mutex<Vec<std::thread::ThreadId>> = std::sync::Mutex::new(Vec::new());

impl rkyv::Archive for Probe {
    type Archived = rkyv::rend::u32_le;
    type Resolver = ();

    fn resolve(&self, _: (), out: rkyv::Place<Self::Archived>) {
        out.write(rkyv::rend::u32_le::from_native(self.0));
    }
}

impl<S: rkyv::rancor::Fallible + ?Sized> rkyv::Serialize<S> for Probe {
    fn serialize(&self, _: &mut S) -> Result<(), S::Error> {
        Ok(())
    }
}

impl<D: rkyv::rancor::Fallible + ?Sized> rkyv::Deserialize<Probe, D> for rkyv::rend::u32_le {
    fn deserialize(&self, _: &mut D) -> Result<Probe, D::Error> {
        DECODED_ON.lock().unwrap().push(std::thread::current().id());
        Ok(Probe(self.to_native()))
    }
}

/// A fetched value is decoded by the thread that takes it, never by the
/// runtime's, which serves it to other members first (the book's
/// Architecture chapter, "Allreduce and broadcast").
#[test]
fn a_fetched_value_is_decoded_by_the_thread_that_takes_it() {
    let c = LocalCluster::new(3).unwrap();
    let fs: Vec<_> = (0..3)
        .map(|r| {
            let v = (r == 0).then_some(Probe(7));
            c.rank(r).broadcast(v, Reduce::root(0).id("probe")).unwrap()
        })
        .collect();
    let mut fs = fs.into_iter();
    assert_eq!(
        fs.next().unwrap().get().unwrap().0,
        7,
        "the root has its value"
    );
    let takers: Vec<_> = fs
        .map(|f| {
            std::thread::spawn(move || {
                // Taken only once the value is surely here: decoding at
                // arrival would have happened by then, elsewhere.
                let until = Instant::now() + WAIT;
                while !f.is_done() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
                std::thread::sleep(Duration::from_millis(50));
                (f.get().unwrap().0, std::thread::current().id())
            })
        })
        .collect();
    let takers: Vec<_> = takers.into_iter().map(|t| t.join().unwrap()).collect();
    let decoded = DECODED_ON.lock().unwrap().clone();
    for (value, thread) in &takers {
        assert_eq!(*value, 7);
        assert!(
            decoded.contains(thread),
            "decoded on {decoded:?}, taken on {takers:?}"
        );
    }
    assert_eq!(decoded.len(), 2, "each member decodes once: {decoded:?}");
}

/// The broadcast's root dies before any other member has the value:
/// every survivor gets the same typed error.
#[test]
fn a_broadcast_whose_root_died_first_fails_every_survivor_alike() {
    let c = LocalCluster::new(4).unwrap();
    let root = c
        .rank(2)
        .broadcast(Some(vec![7u32; 100]), Reduce::root(2).id("b"))
        .unwrap();
    assert_eq!(root.get().unwrap(), vec![7; 100], "the root has its value");
    c.kill(2);
    for r in [0, 1, 3] {
        let mut f = c
            .rank(r)
            .broadcast::<Vec<u32>>(None, Reduce::root(2).id("b"))
            .unwrap();
        match f.wait_timeout(WAIT) {
            Err(ReduceError::RootLost { root: 2, .. }) => {}
            other => panic!("rank {r}: expected RootLost, got {other:?}"),
        }
    }
}

/// The root dies after one member got the value: every other survivor
/// gets it from that member.
#[test]
fn a_broadcast_whose_root_died_after_one_member_got_it_loses_nothing() {
    let c = LocalCluster::new(5).unwrap();
    let value = vec![3.5f64; 50_000];
    c.rank(2)
        .broadcast(Some(value.clone()), Reduce::root(2).id("b"))
        .unwrap();
    let mut first = c
        .rank(4)
        .broadcast::<Vec<f64>>(None, Reduce::root(2).id("b"))
        .unwrap();
    assert_eq!(first.wait_timeout(WAIT).unwrap(), value);
    c.kill(2);
    wait_dead(&c, 2);
    for r in [0, 1, 3] {
        let mut f = c
            .rank(r)
            .broadcast::<Vec<f64>>(None, Reduce::root(2).id("b"))
            .unwrap();
        assert_eq!(f.wait_timeout(WAIT).unwrap(), value, "rank {r}");
    }
}

/// Members that disagree on the type or the root are told so.
#[test]
fn a_broadcast_of_another_type_or_root_is_refused() {
    let c = LocalCluster::new(4).unwrap();
    let _root = c
        .rank(0)
        .broadcast(Some(vec![1u8]), Reduce::root(0).id("t"))
        .unwrap();
    // A member that agrees gets the value first: the root's offer is then
    // the spread's, whatever order the others' calls arrive in.
    let mut agrees = c
        .rank(3)
        .broadcast::<Vec<u8>>(None, Reduce::root(0).id("t"))
        .unwrap();
    assert_eq!(agrees.wait_timeout(WAIT).unwrap(), vec![1]);
    let mut other_type = c
        .rank(1)
        .broadcast::<String>(None, Reduce::root(0).id("t"))
        .unwrap();
    assert!(matches!(
        other_type.wait_timeout(WAIT),
        Err(ReduceError::Mismatched { .. })
    ));
    // A rank that names itself the root of "t" keeps its own value, and
    // serves nobody: the first root named is the spread's.
    let mut other_root = c
        .rank(2)
        .broadcast(Some(vec![2u8]), Reduce::root(2).id("t"))
        .unwrap();
    assert_eq!(other_root.wait_timeout(WAIT).unwrap(), vec![2]);
    // The next broadcast under the same id is a new one: it works.
    let _root = c
        .rank(0)
        .broadcast(Some(vec![5u8]), Reduce::root(0).id("t"))
        .unwrap();
    for r in [1, 2] {
        let mut f = c
            .rank(r)
            .broadcast::<Vec<u8>>(None, Reduce::root(0).id("t"))
            .unwrap();
        assert_eq!(f.wait_timeout(WAIT).unwrap(), vec![5], "rank {r}");
    }
}

/// The master (which pairs members with holders) dies: every member
/// still waiting gets `MasterLost`, and so does a later broadcast.
#[test]
fn a_lost_master_fails_every_waiting_member() {
    let c = LocalCluster::new(4).unwrap();
    let opts = || Reduce::root(1).id("m");
    let mut fs: Vec<_> = [2, 3]
        .iter()
        .map(|&r| c.rank(r).broadcast::<u64>(None, opts()).unwrap())
        .collect();
    c.kill(0);
    for f in &mut fs {
        assert!(matches!(
            f.wait_timeout(WAIT),
            Err(ReduceError::MasterLost(_))
        ));
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let mut late = c.rank(2).broadcast::<u64>(None, opts()).unwrap();
        match late.wait_timeout(Duration::from_millis(500)) {
            Err(ReduceError::MasterLost(_)) => break,
            other => assert!(Instant::now() < deadline, "{other:?}"),
        }
    }
}

/// An `InPlace` result is served from the very buffer the reduction
/// folded, and the root's application gets a copy of its own: the root
/// changing its result at once leaves what a later member fetches exact.
#[test]
fn the_roots_in_place_result_is_its_own_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let hooks = vec![hook(3, Point::BeforeSpreadGet, "own", d)];
    let c = LocalCluster::with_config(5, config(hooks)).unwrap();
    let fs: Vec<_> = (0..5)
        .map(|r| {
            let v = InPlace::<Sum<i64>>::from_slice(&contribution(r, LEN).0);
            (
                r,
                c.rank(r).allreduce(v, Reduce::root(1).id("own")).unwrap(),
            )
        })
        .collect();
    held(d, &[3], "before-spread-get");
    let expected = full_sum(5, LEN);
    let mut rest = Vec::new();
    for (r, mut f) in fs {
        if r == 3 {
            rest.push(f);
            continue;
        }
        let mut got = f.wait_timeout(WAIT).unwrap();
        assert_eq!(got.as_slice(), &expected[..], "rank {r}");
        got.as_mut_slice().fill(-1);
    }
    release(d, 3, "before-spread-get");
    let got = rest.pop().unwrap().wait_timeout(WAIT).unwrap();
    assert_eq!(
        got.as_slice(),
        &expected[..],
        "rank 3, after the others changed theirs"
    );
}

/// `broadcast_in_place`: every member gets the root's array, read where
/// it was fetched from (this process, in a `LocalCluster`) with no copy
/// until it changes it; a member that asks for a `Vec` under the same id
/// is refused as any other type is.
#[test]
fn an_in_place_broadcast_is_read_where_it_lies_and_typed() {
    let c = LocalCluster::new(4).unwrap();
    let sent = InPlace::<Sum<f32>>::from_slice(&[1.5, 2.5, 3.5]);
    let mut root = c
        .rank(0)
        .broadcast_in_place(Some(sent), Reduce::root(0).id("m"))
        .unwrap();
    let mut agrees = c
        .rank(3)
        .broadcast_in_place::<Sum<f32>>(None, Reduce::root(0).id("m"))
        .unwrap();
    let mut got = agrees.wait_timeout(WAIT).unwrap();
    assert!(got.is_shared(), "no copy was made");
    assert_eq!(got.as_slice(), &[1.5, 2.5, 3.5]);
    let mut other_type = c
        .rank(1)
        .broadcast::<Vec<f32>>(None, Reduce::root(0).id("m"))
        .unwrap();
    assert!(matches!(
        other_type.wait_timeout(WAIT),
        Err(ReduceError::Mismatched { .. })
    ));
    got.as_mut_slice()[0] = 0.0;
    assert!(!got.is_shared());
    let mut late = c
        .rank(2)
        .broadcast_in_place::<Sum<f32>>(None, Reduce::root(0).id("m"))
        .unwrap();
    let late = late.wait_timeout(WAIT).unwrap();
    assert_eq!(
        late.as_slice(),
        &[1.5, 2.5, 3.5],
        "a change is the member's own"
    );
    let mine = root.wait_timeout(WAIT).unwrap();
    assert!(mine.is_shared(), "the root reads its own buffer");
    assert_eq!(mine.as_slice(), &[1.5, 2.5, 3.5]);
}
