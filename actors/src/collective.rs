//! [`Runtime::allreduce`], [`Runtime::broadcast`] and
//! [`Runtime::broadcast_in_place`]: a value on every member of a group,
//! and their handle, [`SpreadFuture`].
//!
//! Both end in a *spread* (see `crate::spread` and the book's Architecture
//! chapter, "Allreduce and broadcast"): the value's first holder exposes
//! it, every other member fetches it from a member that holds it already,
//! ready-first, as the master's rank pairs them.

use crate::commands::Command;
use crate::future::{ReduceFuture, Relay, Slot};
use crate::numbering::Taken;
use crate::options::Reduce;
use crate::spread::{Ask, Decode, Gone, Held, Share};
use crate::{Completion, Runtime};
use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use taskfold_core::inplace::ArrayOp;
use taskfold_core::reducer::type_tag;
use taskfold_core::wire::spread::Opening;
use taskfold_core::{
    FoldError, Group, InPlace, ReduceError, ReduceValue, ReductionId, ReductionKey,
};

/// A value [`Runtime::broadcast`] can send: any rkyv type whose archive
/// is validated when read (implemented for every such type; a broadcast
/// folds nothing, so no [`crate::ReducerBody`] is needed).
pub trait Broadcastable: Send + Sized + 'static {
    /// The value as an aligned archive.
    fn encode_value(&self) -> Result<AlignedVec, FoldError>;
    /// The value from an archive, validated first.
    fn decode_value(bytes: &[u8]) -> Result<Self, FoldError>;
}

impl<T> Broadcastable for T
where
    T: rkyv::Archive
        + Send
        + 'static
        + for<'a> rkyv::Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>,
    T::Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
        + rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
{
    fn encode_value(&self) -> Result<AlignedVec, FoldError> {
        rkyv::to_bytes::<rancor::Error>(self).map_err(|e| FoldError::Custom(e.to_string()))
    }

    fn decode_value(bytes: &[u8]) -> Result<Self, FoldError> {
        taskfold_core::reducer::decode::<T>(bytes)
    }
}

/// Kinds of spreads, kept apart in their keys.
const ALLREDUCE: &str = "allreduce";
const BROADCAST: &str = "broadcast";

impl Runtime {
    /// Starts an allreduce of `value`: the result of
    /// [`Runtime::reduce`] over the group, on every member.
    ///
    /// The reduction runs as [`Runtime::reduce`] does, to `opts`' root
    /// (rank 0 of the job by default), with the same options (id, group,
    /// durability), type checks and guarantees; every member then waits
    /// for the result ([`Completion::Contributed`] is refused). Once the
    /// root holds it, every other member fetches it from a member that
    /// holds it already, ready-first (see the book's Architecture
    /// chapter, "Allreduce and broadcast"). Returns at once. An
    /// [`taskfold_core::InPlace`] array's result is read where it was
    /// fetched from (on the root's node, the root's memory), with no
    /// copy until the application changes it (`InPlace::is_shared`).
    ///
    /// Failures: a member's death before the result exists is recovered
    /// as in a reduction (or every member gets the same typed error);
    /// after, every surviving member gets the result as long as one live
    /// rank holds it, and every one gets [`ReduceError::RootLost`] naming
    /// the root if none does. The master's loss ends it with
    /// [`ReduceError::MasterLost`] at every member not holding the result.
    ///
    /// ```
    /// use taskfold::prelude::*;
    /// let cluster = LocalCluster::new(3).unwrap();
    /// let futures: Vec<_> = cluster
    ///     .ranks()
    ///     .iter()
    ///     .map(|rt| rt.allreduce(Sum(vec![rt.rank() as f32 + 1.0]), Reduce::root(0).id("norm")).unwrap())
    ///     .collect();
    /// for f in futures {
    ///     assert_eq!(f.get().unwrap().0, vec![6.0]); // on every rank
    /// }
    /// ```
    pub fn allreduce<T: ReduceValue>(
        &self,
        value: T,
        opts: Reduce,
    ) -> Result<SpreadFuture<T>, ReduceError> {
        if opts.completion == Some(Completion::Contributed) {
            return Err(ReduceError::InvalidOptions(
                "an allreduce waits for the result on every member: Completion::Contributed does not apply".into(),
            ));
        }
        let group = self.group_of(&opts)?;
        let (id, auto) = self.id_of(&opts, &group, "auto")?;
        let (opening, call) = self.opening::<T>(ALLREDUCE, &id, &group, opts.root, auto)?;
        let outer = Arc::new(Slot::default());
        let decode = decoder_of(&value);
        let relay = relay::<T>(self.cmd.clone(), opening, outer.clone(), decode);
        let (inner, durability) = self
            .start_reduce(value, opts.id(id.as_str()), Some(relay))
            .inspect_err(|_| self.give_back(auto, Some(call)))?;
        self.settle(inner.slot(), durability)?;
        Ok(SpreadFuture {
            inner: Some(inner.slot().clone()),
            outer: ReduceFuture::new(outer, id.to_string()),
            _value: std::marker::PhantomData,
        })
    }

