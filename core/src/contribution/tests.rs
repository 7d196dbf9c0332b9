use super::*;
use proptest::prelude::*;

fn setup(root: bool, durability: Durability, early: bool) -> Setup {
    Setup {
        root,
        durability,
        early,
        index: if root { 0 } else { 1 },
        members: 3,
        replaceable: false,
    }
}

fn member(durability: Durability) -> Contribution {
    Contribution::new(setup(false, durability, false))
}

/// A member's join: safe if it names a copy outside this process.
fn join(replica: Option<u32>, standing: Option<u32>, disk: bool) -> Action {
    Action::Join(JoinFields {
        replica,
        standing,
        disk,
        safe: replica.is_some() || standing.is_some() || disk,
    })
}

const ABANDONED: End = End::Abandoned;

#[test]
fn the_root_joins_at_once_and_keeps_nothing() {
    for d in [Durability::Off, Durability::Async, Durability::Sync] {
        let mut c = Contribution::new(setup(true, d, false));
        assert!(!c.is_safe());
        let safe = Action::Join(JoinFields {
            replica: None,
            standing: None,
            disk: false,
            safe: true,
        });
        assert_eq!(c.serialised(Some(4)), safe);
        assert!(c.is_safe());
        assert!(c.joined());
        let f = c.end(ABANDONED).unwrap();
        assert!(f.fill && !f.strand);
        // No file was written, but none is known not to be: removed as
        // for any reduction with durability on.
        assert_eq!(f.remove_disk, d != Durability::Off);
    }
}

#[test]
fn without_durability_the_join_goes_at_once() {
    let mut c = member(Durability::Off);
    assert_eq!(c.serialised(None), join(None, None, false));
    assert_eq!(c.disk_written(true), Action::Nothing);
    let f = c.end(End::Completed).unwrap();
    assert!(!f.remove_disk && !f.strand);
}

#[test]
fn asynchronous_join_follows_the_disk_copy_and_the_offer() {
    let mut c = member(Durability::Async);
    assert_eq!(c.serialised(None), Action::WriteDisk);
    assert_eq!(c.buddy_answered(2, true), Action::Nothing);
    assert_eq!(
        c.disk_written(true),
        Action::Offer {
            file: true,
            awaited: false
        }
    );
    assert_eq!(c.offered(Some(2), false), join(None, None, true));
    // A late answer changes nothing.
    assert_eq!(c.buddy_answered(2, true), Action::Nothing);
    assert!(c.end(End::Completed).unwrap().remove_disk);
}

#[test]
fn synchronous_join_waits_for_the_buddy() {
    let mut c = member(Durability::Sync);
    assert_eq!(c.serialised(None), Action::WriteDisk);
    assert_eq!(
        c.disk_written(false),
        Action::Offer {
            file: false,
            awaited: true
        }
    );
    assert_eq!(
        c.offered(Some(2), true),
        Action::AwaitBuddy { in_memory: false }
    );
    assert_eq!(c.awaited_buddy(), Some(2));
    assert_eq!(c.buddy_answered(5, true), Action::Nothing);
    assert_eq!(c.buddy_answered(2, true), join(Some(2), None, false));
    // The heap place was offered: a buddy may view it.
    assert!(c.end(ABANDONED).unwrap().strand);
}

#[test]
fn a_refusal_joins_without_a_replica() {
    let mut c = member(Durability::Sync);
    c.serialised(None);
    c.disk_written(true);
    c.offered(Some(2), false);
    assert_eq!(c.buddy_answered(2, false), join(None, None, true));
    assert!(!c.end(ABANDONED).unwrap().strand);
}

