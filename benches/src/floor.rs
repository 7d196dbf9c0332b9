//! The floor of a small reduction on this machine, a yardstick of `bench
//! scale`: `benches/scripts/tree_floor.c`, N processes in a binomial tree
//! of pipes, each sleeping in `read(2)` until its children's sums arrive.
//! No runtime, no scheduler, no polling: what any implementation pays when
//! every rank is a process that wakes once to contribute and once to
//! learn that the next reduction may start. On a machine with fewer cores
//! than ranks, how that floor grows with the ranks bounds how any
//! runtime's time can grow (Benchmarks, At scale, in the book).
//!
//! Built at run time with the C compiler `cc` (as the MPI driver is built
//! with its MPI's wrapper).

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The program's source.
pub const SOURCE: &str = include_str!("../scripts/tree_floor.c");

/// What can go wrong with the floor.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    /// `cc` failed or is missing.
    #[error("building the floor program with cc failed: {0}")]
    Build(String),
    /// The program failed or printed nothing usable.
    #[error("the floor program on {np} processes failed: {detail}")]
    Run {
        /// Processes.
        np: u32,
        /// Exit status, stderr or the unparsable line.
        detail: String,
    },
}

/// One run's figures.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct FloorFigures {
    /// Processes.
    pub np: u32,
    /// Bytes per contribution.
    pub bytes: u64,
    /// Timed repetitions (the first tenth of those asked for warms up).
    pub reps: u32,
    /// Median seconds per repetition.
    pub median_s: f64,
    /// Fastest repetition.
    pub min_s: f64,
}

/// The built program.
#[derive(Debug, Clone)]
pub struct Floor {
    exe: PathBuf,
}

impl Floor {
    /// Compiles the program into `dir`.
    pub fn build(dir: &Path) -> Result<Floor, FloorError> {
        let err = |e: String| FloorError::Build(e);
        std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        let src = dir.join("tree_floor.c");
        std::fs::write(&src, SOURCE).map_err(|e| err(format!("{}: {e}", src.display())))?;
        let exe = dir.join("tree_floor");
        let out = Command::new("cc")
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .map_err(|e| err(format!("cc: {e}")))?;
        if !out.status.success() {
            return Err(err(String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        Ok(Floor { exe })
    }

    /// Runs `np` processes for `reps` repetitions of `bytes` (rounded up
    /// to whole `f32` lanes).
    pub fn run(&self, np: u32, reps: u32, bytes: usize) -> Result<FloorFigures, FloorError> {
        let fail = |detail: String| FloorError::Run { np, detail };
        let bytes = bytes.max(4).div_ceil(4) * 4;
        let out = Command::new(&self.exe)
            .args([np.to_string(), reps.to_string(), bytes.to_string()])
            .output()
            .map_err(|e| fail(e.to_string()))?;
        if !out.status.success() {
            return Err(fail(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().find(|l| l.starts_with('{')).unwrap_or("");
        serde_json::from_str(line).map_err(|e| fail(format!("{e}: {:?}", stdout.trim())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The program builds, sums exactly (it exits non-zero otherwise) and
    /// reports what it ran; bad arguments are refused.
    #[test]
    fn the_floor_builds_runs_and_reports() {
        let dir = tempfile::tempdir().unwrap();
        let floor = Floor::build(dir.path()).unwrap();
        let f = floor.run(5, 20, 6).unwrap();
        assert_eq!((f.np, f.bytes, f.reps), (5, 8, 18));
        assert!(
            f.min_s > 0.0 && f.min_s <= f.median_s && f.median_s < 1.0,
            "{f:?}"
        );
        let big = floor.run(3, 10, 100_000).unwrap();
        assert_eq!(big.bytes, 100_000);
        assert!(matches!(
            floor.run(1, 10, 8),
            Err(FloorError::Run { np: 1, .. })
        ));
    }
}
