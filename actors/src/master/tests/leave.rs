//! Global restart at the master: a rank's application that leaves its
//! re-init entry point for good (`Msg::LeaveReinit`). A death is either
//! before the leave, and rolls that rank back with the others, or after
//! it, and rolls nothing back: a rank never finishes while the others
//! redo steps it was in.
use super::rollback::{global, global_master, goes, let_in_3, ready};
use super::*;
use crate::master::LeaveReinitIn;

fn leave(from: u32, epoch: u32) -> LeaveReinitIn {
    LeaveReinitIn {
        from: Rank(from),
        epoch,
    }
}

/// The rollbacks' notices sent: (to, epoch), sorted.
fn reinits(msgs: &[(u32, Msg)]) -> Vec<(u32, u32)> {
    let mut r: Vec<(u32, u32)> = msgs
        .iter()
        .filter_map(|(to, m)| match m {
            Msg::Reinit { epoch } => Some((*to, *epoch)),
            _ => None,
        })
        .collect();
    r.sort_unstable();
    r
}

/// Who was told that their leave was taken.
fn taken(msgs: &[(u32, Msg)]) -> Vec<u32> {
    msgs.iter()
        .filter_map(|(to, m)| matches!(m, Msg::ReinitLeft { .. }).then_some(*to))
        .collect()
}

/// A leave taken before a death: the rank is told, and the death rolls
/// nothing back (the replacement resumes from its own newest checkpoint,
/// alone).
#[test]
fn a_death_after_a_leave_rolls_nothing_back() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = global_master(&ts);
        m.send(leave(1, 0)).await.unwrap();
        settle().await;
        assert_eq!(taken(&sent(&ts)), vec![1]);
        down(&m, 3).await;
        settle().await;
        assert_eq!(reinits(&sent(&ts)), vec![]);
        let_in_3(&m, Some(2)).await;
        let _ = sent(&ts);
        m.send(ready(3, None, &[5, 7])).await.unwrap();
        settle().await;
        let msgs = sent(&ts);
        assert_eq!(goes(&msgs), vec![(3, Some(7))], "{msgs:?}");
    });
}

/// A leave that crosses a rollback's notice is not taken: the rank meets
/// the others (its notice reached it first) and the meeting waits for it,
/// so that the steps it finished are redone with it, never without it.
#[test]
fn a_leave_that_crosses_a_rollback_is_not_taken() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = global_master(&ts);
        down(&m, 3).await;
        settle().await;
        assert_eq!(reinits(&sent(&ts)), vec![(0, 1), (1, 1), (2, 1)]);
        m.send(leave(1, 0)).await.unwrap();
        let_in_3(&m, Some(2)).await;
        for r in [0, 2] {
            m.send(ready(r, Some(1), &[4, 6])).await.unwrap();
        }
        m.send(ready(3, None, &[4])).await.unwrap();
        settle().await;
        let msgs = sent(&ts);
        assert_eq!(taken(&msgs), Vec::<u32>::new());
        assert_eq!(goes(&msgs), vec![], "rank 1 is still awaited");
        m.send(ready(1, Some(1), &[4, 6])).await.unwrap();
        settle().await;
        let mut go = goes(&sent(&ts));
        go.sort_unstable();
        assert_eq!(go, (0..4).map(|r| (r, Some(4))).collect::<Vec<_>>());
        // After the go the rank's next leave, of the new epoch, is taken.
        m.send(leave(1, 1)).await.unwrap();
        settle().await;
        assert_eq!(taken(&sent(&ts)), vec![1]);
    });
}

/// A standby that took over learns from the reports who had left: it
/// rolls nothing back for the dead master's replacement, which then
/// resumes alone.
#[test]
fn a_standby_rolls_nothing_back_once_a_rank_had_left() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, Some(global(2)), false);
        m.send(super::takeover::report_of(1, |_| {})).await.unwrap();
        m.send(super::takeover::report_of(2, |r| r.left = true))
            .await
            .unwrap();
        m.send(super::takeover::report_of(3, |_| {})).await.unwrap();
        settle().await;
        assert_eq!(reinits(&sent(&ts)), vec![]);
    });
}

/// The same takeover without the leave rolls every rank back: the test
/// above sees the report's flag, not a takeover that never rolls back.
#[test]
fn a_standby_rolls_back_for_the_dead_master_when_no_rank_had_left() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, Some(global(2)), false);
        for rank in 1..4 {
            m.send(super::takeover::report_of(rank, |_| {}))
                .await
                .unwrap();
        }
        settle().await;
        assert_eq!(reinits(&sent(&ts)), vec![(1, 1), (2, 1), (3, 1)]);
    });
}
