//! Runtime configuration.

use std::time::Duration;

/// Tunables of one rank's runtime. Every field has a default suited to a
/// small shared node; [`Config::from_env`] reads overrides.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads that fold and serialise contributions (`TASKFOLD_FOLD_THREADS`,
    /// default 1). They are the runtime's own: the application's threads are
    /// never borrowed.
    pub fold_threads: usize,
    /// How long `shutdown` waits for the other ranks to finalize
    /// (`TASKFOLD_FINALIZE_TIMEOUT_MS`, default 120 s).
    pub finalize_timeout: Duration,
    /// Tasks remembered in the master's task log (default 100,000).
    pub task_log_limit: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            fold_threads: 1,
            finalize_timeout: Duration::from_secs(120),
            task_log_limit: 100_000,
        }
    }
}

impl Config {
    /// Defaults overridden by `TASKFOLD_*` environment variables.
    pub fn from_env() -> Self {
        let mut c = Config::default();
        if let Some(n) = env_u64("TASKFOLD_FOLD_THREADS") {
            c.fold_threads = (n as usize).max(1);
        }
        if let Some(ms) = env_u64("TASKFOLD_FINALIZE_TIMEOUT_MS") {
            c.finalize_timeout = Duration::from_millis(ms);
        }
        c
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}
