//! Control messages on the wire: a versioned envelope around an rkyv archive.
//!
//! A frame is `MAGIC (2 bytes) | VERSION (u16 LE) | reserved (u32)` followed
//! by the archive of one [`Msg`]. A peer's bytes are untrusted: [`decode`]
//! checks the envelope, copies the body into an aligned buffer (control
//! messages are small) and validates it with bytecheck before anything reads
//! it. Data never travels in these messages: contributions move by one-sided
//! `get` between workers.

// rkyv's derive generates undocumented variant structs for enums.
#[allow(missing_docs)]
mod msg;

mod failure;

// rkyv's derive generates undocumented variant structs for enums.
#[allow(missing_docs)]
pub mod checkpoint;

// rkyv's derive generates undocumented variant structs for enums.
#[allow(missing_docs)]
pub mod results;

// rkyv's derive generates undocumented variant structs for enums.
#[allow(missing_docs)]
pub mod spread;

pub use failure::{Failure, FoldFailure};
pub use msg::*;

use rkyv::rancor;
use rkyv::util::AlignedVec;

/// First two bytes of every control frame.
pub const MAGIC: [u8; 2] = *b"TF";
/// Version of the control protocol; a peer speaking another is refused.
pub const VERSION: u16 = 22;
/// Length of the envelope header.
pub const HEADER_LEN: usize = 8;

/// Why a frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than the header.
    #[error("frame of {0} bytes is shorter than the header")]
    Short(usize),
    /// Not a taskfold frame.
    #[error("bad magic {0:02x?}")]
    BadMagic([u8; 2]),
    /// Another protocol version.
    #[error("protocol version {0} is not supported (this build speaks {VERSION})")]
    Version(u16),
    /// The body is not a valid archive of a message.
    #[error("invalid message body: {0}")]
    Invalid(String),
}

/// Encodes a message into a frame.
pub fn encode(msg: &Msg) -> Vec<u8> {
    let body = rkyv::to_bytes::<rancor::Error>(msg)
        .expect("serialising a control message into memory cannot fail");
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&body);
    out
}

