//! Respawned ranks: how many replacements a job may start, how long a
//! reduction waits for one, and how the application comes back (see the
//! book's chapter Surviving failures of the application).

use super::values::Named;
use std::time::Duration;

/// What a job does when a rank's process dies and the launcher can start a
/// replacement (`taskfold run --respawn N`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RespawnConfig {
    /// Replacements the launcher may start in this job
    /// (`TASKFOLD_RESPAWN`, default 0: none; `taskfold run --respawn N`
    /// sets it). The master expects a replacement for a dead rank only
    /// while this many have not been used, and never for the master's own
    /// rank (a standby takes over from a master instead).
    pub budget: u32,
    /// The last `spares` processes of the job are spares
    /// (`TASKFOLD_SPARES`, default 0; `taskfold run --spares S` sets it):
    /// kept out of the application's view (its size is the job's without
    /// them) until a rank dies, when one takes its place as its next
    /// incarnation. Each counts as one replacement more.
    pub spares: u32,
    /// How long a reduction that still needs a dead rank's contribution
    /// waits for its replacement to join again (`TASKFOLD_RESPAWN_WAIT_MS`,
    /// default 30 s). Past it, the reduction ends with `RanksLost`, as
    /// without respawn.
    pub wait: Duration,
    /// How the application comes back (`TASKFOLD_RESTART=local|global`,
    /// default `local`).
    pub restart: Restart,
}

impl RespawnConfig {
    /// Replacements the job may let in: the launcher's and the spares.
    pub fn replacements(&self) -> u32 {
        self.budget.saturating_add(self.spares)
    }
}

impl Default for RespawnConfig {
    fn default() -> Self {
        RespawnConfig {
            budget: 0,
            spares: 0,
            wait: Duration::from_secs(30),
            restart: Restart::Local,
        }
    }
}

/// The two ways back after a rank was replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Restart {
    /// Only the replacement restores and redoes its lost work; the
    /// survivors keep computing, and the reductions that wait for the dead
    /// rank complete once its replacement contributed again.
    #[default]
    Local,
    /// Every rank unwinds to the application's re-init entry point and
    /// resumes from the newest checkpoint every rank completed (Reinit++).
    Global,
}

impl Named for Restart {
    const NAMES: &'static [(&'static str, Self)] =
        &[("local", Restart::Local), ("global", Restart::Global)];
    const EXPECTED: &'static str = "local or global";
}

/// The largest incarnation number a setting accepts: a rank replaced more
/// often than this is a job that should not go on.
pub const MAX_INCARNATION: u32 = 1 << 20;

/// Most copies of a kept result made at once beyond its holder's: three
/// copies in all, so that three deaths close together (a root and two
/// holders) leave one. Each costs the result's bytes once more, off the
/// reduction's path; deaths closer than the copies are remade, beyond
/// that, may lose a result (`ReduceError::ResultLost`, typed).
pub const MAX_FURTHER_RESULT_COPIES: u32 = 2;

impl super::Config {
    /// Whether a root keeps each result at its buddy until its application
    /// checkpointed past it, so that a replacement root that redoes a
    /// completed reduction gets its result again (see
    /// [`crate::results`]): when replacements may come
    /// ([`RespawnConfig::budget`] or spares above 0). Under global restart
    /// too: a rollback drops every kept result (the next epoch numbers its
    /// reductions afresh), but once a rank finalized a death no longer
    /// rolls the job back, and a replacement root redoes its completed
    /// reductions as under local restart. Off, nothing is kept and
    /// nothing costs.
    ///
    /// The one switch of the feature: every other way a rank can be
    /// replaced (spare ranks) belongs here too.
    pub fn keeps_results(&self) -> bool {
        self.respawn.replacements() > 0
    }

    /// Whether each kept result gets a second copy at once, made by its
    /// holder on the next node's buddy: when a job may replace two ranks
    /// or more, two failures close together may take a root and its
    /// holder before the holder copied it on, and only a copy made
    /// beforehand outlives them. One copy more of each result, off the
    /// reduction's path.
    pub fn second_result_copies(&self) -> bool {
        self.further_result_copies() > 0
    }

    /// How many copies of each kept result are made at once beyond its
    /// holder's, each from the one before on the next rank: one fewer
    /// than the replacements the job allows (so that that many deaths
    /// close together, the root's among them, still leave one), at most
    /// [`MAX_FURTHER_RESULT_COPIES`].
    pub fn further_result_copies(&self) -> u32 {
        match self.keeps_results() {
            true => (self.respawn.replacements() - 1).min(MAX_FURTHER_RESULT_COPIES),
            false => 0,
        }
    }
}
