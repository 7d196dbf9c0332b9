//! The launcher run on `sh` jobs: output, keys, settings, a dead master.

use super::*;

#[test]
fn ranks_output_goes_to_the_log_prefixed_with_their_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ranks.log");
    let launch = Launch {
        ranks: 2,
        program: "sh".into(),
        args: vec![
            "-c".into(),
            "echo out-$TASKFOLD_RANK; echo err-$TASKFOLD_RANK >&2".into(),
        ],
        timeout: Some(Duration::from_secs(60)),
        env: Vec::new(),
        log: Some(log.clone()),
        respawn: 0,
    };
    let exits = run(&launch).unwrap();
    assert!(exits.iter().all(|e| e.success()));
    let text = std::fs::read_to_string(&log).unwrap();
    for line in ["[0] out-0", "[0] err-0", "[1] out-1", "[1] err-1"] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
}

#[test]
fn every_job_gives_its_ranks_a_fresh_key_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<Vec<String>> = (0..2)
        .map(|j| {
            let log = dir.path().join(format!("ranks-{j}.log"));
            let launch = Launch {
                ranks: 2,
                program: "sh".into(),
                args: vec![
                    "-c".into(),
                    "echo key=$TASKFOLD_JOB_KEY file=$TASKFOLD_JOB_KEY_FILE".into(),
                ],
                timeout: Some(Duration::from_secs(60)),
                env: Vec::new(),
                log: Some(log.clone()),
                respawn: 0,
            };
            assert!(run(&launch).unwrap().iter().all(RankExit::success));
            let text = std::fs::read_to_string(&log).unwrap();
            text.lines()
                .map(|l| {
                    let key = l.split("key=").nth(1).and_then(|k| k.split(' ').next());
                    assert!(l.ends_with("file="), "{l}");
                    key.expect("a key").to_string()
                })
                .collect()
        })
        .collect();
    for ks in &keys {
        assert_eq!(ks.len(), 2);
        assert_eq!(ks[0], ks[1], "one key per job");
        assert!(JobKey::from_hex(&ks[0]).is_some(), "{ks:?}");
    }
    assert_ne!(keys[0][0], keys[1][0], "a fresh key per job");
}

#[test]
fn a_bad_setting_stops_the_job_before_any_rank_starts() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let launch = Launch {
        ranks: 2,
        program: "sh".into(),
        args: vec!["-c".into(), format!("touch {}", marker.display()).into()],
        timeout: Some(Duration::from_secs(60)),
        env: vec![("TASKFOLD_DURABILITY".into(), "sometimes".into())],
        log: None,
        respawn: 0,
    };
    let e = run(&launch).expect_err("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(
        e.to_string()
            .starts_with("TASKFOLD_DURABILITY=\"sometimes\""),
        "{e}"
    );
    assert!(!marker.exists(), "a rank started");
}

#[test]
fn a_dead_master_ends_the_job_after_the_grace() {
    let launch = Launch {
        ranks: 3,
        program: "sh".into(),
        // Rank 0 dies at once; the others would run for ten minutes.
        args: vec![
            "-c".into(),
            "if [ $TASKFOLD_RANK = 0 ]; then kill -9 $$; fi; exec sleep 600".into(),
        ],
        timeout: Some(Duration::from_secs(300)),
        env: vec![("TASKFOLD_FAILURE_TIMEOUT_MS".into(), "100".into())],
        log: None,
        respawn: 0,
    };
    let t = Instant::now();
    let exits = run(&launch).unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "ended after {:?}",
        t.elapsed()
    );
    assert_eq!(exits.len(), 3);
    assert!(exits.iter().all(|e| !e.success()), "{exits:?}");
    assert_eq!(
        master_grace(Duration::from_millis(100)),
        Duration::from_millis(2200)
    );
    assert_eq!(
        master_grace(Duration::from_secs(600)),
        Duration::from_secs(120)
    );
}

#[test]
fn the_ranks_settings_are_this_environment_and_the_launchers() {
    let launch = Launch {
        ranks: 3,
        program: "true".into(),
        args: Vec::new(),
        timeout: None,
        env: vec![("TASKFOLD_REPLICA_DIR".into(), "/tmp/r".into())],
        log: None,
        respawn: 0,
    };
    let job = Job {
        dir: "/tmp".into(),
        rendezvous: "/tmp/m.addr".into(),
        name: "job".into(),
        key: taskfold_transports::auth::fresh_key().unwrap(),
    };
    let s = ranks_settings(&launch, &job).unwrap();
    let id = s.launch.identity.expect("an identity");
    assert_eq!((id.rank, id.size, id.launcher), (0, 3, "taskfold"));
    assert_eq!(s.launch.master, None);
    assert_eq!(s.launch.job.as_deref(), Some("job"));
    assert_eq!(
        s.launch.key,
        Some(taskfold_core::settings::KeySource::Value(job.key.clone()))
    );
    assert_eq!(
        s.runtime.replica_dir.as_deref(),
        Some(std::path::Path::new("/tmp/r"))
    );
}