#[test]
fn a_dead_buddy_is_replaced() {
    let mut c = member(Durability::Sync);
    c.serialised(None);
    c.disk_written(true);
    c.offered(Some(2), false);
    assert_eq!(c.buddy_failed(7), Action::Nothing);
    assert_eq!(
        c.buddy_failed(2),
        Action::Offer {
            file: true,
            awaited: true
        }
    );
    assert_eq!(
        c.offered(Some(3), false),
        Action::AwaitBuddy { in_memory: false }
    );
    assert_eq!(
        c.buddy_failed(3),
        Action::Offer {
            file: true,
            awaited: true
        }
    );
    // No buddy left.
    assert_eq!(c.offered(None, false), join(None, None, true));
}

#[test]
fn asynchronous_in_place_names_the_standing_copy() {
    let mut c = member(Durability::Async);
    assert_eq!(c.serialised(Some(2)), join(None, Some(2), false));
    assert_eq!(c.place(), Place::Heap);
    let f = c.end(ABANDONED).unwrap();
    assert!(f.strand && !f.remove_disk && f.fill);
}

#[test]
fn synchronous_in_place_offers_the_heap_place() {
    let mut c = member(Durability::Sync);
    assert_eq!(
        c.serialised(Some(2)),
        Action::Offer {
            file: false,
            awaited: true
        }
    );
    assert_eq!(
        c.offered(Some(2), true),
        Action::AwaitBuddy { in_memory: true }
    );
    assert_eq!(c.buddy_answered(2, true), join(Some(2), None, false));
    let f = c.end(End::Completed).unwrap();
    assert!(!f.remove_disk && !f.strand);
}

#[test]
fn in_place_without_a_buddy_falls_back_to_the_disk() {
    let mut c = member(Durability::Sync);
    c.serialised(Some(2));
    assert_eq!(c.offered(None, true), Action::WriteDisk);
    assert_eq!(c.place(), Place::Disk { viewable: true });
    assert_eq!(
        c.disk_written(true),
        Action::Offer {
            file: true,
            awaited: true
        }
    );
    assert_eq!(c.offered(None, false), join(None, None, true));
    let f = c.end(ABANDONED).unwrap();
    assert!(f.strand && f.remove_disk);
}

#[test]
fn an_offer_reported_out_of_turn_changes_nothing() {
    let mut c = member(Durability::Async);
    c.serialised(None);
    let writing = c.clone();
    assert_eq!(c.offered(None, true), Action::Nothing);
    assert_eq!(c, writing);
}

fn check<'a>(id: u64, receiver: &'a RankSet, provider: &'a RankSet) -> TaskCheck<'a> {
    TaskCheck {
        id,
        receiver_path: receiver,
        provider_path: provider,
        restore: false,
        has_value: true,
    }
}

fn joined_root() -> Contribution {
    let mut c = Contribution::new(setup(true, Durability::Async, false));
    c.serialised(None);
    c
}

#[test]
fn tasks_fetch_fold_and_report() {
    let mut c = joined_root();
    let (mine, one, two) = (RankSet::single(0), RankSet::single(1), RankSet::single(2));
    assert_eq!(c.task_arrived(check(1, &mine, &mine)), TaskVerdict::Overlap);
    assert_eq!(c.task_arrived(check(1, &one, &two)), TaskVerdict::Unknown);
    let no_value = TaskCheck {
        has_value: false,
        ..check(1, &mine, &one)
    };
    assert_eq!(c.task_arrived(no_value), TaskVerdict::Unknown);
    assert_eq!(c.task_arrived(check(1, &mine, &one)), TaskVerdict::Start);
    assert!(!c.fetched(9));
    assert!(c.fetched(1));
    assert!(!c.fetched(1));
    c.folded(1, &one);
    assert!(!c.reported(1));
    assert_eq!(c.phase(), Phase::Joined(Work::Ready));
    let both = mine.union(&one);
    assert_eq!(c.task_arrived(check(2, &both, &two)), TaskVerdict::Start);
    assert!(c.fetched(2));
    c.folded(2, &two);
    // Whole at the root: it ends the reduction itself.
    assert!(c.reported(2));
    assert!(c.end(End::Completed).unwrap().fill);
    assert!(!c.reported(2));
}

