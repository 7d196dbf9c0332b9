//! Reductions of typed arrays (`f32` `f64` `i32` `i64` `u32` `u64`; sum,
//! min, max, prod) from a caller's send buffer (`tf_ireduce`) or from a
//! buffer the library allocated in its wire form (`tf_ireduce_buf`).
//!
//! Both go through the runtime's `InPlace` contributions, so both meet
//! the same contributions on other ranks: a rank may use either. The
//! first copies the send buffer once, at the call (the copy the Rust
//! runtime makes when it serialises a `Sum(Vec)`); the second copies
//! nothing, as the Rust `InPlace` path: the buffer itself is lent to the
//! runtime until the request completes.

use crate::buffer::{Storage, BUFFERS};
use crate::error::{guard, Error, TF_ERR_ARGUMENT};
use crate::options::{resolve, tf_options};
use crate::request::{issue, outcome_within, tf_request, tf_status, Done, Pending};
use crate::state::runtime;
use std::ffi::{c_int, c_void};
use std::time::Duration;
use taskfold::{InPlace, Max, Min, Prod, Reduce, ReduceError, ReduceFuture, Runtime, Sum};
use taskfold_core::inplace::ArrayOp;
use taskfold_core::ReduceValue;

/// Datatype: 32-bit IEEE float (`float`, `real(c_float)`).
pub const TF_F32: c_int = 1;
/// Datatype: 64-bit IEEE float (`double`, `real(c_double)`).
pub const TF_F64: c_int = 2;
/// Datatype: `int32_t` (`integer(c_int32_t)`).
pub const TF_I32: c_int = 3;
/// Datatype: `int64_t` (`integer(c_int64_t)`).
pub const TF_I64: c_int = 4;
/// Datatype: `uint32_t`.
pub const TF_U32: c_int = 5;
/// Datatype: `uint64_t`.
pub const TF_U64: c_int = 6;

/// Operation: element-wise sum (integers wrap on overflow).
pub const TF_SUM: c_int = 1;
/// Operation: element-wise minimum.
pub const TF_MIN: c_int = 2;
/// Operation: element-wise maximum.
pub const TF_MAX: c_int = 3;
/// Operation: element-wise product (integers wrap on overflow).
pub const TF_PROD: c_int = 4;

/// Where a completed reduction's result goes at the root.
pub enum Sink {
    /// The caller's receive buffer, `bytes` long (null on other ranks).
    Recv {
        /// Its address.
        ptr: usize,
        /// Its length in bytes.
        bytes: usize,
    },
    /// Back into the lent buffer of this handle.
    Buffer(u64),
}

/// A buffer's storage for every datatype: an `InPlace` sum, turned into
/// the operation's own when lent (the layout is the element type's).
pub enum AnyBuf {
    /// `f32` elements.
    F32(InPlace<Sum<f32>>),
    /// `f64` elements.
    F64(InPlace<Sum<f64>>),
    /// `i32` elements.
    I32(InPlace<Sum<i32>>),
    /// `i64` elements.
    I64(InPlace<Sum<i64>>),
    /// `u32` elements.
    U32(InPlace<Sum<u32>>),
    /// `u64` elements.
    U64(InPlace<Sum<u64>>),
}

/// An element type the C API reduces.
pub trait Elem: bytemuck::Pod + Send + 'static {
    /// Its `TF_*` datatype code.
    const DTYPE: c_int;
    /// Its name in messages.
    const NAME: &'static str;
    /// A contribution of any operation over it, stored as a buffer.
    fn wrap<R: ArrayOp<Elem = Self>>(v: InPlace<R>) -> AnyBuf;
}

/// A typed reduction in progress.
struct Typed<R: ArrayOp> {
    fut: Option<ReduceFuture<InPlace<R>>>,
    sink: Sink,
}

fn begin<R>(
    rt: &Runtime,
    v: InPlace<R>,
    opts: Reduce,
    sink: Sink,
) -> Result<Box<dyn Pending>, Error>
where
    R: ArrayOp,
    R::Elem: Elem,
    InPlace<R>: ReduceValue,
{
    let fut = rt.reduce(v, opts)?;
    Ok(Box::new(Typed {
        fut: Some(fut),
        sink,
    }))
}

impl<R> Pending for Typed<R>
where
    R: ArrayOp,
    R::Elem: Elem,
    InPlace<R>: ReduceValue,
{
    fn is_done(&self) -> bool {
        self.fut.as_ref().is_none_or(|f| f.is_done())
    }

    fn wait(&mut self, d: Option<Duration>) -> Option<Done> {
        let outcome = outcome_within(&mut self.fut, d)?;
        Some(self.deliver(outcome))
    }
}

