//! `taskfold run -n N -- PROGRAM [ARGS]`: starts `N` ranks of `PROGRAM` on
//! this machine and watches them.
//!
//! Each rank gets `TASKFOLD_RANK`, `TASKFOLD_SIZE`, `TASKFOLD_JOB`,
//! `TASKFOLD_RENDEZVOUS` (a file in a fresh per-job directory where rank 0
//! writes the master's address), `TASKFOLD_JOB_KEY` (a fresh 256-bit key
//! of this job, from the system's random source, given to the ranks in
//! their environment alone: every connection of the job proves it, the
//! launcher's reports too) and, unless set already,
//! `TASKFOLD_REPLICA_DIR` (in the same directory, so that the survivors can
//! read a dead rank's disk copies; removed with the job) and
//! `TASKFOLD_CHECKPOINT_DIR` (one per node, there too, so that a
//! replacement finds its dead process's checkpoints), and with
//! `--respawn N`, `TASKFOLD_RESPAWN` and each process's
//! `TASKFOLD_INCARNATION`. Output lines are
//! prefixed with `[rank]`. The ranks' settings are parsed before any rank
//! starts (see `taskfold::Settings`): a bad `TASKFOLD_*` value stops the
//! job with one error naming it. When a rank exits, the launcher tells the master at once (before any
//! timeout could notice), so reductions that need that rank end without
//! waiting. If rank 0 (the master) ends abnormally, the job cannot go on:
//! the launcher says so, gives the other ranks twice the failure timeout
//! (plus 2 s) to end on their own with `MasterLost`, then kills those
//! still running, unless a standby takes over (see the book's Fault
//! tolerance chapter). The launcher exits 0 if every rank did, or if the
//! job survived the ranks it lost to signals: every other rank exited 0
//! ([`Verdict`]).
//!
//! A rank may print `@taskfold-progress DONE TOTAL [LABEL]` lines: the
//! launcher draws them as one progress bar instead of printing them.
//!
//! `taskfold run --nodes N` spreads the ranks over `N` nodes simulated on
//! this machine, each with its own network and `/dev/shm` ([`nodes`]).

mod masters;
pub mod nodes;
mod output;
mod progress;
mod spawn;
mod verdict;

pub use nodes::NodeSpec;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold::{JobKey, MasterAddr, Settings};
use taskfold_core::auth::JobAuth;
use taskfold_core::id::stable_hash;
pub use verdict::Verdict;

/// How to launch.
#[derive(Clone, Debug)]
pub struct Launch {
    /// Ranks to start.
    pub ranks: u32,
    /// The program and its arguments.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Kill every rank after this long (None: no limit).
    pub timeout: Option<Duration>,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    /// Where the ranks' output goes, prefixed with their ranks: this file
    /// (created or truncated) instead of our own stdout and stderr.
    pub log: Option<std::path::PathBuf>,
    /// Replacements this job may start (`--respawn N`; 0: none). A rank
    /// other than the master killed by a signal is started again, with
    /// the same rank and the next incarnation (`TASKFOLD_INCARNATION`), on
    /// the same node, while the first master lives and replacements are
    /// left; every rank gets `TASKFOLD_RESPAWN=N` (see the book's chapter
    /// Surviving failures of the application).
    pub respawn: u32,
}

/// How a rank ended.
#[derive(Clone, Debug)]
pub struct RankExit {
    /// The rank.
    pub rank: u32,
    /// Its exit status.
    pub status: ExitStatus,
    /// It was the master and no standby took over: the job ended with it.
    pub ended_job: bool,
    /// Which process of its rank this was (0: started with the job).
    pub incarnation: u32,
    /// A replacement was started for it.
    pub replaced: bool,
}

impl RankExit {
    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    pub(crate) fn code_and_signal(&self) -> (i32, i32) {
        use std::os::unix::process::ExitStatusExt;
        match (self.status.code(), self.status.signal()) {
            (Some(c), _) => (c, 0),
            (None, Some(s)) => (-1, s),
            (None, None) => (-1, 0),
        }
    }

    /// "exited with code 3", "killed by signal 9".
    pub fn describe(&self) -> String {
        match self.code_and_signal() {
            (c, 0) => format!("exited with code {c}"),
            (_, s) => format!("killed by signal {s}"),
        }
    }
}

