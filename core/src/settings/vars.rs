//! The table of variables: each one's name, what it accepts, and how it
//! sets and prints its field of [`Settings`].

use super::values::{self, Named, BOOL_EXPECTED, SIZE_EXPECTED};
use super::{launch, Settings};
use std::ffi::{OsStr, OsString};
use std::time::Duration;

/// One `TASKFOLD_*` variable that a setting reads.
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// What it accepts (quoted in errors).
    pub expected: &'static str,
    /// Sets the field from a (non-blank) value; `Err` if the value is bad.
    pub set: fn(&mut Settings, &OsStr) -> Result<(), ()>,
    /// The value that sets the field as it is in these settings (`None`:
    /// unset, or not expressible as a value).
    pub get: fn(&Settings) -> Option<OsString>,
}

/// `TASKFOLD_*` variables that are not settings of a runtime but are known
/// (no warning): `(name, who reads it)`.
pub const OTHER_KNOWN: &[(&str, &str)] = &[
    ("TASKFOLD_RANK", "the launch identity (with TASKFOLD_SIZE)"),
    ("TASKFOLD_SIZE", "the launch identity (with TASKFOLD_RANK)"),
    (
        "TASKFOLD_CONFIG",
        "the settings file (see taskfold_core::settings::sources)",
    ),
    (
        "TASKFOLD_RUN_CHECKED",
        "set by taskfold run for its ranks: it warned about unknown variables once for the job",
    ),
    (
        "TASKFOLD_TEST_HOOK",
        "tests only, in builds with the cargo feature test-hooks: hold a rank at a point of a \
         reduction (taskfold_core::settings::hooks)",
    ),
    (
        "TASKFOLD_CONFORMANCE_CASE",
        "the libfabric conformance test: marks the child process that runs one case",
    ),
];

/// Every variable a setting reads, by concern.
pub fn variables() -> &'static [Variable] {
    &VARIABLES
}

fn text(v: &OsStr) -> Result<&str, ()> {
    v.to_str().map(str::trim).ok_or(())
}

fn boolean(v: &OsStr) -> Result<bool, ()> {
    values::parse_bool(text(v)?).ok_or(())
}

fn millis(v: &OsStr, min: u64) -> Result<Duration, ()> {
    values::parse_millis(text(v)?)
        .filter(|d| d.as_millis() >= u128::from(min))
        .ok_or(())
}

fn size(v: &OsStr) -> Result<u64, ()> {
    values::parse_size(text(v)?).ok_or(())
}

fn named<T: Named>(v: &OsStr) -> Result<T, ()> {
    T::parse(text(v)?).ok_or(())
}

/// What a duration of at least a millisecond accepts.
const MILLIS_AT_LEAST_1: &str = "milliseconds, at least 1 (e.g. 250, or with a unit: 250ms, 3s)";

/// What a level's interval accepts.
const INTERVAL_EXPECTED: &str =
    "a whole number of versions (every N-th version; 0 turns the level off)";

/// An L3 group's data or parity shards: 1 to 128 (so that `k + m` stays
/// within a piece's bound on shards).
fn shards(v: &OsStr) -> Result<u16, ()> {
    let n = values::parse_u64(text(v)?).filter(|n| (1..=128).contains(n));
    Ok(n.ok_or(())? as u16)
}

fn show(s: impl ToString) -> Option<OsString> {
    Some(s.to_string().into())
}

