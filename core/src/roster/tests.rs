use super::*;
use proptest::prelude::*;

fn heap(rank: u32) -> Locator {
    Locator([rank as u8; crate::wire::LOCATOR_LEN])
}

/// The standing copy of `owner`'s original that `buddy` maps (group
/// positions are the global ranks here).
fn standing(owner: usize, buddy: usize) -> StandingCopy {
    StandingCopy {
        buddy,
        copy: Standing {
            buddy: buddy as u32,
            crc: 0x5446_0000 | owner as u32,
            len: 4160,
            node: 9,
            heap: heap(owner as u32),
        },
    }
}

fn with_standing(owner: usize, buddy: usize) -> Announcement {
    Announcement {
        standing: Some(standing(owner, buddy)),
        ..Announcement::default()
    }
}

fn dead(ranks: &[u32]) -> RankSet {
    let mut s = RankSet::new();
    for &r in ranks {
        s.insert(r as usize);
    }
    s
}

#[test]
fn a_join_is_counted_once_and_never_after_death() {
    let mut r: Roster<()> = Roster::new(3);
    assert_eq!(r.unannounced().collect::<Vec<_>>(), vec![0, 1, 2]);
    r.join(1, Announcement::default()).unwrap();
    assert_eq!(
        r.join(1, Announcement::default()),
        Err(RosterError::AlreadyJoined(1))
    );
    assert_eq!(
        r.join(3, Announcement::default()),
        Err(RosterError::OutOfGroup(3))
    );
    assert_eq!(r.died(2, &dead(&[2])), Some(Death::Settled));
    assert_eq!(
        r.join(2, Announcement::default()),
        Err(RosterError::Dead(2))
    );
    assert_eq!(r.died(2, &dead(&[2])), None, "a member dies once");
    assert_eq!(r.unannounced().collect::<Vec<_>>(), vec![0, 2]);
    r.died(1, &dead(&[1, 2])).unwrap();
    assert_eq!(
        r.member(1).unwrap().state(),
        &State::Dead {
            joined: true,
            disk_looked_for: false
        }
    );
    assert_eq!(r.unannounced().collect::<Vec<_>>(), vec![0, 2]);
}

#[test]
fn a_replica_counts_while_its_holder_lives_and_a_disk_copy_until_unreadable() {
    let mut r: Roster<()> = Roster::new(4);
    let join = Announcement {
        replica: Some(3),
        disk: Some("/d/rank-1".into()),
        ..Announcement::default()
    };
    r.join(1, join).unwrap();
    assert_eq!(
        r.copy_at(1, &dead(&[1])),
        Some(CopyAt::Replica { holder: 3 }),
        "the buddy's copy first"
    );
    assert_eq!(
        r.copy_at(1, &dead(&[1, 3])),
        Some(CopyAt::Disk { dir: "/d/rank-1" })
    );
    assert_eq!(r.live_replica(1, &dead(&[1, 3])), None);
    r.disk_unreadable(1);
    assert!(!r.has_copy(1, &dead(&[1, 3])));
    assert!(r.has_copy(1, &dead(&[1])));
    // A notice before the join, and a refusal that keeps what was known.
    assert!(r.replicated(2, 0, true));
    assert!(r.replicated(2, 3, false));
    assert_eq!(r.member(2).unwrap().state(), &State::Pending);
    assert_eq!(r.live_replica(2, &dead(&[])), Some(0));
    assert!(r.member(2).unwrap().copies().refused);
    assert!(!r.replicated(4, 0, true), "no such member");
    assert!(!r.has_copy(0, &dead(&[])), "nothing known of rank 0");
}

#[test]
fn a_standing_copy_is_offered_once_and_holds_the_reduction_until_the_verdict() {
    let mut r: Roster<&str> = Roster::new(4);
    r.join(2, with_standing(2, 3)).unwrap();
    r.join(3, Announcement::default()).unwrap();
    assert_eq!(r.hold("before"), Some("before"), "nothing held yet");
    assert_eq!(
        r.died(2, &dead(&[2])),
        Some(Death::Offer(standing(2, 3).copy))
    );
    assert!(r.is_held());
    assert_eq!(r.awaited_buddy(2), Some(3));
    assert_eq!(r.awaiting_on(3).collect::<Vec<_>>(), vec![2]);
    assert_eq!(r.hold("a"), None);
    assert_eq!(r.hold("b"), None);
    assert!(
        r.take_held().is_empty(),
        "held while the verdict is awaited"
    );
    assert_eq!(r.died(2, &dead(&[2])), None, "offered once");
    assert!(r.verdict(2));
    assert!(!r.verdict(2), "one verdict per death");
    assert!(!r.is_held());
    assert_eq!(r.take_held(), vec!["a", "b"]);
    assert!(r.take_held().is_empty());
}

