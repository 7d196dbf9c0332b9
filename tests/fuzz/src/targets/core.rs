//! The core crate's decoders: the control envelope, the handshake's
//! challenge, replica headers, checkpoint pieces and their rebuild.

use crate::{shaped, SLACK};
use arbitrary::{Arbitrary, Result, Unstructured};
use taskfold_core::auth::{
    Challenge, Handshake, JobKey, Nonce, Proof, CHALLENGE_LEN, KEY_LEN, NONCE_LEN, PROOF_LEN,
};
use taskfold_core::checkpoint::erasure::{self, Stamp};
use taskfold_core::checkpoint::{piece, EcGroup, Expect, JobId, Level};
use taskfold_core::wire::{
    self, Failure, Join, Joining, Locator, Msg, Standing, TaskDone, LOCATOR_LEN,
};
use taskfold_core::{replica, RankSet};

fn short_string(u: &mut Unstructured<'_>) -> Result<String> {
    let n = u.int_in_range(0..=24)?;
    (0..n)
        .map(|_| char::arbitrary(u))
        .collect::<Result<String>>()
}

fn small_vec(u: &mut Unstructured<'_>) -> Result<Vec<u32>> {
    let n = u.int_in_range(0..=8)?;
    (0..n).map(|_| u32::arbitrary(u)).collect()
}

fn msg(u: &mut Unstructured<'_>) -> Result<Msg> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => Msg::Join(Joining {
            key: u64::arbitrary(u)?,
            rank: u32::arbitrary(u)?,
            join: Join {
                id: short_string(u)?,
                group: small_vec(u)?,
                root: u32::arbitrary(u)?,
                type_tag: u64::arbitrary(u)?,
                shape: Option::<u64>::arbitrary(u)?,
                disk: if bool::arbitrary(u)? {
                    Some(short_string(u)?)
                } else {
                    None
                },
                early: bool::arbitrary(u)?,
            },
            replica: Option::<u32>::arbitrary(u)?,
            standing: if bool::arbitrary(u)? {
                Some(Standing {
                    buddy: u32::arbitrary(u)?,
                    crc: u32::arbitrary(u)?,
                    len: u64::arbitrary(u)?,
                    node: u64::arbitrary(u)?,
                    heap: Locator(<[u8; LOCATOR_LEN]>::arbitrary(u)?),
                })
            } else {
                None
            },
            direct: None,
        }),
        1 => Msg::TaskDone(TaskDone {
            key: u64::arbitrary(u)?,
            rank: u32::arbitrary(u)?,
            task_id: u64::arbitrary(u)?,
            path: RankSet::single(u.int_in_range(0..=300)?)
                .union(&RankSet::single(u.int_in_range(0..=70)?)),
            nanos: u64::arbitrary(u)?,
            bytes: u64::arbitrary(u)?,
            direct: None,
        }),
        2 => Msg::Complete {
            key: u64::arbitrary(u)?,
            error: Some(Failure::RanksLost {
                id: short_string(u)?,
                ranks: small_vec(u)?,
            }),
            number: Option::<u64>::arbitrary(u)?,
        },
        3 => Msg::Board {
            at: Locator(<[u8; LOCATOR_LEN]>::arbitrary(u)?),
        },
        4 => Msg::Ping {
            seq: u64::arbitrary(u)?,
        },
        _ => Msg::Finalize,
    })
}

/// `wire::decode`: the envelope's magic and version, then a validated
/// archive; a decoded message re-encodes to a frame decoding to the same
/// message (rkyv may lay out the same value differently, so the bytes
/// themselves are not compared).
pub fn wire_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let b = shaped(u, |u| Ok(wire::encode(&msg(u)?)))?;
    match wire::decode(&b) {
        Ok(m) => {
            crate::hit();
            assert_eq!(wire::decode(&wire::encode(&m)), Ok(m), "message round trip");
        }
        Err(wire::WireError::Short(n)) => assert!(n < wire::HEADER_LEN && n == b.len()),
        Err(_) => {}
    }
    Ok(8 * b.len() + SLACK)
}

