use super::*;
use proptest::prelude::*;

fn key(b: u8) -> JobKey {
    JobKey::from_bytes([b; KEY_LEN])
}

/// Runs a whole handshake: the caller's result on the challenge, then the
/// listener's on the proof (if the caller sent one).
fn run(
    caller_key: &JobKey,
    listener_key: &JobKey,
    claim: &[u8],
    callee: u32,
    nonces: (Nonce, Nonce),
) -> (Result<Proof, AuthError>, Option<Result<(), AuthError>>) {
    let mut caller = Handshake::call(caller_key, claim, callee, nonces.0);
    let (mut listener, challenge) =
        Handshake::listen(listener_key, claim, callee, nonces.0, nonces.1);
    let c = caller.on_challenge(&challenge);
    let l = c.as_ref().ok().map(|p| listener.on_proof(p));
    (c, l)
}

#[test]
fn the_same_key_authenticates_both_sides() {
    let (n1, n2) = (Nonce([1; NONCE_LEN]), Nonce([2; NONCE_LEN]));
    let mut caller = Handshake::call(&key(7), b"hello", 3, n1);
    let (mut listener, challenge) = Handshake::listen(&key(7), b"hello", 3, n1, n2);
    let proof = caller.on_challenge(&challenge).expect("listener proven");
    assert!(caller.is_authenticated());
    listener.on_proof(&proof).expect("caller proven");
    assert!(listener.is_authenticated());
}

#[test]
fn another_key_fails_at_the_first_check_and_stays_failed() {
    let (n1, n2) = (Nonce([1; NONCE_LEN]), Nonce([2; NONCE_LEN]));
    assert_eq!(
        run(&key(1), &key(2), b"x", 0, (n1, n2)).0,
        Err(AuthError::Listener)
    );
    // A caller without the key that ignores the listener's proof and
    // sends a guess is refused.
    let (mut listener, _) = Handshake::listen(&key(2), b"x", 0, n1, n2);
    assert_eq!(
        listener.on_proof(&Proof([0; PROOF_LEN])),
        Err(AuthError::Caller)
    );
    assert_eq!(listener, Handshake::Failed(AuthError::Caller));
    // Nothing is accepted after a failure, not even the right proof.
    let mut caller = Handshake::call(&key(2), b"x", 0, n1);
    let (_, c) = Handshake::listen(&key(2), b"x", 0, n1, n2);
    let right = caller.on_challenge(&c).expect("proof");
    assert!(matches!(
        listener.on_proof(&right),
        Err(AuthError::OutOfOrder(_))
    ));
}

#[test]
fn steps_out_of_order_are_refused() {
    let n = Nonce([1; NONCE_LEN]);
    let mut caller = Handshake::call(&key(1), b"x", 0, n);
    assert!(matches!(
        caller.on_proof(&Proof([0; PROOF_LEN])),
        Err(AuthError::OutOfOrder(_))
    ));
    let (mut listener, c) = Handshake::listen(&key(1), b"x", 0, n, n);
    assert!(matches!(
        listener.on_challenge(&c),
        Err(AuthError::OutOfOrder(_))
    ));
}

#[test]
fn a_replayed_transcript_is_refused() {
    // A recorded connection: the claim and the caller's proof.
    let (n1, n2) = (Nonce([1; NONCE_LEN]), Nonce([2; NONCE_LEN]));
    let mut caller = Handshake::call(&key(9), b"claim", 0, n1);
    let (_, challenge) = Handshake::listen(&key(9), b"claim", 0, n1, n2);
    let recorded = caller.on_challenge(&challenge).expect("proof");
    // Replayed on a new connection, where the listener draws a new nonce.
    let (mut again, _) = Handshake::listen(&key(9), b"claim", 0, n1, Nonce([3; NONCE_LEN]));
    assert_eq!(again.on_proof(&recorded), Err(AuthError::Caller));
}

#[test]
fn a_listener_proof_is_no_caller_proof() {
    // Reflection: the listener's own proof sent back as the caller's.
    let n = Nonce([5; NONCE_LEN]);
    let (mut listener, challenge) = Handshake::listen(&key(4), b"c", 2, n, n);
    assert_eq!(listener.on_proof(&challenge.proof), Err(AuthError::Caller));
}