#[test]
fn a_standing_copy_is_gone_with_its_buddy() {
    let mut r: Roster<()> = Roster::new(4);
    r.join(2, with_standing(2, 3)).unwrap();
    r.join(3, Announcement::default()).unwrap();
    assert_eq!(r.died(3, &dead(&[3])), Some(Death::Settled));
    assert_eq!(r.died(2, &dead(&[2, 3])), Some(Death::Settled));
    assert!(!r.is_held());
    // Known dead to the master, not yet to this reduction: gone too.
    let mut r: Roster<()> = Roster::new(4);
    r.join(2, with_standing(2, 3)).unwrap();
    assert_eq!(r.died(2, &dead(&[2, 3])), Some(Death::Settled));
}

#[test]
fn a_standing_copy_naming_its_owner_or_no_member_is_no_copy() {
    let mut r: Roster<()> = Roster::new(4);
    r.join(1, with_standing(1, 1)).unwrap();
    r.join(2, with_standing(2, 9)).unwrap();
    assert_eq!(r.died(1, &dead(&[1])), Some(Death::Settled));
    assert_eq!(r.died(2, &dead(&[1, 2])), Some(Death::Settled));
}

#[test]
fn a_buddy_that_dies_owes_its_verdicts() {
    let mut r: Roster<()> = Roster::new(4);
    r.join(1, with_standing(1, 3)).unwrap();
    r.join(2, with_standing(2, 3)).unwrap();
    assert!(matches!(r.died(1, &dead(&[1])), Some(Death::Offer(_))));
    assert!(matches!(r.died(2, &dead(&[1, 2])), Some(Death::Offer(_))));
    r.died(3, &dead(&[1, 2, 3])).unwrap();
    let owed: Vec<usize> = r.awaiting_on(3).collect();
    assert_eq!(owed, vec![1, 2]);
    assert!(r.verdict(1));
    assert!(r.is_held(), "still held for the other");
    assert!(r.verdict(2));
    assert!(!r.is_held());
}

#[test]
fn an_unannounced_disk_copy_is_looked_for_once() {
    let mut r: Roster<()> = Roster::new(4);
    r.join(1, Announcement::default()).unwrap();
    assert!(!r.look_for_disk(2, &dead(&[])), "it lives");
    r.died(1, &dead(&[1])).unwrap();
    r.died(2, &dead(&[1, 2])).unwrap();
    assert!(
        !r.look_for_disk(1, &dead(&[1, 2])),
        "it announced its copies"
    );
    assert!(r.look_for_disk(2, &dead(&[1, 2])));
    assert!(!r.look_for_disk(2, &dead(&[1, 2])), "once");
    // A live replica makes the search pointless; a dead holder does not.
    r.replicated(3, 0, true);
    r.died(3, &dead(&[1, 2, 3])).unwrap();
    assert!(!r.look_for_disk(3, &dead(&[1, 2, 3])));
    assert!(r.look_for_disk(3, &dead(&[0, 1, 2, 3])));
    r.found_disk(3, "/d/rank-3".into());
    assert_eq!(
        r.copy_at(3, &dead(&[0, 1, 2, 3])),
        Some(CopyAt::Disk { dir: "/d/rank-3" })
    );
}

#[test]
fn data_is_read_in_place_and_released_early_only_from_a_live_member() {
    let mut r: Roster<()> = Roster::new(3);
    r.set_direct(1, Some(heap(1)));
    assert_eq!(r.direct(1), None, "not joined");
    let join = Announcement {
        early: true,
        direct: Some(heap(1)),
        ..Announcement::default()
    };
    r.join(1, join).unwrap();
    assert!(r.early(1));
    assert_eq!(r.direct(1), Some(&heap(1)));
    r.set_direct(1, None);
    assert_eq!(r.direct(1), None);
    r.set_direct(1, Some(heap(7)));
    assert_eq!(r.direct(1), Some(&heap(7)));
    r.died(1, &dead(&[1])).unwrap();
    assert_eq!(r.direct(1), None);
    assert!(!r.early(1));
}

#[test]
fn fetch_failures_are_bounded() {
    let mut r: Roster<()> = Roster::new(2);
    for _ in 0..16 {
        assert!(r.count_fetch_failure());
    }
    assert!(!r.count_fetch_failure());
}

/// An event as the master feeds it to a roster over positions `0..n`,
/// whose global ranks are the positions; ranks `n..n + 2` are holders
/// outside the group.
#[derive(Clone, Debug)]
enum Op {
    Join {
        who: usize,
        early: bool,
        standing: Option<usize>,
        replica: Option<u32>,
        disk: bool,
    },
    /// A buddy's notice: `holder` stored a copy of `who`'s original, or
    /// refused to.
    Replicated { who: usize, holder: u32, ok: bool },
    /// Rank `rank` dies.
    Die(u32),
    /// The wait for a verdict about `who` ran out.
    WaitOver(usize),
    /// A fetch failure report.
    Failure(u32),
    /// `who`'s disk copy could not be read.
    DiskUnreadable(usize),
}

