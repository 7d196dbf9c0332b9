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
        .try_init();
}

/// If `addr` is given (the settings' `TASKFOLD_METRICS_ADDR`, e.g.
/// `127.0.0.1:9100`), serves Prometheus metrics there, on the port plus
/// `rank` (so that ranks on one node do not collide).
pub fn init_metrics(rank: u32, addr: Option<std::net::SocketAddr>) {
    let Some(mut addr) = addr else {
        return;
    };
    addr.set_port(addr.port().saturating_add(rank as u16));
    let res = metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install();
    match res {
        Ok(()) => eprintln!("psdm: rank {rank}: metrics at http://{addr}/metrics"),
        Err(e) => eprintln!("psdm: rank {rank}: cannot serve metrics on {addr}: {e}"),
    }
}
