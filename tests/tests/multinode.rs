//! Jobs over simulated nodes (`taskfold run --sim-nodes N`): network and mount
//! namespaces on this machine. They need root; a machine where namespaces
//! cannot be made skips these tests with a message, except in CI (`CI`
//! set), where they must run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use taskfold_tests::netns::{namespaces_of, namespaces_or_skip};
use taskfold_tests::{run_bounded, signal, taskfold_bin, text, wait_bounded, wait_for_pid, Signal};

const LIMIT: Duration = Duration::from_secs(240);

fn tf_check() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_check"))
}

/// `taskfold run --sim-nodes NODES -n RANKS [EXTRA] -- PROGRAM ARGS`.
fn launch(nodes: u32, ranks: u32, extra: &[&str], program: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(taskfold_bin());
    cmd.args([
        "run",
        "--sim-nodes",
        &nodes.to_string(),
        "-n",
        &ranks.to_string(),
    ])
    .args(["--timeout", "200s"])
    .args(extra)
    .arg("--")
    .arg(program)
    .args(args);
    cmd
}

/// Starts `cmd` with its output piped.
fn start(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().expect("spawn taskfold")
}

/// Runs the job, then checks that none of its namespaces is left.
fn run_and_clean(cmd: Command) -> Output {
    let child = start(cmd);
    let pid = child.id();
    let out = wait_bounded(child, LIMIT);
    let left = namespaces_of(pid);
    assert!(left.is_empty(), "left behind: {left:?}\n{}", text(&out));
    out
}

fn assert_all_ok(out: &Output, np: u32) {
    let t = text(out);
    assert!(out.status.success(), "job failed:\n{t}");
    for r in 0..np {
        assert!(t.contains(&format!("[{r}] rank {r}: ")), "{t}");
        assert!(!t.contains(&format!("[{r}] rank {r}: 0 ok")), "{t}");
    }
    assert!(!t.contains("WRONG"), "{t}");
    assert_eq!(t.matches(" 0 failed").count(), np as usize, "{t}");
}

/// The bytes all ranks report having read in place.
fn bytes_read_in_place(out: &Output) -> u64 {
    text(out)
        .lines()
        .filter_map(|l| l.split(": read ").nth(1))
        .filter_map(|l| l.strip_suffix(" bytes in place"))
        .map(|n| n.trim().parse::<u64>().expect("a count"))
        .sum()
}

#[test]
fn two_nodes_of_two_ranks_reduce_exactly_and_leave_nothing() {
    if !namespaces_or_skip("two_nodes_of_two_ranks_reduce_exactly_and_leave_nothing") {
        return;
    }
    let args = ["--size", "4194304", "--reductions", "12", "--root", "1"];
    let out = run_and_clean(launch(2, 4, &[], &tf_check(), &args));
    assert_all_ok(&out, 4);
}

/// Same-node reads (shared heap, cross-memory attach) work within a
/// simulated node and never across two.
#[test]
fn ranks_read_in_place_within_a_node_only() {
    if !namespaces_or_skip("ranks_read_in_place_within_a_node_only") {
        return;
    }
    let args = ["--size", "4194304", "--reductions", "4", "--root", "1"];
    let apart = run_and_clean(launch(2, 2, &[], &tf_check(), &args));
    assert_all_ok(&apart, 2);
    assert_eq!(bytes_read_in_place(&apart), 0, "{}", text(&apart));
    let together = run_and_clean(launch(1, 2, &[], &tf_check(), &args));
    assert_all_ok(&together, 2);
    assert!(bytes_read_in_place(&together) > 0, "{}", text(&together));
}

/// Each rank writes a file in `/dev/shm`, waits (bounded) for every rank
/// to have written, and lists the files it sees.
const SHM_SCRIPT: &str = r#"
tag=$1; dir=$2; n=$TASKFOLD_SIZE; r=$TASKFOLD_RANK
wait_all() {
    i=0
    while [ "$(ls "$dir" | grep -c "^$1-")" -lt "$n" ]; do
        i=$((i + 1)); [ "$i" -lt 400 ] || { echo "timed out"; exit 9; }
        sleep 0.05
    done
}
touch "/dev/shm/$tag-$r" && touch "$dir/written-$r" || exit 8
wait_all written
echo "sees:$(ls /dev/shm | grep "^$tag-" | sort | sed 's/^/ /' | tr -d '\n')"
touch "$dir/listed-$r"
wait_all listed
"#;

