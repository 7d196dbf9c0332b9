//! The buffer pool makes buffers ahead when a rank has more reductions in
//! flight at once than ever before (`Config::buffer_pool_prefill`), on the
//! runtime's own thread, and only when asked to. One test in this binary:
//! the pool is per process.

use std::time::{Duration, Instant};
use taskfold::{Config, InPlace, LocalCluster, Reduce, Sum};

/// 1 MiB of `f32` per contribution: above the size from which buffers are
/// pooled.
const LEN: usize = 1 << 18;

/// `k` concurrent reductions on every rank of `c`, each checked at its
/// root. Rank 0 starts all of its `k` before rank 1 starts any, so that
/// none ends before all of rank 0's are in flight.
fn burst(c: &LocalCluster, tag: &str, k: usize) {
    let futures: Vec<_> = c
        .ranks()
        .iter()
        .flat_map(|rt| {
            (0..k).map(move |j| {
                let v = InPlace::<Sum<f32>>::from_slice(&vec![rt.rank() as f32 + 1.0; LEN]);
                rt.reduce(v, Reduce::root(1).id(format!("{tag}-{j}")))
                    .unwrap()
            })
        })
        .collect();
    let n = c.ranks().len() as f32;
    let want = n * (n + 1.0) / 2.0;
    for f in futures {
        if let Some(v) = f.get().unwrap() {
            assert!(v.as_slice().iter().all(|&x| x == want), "{tag}: wrong sum");
        }
    }
}

#[test]
fn buffers_are_made_ahead_only_when_asked() {
    let off = LocalCluster::with_config(
        2,
        Config {
            buffer_pool_prefill: false,
            ..Config::default()
        },
    )
    .unwrap();
    burst(&off, "off", 2);
    off.shutdown().unwrap();
    assert_eq!(taskfold_core::pool::stats().prefilled, 0, "not asked to");

    // Far more in flight than the first burst left in the pool (24
    // reductions of about two 1 MiB buffers each on rank 0 alone, against
    // at most 8 MiB kept and 24 MiB of contributions): the difference is
    // reserved and made.
    let on = LocalCluster::new(2).unwrap();
    burst(&on, "on", 24);
    let deadline = Instant::now() + Duration::from_secs(20);
    while taskfold_core::pool::stats().prefilled == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        taskfold_core::pool::stats().prefilled > 0,
        "no buffer was made ahead"
    );
    on.shutdown().unwrap();
}
