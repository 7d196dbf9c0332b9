//! A standby's takeover, report by report: what ended under the dead
//! master is told to the members that missed it, a barrier some rank
//! passed is released, a later one fails for the dead master.
use super::*;
use crate::master::ResultKeptIn;
use taskfold_core::wire::{Held, Rejoin};
use taskfold_core::{RankSet, ReduceError};

/// None of `msgs` is about kept results (`why` says what that means).
fn no_results_message(msgs: &[(u32, Msg)], why: &str) {
    assert!(
        !msgs.iter().any(|(_, m)| matches!(m, Msg::Results(_))),
        "{why}: {msgs:?}"
    );
}

/// A standby of a job that may replace one rank: its roots keep results.
fn keeping_standby(ts: &[Arc<LoopbackTransport>]) -> Addr<Master> {
    let respawn = taskfold_core::settings::RespawnConfig {
        budget: 1,
        ..Default::default()
    };
    standby(ts, Some(respawn), true)
}

pub(super) fn report_of(rank: u32, f: impl FnOnce(&mut Rejoin)) -> RejoinIn {
    let mut rejoin = Rejoin {
        rank,
        ..Rejoin::default()
    };
    f(&mut rejoin);
    RejoinIn {
        from: Rank(rank),
        rejoin,
        wire: 0,
    }
}

#[test]
fn what_ended_or_was_passed_under_the_dead_master_is_told_after_the_reports() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        // Rank 1 takes over from rank 0.
        let m = standby(&ts, None, false);
        // Rank 2 saw reduction KEY complete and passed barrier 4; rank 3
        // still holds its part of KEY and waits in barrier 4; rank 1
        // waits in barrier 5, which nobody passed.
        m.send(report_of(2, |r| {
            r.ended = vec![(KEY, None)];
            r.passed = 4;
        }))
        .await
        .unwrap();
        m.send(report_of(1, |r| r.barriers = vec![5])).await.unwrap();
        settle().await;
        assert!(sent(&ts).is_empty(), "nothing before every report");
        let held = Held {
            joining: join(3, None).joining,
            path: RankSet::single(3),
            has_value: true,
        };
        m.send(report_of(3, |r| {
            r.holding = vec![held];
            r.barriers = vec![4];
        }))
        .await
        .unwrap();
        settle().await;
        let msgs = sent(&ts);
        let to = |rank: u32| -> Vec<&Msg> {
            msgs.iter().filter(|(r, _)| *r == rank).map(|(_, m)| m).collect()
        };
        assert!(
            to(3).into_iter().any(|m| matches!(
                m,
                Msg::Complete {
                    key: KEY,
                    error: None,
                    ..
                }
            )),
            "{msgs:?}"
        );
        assert!(to(3).contains(&&Msg::BarrierDone { seq: 4, error: None }), "{msgs:?}");
        let failed = to(1).into_iter().any(|m| match m {
            Msg::BarrierDone { seq: 5, error: Some(e) } => {
                matches!(ReduceError::from(e.clone()), ReduceError::RanksLost { ref ranks, .. } if ranks == &vec![0])
            }
            _ => false,
        });
        assert!(failed, "barrier 5 fails with RanksLost [0]: {msgs:?}");
    });
}

/// A standby learns a kept result's second copy from its holder's report
/// (`Rejoin::relayed`): one record with a spare, not two results of one
/// id (which would leave it without any copy).
#[test]
fn a_second_copy_reported_to_a_standby_is_a_spare_of_its_record() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, None, true);
        // The dead master's rank was the root of KEY: rank 2 keeps its
        // result, rank 3 the copy rank 2 relayed.
        m.send(report_of(2, |r| r.results = vec![(KEY, 0)]))
            .await
            .unwrap();
        m.send(report_of(3, |r| {
            r.results = vec![(KEY, 0)];
            r.relayed = vec![(KEY, 0)];
        }))
        .await
        .unwrap();
        m.send(report_of(1, |_| {})).await.unwrap();
        settle().await;
        assert_eq!(result_counts(&m).await, (1, 0, 1));
    });
}

