//! Array contributions built in their wire form: no serialising copy.
//!
//! `rt.reduce(Sum(values), ..)` serialises the array once on every rank
//! that is not the root: one copy of the contribution, on the reduction's
//! critical path. An [`InPlace`] array is allocated in its wire form from
//! the start. The application computes its values straight into it
//! ([`InPlace::as_mut_slice`]) and `reduce` sends the buffer as it is —
//! like passing MPI its own send buffer.
//!
//! Layout of the buffer: a 16-byte replica header (filled when the
//! reduction starts), the `len` elements, then the 8-byte root of an rkyv
//! archive (a relative pointer back to the elements and their count).
//! Everything after the header is exactly an archive of the matching
//! [`crate::Sum`] (or `Min`, `Max`, `Prod`) of a `Vec`, so the other ranks
//! fold it like any other contribution, and with the same rules: a rank
//! that reduces `InPlace<Sum<f32>>` meets ranks that do the same.
//!
//! An array that arrives as another rank's archive (an allreduce's or a
//! broadcast's value, [`ReduceValue::shared_decoder`]) is read where it
//! lies, through the [`Bytes`] that hold it (on a node with the shared
//! heap, a view of the holder's memory): it is copied into a buffer of
//! this process only when the application changes it
//! ([`InPlace::as_mut_slice`]) or hands it to another reduction. The
//! holder's buffer stays allocated, unchanged, while such a value lives.

use crate::archived::Archived;
use crate::error::FoldError;
use crate::pool;
use crate::reducer::{decode, Decoder, FoldInto, Hold, ReduceValue, ReducerBody, SharedDecoder};
use crate::replica::HEADER_LEN;
use bytes::Bytes;
use rkyv::rancor;
use rkyv::util::AlignedVec;
use std::any::Any;
use std::marker::PhantomData;

/// Bytes of the archive's root after the elements: a relative pointer
/// (i32) and a length (u32), both little-endian.
const ROOT_LEN: usize = 8;

/// The built-in array reducers ([`crate::Sum`], [`crate::Min`],
/// [`crate::Max`], [`crate::Prod`] of `f32`, `f64`, `i32`, `i64`, `u32`,
/// `u64`), whose archives an [`InPlace`] buffer reproduces.
pub trait ArrayOp: ReducerBody + sealed::Sealed {
    /// The element type.
    type Elem: bytemuck::Pod;
    /// The reducer holding `values`.
    fn from_vec(values: Vec<Self::Elem>) -> Self;
    /// The reducer's values.
    fn into_vec(self) -> Vec<Self::Elem>;
}

pub(crate) mod sealed {
    /// Only the built-in array reducers have the archive layout
    /// [`super::InPlace`] writes.
    pub trait Sealed {}
}

/// An array contribution of reducer `R` (e.g. `InPlace<Sum<f32>>`), laid
/// out in its wire form.
///
/// ```
/// use taskfold_core::{InPlace, Sum};
///
/// let mut mine = InPlace::<Sum<f32>>::zeroed(4);
/// mine.as_mut_slice().copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
/// assert_eq!(mine.as_slice(), &[1.0, 2.0, 3.0, 4.0]);
/// // `rt.reduce(mine, Reduce::root(0))` sends it without serialising it;
/// // the root gets an `InPlace<Sum<f32>>` back.
/// ```
pub struct InPlace<R: ArrayOp> {
    buf: Buf,
    _op: PhantomData<fn() -> R>,
}

/// Where an [`InPlace`] array's bytes lie.
enum Buf {
    /// This process's own buffer (from the pool): header, elements, root.
    Own(AlignedVec),
    /// Another rank's archive (elements, root), read where it lies and
    /// never changed: copied into an `Own` buffer before any change.
    Shared(Bytes),
}

