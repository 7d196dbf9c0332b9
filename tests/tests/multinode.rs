//! Jobs over simulated nodes (`taskfold run --sim-nodes N`): network and mount
//! namespaces on this machine. They need root; a machine where namespaces
//! cannot be made skips these tests with a message, except in CI (`CI`
//! set), where they must run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use taskfold_tests::netns::{launch, namespaces_of, namespaces_or_skip, start};
use taskfold_tests::{run_bounded, signal, taskfold_bin, text, wait_bounded, wait_for_pid, Signal};

const LIMIT: Duration = Duration::from_secs(240);

fn tf_check() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_check"))
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

/// Whether `buddy`'s log says it kept `owner`'s copy from the bytes its
/// offer carried.
fn carried(t: &str, owner: u32, buddy: u32) -> bool {
    t.lines().any(|l| {
        l.starts_with(&format!("[{buddy}]"))
            && l.contains("replica carried by its offer")
            && l.contains(&format!("owner=rank {owner} "))
    })
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
        assert_eq!(
            carried(&t, owner, buddy),
            small,
            "rank {owner}'s copy carried by its offer\n{t}"
        );
    }
    // Node 1 gone, the rule is the next live member again: rank 1, on
    // rank 0's node, which is offered no bytes whatever the size.
    assert!(offers(&t).contains(&(0, 1)), "{:?}\n{t}", offers(&t));
    let offered_bytes = |owner: u32, to: u32, bytes: bool| {
        t.lines().any(|l| {
            l.starts_with(&format!("[{to}]"))
                && l.contains(" replica offer ")
                && l.contains(&format!("owner=rank {owner} "))
                && l.contains(&format!("bytes={bytes}"))
        })
    };
    assert!(offered_bytes(0, 1, false), "rank 0's offer to rank 1\n{t}");
    assert!(
        !offered_bytes(0, 1, true),
        "bytes offered within a node\n{t}"
    );
    assert!(
        !carried(&t, 0, 1),
        "a copy within a node kept from bytes\n{t}"
    );
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