/// The settings of the ranks about to start (rank 0's: this environment
/// with the launcher's variables and `launch.env` on top), checked before
/// any rank starts: a bad value stops the job here, named once, instead
/// of in every rank.
fn ranks_settings(launch: &Launch, job: &Job) -> std::io::Result<Settings> {
    let size = launch.ranks.to_string();
    let key = job.key.to_hex();
    let respawn = launch.respawn.to_string();
    let ours = [
        ("TASKFOLD_RANK", OsStr::new("0")),
        ("TASKFOLD_SIZE", OsStr::new(&size)),
        ("TASKFOLD_JOB", OsStr::new(&job.name)),
        ("TASKFOLD_RENDEZVOUS", job.rendezvous.as_os_str()),
        ("TASKFOLD_JOB_KEY", OsStr::new(&key)),
        ("TASKFOLD_RESPAWN", OsStr::new(&respawn)),
        // Removed from the ranks' environment: blank is unset.
        ("TASKFOLD_MASTER", OsStr::new("")),
        ("TASKFOLD_JOB_KEY_FILE", OsStr::new("")),
    ];
    let extra = launch
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), OsStr::new(v.as_str())));
    Settings::from_env_with(ours.into_iter().chain(extra))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

/// Runs a job to its end; returns every rank's exit.
pub fn run(launch: &Launch) -> std::io::Result<Vec<RankExit>> {
    run_on(launch, None)
}

/// As [`run`], with the ranks spread over simulated nodes if `nodes` is
/// given (see [`nodes`]); the nodes are removed when the job ends, also
/// on an error and on SIGINT or SIGTERM, which end the job with an error.
pub fn run_on(launch: &Launch, nodes: Option<&NodeSpec>) -> std::io::Result<Vec<RankExit>> {
    if launch.ranks == 0 {
        return Err(std::io::Error::other("-n must be at least 1"));
    }
    if let Some(spec) = nodes {
        spec.check(launch.ranks)?;
        nodes::preflight(&launch.program)?;
    }
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let key = taskfold_transports::auth::fresh_key().map_err(std::io::Error::other)?;
    // Private (0700, an unguessable name under $TMPDIR, else /tmp): it
    // holds the rendezvous file and the replica files of the job.
    let dir = taskfold_transports::private::fresh_dir("taskfold-job-")?;
    let job = Job {
        rendezvous: dir.join("master.addr"),
        name: format!("run-{nonce}"),
        dir,
        key,
    };
    let result = run_job(launch, nodes, &job);
    let _ = std::fs::remove_dir_all(&job.dir);
    result
}

/// A job's names and directory.
struct Job {
    /// The job's directory, removed when it ends.
    dir: PathBuf,
    /// Where rank 0 writes the master's address.
    rendezvous: PathBuf,
    /// `TASKFOLD_JOB`.
    name: String,
    /// `TASKFOLD_JOB_KEY`: the ranks prove it to each other, the launcher
    /// to the master.
    key: JobKey,
}

/// Starts the ranks of `job` (on its nodes, if any) and watches them.
fn run_job(launch: &Launch, nodes: Option<&NodeSpec>, job: &Job) -> std::io::Result<Vec<RankExit>> {
    let settings = ranks_settings(launch, job)?;
    let cluster = match nodes {
        Some(spec) => Some(nodes::Cluster::create(spec, launch.ranks, &job.dir)?),
        None => None,
    };
    let log = match &launch.log {
        Some(path) => Some(Arc::new(std::sync::Mutex::new(std::fs::File::create(
            path,
        )?))),
        None => None,
    };
    let mut spawner = spawn::Spawner::new(launch, job, &settings, cluster.as_ref(), log);
    let mut children: Vec<(u32, u32, Child)> = Vec::new();
    for rank in 0..launch.ranks {
        match spawner.start(rank, 0) {
            Ok(c) => children.push((rank, 0, c)),
            Err(e) => {
                for (_, _, c) in &mut children {
                    let _ = c.kill();
                }
                return Err(std::io::Error::other(format!(
                    "cannot start {:?}: {e}",
                    launch.program
                )));
            }
        }
    }
    let grace = master_grace(settings.runtime.failure_timeout);
    let chain = masters::Masters::new(launch.ranks, cluster.as_ref(), settings.runtime.standby);
    let exits = watch(children, &mut spawner, (grace, chain));
    let progress = spawner.finish();
    progress.finish();
    match cluster.as_ref().and_then(nodes::Cluster::interrupted) {
        Some(signal) => Err(std::io::Error::other(format!(
            "stopped by {signal}; the nodes are removed"
        ))),
        None => Ok(exits),
    }
}

/// How long the other ranks have to end on their own once the master
/// (rank 0) died: each declares it lost within one failure timeout (and
/// a ping period) and ends its reductions with `MasterLost`; its
/// shutdown then says goodbye to its peers (at most 2 s). Twice the
/// timeout, plus those 2 s, and never more than two minutes.
fn master_grace(failure_timeout: Duration) -> Duration {
    (failure_timeout * 2 + Duration::from_secs(2)).min(Duration::from_secs(120))
}

