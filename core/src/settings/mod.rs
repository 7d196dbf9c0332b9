//! Every setting of a taskfold process, in one typed value: [`Settings`].
//!
//! The `TASKFOLD_*` environment variables (and the rank, size and
//! key-value store that `mpiexec`, `mpirun` and `srun` set) are parsed here, once, by a pure
//! function of `(name, value)` pairs ([`Settings::from_pairs`]); the
//! process environment is read in one place only, [`Settings::from_env`].
//! The runtime, its transports, the launcher and the applications take the
//! parsed values from there.
//!
//! - Booleans accept `1`/`0`, `true`/`false`, `on`/`off`, `yes`/`no` in any
//!   case; durations are whole milliseconds; sizes are bytes with an
//!   optional binary unit (`512K`, `4M`, `1G`); choices are named (`sync`,
//!   `libfabric`, ...), in any case. A value that is empty or only
//!   whitespace counts as unset.
//! - A bad value is a [`SettingsError`] naming the variable, the value (its
//!   first 64 characters) and what was expected: the process does not start.
//! - A `TASKFOLD_*` variable that no setting reads is not refused (it may
//!   belong to a newer or older version) but listed in
//!   [`Settings::unknown`], and the runtime warns about each (a typo
//!   protection).
//!
//! One setting is read before `main` may run: the shared heap, a global
//! allocator, decides on its first large allocation whether it is on
//! ([`shared_heap_enabled`], with the same boolean parser, without
//! allocating). [`Settings::shared_heap`] is the same variable parsed here,
//! so that a bad value still stops the start.
//!
//! An optional settings file (`taskfold.toml`, or `TASKFOLD_CONFIG`) holds
//! the same settings under the variables' names without `TASKFOLD_`, in
//! lower case; the environment wins over it ([`sources`], which also says
//! where each value came from, for `taskfold config`). Test hooks
//! (`TASKFOLD_TEST_HOOK`) are no setting of the table: they exist with the
//! cargo feature `test-hooks` only, and are refused without it.
//!
//! The book's Configuration chapter lists every variable with its type and
//! default.

pub mod checkpoint;
pub mod config;
#[cfg(feature = "test-hooks")]
pub mod hooks;
pub mod launch;
pub mod pmi;
pub mod respawn;
pub mod sources;
pub mod values;
mod vars;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_sources;

pub use checkpoint::CheckpointConfig;
pub use config::{Completion, Config, Durability, LogLevel, Standby};
pub use launch::{Identity, KeySource, Launch};
pub use pmi::{Discovery, PmiChoice, Protocol, StoreOffer};
pub use respawn::{RespawnConfig, Restart};
pub use sources::{Loaded, Source};
pub use values::{parse_bool, Named};
pub use vars::{variables, Variable, OTHER_KNOWN};

use std::collections::BTreeMap;
use std::ffi::{CStr, OsStr, OsString};
use std::net::{IpAddr, SocketAddr};

/// Every setting of a taskfold process (see the [module documentation](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Rank, size, master and job.
    pub launch: Launch,
    /// The runtime's tunables: durability, failure detection, replicas,
    /// buffer pool, notice board (and test hooks, with the feature).
    pub runtime: Config,
    /// Which transport, and how it runs.
    pub transport: TransportSettings,
    /// Where Prometheus metrics are served (`TASKFOLD_METRICS_ADDR`; each
    /// rank adds its rank to the port). `None`: no exporter.
    pub metrics_addr: Option<SocketAddr>,
    /// Whether the shared heap is on (`TASKFOLD_SHARED_HEAP`, default on).
    /// The heap reads the variable itself, before `main` may run (see
    /// [`shared_heap_enabled`]): this field reports what it decided for a
    /// program that installs it, and setting it has no effect on the heap.
    pub shared_heap: bool,
    /// `TASKFOLD_*` variables that no setting reads (warned about, never
    /// refused). Not a setting: [`Settings::to_pairs`] ignores it.
    pub unknown: Vec<String>,
    /// The launcher already warned about [`Settings::unknown`], once for
    /// the job (`taskfold run` sets `TASKFOLD_RUN_CHECKED` for its ranks):
    /// a runtime does not warn again. Not a setting either.
    pub unknown_warned: bool,
}

