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
//! starts (see `taskfold::Settings`): a bad `TASKFOLD_*` value (or key of
//! the settings file) stops the job with one error naming it, and a
//! variable that is no setting is warned about once for the job (the
//! ranks, given `TASKFOLD_RUN_CHECKED`, do not repeat it). Each rank that
//! does not exit 0 is said in one line as it ends, and the job in one
//! verdict ([`cli`] maps it to the exit code: 0, 1, 2, or 124 for
//! `--timeout`). When a rank exits, the launcher tells the master at once (before any
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
//! `taskfold run --sim-nodes N` spreads the ranks over `N` nodes simulated on
//! this machine, each with its own network and `/dev/shm` ([`nodes`]).

pub mod cli;
pub mod guard;
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
    /// The launcher stopped it (SIGKILL), and why.
    pub stopped: Option<Stopped>,
}

/// Why the launcher stopped the ranks still running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// `--timeout` came.
    TimeLimit,
    /// The master died, no standby took over, and the grace to end on
    /// their own passed.
    NoMaster,
}

/// Ranks as a list: `3`, `1 and 3`, `1, 2 and 3`.
pub fn ranks_list(ranks: &[u32]) -> String {
    match ranks {
        [] => "none".to_string(),
        [one] => one.to_string(),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(u32::to_string).collect();
            format!("{} and {last}", init.join(", "))
        }
    }
}