impl<R> Typed<R>
where
    R: ArrayOp,
    R::Elem: Elem,
{
    /// Puts the result where it goes, and gives a lent buffer back.
    fn deliver(&self, outcome: Result<Option<InPlace<R>>, ReduceError>) -> Done {
        let result = match outcome {
            Ok(r) => r,
            Err(e) => {
                if let Sink::Buffer(h) = self.sink {
                    // Its contents went with the failed reduction.
                    let _ = BUFFERS.with(h, |b| b.storage = Storage::Empty);
                }
                return Err(e.into());
            }
        };
        let is_result = result.is_some();
        match (&self.sink, result) {
            (Sink::Recv { ptr, bytes }, Some(v)) => {
                let src: &[u8] = bytemuck::cast_slice(v.as_slice());
                if src.len() != *bytes {
                    return Err(Error::new(
                        crate::error::TF_ERR_DECODE,
                        format!(
                            "the result has {} bytes, the receive buffer {bytes}",
                            src.len()
                        ),
                    ));
                }
                // SAFETY: the caller keeps the receive buffer of `bytes`
                // bytes valid until the request completes (tf_ireduce's
                // contract); the result is a separate allocation.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), *ptr as *mut u8, *bytes) };
            }
            (Sink::Recv { .. }, None) => {}
            (Sink::Buffer(h), r) => {
                let storage = match r {
                    Some(v) => Storage::Ready(R::Elem::wrap(v)),
                    None => Storage::Empty,
                };
                let _ = BUFFERS.with(*h, |b| b.storage = storage);
            }
        }
        Ok(tf_status {
            is_result: c_int::from(is_result),
            ..tf_status::default()
        })
    }
}

macro_rules! elems {
    ($($t:ty, $code:ident, $variant:ident, $name:literal;)*) => {$(
        impl Elem for $t {
            const DTYPE: c_int = $code;
            const NAME: &'static str = $name;
            fn wrap<R: ArrayOp<Elem = Self>>(v: InPlace<R>) -> AnyBuf {
                AnyBuf::$variant(v.with_op::<Sum<$t>>())
            }
        }
    )*

        impl AnyBuf {
            /// `count` zeros of datatype `dtype` (checked first).
            pub fn zeroed(dtype: c_int, count: usize) -> AnyBuf {
                match dtype {
                    $($code => AnyBuf::$variant(InPlace::zeroed(count)),)*
                    _ => unreachable!("datatypes are checked first"),
                }
            }

            /// The elements' address and count.
            pub fn data(&mut self) -> (*mut c_void, usize) {
                match self {
                    $(AnyBuf::$variant(v) => {
                        let s = v.as_mut_slice();
                        (s.as_mut_ptr().cast(), s.len())
                    })*
                }
            }

            /// Starts a reduction of these elements with `op`.
            pub fn start(
                self,
                rt: &Runtime,
                op: c_int,
                opts: Reduce,
                sink: Sink,
            ) -> Result<Box<dyn Pending>, Error> {
                match self {
                    $(AnyBuf::$variant(v) => match op {
                        TF_SUM => begin(rt, v, opts, sink),
                        TF_MIN => begin(rt, v.with_op::<Min<$t>>(), opts, sink),
                        TF_MAX => begin(rt, v.with_op::<Max<$t>>(), opts, sink),
                        TF_PROD => begin(rt, v.with_op::<Prod<$t>>(), opts, sink),
                        _ => unreachable!("operations are checked first"),
                    },)*
                }
            }

            /// A copy of `count` elements at `src` as a buffer.
            ///
            /// # Safety
            ///
            /// `src` holds `count` elements of `dtype` (checked first).
            pub unsafe fn copy_of(dtype: c_int, src: *const c_void, count: usize) -> AnyBuf {
                match dtype {
                    $($code => {
                        if count == 0 {
                            return AnyBuf::$variant(InPlace::zeroed(0));
                        }
                        if (src as usize) % align_of::<$t>() == 0 {
                            // SAFETY: aligned, and `count` elements by the
                            // caller's contract (any bits are a number).
                            let s = unsafe { std::slice::from_raw_parts(src.cast::<$t>(), count) };
                            return AnyBuf::$variant(InPlace::from_slice(s));
                        }
                        let mut v = InPlace::<Sum<$t>>::zeroed(count);
                        let dst: &mut [u8] = bytemuck::cast_slice_mut(v.as_mut_slice());
                        // SAFETY: `src` holds `dst.len()` bytes (the
                        // caller's contract), read as bytes: unaligned.
                        let src = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), dst.len()) };
                        dst.copy_from_slice(src);
                        AnyBuf::$variant(v)
                    })*
                    _ => unreachable!("datatypes are checked first"),
                }
            }
        }
    };
}

elems! {
    f32, TF_F32, F32, "f32";
    f64, TF_F64, F64, "f64";
    i32, TF_I32, I32, "i32";
    i64, TF_I64, I64, "i64";
    u32, TF_U32, U32, "u32";
    u64, TF_U64, U64, "u64";
}

/// Bytes of one element of `dtype`, or the error naming it.
pub fn elem_size(dtype: c_int) -> Result<usize, Error> {
    Ok(match dtype {
        TF_F32 | TF_I32 | TF_U32 => 4,
        TF_F64 | TF_I64 | TF_U64 => 8,
        d => return Err(Error::new(TF_ERR_ARGUMENT, format!("unknown datatype {d}"))),
    })
}

