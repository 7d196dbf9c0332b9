//! Fuzz targets of every decoder a peer (or a file another process wrote)
//! reaches: the TCP frames, hello, table, addresses, get chunks and loans,
//! the handshake's challenge, the rendezvous file, the control envelope,
//! replica headers, checkpoint pieces and their erasure rebuild, the
//! settings and test hooks, and (feature `libfabric`) the fabric messages.
//!
//! A target takes an [`arbitrary::Unstructured`] and builds its input:
//! raw bytes, a valid encoding, or a valid encoding mutated (see
//! [`shaped`]), so that the checks past the magic numbers are reached.
//! It asserts the decoder's contract (never a panic, typed errors, a
//! successful decode re-encodes to the same bytes where an encoder exists,
//! lengths bounded) and returns the largest single allocation it allows
//! for this case. [`run_case`] catches a panic and compares the largest
//! allocation seen ([`alloc`]) with that bound: either is a [`Failure`].
//!
//! The same targets run three ways (see the book's Security chapter): the
//! `fuzz` binary (long runs), `cargo test -p taskfold-fuzz` (a bounded
//! number of cases per target) and cargo-fuzz (`fuzz_targets/`).

pub mod alloc;
mod targets;

use arbitrary::{Arbitrary, Unstructured};
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    /// Cases of this thread whose input decoded (see [`hits`]).
    static HITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts a case whose input decoded successfully, so that a run shows
/// its round trips were exercised, not only its refusals.
pub(crate) fn hit() {
    HITS.with(|h| h.set(h.get() + 1));
}

/// Cases of this thread whose input decoded successfully so far.
pub fn hits() -> u64 {
    HITS.with(std::cell::Cell::get)
}

/// Bytes allowed for any case beyond what its input explains: error
/// messages, small vectors.
pub const SLACK: usize = 16 << 10;

/// One fuzz target.
#[derive(Clone, Copy)]
pub struct Target {
    /// Its name (`--target NAME`).
    pub name: &'static str,
    /// What it checks, for the report.
    pub checks: &'static str,
    /// Runs one case; panics if the contract is broken; returns the
    /// largest single allocation allowed for this case.
    pub run: fn(&mut Unstructured<'_>) -> arbitrary::Result<usize>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every target.
pub fn targets() -> Vec<Target> {
    targets::all()
}

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    targets().into_iter().find(|t| t.name == name)
}

/// A broken contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The target panicked (a decoder panic or a failed assertion).
    Panic(String),
    /// An allocation larger than the target's bound for this case.
    Alloc {
        /// Largest single allocation seen.
        peak: usize,
        /// The bound.
        bound: usize,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Panic(m) => write!(f, "panic: {m}"),
            Failure::Alloc { peak, bound } => {
                write!(f, "allocation of {peak} bytes, bound {bound}")
            }
        }
    }
}

/// Runs `t` on `data`: `Ok(peak)`, the largest single allocation, or the
/// failure. Running out of data is not a failure (the input is what it is).
/// The allocation bound is checked only if [`alloc::Counting`] is the
/// global allocator (else `peak` is 0).
pub fn run_case(t: &Target, data: &[u8]) -> Result<usize, Failure> {
    static WARM: std::sync::Once = std::sync::Once::new();
    WARM.call_once(warm_up);
    alloc::reset();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut u = Unstructured::new(data);
        (t.run)(&mut u)
    }));
    let peak = alloc::peak();
    match result {
        Err(p) => Err(Failure::Panic(panic_message(&p))),
        Ok(Err(_)) => Ok(peak),
        Ok(Ok(bound)) if peak > bound => Err(Failure::Alloc { peak, bound }),
        Ok(Ok(_)) => Ok(peak),
    }
}

/// Makes what decoders build once per process (the erasure coder's
/// multiplication tables, several MiB) before any case is measured: a
/// one-time table is not an allocation a peer's input causes.
fn warm_up() {
    let _ = taskfold_core::checkpoint::erasure::encode(&[&[1, 2], &[3]], 2);
    let _ = taskfold_core::checkpoint::erasure::rebuild(
        &[2, 1],
        2,
        &[None, Some(&[3]), Some(&[0, 0]), Some(&[0, 0])],
    );
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// A fast, seeded pseudo-random generator (SplitMix64) for the inputs.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator started at `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fills `out` with an input of random length: mostly short (most
    /// decoders' interesting inputs are), sometimes up to `max` bytes.
    pub fn input(&mut self, out: &mut Vec<u8>, max: usize) {
        let r = self.next_u64();
        let cap = if r & 15 == 0 { max } else { max.min(256) };
        let len = ((r >> 8) as usize) % (cap + 1);
        out.clear();
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
    }
}

/// Bytes for a decoder: raw, `valid`'s encoding as it is, or mutated
/// (bytes flipped, cut, inserted, set to extremes).
pub fn shaped(
    u: &mut Unstructured<'_>,
    valid: impl FnOnce(&mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>>,
) -> arbitrary::Result<Vec<u8>> {
    match u.int_in_range(0..=3u8)? {
        0 => Vec::<u8>::arbitrary(u),
        1 => valid(u),
        _ => {
            let mut v = valid(u)?;
            mutate(u, &mut v)?;
            Ok(v)
        }
    }
}

/// Applies one to four random edits to `v`.
pub fn mutate(u: &mut Unstructured<'_>, v: &mut Vec<u8>) -> arbitrary::Result<()> {
    for _ in 0..u.int_in_range(1..=4u8)? {
        let at = if v.is_empty() {
            0
        } else {
            u.choose_index(v.len() + 1)?
        };
        match u.int_in_range(0..=4u8)? {
            0 if at < v.len() => v[at] ^= u.int_in_range(1..=255u8)?,
            1 => v.truncate(at),
            2 => v.insert(at.min(v.len()), u8::arbitrary(u)?),
            3 if at < v.len() => v[at] = *u.choose(&[0, 1, 0x7f, 0x80, 0xff])?,
            _ if at + 8 <= v.len() => {
                let w = *u.choose(&[0, 1, u64::MAX, u64::MAX / 2, u32::MAX as u64 + 1])?;
                v[at..at + 8].copy_from_slice(&w.to_le_bytes());
            }
            _ => {}
        }
    }
    Ok(())
}
