//! Frame headers, hellos, tables and loans: round trips and refusals.

use super::*;

#[test]
fn header_round_trip() {
    let h = Header {
        kind: kind::GET_CHUNK,
        len: 7,
        a: 1,
        b: 2,
        c: u64::MAX,
    };
    assert_eq!(Header::decode(&h.encode()), Ok(h));
}

#[test]
fn bad_headers_are_refused() {
    let mut h = Header::new(kind::CONTROL, 1).encode();
    h[0] = b'X';
    assert!(Header::decode(&h).is_err());
    assert!(Header::decode(&Header::new(99, 0).encode()).is_err());
    assert!(Header::decode(&Header::new(kind::GOODBYE, 5).encode()).is_err());
    let mut h = Header::new(kind::CONTROL, 1).encode();
    h[3] = 1;
    assert!(Header::decode(&h).is_err());
    // A loan names the owner's pid, and maybe a place in its heap.
    for len in [LEND_LEN, LEND_HEAP_LEN] {
        assert!(Header::decode(&Header::new(kind::GET_LEND, len).encode()).is_ok());
    }
    for len in [0, 16, 41] {
        assert!(Header::decode(&Header::new(kind::GET_LEND, len).encode()).is_err());
    }
    // The handshake's frames have fixed lengths.
    for (k, len) in [(kind::CHALLENGE, CHALLENGE_LEN), (kind::PROOF, PROOF_LEN)] {
        assert!(Header::decode(&Header::new(k, len as u32).encode()).is_ok());
        assert!(Header::decode(&Header::new(k, len as u32 + 1).encode()).is_err());
        assert!(Header::decode(&Header::new(k, 0).encode()).is_err());
    }
    // A choice of wire offers nothing or one offer of rings; its answer
    // is bodiless.
    for len in [0, RINGS_OFFER_LEN] {
        assert!(Header::decode(&Header::new(kind::RINGS, len).encode()).is_ok());
    }
    for len in [1, RINGS_OFFER_LEN - 1, RINGS_OFFER_LEN + 1, 4096] {
        assert!(Header::decode(&Header::new(kind::RINGS, len).encode()).is_err());
    }
    assert!(Header::decode(&Header::new(kind::RINGS_TAKEN, 0).encode()).is_ok());
    assert!(Header::decode(&Header::new(kind::RINGS_TAKEN, 1).encode()).is_err());
}

#[test]
fn hello_round_trip() {
    for addr in [
        None,
        Some("127.0.0.1:4000".parse().unwrap()),
        Some("[::1]:9".parse().unwrap()),
    ] {
        let h = Hello {
            version: VERSION,
            role: Role::Register,
            job: 0xdead_beef,
            rank: 3,
            size: 8,
            addr,
            node: 0x0123_4567_89ab_cdef,
            nonce: [7; NONCE_LEN],
            incarnation: 5,
            mac: true,
        };
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
    }
    assert!(Hello::decode(&[1]).is_err());
    let v = VERSION.to_le_bytes();
    assert!(Hello::decode(&[v[0], v[1], 9]).is_err());
    // Another version is decoded as far as the version, to be refused.
    let other = (VERSION + 1).to_le_bytes();
    assert_eq!(Hello::decode(&other).map(|h| h.version), Ok(VERSION + 1));
}

#[test]
fn oversize_sync_frame_is_refused() {
    let mut bytes = Header::new(kind::CONTROL, 1 << 30).encode().to_vec();
    bytes.extend_from_slice(&[0; 16]);
    let err = read_frame_sync(&mut &bytes[..], 1024).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(read_frame_sync(&mut &[][..], 1024).unwrap().is_none());
}

#[test]
fn lend_round_trip_and_wide_descriptor() {
    let heap = HeapRef {
        fd: u32::MAX,
        ino: 1,
        len: 2,
        offset: 3,
    };
    for h in [None, Some(heap)] {
        assert_eq!(decode_lend(&encode_lend(7, h)), Ok((7, h)));
    }
    // A descriptor word beyond u32 would name another descriptor once
    // truncated: it is refused.
    let mut b = encode_lend(7, Some(heap));
    b[12] = 1;
    assert!(decode_lend(&b).is_err());
    assert!(decode_lend(&[0; 16]).is_err());
}

#[test]
fn table_round_trip() {
    let t = vec![
        Entry {
            addr: "127.0.0.1:1".parse().unwrap(),
            node: 7,
            incarnation: 0,
            dead: false,
        },
        Entry {
            addr: "[::1]:2".parse().unwrap(),
            node: u64::MAX,
            incarnation: 3,
            dead: true,
        },
    ];
    assert_eq!(decode_table(&encode_table(&t), 2), Ok(t.clone()));
    assert!(decode_table(&[0; 5], 1).is_err());
    // A status byte other than live (0) or failed (1) is refused.
    let mut b = encode_table(&t[..1]);
    b[ENTRY_LEN - 1] = 2;
    assert!(decode_table(&b, 1).unwrap_err().contains("status"));
}
