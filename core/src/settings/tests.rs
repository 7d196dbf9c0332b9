use super::hooks::{Hook, Point, POINTS};
use super::values::*;
use super::*;
use crate::checkpoint::Intervals;
use proptest::prelude::*;
use std::path::PathBuf;
use std::time::Duration;

fn parse(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    Settings::from_pairs(pairs.iter().copied())
}

fn err(pairs: &[(&str, &str)]) -> SettingsError {
    parse(pairs).expect_err("a refused value")
}

#[test]
fn no_variables_are_the_defaults() {
    assert_eq!(parse(&[]).unwrap(), Settings::default());
    let others = [("PATH", "/bin"), ("HOME", "/root"), ("RUST_LOG", "debug")];
    assert_eq!(parse(&others).unwrap(), Settings::default());
    assert!(Settings::default().to_pairs().is_empty());
}

#[test]
fn every_spelling_of_a_boolean() {
    for (text, b) in [
        ("1", true),
        ("0", false),
        ("TRUE", true),
        ("False", false),
        (" on ", true),
        ("OFF", false),
        ("yes", true),
        ("No", false),
    ] {
        assert_eq!(parse_bool(text), Some(b), "{text:?}");
    }
    for bad in ["", "2", "maybe", "o", "offf", "y", "enabled"] {
        assert_eq!(parse_bool(bad), None, "{bad:?}");
    }
}

#[test]
fn sizes() {
    for (text, n) in [
        ("0", 0),
        ("4096", 4096),
        ("512K", 512 << 10),
        ("4M", 4 << 20),
        ("4m", 4 << 20),
        ("1G", 1 << 30),
        ("2GiB", 2 << 30),
        ("3 MB", 3 << 20),
        ("7B", 7),
        ("1T", 1 << 40),
    ] {
        assert_eq!(parse_size(text), Some(n), "{text:?}");
    }
    for bad in [
        "",
        "M",
        "-1",
        "4X",
        "4MiBs",
        "1.5G",
        "99999999999999999999",
        "16777216P",
    ] {
        assert_eq!(parse_size(bad), None, "{bad:?}");
    }
    assert_eq!(format_size(4 << 20), "4M");
    assert_eq!(format_size(1536 << 10), "1536K");
    assert_eq!(format_size(1000), "1000");
    assert_eq!(format_size(0), "0");
}

#[test]
fn the_variables_of_a_job() {
    let s = parse(&[
        ("TASKFOLD_RANK", "1"),
        ("TASKFOLD_SIZE", "4"),
        ("TASKFOLD_RENDEZVOUS", "/shared/master.addr"),
        ("TASKFOLD_PING_MS", "100"),
        ("TASKFOLD_DURABILITY", "SYNC"),
        ("TASKFOLD_BUFFER_POOL", "64M"),
        ("TASKFOLD_SHARED_HEAP", "off"),
        ("TASKFOLD_NOTICE_BOARD", "off"),
        ("TASKFOLD_TRANSPORT", "libfabric"),
        ("TASKFOLD_FI_PROVIDER", "tcp;ofi_rxm"),
        ("TASKFOLD_TCP_THREADS", "0"),
        (
            "TASKFOLD_TEST_HOOK",
            "2:before-fold:check-0:/tmp/x;1:after-join:a:b:/c",
        ),
    ])
    .unwrap();
    let id = s.launch.identity.unwrap();
    assert_eq!((id.rank, id.size, id.launcher), (1, 4, "taskfold"));
    assert_eq!(s.launch.job_name().as_deref(), Some("/shared/master.addr"));
    assert_eq!(s.runtime.ping_period, Duration::from_millis(100));
    assert_eq!(s.runtime.durability, Durability::Sync);
    assert_eq!(s.runtime.buffer_pool, 64 << 20);
    assert!(!s.runtime.buffer_pool_follows_peak);
    assert!(!s.shared_heap && !s.runtime.notice_board);
    assert_eq!(s.transport.kind, TransportKind::Libfabric);
    assert_eq!(s.transport.fi_provider.as_deref(), Some("tcp;ofi_rxm"));
    assert_eq!(s.transport.tcp_threads, Some(0));
    assert_eq!(s.runtime.hooks.len(), 2);
    assert_eq!(s.runtime.hooks[1].dir, PathBuf::from("b:/c"));
    assert!(s.unknown.is_empty());
}

