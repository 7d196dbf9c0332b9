//! Replacements let in by the master: who is told, who is waited for.
use super::*;
use crate::master::ReplacementIn;
use taskfold_core::respawn::Slot;
use taskfold_core::settings::RespawnConfig;

/// Asks the master where a rank's replacement stands in its book.
#[derive(Message)]
#[rtype(result = "Option<Slot>")]
struct SlotOf(u32);

impl Handler<SlotOf> for Master {
    type Result = Option<Slot>;

    fn handle(&mut self, m: SlotOf, _: &mut Context<Self>) -> Option<Slot> {
        self.respawn.book.slot(m.0).cloned()
    }
}

/// A master of 4 ranks that expects one replacement.
fn replacing_master(ts: &[Arc<LoopbackTransport>]) -> Addr<Master> {
    master_replacing(ts, 1)
}

/// A master of 4 ranks that expects `budget` replacements.
fn master_replacing(ts: &[Arc<LoopbackTransport>], budget: u32) -> Addr<Master> {
    let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
    let mut m = Master::new(4, Outbox::of(t), 1000);
    m.set_respawn(&RespawnConfig {
        budget,
        ..RespawnConfig::default()
    });
    m.start()
}

/// The ranks told to let replacement `incarnation` of `rank` in.
fn told(ts: &[Arc<LoopbackTransport>], rank: u32, incarnation: u32) -> Vec<u32> {
    let mut to: Vec<u32> = sent(ts)
        .into_iter()
        .filter_map(|(to, m)| match m {
            Msg::Respawned {
                rank: r,
                incarnation: i,
                ..
            } if (r, i) == (rank, incarnation) => Some(to),
            _ => None,
        })
        .collect();
    to.sort_unstable();
    to
}

#[test]
fn a_rank_that_finalized_is_told_of_a_replacement_but_not_waited_for() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = replacing_master(&ts);
        m.send(FinalizeIn { from: Rank(2) }).await.unwrap();
        down(&m, 3).await;
        settle().await;
        let _ = sent(&ts);
        m.send(ReplacementIn {
            peer: Rank(3),
            incarnation: 1,
            node: 0,
            addr: vec![4, 127, 0, 0, 1],
        })
        .await
        .unwrap();
        settle().await;
        // The master's own rank is told as any. Rank 2 still serves until
        // the job ends (copies, a takeover):
        // it would refuse the replacement as a stranger if not told.
        assert_eq!(told(&ts, 3, 1), vec![0, 1, 2]);
        assert!(
            matches!(
                m.send(SlotOf(3)).await.unwrap(),
                Some(Slot::Admitting { .. })
            ),
            "rank 1 has not let it in"
        );
        // Rank 1's answer is the last one waited for: rank 2's never comes.
        m.send(ReadmittedIn {
            from: Rank(1),
            rank: 3,
            incarnation: 1,
        })
        .await
        .unwrap();
        settle().await;
        assert_eq!(
            m.send(SlotOf(3)).await.unwrap(),
            Some(Slot::Live(1)),
            "let in without rank 2's answer"
        );
    });
}

/// Rank 2 dies after joining with a standing copy on rank 3; its
/// replacement is let in and joins before rank 3 answers whether it keeps
/// the copy (`keeps`). Either way the reduction completes once, with the
/// dead original or the replacement's, and every member hears it.
fn replacement_joins_before_the_verdict(keeps: bool) {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = replacing_master(&ts);
        super::joined(&m).await;
        settle().await;
        let first = sent(&ts);
        down(&m, 2).await;
        // The first round's tasks end, but for the one rank 2 received.
        report_done(&m, &first, 2).await;
        settle().await;
        let at_death = sent(&ts);
        assert!(
            at_death
                .iter()
                .any(|(to, m)| *to == 3 && matches!(m, Msg::ReplicaOffer { owner: 2, .. })),
            "{at_death:?}"
        );
        m.send(ReplacementIn {
            peer: Rank(2),
            incarnation: 1,
            node: 0,
            addr: vec![4, 127, 0, 0, 1],
        })
        .await
        .unwrap();
        for from in [1, 3] {
            m.send(ReadmittedIn {
                from: Rank(from),
                rank: 2,
                incarnation: 1,
            })
            .await
            .unwrap();
        }
        settle().await;
        assert_eq!(m.send(SlotOf(2)).await.unwrap(), Some(Slot::Live(1)));
        let _ = sent(&ts);
        // The replacement joins while the buddy is still asked.
        m.send(join(2, None)).await.unwrap();
        settle().await;
        let meanwhile = sent(&ts);
        assert!(
            !meanwhile
                .iter()
                .any(|(_, m)| matches!(m, Msg::Complete { .. } | Msg::Task(_))),
            "nothing before the buddy's answer: {meanwhile:?}"
        );
        m.send(replicated(2, 3, keeps)).await.unwrap();
        let mut ends = run_to_end(&m, &ts).await;
        ends.sort();
        assert_eq!(
            ends,
            (0..4).map(|r| (r, None)).collect::<Vec<_>>(),
            "completed, told to every member (the replacement too)"
        );
    });
}

