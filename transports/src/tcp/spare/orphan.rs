//! A spare that finds the job's start orphaned takes rank 0.
//!
//! Rank 0 hosts the bootstrap. Should it die before the job runs, no
//! standby exists yet (a standby is chosen from the table the bootstrap
//! hands out), and under a launcher that does not start processes again
//! (`mpiexec`, `srun`) nothing replaces it: every rank would wait out its
//! connect timeout. A spare is such a process. While it looks for a master
//! and has never seen the job's table, it watches the rendezvous file:
//! when the file still names rank 0 and nobody has answered there for a
//! grace period (the window in which a standby of a running job would
//! have rewritten it), it claims rank 0's next incarnation and starts as
//! that rank, which hosts the bootstrap again (see `bootstrap::orphaned`).
//! The ranks' registrations retry until their connect timeout and find
//! the new master through the rewritten file.
//!
//! One claimant per incarnation: claim `k` is a file created exclusively
//! beside the rendezvous file (`<file>.rank0-<k>`), and claim `k + 1` is
//! tried only once the rendezvous file is newer than claim `k` — its
//! claimant hosted, wrote the file, and is silent now.

use super::super::rendezvous::{self, Unresolved};
use super::super::MasterAddr;
use super::SpareConfig;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// Most incarnations of rank 0 that spares claim in one start.
const MAX_CLAIMS: u32 = 64;

/// The watch of one spare over the rendezvous file.
pub(super) struct Watch {
    /// Since when the file names rank 0 and nobody answered there.
    silent_since: Option<Instant>,
    grace: Duration,
}

impl Watch {
    pub(super) fn new(cfg: &SpareConfig) -> Watch {
        Watch {
            silent_since: None,
            grace: grace(cfg.connect_timeout),
        }
    }

    /// Called after no candidate master answered: the incarnation of rank
    /// 0 this spare now takes, if the start is orphaned and its claim is
    /// the one made.
    pub(super) fn unanswered(&mut self, cfg: &SpareConfig) -> Option<u32> {
        let MasterAddr::Rendezvous(path) = &cfg.master else {
            return None; // a fixed address cannot be taken over elsewhere
        };
        if super::super::bootstrap::started::job_started(&cfg.master, cfg.job, cfg.size) {
            // Every rank registered: the job runs, and its standby
            // rewrites the file (see `bootstrap::started`).
            self.silent_since = None;
            return None;
        }
        match rendezvous::resolve(&cfg.master, cfg.job) {
            Ok((_, 0)) => {}
            // A standby runs the job, or no master wrote the file yet.
            Ok(_) | Err(Unresolved::Retry(_)) | Err(Unresolved::Fatal(_)) => {
                self.silent_since = None;
                return None;
            }
        }
        let since = *self.silent_since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.grace {
            return None;
        }
        let claimed = claim(path);
        if claimed.is_none() {
            // Another spare's claim is being served: wait for its file.
            self.silent_since = None;
        }
        claimed
    }
}

/// How long the rendezvous file's master must stay silent: as long as a
/// replacement of rank 0 waits before it hosts the bootstrap.
pub(crate) fn grace(connect_timeout: Duration) -> Duration {
    (connect_timeout / 10).clamp(Duration::from_millis(500), Duration::from_secs(3))
}

/// Claims rank 0's next incarnation beside the rendezvous file `path`:
/// `Some(k)` if this process created claim `k`.
fn claim(path: &Path) -> Option<u32> {
    let file_time = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let written: SystemTime = file_time(path)?;
    for k in 1..=MAX_CLAIMS {
        let mine = claim_path(path, k);
        if let Some(at) = file_time(&mine) {
            if written <= at {
                return None; // claimant `k` has not hosted yet
            }
            continue; // it hosted and went silent: the next claim
        }
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&mine);
        return created.is_ok().then_some(k);
    }
    None
}

/// Claim `k` beside the rendezvous file `path`.
fn claim_path(path: &Path, k: u32) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".rank0-{k}"));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_claim_per_incarnation_and_the_next_only_after_its_claimant_hosted() {
        let dir = std::env::temp_dir().join(format!("taskfold-orphan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("master.addr");
        assert_eq!(claim(&file), None, "no rendezvous file: nothing to take");
        std::fs::write(&file, "x").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(claim(&file), Some(1));
        assert_eq!(claim(&file), None, "claimant 1 has not hosted yet");
        // Claimant 1 hosts (rewrites the file), then dies.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, "y").unwrap();
        assert_eq!(claim(&file), Some(2));
        assert_eq!(claim(&file), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
