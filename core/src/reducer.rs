//! The [`ReducerBody`] trait and its type-erased codec.
//!
//! A user's data type implements [`ReducerBody`]: "fold the other side's
//! archived value into mine". The other side is read **in place** from the
//! receive buffer as an rkyv archive: no deserialisation, no extra copy.
//! Every type that implements `ReducerBody` and derives rkyv's `Archive`,
//! `Serialize` and `Deserialize` is a [`ReduceValue`] the runtime can move.

use crate::error::FoldError;
use crate::id::stable_hash;
use bytes::Bytes;
use rkyv::api::high::{HighDeserializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::seal::Seal;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize};
use std::any::Any;

/// User data that can be reduced.
///
/// ```
/// use rkyv::{Archive, Deserialize, Serialize};
/// use taskfold_core::{FoldError, ReducerBody};
///
/// /// Counts events and keeps the largest value seen.
/// #[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
/// struct Stats { count: u64, max: f64 }
///
/// impl ReducerBody for Stats {
///     fn fold(&mut self, other: &ArchivedStats) -> Result<(), FoldError> {
///         self.count += other.count.to_native();
///         self.max = self.max.max(other.max.to_native());
///         Ok(())
///     }
/// }
/// ```
///
/// `fold` must be associative and commutative: the runtime folds
/// contributions in arrival order, along a tree it builds at run time.
pub trait ReducerBody: Archive + Send + Sized + 'static {
    /// Folds the peer's archived value into `self`. Return an error (never
    /// panic) when the two sides cannot be combined, e.g. different lengths.
    fn fold(&mut self, other: &Self::Archived) -> Result<(), FoldError>;

    /// A size every rank's contribution must share (e.g. an array length),
    /// checked by the master before any data moves. `None` skips the check.
    fn shape(&self) -> Option<u64> {
        None
    }

    /// Roughly how many bytes the archive takes, so that serialising
    /// allocates once instead of growing (default: unknown, 0).
    fn size_hint(&self) -> usize {
        0
    }

    /// Whether [`ReducerBody::fold_archived`] is implemented (default:
    /// no). With it, a rank that is not the root folds into the receive
    /// buffer and serves the result from there: the folded value is never
    /// serialised again, which saves one copy of the data per task.
    const FOLDS_ARCHIVES: bool = false;

    /// Folds `other` into `mine`, both archives; `mine` is mutable in
    /// place through rkyv's [`Seal`] (destructure it with
    /// `rkyv::munge::munge!`, and take a vector's elements with
    /// `ArchivedVec::as_slice_seal`). Implement it together with
    /// [`ReducerBody::FOLDS_ARCHIVES`]; the same rules as for
    /// [`ReducerBody::fold`] apply.
    ///
    /// ```
    /// use rkyv::{munge::munge, seal::Seal, vec::ArchivedVec, Archive, Deserialize, Serialize};
    /// use taskfold_core::{FoldError, ReducerBody};
    ///
    /// /// Counts per bin.
    /// #[derive(Archive, Serialize, Deserialize)]
    /// struct Histogram(Vec<u64>);
    ///
    /// impl ReducerBody for Histogram {
    ///     fn fold(&mut self, other: &ArchivedHistogram) -> Result<(), FoldError> {
    ///         for (m, t) in self.0.iter_mut().zip(other.0.iter()) {
    ///             *m += t.to_native();
    ///         }
    ///         Ok(())
    ///     }
    ///
    ///     const FOLDS_ARCHIVES: bool = true;
    ///
    ///     fn fold_archived(
    ///         mine: Seal<'_, ArchivedHistogram>,
    ///         other: &ArchivedHistogram,
    ///     ) -> Result<(), FoldError> {
    ///         munge!(let ArchivedHistogram(bins) = mine);
    ///         let mut bins = ArchivedVec::as_slice_seal(bins);
    ///         for (m, t) in bins.iter_mut().zip(other.0.iter()) {
    ///             *m = (m.to_native() + t.to_native()).into();
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// ```
    fn fold_archived(
        mine: Seal<'_, Self::Archived>,
        other: &Self::Archived,
    ) -> Result<(), FoldError> {
        let _ = (mine, other);
        Err(FoldError::Custom(format!(
            "{} does not fold archives (FOLDS_ARCHIVES is false)",
            std::any::type_name::<Self>()
        )))
    }

    /// For element-wise arrays: where the elements lie in the archive and
    /// how element bytes combine, so that a peer's archive is folded piece
    /// by piece while the rest of it is still on the network (see
    /// [`crate::pieces`]). Default: `None`, folded once it is whole.
    ///
    /// Only for types whose archive holds all their data as one array of
    /// plain little-endian elements whose fold is element by element (a
    /// newtype of a `Vec` of numbers, as the built-ins), with the rest of
    /// the archive the same for any two values that may be folded together
    /// (checked: a piece that differs there is an error). Requires
    /// [`ReducerBody::FOLDS_ARCHIVES`] on ranks other than the root.
    ///
    /// ```
    /// use rkyv::{munge::munge, seal::Seal, vec::ArchivedVec, Archive, Deserialize, Serialize};
    /// use taskfold_core::pieces::{combine, Piecewise};
    /// use taskfold_core::{FoldError, ReducerBody};
    ///
    /// /// Counts per bin.
    /// #[derive(Archive, Serialize, Deserialize)]
    /// struct Histogram(Vec<u64>);
    ///
    /// impl ReducerBody for Histogram {
    ///     fn fold(&mut self, other: &ArchivedHistogram) -> Result<(), FoldError> {
    ///         for (m, t) in self.0.iter_mut().zip(other.0.iter()) {
    ///             *m += t.to_native();
    ///         }
    ///         Ok(())
    ///     }
    ///
    ///     const FOLDS_ARCHIVES: bool = true;
    ///
    ///     fn fold_archived(
    ///         mine: Seal<'_, ArchivedHistogram>,
    ///         other: &ArchivedHistogram,
    ///     ) -> Result<(), FoldError> {
    ///         munge!(let ArchivedHistogram(bins) = mine);
    ///         let mut bins = ArchivedVec::as_slice_seal(bins);
    ///         for (m, t) in bins.iter_mut().zip(other.0.iter()) {
    ///             *m = (m.to_native() + t.to_native()).into();
    ///         }
    ///         Ok(())
    ///     }
    ///
    ///     fn piecewise() -> Option<Piecewise<ArchivedHistogram>> {
    ///         cfg!(target_endian = "little").then_some(Piecewise {
    ///             elem: 8,
    ///             elements: |a| {
    ///                 let bins = a.0.as_slice();
    ///                 (bins.as_ptr() as usize, std::mem::size_of_val(bins))
    ///             },
    ///             combine: |out, mine, theirs| combine::<u64>(out, mine, theirs, |a, b| a + b),
    ///         })
    ///     }
    /// }
    /// ```
    fn piecewise() -> Option<Piecewise<Self::Archived>> {
        None
    }
}

