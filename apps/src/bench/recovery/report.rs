//! What `bench recovery` measured: every trial, the medians per mode, the
//! JSON, the Markdown report and the plot.

use super::trial::Kill;
use super::Mode;
use serde::Serialize;
use std::path::{Path, PathBuf};
use taskfold_benches::plot;
use taskfold_benches::stats::median;

/// Two checksums agree when their relative difference is at most this:
/// psdm's image tolerance (its `image::TOLERANCE`; the book's psdm
/// section says why rank count and arrival order move the image by less).
pub const CHECKSUM_TOLERANCE: f64 = 1e-5;

/// One trial.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Trial {
    /// `none`, `restart`, `global` or `local`.
    pub mode: String,
    /// Its number within the mode.
    pub trial: u32,
    /// The rank killed.
    pub victim: Option<u32>,
    /// The drawn kill instant, seconds after the first launch.
    pub kill_at_s: Option<f64>,
    /// When the SIGKILL went out (Unix ms); `None` if the job had ended.
    pub kill_unix_ms: Option<f64>,
    /// When the first launch started (Unix ms).
    pub first_launch_unix_ms: f64,
    /// From the first launch to the end of the last, seconds.
    pub time_to_solution_s: f64,
    /// Launches (2 for a `restart` trial that was killed).
    pub launches: u32,
    /// Whether the last launch exited 0.
    pub exit_ok: bool,
    /// The checksum the root printed.
    pub checksum: Option<f64>,
    /// Whether it is the failure-free one (within [`CHECKSUM_TOLERANCE`]).
    pub checksum_matches: Option<bool>,
    /// The version the victim's replacement (or the relaunched job)
    /// resumed from.
    pub resumed_version: Option<u64>,
    /// The victim's last checkpoint captured before the kill (Unix ms).
    pub last_checkpoint_unix_ms: Option<f64>,
    /// The victim's work lost: from its last checkpoint to the kill, s.
    pub lost_s: Option<f64>,
    /// From the kill to the replacement's runtime being up, s.
    pub respawn_s: Option<f64>,
    /// The replacement's restore, s.
    pub restore_s: Option<f64>,
    /// `local`: failure-free time + lost + respawn + restore, s.
    pub lower_bound_s: Option<f64>,
    /// `local`: time to solution / lower bound.
    pub ratio_to_bound: Option<f64>,
    /// Why the trial failed, if it did.
    pub error: Option<String>,
    /// The launches' output, kept when the trial failed.
    pub log: Option<PathBuf>,
}

impl Trial {
    /// A trial of `mode` not run yet.
    pub fn new(mode: Mode, trial: u32, kill: Option<Kill>) -> Trial {
        Trial {
            mode: mode.name().into(),
            trial,
            victim: kill.map(|k| k.victim),
            kill_at_s: kill.map(|k| k.at),
            ..Trial::default()
        }
    }

    /// One line about it.
    pub fn short(&self) -> String {
        format!(
            "{:.2} s, exit {}, checksum {}{}",
            self.time_to_solution_s,
            if self.exit_ok { "ok" } else { "failed" },
            self.checksum.map_or("none".into(), |c| format!("{c:.6e}")),
            self.error
                .as_ref()
                .map_or(String::new(), |e| format!(" ({e})"))
        )
    }

    /// Reads the launches' output: the checksum (last launch), the
    /// victim's checkpoints and its replacement's restore.
    pub fn read_logs(&mut self, logs: &[PathBuf]) {
        let texts: Vec<String> = logs
            .iter()
            .map(|l| std::fs::read_to_string(l).unwrap_or_default())
            .collect();
        let last = texts.last().map(String::as_str).unwrap_or("");
        self.checksum = last
            .lines()
            .filter_map(|l| l.split("psdm: checksum ").nth(1))
            .filter_map(|r| r.split_whitespace().next()?.parse().ok())
            .next_back();
        if !self.exit_ok && self.error.is_none() {
            let tail: Vec<&str> = last.lines().rev().take(3).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let hint = if last.contains("\"--respawn\"") || last.contains("'--respawn'") {
                "this taskfold run cannot respawn a rank (no --respawn), which global and \
                 local restart need: "
            } else {
                ""
            };
            self.error = Some(format!("the job failed: {hint}{}", tail.join(" | ")));
        }
        let (Some(victim), Some(kill)) = (self.victim, self.kill_unix_ms) else {
            return;
        };
        let first = texts.first().map(String::as_str).unwrap_or("");
        self.last_checkpoint_unix_ms = first
            .lines()
            .filter_map(|l| tagged(l, "@psdm-checkpoint"))
            .filter(|f| field(f, "rank") == Some(victim as f64))
            .filter_map(|f| field(&f, "unix_ms"))
            .filter(|&t| t <= kill)
            .reduce(f64::max);
        let resumed = texts
            .iter()
            .flat_map(|t| t.lines())
            .filter_map(|l| tagged(l, "@psdm-resumed"))
            .filter(|f| field(f, "rank") == Some(victim as f64))
            .rfind(|f| field(f, "up_unix_ms").is_some_and(|u| u >= kill));
        if let Some(f) = resumed {
            self.resumed_version = field(&f, "version").map(|v| v as u64);
            self.respawn_s = field(&f, "up_unix_ms").map(|u| (u - kill) / 1e3);
            self.restore_s = field(&f, "restore_ms").map(|r| r / 1e3);
        }
        let since = self
            .last_checkpoint_unix_ms
            .unwrap_or(self.first_launch_unix_ms);
        self.lost_s = Some(((kill - since) / 1e3).max(0.0));
    }

