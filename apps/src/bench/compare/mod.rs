//! `taskfold bench compare --out DIR`: taskfold against MPI_Reduce /
//! MPI_Ireduce of Open MPI and MPICH, side by side in one run, in the
//! source paper's scenarios (DESIGN.md §6):
//!
//! - a. `quiet`: p in `--np`, every size;
//! - b. `slow-half`, `slow-20ms`: rank 2 busy-spins D before contributing,
//!   D = 50% of the quiet time, and D = 20 ms;
//! - c. `stagger`: seeded delays in [0, J], J = the quiet time, with tails;
//! - d. `load`: one migration-kernel process per core beside the ranks;
//! - e. `concurrent`: K reductions of `--concurrent-size` at once;
//! - f. the master's messages and bytes per second (from the quiet runs).
//!
//! The quiet time that sets D and J is Open MPI's median at the same
//! (p, size) (else MPICH's, else taskfold's), so both sides see the same
//! delays. Writes `compare.json`, `report.md` and SVG plots into DIR.

mod load;
pub mod rank;

pub use load::{main as load_main, LoadArgs};

use crate::launcher::{self, Launch};
use crate::sizes::parse_size;
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use taskfold_benches::compare::{find, Record, Sample};
use taskfold_benches::mpi::{self, Mpi};
use taskfold_benches::plot;
use taskfold_benches::report::Report;
use taskfold_core::settings::Named;

/// Options of `bench compare`.
#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Directory for compare.json, report.md and the plots.
    #[arg(long)]
    pub out: PathBuf,
    /// Rank counts of the quiet scenario.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    pub np: Vec<u32>,
    /// Rank count of the other scenarios.
    #[arg(long, default_value_t = 8)]
    pub np_interference: u32,
    /// Contribution sizes (bytes of f32; K, M, G suffixes).
    #[arg(long, value_delimiter = ',', default_value = "128K,512K,2M,8M,32M", value_parser = parse_size)]
    pub size: Vec<usize>,
    /// Concurrent reductions of scenario e.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,28")]
    pub k: Vec<u32>,
    /// Contribution size of scenario e.
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    pub concurrent_size: usize,
    /// Scenarios to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "quiet,slow,stagger,load,concurrent"
    )]
    pub scenarios: Vec<String>,
    /// taskfold's durability configurations to measure (`async`, `sync`,
    /// `off`); the first one is the side the targets are judged on.
    #[arg(long, value_delimiter = ',', default_value = "async,off")]
    pub durability: Vec<String>,
    /// When taskfold's futures of ranks other than the root complete, one
    /// side per value and durability: `result` (once the root holds it,
    /// the default) or `contributed` (once the rank's data was folded in,
    /// as MPI_Reduce returns on a rank other than the root). The first is
    /// the side the targets are judged on.
    #[arg(long, value_delimiter = ',', default_value = "result")]
    pub completion: Vec<String>,
    /// Baselines to run, if installed.
    #[arg(long, value_delimiter = ',', default_value = "openmpi,mpich")]
    pub mpi: Vec<String>,
    /// Timed repetitions per point.
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// Timed repetitions per point of scenario e. Each rank's buffer pool
    /// grows over the first repetitions of many concurrent reductions (to
    /// the most buffers the rank needs at once), so fewer repetitions
    /// measure that growth as much as the reductions.
    #[arg(long, default_value_t = 15)]
    pub reps_concurrent: u32,
    /// Untimed repetitions first.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Seed of the staggered arrivals.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Run every scenario's sizes one after the other in one job per side,
    /// as published figures before 2026-11-25 did, instead of each size in
    /// a job of its own (an MPI job that ran smaller sizes first is slower:
    /// see the book's Benchmarks chapter).
    #[arg(long)]
    pub sizes_in_one_job: bool,
    /// Kill a run (one side, one scenario) after this many seconds.
    #[arg(long, default_value_t = 1800)]
    pub timeout: u64,
}

/// One run of one scenario on every side.
struct Run<'a> {
    label: &'static str,
    driver: &'static str,
    np: u32,
    sizes: Vec<usize>,
    /// D or J per size, seconds.
    params: Vec<f64>,
    ks: Vec<u32>,
    reps: u32,
    args: &'a CompareArgs,
}