/// The outcome of [`ReduceValue::fold_into`].
pub enum FoldInto {
    /// The fold ran inside the peer's buffer; this value is the result,
    /// backed by that buffer.
    Folded(Box<dyn ReduceValue>),
    /// This value cannot fold into an archive: fold the peer's bytes into
    /// it instead ([`ReduceValue::fold_bytes`]). Both are handed back.
    Unsupported(Box<dyn ReduceValue>, AlignedVec),
    /// The fold failed; this value is unchanged.
    Failed(Box<dyn ReduceValue>, FoldError),
}

/// A value the runtime can serialise, fold from raw bytes and hand back.
///
/// Implemented for every [`ReducerBody`] with rkyv's derives; object-safe so
/// that one worker can hold reductions of many types at once.
pub trait ReduceValue: Send + 'static {
    /// Serialises the value into an aligned rkyv archive.
    fn encode(&self) -> Result<AlignedVec, FoldError> {
        self.encode_after(0)
    }
    /// Serialises the value after `header` reserved zero bytes (a multiple
    /// of 16, so the archive stays aligned): a replica header can then be
    /// written in place, without copying the archive.
    fn encode_after(&self, header: usize) -> Result<AlignedVec, FoldError>;
    /// Decodes a whole value of this type (used to reload an original after
    /// a failure).
    fn decoder(&self) -> Decoder;
    /// Decodes a whole value of this type that may keep the archive it
    /// was given instead of copying it (an allreduce's or a broadcast's
    /// value, [`crate::InPlace`] arrays), if this type can; `None` (the
    /// default) uses [`ReduceValue::decoder`].
    fn shared_decoder(&self) -> Option<SharedDecoder> {
        None
    }
    /// Validates `bytes` as an archive of this type and folds it into `self`
    /// in place (the bytes are not deserialised).
    fn fold_bytes(&mut self, bytes: &[u8]) -> Result<(), FoldError>;
    /// See [`ReducerBody::shape`].
    fn shape_hint(&self) -> Option<u64>;
    /// Roughly how many bytes the archive takes (0: unknown); see
    /// [`ReducerBody::size_hint`].
    fn encoded_len_hint(&self) -> usize;
    /// Converts to `Any` so the typed future can recover the value.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
    /// The serialised form, if this value is held as an archive already
    /// (then serving it needs no encoding).
    fn encoded(&self) -> Option<Bytes> {
        None
    }
    /// Trades this value for one held as `buf[offset..]`, its own
    /// serialised form, if it can be held that way (its type folds
    /// archives); otherwise returns itself. Frees the native value's
    /// memory. The held value folds into `buf` in place whenever no
    /// [`Bytes`] of it is alive.
    fn into_archived(
        self: Box<Self>,
        buf: crate::pool::SharedBuf,
        offset: usize,
    ) -> Box<dyn ReduceValue>;
    /// Folds this value into the peer's archive at `buf[offset..]` (`offset`
    /// a multiple of 16), in place: see [`FoldInto`].
    fn fold_into(self: Box<Self>, buf: AlignedVec, offset: usize) -> FoldInto;
    /// Gives up a value that is laid out in its wire form already
    /// ([`crate::InPlace`]): its buffer, with `header` bytes free at the
    /// start and the archive after them, and how to make the value to hold
    /// from the shared archive. Any other value comes back (`Err`), to be
    /// serialised.
    fn into_encoded(
        self: Box<Self>,
        header: usize,
    ) -> Result<(AlignedVec, Hold), Box<dyn ReduceValue>>;
    /// A fold of a peer's archive that arrives in pieces (see
    /// [`crate::pieces`]), if this value can do one (an archive or an
    /// [`crate::InPlace`] of a type with [`ReducerBody::piecewise`]);
    /// otherwise the value comes back.
    #[allow(clippy::type_complexity)]
    fn fold_pieces(self: Box<Self>) -> Result<Box<dyn PieceFold>, Box<dyn ReduceValue>>;
}

