//! The paths of the second security round: a sealed connection's reader
//! (`TASKFOLD_INTEGRITY=mac`), the listener's gate before the handshake,
//! the quoting of a refusal received before the proof, and (feature
//! `libfabric`) the fabric's source check.

use crate::{mutate, SLACK};
use arbitrary::{Arbitrary, Result, Unstructured};
use std::net::{IpAddr, Ipv4Addr};
use taskfold_core::auth::{FrameKeys, Handshake, JobKey, Nonce};
use taskfold_transports::tcp::frame::{kind, Header};
use taskfold_transports::tcp::fuzzing;
use taskfold_transports::tcp::gate::Gate;

/// The frame keys of a handshake between two holders of `key`.
fn keys(u: &mut Unstructured<'_>) -> Result<FrameKeys> {
    let key = JobKey::from_bytes(<[u8; 32]>::arbitrary(u)?);
    let claim = Vec::<u8>::arbitrary(u)?;
    let (cn, ln) = (
        Nonce(<[u8; 32]>::arbitrary(u)?),
        Nonce(<[u8; 32]>::arbitrary(u)?),
    );
    let mut caller = Handshake::call(&key, &claim, 0, cn);
    let (_, challenge) = Handshake::listen(&key, &claim, 0, cn, ln);
    caller.on_challenge(&challenge).expect("the same key");
    Ok(caller.frame_keys().expect("authenticated").clone())
}

/// A sealed connection's reader: of a stream of sealed control frames,
/// changed on the way (bytes flipped, cut, inserted) or not, it takes
/// only frames the sender sealed, in their order, as a prefix of what was
/// sent; the stream as sent is taken whole.
pub fn sealed_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let k = keys(u)?;
    let frames: Vec<Vec<u8>> = (0..u.int_in_range(0..=4u8)?)
        .map(|_| Vec::<u8>::arbitrary(u))
        .collect::<Result<_>>()?;
    let mut tx = k.from_caller();
    let mut stream = Vec::new();
    for f in &frames {
        let head = Header::new(kind::CONTROL, f.len() as u32).encode();
        stream.extend_from_slice(&head);
        stream.extend_from_slice(f);
        stream.extend_from_slice(&tx.seal(&[&head, f]));
    }
    let sent = stream.clone();
    let changed = bool::arbitrary(u)?;
    if changed {
        mutate(u, &mut stream)?;
    }
    // The frame bound at the stream's length: a longer frame is refused
    // before its buffer is made (as the transport does at its maximum).
    let (taken, err) = fuzzing::sealed_frames(&stream, k.from_caller(), stream.len() as u64);
    if !taken.is_empty() {
        crate::hit();
    }
    assert!(taken.len() <= frames.len(), "more frames than were sent");
    for (i, t) in taken.iter().enumerate() {
        assert_eq!(t, &frames[i], "frame {i} taken changed");
    }
    if stream == sent {
        assert_eq!(taken.len(), frames.len(), "the stream as sent: {err:?}");
        assert!(err.is_none(), "{err:?}");
    }
    Ok(4 * stream.len() + SLACK)
}

/// The listener's gate under any order of connections entering, getting
/// their task and leaving: never more pending than its bounds, in all and
/// per address; an evicted connection is one that was pending, once.
pub fn gate_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let (max, per) = (u.int_in_range(1..=16usize)?, u.int_in_range(1..=8usize)?);
    let mut g: Gate<u64> = Gate::new(max, per);
    let mut live: Vec<(u64, IpAddr)> = Vec::new();
    let mut gone = std::collections::HashSet::new();
    for _ in 0..u.int_in_range(0..=64u8)? {
        match u.int_in_range(0..=2u8)? {
            0 => {
                let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, u.int_in_range(1..=4u8)?));
                let (id, evicted) = g.enter(ip);
                for e in evicted {
                    assert!(
                        live.iter().any(|&(l, _)| l == e),
                        "evicted {e}: not pending"
                    );
                    assert!(gone.insert(e), "evicted {e} twice");
                    live.retain(|&(l, _)| l != e);
                }
                assert_eq!(g.attach(id, id), None);
                live.push((id, ip));
            }
            1 if !live.is_empty() => {
                let (id, _) = live.remove(u.choose_index(live.len())?);
                assert_eq!(g.leave(id), Some(id));
                gone.insert(id);
            }
            _ => {}
        }
        assert!(g.len() <= max && g.len() == live.len());
        for n in 1..=4u8 {
            let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, n));
            assert!(live.iter().filter(|(_, a)| *a == ip).count() <= per);
        }
    }
    crate::hit();
    Ok(SLACK)
}