impl<R: ArrayOp> InPlace<R> {
    /// `len` zeros.
    ///
    /// # Panics
    ///
    /// If the archive would exceed rkyv's 2 GiB relative-pointer range.
    pub fn zeroed(len: usize) -> Self {
        Self::build(len, |buf, data| buf.resize(HEADER_LEN + data, 0))
    }

    /// A copy of `values` (one pass: the elements are not zeroed first).
    pub fn from_slice(values: &[R::Elem]) -> Self {
        Self::build(values.len(), |buf, _| {
            buf.resize(HEADER_LEN, 0);
            buf.extend_from_slice(bytemuck::cast_slice(values));
        })
    }

    /// Header, then the `len` elements that `fill` appends after it (`data`
    /// bytes), then the root.
    fn build(len: usize, fill: impl FnOnce(&mut AlignedVec, usize)) -> Self {
        let data = len * std::mem::size_of::<R::Elem>();
        let offset = i32::try_from(data).expect("an array archive is below 2 GiB");
        let len32 = u32::try_from(len).expect("an array archive is below 2 GiB");
        let mut buf = pool::take(HEADER_LEN + data + ROOT_LEN);
        fill(&mut buf, data);
        debug_assert_eq!(buf.len(), HEADER_LEN + data);
        // The root sits right after the elements: its relative pointer goes
        // back to the first element.
        buf.extend_from_slice(&(-offset).to_le_bytes());
        buf.extend_from_slice(&len32.to_le_bytes());
        InPlace {
            buf: Buf::Own(buf),
            _op: PhantomData,
        }
    }

    /// A copy of `bytes`, a validated archive of `R`, if it is laid out
    /// as this type's buffer after its header (the elements first, then
    /// the root pointing back to them, as every [`InPlace`] and every
    /// plain `Vec` archive of one writes it): one copy, where
    /// deserialising takes two. `None` for any other layout.
    fn of_archive(bytes: &[u8]) -> Option<Self> {
        let (len, data) = Self::layout(bytes)?;
        Some(Self::build(len, |buf, _| {
            buf.resize(HEADER_LEN, 0);
            buf.extend_from_slice(&bytes[..data]);
        }))
    }

    /// A copy of `bytes`, a validated archive of `R`: in one copy if it
    /// is laid out as this type's buffer, else deserialised.
    fn copied(bytes: &[u8]) -> Result<Self, FoldError>
    where
        R::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rancor::Error>>
            + rkyv::Deserialize<R, rkyv::api::high::HighDeserializer<rancor::Error>>,
    {
        match Self::of_archive(bytes) {
            Some(v) => Ok(v),
            None => Ok(InPlace::from_slice(&decode::<R>(bytes)?.into_vec())),
        }
    }

    /// `bytes`, a validated archive of `R` laid out as [`Self::of_archive`]
    /// takes it and aligned for the elements, kept where it lies: no copy.
    /// `None` otherwise.
    fn of_shared(bytes: Bytes) -> Option<Self> {
        Self::layout(&bytes)?;
        let aligned = (bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<R::Elem>());
        aligned.then(|| InPlace {
            buf: Buf::Shared(bytes),
            _op: PhantomData,
        })
    }

    /// The element count and the elements' bytes of an archive laid out
    /// with the elements first and the root right after them.
    fn layout(bytes: &[u8]) -> Option<(usize, usize)> {
        let data = bytes.len().checked_sub(ROOT_LEN)?;
        let word = |at: usize| -> Option<[u8; 4]> { bytes.get(at..at + 4)?.try_into().ok() };
        let offset = i64::from(i32::from_le_bytes(word(data)?));
        let len = u32::from_le_bytes(word(data + 4)?) as usize;
        let fits = len.checked_mul(std::mem::size_of::<R::Elem>()) == Some(data);
        (offset == -(data as i64) && fits).then_some((len, data))
    }

    /// The elements' bytes.
    fn data(&self) -> &[u8] {
        match &self.buf {
            Buf::Own(b) => &b[HEADER_LEN..b.len().saturating_sub(ROOT_LEN).max(HEADER_LEN)],
            Buf::Shared(b) => &b[..b.len().saturating_sub(ROOT_LEN)],
        }
    }