    /// Starts a broadcast of `opts`' root's value to every member of the
    /// group: the root passes `Some(value)`, every other member `None`
    /// (anything else is refused). Every member's future gives the value
    /// (the root's its own). Returns at once.
    ///
    /// Members fetch the value from a member that holds it already,
    /// ready-first. Failures: the root's death before any other live
    /// member holds the value gives every survivor
    /// [`ReduceError::RootLost`]; after, every survivor gets the value
    /// from a rank that holds it. Ranks that give another type, root or
    /// group under the same id get [`ReduceError::Mismatched`].
    /// Durability and completion options do not apply.
    ///
    /// ```
    /// use taskfold::prelude::*;
    /// let cluster = LocalCluster::new(3).unwrap();
    /// let futures: Vec<_> = cluster
    ///     .ranks()
    ///     .iter()
    ///     .map(|rt| {
    ///         let v = (rt.rank() == 2).then(|| vec![1u8, 2, 3]);
    ///         rt.broadcast(v, Reduce::root(2).id("model")).unwrap()
    ///     })
    ///     .collect();
    /// for f in futures {
    ///     assert_eq!(f.get().unwrap(), vec![1, 2, 3]);
    /// }
    /// ```
    pub fn broadcast<T: Broadcastable>(
        &self,
        value: Option<T>,
        opts: Reduce,
    ) -> Result<SpreadFuture<T>, ReduceError> {
        let decode: Decode = Arc::new(|b: &bytes::Bytes| {
            T::decode_value(b)
                .map(|v| Box::new(v) as Box<dyn Any + Send>)
                .map_err(|e| ReduceError::Decode(e.to_string()))
        });
        self.spread_from_root(value, opts, decode, |v: T| {
            let bytes = v
                .encode_value()
                .map_err(|e| ReduceError::Decode(e.to_string()))?;
            Ok((taskfold_core::pool::bytes(bytes), Held::Value(Box::new(v))))
        })
    }