/// Replacement `incarnation` of `rank` asks to join.
fn asking(rank: u32, incarnation: u32) -> ReplacementIn {
    ReplacementIn {
        peer: Rank(rank),
        incarnation,
        node: 0,
        addr: vec![4, 127, 0, 0, 1],
    }
}

/// Lets replacement `incarnation` of rank 2 in (ranks 1 and 3 answer).
async fn let_in_2(m: &Addr<Master>, incarnation: u32) {
    m.send(asking(2, incarnation)).await.unwrap();
    for from in [1, 3] {
        m.send(ReadmittedIn {
            from: Rank(from),
            rank: 2,
            incarnation,
        })
        .await
        .unwrap();
    }
    settle().await;
}

/// As above, but the replacement that joined dies too before the buddy
/// answers, and the next one joins after the answer: the dead
/// replacement's waiting join is void, and the reduction counts rank 2
/// once.
#[test]
fn a_waiting_join_dies_with_its_process() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master_replacing(&ts, 2);
        super::joined(&m).await;
        settle().await;
        let first = sent(&ts);
        down(&m, 2).await;
        report_done(&m, &first, 2).await;
        let_in_2(&m, 1).await;
        m.send(join(2, None)).await.unwrap();
        down(&m, 2).await;
        let_in_2(&m, 2).await;
        assert_eq!(m.send(SlotOf(2)).await.unwrap(), Some(Slot::Live(2)));
        m.send(replicated(2, 3, false)).await.unwrap();
        settle().await;
        m.send(join(2, None)).await.unwrap();
        let mut ends = run_to_end(&m, &ts).await;
        ends.sort();
        assert_eq!(ends, (0..4).map(|r| (r, None)).collect::<Vec<_>>());
    });
}

#[test]
fn a_replacement_that_joins_while_its_buddy_is_asked_counts_once_if_the_copy_is_kept() {
    replacement_joins_before_the_verdict(true);
}

#[test]
fn a_replacement_that_joins_while_its_buddy_is_asked_stands_in_if_the_copy_is_not() {
    replacement_joins_before_the_verdict(false);
}

/// A receiver's report that its fetch from rank 2's dead process failed
/// comes after rank 2's replacement was let in: the replacement is not
/// the process that failed, and is not declared failed for it.
#[test]
fn a_fetch_failure_of_a_replaced_process_does_not_fence_its_replacement() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master_replacing(&ts, 1);
        // Rank 2 first, then the root: rank 2's data goes to the root.
        for r in [2, 1, 0, 3] {
            m.send(join(r, None)).await.unwrap();
        }
        settle().await;
        let (receiver, task) = sent(&ts)
            .into_iter()
            .find_map(|(to, m)| match m {
                Msg::Task(t) if t.provider == 2 => Some((to, t)),
                _ => None,
            })
            .expect("a task reads rank 2's data");
        down(&m, 2).await;
        let_in_2(&m, 1).await;
        let _ = sent(&ts);
        m.send(crate::master::TaskFailedIn {
            from: Rank(receiver),
            failed: taskfold_core::wire::TaskFailed {
                key: KEY,
                task_id: task.task_id,
                reason: taskfold_core::wire::TaskFailure::Fetch {
                    reason: "rank 2 was declared failed".into(),
                    peer_down: true,
                },
            },
            wire: 0,
        })
        .await
        .unwrap();
        settle().await;
        let msgs = sent(&ts);
        assert!(
            !msgs.iter().any(|(_, m)| matches!(
                m,
                Msg::RankFailed {
                    rank: 2,
                    incarnation: 1
                }
            )),
            "{msgs:?}"
        );
        assert_eq!(m.send(SlotOf(2)).await.unwrap(), Some(Slot::Live(1)));
    });
}

/// A replacement killed while the ranks let it in, its launcher's next
/// one asking at once: when the last rank's answer comes, the first's
/// registration is gone. Its admission fails as its death: the next is
/// let in (without it, the next waited for an admission that never came,
/// and the job lost the rank).
#[test]
fn a_replacement_gone_before_its_admission_makes_way_for_the_next() {
    let (hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master_replacing(&ts, 2);
        down(&m, 3).await;
        settle().await;
        let _ = sent(&ts);
        let asks = |incarnation| asking(3, incarnation);
        m.send(asks(1)).await.unwrap();
        settle().await;
        assert_eq!(told(&ts, 3, 1), vec![0, 1, 2]);
        // The launcher starts the next before incarnation 1's death is
        // declared: it waits for that death.
        m.send(asks(2)).await.unwrap();
        hub.registration_gone(Rank(3), 1);
        for from in [1, 2] {
            let from = Rank(from);
            m.send(ReadmittedIn {
                from,
                rank: 3,
                incarnation: 1,
            })
            .await
            .unwrap();
        }
        settle().await;
        assert_eq!(told(&ts, 3, 2), vec![0, 1, 2], "the next is let in");
        assert!(matches!(
            m.send(SlotOf(3)).await.unwrap(),
            Some(Slot::Admitting { incarnation: 2, .. })
        ));
    });
}

