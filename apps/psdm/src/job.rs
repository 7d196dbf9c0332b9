//! The job every rank builds from the command line: model, survey, tables,
//! and which traces each rank migrates in which batch.

use crate::image::Image;
use crate::migrate::Tables;
use crate::model::Model;
use crate::survey::Survey;
use clap::Args;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

/// Sizes and options of a migration (every rank parses the same ones).
#[derive(Args, Clone, Debug)]
pub struct JobArgs {
    /// Image columns.
    #[arg(long, default_value_t = 600)]
    pub nx: usize,
    /// Image rows (depth).
    #[arg(long, default_value_t = 300)]
    pub nz: usize,
    /// Grid spacing, metres.
    #[arg(long, default_value_t = 10.0)]
    pub dx: f64,
    /// Shots, evenly spread over the surface.
    #[arg(long, default_value_t = 48)]
    pub shots: usize,
    /// Receivers per shot (a fixed spread over the surface).
    #[arg(long, default_value_t = 192)]
    pub receivers: usize,
    /// Dipping reflectors in the model.
    #[arg(long, default_value_t = 3)]
    pub reflectors: usize,
    /// Seed of the model.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Sample interval, with its unit (`2ms`, `500us`).
    #[arg(long, value_name = "DURATION", default_value = "2ms", value_parser = duration)]
    pub dt: Duration,
    /// Renamed `--dt`, which takes a unit.
    #[arg(long = "dt-ms", hide = true, value_parser = renamed("--dt", "ms"))]
    pub old_dt_ms: Option<String>,
    /// Peak frequency of the wavelet, Hz.
    #[arg(long, default_value_t = 20.0)]
    pub freq: f64,
    /// Traces per batch: each batch ends with a reduction of its image.
    #[arg(long, default_value_t = 96)]
    pub batch: usize,
    /// Reductions a rank keeps in flight before it waits for the oldest.
    #[arg(long, default_value_t = 4)]
    pub in_flight: usize,
    /// When a rank other than the root is done with a batch reduction:
    /// `result`, once the root holds the batch's image (every rank then
    /// hears how each batch ended, which redoing the batches of a lost rank
    /// needs), or `contributed`, once its partial image was folded in (it
    /// needs nothing back; the root alone hears of a failure after that,
    /// so a lost rank ends the job).
    #[arg(long, default_value = "result", value_parser = ["result", "contributed"])]
    pub completion: String,
    /// Every rank keeps the stacked image: each batch ends with an
    /// allreduce instead of a reduction to the root (needs `--completion
    /// result`); every rank prints its image's checksum at the end.
    #[arg(long)]
    pub allreduce: bool,
    /// Each rank sleeps a seeded random time from 0 to this (whole
    /// milliseconds: `15ms`) after every batch, as on a noisy node: the
    /// contributions arrive in another order.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = duration)]
    pub jitter: Duration,
    /// Renamed `--jitter`, which takes a unit.
    #[arg(long = "jitter-ms", hide = true, value_parser = renamed("--jitter", "ms"))]
    pub old_jitter_ms: Option<String>,
    /// Every rank checkpoints its progress (the root also its image) every
    /// B batches, and resumes from its checkpoints on start (0: off; see
    /// the book's psdm section on checkpoints). Above `--in-flight`, the
    /// runtime's default of two versions kept suffices.
    #[arg(long, value_name = "B", default_value_t = 6)]
    pub checkpoint_every: usize,
    /// The rank that receives every batch image, writes the image and
    /// prints the summary (below the job's rank count).
    #[arg(long, default_value_t = 0)]
    pub root: u32,
    /// The final image as a PNG (written by the root, `--root`).
    #[arg(long, default_value = "psdm.png")]
    pub out: PathBuf,
    /// Also write the final image as raw little-endian f32.
    #[arg(long)]
    pub raw: Option<PathBuf>,
    /// Also write the true reflectivity model as a PNG, for comparison.
    #[arg(long)]
    pub model_png: Option<PathBuf>,
    /// Every rank prints its own account (its time, checkpoints, the ranks
    /// it saw lost, where it resumed); by default only the root speaks.
    #[arg(short, long)]
    pub verbose: bool,
    /// Print the machine-readable `@psdm-checkpoint` and `@psdm-resumed`
    /// lines that `taskfold bench recovery` reads (it asks for them).
    #[arg(long)]
    pub markers: bool,
}

/// `--dt` and `--jitter`: a duration with its unit.
fn duration(v: &str) -> Result<Duration, String> {
    taskfold_core::settings::values::parse_duration_arg(v)
}

/// The value parser of an option renamed `new` (its old name ended in
/// `-{unit}`): always refused, with the new spelling.
fn renamed(
    new: &'static str,
    unit: &'static str,
) -> impl Fn(&str) -> Result<String, String> + Clone {
    move |v| {
        Err(format!(
            "renamed {new}, which takes a unit: {new} {v}{unit}"
        ))
    }
}

