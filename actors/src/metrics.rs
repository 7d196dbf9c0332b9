//! Metric names (the `metrics` crate; install any recorder, e.g. the
//! Prometheus exporter started by `taskfold` with `TASKFOLD_METRICS_ADDR`).
//!
//! Rates ("master messages per second") are the rates of these counters.

/// Tasks executed, per rank (label `rank`).
pub const TASKS: &str = "taskfold_tasks_total";
/// Bytes fetched by tasks, per rank.
pub const BYTES_FETCHED: &str = "taskfold_bytes_fetched_total";
/// Fetch + fold time of a task, seconds.
pub const TASK_SECONDS: &str = "taskfold_task_seconds";
/// Time from a reduction's first join to its completion at the master.
pub const REDUCTION_SECONDS: &str = "taskfold_reduction_seconds";
/// Reductions completed.
pub const REDUCTIONS_COMPLETED: &str = "taskfold_reductions_completed_total";
/// Reductions ended with an error.
pub const REDUCTIONS_FAILED: &str = "taskfold_reductions_failed_total";
/// Reductions the master refused to open, as `Config::max_reductions`
/// were live (`TooManyReductions`).
pub const REDUCTIONS_REFUSED: &str = "taskfold_reductions_refused_total";
/// Futures of members other than the root completed once their data was
/// folded in (`Completion::Contributed`), before the reduction ended.
pub const REDUCTIONS_CONTRIBUTED: &str = "taskfold_reductions_contributed_total";
/// Barriers whose release this rank's application thread read on the
/// master's notice board, before the master's message came.
pub const BARRIERS_BY_BOARD: &str = "taskfold_barriers_by_board_total";
/// Futures of members other than the root that read their reduction's
/// completion on the master's notice board, before the master's message.
pub const REDUCTIONS_BY_BOARD: &str = "taskfold_reductions_by_board_total";
/// Ready messages waiting in the master's queues.
pub const MASTER_QUEUE_DEPTH: &str = "taskfold_master_queue_depth";
/// Live reductions at the master.
pub const LIVE_REDUCTIONS: &str = "taskfold_master_live_reductions";
/// Control messages received by the master.
pub const MASTER_MSGS_IN: &str = "taskfold_master_messages_in_total";
/// Control messages sent by the master.
pub const MASTER_MSGS_OUT: &str = "taskfold_master_messages_out_total";
/// Control bytes received by the master.
pub const MASTER_BYTES_IN: &str = "taskfold_master_bytes_in_total";
/// Control bytes sent by the master.
pub const MASTER_BYTES_OUT: &str = "taskfold_master_bytes_out_total";
/// Ranks declared failed.
pub const FAILURES_DETECTED: &str = "taskfold_failures_detected_total";
/// Replacements of dead ranks let in.
pub const RESPAWNS: &str = "taskfold_respawns_total";
/// Rollbacks of the job to its re-init entry point (global restart).
pub const ROLLBACKS: &str = "taskfold_rollbacks_total";
/// Time from a rank's last sign of life to its declaration as failed.
pub const DETECTION_SECONDS: &str = "taskfold_failure_detection_seconds";
/// Failures a reduction survived (its lost data rescheduled from replicas).
pub const RECOVERIES: &str = "taskfold_recoveries_total";
/// Times this rank turned to a standby master after its master died.
pub const FAILOVERS: &str = "taskfold_master_failovers_total";
/// Replica bytes written to disk.
pub const REPLICA_BYTES_WRITTEN: &str = "taskfold_replica_bytes_written_total";
/// Replica bytes read back from disk.
pub const REPLICA_BYTES_READ: &str = "taskfold_replica_bytes_read_total";
/// Bytes of buddy replicas held in memory.
pub const REPLICA_MEMORY_BYTES: &str = "taskfold_replica_memory_bytes";
/// Disk copies of ranks that died before announcing them, found by the
/// master where their directory would be and used for recovery.
pub const DISK_COPIES_INFERRED: &str = "taskfold_disk_copies_inferred_total";
/// Such disk copies found but not used (they could be stale or damaged).
pub const DISK_COPIES_REFUSED: &str = "taskfold_disk_copies_refused_total";
/// Disk copies of a dead master's originals that a rank of its node took
/// up as copies, for a standby on another node.
pub const DISK_COPIES_ADOPTED: &str = "taskfold_disk_copies_adopted_total";
/// Replicas that could not be stored (disk full, buddy refused).
pub const REPLICA_ERRORS: &str = "taskfold_replica_errors_total";
/// Buddy copies made without copying bytes (same node): a mapping of the
/// owner's disk copy, or a view of the owner's own buffer.
pub const REPLICAS_MAPPED: &str = "taskfold_replicas_mapped_total";
/// Buddy copies kept from the bytes their offer carried (small originals
/// of an owner on another node): no get.
pub const REPLICAS_CARRIED: &str = "taskfold_replicas_carried_total";
/// Allreduce results and broadcast values this rank fetched as a view of
/// a same-node holder's memory (a loan), kept and decoded from there
/// instead of copied first.
pub const SPREAD_VALUES_VIEWED: &str = "taskfold_spread_values_viewed_total";
/// Originals given no disk copy: the buddy, on this rank's node, maps the
/// original's own buffer, which outlives this process (a standing copy,
/// or with synchronous durability a view it was offered).
pub const ORIGINALS_IN_MEMORY: &str = "taskfold_originals_in_memory_total";
/// Originals of dead ranks that the master offered to the buddy mapping
/// them (standing copies, `Joining::standing`), holding their reductions
/// until the buddy answered.
pub const STANDING_COPIES_OFFERED: &str = "taskfold_standing_copies_offered_total";
/// Views of a dead rank's originals (kept in its memory, so with a tag
/// instead of a checksum) replaced by checksummed copies for recovery.
pub const REPLICAS_CHECKSUMMED: &str = "taskfold_replicas_checksummed_total";
/// Bytes of free buffers kept for reuse in this process (updated on every
/// ping from the master).
pub const BUFFER_POOL_BYTES: &str = "taskfold_buffer_pool_bytes";
/// Requests for large buffers served by a recycled one, and those that
/// needed a fresh allocation (label `outcome` = `hit` | `miss`; updated on
/// every ping from the master).
pub const BUFFER_POOL_REQUESTS: &str = "taskfold_buffer_pool_requests_total";
/// Buffers made ahead of the requests, when more reductions were in flight
/// at once than ever before (updated on every ping from the master).
pub const BUFFER_POOL_PREFILLED: &str = "taskfold_buffer_pool_prefilled_total";
/// Segments of streamed gets folded as they arrived, while the rest of
/// the peer's data was still on its way (per rank).
pub const FOLD_SEGMENTS: &str = "taskfold_fold_segments_total";
/// Copies of roots' results this rank keeps for a replacement root
/// (stored; see the book's chapter Surviving failures of the application).
pub const RESULTS_KEPT: &str = "taskfold_results_kept_total";
/// Roots' results that could not be kept (no buddy, refused, lost).
pub const RESULTS_NOT_KEPT: &str = "taskfold_results_not_kept_total";
/// Control frames refused as invalid.
pub const BAD_FRAMES: &str = "taskfold_bad_frames_total";

