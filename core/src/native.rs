//! A [`ReducerBody`] is a [`ReduceValue`]: the native value, as the
//! application hands it to the runtime. It is encoded once (to be sent or
//! kept) and then stands as an [`Archived`] value when its type folds
//! archives in place; a native value itself is folded whole.

use crate::archived::Archived;
use crate::error::FoldError;
use crate::reducer::{decode, Decoder, FoldInto, Hold, PieceFold, ReduceValue, ReducerBody};
use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;
use rkyv::{Deserialize, Serialize};
use std::any::Any;

impl<T> ReduceValue for T
where
    T: ReducerBody + for<'a> Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>,
    T::Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
        + Deserialize<T, HighDeserializer<rancor::Error>>,
{
    fn encode_after(&self, header: usize) -> Result<AlignedVec, FoldError> {
        debug_assert!(
            header.is_multiple_of(16),
            "the header must keep the archive aligned"
        );
        let mut buf = crate::pool::take(header + self.size_hint());
        buf.resize(header, 0);
        rkyv::api::high::to_bytes_in::<_, rancor::Error>(self, buf)
            .map_err(|e| FoldError::Custom(e.to_string()))
    }

    fn decoder(&self) -> Decoder {
        |bytes| decode::<T>(bytes).map(|v| Box::new(v) as Box<dyn ReduceValue>)
    }

    fn fold_bytes(&mut self, bytes: &[u8]) -> Result<(), FoldError> {
        let other = rkyv::access::<T::Archived, rancor::Error>(bytes)
            .map_err(|e| FoldError::Corrupt(e.to_string()))?;
        self.fold(other)
    }

    fn shape_hint(&self) -> Option<u64> {
        self.shape()
    }

    fn encoded_len_hint(&self) -> usize {
        ReducerBody::size_hint(self)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }

    fn into_archived(
        self: Box<Self>,
        buf: crate::pool::SharedBuf,
        offset: usize,
    ) -> Box<dyn ReduceValue> {
        if T::FOLDS_ARCHIVES {
            Box::new(Archived::<T>::new(buf, offset))
        } else {
            self
        }
    }

    fn fold_into(self: Box<Self>, buf: AlignedVec, _offset: usize) -> FoldInto {
        // A native value would have to be serialised first: no gain.
        FoldInto::Unsupported(self, buf)
    }

    fn into_encoded(
        self: Box<Self>,
        _header: usize,
    ) -> Result<(AlignedVec, Hold), Box<dyn ReduceValue>> {
        Err(self)
    }

    fn fold_pieces(self: Box<Self>) -> Result<Box<dyn PieceFold>, Box<dyn ReduceValue>> {
        // A native value (held only by a root) is folded whole.
        Err(self)
    }
}
