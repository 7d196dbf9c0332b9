//! Logs and metrics, as an embedding application sets them up: taskfold
//! emits `tracing` events and `metrics` measurements, and the application
//! decides where they go.

/// Logs to stderr, filtered by `RUST_LOG` (default `warn`; try
/// `RUST_LOG=taskfold=debug`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Plain text in a pipe or a file: colour codes only on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// If `addr` is given (the settings' `TASKFOLD_METRICS_ADDR`, e.g.
/// `127.0.0.1:9100`), serves Prometheus metrics there, on the port plus
/// `rank` (so that ranks on one node do not collide), through taskfold's
/// exporter ([`taskfold::metrics::serve_prometheus_for_rank`]).
pub fn init_metrics(rank: u32, addr: Option<std::net::SocketAddr>) {
    match taskfold::metrics::serve_prometheus_for_rank(addr, rank) {
        Ok(Some(addr)) => eprintln!("psdm: rank {rank}: metrics at http://{addr}/metrics"),
        Ok(None) => {}
        Err(e) => eprintln!("psdm: rank {rank}: {e}; metrics off"),
    }
}