impl JobArgs {
    /// `--dt` in milliseconds (as the model and the fingerprint take it).
    pub fn dt_ms(&self) -> f64 {
        self.dt.as_nanos() as f64 / 1e6
    }

    /// `--jitter` in whole milliseconds.
    pub fn jitter_ms(&self) -> u64 {
        self.jitter.as_millis() as u64
    }

    /// `--completion` as the runtime's option.
    pub fn completion(&self) -> taskfold::Completion {
        match self.completion.as_str() {
            "contributed" => taskfold::Completion::Contributed,
            _ => taskfold::Completion::Result,
        }
    }

    /// Checks `--root` against the job's rank count (known only once the
    /// job started).
    pub fn check_root(&self, size: u32) -> Result<(), String> {
        if self.root < size {
            Ok(())
        } else {
            Err(format!(
                "--root {}: the job has {size} rank{} (0 to {})",
                self.root,
                if size == 1 { "" } else { "s" },
                size.saturating_sub(1)
            ))
        }
    }
}

/// Wraps [`JobArgs`] to parse them on their own.
#[derive(clap::Parser)]
#[command(name = "psdm")]
struct ArgsOnly {
    #[command(flatten)]
    job: JobArgs,
}

impl JobArgs {
    /// Parses psdm's options from `args` (without the program's name), as
    /// on its command line: `JobArgs::parse(["--nx", "100"])`.
    pub fn parse<I, S>(args: I) -> Result<JobArgs, clap::Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<std::ffi::OsString> + Clone,
    {
        use clap::Parser;
        let args = std::iter::once(std::ffi::OsString::from("psdm"))
            .chain(args.into_iter().map(Into::into));
        ArgsOnly::try_parse_from(args).map(|a| a.job)
    }

    /// Checks the sizes.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("--nx", self.nx),
            ("--nz", self.nz),
            ("--shots", self.shots),
            ("--receivers", self.receivers),
            ("--batch", self.batch),
            ("--in-flight", self.in_flight),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        if self.allreduce && self.completion == "contributed" {
            return Err(
                "--allreduce gives every rank the image: it needs --completion result".into(),
            );
        }
        if self.nx < 2 || self.nz < 2 {
            return Err("the image needs at least 2 × 2 cells".into());
        }
        for (name, v) in [
            ("--dx", self.dx),
            ("--dt", self.dt_ms()),
            ("--freq", self.freq),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name} must be positive"));
            }
        }
        Ok(())
    }
}

/// Everything a rank needs to model and migrate its traces.
pub struct Job {
    /// The options.
    pub args: JobArgs,
    /// The earth model.
    pub model: Model,
    /// The acquisition.
    pub survey: Survey,
    /// Traveltime tables.
    pub tables: Tables,
}

impl Job {
    /// Builds the job (deterministic: every rank builds the same one).
    pub fn new(args: JobArgs) -> Result<Job, String> {
        args.validate()?;
        let model = Model::generate(args.nx, args.nz, args.dx, args.reflectors, args.seed);
        let survey = Survey::new(
            &model,
            args.shots,
            args.receivers,
            args.dt_ms() * 1e-3,
            args.freq,
        );
        let tables = Tables::new(&model, &survey);
        Ok(Job {
            args,
            model,
            survey,
            tables,
        })
    }

    /// The global traces of `rank` among `size`: a contiguous block, as if
    /// each rank read its own part of the data set.
    pub fn traces_of(&self, rank: u32, size: u32) -> Range<usize> {
        let n = self.survey.traces();
        let (r, p) = (rank as usize, size as usize);
        (n * r / p)..(n * (r + 1) / p)
    }

    /// Batches every rank runs (the same number on every rank, so that
    /// every batch reduction has a contribution from every rank; a rank
    /// short of traces contributes an empty image).
    pub fn batches(&self, size: u32) -> usize {
        let most = self.survey.traces().div_ceil(size as usize);
        most.div_ceil(self.args.batch).max(1)
    }

    /// The traces `rank` migrates in batch `b`.
    pub fn batch_traces(&self, rank: u32, size: u32, b: usize) -> Range<usize> {
        let mine = self.traces_of(rank, size);
        let start = (mine.start + b * self.args.batch).min(mine.end);
        let end = (start + self.args.batch).min(mine.end);
        start..end
    }

    /// The traces `rank` migrates in batch `b` when the ranks `lost` (sorted)
    /// are gone: its own, and of each lost rank's traces of the batch
    /// those whose index `g` falls to it, `g % survivors` being its place
    /// among the survivors. Every survivor computes the same split, so each
    /// trace of the batch is migrated exactly once; a lost rank gets none.
    pub fn attempt_traces(&self, rank: u32, size: u32, b: usize, lost: &[u32]) -> Vec<usize> {
        let survivors: Vec<u32> = (0..size).filter(|r| !lost.contains(r)).collect();
        let Some(place) = survivors.iter().position(|&s| s == rank) else {
            return Vec::new();
        };
        let mut traces: Vec<usize> = self.batch_traces(rank, size, b).collect();
        for &l in lost {
            traces.extend(
                self.batch_traces(l, size, b)
                    .filter(|g| g % survivors.len() == place),
            );
        }
        traces
    }

