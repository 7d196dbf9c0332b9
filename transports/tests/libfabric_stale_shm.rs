//! A process whose id an earlier, killed process had still starts its
//! `shm` endpoints: the region that process left in `/dev/shm` under that
//! id is removed first (see the transport's `stale` module). Its own test
//! binary, so that its first `shm` endpoint is made here.

#![cfg(feature = "libfabric")]

use bytes::Bytes;
use taskfold_transports::conformance::{expect_message, libfabric_ranks};
use taskfold_transports::libfabric::provider_available;
use taskfold_transports::{Rank, Transport};

#[test]
fn a_region_left_under_this_process_id_does_not_stop_its_endpoints() {
    if !provider_available("shm") {
        assert!(
            std::env::var_os("CI").is_none(),
            "libfabric provider `shm` is not available on this machine (CI is set)"
        );
        eprintln!("skipped: libfabric provider `shm` is not available here");
        return;
    }
    let pid = std::process::id();
    // What a killed process with this id left: libfabric 1.17 names its
    // first endpoint's region `<pid>:0:0`.
    let stale = std::path::Path::new("/dev/shm").join(format!("{pid}:0:0"));
    std::fs::write(&stale, vec![0u8; 4096]).unwrap();
    let ts = libfabric_ranks(2, "shm", &|_| {});
    ts[0].send(Rank(1), Bytes::from_static(b"hello")).unwrap();
    let (from, frame) = expect_message(&*ts[1], "the frame from rank 0");
    assert_eq!((from, &frame[..]), (Rank(0), &b"hello"[..]));
    for t in &ts {
        t.shutdown();
    }
    drop(ts);
    assert!(
        !std::fs::read(&stale).is_ok_and(|b| b == vec![0u8; 4096]),
        "the stale region was removed (and the name reused by this process's endpoint)"
    );
}