#[test]
fn other_launchers_and_precedence() {
    let id = |pairs: &[(&str, &str)]| parse(pairs).unwrap().launch.identity.unwrap();
    let mpich = id(&[("PMI_RANK", "2"), ("PMI_SIZE", "4")]);
    assert_eq!((mpich.rank, mpich.size, mpich.launcher), (2, 4, "mpich"));
    let ompi = id(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "8")]);
    assert_eq!(ompi.launcher, "openmpi");
    assert_eq!(
        id(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4")]).launcher,
        "slurm"
    );
    let both = id(&[
        ("TASKFOLD_RANK", "1"),
        ("TASKFOLD_SIZE", "2"),
        ("PMI_RANK", "0"),
        ("PMI_SIZE", "9"),
    ]);
    assert_eq!((both.rank, both.launcher), (1, "taskfold"));
    // Half of another launcher's pair is not an identity.
    assert_eq!(parse(&[("PMI_RANK", "1")]).unwrap().launch.identity, None);
}

#[test]
fn bad_identities_name_the_variable() {
    let e = err(&[("PMI_RANK", "4"), ("PMI_SIZE", "4")]);
    assert_eq!(e.name, "PMI_RANK");
    assert!(e.to_string().contains("below PMI_SIZE=4"), "{e}");
    assert_eq!(
        err(&[("PMI_RANK", "x"), ("PMI_SIZE", "4")]).name,
        "PMI_RANK"
    );
    assert_eq!(
        err(&[("PMI_RANK", "0"), ("PMI_SIZE", "0")]).name,
        "PMI_SIZE"
    );
    assert_eq!(err(&[("TASKFOLD_RANK", "0")]).name, "TASKFOLD_RANK");
    assert_eq!(err(&[("TASKFOLD_SIZE", "2")]).name, "TASKFOLD_SIZE");
    // A path holds at most 4,194,304 positions: a larger job is refused.
    let e = err(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4194305")]);
    assert_eq!(e.name, "SLURM_NTASKS");
    assert!(e.to_string().contains("at most 4194304 ranks"), "{e}");
    assert!(parse(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4194304")]).is_ok());
}

#[test]
fn masters() {
    for good in ["127.0.0.1:7000", "node1:7000", "[::1]:7000"] {
        let s = parse(&[("TASKFOLD_MASTER", good)]).unwrap();
        assert_eq!(s.launch.master.as_deref(), Some(good));
    }
    for bad in [
        "not an address",
        "node1",
        ":7000",
        "node1:70000",
        "node1:port",
    ] {
        assert_eq!(
            err(&[("TASKFOLD_MASTER", bad)]).name,
            "TASKFOLD_MASTER",
            "{bad}"
        );
    }
    let s = parse(&[("TASKFOLD_MASTER", "h:1"), ("TASKFOLD_JOB", "x")]).unwrap();
    assert_eq!(s.launch.job_name().as_deref(), Some("x"));
    assert_eq!(parse(&[]).unwrap().launch.job_name(), None);
}

#[test]
fn a_refused_value_is_quoted_and_explained() {
    let e = err(&[("TASKFOLD_PING_MS", "abc")]);
    assert_eq!(
        e.to_string(),
        "TASKFOLD_PING_MS=\"abc\": expected milliseconds, at least 1 (e.g. 250, or with a unit: 250ms, 3s)"
    );
    let long = "x".repeat(1000);
    let e = err(&[("TASKFOLD_DURABILITY", long.as_str())]);
    assert!(e.truncated && e.value.len() == SettingsError::QUOTED, "{e}");
    assert!(e.to_string().len() < 200, "{e}");
    for (name, bad) in [
        ("TASKFOLD_PING_MS", "0"),
        ("TASKFOLD_FAILURE_TIMEOUT_MS", "1.5"),
        ("TASKFOLD_FOLD_THREADS", "0"),
        ("TASKFOLD_TCP_THREADS", "65"),
        ("TASKFOLD_TCP_THREADS", "zero"),
        ("TASKFOLD_BIND_HOST", "node7"),
        ("TASKFOLD_METRICS_ADDR", "127.0.0.1"),
        ("TASKFOLD_TRANSPORT", "carrier-pigeon"),
        ("TASKFOLD_FI_WAIT", "spin"),
        ("TASKFOLD_COMPLETION", "eventually"),
        ("TASKFOLD_TEST_HOOK", "3:nowhere:x:/y"),
        ("TASKFOLD_TEST_HOOK", "bad"),
        ("TASKFOLD_REPLICA_LIMIT", "4Q"),
        ("TASKFOLD_GATHER_MAX", "lots"),
        ("TASKFOLD_GATHER_MAX", "-1"),
        ("TASKFOLD_MAX_REDUCTIONS", "0"),
        ("TASKFOLD_MAX_REDUCTIONS", "16777217"),
    ] {
        let e = err(&[(name, bad)]);
        assert_eq!(e.name, name);
        assert!(e.to_string().starts_with(&format!("{name}={bad:?}")), "{e}");
    }
}

#[cfg(unix)]
#[test]
fn a_value_not_in_utf8_is_refused() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"o\xffn");
    let e = Settings::from_pairs([(std::ffi::OsStr::new("TASKFOLD_NOTICE_BOARD"), bad)])
        .expect_err("refused");
    assert_eq!(e.name, "TASKFOLD_NOTICE_BOARD");
    assert!(!shared_heap_enabled(Some(b"o\xffn")));
}

#[test]
fn blank_values_are_unset_and_the_last_value_wins() {
    assert_eq!(
        parse(&[("TASKFOLD_PING_MS", " ")]).unwrap(),
        Settings::default()
    );
    let s = parse(&[("TASKFOLD_PING_MS", "abc"), ("TASKFOLD_PING_MS", "7")]).unwrap();
    assert_eq!(s.runtime.ping_period, Duration::from_millis(7));
}

#[test]
fn unknown_variables_are_listed_not_refused() {
    let s = parse(&[
        ("TASKFOLD_PING_MZ", "100"),
        ("TASKFOLD_CONFORMANCE_CASE", "1"),
        ("TASKFOLD_POOL_MIB", "64"),
        ("NOT_OURS", "1"),
    ])
    .unwrap();
    assert_eq!(s.unknown, vec!["TASKFOLD_PING_MZ", "TASKFOLD_POOL_MIB"]);
}

#[test]
fn the_shared_heap_switch() {
    for (v, on) in [
        (None, true),
        (Some(&b""[..]), true),
        (Some(b"1"), true),
        (Some(b"on"), true),
        (Some(b"0"), false),
        (Some(b"off"), false),
        (Some(b"OFF"), false),
        (Some(b"false"), false),
        (Some(b"no"), false),
        (Some(b"maybe"), false),
    ] {
        assert_eq!(shared_heap_enabled(v), on, "{v:?}");
    }
    assert_eq!(SHARED_HEAP_VAR.to_str(), Ok("TASKFOLD_SHARED_HEAP"));
    assert_eq!(
        err(&[("TASKFOLD_SHARED_HEAP", "maybe")]).name,
        "TASKFOLD_SHARED_HEAP"
    );
}

#[test]
fn the_job_key() {
    let hex = "0123456789abcdef".repeat(4);
    let s = parse(&[("TASKFOLD_JOB_KEY", hex.as_str())]).unwrap();
    let key = crate::auth::JobKey::from_hex(&hex).unwrap();
    assert_eq!(s.launch.key, Some(KeySource::Value(key)));
    assert!(!s.launch.insecure);
    let s = parse(&[
        ("TASKFOLD_JOB_KEY_FILE", "/run/k"),
        ("TASKFOLD_INSECURE", "1"),
    ])
    .unwrap();
    assert_eq!(s.launch.key, Some(KeySource::File("/run/k".into())));
    assert!(s.launch.insecure);
    // One key, given once.
    let e = err(&[
        ("TASKFOLD_JOB_KEY", hex.as_str()),
        ("TASKFOLD_JOB_KEY_FILE", "/run/k"),
    ]);
    assert_eq!(e.name, "TASKFOLD_JOB_KEY_FILE");
    // A malformed key is refused without being quoted: it may be most of
    // the real one.
    let almost = &hex[..63];
    let e = err(&[("TASKFOLD_JOB_KEY", almost)]).to_string();
    assert!(e.starts_with("TASKFOLD_JOB_KEY="), "{e}");
    assert!(e.contains("64 hexadecimal digits"), "{e}");
    assert!(!e.contains(&almost[..16]), "{e}");
    // Nor is a settings' Debug.
    let s = parse(&[("TASKFOLD_JOB_KEY", hex.as_str())]).unwrap();
    assert!(!format!("{s:?}").contains(&hex[..16]));
    for var in [
        "TASKFOLD_JOB_KEY_FILE",
        "TASKFOLD_JOB_KEY",
        "TASKFOLD_INSECURE",
    ] {
        assert!(launch::MISSING_KEY.contains(var), "{var}");
    }
}

#[test]
fn every_variable_is_in_the_book() {
    let book = include_str!("../../../book/src/configuration.md");
    let names = variables().iter().map(|v| v.name);
    for name in names.chain(OTHER_KNOWN.iter().map(|(n, _)| *n)) {
        assert!(
            book.contains(&format!("`{name}`")),
            "{name} is not in the book"
        );
    }
}

/// Every variable that takes a boolean.
fn booleans() -> Vec<&'static str> {
    variables()
        .iter()
        .filter(|v| v.expected == BOOL_EXPECTED)
        .map(|v| v.name)
        .collect()
}

