//! A short run of `taskfold bench transports` over TCP: every part of it
//! (latency, gets, the reduction) produces a figure.

use std::process::Command;
use std::time::Duration;
use taskfold_tests::{run_bounded, taskfold_bin, text};

#[test]
fn tcp_latency_gets_and_a_reduction_are_measured() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("transports.json");
    let mut cmd = Command::new(taskfold_bin());
    cmd.args([
        "bench",
        "transports",
        "--transports",
        "tcp",
        "--size",
        "64K,1M",
        "--reps",
        "3",
        "--pings",
        "50",
        "--np",
        "3",
        "--reduce-size",
        "256K",
        "--reduce-reps",
        "3",
        "--json",
    ])
    .arg(&json);
    let out = run_bounded(cmd, Duration::from_secs(300));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(!t.contains("failed"), "no part of the run failed:\n{t}");
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let tcp = &rows.as_array().expect("one row per transport")[0];
    assert!(!tcp["p2p"].is_null(), "latency and gets: {tcp}");
    assert!(!tcp["reduce"].is_null(), "the reduction: {tcp}");
}
