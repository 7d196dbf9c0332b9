//! Starting a rank's process, and its replacements (`--respawn`).

use super::nodes::Cluster;
use super::output::{self, Log};
use super::progress::Progress;
use super::{Job, Launch, RankExit};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use taskfold::Settings;

/// Starts ranks' processes with the launcher's variables, and their
/// output pumps.
pub(super) struct Spawner<'a> {
    pub(super) launch: &'a Launch,
    pub(super) job: &'a Job,
    settings: &'a Settings,
    pub(super) cluster: Option<&'a Cluster>,
    log: Option<Log>,
    progress: Arc<Progress>,
    pumps: Vec<JoinHandle<()>>,
    /// Replacements left.
    left: u32,
}

impl<'a> Spawner<'a> {
    pub(super) fn new(
        launch: &'a Launch,
        job: &'a Job,
        settings: &'a Settings,
        cluster: Option<&'a Cluster>,
        log: Option<Log>,
    ) -> Self {
        Spawner {
            launch,
            job,
            settings,
            cluster,
            log,
            progress: Arc::new(Progress::new()),
            pumps: Vec::new(),
            left: launch.respawn,
        }
    }

    /// Starts incarnation `incarnation` of `rank`.
    pub(super) fn start(&mut self, rank: u32, incarnation: u32) -> std::io::Result<Child> {
        let mut child = self.command(rank, incarnation)?.spawn()?;
        let (p, log) = (self.progress.clone(), self.log.clone());
        self.pumps.extend(output::pump(rank, &mut child, p, log));
        Ok(child)
    }

    /// Starts a replacement for the process that ended with `exit`, if it
    /// was killed by a signal, is not the master (`master`, the current
    /// one, whose process the caller saw running), the first master still
    /// leads (replacements register with it) and replacements are left.
    /// Returns its rank, incarnation and process, and what the dead
    /// rank's line says of it.
    pub(super) fn replace(
        &mut self,
        exit: &mut RankExit,
        master: u32,
    ) -> Option<((u32, u32, Child), String)> {
        let killed = exit.code_and_signal().1 != 0;
        if !killed || self.left == 0 || exit.rank == master || master != 0 {
            return None;
        }
        let (rank, incarnation) = (exit.rank, exit.incarnation + 1);
        match self.start(rank, incarnation) {
            Ok(child) => {
                self.left -= 1;
                exit.replaced = true;
                let note = format!(
                    "started again (incarnation {incarnation}, {} left)",
                    match self.left {
                        1 => "1 replacement".to_string(),
                        n => format!("{n} replacements"),
                    }
                );
                Some(((rank, incarnation, child), note))
            }
            Err(e) => {
                eprintln!("taskfold run: cannot start a replacement of rank {rank}: {e}");
                None
            }
        }
    }

    /// Waits for the output pumps; the progress bar, to finish.
    pub(super) fn finish(self) -> Arc<Progress> {
        for p in self.pumps {
            let _ = p.join();
        }
        self.progress
    }

    /// The command that starts incarnation `incarnation` of `rank`.
    fn command(&self, rank: u32, incarnation: u32) -> std::io::Result<Command> {
        let mut cmd = rank_command(self.launch, rank, self.job, self.settings, self.cluster)?;
        cmd.env("TASKFOLD_INCARNATION", incarnation.to_string());
        if self.launch.respawn > 0 {
            cmd.env("TASKFOLD_RESPAWN", self.launch.respawn.to_string());
        }
        Ok(cmd)
    }
}

/// The command that starts `rank`, with the launcher's variables.
fn rank_command(
    launch: &Launch,
    rank: u32,
    job: &Job,
    settings: &Settings,
    cluster: Option<&Cluster>,
) -> std::io::Result<Command> {
    let mut cmd = match cluster {
        Some(c) => c.command(rank, &launch.program)?,
        None => Command::new(&launch.program),
    };
    cmd.args(&launch.args)
        .env("TASKFOLD_RANK", rank.to_string())
        .env("TASKFOLD_SIZE", launch.ranks.to_string())
        .env("TASKFOLD_JOB", &job.name)
        .env("TASKFOLD_RENDEZVOUS", &job.rendezvous)
        .env("TASKFOLD_JOB_KEY", job.key.to_hex())
        .env(taskfold_core::settings::RUN_CHECKED_VAR, "1")
        .env_remove("TASKFOLD_JOB_KEY_FILE")
        .env_remove("TASKFOLD_MASTER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if settings.runtime.replica_dir.is_none() {
        // One directory per node: a rank that dies leaves its disk
        // copies where the survivors of its node can read them, so that
        // the master can recover from a copy its owner never announced
        // (see the book's Fault tolerance chapter).
        let replicas = match cluster {
            Some(c) => c.replica_dir(c.node_of(rank)),
            None => job.dir.join("replicas"),
        };
        cmd.env("TASKFOLD_REPLICA_DIR", replicas);
    }
    if settings.runtime.checkpoint.dir.is_none() {
        // One directory per node, kept for the job: a replacement started
        // on its rank's node finds the checkpoints of its dead process
        // there (L1; see the book's chapter Surviving failures of the
        // application).
        let local = match cluster {
            Some(c) => c.replica_dir(c.node_of(rank)).with_file_name("checkpoints"),
            None => job.dir.join("checkpoints"),
        };
        cmd.env("TASKFOLD_CHECKPOINT_DIR", local);
    }
    for (k, v) in &launch.env {
        cmd.env(k, v);
    }
    Ok(cmd)
}