    /// The reference: every trace migrated in order on one thread, no
    /// runtime involved. Distributed runs agree with it within
    /// [`crate::image::TOLERANCE`].
    pub fn migrate_sequentially(&self) -> Image {
        let mut image = Image::zeros(self.model.nx, self.model.nz);
        for g in 0..self.survey.traces() {
            let trace = self.survey.model_trace(&self.model, g);
            let (is, ir) = self.survey.geometry(g);
            self.tables.migrate_trace(&mut image.data, &trace, is, ir);
        }
        image
    }

    /// Rows within which image energy counts as "on a reflector": the
    /// image wavelet's main lobe (a quarter wavelength at the deepest
    /// velocity) plus a row.
    pub fn reflector_halfwidth(&self) -> usize {
        let v = self.model.velocity(self.model.depth());
        (0.25 * v / self.args.freq / self.model.dx).ceil() as usize + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_trace_in_exactly_one_batch() {
        for (size, batch) in [(1u32, 7usize), (3, 5), (4, 64), (7, 1)] {
            let mut args = JobArgs::parse(["--nx", "20", "--nz", "10"]).unwrap();
            args.shots = 5;
            args.receivers = 9;
            args.batch = batch;
            let job = Job::new(args).unwrap();
            let mut seen = vec![0u32; job.survey.traces()];
            for rank in 0..size {
                for b in 0..job.batches(size) {
                    for g in job.batch_traces(rank, size, b) {
                        seen[g] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "size {size} batch {batch}");
        }
    }

    fn small(batch: usize) -> Job {
        let mut args = JobArgs::parse(["--nx", "20", "--nz", "10"]).unwrap();
        args.shots = 5;
        args.receivers = 9;
        args.batch = batch;
        Job::new(args).unwrap()
    }

    /// Every trace of every batch is migrated exactly once, by survivors
    /// only, whichever ranks are lost.
    #[test]
    fn lost_ranks_traces_are_shared_among_the_survivors() {
        let lost_sets: [&[u32]; 6] = [&[], &[3], &[1], &[1, 3], &[0, 2, 3], &[1, 2, 3, 4, 5]];
        for (size, batch) in [(4u32, 4usize), (6, 3), (7, 1)] {
            let job = small(batch);
            for lost in lost_sets.iter().filter(|l| l.iter().all(|&r| r < size)) {
                let mut seen = vec![0u32; job.survey.traces()];
                for b in 0..job.batches(size) {
                    let mut in_batch = Vec::new();
                    for rank in 0..size {
                        let mine = job.attempt_traces(rank, size, b, lost);
                        assert!(
                            mine.is_empty() || !lost.contains(&rank),
                            "lost rank {rank} got traces"
                        );
                        in_batch.extend(mine);
                    }
                    // The batch's traces, no more: those of every rank's batch b.
                    let mut want: Vec<usize> = (0..size)
                        .flat_map(|r| job.batch_traces(r, size, b))
                        .collect();
                    in_batch.sort_unstable();
                    want.sort_unstable();
                    assert_eq!(in_batch, want, "size {size} lost {lost:?} batch {b}");
                    for g in in_batch {
                        seen[g] += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "size {size} lost {lost:?}");
            }
        }
    }

    /// The split depends on nothing but its arguments: a survivor computes
    /// it from the lost set alone, and every survivor gets the same.
    #[test]
    fn every_survivor_computes_the_same_split() {
        let (a, b) = (small(4), small(4));
        for rank in 0..6 {
            for batch in 0..a.batches(6) {
                assert_eq!(
                    a.attempt_traces(rank, 6, batch, &[2, 4]),
                    b.attempt_traces(rank, 6, batch, &[2, 4])
                );
            }
        }
        // Rank 0 takes the lost traces whose index is 0 modulo 4 survivors.
        let lost2: Vec<usize> = a.batch_traces(2, 6, 0).collect();
        let got = a.attempt_traces(0, 6, 0, &[2, 4]);
        assert!(lost2
            .iter()
            .filter(|g| *g % 4 == 0)
            .all(|g| got.contains(g)));
        assert!(lost2
            .iter()
            .filter(|g| *g % 4 != 0)
            .all(|g| !got.contains(g)));
    }

    #[test]
    fn root_must_be_a_rank_of_the_job() {
        let args = JobArgs::parse(["--root", "2"]).unwrap();
        assert_eq!(args.root, 2);
        assert!(args.check_root(3).is_ok());
        let e = args.check_root(2).unwrap_err();
        assert!(e.contains("--root 2") && e.contains("2 ranks"), "{e}");
    }

    #[test]
    fn bad_sizes() {
        let args = JobArgs::parse(["--nx", "0"]).unwrap();
        assert!(Job::new(args).is_err());
    }
}
