//! The MPI baseline of `bench compare`: finds Open MPI and MPICH, builds
//! `benches/mpi/reduce_bench.c` with each one's compiler wrapper, and runs
//! it with each one's launcher. Both MPIs come from the distribution
//! (`openmpi-bin libopenmpi-dev`, `mpich libmpich-dev`) and live side by side
//! under their suffixed names, so no `mpicc` alternative is assumed.

use crate::compare::Sample;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The driver's source, built by the harness at run time.
pub const DRIVER_SOURCE: &str = include_str!("../mpi/reduce_bench.c");

/// One MPI implementation found on this machine.
#[derive(Debug, Clone)]
pub struct Mpi {
    /// `openmpi` or `mpich`.
    pub name: &'static str,
    /// Its compiler wrapper.
    pub cc: PathBuf,
    /// Its launcher.
    pub launcher: PathBuf,
    /// The driver, once built.
    pub exe: Option<PathBuf>,
}

/// What can go wrong with a baseline run.
#[derive(Debug, thiserror::Error)]
pub enum MpiError {
    /// The compiler wrapper failed.
    #[error("{mpi}: building the driver failed: {detail}")]
    Build {
        /// Which MPI.
        mpi: &'static str,
        /// Compiler output.
        detail: String,
    },
    /// The job failed or printed nothing usable.
    #[error("{mpi}: `{command}` failed: {detail}")]
    Run {
        /// Which MPI.
        mpi: &'static str,
        /// The command line.
        command: String,
        /// Exit status and stderr.
        detail: String,
    },
    /// The job exceeded its time limit and was killed.
    #[error("{mpi}: `{command}` did not finish within {limit:?}")]
    Timeout {
        /// Which MPI.
        mpi: &'static str,
        /// The command line.
        command: String,
        /// The limit.
        limit: Duration,
    },
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The MPIs installed here, and a note for each one that is missing.
pub fn detect() -> (Vec<Mpi>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    let candidates: [(&'static str, &str, &[&str], &str); 2] = [
        (
            "openmpi",
            "mpicc.openmpi",
            &["mpirun.openmpi"],
            "openmpi-bin libopenmpi-dev",
        ),
        (
            "mpich",
            "mpicc.mpich",
            &["mpiexec.mpich", "mpiexec.hydra"],
            "mpich libmpich-dev",
        ),
    ];
    for (name, cc, launchers, pkgs) in candidates {
        match (which(cc), launchers.iter().find_map(|l| which(l))) {
            (Some(cc), Some(launcher)) => found.push(Mpi {
                name,
                cc,
                launcher,
                exe: None,
            }),
            _ => missing.push(format!(
                "{name}: `{cc}` or its launcher not found (apt-get install {pkgs})"
            )),
        }
    }
    (found, missing)
}

impl Mpi {
    /// Compiles the driver into `dir` with this MPI's wrapper.
    pub fn build(&mut self, dir: &Path) -> Result<&Path, MpiError> {
        let err = |detail: String| MpiError::Build {
            mpi: self.name,
            detail,
        };
        std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        let src = dir.join("reduce_bench.c");
        std::fs::write(&src, DRIVER_SOURCE).map_err(|e| err(format!("{}: {e}", src.display())))?;
        let exe = dir.join(format!("reduce_bench-{}", self.name));
        let out = Command::new(&self.cc)
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .map_err(|e| err(format!("{}: {e}", self.cc.display())))?;
        if !out.status.success() {
            return Err(err(String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        Ok(self.exe.insert(exe))
    }

    /// The launcher's arguments for `np` ranks. With more ranks than cores
    /// both MPIs must be told to oversubscribe: Open MPI refuses otherwise
    /// (and as root needs `--allow-run-as-root`); MPICH's Hydra accepts it.
    pub fn launch_args(&self, np: u32) -> Vec<String> {
        match self.name {
            "openmpi" => vec![
                "--allow-run-as-root".into(),
                "--oversubscribe".into(),
                "--bind-to".into(),
                "none".into(),
                "-np".into(),
                np.to_string(),
            ],
            _ => vec!["-n".into(), np.to_string()],
        }
    }

    /// The full command line of a driver run (for the report).
    pub fn command_line(&self, np: u32, args: &[String]) -> String {
        let exe = self.exe.as_deref().unwrap_or(Path::new("reduce_bench"));
        let mut parts = vec![self.launcher.display().to_string()];
        parts.extend(self.launch_args(np));
        parts.push(exe.display().to_string());
        parts.extend(args.iter().cloned());
        parts.join(" ")
    }

    /// Runs the driver on `np` ranks with `args`, killed after `limit`;
    /// returns the samples rank 0 printed.
    pub fn run(&self, np: u32, args: &[String], limit: Duration) -> Result<Vec<Sample>, MpiError> {
        let command = self.command_line(np, args);
        let fail = |detail: String| MpiError::Run {
            mpi: self.name,
            command: command.clone(),
            detail,
        };
        let exe = self
            .exe
            .as_deref()
            .ok_or_else(|| fail("not built".into()))?;
        let mut child = Command::new(&self.launcher)
            .args(self.launch_args(np))
            .arg(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| fail(e.to_string()))?;
        // Drain both pipes on threads so that a chatty job cannot block.
        let mut so = child.stdout.take();
        let mut se = child.stderr.take();
        let out = std::thread::spawn(move || read_all(so.as_mut()));
        let err = std::thread::spawn(move || read_all(se.as_mut()));
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if start.elapsed() > limit => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(MpiError::Timeout {
                        mpi: self.name,
                        command,
                        limit,
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(fail(e.to_string())),
            }
        };
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        if !status.success() {
            return Err(fail(format!("{status}: {}", stderr.trim())));
        }
        parse_samples(&stdout).map_err(fail)
    }

    /// The driver's seeded delay for (seed, rep, rank), to check that both
    /// sides draw the same arrival order.
    pub fn delay_fraction(&self, seed: u64, rep: u64, rank: u64) -> Option<f64> {
        let out = Command::new(self.exe.as_deref()?)
            .args([
                "--print-delay".to_string(),
                seed.to_string(),
                rep.to_string(),
                rank.to_string(),
            ])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    }
}

fn read_all(r: Option<&mut impl std::io::Read>) -> String {
    let mut s = String::new();
    if let Some(r) = r {
        let _ = r.read_to_string(&mut s);
    }
    s
}

/// The JSON lines of a driver's output (other lines are ignored: MPIs may
/// print warnings on stdout).
pub fn parse_samples(stdout: &str) -> Result<Vec<Sample>, String> {
    let samples = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| serde_json::from_str::<Sample>(l).map_err(|e| format!("{e}: {l}")))
        .collect::<Result<Vec<_>, _>>()?;
    if samples.is_empty() {
        return Err(format!("no samples in the output: {}", stdout.trim()));
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lines_parse_and_noise_is_skipped() {
        let out = "warning: something\n{\"scenario\":\"quiet\",\"np\":2,\"size\":8,\"k\":1,\"times_s\":[0.1],\"tails_s\":[0.05]}\n";
        let s = parse_samples(out).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].times_s, vec![0.1]);
        assert!(parse_samples("nothing").is_err());
        assert!(parse_samples("{bad").is_err());
    }

    /// With an MPI installed (always in CI, which installs both), the
    /// driver builds, agrees with taskfold's seeded delays and reduces
    /// correctly on 2 ranks.
    #[test]
    fn driver_builds_and_runs_with_each_mpi() {
        let (mpis, missing) = detect();
        if std::env::var_os("CI").is_some() {
            assert!(missing.is_empty(), "CI installs both MPIs: {missing:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        for mut m in mpis {
            m.build(&dir.path().join(m.name)).unwrap();
            for (seed, rep, rank) in [(7, 0, 0), (7, 3, 5), (12345, 99, 7)] {
                assert_eq!(
                    m.delay_fraction(seed, rep, rank),
                    Some(crate::delay::delay_fraction(seed, rep, rank)),
                    "{}",
                    m.name
                );
            }
            let args: Vec<String> = ["--scenario", "stagger", "--sizes", "4096", "--reps", "2"]
                .iter()
                .chain(&["--warmup", "0", "--jitter-us", "1000"])
                .map(|s| s.to_string())
                .collect();
            let s = m.run(2, &args, Duration::from_secs(120)).unwrap();
            assert_eq!(s.len(), 1, "{}", m.name);
            assert_eq!((s[0].np, s[0].size, s[0].times_s.len()), (2, 4096, 2));
            assert!(s[0].tails_s.iter().all(|t| *t >= 0.0 && *t < 10.0));
        }
    }
}
