//! Every fuzz target on a bounded number of generated cases, the edge
//! cases found while fuzzing, and proof that the harness fails a
//! decoder that panics or over-allocates.

use arbitrary::Unstructured;
use taskfold_fuzz::{alloc, run_case, target, targets, Failure, Rng, Target, SLACK};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// Cases per target: a few seconds for all of them in a test build.
const CASES: u64 = 20_000;

fn run_many(t: &Target, seed: u64, cases: u64) -> (u64, Vec<String>) {
    let mut rng = Rng::new(seed);
    let mut data = Vec::new();
    let hits = taskfold_fuzz::hits();
    let mut failures = Vec::new();
    for _ in 0..cases {
        rng.input(&mut data, 4096);
        if let Err(f) = run_case(t, &data) {
            if failures.len() < 3 {
                let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
                failures.push(format!("{}: {f}; input {hex}", t.name));
            }
        }
    }
    (taskfold_fuzz::hits() - hits, failures)
}

#[test]
fn the_counting_allocator_is_installed() {
    assert!(alloc::installed());
}

#[test]
fn every_target_holds_its_contract_on_generated_cases() {
    assert!(alloc::installed());
    for t in targets() {
        let (decoded, failures) = run_many(&t, 0x5eed, CASES);
        assert!(failures.is_empty(), "{failures:#?}");
        // The inputs reach past the first checks: some decode and are
        // round-tripped, or the run proves little.
        assert!(
            decoded >= CASES / 100,
            "{}: only {decoded} of {CASES} cases decoded",
            t.name
        );
    }
}

#[test]
fn a_panicking_decoder_fails() {
    fn panics(u: &mut Unstructured<'_>) -> arbitrary::Result<usize> {
        let b: &[u8] = u.bytes(1)?;
        let _ = [0u8; 2][usize::from(b[0]) % 3];
        Ok(SLACK)
    }
    let t = Target {
        name: "panics",
        checks: "indexes out of bounds on one input in three",
        run: panics,
    };
    let (_, failures) = run_many(&t, 1, 100);
    assert!(!failures.is_empty());
    assert!(matches!(run_case(&t, &[2]), Err(Failure::Panic(_))));
    assert_eq!(run_case(&t, &[1]).map(|_| ()), Ok(()));
}

#[test]
fn an_over_allocating_decoder_fails() {
    fn allocates(u: &mut Unstructured<'_>) -> arbitrary::Result<usize> {
        let n = usize::from(u.arbitrary::<u16>()?);
        let v = std::hint::black_box(vec![1u8; n]);
        drop(v);
        Ok(1000)
    }
    let t = Target {
        name: "allocates",
        checks: "allocates what its input says",
        run: allocates,
    };
    assert!(matches!(
        run_case(&t, &60_000u16.to_le_bytes()),
        Err(Failure::Alloc { peak, bound: 1000 }) if peak >= 60_000
    ));
    assert!(run_case(&t, &10u16.to_le_bytes()).is_ok());
}

/// Inputs found while fuzzing (or on reading the decoders), each run on
/// every target it may concern.
#[test]
fn edge_cases() {
    let cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![0xff; 64],
        vec![0; 4096],
        // A frame header announcing the largest payload.
        taskfold_transports::tcp::frame::Header::new(6, u32::MAX)
            .encode()
            .to_vec(),
        b"tf-rendezvous 1 job=0x2a addr=127.0.0.1:9\n".to_vec(),
        b"tfFIname".to_vec(),
        b"TFCK\x01\x00\x03\x00".to_vec(),
        b"TFRP\0\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff".to_vec(),
    ];
    for t in targets() {
        for c in &cases {
            assert!(run_case(&t, c).is_ok(), "{} on {c:02x?}", t.name);
        }
    }
}

#[test]
fn a_loan_descriptor_wider_than_u32_is_refused() {
    use taskfold_transports::tcp::frame::{decode_lend, encode_lend, kind, Header};
    use taskfold_transports::tcp::fuzzing::lend;
    let heap = taskfold_transports::shm::HeapRef {
        fd: 3,
        ino: 4,
        len: 5,
        offset: 6,
    };
    let mut body = encode_lend(7, Some(heap));
    assert_eq!(decode_lend(&body), Ok((7, Some(heap))));
    body[8 + 4] = 1;
    let h = Header::new(kind::GET_LEND, body.len() as u32).encode();
    assert!(lend(u64::MAX, &h, &body).is_err());
}

#[test]
fn a_chunk_past_the_get_maximum_allocates_nothing() {
    use taskfold_transports::tcp::frame::{kind, Header};
    use taskfold_transports::tcp::fuzzing::{chunks, REQ};
    let h = Header {
        kind: kind::GET_CHUNK,
        len: 16,
        a: REQ,
        b: 0,
        c: 1 << 40,
    };
    alloc::reset();
    let run = chunks(1 << 20, 1 << 16, false, &[h.encode()]);
    assert!(run.error.is_some() && run.capacity == 0, "{run:?}");
    assert!(alloc::peak() < SLACK, "{}", alloc::peak());
    // Within the maximum: the buffer holds what arrived.
    let h = Header { c: 32, ..h };
    let run = chunks(
        1 << 20,
        1 << 16,
        false,
        &[h.encode(), Header { b: 16, ..h }.encode()],
    );
    assert!(run.completed && run.len == 32, "{run:?}");
}

#[test]
fn targets_are_named_uniquely() {
    let all = targets();
    for t in &all {
        assert_eq!(target(t.name).map(|x| x.name), Some(t.name));
    }
    let mut names: Vec<_> = all.iter().map(|t| t.name).collect();
    names.dedup();
    assert_eq!(names.len(), all.len());
}