/// A member reported to the standby, with a standing copy of its
/// original on a live buddy, then died before the last report came: the
/// rebuilt reduction offers the copy to that buddy and decides on its
/// answer, as the dead master would have.
#[test]
fn a_member_that_dies_after_its_report_is_offered_to_its_buddy() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, None, false);
        // A group without the dead master's rank: ranks 1, 2 and 3.
        m.send(report_of(2, |r| {
            r.holding = vec![held_of(2, &[1], Some(3))]
        }))
        .await
        .unwrap();
        down(&m, 2).await;
        m.send(report_of(3, |r| r.holding = vec![held_of(3, &[2], None)]))
            .await
            .unwrap();
        m.send(report_of(1, |r| r.holding = vec![held_of(1, &[0], None)]))
            .await
            .unwrap();
        settle().await;
        let rebuilt = sent(&ts);
        assert!(
            rebuilt.iter().any(|(to, m)| *to == 3
                && matches!(
                    m,
                    Msg::ReplicaOffer {
                        owner: 2,
                        key: KEY,
                        ..
                    }
                )),
            "rank 3 is offered rank 2's original: {rebuilt:?}"
        );
        assert!(
            !rebuilt
                .iter()
                .any(|(_, m)| matches!(m, Msg::Complete { .. } | Msg::Task(_))),
            "nothing before its answer: {rebuilt:?}"
        );
        m.send(ReplicatedIn {
            holder: Rank(3),
            key: KEY,
            owner: 2,
            ok: true,
            wire: 0,
        })
        .await
        .unwrap();
        let mut ends = run_to_end(&m, &ts).await;
        ends.sort();
        assert_eq!(ends, vec![(1, None), (3, None)]);
    });
}

/// A dead root's result relayed to rank 3 after the standby took over,
/// its first holder dead before reporting: the standby never heard of the
/// result, and rank 3's copy becomes its record instead of being dropped.
#[test]
fn a_relayed_copy_the_standby_never_heard_of_is_its_record() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, None, true);
        for r in [1, 2, 3] {
            m.send(report_of(r, |_| {})).await.unwrap();
        }
        settle().await;
        let _ = sent(&ts);
        m.send(crate::master::ResultAlsoKeptIn {
            from: Rank(3),
            root: 0,
            key: KEY,
            first: 0,
        })
        .await
        .unwrap();
        settle().await;
        no_results_message(&sent(&ts), "the only copy is not dropped");
        let s = m.send(GetStats).await.unwrap();
        assert_eq!((s.results_kept, s.results_without_copy), (1, 0), "{s:?}");
    });
}

/// A second copy announced while the standby still awaits reports waits
/// for them: the first copy's holder reports it, and the second is its
/// spare (taken as a record of its own first, the two would have been
/// one id's two results, and neither would answer).
#[test]
fn a_second_copy_announced_during_the_takeover_is_a_spare() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, None, true);
        m.send(crate::master::ResultAlsoKeptIn {
            from: Rank(3),
            root: 0,
            key: KEY,
            first: 2,
        })
        .await
        .unwrap();
        m.send(report_of(2, |r| r.results = vec![(KEY, 0)]))
            .await
            .unwrap();
        for r in [1, 3] {
            m.send(report_of(r, |_| {})).await.unwrap();
        }
        settle().await;
        assert_eq!(result_counts(&m).await, (1, 0, 1));
    });
}

/// Rank 2, the root, was replaced under the dead master; its dead process
/// had made reduction `KEY` whole and kept the result at rank 3, unreported,
/// and the dead master took the replacement's join into the live
/// reduction. The standby does too: the others hold it live, so the
/// replacement is not sent to the kept result (answered so, it left the
/// rebuilt reduction without its root, and the job hung in `bench
/// chaos`), and the reduction completes at every member.
#[test]
fn a_replaced_roots_join_of_a_live_reduction_is_rebuilt_not_answered() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let t: Arc<dyn taskfold_transports::Transport> = ts[1].clone();
        let mut m = Master::new(4, Outbox::of(t), 1000);
        m.out
            .view()
            .apply(taskfold_core::membership::Change::Replaced {
                rank: 2,
                incarnation: 1,
                node: 0,
            });
        m.set_respawn(&taskfold_core::settings::RespawnConfig {
            budget: 2,
            ..Default::default()
        });
        m.set_keep_results(true);
        m.take_over(Rank(0), &RankSet::new());
        let m = m.start();
        // Positions: rank 1 is 0, rank 2 (the root) is 1, rank 3 is 2.
        let rooted_at_2 = |rank, path: &[usize]| {
            let mut h = held_of(rank, path, None);
            h.joining.join.root = 2;
            h
        };
        m.send(report_of(1, |r| r.holding = vec![rooted_at_2(1, &[0])]))
            .await
            .unwrap();
        m.send(report_of(2, |r| r.holding = vec![rooted_at_2(2, &[1])]))
            .await
            .unwrap();
        m.send(report_of(3, |r| {
            r.holding = vec![rooted_at_2(3, &[2])];
            r.results = vec![(KEY, 2)];
        }))
        .await
        .unwrap();
        settle().await;
        let msgs = sent(&ts);
        no_results_message(&msgs, "the root is not sent to a kept result");
        report_done(&m, &msgs, u32::MAX).await;
        let mut ends = run_to_end(&m, &ts).await;
        ends.sort();
        assert_eq!(ends, vec![(1, None), (2, None), (3, None)]);
    });
}