/// Rank 2 joined and died, its buddy keeps its copy; its first
/// replacement dies, after joining if `joins`, and the second joins: rank
/// 2 counts once (a join of a dead replacement dies with it). If `late`,
/// the tasks handed out before the first death (reading rank 2's
/// original) end only after the second replacement joined.
fn a_dead_replacement_leaves_its_place_to_the_next(joins: bool, late: bool) {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master_replacing(&ts, 2);
        super::joined(&m).await;
        settle().await;
        let first = sent(&ts);
        down(&m, 2).await;
        if !late {
            report_done(&m, &first, 2).await;
        }
        m.send(replicated(2, 3, true)).await.unwrap();
        let_in_2(&m, 1).await;
        if joins {
            m.send(join(2, None)).await.unwrap();
            settle().await;
        }
        down(&m, 2).await;
        let_in_2(&m, 2).await;
        m.send(join(2, None)).await.unwrap();
        if late {
            report_done(&m, &first, 2).await;
        }
        let mut ends = run_to_end(&m, &ts).await;
        ends.sort();
        assert_eq!(ends, (0..4).map(|r| (r, None)).collect::<Vec<_>>());
    });
}

#[test]
fn a_replacement_that_dies_before_joining_leaves_its_place_to_the_next() {
    a_dead_replacement_leaves_its_place_to_the_next(false, false);
}

#[test]
fn a_replacement_that_dies_after_joining_leaves_its_place_to_the_next() {
    a_dead_replacement_leaves_its_place_to_the_next(true, false);
}

/// As above, the first replacement's join held while rank 2's original
/// is still read: the next replacement's join is held in its place,
/// never refused as a second join of rank 2 (seen in `bench chaos`:
/// "group position 2 joined twice").
#[test]
fn a_held_replacement_that_dies_leaves_its_place_to_the_next() {
    a_dead_replacement_leaves_its_place_to_the_next(true, true);
}

/// The next replacement of rank 2 asked before its predecessor's death
/// was declared (a launcher starts it at once): every rank hears of that
/// death before it is told to let the next in. A rank told in the other
/// order drops the notice, as about a process replaced since, and its
/// worker never cancels its fetches from the dead process nor copies
/// again what it held (the job hung so in `bench chaos`).
#[test]
fn the_death_is_told_before_the_replacement_that_waited_for_it() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master_replacing(&ts, 2);
        down(&m, 2).await;
        let_in_2(&m, 1).await;
        let _ = sent(&ts);
        m.send(asking(2, 2)).await.unwrap();
        settle().await;
        assert_eq!(told(&ts, 2, 2), Vec::<u32>::new(), "held until the death");
        down(&m, 2).await;
        settle().await;
        let msgs = sent(&ts);
        for r in [0, 1, 3] {
            let order: Vec<&str> = msgs
                .iter()
                .filter(|(to, _)| *to == r)
                .filter_map(|(_, m)| match m {
                    Msg::RankFailed {
                        rank: 2,
                        incarnation: 1,
                    } => Some("failed"),
                    Msg::Respawned {
                        rank: 2,
                        incarnation: 2,
                        ..
                    } => Some("respawned"),
                    _ => None,
                })
                .collect();
            assert_eq!(order, ["failed", "respawned"], "to rank {r}");
        }
    });
}

/// Names incarnation 1 of a rank live in the master's view, as the notice
/// of a dead master's cut admission does at a standby.
#[derive(Message)]
#[rtype(result = "()")]
struct NamedLive(u32);

impl Handler<NamedLive> for Master {
    type Result = ();

    fn handle(&mut self, m: NamedLive, _: &mut Context<Self>) {
        self.out
            .view()
            .apply(taskfold_core::membership::Change::Replaced {
                rank: m.0,
                incarnation: 1,
                node: 0,
            });
    }
}

