//! The router over the serialising loopback: which ranks it takes a
//! message from.
use crate::{Config, Reduce, Runtime, Sum};
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold_core::wire::{self, Msg};
use taskfold_core::{Rank, ReduceError};
use taskfold_transports::loopback::LoopbackHub;
use taskfold_transports::Transport;

/// Rank 2 follows rank 0 as its master; rank 1, which rank 2 does not
/// follow, says rank 2's process is out of the job. Rank 2 takes it: it is
/// fenced, and every reduction it starts fails so (a rank following
/// another master than the job's would otherwise live on unreplaced).
#[test]
fn a_fence_notice_about_this_process_is_taken_from_any_rank() {
    let (hub, ts) = LoopbackHub::new(3);
    let ranks: Vec<Runtime> = ts
        .iter()
        .map(|t| Runtime::start(t.clone() as Arc<dyn Transport>, Config::default()).unwrap())
        .collect();
    // Another rank's fate, from a rank that is not the master: dropped.
    let other = wire::encode(&Msg::RankFailed {
        rank: 0,
        incarnation: 0,
    });
    ts[1].send(Rank(2), other.into()).unwrap();
    let mine = wire::encode(&Msg::RankFailed {
        rank: 2,
        incarnation: 0,
    });
    ts[1].send(Rank(2), mine.into()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let outcome = loop {
        let f = ranks[2].reduce(Sum(vec![1.0f64]), Reduce::root(2).group([2]));
        match f.map(|f| f.get()) {
            Ok(Err(ReduceError::Fenced)) | Err(ReduceError::Fenced) => break Ok(()),
            other if Instant::now() > deadline => break Err(format!("{other:?}")),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    assert_eq!(outcome, Ok(()));
    // Rank 0 was not declared failed on rank 1's word.
    let f = ranks[0].reduce(Sum(vec![1.0f64]), Reduce::root(0).group([0]));
    assert!(f.unwrap().get().is_ok());
    // The job's master declares it failed once its process is gone: the
    // others then end without waiting for it.
    hub.kill(Rank(2));
    let pending: Vec<_> = ranks.iter().map(|r| r.begin_shutdown()).collect();
    for (mut r, rx) in ranks.into_iter().zip(pending).rev() {
        let _ = r.finish_shutdown(rx);
    }
}
