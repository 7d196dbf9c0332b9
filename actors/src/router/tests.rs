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

/// The master tells rank 2 that rank 1 was replaced, and never that its
/// process died (a master that declared it died before telling every
/// rank): rank 2 takes the death in first, as a notice of it would have
/// been, so that its worker stops waiting on the dead process.
#[test]
fn a_replacement_heard_of_first_brings_the_death_of_the_process_it_replaces() {
    let (hub, ts) = LoopbackHub::new(3);
    let ranks: Vec<Runtime> = ts
        .iter()
        .map(|t| Runtime::start(t.clone() as Arc<dyn Transport>, Config::default()).unwrap())
        .collect();
    let events = ranks[2].recovery_events();
    let respawned = wire::encode(&Msg::Respawned {
        rank: 1,
        incarnation: 1,
        addr: Vec::new(),
        node: 0,
    });
    ts[0].send(Rank(2), respawned.into()).unwrap();
    let mut heard = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while heard.len() < 2 && Instant::now() < deadline {
        if let Ok(e) = events.recv_timeout(Duration::from_millis(100)) {
            heard.push(format!("{e:?}"));
        }
    }
    assert_eq!(
        heard,
        [
            "RankFailed { rank: 1 }",
            "Respawned { rank: 1, incarnation: 1 }"
        ]
    );
    // Rank 1's process is the one rank 2 counts dead: gone for the
    // master too, the others end without waiting for it.
    hub.kill(Rank(1));
    let pending: Vec<_> = ranks.iter().map(|r| r.begin_shutdown()).collect();
    for (mut r, rx) in ranks.into_iter().zip(pending).rev() {
        let _ = r.finish_shutdown(rx);
    }
}
