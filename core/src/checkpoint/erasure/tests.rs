use super::*;
use proptest::prelude::*;

fn group() -> EcGroup {
    EcGroup {
        index: 2,
        members: vec![0, 4, 8],
        parity: vec![1, 5],
    }
}

fn stamp() -> Stamp {
    Stamp {
        job: JobId(7),
        version: 3,
        type_tag: 99,
    }
}

fn expect() -> Expect {
    Expect {
        job: JobId(7),
        type_tag: 99,
        owner: None,
        version: Some(3),
        level: None,
    }
}

#[test]
fn unequal_shards_are_padded_and_rebuilt_at_their_lengths() {
    let data: [&[u8]; 3] = [b"alpha", b"", b"a longer state"];
    let parity = encode(&data, 2).unwrap();
    assert_eq!(parity.len(), 2);
    assert!(parity.iter().all(|p| p.len() == 14));
    let lens = [5, 0, 14];
    let shards = [
        None,
        Some(&b""[..]),
        None,
        Some(&parity[0][..]),
        Some(&parity[1][..]),
    ];
    let got = rebuild(&lens, 2, &shards).unwrap();
    assert_eq!(got, data.map(<[u8]>::to_vec));
}

#[test]
fn fewer_than_k_survivors_is_an_error() {
    let data: [&[u8]; 3] = [b"ab", b"cd", b"ef"];
    let parity = encode(&data, 1).unwrap();
    let shards = [None, None, Some(&b"ef"[..]), Some(&parity[0][..])];
    assert_eq!(
        rebuild(&[2, 2, 2], 1, &shards),
        Err(ErasureError::TooFew {
            have: 2,
            k: 3,
            m: 1
        })
    );
}

#[test]
fn bad_geometry_and_lengths_are_refused() {
    assert!(matches!(encode(&[], 1), Err(ErasureError::Geometry { .. })));
    assert!(matches!(
        encode(&[b"x"], 0),
        Err(ErasureError::Geometry { .. })
    ));
    let many = vec![&b"x"[..]; 250];
    assert!(matches!(
        encode(&many, 7),
        Err(ErasureError::Geometry { .. })
    ));
    let shards = [Some(&b"abc"[..]), None, Some(&b"zz"[..])];
    assert!(matches!(
        rebuild(&[2, 2], 1, &shards),
        Err(ErasureError::ShardLength { index: 0, .. })
    ));
    // A forged length larger than any survivor: refused before allocating.
    let shards = [None, Some(&b"ab"[..]), Some(&b"zz"[..])];
    assert!(matches!(
        rebuild(&[u64::MAX, 2], 1, &shards),
        Err(ErasureError::ShardLength { index: 2, .. })
    ));
}

#[test]
fn pieces_round_trip_through_loss() {
    let data: [&[u8]; 3] = [b"rank zero", b"rank four!!", b"eight"];
    let pieces = encode_pieces(stamp(), &group(), &data).unwrap();
    assert_eq!(pieces.len(), 5);
    let owners: Vec<u32> = pieces
        .iter()
        .map(|p| piece::decode(p).unwrap().header.owner)
        .collect();
    assert_eq!(owners, vec![0, 4, 8, 1, 5]);
    let kept: Vec<&[u8]> = [&pieces[1], &pieces[3], &pieces[4]]
        .map(Vec::as_slice)
        .to_vec();
    let (members, got) = rebuild_pieces(&kept, &expect()).unwrap();
    assert_eq!(members, vec![0, 4, 8]);
    assert_eq!(got, data.map(<[u8]>::to_vec));
}

#[test]
fn foreign_or_mixed_pieces_are_refused() {
    let data: [&[u8]; 3] = [b"a", b"b", b"c"];
    let pieces = encode_pieces(stamp(), &group(), &data).unwrap();
    let other = encode_pieces(
        Stamp {
            version: 4,
            ..stamp()
        },
        &group(),
        &data,
    )
    .unwrap();
    let mixed: Vec<&[u8]> = vec![&pieces[0], &pieces[1], &other[3]];
    assert!(matches!(
        rebuild_pieces(&mixed, &expect()),
        Err(ErasureError::Piece(PieceError::WrongVersion { .. }))
    ));
    let mut g2 = group();
    g2.index = 3;
    let moved = encode_pieces(stamp(), &g2, &data).unwrap();
    let mixed: Vec<&[u8]> = vec![&pieces[0], &pieces[1], &moved[3]];
    assert!(matches!(
        rebuild_pieces(&mixed, &expect()),
        Err(ErasureError::Mismatch(_))
    ));
    let foreign = Expect {
        job: JobId(8),
        ..expect()
    };
    let all: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
    assert!(matches!(
        rebuild_pieces(&all, &foreign),
        Err(ErasureError::Piece(PieceError::ForeignJob { .. }))
    ));
    assert!(matches!(
        rebuild_pieces(&[], &expect()),
        Err(ErasureError::TooFew { .. })
    ));
}

