//! Joins naming a standing copy (`Joining::standing`), the deaths that
//! make the master ask the buddy for it, and the releases of consumed
//! data, driven message by message over the serialising loopback.
use super::*;
use crate::detector::RankDown;
use std::sync::Arc;
use std::time::Duration;
use taskfold_core::wire::{
    self, DataSource, Join, Joining, Locator, Standing, TaskFailed, TaskFailure,
};
use taskfold_transports::loopback::{LoopbackHub, LoopbackTransport};
use taskfold_transports::{Event, Transport};

const KEY: u64 = 11;

fn join(rank: u32, buddy: Option<u32>) -> JoinIn {
    join_as(rank, buddy, false)
}

/// The standing copy of `rank`'s original that `buddy` maps.
fn standing(rank: u32, buddy: u32) -> Standing {
    Standing {
        buddy,
        crc: 0x5446_0000 | rank,
        len: 4160,
        node: 9,
        heap: Locator([rank as u8; wire::LOCATOR_LEN]),
    }
}

fn join_as(rank: u32, buddy: Option<u32>, early: bool) -> JoinIn {
    JoinIn {
        from: Rank(rank),
        joining: Joining {
            key: KEY,
            rank,
            join: Join {
                id: "standing".into(),
                group: vec![0, 1, 2, 3],
                root: 1,
                type_tag: 7,
                shape: None,
                disk: None,
                early,
            },
            replica: None,
            standing: buddy.map(|b| standing(rank, b)),
            direct: None,
        },
        wire: 0,
    }
}

fn replicated(owner: u32, holder: u32, ok: bool) -> ReplicatedIn {
    ReplicatedIn {
        holder: Rank(holder),
        key: KEY,
        owner,
        ok,
        wire: 0,
    }
}

/// Every message sent to the four ranks so far: (to, message).
fn sent(ts: &[Arc<LoopbackTransport>]) -> Vec<(u32, Msg)> {
    let mut out = Vec::new();
    for (r, t) in ts.iter().enumerate() {
        for e in t.events().try_iter() {
            if let Event::Message { frame, .. } = e {
                out.push((r as u32, wire::decode(&frame).expect("a valid frame")));
            }
        }
    }
    out
}

fn tasks_naming(msgs: &[(u32, Msg)], rank: u32) -> usize {
    msgs.iter()
        .filter(|(to, m)| matches!(m, Msg::Task(t) if t.provider == rank || *to == rank))
        .count()
}

/// Rank `to` reports task `t` done.
async fn report(m: &Addr<Master>, to: u32, t: &wire::Task) {
    let done = wire::TaskDone {
        key: t.key,
        rank: to,
        task_id: t.task_id,
        path: t.receiver_path.union(&t.provider_path),
        nanos: 1,
        bytes: 1,
        direct: None,
    };
    m.send(TaskDoneIn {
        from: Rank(to),
        done,
        wire: 0,
    })
    .await
    .unwrap();
}

/// Ranks 0, 1 and 3 join; rank 2's join names a standing copy on its
/// buddy, 3.
async fn joined(m: &Addr<Master>) {
    for j in [
        join(0, None),
        join(1, None),
        join(2, Some(3)),
        join(3, None),
    ] {
        m.send(j).await.unwrap();
    }
}

/// The master declares `rank` failed.
pub(in crate::master) async fn down(m: &Addr<Master>, rank: u32) {
    m.send(RankDown {
        rank: Rank(rank),
        reason: "killed".into(),
        latency: None,
    })
    .await
    .unwrap();
}

async fn settle() {
    actix_rt::time::sleep(Duration::from_millis(50)).await;
}

fn master(ts: &[Arc<LoopbackTransport>]) -> Addr<Master> {
    let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
    Master::new(4, Outbox::of(t), 1000).start()
}