    /// [`Runtime::broadcast`] of an [`InPlace`] array, with no copy: the
    /// root's buffer is served as it is (it stays the runtime's, unchanged,
    /// while any member reads it), and every member's value reads it where
    /// it was fetched from — on the root's node, the root's memory — until
    /// the member changes it ([`InPlace::is_shared`]), as an allreduce's
    /// value does. The root's own value reads its buffer too. Every member
    /// calls this with the same `InPlace<R>` (a member that calls
    /// [`Runtime::broadcast`] under the same id gets
    /// [`ReduceError::Mismatched`]); failures as for [`Runtime::broadcast`].
    ///
    /// ```
    /// use taskfold::prelude::*;
    /// let cluster = LocalCluster::new(3).unwrap();
    /// let futures: Vec<_> = cluster
    ///     .ranks()
    ///     .iter()
    ///     .map(|rt| {
    ///         let v = (rt.rank() == 1).then(|| InPlace::<Sum<f32>>::from_slice(&[1.0, 2.0]));
    ///         rt.broadcast_in_place(v, Reduce::root(1).id("model")).unwrap()
    ///     })
    ///     .collect();
    /// for f in futures {
    ///     assert_eq!(f.get().unwrap().as_slice(), &[1.0, 2.0]);
    /// }
    /// ```
    pub fn broadcast_in_place<R>(
        &self,
        value: Option<InPlace<R>>,
        opts: Reduce,
    ) -> Result<SpreadFuture<InPlace<R>>, ReduceError>
    where
        R: ArrayOp,
        InPlace<R>: ReduceValue,
    {
        let decode = decoder_of(&InPlace::<R>::zeroed(0));
        let shared = decode.clone();
        self.spread_from_root(value, opts, decode, move |v: InPlace<R>| {
            share_result(Box::new(v), &shared).map_err(ReduceError::Decode)
        })
    }

    /// A spread of the root's value (`Some` at the root only): `share`
    /// makes the bytes to serve and what the root's own future holds.
    fn spread_from_root<T: 'static>(
        &self,
        value: Option<T>,
        opts: Reduce,
        decode: Decode,
        share: impl FnOnce(T) -> Result<(bytes::Bytes, Held), ReduceError>,
    ) -> Result<SpreadFuture<T>, ReduceError> {
        self.rollbacks.check()?;
        let group = self.group_of(&opts)?;
        let root = opts.root == self.rank();
        if root != value.is_some() {
            return Err(ReduceError::InvalidOptions(format!(
                "rank {} {} a value to a broadcast from root {}: only the root does",
                self.rank(),
                if root { "does not give" } else { "gives" },
                opts.root
            )));
        }
        let (id, auto) = self.id_of(&opts, &group, "auto-broadcast")?;
        let (opening, call) = self.opening::<T>(BROADCAST, &id, &group, opts.root, auto)?;
        let slot = Arc::new(Slot::default());
        let cmd = match value.map(share).transpose() {
            Err(e) => {
                self.give_back(auto, Some(call));
                return Err(e);
            }
            Ok(Some((bytes, held))) => {
                slot.fill(Ok(Some(Box::new(held))));
                Command::Share(Share {
                    opening,
                    bytes,
                    slot: slot.clone(),
                    decode,
                })
            }
            Ok(None) => Command::Ask(Ask {
                opening,
                slot: slot.clone(),
                decode,
            }),
        };
        self.cmd.send(cmd).map_err(|_| ReduceError::Shutdown)?;
        Ok(SpreadFuture {
            inner: None,
            outer: ReduceFuture::new(slot, id.to_string()),
            _value: std::marker::PhantomData,
        })
    }

    /// What this rank says of its next spread of `kind` (`id`, `group`,
    /// `source`), carrying a `T`, and the call number it took (given back
    /// if the call is refused); the error every call gets while the job
    /// rolls back, `auto` (the call's automatic id number) given back then. Counting calls per (kind, id, group) lets an id be used
    /// again at once.
    ///
    /// The key names the epoch: after a rollback every rank numbers its
    /// spreads from zero again (`crate::numbering::Counters::clear`), and a redone spread
    /// must not meet the one of the same call that finished before (its
    /// coordinator remembers finished keys and lets their holders go).
    fn opening<T: 'static>(
        &self,
        kind: &str,
        id: &ReductionId,
        group: &Group,
        source: u32,
        auto: Option<Taken>,
    ) -> Result<(Opening, Taken), ReduceError> {
        let epoch = self
            .rollbacks
            .running()
            .inspect_err(|_| self.give_back(auto, None))?;
        let base = ReductionKey::of(id, group).0;
        let kind_base = taskfold_core::id::stable_hash(&format!("{kind}/{base:016x}"));
        let call = self.spreads.take(kind_base);
        let n = call.n;
        let opening = Opening {
            key: taskfold_core::id::stable_hash(&format!("{kind}/{base:016x}/{epoch}/{n}")),
            id: id.to_string(),
            group: group.members().iter().map(|r| r.0).collect(),
            source,
            type_tag: type_tag::<T>(),
        };
        Ok((opening, call))
    }
}

