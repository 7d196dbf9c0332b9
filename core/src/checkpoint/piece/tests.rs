use super::*;
use proptest::prelude::*;

fn header(level: Level) -> Header {
    Header {
        job: JobId(0xfeed),
        owner: 3,
        version: 42,
        type_tag: 0xabc,
        level,
        shard: None,
    }
}

fn l3_header(index: u16, owner: u32, lens: Vec<u64>) -> Header {
    Header {
        owner,
        shard: Some(Shard {
            group: 1,
            members: vec![3, 7, 9],
            m: 2,
            index,
            lens,
        }),
        ..header(Level::L3)
    }
}

fn expect() -> Expect {
    Expect {
        job: JobId(0xfeed),
        type_tag: 0xabc,
        owner: Some(3),
        version: Some(42),
        level: Some(Level::L1),
    }
}

#[test]
fn round_trip_every_level() {
    for level in [Level::L1, Level::L2, Level::L4] {
        let bytes = encode(&header(level), b"state").unwrap();
        assert_eq!(bytes.len(), FIXED_LEN + 5 + SUM_LEN);
        let p = decode(&bytes).unwrap();
        assert_eq!(p.header, header(level));
        assert_eq!(p.payload, b"state");
    }
    let h = l3_header(1, 7, vec![4, 5, 0]);
    let bytes = encode(&h, b"hello").unwrap();
    let p = decode(&bytes).unwrap();
    assert_eq!(p.header, h);
    assert_eq!(p.payload, b"hello");
    // A parity piece is as long as the padded shards.
    let parity = l3_header(3, 11, vec![4, 5, 0]);
    assert!(encode(&parity, &[0; 5]).is_err());
    let p = encode(&parity, &[1; 6]).unwrap();
    assert_eq!(decode(&p).unwrap().header, parity);
}

#[test]
fn inconsistent_headers_are_never_written() {
    let mut h = header(Level::L3);
    assert!(matches!(encode(&h, b"x"), Err(PieceError::Malformed(_))));
    h = l3_header(0, 3, vec![1, 1, 1]);
    h.level = Level::L1;
    assert!(matches!(encode(&h, b"x"), Err(PieceError::Malformed(_))));
    // Data shard 1 belongs to rank 7, not 3.
    assert!(encode(&l3_header(1, 3, vec![1, 1, 1]), b"x").is_err());
    assert!(encode(&l3_header(5, 3, vec![1, 1, 1]), b"xx").is_err());
    assert!(encode(&l3_header(0, 3, vec![1, 1]), b"x").is_err());
    assert!(encode(&l3_header(0, 3, vec![2, 1, 1]), b"x").is_err());
}

#[test]
fn damage_is_named() {
    let bytes = encode(&header(Level::L1), b"state").unwrap();
    let mut bad = bytes.clone();
    bad[FIXED_LEN + 1] ^= 0x10;
    assert_eq!(decode(&bad), Err(PieceError::Checksum));
    let mut bad = bytes.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert_eq!(decode(&bad), Err(PieceError::Checksum));
    assert!(matches!(
        decode(&bytes[..bytes.len() - 1]),
        Err(PieceError::Truncated { .. })
    ));
    assert!(matches!(
        decode(&bytes[..10]),
        Err(PieceError::Truncated { .. })
    ));
    let mut long = bytes.clone();
    long.push(0);
    assert!(matches!(
        decode(&long),
        Err(PieceError::TrailingBytes { .. })
    ));
    assert_eq!(decode(b"GARBAGE!"), Err(PieceError::BadMagic));
    let mut bad = bytes.clone();
    bad[4] = 9;
    assert_eq!(decode(&bad), Err(PieceError::Format(9)));
    let mut bad = bytes.clone();
    bad[6] = 7;
    assert!(matches!(decode(&bad), Err(PieceError::Malformed(_))));
}

#[test]
fn foreign_pieces_are_named() {
    let bytes = encode(&header(Level::L1), b"state").unwrap();
    assert!(check(&bytes, &expect()).is_ok());
    let cases = [
        Expect {
            job: JobId(1),
            ..expect()
        },
        Expect {
            type_tag: 1,
            ..expect()
        },
        Expect {
            owner: Some(4),
            ..expect()
        },
        Expect {
            version: Some(41),
            ..expect()
        },
        Expect {
            level: Some(Level::L2),
            ..expect()
        },
    ];
    for e in cases {
        let err = check(&bytes, &e).unwrap_err();
        assert!(err.is_foreign(), "{err}");
    }
    assert!(matches!(
        check(&bytes, &cases[0]),
        Err(PieceError::ForeignJob { .. })
    ));
    assert!(matches!(
        check(&bytes, &cases[1]),
        Err(PieceError::WrongType { .. })
    ));
    let any = Expect {
        owner: None,
        version: None,
        level: None,
        ..expect()
    };
    assert!(check(&bytes, &any).is_ok());
    assert!(!PieceError::Checksum.is_foreign());
}

#[test]
fn a_huge_announced_geometry_allocates_nothing() {
    // An L3 header announcing 65,535 members in 80 bytes: truncated, with
    // no allocation for the members.
    let mut bytes = encode(&header(Level::L1), b"").unwrap();
    bytes[6] = 3;
    bytes[20..22].copy_from_slice(&u16::MAX.to_le_bytes());
    bytes[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(decode(&bytes), Err(PieceError::Truncated { .. })));
}

proptest! {
    #[test]
    fn any_flipped_byte_is_refused(
        payload in proptest::collection::vec(any::<u8>(), 0..200),
        l3 in any::<bool>(),
        at in any::<proptest::sample::Index>(),
        bit in 0u8..8,
    ) {
        let h = if l3 {
            l3_header(0, 3, vec![payload.len() as u64, 3, 1])
        } else {
            header(Level::L2)
        };
        let bytes = encode(&h, &payload).unwrap();
        prop_assert_eq!(decode(&bytes).unwrap().payload, &payload[..]);
        let mut bad = bytes.clone();
        let i = at.index(bad.len());
        bad[i] ^= 1 << bit;
        prop_assert!(decode(&bad).is_err(), "flipped bit {} of byte {} accepted", bit, i);
    }

    #[test]
    fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn decoding_damaged_headers_never_panics(
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        edits in proptest::collection::vec((0usize..120, any::<u8>()), 1..6),
    ) {
        let mut bytes = encode(&l3_header(0, 3, vec![payload.len() as u64, 0, 9]), &payload).unwrap();
        for (at, v) in edits {
            let n = bytes.len();
            bytes[at % (n - SUM_LEN)] = v;
        }
        // Signed again, so that the edits reach the parser behind the
        // checksum; whatever it accepts must encode back to itself.
        let body = bytes.len() - SUM_LEN;
        let sum = *blake3::hash(&bytes[..body]).as_bytes();
        bytes[body..].copy_from_slice(&sum);
        if let Ok(p) = decode(&bytes) {
            prop_assert_eq!(encode(&p.header, p.payload).unwrap(), bytes.clone());
        }
    }
}