/// A refusal received before the listener proved the key: whatever its
/// bytes, the text kept has no control character and a bounded length.
pub fn refusal_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let payload = Vec::<u8>::arbitrary(u)?;
    let text = fuzzing::pre_proof_refusal(&payload);
    crate::hit();
    assert!(!text.chars().any(char::is_control), "{text:?}");
    assert!(text.len() <= 2048, "{} bytes", text.len());
    Ok(4 * payload.len() + SLACK)
}

/// The fabric's source check: a message is taken as rank `r`'s only if
/// its tag claims `r` and the provider reports `r`'s own address.
#[cfg(feature = "libfabric")]
pub fn source_target(u: &mut Unstructured<'_>) -> Result<usize> {
    use taskfold_transports::libfabric::source::sender;
    use taskfold_transports::libfabric::wire::{rank_of, tag_of};
    let addr = |u: &mut Unstructured<'_>| -> Result<u64> {
        let any = u64::arbitrary(u)?;
        Ok(*u.choose(&[0, 1, 2, u64::MAX, any])?)
    };
    let addrs: Vec<u64> = (0..u.int_in_range(0..=8u8)?)
        .map(|_| addr(u))
        .collect::<Result<_>>()?;
    let tag = if bool::arbitrary(u)? {
        tag_of(u.int_in_range(0..=9u32)?)
    } else {
        u64::arbitrary(u)?
    };
    let src = addr(u)?;
    if let Ok(r) = sender(&addrs, tag, src) {
        crate::hit();
        assert_eq!(rank_of(tag), Some(r));
        assert_eq!(addrs[r as usize], src);
        assert_ne!(src, u64::MAX, "an unknown source taken");
    }
    Ok(SLACK)
}

/// The fabric's sealed messages (`TASKFOLD_INTEGRITY=mac` over
/// libfabric, `libfabric::seal`): messages sealed by rank 0 for rank 1,
/// delivered in any order, repeated, changed or not. A message is taken
/// only if it is exactly one rank 0 sealed, each at most once; every
/// unchanged message not taken before is taken.
#[cfg(feature = "libfabric")]
pub fn fabric_sealed_target(u: &mut Unstructured<'_>) -> Result<usize> {
    use taskfold_transports::libfabric::seal::{KeyMaker, Seals, DIGEST_LEN};
    let key = JobKey::from_bytes(<[u8; 32]>::arbitrary(u)?);
    let job = u64::arbitrary(u)?;
    let a = KeyMaker::with_nonce(&key, job, 0, <[u8; 32]>::arbitrary(u)?);
    let b = KeyMaker::with_nonce(&key, job, 1, <[u8; 32]>::arbitrary(u)?);
    let mut tx = Seals::new(vec![None, Some(a.pair(1, b.nonce()))]);
    let mut rx = Seals::new(vec![Some(b.pair(0, a.nonce())), None]);
    let mut sent: Vec<(Vec<u8>, [u8; DIGEST_LEN], Vec<u8>)> = Vec::new();
    for _ in 0..u.int_in_range(1..=6u8)? {
        let msg = Vec::<u8>::arbitrary(u)?;
        let digest = <[u8; DIGEST_LEN]>::arbitrary(u)?;
        let mut sealed = msg.clone();
        assert!(tx.seal(1, &mut sealed, &digest), "a key to seal with");
        sent.push((msg, digest, sealed));
    }
    let mut taken = vec![false; sent.len()];
    let mut longest = 0;
    for _ in 0..u.int_in_range(0..=12u8)? {
        let i = u.choose_index(sent.len())?;
        let mut m = sent[i].2.clone();
        let changed = bool::arbitrary(u)?;
        if changed {
            mutate(u, &mut m)?;
        }
        longest = longest.max(m.len());
        match rx.open(0, &m) {
            Ok((body, digest)) => {
                crate::hit();
                let j = sent
                    .iter()
                    .position(|s| s.2 == m)
                    .expect("only a message rank 0 sealed is taken");
                assert!(!taken[j], "message {j} taken twice");
                assert_eq!((body, &digest), (&sent[j].0[..], &sent[j].1));
                taken[j] = true;
            }
            Err(e) => assert!(
                changed || taken[i],
                "message {i} as sealed, not taken before, refused: {e}"
            ),
        }
    }
    Ok(4 * longest + SLACK)
}
