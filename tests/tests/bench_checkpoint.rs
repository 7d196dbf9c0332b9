//! A short run of `taskfold bench checkpoint`: its JSON holds an encoding
//! figure per size, and a retrieval where the aware path read L3 alone
//! while probing visited L1, L2 and L3, and paid for it.

use std::process::Command;
use std::time::Duration;
use taskfold_tests::{run_bounded, taskfold_bin, text};

#[test]
fn a_short_run_reports_both_figures() {
    let dir = tempfile::tempdir().unwrap();
    let (json, md) = (dir.path().join("ckpt.json"), dir.path().join("ckpt.md"));
    let mut cmd = Command::new(taskfold_bin());
    cmd.args([
        "bench",
        "checkpoint",
        "--size",
        "64K,256K",
        "--reps",
        "2",
        "--state",
        "64K",
        "--timeout",
        "300ms",
        "--retrieval-reps",
        "1",
    ])
    .arg("--json")
    .arg(&json)
    .arg("--markdown")
    .arg(&md);
    let out = run_bounded(cmd, Duration::from_secs(300));
    assert!(out.status.success(), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let encode = r["encode"].as_array().unwrap();
    assert_eq!(encode.len(), 2, "{r}");
    for (e, size) in encode.iter().zip([64 << 10, 256 << 10]) {
        assert_eq!(e["shard_bytes"], size, "{r}");
        assert!(e["gib_per_s_per_core"].as_f64().unwrap() > 0.0, "{r}");
    }
    let f = &r["retrieval"];
    assert_eq!(f["aware_levels"], serde_json::json!([3]), "{r}");
    assert_eq!(f["probing_levels"], serde_json::json!([1, 2, 3]), "{r}");
    // Probing waited out at least the dead partner's timeout.
    assert!(f["probing_median_s"].as_f64().unwrap() >= 0.3, "{r}");
    let table = std::fs::read_to_string(&md).unwrap();
    assert!(table.contains("aware / probing"), "{table}");
}