fn arb_hook() -> impl Strategy<Value = Hook> {
    let at = (
        0u32..64,
        0..POINTS.len(),
        "[a-z0-9-]{0,8}",
        "/[a-z:]{1,8}",
        0usize..16,
    );
    at.prop_map(|(rank, p, id, dir, after)| Hook {
        rank,
        point: POINTS[p],
        // The master's hold at the table counts ranks.
        id: match POINTS[p] {
            Point::Table => after.to_string(),
            _ => id,
        },
        dir: PathBuf::from(dir),
    })
}

fn arb_checkpoint() -> impl Strategy<Value = CheckpointConfig> {
    (
        proptest::option::of("/[a-z]{1,8}"),
        proptest::option::of("/[a-z/]{1,8}"),
        any::<[u8; 4]>(),
        (1u16..=128, 1u16..=128, 1usize..=1000),
        proptest::option::of("[a-z0-9-]{1,12}"),
    )
        .prop_map(
            |(dir, shared, every, (group, parity, keep), job)| CheckpointConfig {
                dir: dir.map(PathBuf::from),
                shared_dir: shared.map(PathBuf::from),
                intervals: Intervals(every.map(u64::from)),
                group,
                parity,
                keep,
                job,
            },
        )
}

fn arb_settings() -> impl Strategy<Value = Settings> {
    let launch = (
        proptest::option::of((1u32..1000, 0..launch::SOURCES.len())),
        proptest::option::of("[a-z][a-z0-9.]{0,10}:[0-9]{1,4}"),
        proptest::option::of("/[a-z/]{1,12}"),
        proptest::option::of("[a-z0-9-]{1,12}"),
        (
            proptest::option::of(any::<[u8; 32]>()),
            proptest::option::of("/[a-z/]{1,12}"),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(id, master, rendezvous, job, (key, key_file, insecure, integrity))| Launch {
                offer: StoreOffer {
                    pmi_fd: rendezvous.is_none().then(|| "9".to_string()),
                    pmix_namespace: master.is_none().then(|| "slurm.pmix.3.0".to_string()),
                },
                identity: id.map(|(size, l)| Identity {
                    rank: size / 2,
                    size,
                    launcher: launch::SOURCES[l].2,
                }),
                master,
                rendezvous: rendezvous.map(PathBuf::from),
                job,
                key: match (key, key_file) {
                    (Some(k), _) => Some(KeySource::Value(crate::auth::JobKey::from_bytes(k))),
                    (None, Some(p)) => Some(KeySource::File(p.into())),
                    (None, None) => None,
                },
                insecure,
                incarnation: id.map_or(0, |(size, _)| size % 3),
                integrity,
                pmi: PmiChoice::NAMES[id.map_or(0, |(size, _)| size as usize % 5)].1,
            },
        );
    let runtime = (
        (1usize..=1024, 0u64..1 << 20, 1u64..1 << 20, 1u64..1 << 20),
        (
            proptest::option::of("/[a-z]{1,8}"),
            0u64..1 << 44,
            0usize..3,
            any::<bool>(),
        ),
        (
            proptest::option::of(0u64..1 << 34),
            any::<bool>(),
            any::<bool>(),
        ),
        proptest::collection::vec(arb_hook(), 0..3),
        arb_checkpoint(),
    )
        .prop_map(|(t, r, pool, hooks, checkpoint)| Config {
            fold_threads: t.0,
            finalize_timeout: Duration::from_millis(t.1),
            ping_period: Duration::from_millis(t.2),
            failure_timeout: Duration::from_millis(t.3),
            replica_dir: r.0.map(PathBuf::from),
            replica_limit: r.1,
            max_reductions: 1 + (r.1 % (1 << 24)) as usize,
            durability: [Durability::Async, Durability::Sync, Durability::Off][r.2],
            completion: [Completion::Result, Completion::Contributed][usize::from(r.3)],
            buffer_pool: pool.0.unwrap_or(Config::default().buffer_pool),
            buffer_pool_follows_peak: pool.0.is_none(),
            buffer_pool_prefill: pool.1,
            notice_board: pool.2,
            gather_max: pool.0.unwrap_or(0) >> 10 << 10,
            hooks,
            checkpoint,
            respawn: crate::settings::RespawnConfig {
                budget: (t.1 % 5) as u32,
                spares: (t.1 % 3) as u32,
                wait: Duration::from_millis(t.2),
                restart: [Restart::Local, Restart::Global][usize::from(r.3)],
            },
            ..Config::default()
        });
    let transport = (
        any::<bool>(),
        proptest::option::of("[a-z;_]{1,12}"),
        any::<bool>(),
        proptest::option::of(any::<[u8; 4]>()),
        proptest::option::of(0usize..=64),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(lf, prov, auto, ip, threads, loans, rings)| TransportSettings {
                kind: if lf {
                    TransportKind::Libfabric
                } else {
                    TransportKind::Tcp
                },
                fi_provider: prov,
                fi_wait: if auto { FiWait::Auto } else { FiWait::Poll },
                bind_host: ip.map(std::net::IpAddr::from),
                tcp_threads: threads,
                tcp_loans: loans,
                tcp_rings: rings,
            },
        );
    let metrics = proptest::option::of((any::<[u8; 4]>(), any::<u16>()))
        .prop_map(|a| a.map(SocketAddr::from));
    (launch, runtime, transport, metrics, any::<bool>()).prop_map(
        |(launch, runtime, transport, metrics_addr, shared_heap)| Settings {
            launch,
            runtime,
            transport,
            metrics_addr,
            shared_heap,
            unknown: Vec::new(),
            unknown_warned: false,
        },
    )
}

proptest! {
    /// Settings printed as variables and parsed back are the same settings.
    #[test]
    fn every_variable_round_trips(s in arb_settings()) {
        let pairs = s.to_pairs();
        let back = Settings::from_pairs(pairs.iter().map(|(k, v)| (*k, v)));
        prop_assert_eq!(back, Ok(s));
    }

    /// `0`, `false`, `off`, `no` in any case mean off for every boolean, and
    /// their opposites on; anything else is refused, naming the variable.
    #[test]
    fn every_boolean_reads_every_spelling(
        which in 0usize..6,
        word in 0usize..4,
        upper in proptest::collection::vec(any::<bool>(), 5),
        junk in "[a-z2-9]{1,6}",
    ) {
        let names = booleans();
        prop_assert_eq!(names.len(), 6);
        let name = names[which];
        let case = |w: &str| -> String {
            w.chars().zip(upper.iter().cycle()).map(|(c, u)| {
                if *u { c.to_ascii_uppercase() } else { c }
            }).collect()
        };
        let off = case(["0", "false", "off", "no"][word]);
        let on = case(["1", "true", "on", "yes"][word]);
        let parsed = |v: &str| -> Settings { parse(&[(name, v)]).expect("a boolean") };
        let field = |s: &Settings| -> bool {
            match name {
                "TASKFOLD_POOL_PREFILL" => s.runtime.buffer_pool_prefill,
                "TASKFOLD_NOTICE_BOARD" => s.runtime.notice_board,
                "TASKFOLD_SHARED_HEAP" => s.shared_heap,
                "TASKFOLD_TCP_CMA" => s.transport.tcp_loans,
                "TASKFOLD_TCP_RINGS" => s.transport.tcp_rings,
                "TASKFOLD_INSECURE" => s.launch.insecure,
                other => panic!("unexpected boolean {other}"),
            }
        };
        prop_assert!(!field(&parsed(&off)), "{}={}", name, off);
        prop_assert!(field(&parsed(&on)), "{}={}", name, on);
        if parse_bool(&junk).is_none() {
            prop_assert_eq!(parse(&[(name, junk.as_str())]).unwrap_err().name, name);
        }
        if name == "TASKFOLD_SHARED_HEAP" {
            prop_assert!(!shared_heap_enabled(Some(off.as_bytes())));
            prop_assert!(shared_heap_enabled(Some(on.as_bytes())));
        }
    }

    /// A bad value of any variable names that variable.
    #[test]
    fn bad_values_name_the_variable(which in 0usize..37, junk in "[%@!]{1,80}") {
        let var = &variables()[which];
        // Paths and names accept any text.
        let free = ["TASKFOLD_RENDEZVOUS", "TASKFOLD_JOB", "TASKFOLD_REPLICA_DIR",
                    "TASKFOLD_FI_PROVIDER", "TASKFOLD_JOB_KEY_FILE", "TASKFOLD_CHECKPOINT_DIR",
                    "TASKFOLD_CHECKPOINT_SHARED_DIR", "TASKFOLD_CHECKPOINT_JOB"];
        prop_assume!(!free.contains(&var.name));
        let e = parse(&[(var.name, junk.as_str())]).unwrap_err();
        prop_assert_eq!(&e.name, var.name);
        prop_assert!(e.to_string().starts_with(var.name));
        if SECRETS.contains(&var.name) {
            prop_assert!(!e.to_string().contains(junk.as_str()));
        } else {
            prop_assert_eq!(e.truncated, junk.chars().count() > SettingsError::QUOTED);
        }
    }
}

#[test]
fn the_checkpoint_variables() {
    let s = parse(&[
        ("TASKFOLD_CHECKPOINT_DIR", "/l1"),
        ("TASKFOLD_CHECKPOINT_SHARED_DIR", "/pfs/job"),
        ("TASKFOLD_CHECKPOINT_L1", "1"),
        ("TASKFOLD_CHECKPOINT_L2", "2"),
        ("TASKFOLD_CHECKPOINT_L3", "0"),
        ("TASKFOLD_CHECKPOINT_L4", " 10 "),
        ("TASKFOLD_CHECKPOINT_GROUP", "8"),
        ("TASKFOLD_CHECKPOINT_PARITY", "3"),
        ("TASKFOLD_CHECKPOINT_KEEP", "5"),
        ("TASKFOLD_CHECKPOINT_JOB", "climate-42"),
    ])
    .unwrap();
    let c = &s.runtime.checkpoint;
    assert_eq!(c.dir.as_deref(), Some(std::path::Path::new("/l1")));
    assert_eq!(
        c.shared_dir.as_deref(),
        Some(std::path::Path::new("/pfs/job"))
    );
    assert_eq!(c.intervals, Intervals([1, 2, 0, 10]));
    assert_eq!((c.group, c.parity, c.keep), (8, 3, 5));
    assert_eq!(c.job.as_deref(), Some("climate-42"));
    assert_eq!(
        Settings::default().runtime.checkpoint.intervals,
        Intervals([1, 0, 0, 1])
    );
    for (name, bad) in [
        ("TASKFOLD_CHECKPOINT_GROUP", "0"),
        ("TASKFOLD_CHECKPOINT_GROUP", "129"),
        ("TASKFOLD_CHECKPOINT_PARITY", "0"),
        ("TASKFOLD_CHECKPOINT_KEEP", "0"),
        ("TASKFOLD_CHECKPOINT_L2", "-1"),
        ("TASKFOLD_CHECKPOINT_L4", "often"),
    ] {
        assert_eq!(err(&[(name, bad)]).name, name, "{name}={bad}");
    }
}

#[test]
fn the_test_hook_grammar() {
    let h = hooks::parse("2:before-fold:check-0:/tmp/x;;1:disk-written:f:/d").unwrap();
    assert_eq!(h.len(), 2);
    assert_eq!(h[0].point, Point::BeforeFold);
    assert_eq!((h[1].rank, h[1].id.as_str()), (1, "f"));
    assert_eq!(hooks::parse("1:after-join:a"), None);
    // The master's hold while it hands out the table counts ranks.
    let t = hooks::parse("0:table:2:/d").unwrap();
    assert_eq!((t[0].point, t[0].id.as_str()), (Point::Table, "2"));
    assert_eq!(hooks::parse("0:table:two:/d"), None);
    assert_eq!(
        hooks::format(&h).as_deref(),
        Some("2:before-fold:check-0:/tmp/x;1:disk-written:f:/d")
    );
}

#[test]
fn results_are_kept_with_replacements_and_copied_twice_from_two() {
    let with = |budget: u32, spares: u32, restart: Restart| Config {
        respawn: RespawnConfig {
            budget,
            spares,
            restart,
            ..RespawnConfig::default()
        },
        ..Config::default()
    };
    let cases = [
        (with(0, 0, Restart::Local), (false, false)),
        (with(1, 0, Restart::Local), (true, false)),
        (with(1, 1, Restart::Local), (true, true)),
        (with(3, 0, Restart::Local), (true, true)),
        (with(3, 0, Restart::Global), (true, true)),
    ];
    for (c, want) in cases {
        assert_eq!(
            (c.keeps_results(), c.second_result_copies()),
            want,
            "{:?}",
            c.respawn
        );
    }
    // Copies beyond the holder's: one fewer than the replacements, at
    // most two.
    for (budget, spares, further) in [
        (0, 0, 0),
        (1, 0, 0),
        (2, 0, 1),
        (1, 2, 2),
        (3, 0, 2),
        (9, 0, 2),
    ] {
        let c = with(budget, spares, Restart::Local);
        assert_eq!(c.further_result_copies(), further, "{:?}", c.respawn);
    }
}