/// A serialised value's buffer (an rkyv archive, 16-byte aligned).
pub type EncodedBuf = AlignedVec;

/// Makes the value a rank holds from its buffer and the archive's offset
/// in it (see [`ReduceValue::into_encoded`]).
pub type Hold = fn(crate::pool::SharedBuf, usize) -> Box<dyn ReduceValue>;

/// Decodes an archive into a boxed value of the type that made the decoder.
pub type Decoder = fn(&[u8]) -> Result<Box<dyn ReduceValue>, FoldError>;

/// Decodes an archive into a boxed value that may keep the archive's
/// [`Bytes`] rather than copy them (see [`ReduceValue::shared_decoder`]).
pub type SharedDecoder = fn(Bytes) -> Result<Box<dyn ReduceValue>, FoldError>;

/// A stable tag of a value's type, used to detect ranks that reduce
/// different types under one id.
pub fn type_tag<T: 'static>() -> u64 {
    stable_hash(std::any::type_name::<T>())
}

/// Decodes a whole value from an archive (used only where a value must be
/// owned, e.g. a recovered original; folds never deserialise).
pub fn decode<T>(bytes: &[u8]) -> Result<T, FoldError>
where
    T: Archive,
    T::Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
        + Deserialize<T, HighDeserializer<rancor::Error>>,
{
    rkyv::from_bytes::<T, rancor::Error>(bytes).map_err(|e| FoldError::Corrupt(e.to_string()))
}

