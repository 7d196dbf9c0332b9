//! Global restart at the master: which deaths roll the job back, and who
//! the meeting at the entry point waits for.
use super::*;
use crate::master::{ReadmittedIn, ReinitReadyIn, ReplacementIn};
use taskfold_core::settings::{RespawnConfig, Restart};

/// Global restart with `budget` replacements.
pub(super) fn global(budget: u32) -> RespawnConfig {
    RespawnConfig {
        budget,
        restart: Restart::Global,
        ..RespawnConfig::default()
    }
}

/// A master of 4 ranks under global restart that expects one replacement.
pub(super) fn global_master(ts: &[Arc<LoopbackTransport>]) -> Addr<Master> {
    let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
    let mut m = Master::new(4, Outbox::of(t), 1000);
    m.set_respawn(&global(1));
    m.start()
}

/// Rank 3's replacement is let in (rank 1 answers; `also`, if given, too).
pub(super) async fn let_in_3(m: &Addr<Master>, also: Option<u32>) {
    m.send(ReplacementIn {
        peer: Rank(3),
        incarnation: 1,
        node: 0,
        addr: vec![4, 127, 0, 0, 1],
    })
    .await
    .unwrap();
    for from in std::iter::once(1).chain(also) {
        m.send(ReadmittedIn {
            from: Rank(from),
            rank: 3,
            incarnation: 1,
        })
        .await
        .unwrap();
    }
    settle().await;
}

pub(super) fn ready(from: u32, epoch: Option<u32>, held: &[u64]) -> ReinitReadyIn {
    ReinitReadyIn {
        from: Rank(from),
        epoch,
        held: held.to_vec(),
    }
}

/// The go of the meeting each rank was sent: (to, version).
pub(super) fn goes(msgs: &[(u32, Msg)]) -> Vec<(u32, Option<u64>)> {
    msgs.iter()
        .filter_map(|(to, m)| match m {
            Msg::ReinitGo { version, .. } => Some((*to, *version)),
            _ => None,
        })
        .collect()
}

/// Once a rank finalized, the steps it was in cannot be done again: a
/// death rolls nothing back, and the replacement resumes from its own
/// newest checkpoint, alone.
#[test]
fn a_death_after_a_rank_finalized_rolls_nothing_back() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = global_master(&ts);
        m.send(FinalizeIn { from: Rank(2) }).await.unwrap();
        down(&m, 3).await;
        settle().await;
        let msgs = sent(&ts);
        assert!(
            !msgs.iter().any(|(_, m)| matches!(m, Msg::Reinit { .. })),
            "{msgs:?}"
        );
        let_in_3(&m, None).await;
        let _ = sent(&ts);
        m.send(ready(3, None, &[5, 7])).await.unwrap();
        settle().await;
        assert_eq!(goes(&sent(&ts)), vec![(3, Some(7))]);
    });
}

/// Without a finalized rank the same death rolls every rank back.
#[test]
fn a_death_before_any_rank_finalized_rolls_every_rank_back() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = global_master(&ts);
        down(&m, 3).await;
        settle().await;
        let mut to: Vec<u32> = sent(&ts)
            .into_iter()
            .filter_map(|(to, m)| matches!(m, Msg::Reinit { epoch: 1 }).then_some(to))
            .collect();
        to.sort_unstable();
        assert_eq!(to, vec![0, 1, 2]);
    });
}

/// A rank whose finalize crossed the rollback's notice is not waited for
/// at the entry point: the others resume without it.
#[test]
fn a_rank_that_finalizes_as_a_rollback_begins_is_not_waited_for() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = global_master(&ts);
        down(&m, 3).await;
        let_in_3(&m, Some(2)).await;
        for r in [0, 1] {
            m.send(ready(r, Some(1), &[4, 6])).await.unwrap();
        }
        m.send(ready(3, None, &[4])).await.unwrap();
        settle().await;
        assert_eq!(goes(&sent(&ts)), vec![], "rank 2 is still awaited");
        m.send(FinalizeIn { from: Rank(2) }).await.unwrap();
        settle().await;
        let mut go = goes(&sent(&ts));
        go.sort_unstable();
        assert_eq!(go, (0..4).map(|r| (r, Some(4))).collect::<Vec<_>>());
    });
}

/// A rank that dies while a standby awaits the ranks' reports: the job
/// rolls back once, when the reports told the standby the job's epoch,
/// and not a second time for the same death.
#[test]
fn a_death_during_a_takeover_rolls_back_once() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, Some(global(2)), false);
        m.send(super::takeover::report_of(1, |r| r.epoch = 4))
            .await
            .unwrap();
        down(&m, 3).await;
        m.send(super::takeover::report_of(2, |r| r.epoch = 4))
            .await
            .unwrap();
        settle().await;
        let mut reinits: Vec<(u32, u32)> = sent(&ts)
            .into_iter()
            .filter_map(|(to, m)| match m {
                Msg::Reinit { epoch } => Some((to, epoch)),
                _ => None,
            })
            .collect();
        reinits.sort_unstable();
        assert_eq!(reinits, vec![(1, 5), (2, 5)]);
    });
}

