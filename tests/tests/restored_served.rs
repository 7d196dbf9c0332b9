//! A rank whose folded data was taken and released is told to reload its
//! own original and fold a provider's; the fetch fails (the provider, or
//! the master, died). Its value is then its original alone, and it serves
//! it as its data: the next task that names it a provider (under this
//! master, or a standby that read its report) gets it. Rank 0 (the
//! master) and rank 2 (a member) are played by their transports alone.

use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold::{Broadcastable, Config, Durability, Reduce, Runtime, Sum};
use taskfold_core::wire::{self, DataSource, Msg, Task};
use taskfold_core::{Rank, RankSet};
use taskfold_transports::loopback::LoopbackHub;
use taskfold_transports::{BufferKey, Event, Transport};

/// The next message rank 1 sends the puppet `t` that `pick` takes.
fn next<T>(t: &dyn Transport, mut pick: impl FnMut(Msg) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    let events = t.events();
    while Instant::now() < deadline {
        if let Ok(Event::Message { frame, .. }) = events.recv_timeout(Duration::from_millis(50)) {
            if let Some(got) = wire::decode(&frame).ok().and_then(&mut pick) {
                return got;
            }
        }
    }
    panic!("rank 1 did not send what was awaited");
}

fn task(key: u64, task_id: u64, receiver_path: RankSet, restore: bool, source: DataSource) -> Msg {
    Msg::Task(Task {
        key,
        task_id,
        provider: 2,
        provider_path: RankSet::single(1),
        receiver_path,
        restore,
        source,
        direct: None,
        more: Vec::new(),
    })
}

#[test]
fn a_reloaded_original_whose_fetch_failed_is_served() {
    let (_hub, ts) = LoopbackHub::new(3);
    let (master, member) = (ts[0].clone(), ts[2].clone());
    let config = Config {
        durability: Durability::Async,
        failure_timeout: Duration::from_secs(60),
        finalize_timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let rt = Runtime::start(ts[1].clone() as Arc<dyn Transport>, config).unwrap();
    let opts = Reduce::root(2).group(vec![1, 2]).id("r");
    let _f = rt.reduce(Sum(vec![1.0f64; 64]), opts).unwrap();
    let key = next(&*master, |m| match m {
        Msg::Join(j) => Some(j.key),
        _ => None,
    });
    // Rank 1 folds rank 2's data, and its folded data is taken and
    // released (as if rank 2, now the receiver, had fetched it).
    let data = Bytes::copy_from_slice(&Sum(vec![2.0f64; 64]).encode_value().unwrap());
    member.expose(BufferKey(key), data);
    let send = |m: &Msg| master.send(Rank(1), wire::encode(m).into()).unwrap();
    send(&task(key, 0, RankSet::single(0), false, DataSource::Data));
    next(&*master, |m| matches!(m, Msg::TaskDone(_)).then_some(()));
    send(&Msg::Release { key });
    // The receiver that took it died: rank 1 reloads its original and
    // fetches rank 2's, which is gone.
    member.withdraw(BufferKey(key));
    send(&task(
        key,
        1,
        RankSet::single(0),
        true,
        DataSource::Original,
    ));
    next(&*master, |m| matches!(m, Msg::TaskFailed(_)).then_some(()));
    let rt2 = tokio::runtime::Runtime::new().unwrap();
    let got = rt2.block_on(member.get(Rank(1), BufferKey(key)));
    let got = got.expect("rank 1 serves its reloaded original");
    let value: Sum<f64> = taskfold_core::reducer::decode(&got).unwrap();
    assert_eq!(value.0, vec![1.0f64; 64]);
    drop(rt);
}
