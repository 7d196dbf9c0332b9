//! Long fuzz runs: `cargo run --release -p taskfold-fuzz --bin fuzz --
//! --cases N [--target NAME] [--seed S] [--max-len BYTES]`, or `-- --list`
//! for the targets and what each checks.
//!
//! Generates `N` inputs per target with a seeded PRNG, runs each
//! ([`taskfold_fuzz::run_case`]: panics caught, the largest allocation
//! checked against the target's bound) and reports per target the cases,
//! failures, largest allocation and time. Exits non-zero on any failure,
//! after printing the first failing inputs (hex) of each target.

use std::process::ExitCode;
use std::time::Instant;
use taskfold_fuzz::{alloc, run_case, targets, Rng, Target};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

struct Args {
    cases: u64,
    target: Option<String>,
    seed: u64,
    max_len: usize,
    list: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        cases: 100_000,
        target: None,
        seed: 1,
        max_len: 4096,
        list: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--cases" => a.cases = value()?.parse().map_err(|e| format!("--cases: {e}"))?,
            "--target" => a.target = Some(value()?),
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--list" => a.list = true,
            "--max-len" => a.max_len = value()?.parse().map_err(|e| format!("--max-len: {e}"))?,
            f => return Err(format!("unknown argument {f}")),
        }
    }
    Ok(a)
}

/// What one target's run found.
struct Report {
    cases: u64,
    failures: u64,
    decoded: u64,
    peak: usize,
    secs: f64,
}

fn run(t: &Target, a: &Args) -> Report {
    // Each target has its own stream, so that `--target` reproduces a case
    // of a full run with the same seed.
    let name_hash = t
        .name
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let mut rng = Rng::new(a.seed ^ name_hash);
    let mut data = Vec::with_capacity(a.max_len);
    let mut r = Report {
        cases: 0,
        failures: 0,
        decoded: 0,
        peak: 0,
        secs: 0.0,
    };
    let start = Instant::now();
    let hits = taskfold_fuzz::hits();
    for _ in 0..a.cases {
        rng.input(&mut data, a.max_len);
        r.cases += 1;
        match run_case(t, &data) {
            Ok(peak) => r.peak = r.peak.max(peak),
            Err(f) => {
                r.failures += 1;
                if r.failures <= 3 {
                    let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
                    eprintln!(
                        "{}: case {}: {f}\n  input ({} bytes): {hex}",
                        t.name,
                        r.cases,
                        data.len()
                    );
                }
            }
        }
    }
    r.decoded = taskfold_fuzz::hits() - hits;
    r.secs = start.elapsed().as_secs_f64();
    r
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    if !alloc::installed() {
        eprintln!("fuzz: the counting allocator is not installed");
        return ExitCode::FAILURE;
    }
    let all = targets();
    if a.list {
        for t in &all {
            println!("{:<20} {}", t.name, t.checks);
        }
        return ExitCode::SUCCESS;
    }
    let chosen: Vec<&Target> = all
        .iter()
        .filter(|t| a.target.as_deref().is_none_or(|n| n == t.name))
        .collect();
    if chosen.is_empty() {
        let names: Vec<_> = all.iter().map(|t| t.name).collect();
        eprintln!(
            "fuzz: no target {:?}; targets: {}",
            a.target,
            names.join(", ")
        );
        return ExitCode::from(2);
    }
    // A caught panic is reported once per target, with its input.
    std::panic::set_hook(Box::new(|_| {}));
    println!("seed {} cases {} max-len {}", a.seed, a.cases, a.max_len);
    println!(
        "{:<20} {:>12} {:>12} {:>8} {:>14} {:>9} {:>12}",
        "target", "cases", "decoded", "failed", "largest alloc", "secs", "cases/s"
    );
    let mut failed = false;
    for t in chosen {
        let r = run(t, &a);
        failed |= r.failures > 0;
        println!(
            "{:<20} {:>12} {:>12} {:>8} {:>14} {:>9.1} {:>12.0}",
            t.name,
            r.cases,
            r.decoded,
            r.failures,
            r.peak,
            r.secs,
            r.cases as f64 / r.secs.max(1e-9)
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
