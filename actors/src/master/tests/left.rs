//! A rank that finalized without joining: the reductions and barriers
//! waiting for it end at once, and later ones naming it are refused.
use super::*;

async fn finalize(m: &Addr<Master>, rank: u32) {
    m.send(FinalizeIn { from: Rank(rank) }).await.unwrap();
}

/// The completion notices sent so far: (to, error).
fn completions(ts: &[Arc<LoopbackTransport>]) -> Vec<(u32, Option<ReduceError>)> {
    sent(ts)
        .into_iter()
        .filter_map(|(to, m)| match m {
            Msg::Complete { key, error, .. } if key == KEY => Some((to, error.map(Into::into))),
            _ => None,
        })
        .collect()
}

fn lost_3() -> Option<ReduceError> {
    Some(ReduceError::RanksLost {
        id: "standing".into(),
        ranks: vec![3],
    })
}

#[test]
fn a_rank_that_finalizes_without_joining_ends_the_reduction_on_every_member() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        for r in 0..3 {
            m.send(join(r, None)).await.unwrap();
        }
        settle().await;
        let _ = sent(&ts);
        finalize(&m, 3).await;
        settle().await;
        let mut got = completions(&ts);
        got.sort_by_key(|(to, _)| *to);
        assert_eq!(got, vec![(0, lost_3()), (1, lost_3()), (2, lost_3())]);
    });
}

#[test]
fn a_rank_that_joined_before_finalizing_changes_nothing() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        m.send(join(3, None)).await.unwrap();
        m.send(join(0, None)).await.unwrap();
        finalize(&m, 3).await;
        settle().await;
        assert_eq!(completions(&ts), vec![], "the reduction goes on");
    });
}

#[test]
fn a_reduction_opened_after_a_member_left_is_refused_at_once() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        finalize(&m, 3).await;
        m.send(join(1, None)).await.unwrap();
        settle().await;
        assert_eq!(completions(&ts), vec![(1, lost_3())]);
        // The members that join later hear it as they join.
        m.send(join(0, None)).await.unwrap();
        settle().await;
        assert_eq!(completions(&ts), vec![(0, lost_3())]);
    });
}

#[test]
fn a_root_that_left_without_joining_is_a_lost_root() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        m.send(join(0, None)).await.unwrap();
        finalize(&m, 1).await; // the root of `join`'s reduction
        settle().await;
        let lost = ReduceError::RootLost {
            id: "standing".into(),
            root: 1,
        };
        assert_eq!(completions(&ts), vec![(0, Some(lost))]);
    });
}

#[test]
fn a_barrier_a_finalized_rank_did_not_reach_fails() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        for from in [0, 1] {
            m.send(BarrierIn {
                from: Rank(from),
                seq: 0,
                board: false,
                wire: 0,
            })
            .await
            .unwrap();
        }
        finalize(&m, 3).await;
        settle().await;
        let failed: Vec<(u32, Option<ReduceError>)> = sent(&ts)
            .into_iter()
            .filter_map(|(to, m)| match m {
                Msg::BarrierDone { seq: 0, error } => Some((to, error.map(Into::into))),
                _ => None,
            })
            .collect();
        let lost = Some(ReduceError::RanksLost {
            id: "barrier-0".into(),
            ranks: vec![3],
        });
        assert_eq!(failed, vec![(0, lost.clone()), (1, lost)]);
    });
}
