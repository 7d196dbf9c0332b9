//! Folding a peer's archive piece by piece, while the rest of it is still on
//! its way: fetch and fold overlap.
//!
//! A get that streams a contribution (another node, or same-node reads
//! turned off) hands it over in segments as they are read. A value whose
//! type says where its elements lie and how they combine
//! ([`ReducerBody::piecewise`], the built-in arrays) folds each segment at
//! once, while the transport reads the next one. Without it the fold waits
//! for the last byte.
//!
//! The fold writes `mine ⊕ theirs` into a new buffer and leaves the value
//! unchanged until every piece is in: if the transfer fails half-way, the
//! value comes back intact ([`PieceFold::abort`]) and the task can be
//! redone, as recovery requires (a provider that dies mid-transfer is
//! fetched again from a copy). It reads and writes as many bytes as an
//! in-place fold (read both, write one).
//!
//! The peer's bytes are untrusted: a piece beyond this value's archive, or
//! bytes outside the elements that differ from this value's (the archive's
//! root, which two arrays of one type and length share), end the fold with
//! an error, and so does a set of pieces that does not cover the archive.
//! Elements are plain numbers: any bytes are valid ones.

use crate::error::FoldError;
use crate::pool;
use crate::reducer::{ReduceValue, ReducerBody};
use rkyv::util::AlignedVec;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// Pieces folded by this process so far (every [`PieceFold`]).
static FOLDED: AtomicU64 = AtomicU64::new(0);

/// How many pieces of peers' archives this process folded as they arrived
/// (a whole archive handed over at once counts as one piece): tests and
/// the rank programs report it to show that streamed gets were pipelined.
pub fn pieces_folded() -> u64 {
    FOLDED.load(Ordering::Relaxed)
}

/// The vocabulary a [`ReducerBody`] speaks about pieces (defined with the
/// trait that names it).
pub use crate::reducer::{PieceFold, Piecewise};

/// Where an archive's elements lie and how they combine.
struct Span {
    /// The element bytes within the archive.
    elems: Range<usize>,
    /// Bytes of one element.
    elem: usize,
    combine: fn(&mut [u8], &[u8], &[u8]),
}

impl Span {
    /// The span of `T`'s archive `bytes` (`archived`, the same bytes
    /// accessed), if `T` combines piecewise and says sensible things.
    fn of<T: ReducerBody>(bytes: &[u8], archived: &T::Archived) -> Option<Span> {
        let p = T::piecewise()?;
        let (addr, n) = (p.elements)(archived);
        let start = addr.wrapping_sub(bytes.as_ptr() as usize);
        let len = bytes.len();
        if start > len || n > len - start || p.elem == 0 || !n.is_multiple_of(p.elem) {
            return None;
        }
        Some(Span {
            elems: start..start + n,
            elem: p.elem,
            combine: p.combine,
        })
    }

    /// Writes `out[offset..offset + theirs.len()]` = `mine ⊕ theirs` over
    /// that range of the archive (`out` and `mine` are whole archives;
    /// `theirs` is the peer's bytes of the range). Bytes outside the
    /// elements must be the same on both sides, and the range must not
    /// split an element.
    fn fold(
        &self,
        out: &mut [u8],
        mine: &[u8],
        offset: usize,
        theirs: &[u8],
    ) -> Result<(), FoldError> {
        let (len, end) = (mine.len(), offset + theirs.len());
        // Three parts: before the elements, the elements, after them.
        let cut = |a: usize, b: usize| (a.max(offset), b.min(end));
        for (a, b, elements) in [
            (0, self.elems.start, false),
            (self.elems.start, self.elems.end, true),
            (self.elems.end, len, false),
        ] {
            let (a, b) = cut(a, b);
            if a >= b {
                continue;
            }
            let t = &theirs[a - offset..b - offset];
            let o = &mut out[a..b];
            if elements {
                if !(a - self.elems.start).is_multiple_of(self.elem)
                    || !(b - self.elems.start).is_multiple_of(self.elem)
                {
                    return Err(FoldError::Corrupt(format!(
                        "a piece of the peer's archive ({offset}+{}) splits an element",
                        theirs.len()
                    )));
                }
                (self.combine)(o, &mine[a..b], t);
            } else if t != &mine[a..b] {
                return Err(FoldError::Corrupt(
                    "the peer's archive is laid out unlike this value's".into(),
                ));
            } else {
                o.copy_from_slice(t);
            }
        }
        Ok(())
    }
}