/// The allreduce's relay: hands the reduction's outcome on, the root's
/// result to the spreader (exposed), a member's completion as a request.
fn relay<T: ReduceValue>(
    cmd: flume::Sender<Command>,
    opening: Opening,
    outer: Arc<Slot>,
    decode: Decode,
) -> Relay {
    Box::new(move |outcome| match outcome {
        Err(e) => outer.fill(Err(e)),
        Ok(None) => {
            let ask = Ask {
                opening,
                slot: outer.clone(),
                decode,
            };
            if cmd.send(Command::Ask(ask)).is_err() {
                outer.fill(Err(ReduceError::Shutdown));
            }
        }
        Ok(Some(any)) => {
            let key = opening.key;
            let shared = match any.downcast::<T>() {
                Ok(v) => share_result(v, &decode),
                Err(_) => Err("the result has an unexpected type".into()),
            };
            match shared {
                Ok((bytes, held)) => {
                    outer.fill(Ok(Some(Box::new(held))));
                    let share = Share {
                        opening,
                        bytes,
                        slot: outer,
                        decode,
                    };
                    let _ = cmd.send(Command::Share(share));
                }
                Err(e) => {
                    let _ = cmd.send(Command::Gone(Gone { key }));
                    outer.fill(Err(ReduceError::Decode(e)));
                }
            }
        }
    })
}

/// How a fetched allreduce value becomes `T`: kept where it lies if `T`
/// can hold an archive it did not make (an `InPlace` array: no copy until
/// the application changes it), else decoded into a value of its own.
fn decoder_of<T: ReduceValue>(v: &T) -> Decode {
    let fail = |e: taskfold_core::FoldError| ReduceError::Decode(e.to_string());
    match v.shared_decoder() {
        Some(dec) => {
            Arc::new(move |b: &bytes::Bytes| dec(b.clone()).map(|v| v.into_any()).map_err(fail))
        }
        None => {
            let dec = v.decoder();
            Arc::new(move |b: &bytes::Bytes| dec(b).map(|v| v.into_any()).map_err(fail))
        }
    }
}

/// The root's result as the bytes every other member fetches, and what
/// the root's own future holds.
///
/// A value laid out in its wire form already ([`taskfold_core::InPlace`])
/// gives its buffer up: the members fetch the very bytes the reduction
/// folded, and the root's application reads them too (copied only if it
/// changes its value). Any other value is encoded here and kept
/// as it is. Why: this runs on the runtime's thread as the reduction
/// ends, before anybody can fetch; a copy here delays every member (a
/// 2 MiB copy takes that thread 0.3 to 2.7 ms on a busy node).
fn share_result<T: ReduceValue>(
    v: Box<T>,
    decode: &Decode,
) -> Result<(bytes::Bytes, Held), String> {
    use taskfold_core::replica::HEADER_LEN;
    match (v as Box<dyn ReduceValue>).into_encoded(HEADER_LEN) {
        Ok((buf, _)) => {
            let bytes = taskfold_core::pool::bytes(buf).slice(HEADER_LEN..);
            let held = Held::Fetched {
                bytes: bytes.clone(),
                decode: decode.clone(),
            };
            Ok((bytes, held))
        }
        Err(v) => {
            let bytes = v.encode().map_err(|e| e.to_string())?;
            Ok((taskfold_core::pool::bytes(bytes), Held::Value(v.into_any())))
        }
    }
}

