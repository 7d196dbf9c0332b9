//! `taskfold bench sim` as a user runs it, through the built binary: the
//! JSON has every pattern's figures; flat, the master handles `4p - 2`
//! messages and by node `4·nodes - 2`; gathered by node, the master's
//! small reductions take fewer, its large ones as many as flat; a slow
//! rank costs ready-first less than the binomial tree; a bad setting is
//! refused, named.

use std::process::Command;
use std::time::Duration;
use taskfold_tests::{run_bounded, taskfold_bin, text};

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn bench_sim_reports_every_pattern_and_the_masters_messages() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("sim.json");
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["bench", "sim", "--ranks", "1000", "--per-node", "16"])
        .args(["--size", "8,8M", "--json"])
        .arg(&json);
    let out = run_bounded(cmd, LIMIT);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("Targets at 1000 ranks"),
        "{}",
        text(&out)
    );
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2 * 4, "two sizes, four patterns");
    for row in rows {
        let (flat, by_node) = (&row["flat"], &row["by_node"]);
        assert_eq!(flat["master_messages"], 4 * 1000 - 2, "{row}");
        assert_eq!(by_node["master_messages"], 4 * 63 - 2, "{row}");
        assert_eq!(by_node["node_messages"], 4 * 16 - 2, "{row}");
        assert!(flat["decisions"].as_u64().unwrap() == 1000, "{row}");
        assert!(by_node["scheduling_seconds"].as_f64().unwrap() > 0.0);
        let gathered = row["gathered"]["master_messages"].as_u64().unwrap();
        if row["bytes"] == 8 {
            // Joins and completions, 2p, and at most 4 tasks per node.
            assert!(gathered <= 2 * 1000 + 2 * 4 * 63, "{row}");
        } else {
            assert_eq!(gathered, 4 * 1000 - 2, "above the bound: {row}");
        }
        let binomial = row["binomial"].as_f64().unwrap();
        if row["pattern"] == "slow" && row["bytes"] == 8 << 20 {
            let ready = by_node["makespan"].as_f64().unwrap();
            assert!(ready < 0.8 * binomial, "{row}");
        }
        if row["pattern"] == "quiet" {
            assert!(row["best_tree"].as_f64().unwrap() <= binomial, "{row}");
        }
    }
}

#[test]
fn bench_sim_refuses_a_bad_setting_by_name() {
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["bench", "sim", "--ranks", "64", "--fold-gbs", "0"]);
    let out = run_bounded(cmd, LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--fold-gbs"), "{}", text(&out));
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["bench", "sim", "--patterns", "calm"]);
    let out = run_bounded(cmd, LIMIT);
    assert!(!out.status.success());
    assert!(text(&out).contains("unknown pattern"), "{}", text(&out));
}
