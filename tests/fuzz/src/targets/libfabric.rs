//! The libfabric transport's decoders: fabric messages and the
//! endpoint-name frame of the bootstrap (pure byte codecs: no fabric is
//! opened).

use crate::{shaped, SLACK};
use arbitrary::{Arbitrary, Result, Unstructured};
use taskfold_transports::libfabric::wire::{self, Msg, Remote};
use taskfold_transports::version::VERSION;

fn msg<'a>(u: &mut Unstructured<'_>, frame: &'a [u8]) -> Result<Msg<'a>> {
    let at = Remote {
        len: u64::arbitrary(u)?,
        addr: u64::arbitrary(u)?,
        key: u64::arbitrary(u)?,
        token: u64::arbitrary(u)?,
    };
    let w = u64::arbitrary(u)?;
    Ok(match u.int_in_range(0..=7u8)? {
        0 => Msg::Control { seq: w, frame },
        1 => Msg::Large { seq: w, at },
        2 => Msg::Bye { seq: w },
        3 => Msg::GetReq {
            req: w,
            key: at.key,
        },
        4 => Msg::GetOk { req: w, at },
        5 => Msg::GetErr {
            req: w,
            key: at.key,
        },
        6 => Msg::Release { token: w },
        _ => Msg::Credit { n: w },
    })
}

/// `Msg::decode`: a decoded message re-encodes to the same bytes, at
/// most `SLOT` of them.
pub fn msg_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let frame = Vec::<u8>::arbitrary(u)?;
    let b = shaped(u, |u| {
        let mut out = Vec::new();
        msg(u, &frame)?.encode(&mut out);
        Ok(out)
    })?;
    if let Ok(m) = Msg::decode(&b) {
        crate::hit();
        let mut out = Vec::new();
        m.encode(&mut out);
        // The words a kind does not use are not read: the bytes may differ
        // there only, the message not at all.
        assert_eq!(out.len(), b.len(), "message length");
        assert_eq!(out[..4], b[..4], "magic and kind");
        assert_eq!(Msg::decode(&out), Ok(m), "message round trip");
        assert!(b.len() <= wire::SLOT);
    }
    Ok(4 * (b.len() + frame.len()) + SLACK)
}

/// `parse_name_frame`: a frame of this version re-encodes to its bytes
/// (a provider name in UTF-8; with or without a sealing rank's nonce);
/// another version is read as far as the version.
pub fn name_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let provider = String::arbitrary(u)?;
    let name = Vec::<u8>::arbitrary(u)?;
    let nonce = Option::<[u8; 32]>::arbitrary(u)?;
    let b = shaped(u, |_| {
        Ok(wire::name_frame(&provider, &name, nonce.as_ref()))
    })?;
    if let Some(Ok(f)) = wire::parse_name_frame(&b) {
        crate::hit();
        assert_eq!(f.version, u16::from_le_bytes([b[8], b[9]]));
        // Another version is read as far as the version: nothing else.
        let utf8 = |b: &[u8]| {
            let pl = usize::from(u16::from_le_bytes([b[10], b[11]]));
            std::str::from_utf8(&b[14..14 + pl]).is_ok()
        };
        if f.version == VERSION && utf8(&b) {
            assert_eq!(
                wire::name_frame(&f.provider, &f.name, f.nonce.as_ref()),
                b,
                "name frame round trip"
            );
        }
    }
    Ok(4 * (b.len() + provider.len() + name.len()) + SLACK)
}
