//! Failed fetches from a replacement.
use super::*;

/// Ranks 0, 1 and 3 join, rank 2 dies and its replacement joins: the
/// task that reads the replacement's data (its receiver and the task).
async fn reading_the_replacement(
    m: &Addr<Master>,
    ts: &[Arc<LoopbackTransport>],
) -> (u32, taskfold_core::wire::Task) {
    for r in [0, 1, 3] {
        m.send(join(r, None)).await.unwrap();
    }
    down(m, 2).await;
    let_in_2(m, 1).await;
    let _ = sent(ts);
    m.send(join(2, None)).await.unwrap();
    settle().await;
    sent(ts)
        .into_iter()
        .find_map(|(to, m)| match m {
            Msg::Task(t) if t.provider == 2 => Some((to, t)),
            _ => None,
        })
        .expect("a task reads the replacement's data")
}

/// `receiver`'s report that its fetch of `task_id` failed, the link to
/// the provider down.
fn fetch_failed(receiver: u32, task_id: u64) -> crate::master::TaskFailedIn {
    crate::master::TaskFailedIn {
        from: Rank(receiver),
        failed: taskfold_core::wire::TaskFailed {
            key: KEY,
            task_id,
            reason: taskfold_core::wire::TaskFailure::Fetch {
                reason: "connection refused".into(),
                peer_down: true,
            },
        },
        wire: 0,
    }
}

/// A receiver cannot reach rank 2's replacement (it never heard where it
/// listens: the notice came from a master that died), and says the link
/// is down. The master's own link to the replacement is up: it is not
/// declared failed on that word (its pings decide).
#[test]
fn a_replacement_the_master_reaches_is_not_fenced_on_a_receivers_word() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master_replacing(&ts, 1);
        let (receiver, task) = reading_the_replacement(&m, &ts).await;
        m.send(fetch_failed(receiver, task.task_id)).await.unwrap();
        actix_rt::time::sleep(Duration::from_millis(500)).await;
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
    });
}

/// A receiver's fetch from rank 2's replacement fails with its link down
/// while the master still reaches the replacement (the link broke just
/// now, the death not known yet, or the receiver never heard where it
/// listens): the task is not given out again at once, which would fail at
/// once again, as often as the reduction allows, and end it with
/// "fetches keep failing" before the death was known. It is read again
/// after a pause, and given out then.
#[test]
fn a_failed_fetch_from_a_reached_replacement_is_retried_after_a_pause() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = master_replacing(&ts, 1);
        let (receiver, task) = reading_the_replacement(&m, &ts).await;
        m.send(fetch_failed(receiver, task.task_id)).await.unwrap();
        settle().await;
        let msgs = sent(&ts);
        assert!(
            !msgs
                .iter()
                .any(|(_, m)| matches!(m, Msg::Task(t) if t.provider == 2)),
            "not given out again at once: {msgs:?}"
        );
        assert!(
            !msgs.iter().any(|(_, m)| matches!(m, Msg::Complete { .. })),
            "{msgs:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(500)).await;
        let msgs = sent(&ts);
        assert!(
            msgs.iter()
                .any(|(_, m)| matches!(m, Msg::Task(t) if t.provider == 2)),
            "given out again after the pause: {msgs:?}"
        );
    });
}