#[test]
fn dev_shm_is_shared_within_a_node_and_private_to_it() {
    if !namespaces_or_skip("dev_shm_is_shared_within_a_node_and_private_to_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("tf-shm-test-{}", std::process::id());
    let d = dir.path().to_str().unwrap();
    let cmd = launch(
        2,
        4,
        &[],
        Path::new("sh"),
        &["-c", SHM_SCRIPT, "sh", &tag, d],
    );
    let out = run_and_clean(cmd);
    let leaked: Vec<_> = (0..4)
        .map(|r| PathBuf::from(format!("/dev/shm/{tag}-{r}")))
        .collect();
    let on_host: Vec<_> = leaked.iter().filter(|p| p.exists()).collect();
    for p in &on_host {
        let _ = std::fs::remove_file(p);
    }
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        on_host.is_empty(),
        "written to this machine's /dev/shm: {on_host:?}"
    );
    for (r, node) in [(0, [0, 1]), (1, [0, 1]), (2, [2, 3]), (3, [2, 3])] {
        let want = format!("[{r}] sees: {tag}-{} {tag}-{}", node[0], node[1]);
        assert!(t.lines().any(|l| l == want), "{want} in:\n{t}");
    }
}

/// A rank SIGKILLed while the others wait for its contribution: they end
/// with a typed error, the job fails, and no namespace is left.
#[test]
fn namespaces_are_removed_after_a_rank_is_killed() {
    if !namespaces_or_skip("namespaces_are_removed_after_a_rank_is_killed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let args = [
        "--size",
        "65536",
        "--reductions",
        "2",
        "--root",
        "1",
        "--delay",
        "3:60000",
        "--pid-dir",
        d,
        "--allow-lost",
    ];
    let child = start(launch(2, 4, &[], &tf_check(), &args));
    let launcher = child.id();
    let victim = wait_for_pid(&dir.path().join("rank-3.pid"), Duration::from_secs(60));
    signal(victim, Signal::KILL).expect("kill rank 3");
    let killed = Instant::now();
    let out = wait_bounded(child, LIMIT);
    let t = text(&out);
    assert!(
        killed.elapsed() < Duration::from_secs(50),
        "the job waited for the delay:\n{t}"
    );
    // The survivors expected the loss (`--allow-lost`) and exited 0: the
    // job survived it.
    assert!(out.status.success(), "{t}");
    assert!(t.contains("rank 3 killed by signal 9"), "{t}");
    assert!(t.contains("the job survived the loss of rank 3"), "{t}");
    assert_eq!(t.matches(" 0 failed").count(), 3, "{t}");
    let left = namespaces_of(launcher);
    assert!(left.is_empty(), "left behind: {left:?}\n{t}");
}

/// SIGTERM or SIGINT (Ctrl-C) to the launcher stops the ranks, removes
/// the namespaces and ends the job with an error.
#[test]
fn a_signal_to_the_launcher_stops_the_ranks_and_removes_the_nodes() {
    if !namespaces_or_skip("a_signal_to_the_launcher_stops_the_ranks_and_removes_the_nodes") {
        return;
    }
    for (sig, name) in [(Signal::TERM, "SIGTERM"), (Signal::INT, "SIGINT")] {
        let dir = tempfile::tempdir().unwrap();
        let script = format!(
            "echo $$ > {}/rank-$TASKFOLD_RANK.pid; exec sleep 120",
            dir.path().display()
        );
        let child = start(launch(2, 2, &[], Path::new("sh"), &["-c", &script]));
        let launcher = child.id();
        let ranks: Vec<i32> = (0..2)
            .map(|r| {
                wait_for_pid(
                    &dir.path().join(format!("rank-{r}.pid")),
                    Duration::from_secs(60),
                )
            })
            .collect();
        assert_eq!(namespaces_of(launcher).len(), 3, "a switch and two nodes");
        signal(launcher as i32, sig).expect("signal the launcher");
        let out = wait_bounded(child, Duration::from_secs(30));
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{t}");
        assert!(t.contains(&format!("stopped by {name}")), "{t}");
        for pid in ranks {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "rank {pid} still runs:\n{t}"
            );
        }
        assert!(namespaces_of(launcher).is_empty(), "{t}");
    }
}