/// Where the elements of an element-wise array type lie in its archive, and
/// how element bytes combine (see [`ReducerBody::piecewise`]).
pub struct Piecewise<A> {
    /// Bytes of one element.
    pub elem: usize,
    /// The archive's elements: the address of the first one and their
    /// length in bytes (a whole number of elements).
    pub elements: fn(&A) -> (usize, usize),
    /// `out = mine ⊕ theirs`, element by element, over element bytes of
    /// equal length that start on an element boundary.
    pub combine: fn(out: &mut [u8], mine: &[u8], theirs: &[u8]),
}

/// A fold of a peer's archive that arrives in pieces.
pub trait PieceFold: Send {
    /// Folds bytes `offset..offset + bytes.len()` of the peer's archive
    /// (pieces may come in any order, never overlapping).
    fn piece(&mut self, offset: usize, bytes: &[u8]) -> Result<(), FoldError>;
    /// Bytes of this value's archive: the peer's must be as long.
    fn len(&self) -> usize;
    /// Whether the archive is empty (never, for a valid archive).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes folded so far.
    fn folded(&self) -> usize;
    /// Every piece is in: the folded value (the old value's buffer is let
    /// go), or the unchanged value and why the pieces did not make an
    /// archive like its own.
    #[allow(clippy::type_complexity)]
    fn finish(self: Box<Self>) -> Result<Box<dyn ReduceValue>, (Box<dyn ReduceValue>, FoldError)>;
    /// The transfer failed: the value, unchanged.
    fn abort(self: Box<Self>) -> Box<dyn ReduceValue>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Sum;

    #[test]
    fn fold_from_bytes_in_place() {
        let mut a = Sum(vec![1.0f32, 2.0]);
        let b = Sum(vec![10.0f32, 20.0]).encode().unwrap();
        a.fold_bytes(&b).unwrap();
        assert_eq!(a.0, vec![11.0, 22.0]);
        let back: Sum<f32> = decode(&b).unwrap();
        assert_eq!(back.0, vec![10.0, 20.0]);
    }

    #[test]
    fn encode_after_a_header_and_decode() {
        let v = Sum(vec![1.5f64, 2.5]);
        let buf = v.encode_after(16).unwrap();
        assert_eq!(&buf[..16], &[0; 16]);
        let back = (v.decoder())(&buf[16..]).unwrap();
        let mut a = Sum(vec![1.0f64, 1.0]);
        a.fold_bytes(&back.encode().unwrap()).unwrap();
        assert_eq!(a.0, vec![2.5, 3.5]);
    }

    #[test]
    fn corrupt_bytes_are_an_error() {
        let mut a = Sum(vec![1.0f32, 2.0]);
        let mut b = Sum(vec![10.0f32, 20.0]).encode().unwrap();
        let n = b.len();
        // Point the vector's relative offset far outside the buffer.
        b[n - 8..n - 4].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
        assert!(matches!(a.fold_bytes(&b), Err(FoldError::Corrupt(_))));
        assert!(matches!(
            a.fold_bytes(&[1, 2, 3]),
            Err(FoldError::Corrupt(_))
        ));
    }
}
