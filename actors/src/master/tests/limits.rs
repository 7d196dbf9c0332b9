//! The bounds on what peers make the master hold: live reductions
//! (`max_reductions`) and replica notices of reductions not open yet.
use super::*;

/// Rank `rank`'s join of reduction `key` over the four ranks.
fn join_key(rank: u32, key: u64) -> JoinIn {
    let mut j = join(rank, None);
    j.joining.key = key;
    j.joining.join.id = format!("r{key}");
    j
}

/// The completion notices of reduction `key` sent so far: (to, error).
fn completions_of(msgs: &[(u32, Msg)], key: u64) -> Vec<(u32, Option<ReduceError>)> {
    msgs.iter()
        .filter_map(|(to, m)| match m {
            Msg::Complete { key: k, error, .. } if *k == key => {
                Some((*to, error.clone().map(Into::into)))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_join_beyond_the_limit_fails_its_reduction_and_the_live_ones_go_on() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
        let mut master = Master::new(4, Outbox::of(t), 1000);
        master.set_max_reductions(2);
        let m = master.start();
        // Rank 1 opens three reductions; the third is one too many.
        for key in [100, 101, 102] {
            m.send(join_key(1, key)).await.unwrap();
        }
        settle().await;
        let msgs = sent(&ts);
        let too_many = Some(ReduceError::TooManyReductions { limit: 2 });
        assert_eq!(completions_of(&msgs, 102), vec![(1, too_many.clone())]);
        assert!(completions_of(&msgs, 100).is_empty(), "{msgs:?}");
        // A later member of the refused reduction hears the same.
        m.send(join_key(2, 102)).await.unwrap();
        settle().await;
        assert_eq!(completions_of(&sent(&ts), 102), vec![(2, too_many)]);
        // The live ones complete: every member joins, every task is done.
        for r in [0, 2, 3] {
            m.send(join_key(r, 100)).await.unwrap();
        }
        let mut completed = Vec::new();
        for _ in 0..10 {
            settle().await;
            for (to, msg) in sent(&ts) {
                match msg {
                    Msg::Task(t) => report(&m, to, &t).await,
                    Msg::Complete { key, error, .. } => completed.push((key, error)),
                    _ => {}
                }
            }
            if !completed.is_empty() {
                break;
            }
        }
        assert_eq!(
            completed,
            vec![(100, None); 4],
            "the live reduction completed on every member"
        );
        // One reduction is live again: a new one opens.
        m.send(join_key(3, 103)).await.unwrap();
        settle().await;
        assert!(completions_of(&sent(&ts), 103).is_empty());
    });
}