/// A launcher that died without removing its namespaces: the next one
/// removes their names.
#[test]
fn a_dead_launchers_namespaces_are_removed_by_the_next() {
    if !namespaces_or_skip("a_dead_launchers_namespaces_are_removed_by_the_next") {
        return;
    }
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = format!("tf-{dead}-0-n0");
    let made = Command::new("ip")
        .args(["netns", "add", &stale])
        .status()
        .unwrap();
    assert!(made.success());
    let out = run_and_clean(launch(1, 1, &[], Path::new("true"), &[]));
    assert!(out.status.success(), "{}", text(&out));
    let still = Path::new("/run/netns").join(&stale).exists();
    if still {
        let _ = Command::new("ip")
            .args(["netns", "delete", &stale])
            .status();
    }
    assert!(!still, "{stale} was not removed:\n{}", text(&out));
}

/// `--link-rate` puts a token bucket on each node's link.
#[test]
fn link_rate_limits_each_nodes_link() {
    if !namespaces_or_skip("link_rate_limits_each_nodes_link") {
        return;
    }
    let show = [
        "-c",
        "tc qdisc show dev eth0; echo bind=$TASKFOLD_BIND_HOST",
    ];
    let out = run_and_clean(launch(
        2,
        2,
        &["--link-rate", "20mbit"],
        Path::new("sh"),
        &show,
    ));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for (r, host) in [(0, "198.18.0.1"), (1, "198.18.0.2")] {
        assert!(
            t.lines()
                .any(|l| l.starts_with(&format!("[{r}] qdisc tbf")) && l.contains("rate 20Mbit")),
            "{t}"
        );
        assert!(t.contains(&format!("[{r}] bind={host}")), "{t}");
    }
}

/// Fewer ranks than nodes, a bad node count or a bad rate: refused before
/// anything is made, with a message saying why.
#[test]
fn bad_node_arguments_are_refused_clearly() {
    let refused = |args: &[&str], why: &str| {
        let mut cmd = Command::new(taskfold_bin());
        cmd.arg("run").args(args).args(["--", "true"]);
        let out = run_bounded(cmd, LIMIT);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{t}");
        assert!(t.contains(why), "{why} in:\n{t}");
    };
    refused(
        &["--sim-nodes", "3", "-n", "2"],
        "--sim-nodes 3 needs at least one rank per node: -n 2 is fewer",
    );
    refused(&["--sim-nodes", "0", "-n", "2"], "--sim-nodes <N>");
    refused(
        &["--sim-nodes", "2", "-n", "2", "--link-rate", "fast"],
        "expected a rate",
    );
    refused(&["-n", "2", "--link-rate", "1gbit"], "--sim-nodes <N>");
}

/// Without CAP_NET_ADMIN and CAP_SYS_ADMIN, `--sim-nodes` fails at once and
/// says it needs root.
#[test]
fn nodes_without_root_is_a_clear_error() {
    let mut cmd = if rustix::process::geteuid().is_root() {
        // Root: drop both capabilities from the bounding set (and so from
        // what the launcher gets when executed).
        let mut c = Command::new("setpriv");
        c.args(["--bounding-set", "-net_admin,-sys_admin", "--"])
            .arg(taskfold_bin());
        c
    } else {
        Command::new(taskfold_bin())
    };
    cmd.args(["run", "--sim-nodes", "2", "-n", "2", "--", "true"]);
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("taskfold run: --sim-nodes needs root: making network and mount namespaces needs CAP_NET_ADMIN and CAP_SYS_ADMIN"),
        "{t}"
    );
}