/// An allreduce or a broadcast in progress ([`Runtime::allreduce`],
/// [`Runtime::broadcast`]): the value, on every member. It progresses on
/// the runtime's threads whether or not anybody looks at this handle (a
/// member that holds the value serves it to others meanwhile); dropping it
/// cancels nothing.
pub struct SpreadFuture<T> {
    /// The reduction's slot (allreduce only): when the contribution is safe.
    inner: Option<Arc<Slot>>,
    /// The value, as [`Held`]: decoded here, on the thread that takes it.
    outer: ReduceFuture<Held>,
    _value: std::marker::PhantomData<fn() -> T>,
}

impl<T: 'static> SpreadFuture<T> {
    /// The id.
    pub fn id(&self) -> &str {
        self.outer.id()
    }

    /// True once the outcome is known here (never blocks).
    pub fn is_done(&self) -> bool {
        self.outer.is_done()
    }

    /// True once this rank's contribution to an allreduce survives this
    /// rank's death (as [`ReduceFuture::is_safe`]), or the outcome is
    /// known here; a broadcast's, once its outcome is known.
    pub fn is_safe(&self) -> bool {
        match &self.inner {
            Some(s) => s.is_settled(),
            None => self.is_done(),
        }
    }

    /// Blocks until the value is here.
    pub fn get(self) -> Result<T, ReduceError> {
        some(self.outer.get())?.into_value()
    }

    /// Blocks at most `d`. On [`ReduceError::Timeout`] it goes on, and the
    /// handle can be waited on again.
    pub fn wait_timeout(&mut self, d: Duration) -> Result<T, ReduceError> {
        some(self.outer.wait_timeout(d))?.into_value()
    }
}

fn some<T>(r: Result<Option<T>, ReduceError>) -> Result<T, ReduceError> {
    r?.ok_or_else(|| ReduceError::Decode("no value was handed over".into()))
}

impl<T: 'static> Future for SpreadFuture<T> {
    type Output = Result<T, ReduceError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.outer)
            .poll(cx)
            .map(|r| some(r)?.into_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskfold_core::{InPlace, Sum};

    #[test]
    fn an_in_place_result_is_shared_without_a_copy() {
        let v = Box::new(InPlace::<Sum<f32>>::from_slice(&[1.0, 2.0, 3.0]));
        let at = v.as_slice().as_ptr() as *const u8;
        let decode = decoder_of(&*v);
        let (bytes, held) = share_result(v, &decode).unwrap();
        assert_eq!(bytes.as_ptr(), at, "the members fetch the folded buffer");
        assert!(matches!(held, Held::Fetched { .. }));
        let mut mine: InPlace<Sum<f32>> = held.into_value().unwrap();
        assert_eq!(mine.as_slice().as_ptr() as *const u8, at, "read in place");
        assert!(mine.is_shared());
        let theirs = decode(&bytes)
            .unwrap()
            .downcast::<InPlace<Sum<f32>>>()
            .unwrap();
        assert_eq!(theirs.as_slice().as_ptr() as *const u8, at);
        // A change is made to a copy: the bytes served stay as they were.
        mine.as_mut_slice()[0] = 9.0;
        assert!(!mine.is_shared());
        assert_eq!(mine.as_slice(), &[9.0, 2.0, 3.0]);
        assert_eq!(theirs.as_slice(), &[1.0, 2.0, 3.0]);
        assert_eq!(&bytes[..4], &1.0f32.to_le_bytes());
    }

    #[test]
    fn any_other_result_is_encoded_and_kept_as_it_is() {
        let v = Box::new(Sum(vec![4i64, 5]));
        let decode = decoder_of(&*v);
        let (bytes, held) = share_result(v, &decode).unwrap();
        assert!(matches!(held, Held::Value(_)));
        assert_eq!(held.into_value::<Sum<i64>>().unwrap().0, vec![4, 5]);
        let theirs = decode(&bytes).unwrap().downcast::<Sum<i64>>().unwrap();
        assert_eq!(theirs.0, vec![4, 5]);
    }
}
