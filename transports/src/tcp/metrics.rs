//! Transport counters (label `transport="tcp"`).

/// Bytes written to sockets, headers included.
pub const BYTES_SENT: &str = "taskfold_transport_bytes_sent_total";
/// Bytes read from sockets, headers included.
pub const BYTES_RECEIVED: &str = "taskfold_transport_bytes_received_total";
/// Frames written.
pub const FRAMES_SENT: &str = "taskfold_transport_frames_sent_total";
/// Frames read.
pub const FRAMES_RECEIVED: &str = "taskfold_transport_frames_received_total";
/// Connections dropped for garbage, a bad hello, a refused handshake or a
/// protocol error.
pub const BAD_CONNECTIONS: &str = "taskfold_transport_bad_connections_total";

/// Bytes of same-node loans read in place from a peer's shared heap (not
/// copied by the kernel).
pub const MAPPED_BYTES: &str = "taskfold_transport_mapped_bytes_total";

/// [`MAPPED_BYTES`] of this process, also without a metrics recorder.
static MAPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(crate) fn mapped(bytes: u64) {
    metrics::counter!(MAPPED_BYTES, "transport" => "tcp").increment(bytes);
    MAPPED.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// Bytes this process read in place from same-node peers' shared heaps
/// (all TCP transports of the process together).
pub fn mapped_bytes() -> u64 {
    MAPPED.load(std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn sent(bytes: u64, frames: u64) {
    metrics::counter!(BYTES_SENT, "transport" => "tcp").increment(bytes);
    metrics::counter!(FRAMES_SENT, "transport" => "tcp").increment(frames);
}

pub(crate) fn received(bytes: u64, frames: u64) {
    metrics::counter!(BYTES_RECEIVED, "transport" => "tcp").increment(bytes);
    metrics::counter!(FRAMES_RECEIVED, "transport" => "tcp").increment(frames);
}

pub(crate) fn bad_connection() {
    metrics::counter!(BAD_CONNECTIONS, "transport" => "tcp").increment(1);
}