/// The buddy of each rank's original, from the ranks' debug logs
/// (`replica offered rank=rank 2 buddy=rank 0`), as `(owner, buddy)`
/// pairs.
fn offers(t: &str) -> Vec<(u32, u32)> {
    let field = |l: &str, name: &str| -> Option<u32> {
        let at = l.find(&format!(" {name}=rank "))? + name.len() + 7;
        l[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    t.lines()
        .filter(|l| l.contains("replica offered"))
        .filter_map(|l| Some((field(l, "rank")?, field(l, "buddy")?)))
        .collect()
}

/// Two nodes of two ranks, synchronous durability: each rank's copy is on
/// the other node, so that losing both ranks of node 1 after their joins
/// (their copies taken) still ends the reduction exactly at the root, on
/// node 0 with the master.
#[test]
fn a_whole_node_lost_mid_reduction_is_recovered_from_the_other() {
    whole_node_lost(
        "a_whole_node_lost_mid_reduction_is_recovered_from_the_other",
        1 << 20,
    );
}

/// The same with 8-byte contributions: the copies on node 0 are the bytes
/// each offer carried, with no get.
#[test]
fn a_whole_node_lost_is_recovered_from_copies_its_offers_carried() {
    whole_node_lost(
        "a_whole_node_lost_is_recovered_from_copies_its_offers_carried",
        8,
    );
}

/// Ranks 2 and 3 (node 1) killed after their joins of one reduction of
/// `size` bytes a rank to root 1.
fn whole_node_lost(name: &str, size: usize) {
    if !namespaces_or_skip(name) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ds = d.to_str().unwrap();
    let hooks = format!("2:after-join:check-0:{ds};3:after-join:check-0:{ds}");
    // Originals of up to 64 KiB go with their offers to another node.
    let small = size <= 64 << 10;
    let size = size.to_string();
    let args = [
        "--size",
        &size,
        "--reductions",
        "1",
        "--root",
        "1",
        "--delay",
        "0,1:3000",
        "--pid-dir",
        ds,
    ];
    let mut cmd = launch(2, 4, &[], &tf_check(), &args);
    cmd.env("TASKFOLD_DURABILITY", "sync")
        .env("TASKFOLD_TEST_HOOK", &hooks)
        .env("TASKFOLD_FAILURE_TIMEOUT_MS", "1500")
        .env("TASKFOLD_PING_MS", "100")
        .env(
            "RUST_LOG",
            "taskfold::worker::join=debug,taskfold::replica::offer=debug",
        )
        .env("NO_COLOR", "1");
    let child = start(cmd);
    let launcher = child.id();
    for r in [2, 3] {
        taskfold_tests::faults::held(d, &[r], "after-join");
    }
    for r in [2, 3] {
        let pid = wait_for_pid(&d.join(format!("rank-{r}.pid")), Duration::from_secs(60));
        signal(pid, Signal::KILL).expect("kill a rank of node 1");
    }
    let out = wait_bounded(child, LIMIT);
    let t = text(&out);
    for (owner, buddy) in [(2, 0), (3, 0)] {
        assert!(
            offers(&t).contains(&(owner, buddy)),
            "rank {owner}'s copy went to rank {buddy} on the other node: {:?}\n{t}",
            offers(&t)
        );
        let carried = t.lines().any(|l| {
            l.starts_with(&format!("[{buddy}]"))
                && l.contains("replica carried by its offer")
                && l.contains(&format!("owner=rank {owner} "))
        });
        assert_eq!(
            carried, small,
            "rank {owner}'s copy carried by its offer\n{t}"
        );
    }
    // Node 1 gone, the rule is the next live member again.
    assert!(offers(&t).contains(&(0, 1)), "{:?}\n{t}", offers(&t));
    for r in [2, 3] {
        assert!(t.contains(&format!("rank {r} killed by signal 9")), "{t}");
    }
    for r in [0, 1] {
        assert!(
            t.contains(&format!("[{r}] rank {r}: 1 ok, 0 failed")),
            "rank {r}:\n{t}"
        );
    }
    assert!(!t.contains("WRONG"), "{t}");
    let left = namespaces_of(launcher);
    assert!(left.is_empty(), "left behind: {left:?}\n{t}");
}

fn tf_failover() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_failover"))
}

/// A small deterministic generator of kill instants (splitmix64).
fn instant(trial: u64, span_ms: u64) -> Duration {
    let mut z = trial.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    Duration::from_millis((z ^ (z >> 31)) % (span_ms + 1))
}

/// Two nodes of two ranks (0, 1 | 2, 3), synchronous durability: the
/// `victims` are SIGKILLed together at `after` past rank 0's start, while
/// reductions to `root` go on. Rank 2, the lowest rank on the other node,
/// takes over as master; every reduction a victim had made safe ends
/// with the exact sum at the root; the others end with a typed loss; the
/// job goes on over the survivors and `taskfold run` exits 0.
fn master_killed_with_standby(victims: &[u32], root: u32, after: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let root_s = root.to_string();
    let args = [
        "--reductions",
        "40",
        "--pace-ms",
        "25",
        "--root",
        &root_s,
        "--pid-dir",
        d,
    ];
    let mut cmd = launch(2, 4, &[], &tf_failover(), &args);
    cmd.env("TASKFOLD_DURABILITY", "sync");
    let child = start(cmd);
    let launcher = child.id();
    let pids: Vec<i32> = victims
        .iter()
        .map(|v| {
            wait_for_pid(
                &dir.path().join(format!("rank-{v}.pid")),
                Duration::from_secs(60),
            )
        })
        .collect();
    std::thread::sleep(after);
    for pid in pids {
        let _ = signal(pid, Signal::KILL);
    }
    let out = wait_bounded(child, LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "after {after:?}:\n{t}");
    assert!(
        t.contains("taskfold run: rank 0 killed by signal 9 (SIGKILL); the master died: the standby, rank 2, takes over"),
        "{t}"
    );
    let bad = |l: &&str| l.contains("] WRONG") || l.contains("] unexpected");
    assert!(!t.lines().any(|l| bad(&l)), "{t}");
    let survivors: Vec<u32> = (0..4).filter(|r| !victims.contains(r)).collect();
    for &r in &survivors {
        assert!(t.contains(&format!("[{r}] rank {r}: ")), "rank {r}:\n{t}");
        assert!(
            t.contains(&format!("[{r}] final ok over {survivors:?}")),
            "rank {r}:\n{t}"
        );
    }
    // Every reduction whose victims all made their contribution safe
    // ended with the exact sum at the root.
    let safe = |v: &u32, i: u32| t.lines().any(|l| l == format!("[{v}] safe {i}"));
    for i in (0..40).filter(|&i| victims.iter().all(|v| safe(v, i))) {
        let want = format!("[{root}] ok {i}");
        assert!(t.lines().any(|l| l == want), "{want} after {after:?}:\n{t}");
    }
    let left = namespaces_of(launcher);
    assert!(left.is_empty(), "left behind: {left:?}\n{t}");
}

/// The master (rank 0) SIGKILLed at instants drawn over the whole run.
#[test]
fn a_killed_master_is_replaced_by_the_standby_on_another_node() {
    if !namespaces_or_skip("a_killed_master_is_replaced_by_the_standby_on_another_node") {
        return;
    }
    for trial in 0..4 {
        master_killed_with_standby(&[0], 1, instant(trial, 800));
    }
}

/// The master's whole node (ranks 0 and 1) SIGKILLed at once: the
/// standby on the other node takes over, and both victims' safe
/// contributions come from their buddies there.
#[test]
fn the_masters_whole_node_dies_and_the_standby_goes_on() {
    if !namespaces_or_skip("the_masters_whole_node_dies_and_the_standby_goes_on") {
        return;
    }
    for trial in 10..13 {
        master_killed_with_standby(&[0, 1], 3, instant(trial, 800));
    }
}

/// `bench faults` over two simulated nodes of two ranks each, 1 MiB
/// contributions, root 1, with `args`: its JSON reports, once it
/// succeeded. Every report: no wrong result, no hang, every trial
/// killed after its victims' contributions were safe recovered.
fn bench_faults_on_two_nodes(args: &[&str]) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("faults.json");
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["bench", "faults", "--sim-nodes", "2", "--np", "4"])
        .args(["--size", "1M", "--root", "1", "--timeout", "20s"])
        .args(args)
        .arg("--json")
        .arg(&json);
    let out = run_bounded(cmd, LIMIT);
    assert!(out.status.success(), "{}", text(&out));
    let reports: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let reports = reports.as_array().unwrap().clone();
    for r in &reports {
        assert_eq!(r["nodes"], 2, "{r}");
        assert_eq!((&r["wrong"], &r["hangs"]), (&0.into(), &0.into()), "{r}");
        assert_eq!(
            r["after_safe"]["recovered"], r["after_safe"]["trials"],
            "{r}"
        );
    }
    reports
}

