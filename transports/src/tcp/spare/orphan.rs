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
//!
//! Rank 0 may also die before it wrote the file at all. So the first
//! process of rank 0, in a job with spares, makes claim 0 before it
//! hosts ([`first_claim`]), and a spare that has seen no file of its job
//! for a longer grace ([`unwritten_grace`]) makes claim 0 itself, and
//! claim 1 with it: it then takes rank 0 as incarnation 1. Whichever
//! process creates claim 0 first hosts the start; a first process of rank
//! 0 that comes later finds its rank taken and parks as a spare instead.
//! A claim names its job, so that one left by another job in the same
//! directory is taken for none.

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
    /// Since when no file of this job was found.
    unwritten_since: Option<Instant>,
    unwritten_grace: Duration,
}

impl Watch {
    pub(super) fn new(cfg: &SpareConfig) -> Watch {
        Watch {
            silent_since: None,
            grace: grace(cfg.connect_timeout),
            unwritten_since: None,
            unwritten_grace: unwritten_grace(cfg.connect_timeout),
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
            Ok((_, 0)) => self.unwritten_since = None,
            // No master wrote the file yet: rank 0 may have died first.
            Err(Unresolved::Retry(_)) => {
                self.silent_since = None;
                let since = *self.unwritten_since.get_or_insert_with(Instant::now);
                if since.elapsed() < self.unwritten_grace {
                    return None;
                }
                let claimed = claim_unwritten(path, cfg.job, self.unwritten_grace);
                if claimed.is_none() {
                    self.unwritten_since = None;
                }
                return claimed;
            }
            // A standby runs the job.
            Ok(_) | Err(Unresolved::Fatal(_)) => {
                self.silent_since = None;
                self.unwritten_since = None;
                return None;
            }
        }
        let since = *self.silent_since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.grace {
            return None;
        }
        let claimed = claim(path, cfg.job);
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

/// How long a spare waits for the job's first rendezvous file before it
/// takes rank 0 itself: longer than a start takes, short enough that the
/// ranks, which wait for the file as long as the connect timeout, still
/// find the spare's.
pub(crate) fn unwritten_grace(connect_timeout: Duration) -> Duration {
    (connect_timeout / 3).clamp(Duration::from_secs(2), Duration::from_secs(10))
}

/// What a claim file holds: its job.
fn claim_text(job: u64) -> String {
    format!("job={job:#x}\n")
}

/// Claim `k` beside `path` as it stands for `job`.
enum ClaimFile {
    /// Nobody made it (or only another job did: that one is gone now).
    Free,
    /// This job's, made that long ago.
    Made(Duration),
    /// It cannot be read.
    Unknown,
}

fn claim_file(path: &Path, k: u32, job: u64) -> ClaimFile {
    let p = claim_path(path, k);
    match std::fs::read_to_string(&p) {
        // Empty or cut short: being written by a claimant of an older
        // build (claims appear whole since, see `make_claim`), or left by
        // one that died writing it. Never another job's to remove: its
        // maker may hold it.
        Ok(text) if claim_text(job).starts_with(&text) => {
            let age = std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok());
            ClaimFile::Made(age.unwrap_or_default())
        }
        Ok(_) => match std::fs::remove_file(&p) {
            Ok(()) => ClaimFile::Free,
            Err(_) => ClaimFile::Unknown,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ClaimFile::Free,
        Err(_) => ClaimFile::Unknown,
    }
}

/// Creates claim `k` for `job`: true if this process made it.
///
/// The claim appears whole: written to a file of this process's own,
/// then linked at the claim's name, which fails if it exists. A claim
/// created empty and written after could be read in between by another
/// spare, taken for another job's, removed, and made again: two spares
/// would take the same incarnation of rank 0.
fn make_claim(path: &Path, k: u32, job: u64) -> bool {
    let claim = claim_path(path, k);
    let mut own = claim.clone().into_os_string();
    own.push(format!(".{}.tmp", std::process::id()));
    let own = PathBuf::from(own);
    let _ = std::fs::remove_file(&own);
    if std::fs::write(&own, claim_text(job)).is_err() {
        let _ = std::fs::remove_file(&own);
        return false;
    }
    let linked = std::fs::hard_link(&own, &claim);
    let _ = std::fs::remove_file(&own);
    match linked {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        // A file system without hard links: created exclusively, then
        // written (a reader takes a claim cut short as made).
        Err(_) => {
            use std::io::Write;
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&claim);
            created.is_ok_and(|mut f| f.write_all(claim_text(job).as_bytes()).is_ok())
        }
    }
}

/// The first process of rank 0, in a job with spares, claims the start
/// before it hosts it: true if it may host, false if a spare took rank
/// 0 first (no file had come: see [`Watch::unanswered`]).
pub(crate) fn first_claim(path: &Path, job: u64) -> bool {
    match claim_file(path, 0, job) {
        ClaimFile::Free => make_claim(path, 0, job),
        ClaimFile::Made(_) => false,
        // Not ours to judge: host, as a job without spares would.
        ClaimFile::Unknown => true,
    }
}

/// No file of `job` came: the incarnation of rank 0 this spare takes, if
/// its claim is the one made. Claim 0 locks the first process out (it
/// becomes a spare if it comes); a claim whose maker has not written the
/// file within `grace` is passed over.
fn claim_unwritten(path: &Path, job: u64, grace: Duration) -> Option<u32> {
    for k in 0..=MAX_CLAIMS {
        match claim_file(path, k, job) {
            ClaimFile::Made(age) if age < grace => return None,
            ClaimFile::Made(_) => continue,
            ClaimFile::Unknown => return None,
            ClaimFile::Free => {}
        }
        if !make_claim(path, k, job) {
            return None;
        }
        return match k {
            0 => make_claim(path, 1, job).then_some(1),
            k => Some(k),
        };
    }
    None
}

/// Claims rank 0's next incarnation beside the rendezvous file `path`:
/// `Some(k)` if this process created claim `k`.
fn claim(path: &Path, job: u64) -> Option<u32> {
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
        return make_claim(path, k, job).then_some(k);
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
        assert_eq!(claim(&file, 7), None, "no rendezvous file: nothing to take");
        std::fs::write(&file, "x").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(claim(&file, 7), Some(1));
        assert_eq!(claim(&file, 7), None, "claimant 1 has not hosted yet");
        // Claimant 1 hosts (rewrites the file), then dies.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, "y").unwrap();
        assert_eq!(claim(&file, 7), Some(2));
        assert_eq!(claim(&file, 7), None);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn with_no_file_a_spare_takes_rank_0_and_the_first_process_comes_too_late() {
        let dir = std::env::temp_dir().join(format!("taskfold-unwritten-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("master.addr");
        let long = Duration::from_secs(60);
        // Another job's claim left in the directory is taken for none.
        std::fs::write(claim_path(&file, 0), claim_text(9)).unwrap();
        assert_eq!(claim_unwritten(&file, 7, long), Some(1), "claims 0 and 1");
        assert!(
            !first_claim(&file, 7),
            "rank 0's first process comes too late"
        );
        assert_eq!(
            claim_unwritten(&file, 7, long),
            None,
            "claimant 1 may still host"
        );
        // Claimant 1 died before it wrote the file: past the grace, the next.
        assert_eq!(claim_unwritten(&file, 7, Duration::ZERO), Some(2));
        let _ = std::fs::remove_dir_all(&dir);

        std::fs::create_dir_all(&dir).unwrap();
        assert!(first_claim(&file, 7), "the first process claims the start");
        assert_eq!(
            claim_unwritten(&file, 7, long),
            None,
            "a spare does not take it from a first process that may still host"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_claim_cut_short_is_never_taken_for_another_jobs() {
        let dir = std::env::temp_dir().join(format!("taskfold-cut-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("master.addr");
        let long = Duration::from_secs(60);
        // Claim 0 is old; claim 1 is being written (empty), its maker alive.
        std::fs::write(claim_path(&file, 0), claim_text(7)).unwrap();
        std::fs::write(claim_path(&file, 1), "").unwrap();
        assert_eq!(
            claim_unwritten(&file, 7, Duration::ZERO),
            Some(2),
            "claim 1 stands: the next incarnation, never the same"
        );
        assert!(claim_path(&file, 1).exists(), "claim 1 was not removed");
        assert_eq!(
            claim_unwritten(&file, 7, long),
            None,
            "claim 2 may still host"
        );
        std::fs::write(claim_path(&file, 3), "job=0x").unwrap();
        assert!(
            matches!(claim_file(&file, 3, 7), ClaimFile::Made(_)),
            "cut short"
        );
        // A whole claim of another job is removed and taken for none.
        std::fs::write(claim_path(&file, 4), claim_text(9)).unwrap();
        assert!(matches!(claim_file(&file, 4, 7), ClaimFile::Free));
        assert!(!claim_path(&file, 4).exists());
        // Made claims leave no file of their own behind.
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
