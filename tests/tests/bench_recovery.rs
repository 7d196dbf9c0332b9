//! A short run of `taskfold bench recovery`: one failure-free trial and
//! one checkpoint/restart trial of a small psdm job on 3 ranks; both end
//! with the failure-free checksum, a killed restart trial launched the
//! job twice, and the JSON, the report and the plot are written.

use std::process::Command;
use std::time::Duration;
use taskfold_tests::{psdm_bin, run_bounded, taskfold_bin, text};

#[test]
fn one_trial_of_none_and_restart() {
    let bin = taskfold_bin();
    let psdm = psdm_bin();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("report");
    let mut cmd = Command::new(bin);
    cmd.args(["bench", "recovery", "--np", "3", "--trials", "1"])
        .args(["--modes", "none,restart", "--seed", "3", "--timeout", "60s"])
        .arg("--psdm")
        .arg(&psdm)
        .arg("--out")
        .arg(&out_dir)
        .arg("--")
        .args(["--nx", "200", "--nz", "100", "--shots", "12"])
        .args(["--receivers", "48", "--batch", "4", "--in-flight", "2"])
        .args(["--checkpoint-every", "3"]);
    let out = run_bounded(cmd, Duration::from_secs(300));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("recovery.json")).unwrap()).unwrap();
    let trials = json["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2, "{json}");
    let reference = json["reference_checksum"].as_f64().unwrap();
    assert!(reference.abs() > 0.0, "{json}");
    for (trial, mode) in trials.iter().zip(["none", "restart"]) {
        assert_eq!(trial["mode"], mode, "{trial}");
        assert_eq!(trial["exit_ok"], true, "{trial}");
        assert_eq!(trial["checksum_matches"], true, "{trial}");
        assert!(trial["time_to_solution_s"].as_f64().unwrap() > 0.0);
    }
    let restart = &trials[1];
    let victim = restart["victim"].as_u64().unwrap();
    assert!((1..3).contains(&victim), "{restart}");
    let launches = if restart["kill_unix_ms"].is_null() {
        1
    } else {
        2
    };
    assert_eq!(restart["launches"].as_u64().unwrap(), launches, "{restart}");
    if launches == 2 {
        // Read from the victim's `@psdm-resumed` line of the second
        // launch: the benchmark asked psdm for its markers.
        assert!(restart["respawn_s"].as_f64().is_some(), "{restart}");
        assert!(restart["resumed_version"].as_u64().is_some(), "{restart}");
    }
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(md.contains("| restart | 1 |"), "{md}");
    assert!(md.contains("Retrieval"), "{md}");
    let svg = std::fs::read_to_string(out_dir.join("recovery.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
}