/// The test hooks' variable: read in builds with the cargo feature
/// `test-hooks`, refused in any other ([`NO_TEST_HOOKS`]).
pub const TEST_HOOK_VAR: &str = "TASKFOLD_TEST_HOOK";

/// `TASKFOLD_TEST_HOOK`'s value `v` into `s`: the hooks, in a build with
/// the cargo feature `test-hooks`; refused in any other, so that a test
/// that needs a hook never runs without it.
fn test_hooks(s: &mut Settings, v: &OsStr) -> Result<(), SettingsError> {
    #[cfg(feature = "test-hooks")]
    {
        let parsed = v.to_str().and_then(hooks::parse);
        s.runtime.hooks =
            parsed.ok_or_else(|| SettingsError::new(TEST_HOOK_VAR, v, hooks::EXPECTED))?;
        Ok(())
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        let _ = s;
        Err(SettingsError::new(TEST_HOOK_VAR, v, NO_TEST_HOOKS))
    }
}

/// Why `TASKFOLD_TEST_HOOK` is refused by a build without the hooks.
pub const NO_TEST_HOOKS: &str =
    "it unset: this build has no test hooks (a build of the tests, with the cargo feature \
     test-hooks, has them)";

/// Set by `taskfold run` in its ranks' environment: it checked their
/// settings and warned about unknown variables, once for the job.
pub const RUN_CHECKED_VAR: &str = "TASKFOLD_RUN_CHECKED";

impl Default for Settings {
    fn default() -> Self {
        Settings {
            launch: Launch::default(),
            runtime: Config::default(),
            transport: TransportSettings::default(),
            metrics_addr: None,
            shared_heap: true,
            unknown: Vec::new(),
            unknown_warned: false,
        }
    }
}

/// Which transport a runtime started from its settings uses, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportSettings {
    /// `TASKFOLD_TRANSPORT`: TCP (default) or libfabric.
    pub kind: TransportKind,
    /// `TASKFOLD_FI_PROVIDER`: the libfabric provider (`tcp;ofi_rxm`,
    /// `shm`, `verbs;ofi_rxm`, ...); `None`: libfabric's choice.
    pub fi_provider: Option<String>,
    /// `TASKFOLD_FI_WAIT`: how the libfabric progress thread waits.
    pub fi_wait: FiWait,
    /// `TASKFOLD_BIND_HOST`: the address this rank listens on and is
    /// reached at (`None`: 127.0.0.1, one node; `0.0.0.0` for several).
    pub bind_host: Option<IpAddr>,
    /// `TASKFOLD_TCP_THREADS`: threads of the TCP transport's own, 0 to 64
    /// (`None`: a runtime runs it on its actors' thread).
    pub tcp_threads: Option<usize>,
    /// `TASKFOLD_TCP_CMA`: same-node gets by cross-memory attach (loans)
    /// instead of a stream (default on).
    pub tcp_loans: bool,
    /// `TASKFOLD_TCP_RINGS`: connections between ranks of one node move
    /// to shared-memory rings after their handshake (default on).
    pub tcp_rings: bool,
}

impl Default for TransportSettings {
    fn default() -> Self {
        TransportSettings {
            kind: TransportKind::Tcp,
            fi_provider: None,
            fi_wait: FiWait::Poll,
            bind_host: None,
            tcp_threads: None,
            tcp_loans: true,
            tcp_rings: true,
        }
    }
}

/// The transport between ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TransportKind {
    /// TCP sockets (and same-node shortcuts).
    #[default]
    Tcp,
    /// libfabric (needs a build with the cargo feature `libfabric`).
    Libfabric,
}

impl Named for TransportKind {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("tcp", TransportKind::Tcp),
        ("libfabric", TransportKind::Libfabric),
    ];
    const EXPECTED: &'static str = "tcp or libfabric";
}

/// How the libfabric progress thread waits when it has nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FiWait {
    /// It polls with a short backoff (default).
    #[default]
    Poll,
    /// It blocks in `fi_cq_sread` where the provider has wait objects.
    Auto,
}