fn op(n: usize) -> impl Strategy<Value = Op> {
    let ranks = (n + 2) as u32;
    prop_oneof![
        3 => (0..n, any::<bool>(), proptest::option::of(0..n + 1), proptest::option::of(0..ranks), any::<bool>())
            .prop_map(|(who, early, standing, replica, disk)| Op::Join { who, early, standing, replica, disk }),
        2 => (0..n, 0..ranks, any::<bool>()).prop_map(|(who, holder, ok)| Op::Replicated { who, holder, ok }),
        2 => (0..ranks).prop_map(Op::Die),
        1 => (0..n).prop_map(Op::WaitOver),
        1 => any::<u32>().prop_map(Op::Failure),
        1 => (0..n).prop_map(Op::DiskUnreadable),
    ]
}

/// What the roster must say, kept the plain way.
#[derive(Default)]
struct Model {
    dead: RankSet,
    joined: Vec<bool>,
    replica: Vec<Option<u32>>,
    disk: Vec<bool>,
    /// The standing copy's buddy a live joined member named (validated).
    standing: Vec<Option<usize>>,
    /// Member → the buddy whose verdict is awaited.
    awaiting: Vec<Option<usize>>,
    offers: Vec<u32>,
    held: Vec<u32>,
}

impl Model {
    fn new(n: usize) -> Self {
        Model {
            joined: vec![false; n],
            replica: vec![None; n],
            disk: vec![false; n],
            standing: vec![None; n],
            awaiting: vec![None; n],
            offers: vec![0; n],
            ..Model::default()
        }
    }

    fn lives(&self, i: usize) -> bool {
        !self.dead.contains(i)
    }
}

/// Applies `op` to the roster the way the master does, and to the model.
fn apply(r: &mut Roster<u32>, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let n = r.len();
    match *op {
        Op::Join {
            who,
            early,
            standing: buddy,
            replica,
            disk,
        } => {
            let a = Announcement {
                early,
                direct: None,
                replica,
                disk: disk.then(|| format!("/d/rank-{who}")),
                standing: buddy.map(|b| standing(who, b)),
            };
            let got = r.join(who, a);
            if !m.lives(who) {
                prop_assert_eq!(got, Err(RosterError::Dead(who)));
            } else if m.joined[who] {
                prop_assert_eq!(got, Err(RosterError::AlreadyJoined(who)));
            } else {
                prop_assert_eq!(got, Ok(()));
                m.joined[who] = true;
                m.replica[who] = replica.or(m.replica[who]);
                m.disk[who] |= disk;
                m.standing[who] = buddy.filter(|&b| b < n && b != who);
            }
        }
        Op::Replicated { who, holder, ok } => {
            if m.dead.contains(holder as usize) {
                return Ok(()); // the master drops a dead rank's messages
            }
            r.replicated(who, holder, ok);
            if ok {
                m.replica[who] = Some(holder);
            }
            if r.awaited_buddy(who) == Some(holder as usize) {
                prop_assert!(r.verdict(who));
                m.awaiting[who] = None;
            }
        }
        Op::Die(rank) => {
            if !m.dead.insert(rank as usize) {
                return Ok(());
            }
            let i = rank as usize;
            if i >= n {
                return Ok(());
            }
            let death = r.died(i, &m.dead);
            let offered = m.joined[i] && m.standing[i].is_some_and(|b| m.lives(b));
            match death {
                Some(Death::Offer(s)) => {
                    prop_assert!(offered, "offered without a live buddy: {:?}", s);
                    let b = m.standing[i].expect("checked");
                    prop_assert_eq!(s, standing(i, b).copy);
                    m.offers[i] += 1;
                    m.awaiting[i] = Some(b);
                }
                Some(Death::Settled) => prop_assert!(!offered),
                None => prop_assert!(false, "a living member's death was refused"),
            }
            // Its own verdicts can no longer come.
            let owed: Vec<usize> = r.awaiting_on(i).collect();
            let expected: Vec<usize> = (0..n).filter(|&k| m.awaiting[k] == Some(i)).collect();
            prop_assert_eq!(&owed, &expected);
            for k in owed {
                prop_assert!(r.verdict(k));
                m.awaiting[k] = None;
            }
        }
        Op::WaitOver(who) => {
            prop_assert_eq!(r.verdict(who), m.awaiting[who].is_some());
            m.awaiting[who] = None;
        }
        Op::Failure(f) => match r.hold(f) {
            Some(back) => {
                prop_assert_eq!(back, f);
                prop_assert!(m.awaiting.iter().all(Option::is_none));
            }
            None => m.held.push(f),
        },
        Op::DiskUnreadable(who) => {
            r.disk_unreadable(who);
            m.disk[who] = false;
        }
    }
    if !r.is_held() {
        prop_assert_eq!(r.take_held(), std::mem::take(&mut m.held));
    }
    Ok(())
}

