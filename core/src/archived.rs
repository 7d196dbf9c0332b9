//! A reduction value held as its rkyv archive.
//!
//! On a rank that is not the root, a value is only ever folded and served
//! to other ranks, never handed to the application. For types that fold
//! archives ([`ReducerBody::FOLDS_ARCHIVES`]) the worker therefore keeps
//! the value in serialised form: the original's own encoding at first,
//! then each receive buffer after folding this value into it. Serving the
//! value exposes those bytes as they are, so a folded value is never
//! serialised again (one copy of the data saved per task).
//!
//! Held bytes change only when no one else can see them: a fold from
//! bytes ([`ReduceValue::fold_bytes`], a same-node peer's data read in
//! place) writes into the held buffer if it is a fold result that no
//! [`Bytes`] of it is left (not exposed, not lent), and into a private copy
//! otherwise (the original's archive is always kept intact: recovery may
//! reload it).

use crate::error::FoldError;
use crate::pool;
use crate::reducer::{decode, Decoder, FoldInto, Hold, ReduceValue, ReducerBody};
use bytes::Bytes;
use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;
use rkyv::{Deserialize, Serialize};
use std::any::Any;
use std::marker::PhantomData;

/// A value of type `T` held as its archive, in a buffer of its own.
pub struct Archived<T> {
    /// The buffer; the archive starts at `offset`.
    buf: pool::SharedBuf,
    offset: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> Archived<T> {
    /// Holds `buf[offset..]`, a complete archive of a `T` (`offset` a
    /// multiple of 16). Folds change it in place whenever no [`Bytes`] of
    /// `buf` is alive (nothing exposes, lends or keeps it), and fold into
    /// a private copy otherwise.
    pub fn new(buf: pool::SharedBuf, offset: usize) -> Self {
        Archived {
            buf,
            offset,
            _t: PhantomData,
        }
    }

    fn in_buffer(buf: AlignedVec, offset: usize) -> Self {
        Self::new(pool::SharedBuf::new(buf), offset)
    }

    /// The archive.
    fn bytes(&self) -> &[u8] {
        &self.buf[self.offset..]
    }
}

fn corrupt(e: rancor::Error) -> FoldError {
    FoldError::Corrupt(e.to_string())
}

impl<T> Archived<T>
where
    T: ReducerBody,
    T::Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
{
    /// Folds `self` into the archive at `target`.
    fn fold_self_into(&self, target: &mut [u8]) -> Result<(), FoldError> {
        let mine = rkyv::access::<T::Archived, rancor::Error>(self.bytes()).map_err(corrupt)?;
        let target = rkyv::access_mut::<T::Archived, rancor::Error>(target).map_err(corrupt)?;
        T::fold_archived(target, mine)
    }
}

impl<T> ReduceValue for Archived<T>
where
    T: ReducerBody + for<'a> Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>,
    T::Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
        + Deserialize<T, HighDeserializer<rancor::Error>>,
{
    fn encode_after(&self, header: usize) -> Result<AlignedVec, FoldError> {
        let bytes = self.bytes();
        let mut buf = pool::take(header + bytes.len());
        buf.resize(header, 0);
        buf.extend_from_slice(bytes);
        Ok(buf)
    }

    fn decoder(&self) -> Decoder {
        |bytes| decode::<T>(bytes).map(|v| Box::new(v) as Box<dyn ReduceValue>)
    }

    fn fold_bytes(&mut self, bytes: &[u8]) -> Result<(), FoldError> {
        let other = rkyv::access::<T::Archived, rancor::Error>(bytes).map_err(corrupt)?;
        let offset = self.offset;
        if let Some(buf) = self.buf.get_mut() {
            // Ours alone: fold in place, no copy.
            let target = buf.get_mut(offset..).unwrap_or_default();
            let mine = rkyv::access_mut::<T::Archived, rancor::Error>(target).map_err(corrupt)?;
            return T::fold_archived(mine, other);
        }
        // The held bytes may be seen by others (an original kept for
        // recovery, a buffer still exposed or lent): fold into a new
        // buffer, in one pass if the type combines piecewise, else into a
        // copy.
        let mine_bytes = self.bytes();
        let mine = rkyv::access::<T::Archived, rancor::Error>(mine_bytes).map_err(corrupt)?;
        if let Some(out) = crate::pieces::fold_into_new::<T>(mine_bytes, mine, bytes) {
            *self = Archived::in_buffer(out?, 0);
            return Ok(());
        }
        let mut copy = self.encode_after(0)?;
        let mine = rkyv::access_mut::<T::Archived, rancor::Error>(&mut copy).map_err(corrupt)?;
        T::fold_archived(mine, other)?;
        *self = Archived::in_buffer(copy, 0);
        Ok(())
    }

    fn shape_hint(&self) -> Option<u64> {
        // Shapes are checked when the native value joins; never asked later.
        None
    }

    fn encoded_len_hint(&self) -> usize {
        self.bytes().len()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        // Only the root hands its value out, and the root keeps it native;
        // the bytes were validated when this value was made.
        Box::new(decode::<T>(self.bytes()).expect("a held archive decodes"))
    }

    fn encoded(&self) -> Option<Bytes> {
        Some(self.buf.bytes().slice(self.offset..))
    }

    fn into_archived(
        self: Box<Self>,
        _buf: pool::SharedBuf,
        _offset: usize,
    ) -> Box<dyn ReduceValue> {
        self
    }

    fn into_encoded(
        self: Box<Self>,
        _header: usize,
    ) -> Result<(AlignedVec, Hold), Box<dyn ReduceValue>> {
        Err(self)
    }

    fn fold_pieces(
        self: Box<Self>,
    ) -> Result<Box<dyn crate::pieces::PieceFold>, Box<dyn ReduceValue>> {
        crate::pieces::Pieces::new::<T>(
            self,
            |v| v.bytes(),
            |b| rkyv::access::<T::Archived, rancor::Error>(b).ok(),
            |_old, out| Box::new(Archived::<T>::in_buffer(out, 0)),
            0,
        )
        .map_err(|v| v as Box<dyn ReduceValue>)
    }

    fn fold_into(self: Box<Self>, mut buf: AlignedVec, offset: usize) -> FoldInto {
        let Some(target) = buf.get_mut(offset..) else {
            let e = FoldError::Corrupt(format!("offset {offset} beyond the buffer"));
            return FoldInto::Failed(self, e);
        };
        match self.fold_self_into(target) {
            Ok(()) => FoldInto::Folded(Box::new(Archived::<T>::in_buffer(buf, offset))),
            Err(e) => FoldInto::Failed(self, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Max, Sum};

    /// `v` held as its archive, and the archive's bytes (shared with the
    /// held value, as an original kept for recovery is).
    fn held<T: ReduceValue>(v: T) -> (Box<dyn ReduceValue>, Bytes) {
        let b = Box::new(v);
        let buf = pool::SharedBuf::new(b.encode().unwrap());
        let bytes = buf.bytes();
        (b.into_archived(buf, 0), bytes)
    }

    #[test]
    fn folds_into_the_peer_buffer_and_serves_it_without_encoding() {
        let (mine, _) = held(Sum(vec![1.0f32, 2.0, 3.0]));
        let peer = Sum(vec![10.0f32, 20.0, 30.0]).encode_after(16).unwrap();
        let peer_ptr = peer[16..].as_ptr();
        let FoldInto::Folded(v) = mine.fold_into(peer, 16) else {
            panic!("Sum folds archives");
        };
        let served = v.encoded().expect("held as an archive");
        assert_eq!(
            served.as_ptr(),
            peer_ptr,
            "no copy: the receive buffer is served"
        );
        let back: Sum<f32> = decode(&served).unwrap();
        assert_eq!(back.0, vec![11.0, 22.0, 33.0]);
        let any = v.into_any().downcast::<Sum<f32>>().unwrap();
        assert_eq!(any.0, vec![11.0, 22.0, 33.0]);
    }

    #[test]
    fn the_held_bytes_never_change() {
        let (mut mine, before) = held(Max(vec![5i64, 1]));
        mine.fold_bytes(&Max(vec![2i64, 9]).encode().unwrap())
            .unwrap();
        assert_eq!(decode::<Max<i64>>(&before).unwrap().0, vec![5, 1]);
        assert_eq!(
            decode::<Max<i64>>(&mine.encoded().unwrap()).unwrap().0,
            vec![5, 9]
        );
    }

    #[test]
    fn folds_from_bytes_in_place_only_when_no_one_else_sees_them() {
        let (mine, original) = held(Sum(vec![1i64, 2]));
        // The original is shared: the first fold goes to a private copy.
        let FoldInto::Folded(mut v) = mine.fold_into(Sum(vec![10i64, 20]).encode().unwrap(), 0)
        else {
            panic!("Sum folds archives");
        };
        assert_eq!(decode::<Sum<i64>>(&original).unwrap().0, vec![1, 2]);
        // A fold result that is exposed (a live Bytes) is not changed...
        let exposed = v.encoded().unwrap();
        v.fold_bytes(&Sum(vec![100i64, 200]).encode().unwrap())
            .unwrap();
        assert_eq!(decode::<Sum<i64>>(&exposed).unwrap().0, vec![11, 22]);
        drop(exposed);
        // ...one that no one sees is changed where it is.
        let at = v.encoded().unwrap().as_ptr();
        v.fold_bytes(&Sum(vec![1000i64, 2000]).encode().unwrap())
            .unwrap();
        let now = v.encoded().unwrap();
        assert_eq!(now.as_ptr(), at, "folded in place");
        assert_eq!(decode::<Sum<i64>>(&now).unwrap().0, vec![1111, 2222]);
    }

    #[test]
    fn a_value_others_see_folds_into_a_new_buffer_in_one_pass() {
        let (mut v, original) = held(Sum(vec![1.0f32, 2.0, 3.0]));
        v.fold_bytes(&Sum(vec![10.0f32, 20.0, 30.0]).encode().unwrap())
            .unwrap();
        // The original, which a buddy may be reading, is unchanged...
        assert_eq!(
            decode::<Sum<f32>>(&original).unwrap().0,
            vec![1.0, 2.0, 3.0]
        );
        // ...and the value is the sum, in a buffer of its own.
        let now = v.encoded().unwrap();
        assert_ne!(now.as_ptr(), original.as_ptr());
        assert_eq!(decode::<Sum<f32>>(&now).unwrap().0, vec![11.0, 22.0, 33.0]);
        // A peer of another length is a mismatch, and changes nothing.
        let (mut v, _original) = held(Sum(vec![1.0f32, 2.0, 3.0]));
        let e = v
            .fold_bytes(&Sum(vec![1.0f32; 4]).encode().unwrap())
            .unwrap_err();
        assert_eq!(e, FoldError::Mismatch { mine: 3, theirs: 4 });
        assert_eq!(
            decode::<Sum<f32>>(&v.encoded().unwrap()).unwrap().0,
            vec![1.0, 2.0, 3.0]
        );
    }

    #[test]
    fn a_long_shared_value_folds_across_many_stages() {
        // 80 KB of f64 and 20 004 bytes of u32 (not a whole number of
        // stages): every stage boundary and the last partial stage.
        let a: Vec<f64> = (0..10_000).map(|i| i as f64 * 0.5).collect();
        let b: Vec<f64> = (0..10_000).map(|i| 1.0 - i as f64).collect();
        let (mut v, original) = held(Sum(a.clone()));
        v.fold_bytes(&Sum(b.clone()).encode().unwrap()).unwrap();
        let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        assert_eq!(decode::<Sum<f64>>(&v.encoded().unwrap()).unwrap().0, want);
        assert_eq!(decode::<Sum<f64>>(&original).unwrap().0, a);
        let (mut v, _o) = held(crate::Max((0..5_001u32).collect::<Vec<_>>()));
        v.fold_bytes(&crate::Max(vec![2_500u32; 5_001]).encode().unwrap())
            .unwrap();
        let want: Vec<u32> = (0..5_001u32).map(|i| i.max(2_500)).collect();
        assert_eq!(
            decode::<crate::Max<u32>>(&v.encoded().unwrap()).unwrap().0,
            want
        );
    }

    #[test]
    fn mismatched_and_corrupt_peers_are_errors() {
        let (mine, _) = held(Sum(vec![1u32; 4]));
        let short = Sum(vec![1u32; 3]).encode().unwrap();
        let FoldInto::Failed(mine, e) = mine.fold_into(short, 0) else {
            panic!("lengths differ");
        };
        assert_eq!(e, FoldError::Mismatch { mine: 3, theirs: 4 });
        let FoldInto::Failed(mine, e) = mine.fold_into(AlignedVec::new(), 16) else {
            panic!("no archive");
        };
        assert!(matches!(e, FoldError::Corrupt(_)));
        let mut garbage = AlignedVec::new();
        garbage.extend_from_slice(&[0xff; 64]);
        let FoldInto::Failed(_, e) = mine.fold_into(garbage, 0) else {
            panic!("garbage");
        };
        assert!(matches!(e, FoldError::Corrupt(_)));
    }

    #[test]
    fn native_values_of_types_without_archived_folds_stay_native() {
        #[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        struct Count(u64);
        impl ReducerBody for Count {
            fn fold(&mut self, other: &ArchivedCount) -> Result<(), FoldError> {
                self.0 += other.0.to_native();
                Ok(())
            }
        }
        let v: Box<dyn ReduceValue> = Box::new(Count(1));
        let buf = pool::SharedBuf::new(v.encode().unwrap());
        let v = v.into_archived(buf, 0);
        assert!(v.encoded().is_none());
        let FoldInto::Unsupported(mut v, buf) = v.fold_into(Count(2).encode().unwrap(), 0) else {
            panic!("Count keeps the default");
        };
        v.fold_bytes(&buf).unwrap();
        assert_eq!(v.into_any().downcast::<Count>().unwrap().0, 3);
    }
}
