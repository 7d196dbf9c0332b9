//! Kept results at the master: second copies that come before the
//! record they belong to.
use super::*;
use crate::master::{ResultAlsoKeptIn, ResultKeptIn};

/// A master of 4 ranks that keeps results' records and expects `budget`
/// replacements (0: none).
fn keeping_master(ts: &[Arc<LoopbackTransport>], budget: u32) -> Addr<Master> {
    let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
    let mut master = Master::new(4, Outbox::of(t), 1000);
    if budget > 0 {
        master.set_respawn(&taskfold_core::settings::RespawnConfig {
            budget,
            ..Default::default()
        });
    }
    master.set_keep_results(true);
    master.start()
}

/// A second copy of a live root's result (made at once, see
/// `Config::second_result_copies`) announced before the reduction
/// completed here: a spare of the record the completion makes, not a
/// record of its own (two records of one id would both be dropped).
#[test]
fn a_second_copy_before_the_completion_is_the_records_spare() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = keeping_master(&ts, 0);
        joined(&m).await;
        m.send(ResultAlsoKeptIn {
            from: Rank(3),
            root: 1,
            key: KEY,
            first: 2,
        })
        .await
        .unwrap();
        m.send(ResultKeptIn {
            from: Rank(1),
            key: KEY,
            holder: 2,
        })
        .await
        .unwrap();
        let ends = run_to_end(&m, &ts).await;
        assert!(ends.iter().all(|(_, e)| e.is_none()), "{ends:?}");
        assert_eq!(result_counts(&m).await, (1, 0, 1));
    });
}

/// The holder of a live root's result dies; its second copy's holder,
/// rank 3, becomes the record's holder; the root copies the result again
/// to its next buddy, rank 3 too. That copy is the one the record names:
/// kept, not dropped.
#[test]
fn a_copy_again_at_the_records_holder_is_kept() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = keeping_master(&ts, 0);
        joined(&m).await;
        let kept = |from: u32, holder: u32| ResultKeptIn {
            from: Rank(from),
            key: KEY,
            holder,
        };
        m.send(kept(1, 2)).await.unwrap();
        let ends = run_to_end(&m, &ts).await;
        assert!(ends.iter().all(|(_, e)| e.is_none()), "{ends:?}");
        m.send(ResultAlsoKeptIn {
            from: Rank(3),
            root: 1,
            key: KEY,
            first: 2,
        })
        .await
        .unwrap();
        down(&m, 2).await;
        settle().await;
        let _ = sent(&ts);
        m.send(kept(1, 3)).await.unwrap();
        settle().await;
        let msgs = sent(&ts);
        assert!(
            !msgs.iter().any(|(_, m)| matches!(m, Msg::Results(_))),
            "rank 3's copy is not dropped: {msgs:?}"
        );
        assert_eq!(result_counts(&m).await, (1, 0, 0));
    });
}

/// The record's holder, rank 2, is sent the same result again (deaths
/// close together: a holder relays it on once more) and says it keeps a
/// further copy. That copy is the record's own: kept, not dropped, and
/// no further copy is counted.
#[test]
fn a_further_copy_at_the_records_holder_is_kept() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = keeping_master(&ts, 0);
        joined(&m).await;
        m.send(ResultKeptIn {
            from: Rank(1),
            key: KEY,
            holder: 2,
        })
        .await
        .unwrap();
        let ends = run_to_end(&m, &ts).await;
        assert!(ends.iter().all(|(_, e)| e.is_none()), "{ends:?}");
        let _ = sent(&ts);
        m.send(ResultAlsoKeptIn {
            from: Rank(2),
            root: 1,
            key: KEY,
            first: 3,
        })
        .await
        .unwrap();
        settle().await;
        let msgs = sent(&ts);
        assert!(
            !msgs.iter().any(|(_, m)| matches!(m, Msg::Results(_))),
            "rank 2's copy is not dropped: {msgs:?}"
        );
        assert_eq!(result_counts(&m).await, (1, 0, 0));
    });
}

