//! A short run of the failure-injection experiment (`taskfold bench
//! faults`): whatever the kill instant, no wrong result and no hang.

use std::process::Command;
use std::time::Duration;
use taskfold_tests::{run_bounded, taskfold_bin, text};

#[test]
fn twenty_trials_per_mode_no_wrong_results_no_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("faults.json");
    let mut cmd = Command::new(taskfold_bin());
    cmd.args([
        "bench",
        "faults",
        "--np",
        "4",
        "--size",
        "1M",
        "--trials",
        "20",
        "--timeout",
        "20",
        "--json",
    ])
    .arg(&json);
    let out = run_bounded(cmd, Duration::from_secs(400));
    assert!(out.status.success(), "{}", text(&out));
    let reports: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let reports = reports.as_array().unwrap();
    assert_eq!(reports.len(), 2);
    for r in reports {
        let n = |k: &str| r[k].as_u64().unwrap();
        assert_eq!(n("wrong_results"), 0, "{r}");
        assert_eq!(n("hangs"), 0, "{r}");
        assert_eq!(n("recovered") + n("typed_errors"), 20, "{r}");
        // A trial that was not recovered keeps its ranks' output.
        for t in r["per_trial"].as_array().unwrap() {
            if t["outcome"] != "recovered" {
                let log = t["log"].as_str().expect("a kept log");
                assert!(
                    std::fs::read_to_string(log).unwrap().contains("[0] "),
                    "{log}"
                );
            }
        }
        if r["durability"] == "sync" {
            assert_eq!(
                n("typed_errors"),
                0,
                "synchronous durability recovers every trial: {r}"
            );
        }
    }
}