/// Every member joins (`early` as given), then every task of the first
/// round is reported done: the ranks released, as (rank, whether its
/// data was a single original).
fn releases_after_first_round(early: bool) -> Vec<u32> {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        for r in 0..4 {
            m.send(join_as(r, None, early)).await.unwrap();
        }
        settle().await;
        let tasks: Vec<(u32, wire::Task)> = sent(&ts)
            .into_iter()
            .filter_map(|(to, m)| match m {
                Msg::Task(t) => Some((to, t)),
                _ => None,
            })
            .collect();
        assert_eq!(tasks.len(), 2, "two pairs of single originals: {tasks:?}");
        for (to, t) in &tasks {
            assert_eq!(t.provider_path.len(), 1);
            report(&m, *to, t).await;
        }
        settle().await;
        let mut released: Vec<u32> = sent(&ts)
            .into_iter()
            .filter_map(|(to, m)| matches!(m, Msg::Release { .. }).then_some(to))
            .collect();
        released.sort_unstable();
        let mut providers: Vec<u32> = tasks.iter().map(|(_, t)| t.provider).collect();
        providers.sort_unstable();
        if early {
            assert_eq!(released, providers, "every consumed original is released");
        }
        released
    })
}

#[test]
fn a_single_original_is_released_only_to_a_member_that_waits_for_it() {
    assert_eq!(
        releases_after_first_round(false),
        Vec::<u32>::new(),
        "by default a single original is kept without a message"
    );
    assert_eq!(releases_after_first_round(true).len(), 2);
}

#[test]
fn a_join_with_a_standing_copy_counts_at_once() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        joined(&m).await;
        settle().await;
        let msgs = sent(&ts);
        assert_eq!(tasks_naming(&msgs, 2), 1, "{msgs:?}");
        assert!(
            !msgs
                .iter()
                .any(|(_, m)| matches!(m, Msg::ReplicaOffer { .. })),
            "nothing is offered while rank 2 lives: {msgs:?}"
        );
    });
}

/// Rank 2 (standing copy on 3) is declared failed after every member
/// joined: what was sent until then, and what the master sent then.
async fn rank_2_dies(m: &Addr<Master>, ts: &[Arc<LoopbackTransport>]) -> Vec<(u32, Msg)> {
    joined(m).await;
    settle().await;
    let _ = sent(ts);
    down(m, 2).await;
    settle().await;
    sent(ts)
}

#[test]
fn a_rank_that_dies_with_a_standing_copy_is_recovered_from_its_buddy() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        let at_death = rank_2_dies(&m, &ts).await;
        // The buddy is offered the original first, then told of the
        // death (it lets go of rank 2's memory then).
        let to_3: Vec<&Msg> = at_death
            .iter()
            .filter(|(to, _)| *to == 3)
            .map(|(_, m)| m)
            .collect();
        assert!(
            matches!(
                to_3.as_slice(),
                [Msg::ReplicaOffer { owner: 2, heap: Some(h), wants_ack: false, .. }, Msg::RankFailed { rank: 2, incarnation: 0 }, ..]
                    if *h == standing(2, 3).heap
            ),
            "{to_3:?}"
        );
        assert!(
            !at_death
                .iter()
                .any(|(_, m)| matches!(m, Msg::Task(_) | Msg::Complete { .. })),
            "the reduction waits for the buddy's answer: {at_death:?}"
        );
        m.send(replicated(2, 3, true)).await.unwrap();
        settle().await;
        let after = sent(&ts);
        assert!(
            after.iter().any(|(_, m)| matches!(
                m,
                Msg::Task(t) if t.provider == 2 && t.source == DataSource::Replica { holder: 3 }
            )),
            "rank 2's original comes from its buddy's copy: {after:?}"
        );
        assert!(
            !after
                .iter()
                .any(|(_, m)| matches!(m, Msg::Complete { error: Some(_), .. })),
            "{after:?}"
        );
    });
}

/// Runs reduction `KEY` on: every task sent is reported done, until the
/// reduction ends (at most 20 rounds). The end's notices: (to, error).
pub(in crate::master) async fn run_to_end(
    m: &Addr<Master>,
    ts: &[Arc<LoopbackTransport>],
) -> Vec<(u32, Option<String>)> {
    run_until_notices(m, ts, |to, msg| match msg {
        Msg::Complete {
            key: KEY, error, ..
        } => Some((to, error.as_ref().map(|e| format!("{e:?}")))),
        _ => None,
    })
    .await
}

