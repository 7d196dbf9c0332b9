//! A standby's takeover while replacements of dead members are expected:
//! what the rebuilt reductions hold of a dead member's original decides
//! whether its replacement's join counts or stands in.

use super::takeover::report_of;
use super::*;
use taskfold_core::wire::Held;
use taskfold_core::RankSet;

/// Rank 2's dead process joined and its original was folded into rank
/// 3's data; its replacement had not joined again when the master died.
/// The standby's rebuilt reduction holds that original already, so the
/// replacement's join stands in (as the dead master would have held it)
/// rather than counting it twice, and the reduction completes.
#[test]
fn a_replacement_whose_dead_original_was_folded_in_joins_as_a_stand_in() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = standby(&ts, None, false);
        // Positions: rank 1 is 0, rank 2 is 1, rank 3 is 2.
        m.send(report_of(1, |r| r.holding = vec![held_of(1, &[0], None)]))
            .await
            .unwrap();
        m.send(report_of(3, |r| {
            r.holding = vec![held_of(3, &[1, 2], None)]
        }))
        .await
        .unwrap();
        m.send(report_of(2, |_| {})).await.unwrap();
        settle().await;
        let mut again = join(2, None);
        again.joining.join.group = vec![1, 2, 3];
        m.send(again).await.unwrap();
        let mut ends = run_to_end(&m, &ts).await;
        ends.sort();
        assert_eq!(ends, vec![(1, None), (2, None), (3, None)]);
    });
}

/// The dead master, rank 0, is a member: it reports nothing, so its
/// original is in no rebuilt path, but rank 3 reports a copy of it. Its
/// replacement is awaited and never comes: the copy is read, and the
/// reduction completes, rather than ending with `RanksLost` naming rank 0
/// once the wait runs out (as in a `bench chaos` trial, the copy's holder
/// alive).
#[test]
fn a_dead_members_copy_reported_to_a_standby_is_read_while_its_replacement_is_awaited() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let respawn = taskfold_core::settings::RespawnConfig {
            budget: 1,
            wait: Duration::from_millis(300),
            ..Default::default()
        };
        let m = standby(&ts, Some(respawn), false);
        let own = |rank: u32| Held {
            joining: join(rank, None).joining,
            path: RankSet::single(rank as usize),
            has_value: true,
        };
        for rank in 1..4 {
            m.send(report_of(rank, |r| {
                r.holding = vec![own(rank)];
                if rank == 3 {
                    r.copies = vec![(KEY, 0)];
                }
            }))
            .await
            .unwrap();
        }
        settle().await;
        let first = sent(&ts);
        assert!(
            first
                .iter()
                .any(|(_, m)| matches!(m, Msg::Task(t) if t.provider == 0)),
            "rank 0's original is read from its copy at once: {first:?}"
        );
        report_done(&m, &first, u32::MAX).await;
        let mut ends = run_to_end(&m, &ts).await;
        // Past the wait for the replacement too.
        actix_rt::time::sleep(Duration::from_millis(400)).await;
        ends.extend(sent(&ts).into_iter().filter_map(|(to, m)| match m {
            Msg::Complete {
                key: KEY, error, ..
            } => Some((to, error.map(|e| format!("{e:?}")))),
            _ => None,
        }));
        ends.sort();
        assert_eq!(ends, vec![(1, None), (2, None), (3, None)]);
    });
}
