//! The targets, registered by name.

mod core;
#[cfg(feature = "libfabric")]
mod libfabric;
mod security;
mod settings;
mod tcp;

use crate::Target;

/// Every target of this build.
pub fn all() -> Vec<Target> {
    #[allow(unused_mut)]
    let mut all = vec![
        t(
            "tcp_header",
            "frame header: magic, kind, fixed lengths; round trip",
            tcp::header_target,
        ),
        t(
            "tcp_hello",
            "hello: version first, exact length, role, flags; round trip",
            tcp::hello_target,
        ),
        t(
            "tcp_table",
            "master's table: size x entries; round trip",
            tcp::table_target,
        ),
        t(
            "tcp_addr",
            "address: length, family; round trip",
            tcp::addr_target,
        ),
        t(
            "tcp_chunks",
            "get chunks: total <= max, bounded, in order; buffer = bytes accepted, grows with them",
            tcp::chunks_target,
        ),
        t(
            "tcp_lend",
            "loan frame and payload: pid, heap place, descriptor within u32; round trip",
            tcp::lend_target,
        ),
        t(
            "tcp_rendezvous",
            "rendezvous file text: tag, version, job, address; round trip",
            tcp::rendezvous_target,
        ),
        t(
            "tcp_table_file",
            "table file: tag, version, job, master within the job, size entries; round trip",
            tcp::table_file_target,
        ),
        t(
            "auth_challenge",
            "challenge: exact length, round trip; only the listener's is accepted",
            core::challenge_target,
        ),
        t(
            "core_wire",
            "control envelope: magic, version, validated archive; round trip",
            core::wire_target,
        ),
        t(
            "replica",
            "replica headers: lengths, checksums, views",
            core::replica_target,
        ),
        t(
            "checkpoint_piece",
            "checkpoint piece: magic, format, geometry, checksum; round trip",
            core::piece_target,
        ),
        t(
            "checkpoint_rebuild",
            "erasure rebuild of damaged or foreign pieces: bounded, exact when intact",
            core::rebuild_target,
        ),
        t(
            "settings",
            "TASKFOLD_* pairs: refusals name the variable; round trip",
            settings::settings_target,
        ),
        t(
            "tcp_sealed",
            "sealed frames (TASKFOLD_INTEGRITY=mac): only frames sealed, in order, are taken",
            security::sealed_target,
        ),
        t(
            "tcp_gate",
            "pending handshakes: bounded in all and per address; evictions of pending ones",
            security::gate_target,
        ),
        t(
            "tcp_refusal",
            "a refusal before the proof: quoted, no control character, bounded",
            security::refusal_target,
        ),
    ];
    #[cfg(feature = "test-hooks")]
    all.push(t(
        "hooks",
        "test hooks: entry count; round trip",
        settings::hooks_target,
    ));
    #[cfg(feature = "libfabric")]
    all.extend([
        t(
            "libfabric_msg",
            "fabric message: kind, lengths, at most a slot; round trip",
            libfabric::msg_target,
        ),
        t(
            "libfabric_name",
            "endpoint-name frame: version first, lengths; round trip",
            libfabric::name_target,
        ),
        t(
            "libfabric_source",
            "fabric source check: taken only from the claimed rank's AV entry",
            security::source_target,
        ),
        t(
            "libfabric_sealed",
            "sealed fabric messages (TASKFOLD_INTEGRITY=mac): only messages sealed, each once",
            security::fabric_sealed_target,
        ),
    ]);
    all
}

fn t(
    name: &'static str,
    checks: &'static str,
    run: fn(&mut arbitrary::Unstructured<'_>) -> arbitrary::Result<usize>,
) -> Target {
    Target { name, checks, run }
}