/// The root's result was being kept when the master died; the standby
/// completes the reduction from the root's report (its data whole), and
/// the root's notice of the copy comes after that. The copy is the
/// record (the application has the result now): kept, not dropped.
#[test]
fn a_roots_copy_settled_after_the_takeover_completed_it_is_the_record() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = keeping_standby(&ts);
        // Positions: rank 1 (the root) is 0, rank 2 is 1, rank 3 is 2.
        m.send(report_of(1, |r| {
            r.holding = vec![held_of(1, &[0, 1, 2], None)]
        }))
        .await
        .unwrap();
        for rank in [2, 3] {
            m.send(report_of(rank, |_| {})).await.unwrap();
        }
        settle().await;
        let msgs = sent(&ts);
        assert!(
            msgs.iter().any(|(to, m)| *to == 1
                && matches!(
                    m,
                    Msg::Complete {
                        key: KEY,
                        error: None,
                        ..
                    }
                )),
            "completed from the root's report: {msgs:?}"
        );
        m.send(ResultKeptIn {
            from: Rank(1),
            key: KEY,
            holder: 2,
        })
        .await
        .unwrap();
        settle().await;
        no_results_message(&sent(&ts), "the root's copy is not dropped");
        assert_eq!(result_counts(&m).await, (1, 0, 0));
    });
}

/// The master died while the root's result was being kept; the root
/// reports once its copy is settled, and its notice of the copy comes
/// first, while other reports are still awaited. The notice waits for
/// them: handled at once it would name no reduction the standby knows,
/// and the copy would be dropped.
#[test]
fn a_roots_copy_told_before_its_report_is_the_record() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = keeping_standby(&ts);
        let kept = ResultKeptIn {
            from: Rank(1),
            key: KEY,
            holder: 2,
        };
        m.send(kept).await.unwrap();
        m.send(report_of(1, |r| r.ended = vec![(KEY, None)]))
            .await
            .unwrap();
        settle().await;
        no_results_message(&sent(&ts), "nothing before every report");
        // Rank 2 holds its part still: it missed the completion.
        m.send(report_of(2, |r| r.holding = vec![held_of(2, &[1], None)]))
            .await
            .unwrap();
        m.send(report_of(3, |_| {})).await.unwrap();
        settle().await;
        let msgs = sent(&ts);
        no_results_message(&msgs, "the root's copy is not dropped");
        assert!(
            msgs.iter().any(|(to, m)| *to == 2
                && matches!(
                    m,
                    Msg::Complete {
                        key: KEY,
                        error: None,
                        ..
                    }
                )),
            "rank 2 is told the completion: {msgs:?}"
        );
        assert_eq!(result_counts(&m).await, (1, 0, 0));
    });
}

/// A rank whose masters died close together reports to this one twice
/// (once for each death it turned for). Its copy of a root's result is
/// one copy, not two results with one id: recorded, not dropped; and the
/// reduction its first report held is still rebuilt.
#[test]
fn a_rank_that_reports_twice_keeps_its_results_copies() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = keeping_standby(&ts);
        // Rank 2 keeps rank 3's result of KEY + 1, which completed; it
        // first reports its part of KEY, then again without it.
        let done = KEY + 1;
        m.send(report_of(2, |r| {
            r.holding = vec![held_of(2, &[1], None)];
            r.results = vec![(done, 3)];
            r.ended = vec![(done, None)];
        }))
        .await
        .unwrap();
        m.send(report_of(2, |r| {
            r.results = vec![(done, 3)];
            r.ended = vec![(done, None)];
        }))
        .await
        .unwrap();
        m.send(report_of(1, |r| r.holding = vec![held_of(1, &[0], None)]))
            .await
            .unwrap();
        m.send(report_of(3, |r| r.ended = vec![(done, None)]))
            .await
            .unwrap();
        settle().await;
        let msgs = sent(&ts);
        no_results_message(&msgs, "the copy is kept");
        assert_eq!(result_counts(&m).await, (1, 0, 0));
        let tasks = msgs.iter().filter(|(_, m)| matches!(m, Msg::Task(_)));
        assert_eq!(
            tasks.count(),
            1,
            "rank 2's part of KEY is rebuilt: {msgs:?}"
        );
    });
}