/// `bench faults` over two simulated nodes: a whole node (ranks 2 and 3)
/// and the master killed at instants drawn over the reduction, with
/// synchronous durability — every trial after the victims' contributions
/// were safe recovered, none wrong, none hung.
#[test]
fn bench_faults_kills_a_node_and_the_master_across_nodes() {
    if !namespaces_or_skip("bench_faults_kills_a_node_and_the_master_across_nodes") {
        return;
    }
    let reports = bench_faults_on_two_nodes(&[
        "--kill",
        "node,master",
        "--kill-rank",
        "2",
        "--durability",
        "sync",
        "--trials",
        "4",
    ]);
    assert_eq!(reports.len(), 2);
    let victims = |r: &serde_json::Value| r["victims"].clone();
    assert_eq!(
        victims(&reports[0]),
        serde_json::json!([2, 3]),
        "{}",
        reports[0]
    );
    assert_eq!(
        victims(&reports[1]),
        serde_json::json!([0]),
        "{}",
        reports[1]
    );
}

/// `bench faults` over two simulated nodes, asynchronous durability, the
/// master killed at instants drawn over the reduction: once its disk copy
/// is written its contribution outlives it, though the standby on the
/// other node cannot read that disk (rank 1, its node-mate, offers the
/// copy) — every after-safe trial recovered, none wrong, none hung.
#[test]
fn bench_faults_recovers_an_asynchronous_master_across_nodes() {
    if !namespaces_or_skip("bench_faults_recovers_an_asynchronous_master_across_nodes") {
        return;
    }
    let args = [
        "--kill",
        "master",
        "--durability",
        "async",
        "--trials",
        "20",
    ];
    let reports = bench_faults_on_two_nodes(&args);
    assert_eq!(
        reports[0]["victims"],
        serde_json::json!([0]),
        "{}",
        reports[0]
    );
}

