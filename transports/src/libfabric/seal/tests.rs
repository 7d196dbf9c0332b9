//! Sealing and checking fabric messages, without a fabric.
use super::*;
use taskfold_core::auth::JobKey;

/// Ranks 0 and 1 of one job, each with its own nonce: (0's seals, 1's).
fn pair() -> (Seals, Seals) {
    let key = JobKey::from_bytes([7; 32]);
    let (a, b) = (
        KeyMaker::new(&key, 42, 0).unwrap(),
        KeyMaker::new(&key, 42, 1).unwrap(),
    );
    let (mut s0, mut s1) = (Seals::new(vec![None, None]), Seals::new(vec![None, None]));
    s0.set_keys(1, Some(a.pair(1, b.nonce())));
    s1.set_keys(0, Some(b.pair(0, a.nonce())));
    (s0, s1)
}

fn sealed(s: &mut Seals, to: u32, msg: &[u8], digest: &Digest) -> Vec<u8> {
    let mut m = msg.to_vec();
    assert!(s.seal(to, &mut m, digest));
    m
}

#[test]
fn a_sealed_message_opens_once_with_its_digest() {
    let (mut s0, mut s1) = pair();
    let d = digest(b"bulk");
    let m = sealed(&mut s0, 1, b"message", &d);
    assert_eq!(m.len(), 7 + TRAILER);
    assert_eq!(s1.open(0, &m), Ok((&b"message"[..], d)));
    assert_eq!(s1.open(0, &m), Err(SealError::Replayed(0)), "a replay");
}

#[test]
fn a_changed_byte_anywhere_is_refused() {
    let (mut s0, mut s1) = pair();
    let m = sealed(&mut s0, 1, b"message", &digest(b"bulk"));
    for i in 0..m.len() {
        let mut bad = m.clone();
        bad[i] ^= 0x10;
        assert!(s1.open(0, &bad).is_err(), "byte {i} changed");
    }
    // Nothing was taken by the refused ones: the genuine one still opens.
    assert!(s1.open(0, &m).is_ok());
    assert_eq!(
        s1.open(0, &m[..TRAILER - 1]),
        Err(SealError::Short(TRAILER - 1))
    );
}

#[test]
fn keys_are_per_direction_pair_and_process() {
    let (mut s0, mut s1) = pair();
    // Rank 1's message to 0 is not a message from 0 to 1: replaying it
    // back to its sender fails.
    let m = sealed(&mut s1, 0, b"x", &[0; DIGEST_LEN]);
    let mut back = Seals::new(vec![None, None]);
    let key = JobKey::from_bytes([7; 32]);
    let c = KeyMaker::new(&key, 42, 1).unwrap();
    back.set_keys(0, Some(c.pair(0, &[0; NONCE_LEN])));
    assert!(
        matches!(back.open(0, &m), Err(SealError::BadTag(0))),
        "another process's nonce"
    );
    assert!(
        matches!(s1.open(0, &m), Err(SealError::BadTag(0))),
        "the other direction"
    );
    assert!(s0.open(1, &m).is_ok());
    // Another job key: nothing opens.
    let other = KeyMaker::new(&JobKey::from_bytes([8; 32]), 42, 0).unwrap();
    let mut o = Seals::new(vec![None, None]);
    o.set_keys(1, Some(other.pair(1, &[0; NONCE_LEN])));
    let m = sealed(&mut o, 1, b"y", &[0; DIGEST_LEN]);
    assert!(matches!(s1.open(0, &m), Err(SealError::BadTag(_))));
    // No keys: refused.
    let mut none = Seals::new(vec![None, None]);
    assert_eq!(none.open(0, &m), Err(SealError::NoKey));
    assert!(!none.seal(1, &mut vec![], &[0; DIGEST_LEN]));
}

#[test]
fn reordered_messages_open_within_the_window_once_each() {
    let (mut s0, mut s1) = pair();
    let msgs: Vec<Vec<u8>> = (0..3 * WINDOW)
        .map(|i| sealed(&mut s0, 1, &i.to_le_bytes(), &[0; DIGEST_LEN]))
        .collect();
    // Pairs swapped, then every message again: each opens once.
    let mut order: Vec<usize> = (0..msgs.len()).collect();
    for c in order.chunks_mut(2) {
        c.reverse();
    }
    for &i in &order {
        assert!(s1.open(0, &msgs[i]).is_ok(), "message {i}");
    }
    for (i, m) in msgs.iter().enumerate() {
        assert!(s1.open(0, m).is_err(), "message {i} twice");
    }
}

#[test]
fn the_window_matches_a_set_of_taken_numbers() {
    let mut w = Window::default();
    let mut taken = std::collections::BTreeSet::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let top = taken.last().map_or(0, |t| t + 1);
        let seq = (top + x % 200).saturating_sub(150 + (x >> 60) * 400);
        let expect = !taken.contains(&seq) && (seq >= top || top - 1 - seq < WINDOW);
        assert_eq!(w.fresh(seq), expect, "seq {seq}, top {top}");
        if expect {
            w.take(seq);
            taken.insert(seq);
        }
    }
}