/// `Challenge::decode` and the caller's handshake fed the decoded
/// challenge: exactly `CHALLENGE_LEN` bytes, re-encoded as they were; a
/// challenge not made with the job key is refused (and the handshake
/// fails for good), the listener's own is accepted.
pub fn challenge_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let key = JobKey::from_bytes(<[u8; KEY_LEN]>::arbitrary(u)?);
    let claim = Vec::<u8>::arbitrary(u)?;
    let (theirs, ours) = (
        Nonce(<[u8; NONCE_LEN]>::arbitrary(u)?),
        Nonce(<[u8; NONCE_LEN]>::arbitrary(u)?),
    );
    let (mut listener, real) = Handshake::listen(&key, &claim, 1, theirs, ours);
    let b = shaped(u, |_| Ok(real.encode().to_vec()))?;
    let mut caller = Handshake::call(&key, &claim, 1, theirs);
    match Challenge::decode(&b) {
        Some(c) => {
            crate::hit();
            assert_eq!(c.encode()[..], b[..], "challenge round trip");
            let answer = caller.on_challenge(&c);
            assert_eq!(
                answer.is_ok(),
                c == real,
                "only the listener's challenge is accepted"
            );
            assert_eq!(caller.is_authenticated(), c == real);
            if let Ok(p) = answer {
                assert!(listener.on_proof(&p).is_ok() && listener.is_authenticated());
            } else {
                assert!(
                    caller.on_challenge(&real).is_err(),
                    "a failed handshake stays failed"
                );
            }
        }
        None => assert_ne!(b.len(), CHALLENGE_LEN),
    }
    let forged = Proof(<[u8; PROOF_LEN]>::arbitrary(u)?);
    if Handshake::listen(&key, &claim, 1, theirs, ours).1.proof != forged {
        let (mut l, _) = Handshake::listen(&key, &claim, 1, theirs, ours);
        assert!(l.on_proof(&forged).is_err() || caller.is_authenticated());
    }
    Ok(4 * (b.len() + claim.len()) + SLACK)
}

/// Replica headers: `announced_len`, `held_len`, `stored_crc`, `verify`,
/// `verify_held`, `original_payload` on any bytes; a verified payload is
/// the buffer's tail of the announced length with the stored checksum.
pub fn replica_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let b = shaped(u, |u| {
        let payload = Vec::<u8>::arbitrary(u)?;
        let mut out = vec![0u8; replica::HEADER_LEN + payload.len()];
        match u.int_in_range(0..=2u8)? {
            0 => replica::write_header(&mut out, &payload),
            1 => replica::write_unchecked_header(&mut out, &payload),
            _ => replica::write_view_header(&mut out, &payload, u32::arbitrary(u)?),
        }
        out[replica::HEADER_LEN..].copy_from_slice(&payload);
        Ok(out)
    })?;
    let announced = replica::announced_len(&b);
    let held = replica::held_len(&b);
    if announced.is_some() {
        assert_eq!(held, announced);
    }
    if let Ok(p) = replica::verify(&b) {
        crate::hit();
        assert_eq!(Some(p.len() as u64), announced);
        assert_eq!(p, &b[replica::HEADER_LEN..]);
        assert_eq!(replica::stored_crc(&b), Some(crc(p)));
    }
    for p in [replica::verify_held(&b), replica::original_payload(&b)]
        .into_iter()
        .flatten()
    {
        // Every header (checked, unchecked, viewed) carries the length at 8.
        let len = u64::from_le_bytes(b[8..16].try_into().expect("a header"));
        assert_eq!(p.len() as u64, len);
        assert_eq!(p, &b[replica::HEADER_LEN..]);
    }
    if let Some(c) = replica::with_checksum(&b) {
        assert_eq!(c.len(), b.len());
    }
    Ok(2 * b.len() + SLACK)
}

fn crc(p: &[u8]) -> u32 {
    let mut out = vec![0u8; replica::HEADER_LEN + p.len()];
    out[replica::HEADER_LEN..].copy_from_slice(p);
    let payload = out[replica::HEADER_LEN..].to_vec();
    replica::write_header(&mut out, &payload);
    replica::stored_crc(&out).expect("a header")
}

