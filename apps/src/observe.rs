//! Logs (`RUST_LOG`) and metrics (`TASKFOLD_METRICS_ADDR`) for every mode.

/// Logs to stderr, filtered by `RUST_LOG` (default `warn`). If
/// `TASKFOLD_METRICS_ADDR` is set (e.g. `127.0.0.1:9000`; each rank adds its
/// rank to the port), serves Prometheus metrics there.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Starts the Prometheus exporter at `addr` (the settings'
/// `TASKFOLD_METRICS_ADDR`) plus `rank` on the port, if there is one.
pub fn init_metrics(rank: u32, addr: Option<std::net::SocketAddr>) {
    let Some(mut addr) = addr else {
        return;
    };
    addr.set_port(addr.port().saturating_add(rank as u16));
    let res = metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install();
    match res {
        Ok(()) => eprintln!("rank {rank}: metrics at http://{addr}/metrics"),
        Err(e) => eprintln!("rank {rank}: cannot serve metrics on {addr}: {e}"),
    }
}