/// Registers descriptions of every metric with the installed recorder.
pub fn describe() {
    describe_reductions();
    describe_master();
    describe_recovery();
    describe_memory();
}

/// Tasks, reductions and their completions.
fn describe_reductions() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(TASKS, "Tasks executed by this rank");
    describe_counter!(
        FOLD_SEGMENTS,
        "Segments of streamed gets folded as they arrived"
    );
    describe_counter!(BYTES_FETCHED, Unit::Bytes, "Bytes fetched by tasks");
    describe_histogram!(TASK_SECONDS, Unit::Seconds, "Fetch + fold time of a task");
    describe_histogram!(REDUCTION_SECONDS, Unit::Seconds, "First join to completion");
    describe_counter!(REDUCTIONS_COMPLETED, "Reductions completed");
    describe_counter!(REDUCTIONS_FAILED, "Reductions ended with an error");
    describe_counter!(
        REDUCTIONS_REFUSED,
        "Reductions the master refused to open, too many being live"
    );
    describe_counter!(
        REDUCTIONS_CONTRIBUTED,
        "Futures completed once this rank's data was folded in (Completion::Contributed)"
    );
    describe_counter!(
        BARRIERS_BY_BOARD,
        "Barriers released through the master's notice board (same node)"
    );
    describe_counter!(
        REDUCTIONS_BY_BOARD,
        "Futures completed through the master's notice board (same node)"
    );
}

/// The master's load.
fn describe_master() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_gauge!(
        MASTER_QUEUE_DEPTH,
        "Joins and finished tasks queued at the master"
    );
    describe_gauge!(LIVE_REDUCTIONS, "Live reductions at the master");
    describe_counter!(MASTER_MSGS_IN, "Control messages into the master");
    describe_counter!(MASTER_MSGS_OUT, "Control messages out of the master");
    describe_counter!(
        MASTER_BYTES_IN,
        Unit::Bytes,
        "Control bytes into the master"
    );
    describe_counter!(
        MASTER_BYTES_OUT,
        Unit::Bytes,
        "Control bytes out of the master"
    );
}

/// Failures, recoveries and the copies they read.
fn describe_recovery() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(FAILURES_DETECTED, "Ranks declared failed");
    describe_counter!(RESPAWNS, "Replacements of dead ranks let in");
    describe_counter!(ROLLBACKS, "Rollbacks of the job to its re-init entry point");
    describe_counter!(BAD_FRAMES, "Control frames refused as invalid");
    describe_histogram!(
        DETECTION_SECONDS,
        Unit::Seconds,
        "Last sign of life to failure declaration"
    );
    describe_counter!(RECOVERIES, "Failures a reduction survived");
    describe_counter!(FAILOVERS, "Times this rank turned to a standby master");
    describe_counter!(
        DISK_COPIES_INFERRED,
        "Unannounced disk copies of dead ranks used for recovery"
    );
    describe_counter!(
        DISK_COPIES_REFUSED,
        "Unannounced disk copies of dead ranks not trusted"
    );
    describe_counter!(
        DISK_COPIES_ADOPTED,
        "Disk copies of a dead master's originals taken up by a rank of its node"
    );
    describe_counter!(
        REPLICA_BYTES_WRITTEN,
        Unit::Bytes,
        "Replica bytes written to disk"
    );
    describe_counter!(
        REPLICA_BYTES_READ,
        Unit::Bytes,
        "Replica bytes read from disk"
    );
    describe_gauge!(
        REPLICA_MEMORY_BYTES,
        Unit::Bytes,
        "Buddy replica bytes held in memory"
    );
    describe_counter!(REPLICA_ERRORS, "Replicas that could not be stored");
    describe_copies();
}