/// Runs reduction `KEY` on as `run_to_end` does, until some message sent
/// is picked by `pick`: what it picked from the messages of that round.
pub(in crate::master) async fn run_until_notices<T>(
    m: &Addr<Master>,
    ts: &[Arc<LoopbackTransport>],
    pick: impl Fn(u32, &Msg) -> Option<T>,
) -> Vec<T> {
    for _ in 0..20 {
        settle().await;
        let msgs = sent(ts);
        let picked: Vec<T> = msgs.iter().filter_map(|(to, m)| pick(*to, m)).collect();
        if !picked.is_empty() {
            return picked;
        }
        report_done(m, &msgs, u32::MAX).await;
    }
    panic!("the reduction did not end");
}

/// Rank 1's master, taking over from dead rank 0 of 4, with `respawn` if
/// given and kept results if `keep`.
pub(in crate::master) fn standby(
    ts: &[Arc<LoopbackTransport>],
    respawn: Option<taskfold_core::settings::RespawnConfig>,
    keep: bool,
) -> Addr<Master> {
    let t: Arc<dyn taskfold_transports::Transport> = ts[1].clone();
    let mut m = Master::new(4, Outbox::of(t), 1000);
    if let Some(c) = respawn {
        m.set_respawn(&c);
    }
    m.set_keep_results(keep);
    m.take_over(Rank(0), &taskfold_core::RankSet::new());
    m.start()
}

/// What `rank` reports holding of reduction `KEY` over the group of ranks
/// 1, 2 and 3 (rank `r` at position `r - 1`): its data's positions, and
/// the standing copy of its original on `buddy`, if any.
pub(in crate::master) fn held_of(
    rank: u32,
    path: &[usize],
    buddy: Option<u32>,
) -> taskfold_core::wire::Held {
    let mut joining = join(rank, buddy).joining;
    joining.join.group = vec![1, 2, 3];
    taskfold_core::wire::Held {
        joining,
        path: path.iter().copied().collect(),
        has_value: true,
    }
}

/// The master's counts of kept results: (kept, without a copy, second
/// copies).
pub(in crate::master) async fn result_counts(m: &Addr<Master>) -> (u64, u64, u64) {
    let s = m.send(GetStats).await.unwrap();
    (
        s.results_kept,
        s.results_without_copy,
        s.results_second_copies,
    )
}

/// Reports every task in `msgs` whose receiver is not `except` done.
pub(in crate::master) async fn report_done(m: &Addr<Master>, msgs: &[(u32, Msg)], except: u32) {
    for (to, msg) in msgs {
        match msg {
            Msg::Task(t) if *to != except => report(m, *to, t).await,
            _ => {}
        }
    }
}

#[test]
fn no_task_goes_out_while_a_dead_ranks_buddy_is_asked() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        // Rank 2 first, then the root: rank 2's data goes to the root.
        for j in [
            join(2, Some(3)),
            join(1, None),
            join(0, None),
            join(3, None),
        ] {
            m.send(j).await.unwrap();
        }
        settle().await;
        let first = sent(&ts);
        assert!(
            first
                .iter()
                .any(|(to, m)| *to == 1 && matches!(m, Msg::Task(t) if t.provider == 2)),
            "{first:?}"
        );
        // Rank 2 dies after the root read its data; both tasks of the
        // first round end.
        down(&m, 2).await;
        report_done(&m, &first, 2).await;
        settle().await;
        let held = sent(&ts);
        assert!(
            !held.iter().any(|(_, m)| matches!(m, Msg::Task(_))),
            "two partial results wait for the buddy's answer: {held:?}"
        );
        m.send(replicated(2, 3, true)).await.unwrap();
        settle().await;
        let after = sent(&ts);
        assert!(
            after
                .iter()
                .any(|(to, m)| *to == 1 && matches!(m, Msg::Task(t) if t.provider != 2)),
            "then they are paired (rank 2's original is already in the root's): {after:?}"
        );
    });
}