static VARIABLES: [Variable; 47] = [
    // Launch (rank and size: see `launch::identity`).
    Variable {
        name: "TASKFOLD_MASTER",
        expected: launch::MASTER_EXPECTED,
        set: |s, v| {
            let m = text(v).ok().filter(|m| launch::valid_master(m)).ok_or(())?;
            s.launch.master = Some(m.to_string());
            Ok(())
        },
        get: |s| s.launch.master.as_ref().and_then(show),
    },
    Variable {
        name: "TASKFOLD_RENDEZVOUS",
        expected: "a file path",
        set: |s, v| {
            s.launch.rendezvous = Some(v.into());
            Ok(())
        },
        get: |s| s.launch.rendezvous.as_ref().map(|p| p.into()),
    },
    Variable {
        name: "TASKFOLD_JOB",
        expected: "any text in UTF-8",
        set: |s, v| {
            s.launch.job = Some(v.to_str().ok_or(())?.to_string());
            Ok(())
        },
        get: |s| s.launch.job.as_ref().and_then(show),
    },
    Variable {
        name: "TASKFOLD_JOB_KEY",
        expected: crate::auth::KEY_EXPECTED,
        set: |s, v| {
            let key = crate::auth::JobKey::from_hex(v.to_str().ok_or(())?).ok_or(())?;
            s.launch.key = Some(launch::KeySource::Value(key));
            Ok(())
        },
        get: |s| match &s.launch.key {
            Some(launch::KeySource::Value(k)) => show(k.to_hex()),
            _ => None,
        },
    },
    Variable {
        name: "TASKFOLD_JOB_KEY_FILE",
        expected: "a file path (unset when TASKFOLD_JOB_KEY is set)",
        set: |s, v| {
            if matches!(s.launch.key, Some(launch::KeySource::Value(_))) {
                return Err(());
            }
            s.launch.key = Some(launch::KeySource::File(v.into()));
            Ok(())
        },
        get: |s| match &s.launch.key {
            Some(launch::KeySource::File(p)) => Some(p.into()),
            _ => None,
        },
    },
    Variable {
        name: "TASKFOLD_INSECURE",
        expected: BOOL_EXPECTED,
        set: |s, v| {
            s.launch.insecure = boolean(v)?;
            Ok(())
        },
        get: |s| show(values::format_bool(s.launch.insecure)),
    },
    Variable {
        name: "TASKFOLD_INTEGRITY",
        expected: "`off` or `mac`",
        set: |s, v| {
            s.launch.integrity = match text(v)? {
                "off" => false,
                "mac" => true,
                _ => return Err(()),
            };
            Ok(())
        },
        get: |s| show(if s.launch.integrity { "mac" } else { "off" }),
    },
    Variable {
        name: "TASKFOLD_INCARNATION",
        expected: "a whole number from 0 to 1048576",
        set: |s, v| {
            let n = values::parse_u64(text(v)?)
                .filter(|n| *n <= u64::from(super::respawn::MAX_INCARNATION));
            s.launch.incarnation = n.ok_or(())? as u32;
            Ok(())
        },
        get: |s| show(s.launch.incarnation),
    },
    Variable {
        name: "TASKFOLD_PMI",
        expected: <super::PmiChoice as Named>::EXPECTED,
        set: |s, v| {
            s.launch.pmi = named(v)?;
            Ok(())
        },
        get: |s| show(s.launch.pmi.name()),
    },
    // The runtime: folds, failure detection, durability.
    Variable {
        name: "TASKFOLD_FOLD_THREADS",
        expected: "a number of threads from 1 to 1024",
        set: |s, v| {
            let n = values::parse_u64(text(v)?).filter(|n| (1..=1024).contains(n));
            s.runtime.fold_threads = n.ok_or(())? as usize;
            Ok(())
        },
        get: |s| show(s.runtime.fold_threads),
    },
    Variable {
        name: "TASKFOLD_FINALIZE_TIMEOUT_MS",
        expected: "milliseconds (e.g. 120000, or with a unit: 2m)",
        set: |s, v| {
            s.runtime.finalize_timeout = millis(v, 0)?;
            Ok(())
        },
        get: |s| show(values::format_millis(s.runtime.finalize_timeout)),
    },
    Variable {
        name: "TASKFOLD_PING_MS",
        expected: MILLIS_AT_LEAST_1,
        set: |s, v| {
            s.runtime.ping_period = millis(v, 1)?;
            Ok(())
        },
        get: |s| show(values::format_millis(s.runtime.ping_period)),
    },
    Variable {
        name: "TASKFOLD_FAILURE_TIMEOUT_MS",
        expected: MILLIS_AT_LEAST_1,
        set: |s, v| {
            s.runtime.failure_timeout = millis(v, 1)?;
            Ok(())
        },
        get: |s| show(values::format_millis(s.runtime.failure_timeout)),
    },
    Variable {
        name: "TASKFOLD_DURABILITY",
        expected: <super::Durability as Named>::EXPECTED,
        set: |s, v| {
            s.runtime.durability = named(v)?;
            Ok(())
        },
        get: |s| show(s.runtime.durability.name()),
    },
    Variable {
        name: "TASKFOLD_STANDBY",
        expected: <super::Standby as Named>::EXPECTED,
        set: |s, v| {
            s.runtime.standby = named(v)?;
            Ok(())
        },
        get: |s| show(s.runtime.standby.name()),
    },
    Variable {
        name: "TASKFOLD_RESPAWN",
        expected: "a whole number of replacements from 0 to 1048576",
        set: |s, v| {
            let n = values::parse_u64(text(v)?)
                .filter(|n| *n <= u64::from(super::respawn::MAX_INCARNATION));
            s.runtime.respawn.budget = n.ok_or(())? as u32;
            Ok(())
        },
        get: |s| show(s.runtime.respawn.budget),
    },
    Variable {
        name: "TASKFOLD_SPARES",
        expected: "a whole number of spare processes from 0 to 1048576",
        set: |s, v| {
            let n = values::parse_u64(text(v)?)
                .filter(|n| *n <= u64::from(super::respawn::MAX_INCARNATION));
            s.runtime.respawn.spares = n.ok_or(())? as u32;
            Ok(())
        },
        get: |s| show(s.runtime.respawn.spares),
    },
    Variable {
        name: "TASKFOLD_RESPAWN_WAIT_MS",
        expected: MILLIS_AT_LEAST_1,
        set: |s, v| {
            s.runtime.respawn.wait = millis(v, 1)?;
            Ok(())
        },
        get: |s| show(values::format_millis(s.runtime.respawn.wait)),
    },
    Variable {
        name: "TASKFOLD_RESTART",
        expected: <super::Restart as Named>::EXPECTED,
        set: |s, v| {
            s.runtime.respawn.restart = named(v)?;
            Ok(())
        },
        get: |s| show(s.runtime.respawn.restart.name()),
    },
    Variable {
        name: "TASKFOLD_COMPLETION",
        expected: <super::Completion as Named>::EXPECTED,
        set: |s, v| {
            s.runtime.completion = named(v)?;
            Ok(())
        },
        get: |s| show(s.runtime.completion.name()),
    },
    Variable {
        name: "TASKFOLD_REPLICA_DIR",
        expected: "a directory path",
        set: |s, v| {
            s.runtime.replica_dir = Some(v.into());
            Ok(())
        },
        get: |s| s.runtime.replica_dir.as_ref().map(|p| p.into()),
    },
    Variable {
        name: "TASKFOLD_REPLICA_LIMIT",
        expected: SIZE_EXPECTED,
        set: |s, v| {
            s.runtime.replica_limit = size(v)?;
            Ok(())
        },
        get: |s| show(values::format_size(s.runtime.replica_limit)),
    },
    Variable {
        name: "TASKFOLD_MAX_REDUCTIONS",
        expected: "a number of reductions from 1 to 16777216",
        set: |s, v| {
            let n = values::parse_u64(text(v)?)
                .filter(|n| (1..=super::config::MAX_MAX_REDUCTIONS).contains(n));
            s.runtime.max_reductions = n.ok_or(())? as usize;
            Ok(())
        },
        get: |s| show(s.runtime.max_reductions),
    },
    // Buffers and the notice board.
    Variable {
        name: "TASKFOLD_BUFFER_POOL",
        expected: SIZE_EXPECTED,
        set: |s, v| {
            // An explicit bound is a bound: it does not follow the peak.
            s.runtime.buffer_pool = size(v)?;
            s.runtime.buffer_pool_follows_peak = false;
            Ok(())
        },
        get: |s| {
            let bound = !s.runtime.buffer_pool_follows_peak;
            bound.then(|| values::format_size(s.runtime.buffer_pool).into())
        },
    },
    Variable {
        name: "TASKFOLD_POOL_PREFILL",
        expected: BOOL_EXPECTED,
        set: |s, v| {
            s.runtime.buffer_pool_prefill = boolean(v)?;
            Ok(())
        },
        get: |s| show(values::format_bool(s.runtime.buffer_pool_prefill)),
    },
    Variable {
        name: "TASKFOLD_NOTICE_BOARD",
        expected: BOOL_EXPECTED,
        set: |s, v| {
            s.runtime.notice_board = boolean(v)?;
            Ok(())
        },
        get: |s| show(values::format_bool(s.runtime.notice_board)),
    },
    Variable {
        name: "TASKFOLD_GATHER_MAX",
        expected: SIZE_EXPECTED,
        set: |s, v| {
            s.runtime.gather_max = size(v)?;
            Ok(())
        },
        get: |s| show(values::format_size(s.runtime.gather_max)),
    },
    Variable {
        name: "TASKFOLD_SHARED_HEAP",
        expected: BOOL_EXPECTED,
        set: |s, v| {
            s.shared_heap = boolean(v)?;
            Ok(())
        },
        get: |s| show(values::format_bool(s.shared_heap)),
    },
    // Checkpoints.
    Variable {
        name: "TASKFOLD_CHECKPOINT_DIR",
        expected: "a directory path",
        set: |s, v| {
            s.runtime.checkpoint.dir = Some(v.into());
            Ok(())
        },
        get: |s| s.runtime.checkpoint.dir.as_ref().map(|p| p.into()),
    },
    Variable {
        name: "TASKFOLD_CHECKPOINT_SHARED_DIR",
        expected: "a directory path",
        set: |s, v| {
            s.runtime.checkpoint.shared_dir = Some(v.into());
            Ok(())
        },
        get: |s| s.runtime.checkpoint.shared_dir.as_ref().map(|p| p.into()),
    },
    Variable {
        name: "TASKFOLD_CHECKPOINT_L1",
        expected: INTERVAL_EXPECTED,
        set: |s, v| {
            s.runtime.checkpoint.intervals.0[0] = values::parse_u64(text(v)?).ok_or(())?;
            Ok(())
        },
        get: |s| show(s.runtime.checkpoint.intervals.0[0]),
    },
    Variable {
        name: "TASKFOLD_CHECKPOINT_L2",
        expected: INTERVAL_EXPECTED,
        set: |s, v| {
            s.runtime.checkpoint.intervals.0[1] = values::parse_u64(text(v)?).ok_or(())?;
            Ok(())
        },
        get: |s| show(s.runtime.checkpoint.intervals.0[1]),
    },
    Variable {
        name: "TASKFOLD_CHECKPOINT_L3",
        expected: INTERVAL_EXPECTED,
        set: |s, v| {
            s.runtime.checkpoint.intervals.0[2] = values::parse_u64(text(v)?).ok_or(())?;
            Ok(())
        },
        get: |s| show(s.runtime.checkpoint.intervals.0[2]),
    },
    Variable {
        name: "TASKFOLD_CHECKPOINT_L4",
        expected: INTERVAL_EXPECTED,
        set: |s, v| {
            s.runtime.checkpoint.intervals.0[3] = values::parse_u64(text(v)?).ok_or(())?;
            Ok(())
        },
        get: |s| show(s.runtime.checkpoint.intervals.0[3]),
    },
    Variable {
        name: "TASKFOLD_CHECKPOINT_GROUP",
        expected: "a number of ranks from 1 to 128",
        set: |s, v| {
            s.runtime.checkpoint.group = shards(v)?;
            Ok(())
        },
        get: |s| show(s.runtime.checkpoint.group),
    },
    Variable {
        name: "TASKFOLD_CHECKPOINT_PARITY",
        expected: "a number of parity pieces from 1 to 128",
        set: |s, v| {
            s.runtime.checkpoint.parity = shards(v)?;
            Ok(())
        },
        get: |s| show(s.runtime.checkpoint.parity),
    },
    Variable {
        name: "TASKFOLD_CHECKPOINT_KEEP",
        expected: "a number of versions from 1 to 1000",
        set: |s, v| {
            let n = values::parse_u64(text(v)?).filter(|n| (1..=1000).contains(n));
            s.runtime.checkpoint.keep = n.ok_or(())? as usize;
            Ok(())
        },
        get: |s| show(s.runtime.checkpoint.keep),
    },
    Variable {
        name: "TASKFOLD_CHECKPOINT_JOB",
        expected: "any text in UTF-8",
        set: |s, v| {
            s.runtime.checkpoint.job = Some(v.to_str().ok_or(())?.to_string());
            Ok(())
        },
        get: |s| s.runtime.checkpoint.job.as_ref().and_then(show),
    },
    // The transport.
    Variable {
        name: "TASKFOLD_TRANSPORT",
        expected: <super::TransportKind as Named>::EXPECTED,
        set: |s, v| {
            s.transport.kind = named(v)?;
            Ok(())
        },
        get: |s| show(s.transport.kind.name()),
    },
    Variable {
        name: "TASKFOLD_FI_PROVIDER",
        expected: "a libfabric provider name (e.g. tcp;ofi_rxm, shm)",
        set: |s, v| {
            s.transport.fi_provider = Some(text(v)?.to_string());
            Ok(())
        },
        get: |s| s.transport.fi_provider.as_ref().and_then(show),
    },
    Variable {
        name: "TASKFOLD_FI_WAIT",
        expected: <super::FiWait as Named>::EXPECTED,
        set: |s, v| {
            s.transport.fi_wait = named(v)?;
            Ok(())
        },
        get: |s| show(s.transport.fi_wait.name()),
    },
    Variable {
        name: "TASKFOLD_BIND_HOST",
        expected: "an IP address of this node (e.g. 10.0.0.5, or 0.0.0.0)",
        set: |s, v| {
            s.transport.bind_host = Some(text(v)?.parse().map_err(|_| ())?);
            Ok(())
        },
        get: |s| s.transport.bind_host.as_ref().and_then(show),
    },
    Variable {
        name: "TASKFOLD_TCP_THREADS",
        expected: "a number of threads from 0 to 64",
        set: |s, v| {
            let n = values::parse_u64(text(v)?).filter(|n| *n <= 64).ok_or(())?;
            s.transport.tcp_threads = Some(n as usize);
            Ok(())
        },
        get: |s| s.transport.tcp_threads.and_then(show),
    },
    Variable {
        name: "TASKFOLD_TCP_CMA",
        expected: BOOL_EXPECTED,
        set: |s, v| {
            s.transport.tcp_loans = boolean(v)?;
            Ok(())
        },
        get: |s| show(values::format_bool(s.transport.tcp_loans)),
    },
    Variable {
        name: "TASKFOLD_TCP_RINGS",
        expected: BOOL_EXPECTED,
        set: |s, v| {
            s.transport.tcp_rings = boolean(v)?;
            Ok(())
        },
        get: |s| show(values::format_bool(s.transport.tcp_rings)),
    },
    // Observability.
    Variable {
        name: "TASKFOLD_LOG",
        expected: <super::LogLevel as Named>::EXPECTED,
        set: |s, v| {
            s.runtime.log = named(v)?;
            Ok(())
        },
        get: |s| show(s.runtime.log.name()),
    },
    Variable {
        name: "TASKFOLD_METRICS_ADDR",
        expected: "an address with a port (e.g. 127.0.0.1:9100)",
        set: |s, v| {
            s.metrics_addr = Some(text(v)?.parse().map_err(|_| ())?);
            Ok(())
        },
        get: |s| s.metrics_addr.as_ref().and_then(show),
    },
];