    /// This process's own buffer, a copy of the shared archive if the
    /// value was read where it lay (taken from the pool: header, archive).
    fn own(&mut self) -> &mut AlignedVec {
        if let Buf::Shared(b) = &self.buf {
            let mut own = pool::take(HEADER_LEN + b.len());
            own.resize(HEADER_LEN, 0);
            own.extend_from_slice(b);
            self.buf = Buf::Own(own);
        }
        match &mut self.buf {
            Buf::Own(b) => b,
            Buf::Shared(_) => unreachable!("made its own just above"),
        }
    }

    /// Whether the elements are read where another rank's archive lies
    /// (an allreduce's or a broadcast's value not changed since): no copy
    /// was made of them.
    pub fn is_shared(&self) -> bool {
        matches!(self.buf, Buf::Shared(_))
    }

    /// The elements.
    pub fn as_slice(&self) -> &[R::Elem] {
        bytemuck::cast_slice(self.data())
    }

    /// The elements, to fill in place (a value read where another rank's
    /// archive lies is copied first: see [`InPlace::is_shared`]).
    pub fn as_mut_slice(&mut self) -> &mut [R::Elem] {
        let buf = self.own();
        let end = buf.len() - ROOT_LEN;
        bytemuck::cast_slice_mut(&mut buf[HEADER_LEN..end])
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data().len() / std::mem::size_of::<R::Elem>()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as a `Vec` (a copy).
    pub fn to_vec(&self) -> Vec<R::Elem> {
        self.as_slice().to_vec()
    }

    /// The same buffer as a contribution of another array reducer of the
    /// same element type (e.g. `Sum<f32>` to `Max<f32>`), without copying:
    /// the layout depends on the element type alone.
    pub fn with_op<S: ArrayOp<Elem = R::Elem>>(mut self) -> InPlace<S> {
        InPlace {
            buf: std::mem::replace(&mut self.buf, Buf::Own(AlignedVec::new())),
            _op: PhantomData,
        }
    }

    /// The archive: everything after the header.
    fn archive(&self) -> &[u8] {
        match &self.buf {
            Buf::Own(b) => &b[HEADER_LEN..],
            Buf::Shared(b) => b,
        }
    }
}

impl<R: ArrayOp> std::fmt::Debug for InPlace<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InPlace")
            .field("op", &std::any::type_name::<R>())
            .field("len", &self.len())
            .finish()
    }
}

fn corrupt(e: rancor::Error) -> FoldError {
    FoldError::Corrupt(e.to_string())
}