impl Run<'_> {
    /// `-sSIZE` for a run of one size of several, `-kK` for a run of one
    /// K > 1: what tells this job's files and command lines apart.
    fn suffix(&self) -> String {
        let mut s = String::new();
        if let [size] = self.sizes[..] {
            s += &format!("-s{size}");
        }
        if let [k] = self.ks[..] {
            if k > 1 {
                s += &format!("-k{k}");
            }
        }
        s
    }

    /// This run's sizes, each as a run of its own.
    fn per_size(&self) -> Vec<Run<'_>> {
        self.sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| Run {
                label: self.label,
                driver: self.driver,
                np: self.np,
                sizes: vec![size],
                params: self.params.get(i).map(|&p| vec![p]).unwrap_or_default(),
                ks: self.ks.clone(),
                reps: self.reps,
                args: self.args,
            })
            .collect()
    }

    fn driver_args(&self) -> Vec<String> {
        let list = |v: Vec<String>| v.join(",");
        let us = |v: &[f64]| list(v.iter().map(|s| format!("{:.0}", s * 1e6)).collect());
        let mut a = vec![
            "--scenario".into(),
            self.driver.into(),
            "--sizes".into(),
            list(self.sizes.iter().map(|s| s.to_string()).collect()),
            "--reps".into(),
            self.reps.to_string(),
            "--warmup".into(),
            self.args.warmup.to_string(),
            "--root".into(),
            "1".into(),
            "--seed".into(),
            self.args.seed.to_string(),
            "--k".into(),
            list(self.ks.iter().map(|k| k.to_string()).collect()),
        ];
        match self.driver {
            "slow" => a.extend([
                "--slow-rank".into(),
                "2".into(),
                "--delay-us".into(),
                us(&self.params),
            ]),
            "stagger" => a.extend(["--jitter-us".into(), us(&self.params)]),
            _ => {}
        }
        a
    }
}

struct Harness {
    exe: PathBuf,
    mpis: Vec<Mpi>,
    report: Report,
    step: usize,
}

impl Harness {
    fn param_of(&self, r: &Run, s: &Sample) -> Option<f64> {
        r.sizes
            .iter()
            .position(|&x| x == s.size)
            .and_then(|i| r.params.get(i).copied())
    }

    fn taskfold(&mut self, r: &Run) -> Result<(), String> {
        for d in &r.args.durability {
            for c in &r.args.completion {
                self.taskfold_with(r, d, c)?;
            }
        }
        Ok(())
    }

    fn taskfold_with(&mut self, r: &Run, durability: &str, completion: &str) -> Result<(), String> {
        let side = side_name(durability, completion);
        let out = r.args.out.join(format!(
            "taskfold-{durability}-{completion}-{}-p{}{}.jsonl",
            r.label,
            r.np,
            r.suffix()
        ));
        let mut args = vec!["compare-rank".to_string()];
        args.extend(r.driver_args());
        args.extend(["--out".into(), out.display().to_string()]);
        let cmd = format!(
            "TASKFOLD_DURABILITY={durability} TASKFOLD_COMPLETION={completion} {} run -n {} -- {} {}",
            self.exe.display(),
            r.np,
            self.exe.display(),
            args.join(" ")
        );
        self.report
            .commands
            .push((format!("{side}, {} p={}{}", r.label, r.np, r.suffix()), cmd));
        let launch = Launch {
            ranks: r.np,
            program: self.exe.clone().into_os_string(),
            args: args.into_iter().map(Into::into).collect(),
            timeout: Some(Duration::from_secs(r.args.timeout)),
            env: vec![
                ("TASKFOLD_DURABILITY".into(), durability.into()),
                ("TASKFOLD_COMPLETION".into(), completion.into()),
            ],
            log: None,
        };
        let fail = |detail: String| format!("{side} {} p={}: {detail}", r.label, r.np);
        match launcher::run(&launch) {
            Ok(exits) if exits.iter().all(|e| e.success()) => {}
            Ok(exits) => {
                let bad: Vec<String> = exits
                    .iter()
                    .filter(|e| !e.success())
                    .map(|e| format!("rank {} {}", e.rank, e.describe()))
                    .collect();
                return Err(fail(bad.join(", ")));
            }
            Err(e) => return Err(fail(e.to_string())),
        }
        let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        for s in mpi::parse_samples(&text)? {
            let p = self.param_of(r, &s);
            self.report.records.push(Record::new(&side, r.label, p, s));
        }
        Ok(())
    }