/// Rank 1, the root, is declared dead; rank 3 then says it keeps a copy
/// of its result, relayed by the holder `first`: what the master sends
/// after.
async fn relayed_after_the_roots_death(
    m: &Addr<Master>,
    ts: &[Arc<LoopbackTransport>],
    first: u32,
) -> Vec<(u32, Msg)> {
    settle().await;
    down(m, 1).await;
    settle().await;
    let _ = sent(ts);
    m.send(ResultAlsoKeptIn {
        from: Rank(3),
        root: 1,
        key: KEY,
        first,
    })
    .await
    .unwrap();
    settle().await;
    sent(ts)
}

/// Whether `rank` was told reduction `KEY` completed.
fn told_completed(msgs: &[(u32, Msg)], rank: u32) -> bool {
    msgs.iter().any(|(to, m)| {
        *to == rank
            && matches!(
                m,
                Msg::Complete {
                    key: KEY,
                    error: None,
                    ..
                }
            )
    })
}

/// The root dies (its replacement awaited) while the master holds its
/// reduction live; a holder then says it keeps a copy of that root's
/// result, relayed after the root's death. The root made the reduction
/// whole (it keeps a copy only then): the master ends it complete and
/// records the copy, rather than wait for a replacement that resumes
/// past it.
#[test]
fn a_copy_of_a_dead_roots_result_completes_its_live_reduction() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = keeping_master(&ts, 1);
        joined(&m).await;
        let msgs = relayed_after_the_roots_death(&m, &ts, 2).await;
        for r in [0, 2, 3] {
            assert!(
                told_completed(&msgs, r),
                "rank {r} hears it completed: {msgs:?}"
            );
        }
        assert_eq!(result_counts(&m).await, (1, 0, 1));
    });
}

/// The root dies before it said where its result is kept (rank 2, which
/// relayed it on to rank 3): the master hears of both copies from rank
/// 3's notice, so rank 3's death then still leaves rank 2's copy for the
/// root's replacement. Recorded at rank 3 alone, two deaths within the
/// budget (the root's, then rank 3's) lost a completed result.
#[test]
fn a_relayed_copy_names_the_first_holder_too() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = keeping_master(&ts, 2);
        joined(&m).await;
        relayed_after_the_roots_death(&m, &ts, 2).await;
        assert_eq!(result_counts(&m).await, (1, 0, 1));
        down(&m, 3).await;
        settle().await;
        assert_eq!(
            result_counts(&m).await,
            (1, 0, 0),
            "rank 2's copy answers after rank 3's death"
        );
    });
}

/// As above, the first holder already dead when the notice comes: the
/// relayed copy alone is the record.
#[test]
fn a_relayed_copy_whose_first_holder_died_is_the_record_alone() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = keeping_master(&ts, 2);
        joined(&m).await;
        down(&m, 2).await;
        relayed_after_the_roots_death(&m, &ts, 2).await;
        assert_eq!(result_counts(&m).await, (1, 0, 0));
    });
}

/// The root told the master where its result is kept (rank 2), then died
/// before its last report: the master holds the reduction live and the
/// record pending. Rank 2 relays the dead root's copy on to rank 3, which
/// says so. The reduction ends complete, its pending record is made, and
/// rank 3's copy is that record's spare: not a second record of one id,
/// which would drop both copies and leave the root's replacement
/// `ResultLost`.
#[test]
fn a_relayed_copy_of_a_pending_record_is_its_spare() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = keeping_master(&ts, 1);
        joined(&m).await;
        m.send(ResultKeptIn {
            from: Rank(1),
            key: KEY,
            holder: 2,
        })
        .await
        .unwrap();
        let msgs = relayed_after_the_roots_death(&m, &ts, 2).await;
        assert!(
            told_completed(&msgs, 2),
            "the reduction completed: {msgs:?}"
        );
        assert!(
            !msgs.iter().any(|(_, m)| matches!(m, Msg::Results(_))),
            "no copy is dropped: {msgs:?}"
        );
        assert_eq!(result_counts(&m).await, (1, 0, 1));
    });
}