impl Named for FiWait {
    const NAMES: &'static [(&'static str, Self)] =
        &[("poll", FiWait::Poll), ("auto", FiWait::Auto)];
    const EXPECTED: &'static str = "poll or auto";
}

/// A variable whose value is refused (in the environment, or in a
/// settings file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    /// The variable (in a settings file, the key when it names none).
    pub name: String,
    /// Its value, at most [`SettingsError::QUOTED`] characters of it.
    pub value: String,
    /// Whether [`SettingsError::value`] is only the start of the value.
    pub truncated: bool,
    /// What the variable accepts.
    pub expected: String,
    /// The settings file the value was read from (`None`: the
    /// environment).
    pub file: Option<std::path::PathBuf>,
}

impl std::fmt::Display for SettingsError {
    /// `NAME="value": expected ...` for the environment; `FILE: key =
    /// "value": expected ...` for a settings file (`FILE: expected ...` for
    /// a file that is no settings file).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let more = if self.truncated { "…" } else { "" };
        match &self.file {
            None => write!(
                f,
                "{}={:?}{more}: expected {}",
                self.name, self.value, self.expected
            ),
            Some(file) if self.name == sources::CONFIG_VAR => {
                write!(f, "{}: expected {}", file.display(), self.expected)
            }
            Some(file) => write!(
                f,
                "{}: {} = {:?}{more}: expected {}",
                file.display(),
                sources::key_of(&self.name),
                self.value,
                self.expected
            ),
        }
    }
}

impl std::error::Error for SettingsError {}

impl SettingsError {
    /// Characters of a refused value quoted in the error.
    pub const QUOTED: usize = 64;

    /// `name`'s value `value` is refused: `expected` says what it accepts.
    pub fn new(name: &str, value: &OsStr, expected: &str) -> SettingsError {
        let text = value.to_string_lossy();
        let mut chars = text.chars();
        let quoted: String = chars.by_ref().take(Self::QUOTED).collect();
        SettingsError {
            name: name.to_string(),
            value: quoted,
            truncated: chars.next().is_some(),
            expected: expected.to_string(),
            file: None,
        }
    }
}

/// Variables whose values are secrets: an error does not quote them.
pub const SECRETS: &[&str] = &["TASKFOLD_JOB_KEY"];

/// What an error shows in place of a secret's value.
const SECRET_SHOWN: &str = "(secret, not shown)";

/// Whether a value counts as unset (empty or whitespace).
fn is_blank(v: &OsStr) -> bool {
    v.to_str().is_some_and(|s| s.trim().is_empty())
}

/// The pairs a setting may read (`TASKFOLD_*`, the launchers' rank and
/// size and their stores' variables), by name; a name given twice keeps its last value.
fn relevant<I, K, V>(pairs: I) -> BTreeMap<String, OsString>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let launcher_vars = launch::SOURCES.iter().flat_map(|(r, s, _)| [*r, *s]);
    let ours: Vec<&str> = launcher_vars.chain(pmi::OFFER_VARS).collect();
    let mut vars = BTreeMap::new();
    for (k, v) in pairs {
        let Some(name) = k.as_ref().to_str() else {
            continue;
        };
        if name.starts_with("TASKFOLD_") || ours.contains(&name) {
            vars.insert(name.to_string(), v.as_ref().to_os_string());
        }
    }
    vars
}