/// A holder's report to the standby names a copy of the root's result of
/// a reduction the standby rebuilds live; the root then says where its
/// copy lies and the reduction completes. One result, one record: the
/// reported copy is not taken for an earlier result with the same id
/// (which would drop both).
#[test]
fn a_reported_copy_of_a_live_reduction_is_recorded_at_its_completion() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, None, true);
        m.send(report_of(1, |r| r.holding = vec![held_of(1, &[0], None)]))
            .await
            .unwrap();
        m.send(report_of(2, |r| r.holding = vec![held_of(2, &[1], None)]))
            .await
            .unwrap();
        m.send(report_of(3, |r| {
            r.holding = vec![held_of(3, &[2], None)];
            r.results = vec![(KEY, 1)];
        }))
        .await
        .unwrap();
        settle().await;
        m.send(ResultKeptIn {
            from: Rank(1),
            key: KEY,
            holder: 3,
        })
        .await
        .unwrap();
        let ends = run_to_end(&m, &ts).await;
        assert!(ends.iter().all(|(_, e)| e.is_none()), "{ends:?}");
        settle().await;
        no_results_message(&sent(&ts), "the copy is not dropped");
        assert_eq!(result_counts(&m).await, (1, 0, 0));
    });
}

/// The master and the root of a reduction die together (one node): the
/// root had made it whole and kept its result (a holder reports the
/// copy), but its report died with the master. The standby ends the
/// reduction as completed, with the copy as its record, rather than
/// wait for a root whose replacement would resume past it.
#[test]
fn a_reduction_whose_dead_root_kept_its_result_completed() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, None, true);
        // Positions: rank 1 is 0, rank 2 (the root) is 1, rank 3 is 2.
        let rooted_at_2 = |rank, path: &[usize]| {
            let mut h = held_of(rank, path, None);
            h.joining.join.root = 2;
            h
        };
        m.send(report_of(1, |r| r.holding = vec![rooted_at_2(1, &[0])]))
            .await
            .unwrap();
        m.send(report_of(3, |r| {
            r.holding = vec![rooted_at_2(3, &[2])];
            r.results = vec![(KEY, 2)];
        }))
        .await
        .unwrap();
        down(&m, 2).await;
        settle().await;
        let msgs = sent(&ts);
        for r in [1, 3] {
            assert!(
                msgs.iter().any(|(to, m)| *to == r
                    && matches!(
                        m,
                        Msg::Complete {
                            key: KEY,
                            error: None,
                            ..
                        }
                    )),
                "rank {r} hears it completed: {msgs:?}"
            );
        }
        no_results_message(&msgs, "the copy is kept");
        assert_eq!(result_counts(&m).await, (1, 0, 0));
    });
}

/// Rank 3 was replaced (incarnation 1) just before the master died, and
/// the notice to rank 2 died with it: rank 2's report names incarnation 0
/// for rank 3. The standby tells rank 2 of the replacement; rank 1, which
/// knows it, is told nothing.
#[test]
fn a_rank_that_missed_a_replacement_is_told_of_it_by_the_standby() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let t: Arc<dyn taskfold_transports::Transport> = ts[1].clone();
        let mut master = Master::new(4, Outbox::of(t), 1000);
        master
            .out
            .view()
            .apply(taskfold_core::membership::Change::Replaced {
                rank: 3,
                incarnation: 1,
                node: 0,
            });
        master.take_over(Rank(0), &taskfold_core::RankSet::new());
        let m = master.start();
        m.send(report_of(2, |r| r.incarnations = vec![0, 0, 0, 0]))
            .await
            .unwrap();
        m.send(report_of(1, |r| r.incarnations = vec![0, 0, 0, 1]))
            .await
            .unwrap();
        settle().await;
        let told: Vec<(u32, u32, u32)> = sent(&ts)
            .into_iter()
            .filter_map(|(to, m)| match m {
                Msg::Respawned {
                    rank, incarnation, ..
                } => Some((to, rank, incarnation)),
                _ => None,
            })
            .collect();
        assert_eq!(told, vec![(2, 3, 1)]);
    });
}