#[test]
fn a_fetch_failure_from_the_dead_rank_meanwhile_ends_nothing() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        joined(&m).await;
        settle().await;
        // The task that reads rank 2's data (or gives rank 2 data).
        let task = sent(&ts)
            .into_iter()
            .find_map(|(to, m)| match m {
                Msg::Task(t) if t.provider == 2 || to == 2 => Some((to, t)),
                _ => None,
            })
            .expect("rank 2 is in a task");
        down(&m, 2).await;
        if task.0 != 2 {
            // Its receiver's fetch from rank 2 fails, before the
            // buddy answers.
            m.send(TaskFailedIn {
                from: Rank(task.0),
                failed: TaskFailed {
                    key: KEY,
                    task_id: task.1.task_id,
                    reason: TaskFailure::Fetch {
                        reason: "link down".into(),
                        peer_down: true,
                    },
                },
                wire: 0,
            })
            .await
            .unwrap();
        }
        settle().await;
        let held = sent(&ts);
        assert!(
            !held
                .iter()
                .any(|(_, m)| matches!(m, Msg::Task(_) | Msg::Complete { .. })),
            "{held:?}"
        );
        m.send(replicated(2, 3, true)).await.unwrap();
        settle().await;
        let after = sent(&ts);
        assert!(
            !after
                .iter()
                .any(|(_, m)| matches!(m, Msg::Complete { error: Some(_), .. })),
            "the failure is read with the copy known: {after:?}"
        );
        assert!(
            after.iter().any(|(_, m)| matches!(
                m,
                Msg::Task(t) if t.provider == 2 && t.source == DataSource::Replica { holder: 3 }
            )),
            "{after:?}"
        );
    });
}

#[test]
fn a_refusal_or_no_answer_about_a_dead_ranks_original_is_a_typed_error() {
    for answer in [Some(false), None] {
        let (_hub, ts) = LoopbackHub::new(4);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            rank_2_dies(&m, &ts).await;
            match answer {
                Some(ok) => m.send(replicated(2, 3, ok)).await.unwrap(),
                // Bounded: the wait runs out.
                None => actix_rt::time::sleep(VERDICT_WAIT).await,
            }
            settle().await;
            let msgs = sent(&ts);
            for r in [0, 1, 3] {
                assert!(
                    msgs.iter().any(|(to, m)| *to == r
                        && matches!(
                            m,
                            Msg::Complete {
                                error: Some(wire::Failure::RanksLost { .. }),
                                ..
                            }
                        )),
                    "rank {r} hears that rank 2's original is lost ({answer:?}): {msgs:?}"
                );
            }
        });
    }
}

#[test]
fn a_standing_copy_is_gone_with_its_buddy() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        joined(&m).await;
        // Rank 3's own original has a copy (on rank 0): its death loses
        // nothing of its own.
        m.send(replicated(3, 0, true)).await.unwrap();
        down(&m, 3).await;
        settle().await;
        let msgs = sent(&ts);
        assert!(
            !msgs
                .iter()
                .any(|(_, m)| matches!(m, Msg::Complete { error: Some(_), .. })),
            "{msgs:?}"
        );
        // Rank 2 then dies: its copy went with rank 3, nobody is asked.
        down(&m, 2).await;
        settle().await;
        let msgs = sent(&ts);
        assert!(
            !msgs
                .iter()
                .any(|(_, m)| matches!(m, Msg::ReplicaOffer { .. })),
            "{msgs:?}"
        );
        assert!(
            msgs.iter().any(|(_, m)| matches!(
                m,
                Msg::Complete {
                    error: Some(wire::Failure::RanksLost { .. }),
                    ..
                }
            )),
            "{msgs:?}"
        );
    });
}

#[test]
fn a_dead_ranks_buddy_that_dies_before_answering_loses_the_original() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master(&ts);
        rank_2_dies(&m, &ts).await;
        down(&m, 3).await;
        settle().await;
        let msgs = sent(&ts);
        for r in [0, 1] {
            assert!(
                msgs.iter().any(|(to, m)| *to == r
                    && matches!(
                        m,
                        Msg::Complete {
                            error: Some(wire::Failure::RanksLost { .. }),
                            ..
                        }
                    )),
                "rank {r}: {msgs:?}"
            );
        }
    });
}

mod leave;
mod left;
mod limits;
mod numbers;
mod replace;
mod results;
mod rollback;
mod takeover;
mod takeover_replace;
