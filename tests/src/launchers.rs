//! The launchers taskfold's tests start jobs with, found on this machine:
//! MPICH's Hydra `mpiexec`, Open MPI's `mpirun` and a running Slurm.
//!
//! A launcher that is missing skips the test with a message, except in CI
//! (`CI` set), which installs them all (`.ci/run`, `.ci/slurm`): there
//! the test fails, naming what is missing.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Variables that name the master, give a job key or an identity: a job
/// started by a launcher in these tests finds everything through the
/// launcher itself, so none of them is passed on from the test's own
/// environment.
pub const CLEARED: [&str; 13] = [
    "TASKFOLD_MASTER",
    "TASKFOLD_RENDEZVOUS",
    "TASKFOLD_JOB",
    "TASKFOLD_JOB_KEY",
    "TASKFOLD_JOB_KEY_FILE",
    "TASKFOLD_INSECURE",
    "TASKFOLD_RANK",
    "TASKFOLD_SIZE",
    "TASKFOLD_PMI",
    "PMI_FD",
    "PMI_RANK",
    "PMI_SIZE",
    "PMIX_NAMESPACE",
];

/// `program` on the `PATH`.
pub fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|dir| PathBuf::from(dir).join(program))
        .find(|p| p.is_file())
}

/// In CI, a missing launcher fails the test; elsewhere it is skipped
/// (`None`), saying so.
fn required(found: Option<PathBuf>, what: &str, install: &str) -> Option<PathBuf> {
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must provide {what} for this test ({install})"
        );
        eprintln!("skipping: {what} is not available ({install})");
    }
    found
}

/// MPICH's Hydra `mpiexec` (CI installs `mpich`).
pub fn hydra() -> Option<PathBuf> {
    let found = ["mpiexec.hydra", "mpiexec.mpich"]
        .into_iter()
        .find_map(on_path);
    required(found, "MPICH's mpiexec", "apt-get install mpich")
}

/// Open MPI's `mpirun` (CI installs `openmpi-bin`).
pub fn openmpi() -> Option<PathBuf> {
    required(
        on_path("mpirun.openmpi"),
        "Open MPI's mpirun",
        "apt-get install openmpi-bin",
    )
}

/// `srun`, if a Slurm controller answers and has a node that takes jobs
/// (CI starts one on this machine: `.ci/slurm`). A busy controller or a
/// node still completing an earlier test's job is waited for, within
/// [`SLURM_WAIT`]; in CI a Slurm that never comes up fails the test with
/// what `sinfo` and `scontrol` said.
pub fn slurm() -> Option<PathBuf> {
    let srun = required(
        on_path("srun"),
        "Slurm's srun",
        "apt-get install slurm-wlm munge",
    )?;
    match slurm_up() {
        Ok(()) => Some(srun),
        Err(said) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must provide a running Slurm for this test (.ci/slurm as \
                 root starts one); Slurm said:\n{said}"
            );
            eprintln!("skipping: no running Slurm (.ci/slurm starts one)");
            None
        }
    }
}

/// How long [`slurm`] waits for a node that takes jobs.
pub const SLURM_WAIT: Duration = Duration::from_secs(60);

/// Node states in which a node takes (or will soon take) a job: `sinfo
/// -o %T` prints them, with `+FLAG` suffixes in Slurm 22.05.
const USABLE: [&str; 4] = ["idle", "mixed", "allocated", "completing"];

/// Whether `sinfo` lists a node that can take jobs, asking again every
/// second within [`SLURM_WAIT`]; `Err` holds what Slurm said last.
fn slurm_up() -> Result<(), String> {
    let Some(sinfo) = on_path("sinfo") else {
        return Err("no sinfo on the PATH".into());
    };
    let deadline = std::time::Instant::now() + SLURM_WAIT;
    loop {
        let mut cmd = Command::new(&sinfo);
        cmd.args(["-h", "-o", "%T"]);
        let out = crate::run_bounded(cmd, Duration::from_secs(20));
        let states = String::from_utf8_lossy(&out.stdout);
        let usable = |s: &str| USABLE.contains(&s.trim().split('+').next().unwrap_or(""));
        if out.status.success() && states.lines().any(usable) {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!("sinfo: {}{}", crate::text(&out), slurm_nodes()));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// What `scontrol` says of the controller and the nodes, for a failure's
/// message.
fn slurm_nodes() -> String {
    let mut said = String::new();
    for args in [&["ping"][..], &["show", "node"][..]] {
        let mut cmd = Command::new("scontrol");
        cmd.args(args);
        let out = crate::run_bounded(cmd, Duration::from_secs(20));
        said.push_str(&format!(
            "\nscontrol {}: {}",
            args.join(" "),
            crate::text(&out)
        ));
    }
    said
}

/// `srun -n N --mpi=MPI` for a test job: labelled output, a time limit,
/// a rank's death not ending the others (`--kill-on-bad-exit=0`,
/// `--wait=0`), and none of the [`CLEARED`] variables.
pub fn srun(srun: &PathBuf, n: u32, mpi: &str) -> Command {
    let mut cmd = Command::new(srun);
    cmd.args(["--label", "--time=10", "--kill-on-bad-exit=0", "--wait=0"])
        .arg(format!("--mpi={mpi}"))
        .args(["-n", &n.to_string()]);
    for v in CLEARED {
        cmd.env_remove(v);
    }
    cmd
}

/// The process whose environment holds `mark` (a `NAME=VALUE` the test
/// gave its job) and `SLURM_PROCID=rank`, or `PMI_RANK=rank`: that rank
/// of that job, on this machine.
pub fn rank_pid(mark: &str, rank: u32) -> Option<i32> {
    let ids = [format!("SLURM_PROCID={rank}"), format!("PMI_RANK={rank}")];
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        let has = |v: &str| vars.contains(&v.as_bytes());
        // A task, not srun or a shell: it was told its rank.
        (has(mark) && ids.iter().any(|id| has(id))).then_some(pid)
    })
}

/// Checks that a `tf_check` job of `np` ranks ended well: every rank
/// reported, none failed a reduction, nothing was wrong.
pub fn assert_tf_check_ok(out: &std::process::Output, np: u32) {
    let t = crate::text(out);
    assert!(out.status.success(), "job failed:\n{t}");
    for r in 0..np {
        assert!(
            t.contains(&format!("rank {r}: ")),
            "rank {r} did not report:\n{t}"
        );
    }
    assert!(!t.contains("WRONG"), "{t}");
    assert_eq!(t.matches(" 0 failed").count(), np as usize, "{t}");
    // With a key from the store, never the insecure mode.
    assert!(!t.contains("insecure mode"), "{t}");
}