impl Settings {
    /// Parses `(name, value)` pairs (an environment); a name given twice
    /// takes its last value. Variables other than the `TASKFOLD_*` ones,
    /// the launchers' rank and size and their stores' (`PMI_FD`,
    /// `PMIX_NAMESPACE`) are ignored.
    pub fn from_pairs<I, K, V>(pairs: I) -> Result<Settings, SettingsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        Settings::from_map(relevant(pairs))
    }

    /// The settings of the relevant variables `vars`, by name.
    fn from_map(vars: BTreeMap<String, OsString>) -> Result<Settings, SettingsError> {
        let mut s = Settings::default();
        for var in variables() {
            if let Some(v) = vars.get(var.name).filter(|v| !is_blank(v)) {
                (var.set)(&mut s, v).map_err(|()| {
                    // A secret is never quoted, not even a malformed one.
                    let shown = if SECRETS.contains(&var.name) {
                        OsStr::new(SECRET_SHOWN)
                    } else {
                        v.as_os_str()
                    };
                    SettingsError::new(var.name, shown, var.expected)
                })?;
            }
        }
        s.launch.identity = launch::identity(&vars)?;
        let offered = |name: &str| {
            let v = vars.get(name).filter(|v| !is_blank(v))?;
            Some(v.to_string_lossy().into_owned())
        };
        s.launch.offer = StoreOffer {
            pmi_fd: offered("PMI_FD"),
            pmix_namespace: offered("PMIX_NAMESPACE"),
        };
        if let Some(v) = vars.get(TEST_HOOK_VAR).filter(|v| !is_blank(v)) {
            test_hooks(&mut s, v)?;
        }
        s.unknown = vars
            .keys()
            .filter(|k| k.starts_with("TASKFOLD_"))
            .filter(|k| !variables().iter().any(|v| v.name == k.as_str()))
            .filter(|k| !OTHER_KNOWN.iter().any(|(n, _)| n == k))
            .cloned()
            .collect();
        s.unknown_warned = vars.get(RUN_CHECKED_VAR).is_some_and(|v| !is_blank(v));
        Ok(s)
    }

    /// The pairs [`Settings::from_pairs`] reads back as these settings: a
    /// variable for every setting that differs from its default. Settings
    /// no variable can express are left out (a buffer pool bound that
    /// follows the peak, a task log limit, hooks that cannot be written).
    pub fn to_pairs(&self) -> Vec<(&'static str, OsString)> {
        let default = Settings::default();
        let mut pairs: Vec<_> = variables()
            .iter()
            .filter_map(|var| {
                let v = (var.get)(self)?;
                ((var.get)(&default).as_ref() != Some(&v)).then_some((var.name, v))
            })
            .collect();
        if let Some(id) = &self.launch.identity {
            pairs.extend(launch::identity_pairs(id));
        }
        let offer = &self.launch.offer;
        let offered = [&offer.pmi_fd, &offer.pmix_namespace];
        for (name, v) in pmi::OFFER_VARS.into_iter().zip(offered) {
            pairs.extend(v.as_ref().map(|v| (name, v.into())));
        }
        #[cfg(feature = "test-hooks")]
        if let Some(text) = hooks::format(&self.runtime.hooks).filter(|t| !t.is_empty()) {
            pairs.push((TEST_HOOK_VAR, text.into()));
        }
        pairs
    }

    /// Parses the process environment over its settings file
    /// (`TASKFOLD_CONFIG`, else `taskfold.toml` in the working directory,
    /// if any; see [`sources`]): the only place taskfold reads either
    /// (except the shared heap's own switch, see [`shared_heap_enabled`]).
    pub fn from_env() -> Result<Settings, SettingsError> {
        Loaded::from_env().map(|l| l.settings)
    }

    /// As [`Settings::from_env`], with `overrides` set on top of the
    /// environment: the settings of a child process started with them.
    pub fn from_env_with<I, K, V>(overrides: I) -> Result<Settings, SettingsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        Loaded::from_env_with(overrides).map(|l| l.settings)
    }
}

/// The variable that turns the shared heap off, as a C string (the heap
/// reads it with `getenv`, inside the allocator).
pub const SHARED_HEAP_VAR: &CStr = c"TASKFOLD_SHARED_HEAP";

/// Whether the shared heap is on, given `TASKFOLD_SHARED_HEAP`'s value
/// (`None`: unset). Unset or blank: on; a boolean: that; any other value
/// (or one not in UTF-8): off, since the heap cannot report an error from
/// inside the allocator; [`Settings::from_pairs`] refuses that value, so a
/// runtime does not start with it. Never allocates.
pub fn shared_heap_enabled(value: Option<&[u8]>) -> bool {
    let Some(v) = value else {
        return true;
    };
    match std::str::from_utf8(v) {
        Ok(s) if s.trim().is_empty() => true,
        Ok(s) => parse_bool(s).unwrap_or(false),
        Err(_) => false,
    }
}