#[test]
fn keys_in_hex() {
    let k = JobKey::from_bytes(core::array::from_fn(|i| i as u8 * 7));
    assert_eq!(JobKey::from_hex(&k.to_hex()), Some(k.clone()));
    assert_eq!(
        JobKey::from_hex(&format!("  {}\n", k.to_hex().to_uppercase())),
        Some(k.clone())
    );
    assert_eq!(k.to_hex().len(), 64);
    for bad in ["", "00", &"g".repeat(64), &"0".repeat(63), &"0".repeat(65)] {
        assert_eq!(JobKey::from_hex(bad), None, "{bad:?}");
    }
    let shown = format!("{k:?} {:?}", JobAuth::Key(k.clone()));
    assert!(!shown.contains(&k.to_hex()[..8]), "{shown}");
    assert_eq!(JobAuth::Insecure.key(), &JobKey::PUBLIC);
}

#[test]
fn the_refusal_says_why_and_nothing_else() {
    assert_eq!(AuthError::Caller.to_string(), REFUSAL);
    assert!(REFUSAL.contains("not of this job"));
    let c = Challenge {
        nonce: Nonce([1; NONCE_LEN]),
        proof: Proof([2; PROOF_LEN]),
    };
    assert_eq!(Challenge::decode(&c.encode()), Some(c));
    assert_eq!(Challenge::decode(&[0; CHALLENGE_LEN - 1]), None);
}

fn nonce() -> impl Strategy<Value = Nonce> {
    any::<[u8; NONCE_LEN]>().prop_map(Nonce)
}

proptest! {
    #[test]
    fn equal_inputs_authenticate(
        k in any::<[u8; KEY_LEN]>(),
        claim in proptest::collection::vec(any::<u8>(), 0..100),
        callee in any::<u32>(),
        n1 in nonce(),
        n2 in nonce(),
    ) {
        let k = JobKey::from_bytes(k);
        let (c, l) = run(&k, &k, &claim, callee, (n1, n2));
        prop_assert!(c.is_ok());
        prop_assert_eq!(l, Some(Ok(())));
    }

    /// Any change of what a proof is bound to (the key, the claim, the
    /// callee, either nonce) makes it fail, on either side.
    #[test]
    fn every_binding_counts(
        k in any::<[u8; KEY_LEN]>(),
        claim in proptest::collection::vec(any::<u8>(), 1..100),
        callee in any::<u32>(),
        n1 in nonce(),
        n2 in nonce(),
        which in 0usize..5,
        flip in any::<usize>(),
    ) {
        let k = JobKey::from_bytes(k);
        let bit = |len: usize| (flip % len, 1u8 << (flip % 8));
        // The caller's view of the connection, changed in one input.
        let (mut ck, mut cclaim, mut ccallee, mut cn1) = (k.clone(), claim.clone(), callee, n1);
        let mut listener_nonce = n2;
        match which {
            0 => { let mut b = k.0; let (i, m) = bit(KEY_LEN); b[i] ^= m; ck = JobKey(b); }
            1 => { let (i, m) = bit(cclaim.len()); cclaim[i] ^= m; }
            2 => ccallee ^= 1 << (flip % 32),
            3 => { let (i, m) = bit(NONCE_LEN); cn1.0[i] ^= m; }
            _ => { let (i, m) = bit(NONCE_LEN); listener_nonce.0[i] ^= m; }
        }
        let mut caller = Handshake::call(&ck, &cclaim, ccallee, cn1);
        let (_, challenge) = Handshake::listen(&k, &claim, callee, n1, n2);
        // The listener's nonce as the caller receives it (a changed one:
        // a challenge of another connection).
        let seen = Challenge { nonce: listener_nonce, proof: challenge.proof };
        prop_assert_eq!(caller.on_challenge(&seen), Err(AuthError::Listener));
        // And a proof made from the changed view fails at the listener.
        let t = Transcript { key: ck, claim: cclaim, callee: ccallee, caller_nonce: cn1 };
        let forged = t.prove(Side::Caller, &listener_nonce);
        let (mut listener, _) = Handshake::listen(&k, &claim, callee, n1, n2);
        prop_assert_eq!(listener.on_proof(&forged), Err(AuthError::Caller));
    }
}

#[test]
fn a_wiped_key_is_zero() {
    let mut k = JobKey::from_hex(&"5a".repeat(32)).unwrap();
    assert!(!k.is_zero());
    k.wipe();
    assert!(k.is_zero());
    assert_eq!(k, JobKey::PUBLIC);
}