/// A replacement being let in answers no ping: where the view already
/// names it live (a dead master's cut admission), its silence during the
/// admission is no failure — in `bench chaos` it was declared failed the
/// instant it was let in, with the budget spent. A broken link still is.
#[test]
fn a_replacement_being_let_in_is_not_failed_for_its_silence() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = replacing_master(&ts);
        down(&m, 3).await;
        m.send(ReplacementIn {
            peer: Rank(3),
            incarnation: 1,
            node: 0,
            addr: vec![4, 127, 0, 0, 1],
        })
        .await
        .unwrap();
        m.send(NamedLive(3)).await.unwrap();
        let silent = |rank| RankDown {
            rank: Rank(rank),
            reason: "no answer to pings for 1205 ms".into(),
            latency: Some(Duration::from_millis(1205)),
        };
        m.send(silent(3)).await.unwrap();
        settle().await;
        assert!(
            matches!(
                m.send(SlotOf(3)).await.unwrap(),
                Some(Slot::Admitting { .. })
            ),
            "still being let in"
        );
        // A broken link during the admission is a death.
        m.send(RankDown {
            rank: Rank(3),
            reason: "link down".into(),
            latency: None,
        })
        .await
        .unwrap();
        settle().await;
        assert!(
            !matches!(
                m.send(SlotOf(3)).await.unwrap(),
                Some(Slot::Admitting { .. })
            ),
            "a broken link ends the admission"
        );
    });
}

/// A reduction fails while rank 2's replacement is awaited (fetches keep
/// failing although their providers live) after every member joined, so
/// no late member is pending and the failure's notice to rank 2 went to
/// its dead process. The replacement, replaying the step from its
/// checkpoint, joins it afterwards: it hears the failure every live
/// member heard, rather than opening the reduction afresh and waiting for
/// members that went on.
#[test]
fn a_replacement_that_joins_a_reduction_that_failed_hears_the_failure() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = replacing_master(&ts);
        for r in 0..4 {
            m.send(join(r, None)).await.unwrap();
        }
        settle().await;
        let round = sent(&ts);
        report_done(&m, &round, u32::MAX).await;
        settle().await;
        down(&m, 2).await;
        for task_id in 0..40 {
            m.send(TaskFailedIn {
                from: Rank(0),
                failed: TaskFailed {
                    key: KEY,
                    task_id,
                    reason: TaskFailure::Fetch {
                        reason: "rank 1 exposes no buffer".into(),
                        peer_down: false,
                    },
                },
                wire: 0,
            })
            .await
            .unwrap();
        }
        settle().await;
        let failed = sent(&ts);
        let told = |msgs: &[(u32, Msg)], r: u32| {
            msgs.iter().any(|(to, m)| {
                *to == r
                    && matches!(
                        m,
                        Msg::Complete {
                            key: KEY,
                            error: Some(wire::Failure::Transport { .. }),
                            ..
                        }
                    )
            })
        };
        for r in [0, 1, 3] {
            assert!(told(&failed, r), "rank {r} hears the failure: {failed:?}");
        }
        let_in_2(&m, 1).await;
        let _ = sent(&ts);
        m.send(join(2, None)).await.unwrap();
        settle().await;
        let after = sent(&ts);
        assert!(told(&after, 2), "the replacement hears it: {after:?}");
    });
}

/// A standby took over while the dead master was letting in the
/// replacements of ranks 2 and 3: the dead master's notices reached the
/// standby, so its view names both live at incarnation 1, yet neither
/// runs. When they ask it again, neither waits for the other to let it
/// in, which it cannot do before it is in itself (in `bench chaos` three
/// such replacements, and a fourth asking meanwhile, waited for each
/// other until their registrations timed out 30 s later).
#[test]
fn replacements_whose_admission_a_dead_master_cut_do_not_wait_for_each_other() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let t: Arc<dyn taskfold_transports::Transport> = ts[1].clone();
        let mut m = Master::new(4, Outbox::of(t), 1000);
        for rank in [2, 3] {
            m.out
                .view()
                .apply(taskfold_core::membership::Change::Replaced {
                    rank,
                    incarnation: 1,
                    node: 0,
                });
        }
        m.set_respawn(&RespawnConfig {
            budget: 4,
            ..RespawnConfig::default()
        });
        m.take_over(Rank(0), &taskfold_core::RankSet::new());
        let m = m.start();
        m.send(asking(2, 1)).await.unwrap();
        m.send(asking(3, 1)).await.unwrap();
        settle().await;
        assert_eq!(
            m.send(SlotOf(2)).await.unwrap(),
            Some(Slot::Live(1)),
            "no running rank but the master's had to let rank 2 in"
        );
        assert_eq!(told(&ts, 3, 1), vec![1, 2], "rank 2, now in, lets 3 in");
        m.send(ReadmittedIn {
            from: Rank(2),
            rank: 3,
            incarnation: 1,
        })
        .await
        .unwrap();
        settle().await;
        assert_eq!(m.send(SlotOf(3)).await.unwrap(), Some(Slot::Live(1)));
    });
}

mod fetch;