fn expect(u: &mut Unstructured<'_>) -> Result<Expect> {
    let level = |u: &mut Unstructured<'_>| -> Result<Level> {
        Ok(*u.choose(&[Level::L1, Level::L2, Level::L3, Level::L4])?)
    };
    Ok(Expect {
        job: JobId(u.int_in_range(0..=2)?),
        type_tag: u.int_in_range(0..=2)?,
        owner: if bool::arbitrary(u)? {
            Some(u.int_in_range(0..=3)?)
        } else {
            None
        },
        version: if bool::arbitrary(u)? {
            Some(u.int_in_range(0..=2)?)
        } else {
            None
        },
        level: if bool::arbitrary(u)? {
            Some(level(u)?)
        } else {
            None
        },
    })
}

fn pieces(u: &mut Unstructured<'_>, e: &Expect) -> Result<Vec<Vec<u8>>> {
    let k = u.int_in_range(1..=4usize)?;
    let m = u.int_in_range(1..=3usize)?;
    let group = EcGroup {
        index: u32::arbitrary(u)?,
        members: (0..k as u32).collect(),
        parity: (k as u32..(k + m) as u32).collect(),
    };
    let data: Vec<Vec<u8>> = (0..k)
        .map(|_| {
            let n = u.int_in_range(0..=64)?;
            (0..n).map(|_| u8::arbitrary(u)).collect()
        })
        .collect::<Result<_>>()?;
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let stamp = Stamp {
        job: e.job,
        version: e.version.unwrap_or(0),
        type_tag: e.type_tag,
    };
    Ok(erasure::encode_pieces(stamp, &group, &refs).expect("a valid geometry encodes"))
}

/// Checkpoint pieces: `piece::decode` and `piece::check` on any bytes
/// (another process wrote the file); a decoded piece re-encodes to the
/// same bytes, and allocates no more than a small multiple of its length.
pub fn piece_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let e = expect(u)?;
    let b = shaped(u, |u| {
        let all = pieces(u, &e)?;
        let i = u.choose_index(all.len())?;
        Ok(all[i].clone())
    })?;
    if let Ok(p) = piece::decode(&b) {
        crate::hit();
        assert_eq!(
            piece::encode(&p.header, p.payload).as_deref(),
            Ok(&b[..]),
            "piece round trip"
        );
        assert_eq!(piece::check(&b, &e).is_ok(), p.matches(&e).is_ok());
    } else {
        assert!(piece::check(&b, &e).is_err());
    }
    Ok(4 * b.len() + SLACK)
}

/// `erasure::rebuild_pieces` on a group's pieces, some dropped, mutated or
/// replaced by arbitrary bytes: never more than what the pieces hold is
/// allocated; an untouched set of at least `k` rebuilds the data.
pub fn rebuild_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let e = expect(u)?;
    let mut all = pieces(u, &e)?;
    let intact = all.clone();
    let mut touched = false;
    for p in all.iter_mut() {
        if u.ratio(1, 4)? {
            crate::mutate(u, p)?;
            touched = true;
        }
    }
    let mut found: Vec<&[u8]> = all
        .iter()
        .map(Vec::as_slice)
        .filter(|_| u.ratio(3, 4).unwrap_or(true))
        .collect();
    let extra = Vec::<u8>::arbitrary(u)?;
    if u.ratio(1, 8)? {
        found.push(&extra);
        touched = true;
    }
    let total: usize = found.iter().map(|p| p.len()).sum();
    let result = erasure::rebuild_pieces(&found, &e);
    if let Ok((members, data)) = &result {
        crate::hit();
        assert_eq!(members.len(), data.len());
        let held: usize = data.iter().map(Vec::len).sum();
        assert!(held <= total, "rebuilt {held} bytes from {total}");
    }
    let k = piece::decode(&intact[0])
        .expect("intact")
        .header
        .shard
        .expect("L3")
        .k();
    if !touched && found.len() >= k && e.owner.is_none() && e.level.is_none_or(|l| l == Level::L3) {
        let (_, data) = result.expect("an intact set of k pieces rebuilds");
        for (i, d) in data.iter().enumerate() {
            let p = piece::decode(&intact[i]).expect("intact");
            assert_eq!(&d[..], p.payload, "data shard {i}");
        }
    }
    Ok(8 * total + SLACK * 8)
}
