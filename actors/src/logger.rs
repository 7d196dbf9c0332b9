//! The logger of last resort: an application that installed no `tracing`
//! subscriber would see none of the runtime's warnings — not even a rank
//! declared failed. So the runtime installs one on stderr, at
//! `Config::log` (`TASKFOLD_LOG`, default `warn`; `off`: none), when it
//! starts and no global subscriber is there yet. An application that
//! wants its own installs it before it starts the runtime; the `log`
//! crate's logger is never touched. Plain text (no colour) unless stderr
//! is a terminal.

use std::io::IsTerminal;
use taskfold_core::settings::LogLevel;
use tracing::level_filters::LevelFilter;

/// Installs the stderr logger at `level`, unless it is `off` or a global
/// subscriber is already set (the application's, or an earlier
/// runtime's). Whether this call installed it.
pub(crate) fn install_default(level: LogLevel) -> bool {
    let filter = match level {
        LogLevel::Off => return false,
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
    };
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .finish();
    // Fails, harmlessly, if a global subscriber exists.
    tracing::subscriber::set_global_default(subscriber).is_ok()
}