/// `mine ⊕ theirs` written into a new buffer from the pool, in one pass
/// (read both, write one; the buffer is not zeroed first when the pool
/// recycles it, see [`pool::take_filled`]), for a type that combines piecewise: how a value
/// whose bytes others still see (an original kept for recovery, which a
/// buddy may be reading in place) folds, instead of copying itself first
/// and folding the copy. `None` if `T` does not combine piecewise or the
/// archives differ in length.
/// `theirs` must be a validated archive of a `T`.
pub(crate) fn fold_into_new<T: ReducerBody>(
    mine: &[u8],
    archived: &T::Archived,
    theirs: &[u8],
) -> Option<Result<AlignedVec, FoldError>> {
    if theirs.len() != mine.len() {
        // Arrays of different lengths: the type's own fold says so in its
        // terms (a mismatch of element counts).
        return None;
    }
    let span = Span::of::<T>(mine, archived)?;
    let mut out = pool::take_filled(mine.len());
    match span.fold(&mut out, mine, 0, theirs) {
        Ok(()) => Some(Ok(out)),
        Err(e) => {
            pool::give(out);
            Some(Err(e))
        }
    }
}

/// The piece fold of a value whose archive is `mine(value)`.
pub(crate) struct Pieces<V> {
    /// Unchanged until [`PieceFold::finish`].
    value: Box<V>,
    /// The value's archive.
    mine: fn(&V) -> &[u8],
    /// The folded value from the new buffer (the old value is dropped).
    make: fn(Box<V>, AlignedVec) -> Box<dyn ReduceValue>,
    /// Bytes before the archive in `out` (a replica header's room).
    head: usize,
    /// The new buffer: `head` bytes, then the folded archive so far.
    out: AlignedVec,
    /// Length of the archive.
    len: usize,
    /// Where its elements lie and how they combine.
    span: Span,
    folded: usize,
}

impl<V: ReduceValue> Pieces<V> {
    /// A piece fold of `value`, if `T` combines piecewise; else `value`.
    #[allow(clippy::new_ret_no_self)] // the fold is handed out as a trait object
    pub(crate) fn new<T: ReducerBody>(
        value: Box<V>,
        mine: fn(&V) -> &[u8],
        archived: impl FnOnce(&[u8]) -> Option<&T::Archived>,
        make: fn(Box<V>, AlignedVec) -> Box<dyn ReduceValue>,
        head: usize,
    ) -> Result<Box<dyn PieceFold>, Box<V>> {
        let bytes = mine(&value);
        let Some(span) = archived(bytes).and_then(|a| Span::of::<T>(bytes, a)) else {
            return Err(value);
        };
        let len = bytes.len();
        let mut out = pool::take(head + len);
        out.resize(head, 0);
        Ok(Box::new(Pieces {
            value,
            mine,
            make,
            head,
            out,
            len,
            span,
            folded: 0,
        }))
    }
}