/// The pid of the process named `comm` whose environment holds `tag` and
/// `TASKFOLD_RANK=rank` (a rank inside a simulated node is not a child of
/// the launcher).
fn pid_of_rank(tag: &str, rank: u32, comm: &str) -> Option<i32> {
    let want = format!("TASKFOLD_RANK={rank}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let has = |v: &str| env.split(|&b| b == 0).any(|x| x == v.as_bytes());
        (name.trim() == comm && has(tag) && has(&want)).then_some(pid)
    })
}

/// About two seconds of migration on two cores: kill instants drawn over
/// it land in every phase of the run.
const PSDM_JOB: &[&str] = &[
    "--nx",
    "320",
    "--nz",
    "180",
    "--shots",
    "24",
    "--receivers",
    "96",
    "--batch",
    "24",
    "--root",
    "1",
];

/// psdm on two nodes of two ranks, its image's root on rank 1; `kill`:
/// SIGKILL rank 0 (the master) that long after it started. Returns the
/// job's output and its time from rank 0's start to its end.
fn psdm_on_two_nodes(standby: &str, kill: Option<Duration>, tag: &str) -> (Output, Duration) {
    taskfold_bin();
    let psdm = taskfold_tests::psdm_bin();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("psdm.png");
    let mut cmd = launch(2, 4, &[], &psdm, PSDM_JOB);
    cmd.arg("--out").arg(&out);
    cmd.env("TASKFOLD_STANDBY", standby).env("TF_TEST_TAG", tag);
    let child = start(cmd);
    let deadline = Instant::now() + Duration::from_secs(60);
    let tag = format!("TF_TEST_TAG={tag}");
    let pid = loop {
        if let Some(pid) = pid_of_rank(&tag, 0, "psdm") {
            break pid;
        }
        assert!(Instant::now() < deadline, "rank 0 never started");
        std::thread::sleep(Duration::from_millis(2));
    };
    let t = Instant::now();
    if let Some(after) = kill {
        std::thread::sleep(after);
        let _ = signal(pid, Signal::KILL);
    }
    (wait_bounded(child, LIMIT), t.elapsed())
}