/// The master died while its rollback's notice was on its way: rank 2
/// reports from the epoch before, holding its part of a reduction whose
/// key the newer epoch uses again. Its part is never mixed with the newer
/// epoch's (that would fold data of two runs into one result), and a new
/// rollback brings every rank to one epoch.
#[test]
fn a_report_from_an_older_epoch_is_not_mixed_in_and_rolls_the_job_back() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, Some(global(0)), false);
        for (rank, epoch) in [(1, 2), (2, 1), (3, 2)] {
            let report = super::takeover::report_of(rank, |r| {
                r.epoch = epoch;
                r.holding = vec![held_of(rank, &[rank as usize - 1], None)];
            });
            m.send(report).await.unwrap();
        }
        settle().await;
        let msgs = sent(&ts);
        assert!(
            !msgs.iter().any(|(to, m)| matches!(
                m,
                Msg::Task(t) if *to == 2 || t.provider == 2
            )),
            "rank 2's part of the older epoch is not folded: {msgs:?}"
        );
        let mut reinits: Vec<(u32, u32)> = msgs
            .iter()
            .filter_map(|(to, m)| match m {
                Msg::Reinit { epoch } => Some((*to, *epoch)),
                _ => None,
            })
            .collect();
        reinits.sort_unstable();
        assert_eq!(reinits, vec![(1, 3), (2, 3), (3, 3)]);
    });
}

/// A standby whose takeover ends in a rollback (the dead master's
/// replacement is awaited) rebuilds nothing of the epoch first: a
/// reduction some rank reports as completed is not completed for the
/// others (its key may be the next epoch's already), and no task goes
/// out; the rollback's notice does.
#[test]
fn a_takeover_that_rolls_back_rebuilds_nothing_first() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, Some(global(1)), false);
        for rank in [1, 2, 3] {
            let report = super::takeover::report_of(rank, |r| {
                r.holding = vec![held_of(rank, &[rank as usize - 1], None)];
                if rank == 2 {
                    r.ended = vec![(KEY, None)];
                }
            });
            m.send(report).await.unwrap();
        }
        settle().await;
        let msgs = sent(&ts);
        assert!(
            !msgs
                .iter()
                .any(|(_, m)| matches!(m, Msg::Complete { .. } | Msg::Task(_))),
            "{msgs:?}"
        );
        let reinits = msgs
            .iter()
            .filter(|(_, m)| matches!(m, Msg::Reinit { epoch: 1 }))
            .count();
        assert_eq!(reinits, 3, "{msgs:?}");
    });
}

/// Results kept under global restart (for a root replaced after a rank
/// finalized) go with a rollback: the next epoch reuses their keys.
#[test]
fn a_rollback_forgets_every_kept_result() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
        let mut master = Master::new(4, Outbox::of(t), 1000);
        master.set_respawn(&global(1));
        master.set_keep_results(true);
        let m = master.start();
        super::joined(&m).await;
        m.send(crate::master::ResultKeptIn {
            from: Rank(1),
            key: KEY,
            holder: 2,
        })
        .await
        .unwrap();
        let ends = run_to_end(&m, &ts).await;
        assert!(ends.iter().all(|(_, e)| e.is_none()), "{ends:?}");
        assert_eq!(m.send(GetStats).await.unwrap().results_kept, 1);
        down(&m, 3).await;
        settle().await;
        assert!(
            sent(&ts)
                .iter()
                .any(|(_, m)| matches!(m, Msg::Reinit { .. })),
            "rolled back"
        );
        assert_eq!(m.send(GetStats).await.unwrap().results_kept, 0);
    });
}

/// A second copy's notice that comes from a rank still on its way back
/// to its entry point belongs to the epoch the job rolls back from: it
/// makes no record (its copy goes with the rollback at its holder).
#[test]
fn a_second_copy_from_the_epoch_rolled_back_makes_no_record() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
        let mut master = Master::new(4, Outbox::of(t), 1000);
        master.set_respawn(&global(1));
        master.set_keep_results(true);
        let m = master.start();
        down(&m, 1).await;
        settle().await;
        assert!(
            sent(&ts)
                .iter()
                .any(|(_, m)| matches!(m, Msg::Reinit { .. })),
            "rolled back"
        );
        m.send(crate::master::ResultAlsoKeptIn {
            from: Rank(3),
            root: 1,
            key: KEY,
            first: 2,
        })
        .await
        .unwrap();
        settle().await;
        assert_eq!(result_counts(&m).await, (0, 0, 0));
    });
}

/// A replacement's readiness that reaches a standby while it awaits the
/// reports (the replacement told the dead master, then tells again) waits
/// for them: the job's epoch is known only then. Here the reports name
/// epoch 2 and the dead master rolls the job back to 3; the readiness
/// counts for that meeting, and no go of an older epoch is ever sent.
#[test]
fn a_readiness_during_a_takeover_is_answered_after_the_reports() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, Some(global(2)), false);
        m.send(ready(3, None, &[5])).await.unwrap();
        settle().await;
        assert!(goes(&sent(&ts)).is_empty(), "no go before the reports");
        for r in 1..4 {
            let report = super::takeover::report_of(r, |rep| rep.epoch = 2);
            m.send(report).await.unwrap();
        }
        settle().await;
        let msgs = sent(&ts);
        assert!(
            goes(&msgs).is_empty(),
            "the meeting waits for the others: {msgs:?}"
        );
        assert!(
            msgs.contains(&(3, Msg::Reinit { epoch: 3 })),
            "rank 3 meets the others in epoch 3: {msgs:?}"
        );
    });
}