impl<R> ReduceValue for InPlace<R>
where
    R: ArrayOp,
    Archived<R>: ReduceValue,
    R::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rancor::Error>>
        + rkyv::Deserialize<R, rkyv::api::high::HighDeserializer<rancor::Error>>,
{
    fn encode_after(&self, header: usize) -> Result<AlignedVec, FoldError> {
        let mut buf = pool::take(header + self.archive().len());
        buf.resize(header, 0);
        buf.extend_from_slice(self.archive());
        Ok(buf)
    }

    fn decoder(&self) -> Decoder {
        |bytes| {
            rkyv::access::<R::Archived, rancor::Error>(bytes).map_err(corrupt)?;
            Ok(Box::new(InPlace::<R>::copied(bytes)?) as Box<dyn ReduceValue>)
        }
    }

    fn shared_decoder(&self) -> Option<SharedDecoder> {
        Some(|bytes| {
            rkyv::access::<R::Archived, rancor::Error>(&bytes).map_err(corrupt)?;
            let v = match InPlace::<R>::of_shared(bytes.clone()) {
                Some(v) => v,
                None => InPlace::<R>::copied(&bytes)?,
            };
            Ok(Box::new(v) as Box<dyn ReduceValue>)
        })
    }

    fn fold_bytes(&mut self, bytes: &[u8]) -> Result<(), FoldError> {
        let other = rkyv::access::<R::Archived, rancor::Error>(bytes).map_err(corrupt)?;
        let mine = rkyv::access_mut::<R::Archived, rancor::Error>(&mut self.own()[HEADER_LEN..])
            .map_err(corrupt)?;
        R::fold_archived(mine, other)
    }

    fn shape_hint(&self) -> Option<u64> {
        Some(self.len() as u64)
    }

    fn encoded_len_hint(&self) -> usize {
        self.archive().len()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }

    fn into_archived(self: Box<Self>, buf: pool::SharedBuf, offset: usize) -> Box<dyn ReduceValue> {
        Box::new(Archived::<R>::new(buf, offset))
    }

    fn fold_into(self: Box<Self>, buf: AlignedVec, _offset: usize) -> FoldInto {
        // Held only by the root (elsewhere it became an archive when the
        // reduction started), which folds into its own buffer.
        FoldInto::Unsupported(self, buf)
    }

    fn fold_pieces(
        mut self: Box<Self>,
    ) -> Result<Box<dyn crate::pieces::PieceFold>, Box<dyn ReduceValue>> {
        self.own();
        crate::pieces::Pieces::new::<R>(
            self,
            |v| v.archive(),
            |b| rkyv::access::<R::Archived, rancor::Error>(b).ok(),
            |_old, buf| {
                Box::new(InPlace::<R> {
                    buf: Buf::Own(buf),
                    _op: PhantomData,
                })
            },
            HEADER_LEN,
        )
        .map_err(|v| v as Box<dyn ReduceValue>)
    }

    fn into_encoded(
        self: Box<Self>,
        header: usize,
    ) -> Result<(AlignedVec, Hold), Box<dyn ReduceValue>> {
        if header != HEADER_LEN {
            return Err(self);
        }
        let hold: Hold = |buf, offset| Box::new(Archived::<R>::new(buf, offset));
        let mut this = self;
        let buf = std::mem::take(this.own());
        Ok((buf, hold))
    }
}

