//! What a trial's killer sees of its job: the processes, from the marker
//! files the ranks write (see [`super::rank`]), and the kills themselves.

use super::plan::{Kill, Rng};
use super::{Instant, Victim};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant as Clock};

/// One process of the job, as its markers tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    /// Its process id.
    pub pid: i32,
    /// The working rank it is (`None`: a spare not needed yet).
    pub rank: Option<u32>,
    /// Its incarnation.
    pub incarnation: u32,
    /// The launcher's rank it was started as (a spare's differs from the
    /// rank it takes): which node it runs on.
    pub slot: u32,
    /// It is in the job (its runtime started).
    pub live: bool,
}

/// The job's processes and markers at one moment.
pub struct Seen {
    /// Every marker file's name.
    pub names: BTreeSet<String>,
    /// The processes still running.
    pub procs: Vec<Proc>,
    /// The rank the ranks last said runs the master.
    pub master: u32,
}

/// Whether process `pid` runs (a zombie, dead but not yet waited for by
/// its launcher, does not).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn pid_in(dir: &Path, name: &str) -> Option<i32> {
    std::fs::read_to_string(dir.join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Reads the markers of `dir`.
pub fn look(dir: &Path) -> Seen {
    let names: BTreeSet<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    // pid -> process; a spare that took a rank is one process.
    let mut by_pid: BTreeMap<i32, Proc> = BTreeMap::new();
    for name in &names {
        let parts: Vec<&str> = name.split('-').collect();
        let num = |i: usize| parts.get(i).and_then(|p| p.parse::<u32>().ok());
        let Some(pid) = (match parts[0] {
            "proc" | "live" | "spare" => pid_in(dir, name),
            _ => None,
        }) else {
            continue;
        };
        let p = by_pid.entry(pid).or_insert(Proc {
            pid,
            rank: None,
            incarnation: 0,
            slot: 0,
            live: false,
        });
        match (parts[0], num(1), num(2)) {
            ("spare", Some(l), _) => p.slot = l,
            ("proc", Some(r), Some(i)) => {
                (p.rank, p.incarnation, p.slot) = (Some(r), i, r);
            }
            ("live", Some(r), Some(i)) => {
                if p.rank.is_none() && i == 0 {
                    p.slot = r;
                }
                (p.rank, p.incarnation, p.live) = (Some(r), i, true);
            }
            _ => {}
        }
    }
    let master = std::fs::read_to_string(dir.join("master"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    Seen {
        names,
        procs: by_pid.into_values().filter(|p| alive(p.pid)).collect(),
        master,
    }
}

/// What the killer needs of the job: its directory, its shape, the clock.
pub struct Job<'a> {
    /// The markers.
    pub dir: &'a Path,
    /// Working ranks.
    pub np: u32,
    /// Launcher ranks in all (spares included).
    pub slots: u32,
    /// Simulated nodes (0: one machine).
    pub nodes: u32,
    /// When the job was launched.
    pub launched: Clock,
    /// The failure-free time to solution.
    pub reference: Duration,
    /// Whether it is over.
    pub over: &'a dyn Fn() -> bool,
}

impl Job<'_> {
    /// The node of launcher rank `slot` (the launcher's block placement).
    fn node_of(&self, slot: u32) -> u32 {
        match self.nodes {
            0 => 0,
            n => (u64::from(slot) * u64::from(n) / u64::from(self.slots.max(1))) as u32,
        }
    }

    /// Waits until `ready` holds of what is seen (`None`: the job ended,
    /// or the wait ran past twice the reference and 20 s).
    fn wait_for(&self, ready: impl Fn(&Seen) -> bool) -> Option<Seen> {
        let limit = Clock::now() + self.reference * 2 + Duration::from_secs(20);
        while Clock::now() < limit && !(self.over)() {
            let seen = look(self.dir);
            if ready(&seen) {
                return Some(seen);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }
}

/// What a kill did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Struck {
    /// Seconds after the launch.
    pub at_s: f64,
    /// The ranks killed (a spare's as `spare L`).
    pub whom: Vec<String>,
}

/// Markers whose name starts with `prefix` and that were not in `before`.
fn new_markers<'s>(
    seen: &'s Seen,
    before: &'s BTreeSet<String>,
    prefix: &'s str,
) -> impl Iterator<Item = &'s String> + 's {
    seen.names
        .iter()
        .filter(move |n| n.starts_with(prefix) && !before.contains(*n))
}

/// Waits for `kill`'s instant (`before`: the markers seen at the kill
/// before it), then strikes; `None` if the instant never came.
pub fn strike(job: &Job, kill: &Kill, before: &BTreeSet<String>, rng: &mut Rng) -> Option<Struck> {
    let seen = match kill.instant {
        Instant::Any => {
            let at = job.launched + job.reference.mul_f64(kill.at);
            while Clock::now() < at && !(job.over)() {
                std::thread::sleep(Duration::from_millis(2));
            }
            Some(look(job.dir))
        }
        Instant::Admission => job.wait_for(|s| being_admitted(s, before).is_some()),
        Instant::Restore => job.wait_for(|s| new_markers(s, before, "restore-").next().is_some()),
        Instant::Rollback => match kill.stage {
            0 => job.wait_for(|s| new_markers(s, before, "unwind-").next().is_some()),
            1 => job.wait_for(|s| {
                let unwound = new_markers(s, before, "unwind-").count() as u32;
                unwound + 1 >= job.np
            }),
            _ => job.wait_for(|s| new_markers(s, before, "resumed-").next().is_some()),
        },
    }?;
    if (job.over)() {
        return None;
    }
    let mut targets = choose(job, kill, &seen, before, rng);
    if targets.is_empty() && kill.instant == Instant::Any {
        // Drawn before its victim showed itself (a launcher that starts
        // the ranks slowly, as mpiexec does): struck as soon as it does,
        // so that the instants early in the job are tried too.
        targets = job
            .wait_for(|s| !choose(job, kill, s, before, &mut rng.clone()).is_empty())
            .map(|s| choose(job, kill, &s, before, rng))
            .unwrap_or_default();
    }
    if targets.is_empty() {
        return None;
    }
    let mut whom = Vec::new();
    for p in &targets {
        if let Some(pid) = rustix::process::Pid::from_raw(p.pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        whom.push(match p.rank {
            Some(r) => format!("{r}.{}", p.incarnation),
            None => format!("spare {}", p.slot),
        });
    }
    Some(Struck {
        at_s: job.launched.elapsed().as_secs_f64(),
        whom,
    })
}

/// A replacement process not in the job yet that came after `before`.
fn being_admitted(seen: &Seen, before: &BTreeSet<String>) -> Option<Proc> {
    seen.procs
        .iter()
        .copied()
        .filter(|p| p.incarnation > 0 && !p.live && p.rank.is_some())
        .find(|p| {
            let name = format!("proc-{}-{}", p.rank.unwrap_or(0), p.incarnation);
            !before.contains(&name)
        })
}

/// The processes `kill` strikes, as the job stands.
fn choose(
    job: &Job,
    kill: &Kill,
    seen: &Seen,
    before: &BTreeSet<String>,
    rng: &mut Rng,
) -> Vec<Proc> {
    let working: Vec<Proc> = seen
        .procs
        .iter()
        .copied()
        .filter(|p| p.rank.is_some())
        .collect();
    let pick = |from: &[Proc], rng: &mut Rng| match from.is_empty() {
        true => Vec::new(),
        false => vec![rng.pick(from)],
    };
    let workers: Vec<Proc> = working
        .iter()
        .copied()
        .filter(|p| p.rank != Some(seen.master))
        .collect();
    match kill.victim {
        Victim::Worker => pick(&workers, rng),
        Victim::Master => working
            .iter()
            .copied()
            .filter(|p| p.rank == Some(seen.master))
            .take(1)
            .collect(),
        Victim::Replacement => {
            let fresh = match kill.instant {
                Instant::Admission => being_admitted(seen, before),
                _ => None,
            };
            let newest = working
                .iter()
                .copied()
                .filter(|p| p.incarnation > 0)
                .max_by_key(|p| p.incarnation);
            match fresh.or(newest) {
                Some(p) => vec![p],
                None => pick(&workers, rng),
            }
        }
        Victim::Node => seen
            .procs
            .iter()
            .copied()
            .filter(|p| job.node_of(p.slot) == kill.node)
            .collect(),
        Victim::Spare => {
            let parked: Vec<Proc> = seen
                .procs
                .iter()
                .copied()
                .filter(|p| p.rank.is_none())
                .collect();
            pick(&parked, rng)
        }
    }
}

/// The ranks' output kept for a trial that was not exact, followed by
/// what they wrote of their results and errors.
pub fn keep_log(dir: &Path, to: &Path) -> Option<PathBuf> {
    std::fs::create_dir_all(to.parent()?).ok()?;
    let mut text = std::fs::read_to_string(dir.join("ranks.log")).unwrap_or_default();
    for name in ["ok", "errors", "notes", "exits"] {
        if let Ok(t) = std::fs::read_to_string(dir.join(name)) {
            text.push_str(&format!("==> {name} <==\n{t}"));
        }
    }
    std::fs::write(to, text).ok()?;
    Some(to.to_path_buf())
}
