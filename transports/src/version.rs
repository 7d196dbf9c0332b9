//! The one protocol version every transport speaks, checked when two
//! processes first meet: the TCP hello (rank to master, rank to rank), the
//! master's answer, the rendezvous file and the libfabric bootstrap.
//!
//! The version is the core protocol's ([`taskfold_core::wire::VERSION`]):
//! the control messages, the transports' framing and their handshakes
//! change together, so a process built with another core is refused when
//! it starts, with an error that names both versions, rather than failing
//! later on a frame it cannot read.

pub use taskfold_core::wire::VERSION;

/// The reason a listening `rank` gives a caller speaking `theirs` when it
/// refuses it (sent to the caller, and logged).
pub fn mismatch(rank: u32, theirs: u16) -> String {
    format!(
        "protocol version mismatch: rank {rank} speaks version {VERSION}, the caller speaks version {theirs}"
    )
}

/// What a listener tells a caller of another version before either
/// proved the job key: the caller's own version, nothing of the
/// listener's (neither its rank nor its version; [`mismatch`], which
/// names both, goes to the listener's log).
pub fn refusal(theirs: u16) -> String {
    format!("protocol version mismatch: the caller speaks version {theirs}, which this listener does not")
}

/// Checks a peer's version: `Err` with the refusal ([`mismatch`]) unless it
/// is this build's.
pub fn check(who: &str, theirs: u16) -> Result<(), crate::TransportError> {
    if theirs == VERSION {
        Ok(())
    } else {
        Err(crate::TransportError::Version {
            ours: VERSION,
            theirs,
            peer: who.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mismatch_names_both_versions() {
        assert!(check("the master", VERSION).is_ok());
        let e = check("the master", VERSION + 1).unwrap_err().to_string();
        assert!(e.contains(&VERSION.to_string()), "{e}");
        assert!(e.contains(&(VERSION + 1).to_string()), "{e}");
        assert!(e.contains("the master"), "{e}");
        let m = mismatch(0, 3);
        assert!(
            m.contains(&format!("rank 0 speaks version {VERSION}")) && m.contains("version 3"),
            "{m}"
        );
    }
}
