//! Who sent a fabric message: the rank its tag claims, believed only if
//! the provider reports the message as coming from that rank's entry in
//! the address vector (`FI_SOURCE`, `fi_cq_readfrom`).
//!
//! A tag is whatever the sender wrote: any endpoint that reaches ours can
//! claim any rank in it. The source address is the provider's: the entry
//! of the address vector the message arrived from, which this rank filled
//! itself with the endpoint names its peers sent over the authenticated
//! TCP bootstrap (see the book's Security chapter, The fabric path). An
//! endpoint that is not in the vector is reported as `FI_ADDR_NOTAVAIL`;
//! a peer's replaced endpoint (after [`crate::Transport::readmit`]) is no
//! longer any rank's entry. Either way the message is dropped before it
//! is decoded, and counted in
//! [`crate::tcp::metrics::BAD_CONNECTIONS`] (`transport="libfabric"`).

use super::fi::FiAddr;
use super::wire;

/// Why a message was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// The tag is not a taskfold tag, or names no rank of the job.
    Tag,
    /// The provider could not name the sender: not in the address vector.
    Unknown,
    /// The sender is in the address vector, but is not the rank it claims
    /// (another rank's, or a replaced endpoint's).
    Mismatch {
        /// The rank the tag claims.
        claimed: u32,
    },
}

/// The sender's rank of a message with `tag` from source address `src`,
/// given every rank's address (`addrs`, indexed by rank; `FI_ADDR_UNSPEC`
/// for a rank with none): the rank the tag claims if `src` is that rank's
/// address, else why not.
pub fn sender(addrs: &[FiAddr], tag: u64, src: FiAddr) -> Result<u32, Foreign> {
    let claimed = wire::rank_of(tag).ok_or(Foreign::Tag)?;
    let Some(&own) = addrs.get(claimed as usize) else {
        return Err(Foreign::Tag);
    };
    if src == libfabric_sys::FI_ADDR_NOTAVAIL {
        return Err(Foreign::Unknown);
    }
    if own == libfabric_sys::FI_ADDR_UNSPEC || own != src {
        return Err(Foreign::Mismatch { claimed });
    }
    Ok(claimed)
}

/// Counts a dropped foreign message.
pub(crate) fn dropped(rank: u32, tag: u64, src: FiAddr, why: Foreign) {
    metrics::counter!(crate::tcp::metrics::BAD_CONNECTIONS, "transport" => "libfabric")
        .increment(1);
    tracing::warn!(
        rank,
        tag,
        src,
        ?why,
        "fabric message from a foreign endpoint dropped"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use libfabric_sys::FI_ADDR_NOTAVAIL;

    #[test]
    fn only_the_claimed_ranks_own_entry_passes() {
        let addrs = [10, 11, libfabric_sys::FI_ADDR_UNSPEC];
        assert_eq!(sender(&addrs, wire::tag_of(1), 11), Ok(1));
        assert_eq!(
            sender(&addrs, wire::tag_of(1), 10),
            Err(Foreign::Mismatch { claimed: 1 })
        );
        assert_eq!(
            sender(&addrs, wire::tag_of(0), FI_ADDR_NOTAVAIL),
            Err(Foreign::Unknown)
        );
        // A rank without an address (it failed at start) sends nothing.
        assert_eq!(
            sender(&addrs, wire::tag_of(2), 12),
            Err(Foreign::Mismatch { claimed: 2 })
        );
        assert_eq!(sender(&addrs, wire::tag_of(3), 11), Err(Foreign::Tag));
        assert_eq!(sender(&addrs, 7, 11), Err(Foreign::Tag));
    }
}
