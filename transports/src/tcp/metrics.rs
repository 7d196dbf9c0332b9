//! Transport counters (label `transport="tcp"`). Bytes read in place from
//! same-node peers are counted by [`crate::same_node`].

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

/// Times a bound on what a peer can make this rank hold was reached
/// (label `bound`: `events`, `writer`, `loans`, `registrations`,
/// `get_total`, `chunk`; the libfabric transport's, with
/// `transport="libfabric"`: `events`, `reorder`, `writer`, `requests`,
/// `get_total`; see the book's Security chapter). A peer that
/// breaks a bound is also counted in [`BAD_CONNECTIONS`] when it is
/// disconnected; one that only fills a queue is slowed down instead.
pub const BOUNDS_HIT: &str = "taskfold_transport_bounds_hit_total";

pub(crate) fn bound_hit(bound: &'static str) {
    metrics::counter!(BOUNDS_HIT, "transport" => "tcp", "bound" => bound).increment(1);
}

/// Connections moved to shared-memory rings after their handshake, by
/// either side (label `side`: `caller`, `peer`); and offers of rings not
/// taken (label `side="declined"`), which stay on TCP.
pub const RING_CONNECTIONS: &str = "taskfold_transport_ring_connections_total";

pub(crate) fn rings(side: &'static str) {
    metrics::counter!(RING_CONNECTIONS, "transport" => "tcp", "side" => side).increment(1);
}