/// Validates and decodes a frame.
pub fn decode(frame: &[u8]) -> Result<Msg, WireError> {
    if frame.len() < HEADER_LEN {
        return Err(WireError::Short(frame.len()));
    }
    if frame[..2] != MAGIC {
        return Err(WireError::BadMagic([frame[0], frame[1]]));
    }
    let version = u16::from_le_bytes([frame[2], frame[3]]);
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let mut body = AlignedVec::<16>::with_capacity(frame.len() - HEADER_LEN);
    body.extend_from_slice(&frame[HEADER_LEN..]);
    rkyv::from_bytes::<Msg, rancor::Error>(&body).map_err(|e| WireError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RankSet;

    #[test]
    fn spread_messages_round_trip() {
        use spread::{Opening, SpreadMsg};
        let open = Opening {
            key: 9,
            id: "grad".into(),
            group: vec![0, 2, 5],
            source: 2,
            type_tag: 77,
        };
        for m in [
            SpreadMsg::Have(open.clone()),
            SpreadMsg::Want(open.clone()),
            SpreadMsg::Gone { key: 9 },
            SpreadMsg::Fetch { key: 9, from: 5 },
            SpreadMsg::Fetched { key: 9, ok: false },
            SpreadMsg::Lost { key: 9, root: 2 },
            SpreadMsg::Refused {
                key: 9,
                detail: "type".into(),
            },
            SpreadMsg::Finished { key: 9 },
            SpreadMsg::Report(spread::Report {
                holding: vec![open.clone()],
                wanting: vec![(open.clone(), Some(3)), (open, None)],
                finished: vec![7, 8],
            }),
        ] {
            let m = Msg::Spread(m);
            assert_eq!(decode(&encode(&m)).unwrap(), m);
        }
    }

    #[test]
    fn round_trip() {
        let join = Msg::Join(Joining {
            key: 7,
            rank: 3,
            join: Join {
                id: "image-7".into(),
                group: vec![0, 1, 2, 3],
                root: 1,
                type_tag: 9,
                shape: Some(100),
                disk: None,
                early: true,
            },
            replica: None,
            standing: Some(Standing {
                buddy: 2,
                crc: 0xdead_beef,
                len: 4160,
                node: 5,
                heap: Locator([5; LOCATOR_LEN]),
            }),
            direct: Some(Locator([7; LOCATOR_LEN])),
        });
        assert_eq!(decode(&encode(&join)).unwrap(), join);
        let m = Msg::TaskDone(TaskDone {
            key: 7,
            rank: 3,
            task_id: 11,
            path: RankSet::single(3).union(&RankSet::single(1)),
            nanos: 1234,
            bytes: 4096,
            direct: None,
        });
        assert_eq!(decode(&encode(&m)).unwrap(), m);
    }

    #[test]
    fn a_checkpoint_message_round_trips() {
        let m = Msg::Checkpoint(checkpoint::CheckpointMsg::Coded {
            version: 4,
            group: 1,
            lens: vec![10, 12, 9],
        });
        assert_eq!(decode(&encode(&m)).unwrap(), m);
    }

    #[test]
    fn the_board_message_round_trips() {
        let m = Msg::Board {
            at: Locator([9; LOCATOR_LEN]),
        };
        assert_eq!(decode(&encode(&m)).unwrap(), m);
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(decode(b"TF"), Err(WireError::Short(2)));
        assert!(matches!(
            decode(b"XX\x01\0\0\0\0\0"),
            Err(WireError::BadMagic(_))
        ));
        let next = VERSION + 1;
        let mut future = b"TF\0\0\0\0\0\0".to_vec();
        future[2..4].copy_from_slice(&next.to_le_bytes());
        assert_eq!(decode(&future), Err(WireError::Version(next)));
        // Peers of earlier protocols (before replica offers named files,
        // before ready messages said where their data lies, before joins
        // said whether the member completes early and barriers had their
        // own messages, before the master's notice board, before joins
        // named standing copies, before barriers said whether their rank
        // reads the notice board, before joins and finished tasks were
        // messages of their own, before the bootstrap carried every
        // rank's node, before every connection proved the job key).
        assert_eq!(decode(b"TF\x01\0\0\0\0\0"), Err(WireError::Version(1)));
        assert_eq!(decode(b"TF\x02\0\0\0\0\0"), Err(WireError::Version(2)));
        assert_eq!(decode(b"TF\x03\0\0\0\0\0"), Err(WireError::Version(3)));
        assert_eq!(decode(b"TF\x04\0\0\0\0\0"), Err(WireError::Version(4)));
        assert_eq!(decode(b"TF\x05\0\0\0\0\0"), Err(WireError::Version(5)));
        assert_eq!(decode(b"TF\x06\0\0\0\0\0"), Err(WireError::Version(6)));
        assert_eq!(decode(b"TF\x07\0\0\0\0\0"), Err(WireError::Version(7)));
        assert_eq!(decode(b"TF\x08\0\0\0\0\0"), Err(WireError::Version(8)));
        // (Before a dead master's standby took reports, before every
        // connection proved the job's key.)
        assert_eq!(decode(b"TF\x09\0\0\0\0\0"), Err(WireError::Version(9)));
        assert_eq!(decode(b"TF\x0a\0\0\0\0\0"), Err(WireError::Version(10)));
        let mut f = encode(&Msg::Ping { seq: 1 });
        let n = f.len();
        f[n - 1] ^= 0xff;
        f[HEADER_LEN] ^= 0xff;
        // Either refused or decoded to something else, never a panic.
        let _ = decode(&f);
        let mut short_body = b"TF\0\0\0\0\0\0\x01".to_vec();
        short_body[2..4].copy_from_slice(&VERSION.to_le_bytes());
        assert!(matches!(decode(&short_body), Err(WireError::Invalid(_))));
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(0u8..=255, 0..256)) {
            // This build's header (an old version would be refused before
            // the body is read at all).
            let mut f = b"TF".to_vec();
            f.extend_from_slice(&VERSION.to_le_bytes());
            f.extend_from_slice(&[0; 4]);
            f.extend_from_slice(&bytes);
            let _ = decode(&f);
        }
    }
}