/// Every invariant of a roster, against the model.
fn check(r: &Roster<u32>, m: &Model) -> Result<(), TestCaseError> {
    let n = r.len();
    let mut awaited = 0;
    for i in 0..n {
        let member = r.member(i).expect("a member");
        prop_assert_eq!(member.state().lives(), m.lives(i), "member {}", i);
        match member.state() {
            State::Pending => prop_assert!(!m.joined[i]),
            State::Joined(_) => prop_assert!(m.joined[i]),
            State::Awaiting { buddy } => {
                awaited += 1;
                prop_assert_eq!(Some(*buddy), m.awaiting[i]);
                prop_assert!(m.lives(*buddy), "{} awaits its dead buddy {}", i, buddy);
                prop_assert!(r.member(*buddy).unwrap().state().lives());
            }
            State::Dead { joined, .. } => {
                prop_assert_eq!(*joined, m.joined[i]);
                prop_assert_eq!(m.awaiting[i], None);
            }
        }
        prop_assert!(m.offers[i] <= 1, "member {} offered twice", i);
        // A copy is available exactly while its holder lives (or a disk
        // copy is known): never once the holder died.
        let live_replica = m.replica[i].filter(|h| !m.dead.contains(*h as usize));
        prop_assert_eq!(r.live_replica(i, &m.dead), live_replica);
        prop_assert_eq!(r.has_copy(i, &m.dead), live_replica.is_some() || m.disk[i]);
        if let Some(CopyAt::Replica { holder }) = r.copy_at(i, &m.dead) {
            prop_assert!(!m.dead.contains(holder as usize));
        }
    }
    prop_assert_eq!(r.is_held(), awaited > 0);
    if !r.is_held() {
        prop_assert!(m.held.is_empty());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn no_order_of_events_reaches_an_illegal_state(
        (n, ops) in (2usize..=8).prop_flat_map(|n| (Just(n), proptest::collection::vec(op(n), 0..60)))
    ) {
        let mut r: Roster<u32> = Roster::new(n);
        let mut m = Model::new(n);
        for o in &ops {
            apply(&mut r, &mut m, o)?;
            check(&r, &m)?;
        }
    }

    #[test]
    fn exactly_one_verdict_is_awaited_per_dead_standing_member(
        n in 3usize..=8,
        order in Just((0..8).collect::<Vec<usize>>()).prop_shuffle(),
        answers in proptest::collection::vec(any::<bool>(), 8),
    ) {
        // Every member names the next as its standing buddy; they die in
        // `order`, each buddy answering at once (`answers`) or not at all.
        let mut r: Roster<u32> = Roster::new(n);
        for i in 0..n {
            r.join(i, with_standing(i, (i + 1) % n)).unwrap();
        }
        let mut dead = RankSet::new();
        for &i in order.iter().filter(|&&i| i < n) {
            dead.insert(i);
            let buddy = (i + 1) % n;
            let buddy_died_first = dead.contains(buddy);
            match r.died(i, &dead) {
                Some(Death::Offer(s)) => {
                    prop_assert!(!buddy_died_first);
                    prop_assert_eq!(s.buddy as usize, buddy);
                }
                Some(Death::Settled) => prop_assert!(buddy_died_first),
                None => prop_assert!(false),
            }
            let owed: Vec<usize> = r.awaiting_on(i).collect();
            prop_assert!(owed.len() <= 1, "one dead member per buddy here: {:?}", owed);
            for k in owed {
                prop_assert!(r.verdict(k));
            }
            if r.awaits(i) && answers[i] {
                prop_assert!(r.verdict(i));
            }
            let awaiting = (0..n).filter(|&k| r.awaits(k)).count();
            prop_assert_eq!(r.is_held(), awaiting > 0);
            prop_assert!(awaiting <= dead.len());
        }
    }
}

#[test]
fn copies_held_by_a_replaced_rank_are_gone() {
    let mut r: Roster<()> = Roster::new(3);
    r.join(1, Announcement::default()).unwrap();
    r.join(2, Announcement::default()).unwrap();
    r.replicated(1, 2, true);
    r.replicated(2, 0, true);
    assert!(r.has_copy(1, &dead(&[1])));
    // Rank 2 died and its replacement is in: it holds none of the
    // dead process's copies, though it is not dead.
    r.holder_replaced(2);
    assert!(!r.has_copy(1, &dead(&[1])));
    assert!(r.has_copy(2, &dead(&[2])), "copies elsewhere stay");
}