proptest! {
    #[test]
    fn any_m_lost_shards_are_rebuilt_byte_exact(
        data in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..9),
        m in 1usize..5,
        lost_seed in proptest::collection::vec(any::<proptest::sample::Index>(), 0..5),
    ) {
        let k = data.len();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let parity = encode(&refs, m).unwrap();
        let lens: Vec<u64> = data.iter().map(|d| d.len() as u64).collect();
        let mut shards: Vec<Option<&[u8]>> =
            refs.iter().copied().chain(parity.iter().map(Vec::as_slice)).map(Some).collect();
        // Lose up to m distinct shards, data or parity.
        for seed in lost_seed.iter().take(m) {
            let live: Vec<usize> = (0..k + m).filter(|&i| shards[i].is_some()).collect();
            shards[live[seed.index(live.len())]] = None;
        }
        let got = rebuild(&lens, m, &shards).unwrap();
        prop_assert_eq!(got, data.clone());
        // One more loss than m, if the data was touched, is refused.
        let lost = shards.iter().filter(|s| s.is_none()).count();
        if lost == m {
            let i = shards.iter().position(Option::is_some).unwrap();
            shards[i] = None;
            let refused = matches!(rebuild(&lens, m, &shards), Err(ErasureError::TooFew { .. }));
            prop_assert!(refused);
        }
    }

    #[test]
    fn any_m_lost_pieces_of_a_group_are_rebuilt(
        data in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..6),
        m in 1usize..4,
        lost in proptest::collection::btree_set(0usize..9, 0..4),
    ) {
        let k = data.len();
        let g = EcGroup {
            index: 0,
            members: (0..k as u32).collect(),
            parity: (100..100 + m as u32).collect(),
        };
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let pieces = encode_pieces(stamp(), &g, &refs).unwrap();
        let lost: Vec<usize> = lost.into_iter().filter(|&i| i < k + m).take(m).collect();
        let kept: Vec<&[u8]> = pieces
            .iter()
            .enumerate()
            .filter(|(i, _)| !lost.contains(i))
            .map(|(_, p)| p.as_slice())
            .collect();
        let (members, got) = rebuild_pieces(&kept, &expect()).unwrap();
        prop_assert_eq!(members, g.members);
        prop_assert_eq!(got, data);
    }
}

/// The parity of whole shards coded at once, without stripes.
fn whole(data: &[&[u8]], m: usize) -> Vec<Vec<u8>> {
    let lens: Vec<u64> = data.iter().map(|d| d.len() as u64).collect();
    let len = shard_len(&lens);
    let mut enc = ReedSolomonEncoder::new(data.len(), m, len).unwrap();
    for d in data {
        enc.add_original_shard(padded(d, len)).unwrap();
    }
    let out = enc.encode().unwrap();
    out.recovery_iter().map(<[u8]>::to_vec).collect()
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
        .collect()
}

#[test]
fn shards_of_several_stripes_are_coded_as_whole_shards_and_rebuilt() {
    // Unequal lengths, with a tail that is not a multiple of 64.
    let shards = [
        bytes(2 * STRIPE + 1000, 3),
        bytes(STRIPE, 5),
        bytes(2 * STRIPE + 998, 7),
    ];
    let data: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
    let mut coder = Coder::new();
    let parity = coder.encode(&data, 2).unwrap();
    assert_eq!(parity, whole(&data, 2));
    // The coder reused for another geometry still agrees.
    assert_eq!(coder.encode(&data[..2], 3).unwrap(), whole(&data[..2], 3));
    let lens: Vec<u64> = data.iter().map(|d| d.len() as u64).collect();
    let lost = [
        None,
        Some(data[1]),
        None,
        Some(&parity[0][..]),
        Some(&parity[1][..]),
    ];
    assert_eq!(rebuild(&lens, 2, &lost).unwrap(), shards.to_vec());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn striped_parity_is_the_whole_shards_parity(
        lens in proptest::collection::vec(0usize..(3 * STRIPE), 1..5),
        m in 1usize..4,
    ) {
        let shards: Vec<Vec<u8>> = lens.iter().enumerate().map(|(i, &l)| bytes(l, i as u8 * 2 + 1)).collect();
        let data: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
        prop_assert_eq!(Coder::new().encode(&data, m).unwrap(), whole(&data, m));
    }
}