/// A signal's name, for the common ones.
fn signal_name(s: i32) -> Option<&'static str> {
    Some(match s {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return None,
    })
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

    /// "exited with code 3", "killed by signal 9 (SIGKILL)".
    pub fn describe(&self) -> String {
        match self.code_and_signal() {
            (c, 0) => format!("exited with code {c}"),
            (_, s) => match signal_name(s) {
                Some(name) => format!("killed by signal {s} ({name})"),
                None => format!("killed by signal {s}"),
            },
        }
    }

    /// As [`RankExit::describe`], saying "died" for a signal alone: "exited
    /// with code 3", "died (killed by signal 9, SIGKILL)".
    pub fn how(&self) -> String {
        match self.code_and_signal() {
            (c, 0) => format!("exited with code {c}"),
            (_, s) => match signal_name(s) {
                Some(name) => format!("died (killed by signal {s}, {name})"),
                None => format!("died (killed by signal {s})"),
            },
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
        // The ranks check their test hooks themselves: a test build of
        // the program has them, this launcher need not.
        (taskfold_core::settings::TEST_HOOK_VAR, OsStr::new("")),
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

/// Warns, once for the job, about each `TASKFOLD_*` variable of the
/// ranks that no setting reads, with the closest name if one is near (the
/// ranks, told by `TASKFOLD_RUN_CHECKED`, do not warn again).
fn warn_unknown(settings: &Settings) {
    for name in &settings.unknown {
        let hint = match taskfold_core::settings::sources::closest(name) {
            Some(close) => format!(" (did you mean {close}?)"),
            None => String::new(),
        };
        eprintln!("taskfold run: warning: {name} is set but is no taskfold setting{hint}; ignored");
    }
}

/// Starts the ranks of `job` (on its nodes, if any) and watches them.
fn run_job(launch: &Launch, nodes: Option<&NodeSpec>, job: &Job) -> std::io::Result<Vec<RankExit>> {
    let settings = ranks_settings(launch, job)?;
    warn_unknown(&settings);
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

/// Waits for every child; reports each exit to the master as it happens,
/// and says it in one line (a rank that exited 0 is not said: the
/// verdict counts it). If the master ends abnormally and no standby takes
/// over, the ranks still running after the grace are stopped: with no
/// master, no reduction can end any more.
fn watch(
    mut children: Vec<(u32, u32, Child)>,
    spawner: &mut spawn::Spawner<'_>,
    (grace, mut masters): (Duration, masters::Masters),
) -> Vec<RankExit> {
    let (launch, job, cluster) = (spawner.launch, spawner.job, spawner.cluster);
    let started = Instant::now();
    let mut exits = Vec::new();
    let mut stopped: Option<Stopped> = None;
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
                        stopped: None,
                    };
                    if !exit.success() {
                        exit.stopped = stopped;
                        let others = !children.is_empty();
                        let (ends, mut notes) =
                            failed(&mut exit, &mut masters, (job, cluster), others, grace);
                        if ends {
                            master_died = Some(Instant::now());
                        }
                        let leads = masters::leads(&mut children, masters.current);
                        if others && leads && stopped.is_none() {
                            if let Some((c, note)) = spawner.replace(&mut exit, masters.current) {
                                masters.revived(c.0);
                                children.push(c);
                                notes.push(note);
                            }
                        }
                        // A rank the launcher stopped was said then.
                        if exit.stopped.is_none() {
                            let notes: String = notes.iter().map(|n| format!("; {n}")).collect();
                            eprintln!("taskfold run: rank {rank} {}{notes}", exit.describe());
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
        let why = match (master_died, launch.timeout) {
            _ if children.is_empty() || stopped.is_some() => None,
            (_, Some(limit)) if started.elapsed() > limit => Some(Stopped::TimeLimit),
            (Some(t), _) if t.elapsed() > grace => Some(Stopped::NoMaster),
            _ => None,
        };
        if let Some(why) = why {
            stop(&mut children, why, launch.timeout);
            stopped = Some(why);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    exits.sort_by_key(|e| (e.rank, e.incarnation));
    exits
}

/// Stops (SIGKILL) every rank still running, for `why`, in one line.
fn stop(children: &mut [(u32, u32, Child)], why: Stopped, limit: Option<Duration>) {
    let mut ranks: Vec<u32> = children.iter().map(|c| c.0).collect();
    ranks.sort_unstable();
    let whom = format!(
        "stopping rank{} {}",
        if ranks.len() == 1 { "" } else { "s" },
        ranks_list(&ranks)
    );
    match why {
        Stopped::TimeLimit => {
            let limit = limit.map(taskfold_core::settings::values::format_duration);
            eprintln!(
                "taskfold run: the time limit of {} was reached: {whom}",
                limit.unwrap_or_default()
            );
        }
        Stopped::NoMaster => eprintln!("taskfold run: no master left: {whom}"),
    }
    for (_, _, c) in children {
        let _ = c.kill();
    }
}

/// A rank failed (`others`: ranks still run): the master is told, or the
/// standby's takeover noted. Returns whether it was the master and the job
/// ends with it (no standby), and what its line adds.
fn failed(
    exit: &mut RankExit,
    masters: &mut masters::Masters,
    (job, cluster): (&Job, Option<&nodes::Cluster>),
    others: bool,
    grace: Duration,
) -> (bool, Vec<String>) {
    let rank = exit.rank;
    // A clean exit follows finalize, which the master already knows; a
    // failure it must learn now (the rendezvous file names whichever rank
    // runs the master).
    if rank != masters.current && others {
        report(exit, job, (cluster, masters.current));
    }
    // A master lost with no standby ends the job, even if it was the last
    // to go (the others ended without it).
    let verdict = masters.died(rank);
    exit.ended_job = verdict.is_err();
    let lost = if exit.code_and_signal().1 == 0 {
        "ended"
    } else {
        "died"
    };
    match verdict {
        _ if !others => (false, Vec::new()),
        Ok(None) => (false, Vec::new()),
        Ok(Some(next)) => (
            false,
            vec![format!(
                "the master {lost}: the standby, rank {next}, takes over"
            )],
        ),
        Err(()) => (
            true,
            vec![format!(
                "the master {lost} and no standby takes over: ending the job (ranks \
                 still running in {} are stopped)",
                taskfold_core::settings::values::format_duration(grace)
            )],
        ),
    }
}

/// Tells the master, rank `master`, that a rank exited, so it needs no
/// timeout to notice (from the master's node, the only one where its
/// address exists, when the job runs on simulated nodes).
fn report(exit: &RankExit, job: &Job, (cluster, current): (Option<&nodes::Cluster>, u32)) {
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
            .in_node(c.node_of(current), send)
            .unwrap_or_else(|e| Err(format!("entering the master's node: {e}"))),
        None => send(),
    };
    if let Err(e) = res {
        tracing::debug!(rank = exit.rank, error = %e, "could not report an exit to the master");
    }
}

#[cfg(test)]
mod tests;
