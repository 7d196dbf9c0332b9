//! A reduction value held as its rkyv archive.
//!
//! On a rank that is not the root, a value is only ever folded and served
//! to other ranks, never handed to the application. For types that fold
//! archives ([`ReducerBody::FOLDS_ARCHIVES`]) the worker therefore keeps
//! the value in serialised form: the original's own encoding at first,
//! then each receive buffer after folding this value into it. Serving the
//! value exposes those bytes as they are, so a folded value is never
//! serialised again (one copy of the data saved per task). The bytes are
//! never changed once held: other ranks may be reading them.

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

/// A value of type `T` held as its archive.
pub struct Archived<T> {
    bytes: Bytes,
    _t: PhantomData<fn() -> T>,
}

impl<T> Archived<T> {
    /// Holds `bytes`, a complete archive of a `T` (16-byte aligned).
    pub fn new(bytes: Bytes) -> Self {
        Archived {
            bytes,
            _t: PhantomData,
        }
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
        let mine = rkyv::access::<T::Archived, rancor::Error>(&self.bytes).map_err(corrupt)?;
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
        let mut buf = pool::take(header + self.bytes.len());
        buf.resize(header, 0);
        buf.extend_from_slice(&self.bytes);
        Ok(buf)
    }

    fn decoder(&self) -> Decoder {
        |bytes| decode::<T>(bytes).map(|v| Box::new(v) as Box<dyn ReduceValue>)
    }

    fn fold_bytes(&mut self, bytes: &[u8]) -> Result<(), FoldError> {
        // The held bytes may be shared: fold into a private copy of them.
        let other = rkyv::access::<T::Archived, rancor::Error>(bytes).map_err(corrupt)?;
        let mut copy = self.encode_after(0)?;
        let mine = rkyv::access_mut::<T::Archived, rancor::Error>(&mut copy).map_err(corrupt)?;
        T::fold_archived(mine, other)?;
        self.bytes = pool::bytes(copy);
        Ok(())
    }

    fn shape_hint(&self) -> Option<u64> {
        // Shapes are checked when the native value joins; never asked later.
        None
    }

    fn encoded_len_hint(&self) -> usize {
        self.bytes.len()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        // Only the root hands its value out, and the root keeps it native;
        // the bytes were validated when this value was made.
        Box::new(decode::<T>(&self.bytes).expect("a held archive decodes"))
    }

    fn encoded(&self) -> Option<Bytes> {
        Some(self.bytes.clone())
    }

    fn into_archived(self: Box<Self>, _archive: Bytes) -> Box<dyn ReduceValue> {
        self
    }

    fn into_encoded(
        self: Box<Self>,
        _header: usize,
    ) -> Result<(AlignedVec, Hold), Box<dyn ReduceValue>> {
        Err(self)
    }

    fn fold_into(self: Box<Self>, mut buf: AlignedVec, offset: usize) -> FoldInto {
        let Some(target) = buf.get_mut(offset..) else {
            let e = FoldError::Corrupt(format!("offset {offset} beyond the buffer"));
            return FoldInto::Failed(self, e);
        };
        match self.fold_self_into(target) {
            Ok(()) => {
                let bytes = pool::bytes(buf).slice(offset..);
                FoldInto::Folded(Box::new(Archived::<T>::new(bytes)))
            }
            Err(e) => FoldInto::Failed(self, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Max, Sum};

    fn held<T: ReduceValue>(v: T) -> Box<dyn ReduceValue> {
        let b = Box::new(v);
        let bytes = pool::bytes(b.encode().unwrap());
        b.into_archived(bytes)
    }

    #[test]
    fn folds_into_the_peer_buffer_and_serves_it_without_encoding() {
        let mine = held(Sum(vec![1.0f32, 2.0, 3.0]));
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
        let mut mine = held(Max(vec![5i64, 1]));
        let before = mine.encoded().unwrap();
        mine.fold_bytes(&Max(vec![2i64, 9]).encode().unwrap())
            .unwrap();
        assert_eq!(decode::<Max<i64>>(&before).unwrap().0, vec![5, 1]);
        assert_eq!(
            decode::<Max<i64>>(&mine.encoded().unwrap()).unwrap().0,
            vec![5, 9]
        );
    }

    #[test]
    fn mismatched_and_corrupt_peers_are_errors() {
        let mine = held(Sum(vec![1u32; 4]));
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
        let bytes = pool::bytes(v.encode().unwrap());
        let v = v.into_archived(bytes);
        assert!(v.encoded().is_none());
        let FoldInto::Unsupported(mut v, buf) = v.fold_into(Count(2).encode().unwrap(), 0) else {
            panic!("Count keeps the default");
        };
        v.fold_bytes(&buf).unwrap();
        assert_eq!(v.into_any().downcast::<Count>().unwrap().0, 3);
    }
}