    fn baselines(&mut self, r: &Run) -> Result<(), String> {
        let args = r.driver_args();
        for m in &self.mpis {
            self.report.commands.push((
                format!("{}, {} p={}{}", m.name, r.label, r.np, r.suffix()),
                m.command_line(r.np, &args),
            ));
            let samples = m
                .run(r.np, &args, Duration::from_secs(r.args.timeout))
                .map_err(|e| e.to_string())?;
            for s in samples {
                let p = self.param_of(r, &s);
                self.report.records.push(Record::new(m.name, r.label, p, s));
            }
        }
        Ok(())
    }

    /// Runs `r` on every side: each size in a job of its own, unless
    /// `--sizes-in-one-job`. An MPI job that ran smaller sizes first is not
    /// the same baseline: Open MPI at p = 8 took 2.5-2.7 ms for 2 MiB alone
    /// and 7-9 ms after 128 and 512 KiB in the same job, 12-19 ms for 8 MiB
    /// alone and 26-31 ms after the smaller sizes.
    fn run(&mut self, r: &Run) -> Result<(), String> {
        if r.sizes.len() > 1 && !r.args.sizes_in_one_job {
            for one in r.per_size() {
                self.run_job(&one)?;
            }
            return Ok(());
        }
        self.run_job(r)
    }

    /// Runs `r` as one job on every side.
    fn run_job(&mut self, r: &Run) -> Result<(), String> {
        self.step += 1;
        eprintln!(
            "[compare {}] {} p={} sizes={:?} k={:?}",
            self.step, r.label, r.np, r.sizes, r.ks
        );
        // The baselines first: their quiet times set the next scenarios'
        // delays, and the order is the same for every scenario.
        self.baselines(r)?;
        self.taskfold(r)
    }

    /// The quiet time that sets D and J at (np, size): the first baseline's.
    fn quiet_time(&self, np: u32, size: usize, first: &str) -> Option<f64> {
        ["openmpi", "mpich", first]
            .iter()
            .find_map(|side| find(&self.report.records, side, "quiet", np, size, 1))
            .map(|r| r.median_s)
    }

    fn plots(&mut self, dir: &Path, a: &CompareArgs) {
        let mut jobs: Vec<(String, String, &str, u32, bool, bool)> = Vec::new();
        for &np in &a.np {
            jobs.push((
                format!("quiet-p{np}.svg"),
                format!("a. quiet, p = {np}"),
                "quiet",
                np,
                false,
                true,
            ));
        }
        let p = a.np_interference;
        for (s, t) in [
            ("slow-half", "b. one slow rank, D = 50% of quiet"),
            ("slow-20ms", "b. one slow rank, D = 20 ms"),
            ("load", "d. background load"),
        ] {
            jobs.push((
                format!("{s}-p{p}.svg"),
                format!("{t}, p = {p}"),
                s,
                p,
                false,
                true,
            ));
        }
        jobs.push((
            format!("stagger-tail-p{p}.svg"),
            format!("c. staggered arrival: tail, p = {p}"),
            "stagger",
            p,
            true,
            true,
        ));
        jobs.push((
            format!("concurrent-p{p}.svg"),
            format!("e. K concurrent reductions (total), p = {p}"),
            "concurrent",
            p,
            false,
            false,
        ));
        for (file, title, scenario, np, tail, log) in jobs {
            let series = plot::series_of(&self.report.records, scenario, np, tail);
            if series.is_empty() {
                continue;
            }
            let x = if scenario == "concurrent" {
                "K"
            } else {
                "contribution (KiB)"
            };
            let y = if tail {
                "tail (ms)"
            } else {
                "time per operation (ms)"
            };
            match plot::lines(&dir.join(&file), &title, x, y, &series, log) {
                Ok(()) => self.report.plots.push(file),
                Err(e) => eprintln!("compare: plot {file}: {e}"),
            }
        }
    }
}