impl<V: ReduceValue> PieceFold for Pieces<V> {
    fn piece(&mut self, offset: usize, bytes: &[u8]) -> Result<(), FoldError> {
        let end = offset
            .checked_add(bytes.len())
            .filter(|&e| e <= self.len)
            .ok_or_else(|| {
                FoldError::Corrupt(format!(
                    "a piece at {offset}+{} runs past this value's archive of {} bytes",
                    bytes.len(),
                    self.len
                ))
            })?;
        let (head, mine) = (self.head, (self.mine)(&self.value));
        if self.out.len() < head + end {
            // Pieces come in order from a stream: this zeroes only the new
            // piece's room, which the fold then overwrites while it is hot.
            self.out.resize(head + end, 0);
        }
        self.span.fold(&mut self.out[head..], mine, offset, bytes)?;
        self.folded += bytes.len();
        FOLDED.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn len(&self) -> usize {
        self.len
    }

    fn folded(&self) -> usize {
        self.folded
    }

    fn finish(self: Box<Self>) -> Result<Box<dyn ReduceValue>, (Box<dyn ReduceValue>, FoldError)> {
        let this = *self;
        if this.folded != this.len || this.out.len() != this.head + this.len {
            let e = FoldError::Corrupt(format!(
                "the peer's pieces cover {} of this value's {} bytes",
                this.folded, this.len
            ));
            pool::give(this.out);
            return Err((this.value, e));
        }
        Ok((this.make)(this.value, this.out))
    }

    fn abort(self: Box<Self>) -> Box<dyn ReduceValue> {
        let this = *self;
        pool::give(this.out);
        this.value
    }
}

/// `out = f(mine, theirs)` over element bytes of plain `T` (in place when
/// the three are aligned for `T`, element by element otherwise).
pub fn combine<T: bytemuck::Pod>(
    out: &mut [u8],
    mine: &[u8],
    theirs: &[u8],
    f: impl Fn(T, T) -> T,
) {
    let aligned = (
        bytemuck::try_cast_slice_mut::<u8, T>(out),
        bytemuck::try_cast_slice::<u8, T>(mine),
        bytemuck::try_cast_slice::<u8, T>(theirs),
    );
    if let (Ok(o), Ok(m), Ok(t)) = aligned {
        for ((o, &m), &t) in o.iter_mut().zip(m).zip(t) {
            *o = f(m, t);
        }
        return;
    }
    let n = std::mem::size_of::<T>();
    for ((o, m), t) in out
        .chunks_exact_mut(n)
        .zip(mine.chunks_exact(n))
        .zip(theirs.chunks_exact(n))
    {
        let v = f(
            bytemuck::pod_read_unaligned(m),
            bytemuck::pod_read_unaligned(t),
        );
        o.copy_from_slice(bytemuck::bytes_of(&v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reducer::{decode, ReduceValue};
    use crate::{InPlace, Max, Sum};

    /// `v` held as its archive, as on a rank other than the root.
    fn held<T: ReduceValue>(v: T) -> Box<dyn ReduceValue> {
        let b = Box::new(v);
        let buf = pool::SharedBuf::new(b.encode().unwrap());
        b.into_archived(buf, 0)
    }

    fn archive<T: ReduceValue>(v: T) -> AlignedVec {
        v.encode().unwrap()
    }

    /// Folds `theirs` into `mine` in pieces cut at `cuts`, in `order`.
    fn by_pieces(
        mine: Box<dyn ReduceValue>,
        theirs: &[u8],
        cuts: &[usize],
        reverse: bool,
    ) -> Result<Box<dyn ReduceValue>, FoldError> {
        let mut f = mine.fold_pieces().ok().expect("built-ins fold in pieces");
        let mut bounds = vec![0];
        bounds.extend(cuts.iter().copied().filter(|&c| c > 0 && c < theirs.len()));
        bounds.push(theirs.len());
        bounds.sort_unstable();
        bounds.dedup();
        let mut pieces: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
        if reverse {
            pieces.reverse();
        }
        for (a, b) in pieces {
            f.piece(a, &theirs[a..b])?;
        }
        f.finish().map_err(|(_, e)| e)
    }

    #[test]
    fn pieces_fold_like_the_whole() {
        let theirs = archive(Sum((0..1000).map(|i| i as f32 * 0.5).collect::<Vec<_>>()));
        for cuts in [vec![], vec![400], vec![4, 8, 2000, 3996], vec![4000]] {
            for reverse in [false, true] {
                let mine = held(Sum(vec![1.0f32; 1000]));
                let v = by_pieces(mine, &theirs, &cuts, reverse).expect("folds");
                let got: Sum<f32> = decode(&v.encoded().unwrap()).unwrap();
                let want: Vec<f32> = (0..1000).map(|i| 1.0 + i as f32 * 0.5).collect();
                assert_eq!(got.0, want, "cuts {cuts:?} reverse {reverse}");
            }
        }
    }

    #[test]
    fn an_in_place_root_folds_in_pieces_and_stays_in_place() {
        let theirs = archive(Max(vec![5i64, -1, 9]));
        let mine: Box<dyn ReduceValue> = Box::new(InPlace::<Max<i64>>::from_slice(&[4, 2, 10]));
        let v = by_pieces(mine, &theirs, &[8], false).expect("folds");
        let got = v.into_any().downcast::<InPlace<Max<i64>>>().unwrap();
        assert_eq!(got.as_slice(), &[5, 2, 10]);
    }

    #[test]
    fn an_aborted_fold_gives_the_value_back_unchanged() {
        let theirs = archive(Sum(vec![7u32; 64]));
        let mine = held(Sum(vec![1u32; 64]));
        let mut f = mine.fold_pieces().ok().unwrap();
        assert_eq!(f.len(), theirs.len(), "two arrays of one length");
        f.piece(0, &theirs[..128]).unwrap();
        assert_eq!(f.folded(), 128);
        let back = f.abort();
        let v: Sum<u32> = decode(&back.encoded().unwrap()).unwrap();
        assert_eq!(v.0, vec![1u32; 64], "the transfer failed: nothing changed");
    }

    #[test]
    fn bad_pieces_are_errors_and_leave_the_value_unchanged() {
        let theirs = archive(Sum(vec![3i32; 16]));
        // Not covering the archive.
        let e = by_pieces(held(Sum(vec![1i32; 16])), &theirs[..32], &[], false).err();
        assert!(matches!(e, Some(FoldError::Corrupt(_))), "{e:?}");
        // Past its end.
        let mut f = held(Sum(vec![1i32; 16])).fold_pieces().ok().unwrap();
        let e = f.piece(60, &theirs[..16]).unwrap_err();
        assert!(matches!(e, FoldError::Corrupt(_)));
        // Splitting an element.
        let e = by_pieces(held(Sum(vec![1i32; 16])), &theirs, &[6], false)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("splits an element"), "{e}");
        // Another layout (a longer array's root): refused, and the value is
        // given back as it was.
        let mut other = theirs.clone();
        let n = other.len();
        other[n - 1] ^= 1;
        let mine = held(Sum(vec![1i32; 16]));
        let mut f = mine.fold_pieces().ok().unwrap();
        assert!(f.piece(0, &other).is_err());
        let back = f.finish().err().expect("not every byte folded").0;
        let v: Sum<i32> = decode(&back.encoded().unwrap()).unwrap();
        assert_eq!(v.0, vec![1i32; 16]);
    }

    #[test]
    fn native_values_and_other_types_fold_whole() {
        let native: Box<dyn ReduceValue> = Box::new(Sum(vec![1.0f64]));
        assert!(native.fold_pieces().is_err(), "a native root value");
        #[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        struct Count(u64);
        impl ReducerBody for Count {
            fn fold(&mut self, o: &ArchivedCount) -> Result<(), FoldError> {
                self.0 += o.0.to_native();
                Ok(())
            }
            const FOLDS_ARCHIVES: bool = true;
            fn fold_archived(
                mine: rkyv::seal::Seal<'_, ArchivedCount>,
                o: &ArchivedCount,
            ) -> Result<(), FoldError> {
                rkyv::munge::munge!(let ArchivedCount(mut c) = mine);
                *c = (c.to_native() + o.0.to_native()).into();
                Ok(())
            }
        }
        assert!(held(Count(1)).fold_pieces().is_err(), "no piecewise layout");
    }

    proptest::proptest! {
        #[test]
        fn any_element_aligned_cuts_give_the_whole_fold(
            cuts in proptest::collection::vec(0usize..300, 0..6),
            reverse: bool,
        ) {
            let theirs = archive(Sum((0..300i64).collect::<Vec<_>>()));
            let cuts: Vec<usize> = cuts.iter().map(|c| c * 8).collect();
            let v = by_pieces(held(Sum(vec![2i64; 300])), &theirs, &cuts, reverse).expect("folds");
            let got: Sum<i64> = decode(&v.encoded().unwrap()).unwrap();
            proptest::prop_assert_eq!(got.0, (0..300i64).map(|i| i + 2).collect::<Vec<_>>());
        }
    }
}
