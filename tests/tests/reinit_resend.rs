//! A rank at its re-init entry point (global restart) whose master died
//! before answering its readiness: it tells the master again until an
//! answer comes, so that the standby that took over answers it (the
//! book's chapter Surviving failures of the application, Global restart).
//! Rank 0, the master, is played by its transport alone, which ignores
//! the first readiness as a master that died would.

use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold::{Config, ReduceError, Runtime};
use taskfold_core::settings::{RespawnConfig, Restart};
use taskfold_core::wire::{self, Msg};
use taskfold_transports::loopback::LoopbackHub;
use taskfold_transports::{Event, Transport};

#[test]
fn a_readiness_the_master_never_answered_is_told_again() {
    let (_hub, mut ts) = LoopbackHub::new(2);
    let rank1 = ts.pop().unwrap();
    let puppet = ts.pop().unwrap();
    let config = Config {
        failure_timeout: Duration::from_secs(60),
        finalize_timeout: Duration::from_secs(1),
        respawn: RespawnConfig {
            restart: Restart::Global,
            wait: Duration::from_secs(30),
            ..Default::default()
        },
        ..Config::default()
    };
    let rt = Runtime::start(rank1 as Arc<dyn Transport>, config).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let app = std::thread::spawn(move || {
        let mut calls = 0;
        let got = rt.run_reinit(|_, entry| {
            calls += 1;
            match calls {
                1 => Err(ReduceError::Reinit { epoch: 1 }),
                _ => Ok(entry.resume),
            }
        });
        let _ = done_tx.send(got);
        rt
    });
    // The master's side: the first readiness is lost with its master; the
    // next is answered with the go, the leave with its acknowledgement.
    let events = puppet.events();
    let (mut readies, deadline) = (0, Instant::now() + Duration::from_secs(20));
    let mut outcome = None;
    while outcome.is_none() && Instant::now() < deadline {
        if let Ok(got) = done_rx.try_recv() {
            outcome = Some(got);
            break;
        }
        let Ok(Event::Message { from, frame }) = events.recv_timeout(Duration::from_millis(50))
        else {
            continue;
        };
        let answer = match wire::decode(&frame) {
            Ok(Msg::ReinitReady { epoch: Some(1), .. }) => {
                readies += 1;
                (readies > 1).then_some(Msg::ReinitGo {
                    epoch: 1,
                    version: Some(7),
                })
            }
            Ok(Msg::LeaveReinit { epoch }) => Some(Msg::ReinitLeft { epoch }),
            _ => None,
        };
        if let Some(a) = answer {
            puppet.send(from, wire::encode(&a).into()).unwrap();
        }
    }
    assert_eq!(
        outcome,
        Some(Ok(Some(7))),
        "readiness told {readies} time(s)"
    );
    assert!(readies >= 2);
    let _ = app.join().unwrap().shutdown();
    puppet.shutdown();
}