/// The report's name for taskfold under `durability` and `completion`:
/// `taskfold` for the defaults, else what differs from them.
fn side_name(durability: &str, completion: &str) -> String {
    let mut differs = Vec::new();
    if durability != "async" {
        differs.push(format!("durability {durability}"));
    }
    if completion != "result" {
        differs.push(format!("completion {completion}"));
    }
    if differs.is_empty() {
        "taskfold".into()
    } else {
        format!("taskfold ({})", differs.join(", "))
    }
}

/// Runs the comparison and writes the report.
pub fn main(a: CompareArgs) -> ExitCode {
    match compare(&a) {
        Ok(report) => {
            println!(
                "{}",
                report.markdown().split("\n## a.").next().unwrap_or("")
            );
            println!("report: {}", a.out.join("report.md").display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench compare: {e}");
            ExitCode::from(1)
        }
    }
}

fn compare(a: &CompareArgs) -> Result<Report, String> {
    // The ranks inherit this environment: what it sets is what they run.
    let settings = taskfold::Settings::from_env().map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let (found, mut missing) = mpi::detect();
    let mut mpis = Vec::new();
    for mut m in found
        .into_iter()
        .filter(|m| a.mpi.iter().any(|x| x == m.name))
    {
        match m.build(&a.out.join("mpi")) {
            Ok(_) => mpis.push(m),
            Err(e) => missing.push(e.to_string()),
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for d in &a.durability {
        if !matches!(d.as_str(), "async" | "sync" | "off") {
            return Err(format!("--durability {d}: expected async, sync or off"));
        }
    }
    for c in &a.completion {
        if !matches!(c.as_str(), "result" | "contributed") {
            return Err(format!("--completion {c}: expected result or contributed"));
        }
    }
    let first = side_name(
        a.durability.first().map_or("async", |d| d.as_str()),
        a.completion.first().map_or("result", |c| c.as_str()),
    );
    let mut h = Harness {
        exe: exe.clone(),
        mpis,
        report: Report {
            invocation: std::env::args().collect::<Vec<_>>().join(" "),
            missing,
            notes: vec![
                format!("{cores} cores; root 1; f32 sum; {} timed repetitions after {} warm-up ({} for scenario e)", a.reps, a.warmup, a.reps_concurrent),
                format!(
                    "taskfold: `taskfold` is the default durability (async: a disk copy and a buddy copy of every contribution, or, with the buddy on the same node, the original kept in memory where the buddy maps it); `taskfold (durability off)` makes no copies, like MPI; contributions are `InPlace<Sum<f32>>` arrays filled before the clock starts, like MPI's send buffers (each repetition's right before it, between two barriers, so that no rank copies data while another rank's clock runs); transport {}{}",
                    settings.transport.kind.name(),
                    same_node_gets(&settings)
                ),
                "taskfold's futures of ranks other than the root complete once the root holds the result (the default completion), or, on the sides named `completion contributed`, once their data was folded in, as MPI_Reduce returns on a rank other than the root once its send buffer is free".into(),
                "D and J are Open MPI's quiet median at the same p and size (else MPICH's, else taskfold's)".into(),
                if a.sizes_in_one_job {
                    "scenarios a-d run their sizes one after the other in one job per side (--sizes-in-one-job); scenario e runs each K in a job of its own, on every side".into()
                } else {
                    "every size and every K runs in a job of its own, on every side".into()
                },
            ],
            ..Report::default()
        },
        step: 0,
    };
    let has = |s: &str| a.scenarios.iter().any(|x| x == s);
    let p = a.np_interference;
    let run = |label, driver, np, sizes: Vec<usize>, params, ks, reps| Run {
        label,
        driver,
        np,
        sizes,
        params,
        ks,
        reps,
        args: a,
    };
    let mut quiet_nps: Vec<u32> = if has("quiet") {
        a.np.clone()
    } else {
        Vec::new()
    };
    // The interference scenarios need the quiet times at their p, and the
    // staggered tail needs one fetch + fold alone (p = 2).
    if (has("slow") || has("stagger")) && !quiet_nps.contains(&p) {
        quiet_nps.push(p);
    }
    if has("stagger") && !quiet_nps.contains(&2) {
        quiet_nps.insert(0, 2);
    }
    for &np in &quiet_nps {
        h.run(&run(
            "quiet",
            "quiet",
            np,
            a.size.clone(),
            Vec::new(),
            vec![1],
            a.reps,
        ))?;
    }
    let quiet: Vec<f64> = a
        .size
        .iter()
        .map(|&s| h.quiet_time(p, s, &first).unwrap_or(0.0))
        .collect();
    if has("slow") {
        let half = quiet.iter().map(|q| q * 0.5).collect();
        h.run(&run(
            "slow-half",
            "slow",
            p,
            a.size.clone(),
            half,
            vec![1],
            a.reps,
        ))?;
        h.run(&run(
            "slow-20ms",
            "slow",
            p,
            a.size.clone(),
            vec![0.020; a.size.len()],
            vec![1],
            a.reps,
        ))?;
    }
    if has("stagger") {
        h.run(&run(
            "stagger",
            "stagger",
            p,
            a.size.clone(),
            quiet.clone(),
            vec![1],
            a.reps,
        ))?;
        h.report.fetch_fold_alone = a
            .size
            .iter()
            .filter_map(|&s| {
                find(&h.report.records, &first, "quiet", 2, s, 1).map(|r| (s, r.median_s))
            })
            .collect();
    }
    if has("load") {
        let limit = Duration::from_secs(a.timeout * (1 + h.mpis.len() as u64));
        let _load =
            load::Load::start(&exe, cores, limit).map_err(|e| format!("background load: {e}"))?;
        h.run(&run(
            "load",
            "quiet",
            p,
            a.size.clone(),
            Vec::new(),
            vec![1],
            a.reps,
        ))?;
    }
    if has("concurrent") {
        // One job per K, on both sides: a process that ran the smaller Ks
        // first is not the same baseline (Open MPI took 2064 ms for K = 28
        // after K = 4, 8 and 16 in the same processes, 375-428 ms alone).
        for &k in &a.k {
            h.run(&run(
                "concurrent",
                "concurrent",
                p,
                vec![a.concurrent_size],
                Vec::new(),
                vec![k],
                a.reps_concurrent,
            ))?;
            // The floor below any schedule: the same folds, alone.
            let folds = (p.max(1) - 1) * k;
            let floor = taskfold_benches::baseline::fold_floor(a.concurrent_size, folds, cores, 3);
            h.report.fold_floor.push((p, a.concurrent_size, k, floor));
            // With originals kept, each receiving rank's first fold writes a
            // new buffer: p / 2 of the p − 1 folds in a balanced pairing.
            let fresh = p / 2 * k;
            let kept = taskfold_benches::baseline::fold_floor_kept(
                a.concurrent_size,
                folds,
                fresh,
                cores,
                3,
            );
            h.report
                .fold_floor_kept
                .push((p, a.concurrent_size, k, kept));
        }
    }
    h.plots(&a.out, a);
    let json = serde_json::to_vec_pretty(&h.report).map_err(|e| e.to_string())?;
    std::fs::write(a.out.join("compare.json"), json).map_err(|e| format!("compare.json: {e}"))?;
    std::fs::write(a.out.join("report.md"), h.report.markdown())
        .map_err(|e| format!("report.md: {e}"))?;
    Ok(h.report)
}

/// How same-node gets move data in the ranks this harness starts (its own
/// binary: the shared heap is installed unless the settings turn it off).
fn same_node_gets(settings: &taskfold::Settings) -> &'static str {
    if !settings.transport.tcp_loans {
        " (same-node loans off)"
    } else if !settings.shared_heap {
        " (same-node gets by cross-memory attach)"
    } else {
        " (same-node gets read in place from the owner's shared heap)"
    }
}