#[test]
fn a_cancelled_fetch_drops_its_data() {
    let mut c = joined_root();
    let (mine, one) = (RankSet::single(0), RankSet::single(1));
    c.task_arrived(check(1, &mine, &one));
    c.task_failed(1);
    assert!(!c.fetched(1));
    assert_eq!(c.phase(), Phase::Joined(Work::Ready));
}

#[test]
fn a_restore_reloads_the_single_original() {
    let mut c = member(Durability::Async);
    c.serialised(Some(2));
    let (mine, zero, two) = (RankSet::single(1), RankSet::single(0), RankSet::single(2));
    c.task_arrived(check(1, &mine, &zero));
    c.fetched(1);
    c.folded(1, &zero);
    c.reported(1);
    assert!(c.released().drop_value);
    let restore = TaskCheck {
        restore: true,
        has_value: false,
        ..check(2, &mine, &two)
    };
    assert_eq!(c.task_arrived(restore), TaskVerdict::Start);
    assert!(c.fetched(2));
    c.restored(2);
    assert_eq!(c.path(), &mine);
}

#[test]
fn held_tasks_queue() {
    let mut c = joined_root();
    c.hold_tasks();
    let (mine, one) = (RankSet::single(0), RankSet::single(1));
    assert_eq!(c.task_arrived(check(1, &mine, &one)), TaskVerdict::Queue);
    c.resume_tasks();
    assert_eq!(c.task_arrived(check(1, &mine, &one)), TaskVerdict::Start);
}

#[test]
fn tasks_before_the_join_are_refused() {
    let mut c = member(Durability::Sync);
    let (mine, one) = (RankSet::single(1), RankSet::single(0));
    assert_eq!(c.task_arrived(check(1, &mine, &one)), TaskVerdict::Unknown);
    c.serialised(None);
    assert_eq!(c.task_arrived(check(1, &mine, &one)), TaskVerdict::Unknown);
}

#[test]
fn an_early_member_is_filled_by_its_first_release() {
    let mut c = Contribution::new(setup(false, Durability::Off, true));
    c.serialised(None);
    let r = c.released();
    assert!(r.fill && !r.drop_value);
    assert!(!c.released().fill);
    assert!(!c.end(End::Completed).unwrap().fill);
    assert_eq!(c.end(End::Completed), None);
    assert!(!c.released().fill);
}

#[test]
fn a_late_member_is_filled_at_the_end() {
    let mut c = member(Durability::Off);
    c.serialised(None);
    assert!(!c.released().fill);
    assert!(c.end(End::Failed).unwrap().fill);
}

#[test]
fn synchronous_durability_is_safe_once_the_buddy_acknowledged() {
    let mut c = member(Durability::Sync);
    c.serialised(None);
    assert!(!c.is_safe());
    c.disk_written(false);
    assert!(!c.is_safe());
    c.offered(Some(2), false);
    assert!(!c.is_safe(), "an offer is not a copy");
    assert_eq!(c.buddy_answered(2, true), join(Some(2), None, false));
    assert!(c.is_safe());
    // Once safe, nothing reopens the window.
    assert!(!c.released().safe);
    assert!(c.is_safe());
    c.end(End::Completed);
    assert!(c.is_safe());
}

#[test]
fn no_copy_outside_the_process_leaves_the_window_open_until_a_release() {
    // Synchronous: refused, and no disk copy.
    let mut c = member(Durability::Sync);
    c.serialised(None);
    c.disk_written(false);
    c.offered(Some(2), false);
    assert_eq!(c.buddy_answered(2, false), join(None, None, false));
    assert!(!c.is_safe());
    let r = c.released();
    assert!(r.safe && c.is_safe());
    // Asynchronous: the disk copy failed; the offer's copy is not awaited.
    let mut c = member(Durability::Async);
    c.serialised(None);
    c.disk_written(false);
    assert_eq!(c.offered(Some(2), false), join(None, None, false));
    assert!(!c.is_safe());
    c.end(End::Failed);
    assert!(c.is_safe());
    // Off: only a release (or the end) closes it.
    let mut c = member(Durability::Off);
    assert!(!c.released().safe, "a release before the join");
    c.serialised(None);
    assert!(!c.is_safe());
    assert!(c.released().safe);
}