fn psdm_checksum(t: &str) -> f64 {
    let line = t.lines().find_map(|l| l.split("psdm: checksum ").nth(1));
    let value = line.and_then(|l| l.split_whitespace().next()?.parse().ok());
    value.unwrap_or_else(|| panic!("no checksum:\n{t}"))
}

/// psdm with `--root 1` on two nodes: rank 0 — the master — SIGKILLed at
/// instants drawn over the run once the job is up. With the standby (the default on
/// several nodes) the job ends with exit code 0 and the failure-free
/// image's checksum every time; without one, every surviving rank ends
/// with `MasterLost` and the job with a non-zero exit code; never a hang.
#[test]
fn psdm_survives_its_master_killed_anywhere_with_a_standby() {
    if !namespaces_or_skip("psdm_survives_its_master_killed_anywhere_with_a_standby") {
        return;
    }
    let (clean, took) = psdm_on_two_nodes("auto", None, "clean");
    let t = text(&clean);
    assert!(clean.status.success(), "{t}");
    let want = psdm_checksum(&t);
    // A run may be quicker than the clean one: a kill that came after
    // rank 0 ended hit nobody, and the trial is drawn again (bounded).
    let killed = |t: &str| t.contains("taskfold run: rank 0 killed by signal 9");
    let mut hits = 0;
    for trial in 0..12 {
        // Over the run once the job is up: a master killed inside the
        // bootstrap (its first milliseconds) leaves no job to take over,
        // and ranks that cannot reach it say so (the Launching chapter).
        let span = took.as_millis() as u64;
        let after = took / 10 + instant(20 + trial, span * 85 / 100);
        let (out, _) = psdm_on_two_nodes("auto", Some(after), &format!("standby-{trial}"));
        let t = text(&out);
        assert!(out.status.success(), "killed after {after:?}:\n{t}");
        let got = psdm_checksum(&t);
        assert!(
            (got - want).abs() <= 1e-5 * want.abs(),
            "{got} vs {want} after {after:?}:\n{t}"
        );
        if killed(&t) {
            assert!(t.contains("the standby, rank 2, takes over"), "{t}");
            hits += 1;
            if hits == 4 {
                break;
            }
        }
    }
    assert_eq!(hits, 4, "the kills kept missing the run");
    for attempt in 0..4u32 {
        let after = took / (3 + attempt);
        let (out, elapsed) =
            psdm_on_two_nodes("off", Some(after), &format!("no-standby-{attempt}"));
        let t = text(&out);
        if !killed(&t) {
            continue;
        }
        assert!(!out.status.success(), "{t}");
        assert!(
            t.contains("taskfold run: rank 0 killed by signal 9 (SIGKILL); the master died"),
            "{t}"
        );
        for r in 1..4 {
            let lost = t
                .lines()
                .any(|l| l.starts_with(&format!("[{r}] ")) && l.contains("master"));
            assert!(lost, "rank {r} did not report the lost master:\n{t}");
        }
        assert!(elapsed < Duration::from_secs(60), "{elapsed:?}:\n{t}");
        return;
    }
    panic!("the kill without a standby kept missing the run");
}
