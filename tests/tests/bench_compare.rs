//! A small `taskfold bench compare` end to end: taskfold and every MPI
//! installed (CI installs Open MPI and MPICH, and then both must run), every
//! scenario, and a report with its tables and plots.

use std::process::Command;
use std::time::Duration;
use taskfold_tests::{run_bounded, taskfold_bin, text};

#[test]
fn small_comparison_writes_json_report_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cmp");
    let mut cmd = Command::new(taskfold_bin());
    cmd.args([
        "bench",
        "compare",
        "--np",
        "2,3",
        "--np-interference",
        "3",
        "--size",
        "64K,1M",
        "--k",
        "2,3",
        "--concurrent-size",
        "256K",
        "--reps",
        "2",
        "--warmup",
        "1",
        "--reps-concurrent",
        "2",
        "--timeout",
        "120s",
        "--completion",
        "result,contributed",
        "--out",
    ])
    .arg(&out);
    let res = run_bounded(cmd, Duration::from_secs(600));
    assert!(res.status.success(), "{}", text(&res));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    let records = json["records"].as_array().unwrap();
    let sides: std::collections::BTreeSet<&str> = records
        .iter()
        .map(|r| r["side"].as_str().unwrap())
        .collect();
    assert!(sides.contains("taskfold"), "{sides:?}");
    assert!(sides.contains("taskfold (durability off)"), "{sides:?}");
    assert!(
        sides.contains("taskfold (completion contributed)"),
        "{sides:?}"
    );
    assert!(
        sides.contains("taskfold (durability off, completion contributed)"),
        "{sides:?}"
    );
    if std::env::var_os("CI").is_some() {
        assert!(
            sides.contains("openmpi") && sides.contains("mpich"),
            "CI installs both MPIs: {sides:?}, missing {}",
            json["missing"]
        );
    }
    for scenario in [
        "quiet",
        "slow-half",
        "slow-20ms",
        "stagger",
        "load",
        "concurrent",
    ] {
        for side in &sides {
            let n = records
                .iter()
                .filter(|r| r["scenario"] == scenario && r["side"] == *side)
                .count();
            let want = match scenario {
                "quiet" => 4, // p = 2 and 3, two sizes
                "concurrent" => 2,
                _ => 2,
            };
            assert_eq!(n, want, "{side} {scenario}");
        }
    }
    for r in records {
        let times = r["times_s"].as_array().unwrap();
        assert_eq!(times.len(), 2, "{r}");
        assert!(times.iter().all(|t| t.as_f64().unwrap() > 0.0), "{r}");
        assert!(r["median_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    // Every size, and each K of scenario e, runs in a job of its own.
    let commands: Vec<&str> = json["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c[0].as_str().unwrap())
        .collect();
    for k in [2, 3] {
        let label = format!("taskfold, concurrent p=3-s262144-k{k}");
        assert!(commands.contains(&label.as_str()), "{commands:?}");
    }
    for side in sides.iter().filter(|s| s.starts_with("taskfold")) {
        for size in [65536, 1048576] {
            let label = format!("{side}, quiet p=2-s{size}");
            assert!(commands.contains(&label.as_str()), "{commands:?}");
        }
    }
    // Each completion side ran with its setting.
    assert!(json["commands"].as_array().unwrap().iter().any(|c| {
        c[0].as_str()
            .unwrap()
            .starts_with("taskfold (completion contributed), ")
            && c[1]
                .as_str()
                .unwrap()
                .contains("TASKFOLD_COMPLETION=contributed")
    }));
    // The slow rank's delay is applied: D = 20 ms shows in every side.
    for r in records.iter().filter(|r| r["scenario"] == "slow-20ms") {
        assert!(r["median_s"].as_f64().unwrap() >= 0.019, "{r}");
    }
    // The master's load is recorded for taskfold's quiet runs.
    assert!(records
        .iter()
        .any(|r| r["side"] == "taskfold" && r["master"]["msgs_in"].as_u64().unwrap_or(0) > 0));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for section in [
        "## Targets",
        "## a. Quiet",
        "## c. Staggered",
        "## e. Concurrent",
        "## f. Master load",
        "## Command lines",
    ] {
        assert!(md.contains(section), "{section} missing:\n{md}");
    }
    let plots = json["plots"].as_array().unwrap();
    assert!(!plots.is_empty());
    for p in plots {
        let svg = std::fs::read_to_string(out.join(p.as_str().unwrap())).unwrap();
        assert!(svg.starts_with("<svg"), "{p}");
    }
}

/// `--collective allreduce` and `broadcast`: both sides measure that
/// collective (the MPI side `MPI_Allreduce`/`MPI_Iallreduce`,
/// `MPI_Bcast`/`MPI_Ibcast`), every result verified on every rank, and the
/// report says what it compares with.
#[test]
fn small_allreduce_and_broadcast_comparisons() {
    for (collective, against) in [("allreduce", "MPI_Allreduce"), ("broadcast", "MPI_Bcast")] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("cmp");
        let mut cmd = Command::new(taskfold_bin());
        cmd.args([
            "bench",
            "compare",
            "--collective",
            collective,
            "--np",
            "3",
            "--np-interference",
            "3",
            "--size",
            "256K",
            "--k",
            "2",
            "--concurrent-size",
            "64K",
            "--scenarios",
            "quiet,slow,concurrent",
            "--durability",
            "async",
            "--reps",
            "2",
            "--warmup",
            "1",
            "--reps-concurrent",
            "2",
            "--timeout",
            "120s",
            "--out",
        ])
        .arg(&out);
        let res = run_bounded(cmd, Duration::from_secs(600));
        assert!(res.status.success(), "{}", text(&res));
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
        assert_eq!(json["against"], against);
        let records = json["records"].as_array().unwrap();
        for scenario in ["quiet", "slow-half", "slow-20ms", "concurrent"] {
            let n = records
                .iter()
                .filter(|r| r["scenario"] == scenario && r["side"] == "taskfold")
                .count();
            assert_eq!(n, 1, "{collective} {scenario}");
        }
        if std::env::var_os("CI").is_some() {
            for side in ["openmpi", "mpich"] {
                assert!(
                    records.iter().any(|r| r["side"] == side),
                    "{collective}: {side}"
                );
            }
        }
        let commands = json["commands"].to_string();
        assert!(
            commands.contains(&format!("--collective {collective}")),
            "{commands}"
        );
        // The slow rank's yardstick: the same collective of taskfold
        // alone at p = 2.
        let alone = json["spread_alone"].as_array().unwrap();
        assert_eq!(alone.len(), 1, "{collective}");
        assert!(alone[0][1].as_f64().unwrap() > 0.0, "{collective}");
        assert!(commands.contains("taskfold, alone p=2"), "{commands}");
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(
            md.starts_with(&format!("# taskfold against {against}")),
            "{md}"
        );
        assert!(md.contains("× the lower bound"), "{md}");
        assert!(md.contains("background load, p = 8"), "{md}");
    }
}