/// Copies made without copying bytes, and originals of dead ranks.
fn describe_copies() {
    use metrics::describe_counter;
    describe_counter!(
        REPLICAS_MAPPED,
        "Buddy copies made without copying bytes: a mapping of the owner's disk copy or a view of its buffer (same node)"
    );
    describe_counter!(
        REPLICAS_CARRIED,
        "Buddy copies kept from the bytes their offer carried (small originals), with no get"
    );
    describe_counter!(
        ORIGINALS_IN_MEMORY,
        "Originals given no disk copy, their same-node buddy mapping their buffer"
    );
    describe_counter!(
        STANDING_COPIES_OFFERED,
        "Originals of dead ranks offered by the master to the buddy mapping them"
    );
    describe_counter!(
        REPLICAS_CHECKSUMMED,
        "Views of a dead rank's originals replaced by checksummed copies for recovery"
    );
    describe_counter!(
        RESULTS_KEPT,
        "Copies of roots' results stored here for a replacement root"
    );
    describe_counter!(
        SPREAD_VALUES_VIEWED,
        "Allreduce results and broadcast values fetched as a view of a same-node holder's memory, not copied"
    );
    describe_counter!(
        RESULTS_NOT_KEPT,
        "Results of this root that got no copy (no buddy, refused, lost)"
    );
}

/// The buffer pool.
fn describe_memory() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_gauge!(
        BUFFER_POOL_BYTES,
        Unit::Bytes,
        "Free large buffers kept for reuse in this process"
    );
    describe_counter!(
        BUFFER_POOL_REQUESTS,
        "Large-buffer requests served by a recycled buffer (hit) or not (miss)"
    );
    describe_counter!(
        BUFFER_POOL_PREFILLED,
        "Large buffers made ahead of the requests, when more reductions were in flight at once than ever before"
    );
}

/// Sets the buffer pool's gauges from its current state.
pub(crate) fn record_buffer_pool() {
    let s = taskfold_core::pool::stats();
    metrics::gauge!(BUFFER_POOL_BYTES).set(s.bytes as f64);
    metrics::counter!(BUFFER_POOL_REQUESTS, "outcome" => "hit").absolute(s.hits);
    metrics::counter!(BUFFER_POOL_REQUESTS, "outcome" => "miss").absolute(s.misses);
    metrics::counter!(BUFFER_POOL_PREFILLED).absolute(s.prefilled);
}

/// Why the Prometheus endpoint could not be served.
#[cfg(feature = "prometheus")]
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// The exporter could not listen there, or a recorder was already
    /// installed in this process.
    #[error("cannot serve metrics on {addr}: {source}")]
    Serve {
        /// Where it tried to listen.
        addr: std::net::SocketAddr,
        /// What the exporter reported.
        #[source]
        source: metrics_exporter_prometheus::BuildError,
    },
}

/// Installs the Prometheus exporter as this process's metrics recorder and
/// serves every metric at `http://addr/metrics`. Call it once, before the
/// runtime starts (which then describes taskfold's metrics to it).
///
/// Needs the cargo feature `prometheus`.
#[cfg(feature = "prometheus")]
pub fn serve_prometheus(addr: std::net::SocketAddr) -> Result<(), PrometheusError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|source| PrometheusError::Serve { addr, source })
}

/// [`serve_prometheus`] for rank `rank` of a job: at `addr` (the settings'
/// `TASKFOLD_METRICS_ADDR`, [`crate::Settings::metrics_addr`]) with the
/// rank added to the port, so that the ranks of one node do not collide.
/// `Ok(Some(address served))`, or `Ok(None)` without an address.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let settings = taskfold::Settings::from_env()?;
/// let rank = 0;
/// match taskfold::metrics::serve_prometheus_for_rank(settings.metrics_addr, rank) {
///     Ok(Some(addr)) => eprintln!("rank {rank}: metrics at http://{addr}/metrics"),
///     Ok(None) => {}
///     Err(e) => eprintln!("rank {rank}: {e}; metrics off"),
/// }
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "prometheus")]
pub fn serve_prometheus_for_rank(
    addr: Option<std::net::SocketAddr>,
    rank: u32,
) -> Result<Option<std::net::SocketAddr>, PrometheusError> {
    let Some(mut addr) = addr else {
        return Ok(None);
    };
    addr.set_port(addr.port().saturating_add(rank as u16));
    serve_prometheus(addr)?;
    Ok(Some(addr))
}