#[test]
fn asynchronous_durability_is_safe_at_the_join_with_a_copy() {
    let mut c = member(Durability::Async);
    c.serialised(None);
    c.disk_written(true);
    assert!(!c.is_safe());
    c.offered(Some(2), false);
    assert!(c.is_safe(), "the disk copy outlives this process");
    let mut c = member(Durability::Async);
    c.serialised(Some(2));
    assert!(c.is_safe(), "the buddy's mapping is the standing copy");
}

/// One event of a random run.
#[derive(Clone, Debug)]
enum Ev {
    Serialised(Option<u32>),
    DiskWritten(bool),
    Offered(Option<u32>, bool),
    Answered(u32, bool),
    BuddyFailed(u32),
    Hold,
    Resume,
    Task { id: u64, restore: bool, value: bool },
    Fetched(u64),
    Failed(u64),
    Folded(u64, usize),
    Reported(u64),
    Released,
    End(End),
}

fn event() -> impl Strategy<Value = Ev> {
    let buddy = 1u32..4;
    let id = 0u64..3;
    prop_oneof![
        proptest::option::of(buddy.clone()).prop_map(Ev::Serialised),
        any::<bool>().prop_map(Ev::DiskWritten),
        (proptest::option::of(buddy.clone()), any::<bool>()).prop_map(|(b, h)| Ev::Offered(b, h)),
        (buddy.clone(), any::<bool>()).prop_map(|(b, ok)| Ev::Answered(b, ok)),
        buddy.prop_map(Ev::BuddyFailed),
        Just(Ev::Hold),
        Just(Ev::Resume),
        (id.clone(), any::<bool>(), any::<bool>()).prop_map(|(id, restore, value)| Ev::Task {
            id,
            restore,
            value
        }),
        id.clone().prop_map(Ev::Fetched),
        id.clone().prop_map(Ev::Failed),
        (id.clone(), 0usize..4).prop_map(|(id, p)| Ev::Folded(id, p)),
        id.prop_map(Ev::Reported),
        Just(Ev::Released),
        prop_oneof![
            Just(End::Completed),
            Just(End::Failed),
            Just(End::Abandoned)
        ]
        .prop_map(Ev::End),
    ]
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        Just(Durability::Off),
        Just(Durability::Async),
        Just(Durability::Sync)
    ]
}

/// What a run did, as the actor would see it.
#[derive(Default)]
struct Seen {
    joins: usize,
    fills: usize,
    finishes: usize,
    /// A disk write was asked for and has not been reported.
    writing: bool,
    /// An offer was asked for and has not been reported.
    offering: bool,
    /// The buddy whose answer the join awaits.
    awaiting: Option<u32>,
    /// The original's heap place was offered or named: a buddy may view it.
    viewable: bool,
}

impl Seen {
    fn action(&mut self, a: Action, c: &Contribution) -> Result<(), TestCaseError> {
        match a {
            Action::Nothing => {}
            Action::WriteDisk => {
                prop_assert!(!self.writing, "a second disk write");
                self.writing = true;
            }
            Action::Offer { .. } => {
                prop_assert!(!self.writing, "an offer before the disk copy settled");
                self.offering = true;
            }
            Action::AwaitBuddy { .. } => {
                prop_assert!(c.waits_for_buddy());
                self.awaiting = c.awaited_buddy();
                prop_assert!(self.awaiting.is_some());
            }
            Action::Join(f) => {
                self.joins += 1;
                prop_assert_eq!(self.joins, 1, "a second join");
                prop_assert!(!self.writing, "a join before the disk copy settled");
                prop_assert!(!self.offering, "a join before the offer was made");
                prop_assert!(self.awaiting.is_none(), "a join before the buddy answered");
                prop_assert!(c.joined());
                if !c.keeps_original() {
                    prop_assert_eq!(
                        f,
                        JoinFields {
                            replica: None,
                            standing: None,
                            disk: false,
                            safe: c.setup().root,
                        }
                    );
                }
                prop_assert_eq!(f.safe, c.is_safe(), "the join's word is the machine's");
                prop_assert_eq!(
                    f.safe,
                    c.setup().root || f.replica.is_some() || f.standing.is_some() || f.disk,
                    "safe exactly when a copy outside the process is named"
                );
                if f.standing.is_some() {
                    prop_assert_eq!(c.setup().durability, Durability::Async);
                    self.viewable = true;
                }
            }
        }
        Ok(())
    }
}