/// Checks `op` and the size of `count` elements of `dtype`; their bytes.
pub fn check(dtype: c_int, op: Option<c_int>, count: usize) -> Result<usize, Error> {
    let size = elem_size(dtype)?;
    if let Some(op) = op {
        if !(TF_SUM..=TF_PROD).contains(&op) {
            return Err(Error::new(
                TF_ERR_ARGUMENT,
                format!("unknown operation {op}"),
            ));
        }
    }
    // The runtime's archives address their elements with 32-bit offsets.
    const MAX: usize = (i32::MAX as usize) - 64;
    match count.checked_mul(size) {
        Some(b) if b <= MAX => Ok(b),
        _ => Err(Error::new(
            TF_ERR_ARGUMENT,
            format!("{count} elements of {size} bytes exceed the 2 GiB a contribution may hold"),
        )),
    }
}

/// Starts a non-blocking reduction of the `count` elements of datatype
/// `datatype` at `sendbuf` with operation `op` (`TF_SUM`, `TF_MIN`,
/// `TF_MAX`, `TF_PROD`) to rank `root`, with the options `opts` (null:
/// defaults), and writes its handle to `*req`. Like `MPI_Ireduce`.
///
/// **Buffers.** `sendbuf` is copied before the call returns: the caller
/// may write to it again at once. `recvbuf` matters at the root only
/// (elsewhere it may be null): it must hold `count` elements and stay
/// valid until the request completes; the result is written there by the
/// `tf_test`, `tf_wait*` call that completes the request. `recvbuf` may be
/// `sendbuf`. To avoid the copy of the send buffer, reduce a buffer from
/// `tf_buf_alloc` with `tf_ireduce_buf`.
///
/// Every member must reduce the same datatype, operation, count and root
/// under one id: a rank that differs makes the reduction fail on every
/// member with `TF_ERR_MISMATCH`. Errors at the call: a null pointer, an
/// unknown datatype or operation, invalid options (root or this rank not
/// in the group), an id already live, too many live reductions.
///
/// # Safety
///
/// `sendbuf` holds `count` elements; at the root `recvbuf` holds `count`
/// elements and stays valid until the request completes; `opts` is null
/// or valid; `req` points to a writable `tf_request`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tf_ireduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: i32,
    opts: *const tf_options,
    req: *mut tf_request,
) -> c_int {
    guard("tf_ireduce", || {
        let rt = runtime()?;
        let bytes = check(datatype, Some(op), count)?;
        if req.is_null() {
            return Err(Error::null("req"));
        }
        if sendbuf.is_null() && count > 0 {
            return Err(Error::null("sendbuf"));
        }
        if recvbuf.is_null() && count > 0 && root >= 0 && root as u32 == rt.rank() {
            return Err(Error::null("recvbuf (at the root)"));
        }
        // SAFETY: the caller's contract.
        let opts = unsafe { resolve(root, opts) }?;
        // SAFETY: `sendbuf` holds `count` elements of `datatype`.
        let value = unsafe { AnyBuf::copy_of(datatype, sendbuf, count) };
        let sink = Sink::Recv {
            ptr: recvbuf as usize,
            bytes,
        };
        let p = value.start(&rt, op, opts, sink)?;
        // SAFETY: checked not null.
        unsafe { issue(p, req) }
    })
}

/// Starts a non-blocking reduction of buffer `buf` (from `tf_buf_alloc`)
/// with operation `op` to rank `root`, and writes its handle to `*req`.
/// Nothing is copied: the buffer is lent to the runtime, which sends it
/// as it lies (as the Rust `InPlace` path does).
///
/// **Buffer.** From this call until the request completes, the buffer is
/// the runtime's: do not read or write its memory, and `tf_buf_data`
/// fails with `TF_ERR_BUSY`. Once the call that completes the request
/// returned (`tf_test` with flag 1, `tf_wait*`), the buffer is the
/// caller's again: call `tf_buf_data` for its address, which may have
/// changed. At the root it holds the result; on other ranks, and if the
/// reduction failed (or this call fails), zeros.
///
/// # Safety
///
/// `opts` is null or valid; `req` points to a writable `tf_request`.
#[no_mangle]
pub unsafe extern "C" fn tf_ireduce_buf(
    buf: u64,
    op: c_int,
    root: i32,
    opts: *const tf_options,
    req: *mut tf_request,
) -> c_int {
    guard("tf_ireduce_buf", || {
        let rt = runtime()?;
        if req.is_null() {
            return Err(Error::null("req"));
        }
        if !(TF_SUM..=TF_PROD).contains(&op) {
            return Err(Error::new(
                TF_ERR_ARGUMENT,
                format!("unknown operation {op}"),
            ));
        }
        // SAFETY: the caller's contract.
        let opts = unsafe { resolve(root, opts) }?;
        let value = BUFFERS.with(buf, |b| b.lend())??;
        match value.start(&rt, op, opts, Sink::Buffer(buf)) {
            // SAFETY: checked not null.
            Ok(p) => unsafe { issue(p, req) },
            Err(e) => {
                let _ = BUFFERS.with(buf, |b| b.storage = Storage::Empty);
                Err(e)
            }
        }
    })
}