/// Waits for every child; reports each exit to the master as it happens.
/// If the master ends abnormally and no standby takes over, the ranks
/// still running after the grace are killed: with no master, no
/// reduction can end any more.
fn watch(
    mut children: Vec<(u32, u32, Child)>,
    spawner: &mut spawn::Spawner<'_>,
    (grace, mut masters): (Duration, masters::Masters),
) -> Vec<RankExit> {
    let (launch, job, cluster) = (spawner.launch, spawner.job, spawner.cluster);
    let started = Instant::now();
    let mut exits = Vec::new();
    let killed = AtomicBool::new(false);
    let mut master_died: Option<Instant> = None;
    while !children.is_empty() {
        let mut i = 0;
        while i < children.len() {
            match children[i].2.try_wait() {
                Ok(Some(status)) => {
                    let (rank, incarnation, _) = children.swap_remove(i);
                    let mut exit = RankExit {
                        rank,
                        status,
                        ended_job: false,
                        incarnation,
                        replaced: false,
                    };
                    if !exit.success() {
                        let others = !children.is_empty();
                        if failed(&mut exit, &mut masters, (job, cluster), others, grace) {
                            master_died = Some(Instant::now());
                        }
                        // Not once the master has exited: the job is over
                        // (it finalized), and a replacement would find none.
                        let leads = children
                            .iter_mut()
                            .any(|c| c.0 == masters.current && matches!(c.2.try_wait(), Ok(None)));
                        if others && leads {
                            if let Some(c) = spawner.replace(&mut exit, masters.current) {
                                children.push(c);
                            }
                        }
                    }
                    exits.push(exit);
                }
                Ok(None) => i += 1,
                Err(e) => {
                    eprintln!("taskfold run: cannot watch rank {}: {e}", children[i].0);
                    i += 1;
                }
            }
        }
        if master_died.is_some_and(|t| t.elapsed() > grace) && !children.is_empty() {
            master_died = None;
            eprintln!("taskfold run: killing the ranks still running without a master");
            for (_, _, c) in &mut children {
                let _ = c.kill();
            }
        }
        if let Some(limit) = launch.timeout {
            if started.elapsed() > limit && !killed.swap(true, Ordering::SeqCst) {
                eprintln!("taskfold run: time limit of {limit:?} reached, killing every rank");
                for (_, _, c) in &mut children {
                    let _ = c.kill();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    exits.sort_by_key(|e| (e.rank, e.incarnation));
    exits
}

/// A rank failed (`others`: ranks still run): the master is told, or the
/// standby's takeover said; true if it was the master and the job ends
/// with it (no standby).
fn failed(
    exit: &mut RankExit,
    masters: &mut masters::Masters,
    (job, cluster): (&Job, Option<&nodes::Cluster>),
    others: bool,
    grace: Duration,
) -> bool {
    let rank = exit.rank;
    eprintln!("taskfold run: rank {rank} {}", exit.describe());
    // A clean exit follows finalize, which the master already knows; a
    // failure it must learn now (only rank 0's address is known here).
    if rank != 0 && masters.current == 0 && others {
        report(exit, job, cluster);
    }
    // A master lost with no standby ends the job, even if it was the last
    // to go (the others ended without it).
    let verdict = masters.died(rank);
    exit.ended_job = verdict.is_err();
    match verdict {
        _ if !others => false,
        Ok(None) => false,
        Ok(Some(next)) => {
            eprintln!(
                "taskfold run: the master (rank {rank}) died: {}; \
                 the standby, rank {next}, takes over",
                exit.describe()
            );
            false
        }
        Err(()) => {
            eprintln!(
                "taskfold run: the master (rank {rank}) died: {}; ending the job \
                 (the other ranks are killed if still running in {grace:?})",
                exit.describe()
            );
            true
        }
    }
}

/// Tells the master that a rank exited, so it needs no timeout to notice
/// (from the master's node, the only one where its address exists, when
/// the job runs on simulated nodes).
fn report(exit: &RankExit, job: &Job, cluster: Option<&nodes::Cluster>) {
    let (code, signal) = exit.code_and_signal();
    let master = MasterAddr::Rendezvous(job.rendezvous.clone());
    let auth = JobAuth::Key(job.key.clone());
    let send = || {
        taskfold_transports::tcp::report_rank_exit(
            &master,
            stable_hash(&job.name),
            &auth,
            (exit.rank, exit.incarnation),
            code,
            signal,
            Duration::from_secs(2),
        )
        .map_err(|e| e.to_string())
    };
    let res = match cluster {
        Some(c) => c
            .in_node(c.node_of(0), send)
            .unwrap_or_else(|e| Err(format!("entering the master's node: {e}"))),
        None => send(),
    };
    if let Err(e) = res {
        tracing::debug!(rank = exit.rank, error = %e, "could not report an exit to the master");
    }
}

#[cfg(test)]
mod tests {
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
}