impl<R: ArrayOp> Drop for InPlace<R> {
    fn drop(&mut self) {
        // An own buffer is recycled for the next contribution (see
        // `crate::pool`); a shared one goes back to its owner.
        if let Buf::Own(b) = &mut self.buf {
            pool::give(std::mem::take(b));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Max, Sum};

    #[test]
    fn the_buffer_is_an_archive_of_the_matching_reducer() {
        let v = InPlace::<Sum<f32>>::from_slice(&[1.5, -2.0, 3.25]);
        assert_eq!(v.len(), 3);
        assert_eq!(InPlace::<Sum<f32>>::zeroed(5).as_slice(), &[0.0; 5]);
        let back: Sum<f32> = decode(v.archive()).unwrap();
        assert_eq!(back.0, vec![1.5, -2.0, 3.25]);
        let empty = InPlace::<Max<i64>>::zeroed(0);
        assert!(empty.is_empty());
        assert_eq!(
            decode::<Max<i64>>(empty.archive()).unwrap().0,
            Vec::<i64>::new()
        );
        let wide = InPlace::<Sum<u64>>::from_slice(&[u64::MAX, 7]);
        assert_eq!(
            decode::<Sum<u64>>(wide.archive()).unwrap().0,
            vec![u64::MAX, 7]
        );
    }

    #[test]
    fn folds_in_place_and_with_ordinary_archives() {
        let mut mine = InPlace::<Sum<i32>>::from_slice(&[1, 2, 3]);
        mine.fold_bytes(&Sum(vec![10, 20, 30]).encode().unwrap())
            .unwrap();
        assert_eq!(mine.as_slice(), &[11, 22, 33]);
        // And the other way round: a Sum folds an InPlace's archive.
        let mut sum = Sum(vec![1, 1, 1]);
        ReduceValue::fold_bytes(&mut sum, mine.archive()).unwrap();
        assert_eq!(sum.0, vec![12, 23, 34]);
        let e = mine
            .fold_bytes(&Sum(vec![1, 2]).encode().unwrap())
            .unwrap_err();
        assert_eq!(e, FoldError::Mismatch { mine: 3, theirs: 2 });
        assert!(matches!(
            mine.fold_bytes(&[9; 5]),
            Err(FoldError::Corrupt(_))
        ));
    }

    #[test]
    fn gives_up_its_buffer_without_copying() {
        let v: Box<dyn ReduceValue> = Box::new(InPlace::<Sum<f64>>::from_slice(&[0.5, 0.25]));
        let ptr = v.encoded_len_hint();
        assert_eq!(ptr, 2 * 8 + ROOT_LEN);
        let (buf, hold) = v.into_encoded(HEADER_LEN).ok().expect("laid out already");
        let data_ptr = buf[HEADER_LEN..].as_ptr();
        let shared = pool::SharedBuf::new(buf);
        let held = hold(shared, HEADER_LEN);
        let served = held.encoded().unwrap();
        assert_eq!(served.as_ptr(), data_ptr, "the same memory, never copied");
        assert_eq!(decode::<Sum<f64>>(&served).unwrap().0, vec![0.5, 0.25]);
        let other: Box<dyn ReduceValue> = Box::new(InPlace::<Sum<f64>>::zeroed(1));
        assert!(
            other.into_encoded(32).is_err(),
            "only with the replica header"
        );
    }

    #[test]
    fn changes_its_reducer_without_copying() {
        let v = InPlace::<Sum<f32>>::from_slice(&[1.0, 5.0]);
        let ptr = v.as_slice().as_ptr();
        let m = v.with_op::<Max<f32>>();
        assert_eq!(m.as_slice(), &[1.0, 5.0]);
        assert_eq!(m.as_slice().as_ptr(), ptr);
        assert_eq!(decode::<Max<f32>>(m.archive()).unwrap().0, vec![1.0, 5.0]);
    }

    #[test]
    fn decodes_for_recovery() {
        let v = InPlace::<Max<u32>>::from_slice(&[4, 9]);
        let back = (v.decoder())(v.archive()).unwrap();
        let back = back.into_any().downcast::<InPlace<Max<u32>>>().unwrap();
        assert_eq!(back.as_slice(), &[4, 9]);
    }

    /// A plain `Sum(Vec)` archive is laid out as an `InPlace` buffer and
    /// is taken in one copy; one laid out otherwise (its root pointing
    /// elsewhere) is deserialised; a damaged one is refused.
    #[test]
    fn decodes_archives_of_either_layout_and_refuses_damaged_ones() {
        let values = [1.5f32, -2.0, 3.25];
        let plain = rkyv::to_bytes::<rancor::Error>(&Sum(values.to_vec())).unwrap();
        assert!(InPlace::<Sum<f32>>::of_archive(&plain).is_some());
        let v = InPlace::<Sum<f32>>::from_slice(&values);
        let back = (v.decoder())(&plain).unwrap();
        let back = back.into_any().downcast::<InPlace<Sum<f32>>>().unwrap();
        assert_eq!(back.as_slice(), &values);
        // Eight bytes between the elements and the root: a valid archive
        // of another layout.
        let mut other = AlignedVec::<16>::new();
        for x in values {
            other.extend_from_slice(&x.to_le_bytes());
        }
        other.extend_from_slice(&[0; 8]);
        other.extend_from_slice(&(-20i32).to_le_bytes());
        other.extend_from_slice(&3u32.to_le_bytes());
        assert!(rkyv::access::<rkyv::Archived<Sum<f32>>, rancor::Error>(&other).is_ok());
        assert!(InPlace::<Sum<f32>>::of_archive(&other).is_none());
        let back = (v.decoder())(&other).unwrap();
        let back = back.into_any().downcast::<InPlace<Sum<f32>>>().unwrap();
        assert_eq!(back.as_slice(), &values);
        let mut damaged = plain.clone();
        let n = damaged.len();
        damaged[n - 1] = 0xff;
        assert!(
            (v.decoder())(&damaged).is_err(),
            "a count past the bytes is refused"
        );
    }

    fn shared_of(bytes: Bytes) -> InPlace<Sum<f32>> {
        let dec = InPlace::<Sum<f32>>::zeroed(0).shared_decoder().unwrap();
        *dec(bytes).unwrap().into_any().downcast().unwrap()
    }

    /// An archive handed to the shared decoder is read where it lies; a
    /// change, a fold or a reduction of the value works on a copy, and the
    /// bytes it was read from never change.
    #[test]
    fn a_shared_archive_is_read_in_place_and_copied_only_to_change() {
        let src = InPlace::<Sum<f32>>::from_slice(&[1.0, 2.0, 3.0]);
        let bytes = Bytes::copy_from_slice(src.archive());
        let aligned = pool::bytes({
            let mut b = AlignedVec::<16>::new();
            b.extend_from_slice(src.archive());
            b
        });
        for bytes in [aligned, bytes] {
            let at = bytes.as_ptr();
            let mut v = shared_of(bytes.clone());
            if !(at as usize).is_multiple_of(4) {
                assert!(!v.is_shared(), "an unaligned archive is copied");
                continue;
            }
            assert!(v.is_shared());
            assert_eq!(v.as_slice().as_ptr() as *const u8, at, "no copy");
            assert_eq!((v.len(), v.as_slice()), (3, &[1.0, 2.0, 3.0][..]));
            let m = v.with_op::<Max<f32>>();
            assert!(m.is_shared(), "changing the reducer copies nothing");
            v = m.with_op::<Sum<f32>>();
            v.fold_bytes(src.archive()).unwrap();
            assert!(!v.is_shared());
            assert_eq!(v.as_slice(), &[2.0, 4.0, 6.0]);
            assert_eq!(decode::<Sum<f32>>(&bytes).unwrap().0, vec![1.0, 2.0, 3.0]);
            let mut w = shared_of(bytes.clone());
            w.as_mut_slice()[1] = 7.0;
            assert_eq!(w.as_slice(), &[1.0, 7.0, 3.0]);
            let w: Box<dyn ReduceValue> = Box::new(shared_of(bytes.clone()));
            let (buf, _) = w.into_encoded(HEADER_LEN).ok().expect("its own buffer");
            assert_eq!(&buf[HEADER_LEN..], &bytes[..], "header, then the archive");
            assert_eq!(decode::<Sum<f32>>(&bytes).unwrap().0, vec![1.0, 2.0, 3.0]);
        }
    }

    /// The shared decoder takes an archive of another layout by decoding
    /// it, and refuses a damaged one.
    #[test]
    fn the_shared_decoder_decodes_other_layouts_and_refuses_damage() {
        let dec = InPlace::<Sum<f32>>::zeroed(0).shared_decoder().unwrap();
        let mut other = AlignedVec::<16>::new();
        for x in [1.5f32, -2.0, 3.25] {
            other.extend_from_slice(&x.to_le_bytes());
        }
        other.extend_from_slice(&[0; 8]);
        other.extend_from_slice(&(-20i32).to_le_bytes());
        other.extend_from_slice(&3u32.to_le_bytes());
        let v = dec(pool::bytes(other)).unwrap().into_any();
        let v = v.downcast::<InPlace<Sum<f32>>>().unwrap();
        assert!(!v.is_shared());
        assert_eq!(v.as_slice(), &[1.5, -2.0, 3.25]);
        let src = InPlace::<Sum<f32>>::from_slice(&[1.0, 2.0]);
        let mut damaged = AlignedVec::<16>::new();
        damaged.extend_from_slice(src.archive());
        let n = damaged.len();
        damaged[n - 1] = 0xff;
        assert!(dec(pool::bytes(damaged)).is_err());
    }
}