    /// Keeps the launches' output under `out/kept/` and says where.
    pub fn keep_log(&mut self, logs: &[PathBuf], out: &Path) {
        let kept = out.join("kept");
        let _ = std::fs::create_dir_all(&kept);
        let to = kept.join(format!("{}-{}.log", self.mode, self.trial));
        let text: String = logs
            .iter()
            .map(|l| std::fs::read_to_string(l).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n--- next launch ---\n");
        if std::fs::write(&to, text).is_ok() {
            self.log = Some(to);
        }
    }

    /// `local`: its lower bound and its ratio to it, given the
    /// failure-free time.
    fn bound(&mut self, failure_free: f64) {
        if self.mode != "local" {
            return;
        }
        let (Some(lost), Some(respawn), Some(restore)) =
            (self.lost_s, self.respawn_s, self.restore_s)
        else {
            return;
        };
        let bound = failure_free + lost + respawn + restore;
        self.lower_bound_s = Some(bound);
        self.ratio_to_bound = Some(self.time_to_solution_s / bound);
    }
}

/// The `key=value` fields of a line holding `tag` (after the launcher's
/// `[rank] ` prefix), or `None`.
fn tagged(line: &str, tag: &str) -> Option<Vec<(String, String)>> {
    let rest = line.split_once(tag)?.1;
    Some(
        rest.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// A numeric field of a tagged line.
fn field(fields: &[(String, String)], key: &str) -> Option<f64> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.parse().ok())
}

/// Checkpoint retrieval, naive against topology-aware: filled by
/// [`retrieval`] once `taskfold bench checkpoint` exposes its
/// measurement as a function; until then the report says it was not
/// measured.
#[derive(Clone, Debug, Serialize)]
pub struct Retrieval {
    /// Seconds to restore by probing the levels in turn.
    pub naive_s: f64,
    /// Seconds to restore from the cheapest surviving level at once.
    pub topology_aware_s: f64,
}

/// The retrieval figures (see [`Retrieval`]), measured by `taskfold bench
/// checkpoint`'s retrieval in this run: 8 ranks on 4 nodes, L3 groups of
/// 4 with 2 parity pieces, 4 MiB states, a failure that destroyed a
/// rank's node and its partner's (L1 and L2), a 1 s detection timeout.
/// `None` if it could not run (said on stderr).
pub fn retrieval() -> Option<Retrieval> {
    let params = crate::bench::checkpoint::RetrievalParams {
        np: 8,
        per_node: 2,
        k: 4,
        m: 2,
        state_bytes: 4 << 20,
        timeout: std::time::Duration::from_secs(1),
        reps: 5,
    };
    match crate::bench::checkpoint::retrieval(&params) {
        Ok(f) => Some(Retrieval {
            naive_s: f.probing_median_s,
            topology_aware_s: f.aware_median_s,
        }),
        Err(e) => {
            eprintln!("bench recovery: retrieval not measured: {e}");
            None
        }
    }
}

/// One mode's medians.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ModeSummary {
    /// The mode.
    pub mode: String,
    /// Trials, those killed, those that exited 0 with the reference
    /// checksum.
    pub trials: u32,
    /// Trials whose kill went out before the job ended.
    pub killed: u32,
    /// Trials that ended exactly: exit 0, the failure-free checksum.
    pub exact: u32,
    /// Median time to solution of the exact trials, s.
    pub median_s: Option<f64>,
    /// That median over the failure-free one.
    pub ratio_to_none: Option<f64>,
    /// `local`: median lower bound and median ratio to it.
    pub median_bound_s: Option<f64>,
    /// `local`: median of the trials' ratios to their bounds.
    pub median_ratio_to_bound: Option<f64>,
    /// The distinct errors of the failed trials.
    pub errors: Vec<String>,
}

/// The whole experiment.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Ranks.
    pub np: u32,
    /// psdm's options.
    pub psdm_args: Vec<String>,
    /// Median time to solution of the `none` trials, s: the kill window.
    pub failure_free_s: f64,
    /// The `none` trials' checksum.
    pub reference_checksum: f64,
    /// Per mode.
    pub modes: Vec<ModeSummary>,
    /// Checkpoint retrieval figures, if measured ([`retrieval`]).
    pub retrieval: Option<Retrieval>,
    /// Every trial.
    pub trials: Vec<Trial>,
}

mod write;
