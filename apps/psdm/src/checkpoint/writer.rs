//! Taking checkpoints during the run: when one is due, the rank hands its
//! [`State`] to the runtime and goes on; the write's future is checked
//! later, before the batch whose reduction needs it durable
//! ([`Cadence::wait_before`]).
//!
//! With `--markers`, each checkpoint taken is announced on stdout with a
//! machine-readable line, `@psdm-checkpoint rank=R version=V batches=K
//! unix_ms=T` (the instant the state was captured), which `taskfold bench
//! recovery` asks for to tell how much work a killed rank lost.

use super::{unix_ms, Cadence, State};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use taskfold::{CheckpointFuture, Runtime};

/// A rank's checkpoints under way.
pub struct Checkpointer {
    cadence: Cadence,
    fingerprint: u64,
    /// Oldest first.
    pending: VecDeque<CheckpointFuture>,
    /// Time spent serialising states and blocked on writes.
    pub spent: Duration,
    /// Checkpoints taken.
    pub taken: u64,
    /// Whether each checkpoint taken is announced (`--markers`).
    markers: bool,
}

impl Checkpointer {
    /// Checkpoints at `cadence`, stamped with `fingerprint`; each one
    /// announced if `markers`.
    pub fn new(cadence: Cadence, fingerprint: u64, markers: bool) -> Checkpointer {
        Checkpointer {
            cadence,
            fingerprint,
            pending: VecDeque::new(),
            spent: Duration::ZERO,
            taken: 0,
            markers,
        }
    }

    /// The version to take once `done` batches are settled, if one is due.
    pub fn due(&self, done: usize) -> Option<u64> {
        self.cadence.due(done)
    }

    /// Before the reduction of `batch`: waits for every checkpoint that
    /// must be durable by then.
    pub fn before_issue(&mut self, rank: u32, batch: usize) {
        while let Some(f) = self.pending.front() {
            if self.cadence.wait_before(f.version()) > batch {
                return;
            }
            let f = self.pending.pop_front().expect("a front");
            let began = Instant::now();
            report(rank, f.version(), f.wait());
            self.spent += began.elapsed();
        }
    }

    /// Takes `version`: `batches` settled, `timing`, and
    /// at the root the image. Returns at once; the write goes on behind.
    pub fn take(&mut self, rt: &Runtime, version: u64, parts: Parts<'_>) {
        let began = Instant::now();
        let state = State {
            fingerprint: self.fingerprint,
            rank: rt.rank(),
            batches_done: parts.batches as u64,
            timing: parts.timing,
            image: parts.image.map(<[f32]>::to_vec).unwrap_or_default(),
        };
        if self.markers {
            println!(
                "@psdm-checkpoint rank={} version={version} batches={} unix_ms={}",
                rt.rank(),
                parts.batches,
                unix_ms()
            );
        }
        self.pending
            .push_back(rt.checkpoints().save(version, &state));
        self.taken += 1;
        self.spent += began.elapsed();
    }

    /// Waits for every checkpoint still being written.
    pub fn finish(&mut self, rank: u32) {
        let began = Instant::now();
        while let Some(f) = self.pending.pop_front() {
            report(rank, f.version(), f.wait());
        }
        self.spent += began.elapsed();
    }
}

/// What a checkpoint holds, from the rank loop.
pub struct Parts<'a> {
    /// Batches settled.
    pub batches: usize,
    /// The timing so far.
    pub timing: Vec<f64>,
    /// At the root, the image.
    pub image: Option<&'a [f32]>,
}

/// Says on stderr that a checkpoint failed (the run goes on; the versions
/// before stay).
fn report(
    rank: u32,
    version: u64,
    outcome: Result<taskfold::checkpoint::Written, taskfold::CheckpointError>,
) {
    if let Err(e) = outcome {
        eprintln!("psdm: rank {rank}: checkpoint {version} not written: {e}");
    }
}