fn run(c: &mut Contribution, s: &mut Seen, e: &Ev) -> Result<(), TestCaseError> {
    let ended = matches!(c.phase(), Phase::Ended(_));
    let before = c.clone();
    let idx = c.setup().index;
    match *e {
        Ev::Serialised(b) => {
            let a = c.serialised(b);
            if matches!(a, Action::Offer { file: false, .. }) {
                s.viewable = true;
            }
            s.action(a, c)?;
        }
        Ev::DiskWritten(copy) => {
            let a = c.disk_written(copy);
            if a != Action::Nothing {
                prop_assert!(s.writing, "a disk copy reported that was not asked for");
                s.writing = false;
            }
            s.action(a, c)?;
        }
        Ev::Offered(to, heap) => {
            let a = c.offered(to, heap);
            if a != Action::Nothing {
                prop_assert!(s.offering, "an offer reported that was not asked for");
                s.offering = false;
                s.viewable |= heap;
                if c.waits_for_buddy() {
                    prop_assert!(
                        to.is_none() || !matches!(a, Action::Join(_)),
                        "synchronous: joined without the buddy's answer"
                    );
                }
            }
            s.action(a, c)?;
        }
        Ev::Answered(from, ok) => {
            let awaited = s.awaiting;
            let a = c.buddy_answered(from, ok);
            if a != Action::Nothing {
                prop_assert_eq!(awaited, Some(from));
                s.awaiting = None;
                if let Action::Join(f) = a {
                    prop_assert_eq!(f.replica, ok.then_some(from));
                }
            }
            s.action(a, c)?;
        }
        Ev::BuddyFailed(r) => {
            let a = c.buddy_failed(r);
            if a != Action::Nothing {
                prop_assert_eq!(s.awaiting, Some(r));
                s.awaiting = None;
            }
            s.action(a, c)?;
        }
        Ev::Hold => c.hold_tasks(),
        Ev::Resume => c.resume_tasks(),
        Ev::Task { id, restore, value } => {
            let receiver = if restore {
                RankSet::single(idx)
            } else {
                c.path().clone()
            };
            let provider = RankSet::single((idx + 1) % 4);
            let v = c.task_arrived(TaskCheck {
                id,
                receiver_path: &receiver,
                provider_path: &provider,
                restore,
                has_value: value,
            });
            if v == TaskVerdict::Start {
                prop_assert!(before.joined());
            }
        }
        Ev::Fetched(id) => {
            if c.fetched(id) {
                prop_assert_eq!(
                    before.phase(),
                    Phase::Joined(Work::Task {
                        id,
                        step: TaskStep::Fetching
                    })
                );
            }
        }
        Ev::Failed(id) => c.task_failed(id),
        Ev::Folded(id, p) => c.folded(id, &RankSet::single(p)),
        Ev::Reported(id) => {
            if c.reported(id) {
                prop_assert!(c.setup().root && c.path().is_full(c.setup().members));
            }
        }
        Ev::Released => {
            let r = c.released();
            s.fills += usize::from(r.fill);
            prop_assert!(!r.fill || c.setup().early);
        }
        Ev::End(how) => {
            if let Some(f) = c.end(how) {
                s.finishes += 1;
                s.fills += usize::from(f.fill);
                prop_assert_eq!(s.fills, 1, "the future is filled exactly once");
                if how == End::Abandoned && s.viewable {
                    prop_assert!(f.strand, "a viewable original was released for reuse");
                }
                if f.strand {
                    prop_assert!(how == End::Abandoned && s.viewable);
                }
            }
        }
    }
    prop_assert!(s.fills <= 1 && s.finishes <= 1);
    if ended {
        prop_assert_eq!(&before, &*c, "an event changed an ended contribution");
    }
    prop_assert!(!before.is_safe() || c.is_safe(), "the window reopened");
    if c.is_safe() {
        prop_assert!(
            matches!(c.phase(), Phase::Joined(_) | Phase::Ended(_)),
            "safe before the join"
        );
    }
    if !c.keeps_original() {
        prop_assert!(!matches!(c.phase(), Phase::Keeping(_)));
        prop_assert_eq!(c.place(), Place::Nowhere);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]
    #[test]
    fn random_event_orders_keep_the_rules(
        root in any::<bool>(),
        d in durability(),
        early in any::<bool>(),
        events in proptest::collection::vec(event(), 0..40),
    ) {
        let mut c = Contribution::new(setup(root, d, early));
        let mut s = Seen::default();
        for e in &events {
            run(&mut c, &mut s, e)?;
        }
        // Whatever happened, an end fills the future if nothing did.
        if s.finishes == 0 {
            let f = c.end(End::Abandoned).unwrap();
            prop_assert_eq!(s.fills + usize::from(f.fill), 1);
            prop_assert_eq!(f.strand, s.viewable);
        }
    }

    #[test]
    fn a_run_that_follows_the_protocol_joins_once(
        root in any::<bool>(),
        d in durability(),
        in_place in proptest::option::of(1u32..4),
        copy in any::<bool>(),
        buddies in proptest::collection::vec(proptest::option::of(1u32..4), 1..4),
        answers in proptest::collection::vec(any::<bool>(), 4),
    ) {
        // Each action answered as the actor would: the join must come.
        let mut c = Contribution::new(setup(root, d, false));
        let mut s = Seen::default();
        let mut a = c.serialised(in_place);
        if matches!(a, Action::Offer { file: false, .. }) {
            s.viewable = true;
        }
        s.action(a, &c)?;
        let mut offers = buddies.iter();
        let mut answers = answers.iter();
        for _ in 0..16 {
            a = match a {
                Action::WriteDisk => {
                    s.writing = false;
                    c.disk_written(copy)
                }
                Action::Offer { .. } => {
                    s.offering = false;
                    c.offered(offers.next().copied().flatten(), false)
                }
                Action::AwaitBuddy { .. } => {
                    let b = c.awaited_buddy().unwrap();
                    s.awaiting = None;
                    match answers.next() {
                        Some(&ok) => c.buddy_answered(b, ok),
                        None => c.buddy_failed(b),
                    }
                }
                Action::Join(_) | Action::Nothing => break,
            };
            s.action(a, &c)?;
        }
        prop_assert_eq!(s.joins, 1);
        prop_assert!(c.joined());
    }
}

/// Without copies a member holds its original only where a replacement
/// may be awaited; with copies always; a root never.
#[test]
fn an_original_is_held_without_copies_only_where_replacements_are_allowed() {
    for (root, durability, replaceable, holds) in [
        (false, Durability::Off, false, false),
        (false, Durability::Off, true, true),
        (false, Durability::Async, false, true),
        (false, Durability::Sync, true, true),
        (true, Durability::Off, true, false),
        (true, Durability::Async, true, false),
    ] {
        let c = Contribution::new(Setup {
            replaceable,
            ..setup(root, durability, false)
        });
        assert_eq!(
            c.holds_original(),
            holds,
            "{root} {durability:?} {replaceable}"
        );
    }
}
