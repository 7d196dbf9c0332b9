//! Every rank gets the value: `tf_iallreduce` (the reduction's result on
//! every member, like `MPI_Iallreduce`) and `tf_ibcast` (the root's buffer
//! on every member, like `MPI_Ibcast`), over the runtime's
//! `Runtime::allreduce` and `Runtime::broadcast`: each member fetches the
//! value from a member that holds it already (the book's chapter
//! "Non-blocking and concurrent reductions", Every rank gets the result).

use crate::error::{guard, Error, TF_ERR_ARGUMENT, TF_ERR_MISMATCH};
use crate::options::{resolve, tf_options};
use crate::reduce::{check, AnyBuf, Elem, TF_MAX, TF_MIN, TF_PROD, TF_SUM};
use crate::request::{issue, tf_request, tf_status, Done, Pending};
use crate::state::runtime;
use std::ffi::{c_int, c_void};
use std::time::Duration;
use taskfold::{InPlace, Max, Min, Prod, Reduce, ReduceError, Runtime, SpreadFuture, Sum};
use taskfold_core::inplace::ArrayOp;
use taskfold_core::ReduceValue;

/// The outcome of `fut` within `d` (`None`: however long it takes);
/// `None` if not known by then. The future is gone once it was taken.
fn within<T: 'static>(
    fut: &mut Option<SpreadFuture<T>>,
    d: Option<Duration>,
) -> Option<Result<T, ReduceError>> {
    match d {
        None => Some(fut.take()?.get()),
        Some(d) => match fut.as_mut()?.wait_timeout(d) {
            Err(ReduceError::Timeout(_)) => None,
            other => {
                *fut = None;
                Some(other)
            }
        },
    }
}

/// Copies `src` to the caller's buffer at `ptr`, `bytes` long.
fn deliver(src: &[u8], ptr: usize, bytes: usize) -> Done {
    if src.len() != bytes {
        return Err(Error::new(
            TF_ERR_MISMATCH,
            format!("the value has {} bytes, the buffer {bytes}", src.len()),
        ));
    }
    if bytes > 0 {
        // SAFETY: the caller keeps the buffer of `bytes` bytes valid until
        // the request completes (the calls' contract); `src` is a separate
        // allocation.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), ptr as *mut u8, bytes) };
    }
    Ok(tf_status {
        is_result: 1,
        ..tf_status::default()
    })
}

/// An allreduce in progress.
struct All<R: ArrayOp> {
    fut: Option<SpreadFuture<InPlace<R>>>,
    ptr: usize,
    bytes: usize,
}

impl<R> Pending for All<R>
where
    R: ArrayOp,
    R::Elem: Elem,
{
    fn is_done(&self) -> bool {
        self.fut.as_ref().is_none_or(|f| f.is_done())
    }

    fn wait(&mut self, d: Option<Duration>) -> Option<Done> {
        Some(match within(&mut self.fut, d)? {
            Ok(v) => deliver(bytemuck::cast_slice(v.as_slice()), self.ptr, self.bytes),
            Err(e) => Err(e.into()),
        })
    }
}

fn all<R>(
    rt: &Runtime,
    v: InPlace<R>,
    opts: Reduce,
    ptr: usize,
    bytes: usize,
) -> Result<Box<dyn Pending>, Error>
where
    R: ArrayOp,
    R::Elem: Elem,
    InPlace<R>: ReduceValue,
{
    let fut = rt.allreduce(v, opts)?;
    Ok(Box::new(All {
        fut: Some(fut),
        ptr,
        bytes,
    }))
}

macro_rules! start_all {
    ($value:expr, $rt:expr, $op:expr, $opts:expr, $ptr:expr, $bytes:expr; $($variant:ident $t:ty),*) => {
        match $value {
            $(AnyBuf::$variant(v) => match $op {
                TF_SUM => all($rt, v, $opts, $ptr, $bytes),
                TF_MIN => all($rt, v.with_op::<Min<$t>>(), $opts, $ptr, $bytes),
                TF_MAX => all($rt, v.with_op::<Max<$t>>(), $opts, $ptr, $bytes),
                TF_PROD => all($rt, v.with_op::<Prod<$t>>(), $opts, $ptr, $bytes),
                _ => unreachable!("operations are checked first"),
            },)*
        }
    };
}

/// The reduction's root of an allreduce: the group's lowest rank (rank 0
/// without a group).
///
/// # Safety
///
/// As [`resolve`]'s.
unsafe fn lowest(opts: *const tf_options) -> i32 {
    if opts.is_null() {
        return 0;
    }
    // SAFETY: not null; valid by the caller's contract.
    let o = unsafe { &*opts };
    if o.group.is_null() || o.group_len == 0 {
        return 0;
    }
    // SAFETY: `group_len` entries by the caller's contract.
    let g = unsafe { std::slice::from_raw_parts(o.group, o.group_len) };
    g.iter().copied().min().unwrap_or(0)
}

/// Starts a non-blocking allreduce of the `count` elements of datatype
/// `datatype` at `sendbuf` with operation `op`, with the options `opts`
/// (null: defaults), and writes its handle to `*req`. Like
/// `MPI_Iallreduce`: the result goes to `recvbuf` on every member.
///
/// The reduction runs to the group's lowest rank (rank 0 without a
/// group); every other member then fetches the result from a member that
/// has it already. `sendbuf` is copied before the call returns;
/// `recvbuf` must hold `count` elements and stay valid until the request
/// completes (the call that completes it writes the result there); it may
/// be `sendbuf`. A member's death: every survivor gets the result, or
/// every one the same error (`TF_ERR_ROOT_LOST` if the result was lost
/// with the only ranks that had it). Errors at the call are those of
/// `tf_ireduce`, and `TF_ERR_INVALID_OPTIONS` for
/// `TF_COMPLETION_CONTRIBUTED` (an allreduce waits for the result).
///
/// # Safety
///
/// `sendbuf` and `recvbuf` hold `count` elements, `recvbuf` valid until
/// the request completes; `opts` is null or valid; `req` points to a
/// writable `tf_request`.
#[no_mangle]
pub unsafe extern "C" fn tf_iallreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    opts: *const tf_options,
    req: *mut tf_request,
) -> c_int {
    guard("tf_iallreduce", || {
        let rt = runtime()?;
        let bytes = check(datatype, Some(op), count)?;
        if req.is_null() {
            return Err(Error::null("req"));
        }
        if count > 0 && sendbuf.is_null() {
            return Err(Error::null("sendbuf"));
        }
        if count > 0 && recvbuf.is_null() {
            return Err(Error::null("recvbuf"));
        }
        // SAFETY: the caller's contract.
        let opts = unsafe { resolve(lowest(opts), opts) }?;
        // SAFETY: `sendbuf` holds `count` elements of `datatype`.
        let value = unsafe { AnyBuf::copy_of(datatype, sendbuf, count) };
        let ptr = recvbuf as usize;
        let p = start_all!(value, &rt, op, opts, ptr, bytes; F32 f32, F64 f64, I32 i32, I64 i64, U32 u32, U64 u64)?;
        // SAFETY: checked not null.
        unsafe { issue(p, req) }
    })
}

/// Words of a broadcast's value before its bytes: the datatype and the
/// length in bytes, checked by every member against its own call.
const HEADER: usize = 2;

/// The root's value: the header, then the `bytes` bytes at `buf`, in
/// 8-byte words. One type for every datatype, so that a member that names
/// another one is told so by its own check (a spread refuses a member of
/// another type only if the root's offer came first).
///
/// # Safety
///
/// `buf` holds `bytes` bytes (null only if `bytes` is 0).
unsafe fn packed(datatype: c_int, buf: *const c_void, bytes: usize) -> InPlace<Sum<u64>> {
    let mut v = InPlace::<Sum<u64>>::zeroed(HEADER + bytes.div_ceil(8));
    let words = v.as_mut_slice();
    words[0] = u64::from(datatype as u32);
    words[1] = bytes as u64;
    let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut words[HEADER..]);
    if bytes > 0 {
        // SAFETY: `buf` holds `bytes` bytes (the caller's contract), read
        // as bytes (any alignment); `dst` is a separate allocation of at
        // least `bytes` bytes.
        unsafe { std::ptr::copy_nonoverlapping(buf.cast::<u8>(), dst.as_mut_ptr(), bytes) };
    }
    v
}

/// A broadcast in progress: the datatype and the caller's buffer.
struct Bcast {
    fut: Option<SpreadFuture<InPlace<Sum<u64>>>>,
    datatype: c_int,
    ptr: usize,
    bytes: usize,
    /// The root's buffer holds the value already.
    root: bool,
}

impl Bcast {
    /// The value `words` (read where it lies) checked against this call,
    /// and copied into the caller's buffer off the root.
    fn deliver(&self, words: &[u64]) -> Done {
        let (dt, len) = match words {
            [dt, len, ..] => (*dt, *len),
            _ => {
                return Err(Error::new(
                    TF_ERR_MISMATCH,
                    "the value is not a broadcast of the C API",
                ))
            }
        };
        if dt != u64::from(self.datatype as u32) {
            return Err(Error::new(
                TF_ERR_MISMATCH,
                format!(
                    "the root broadcast datatype {}, this rank asked for {}",
                    dt as u32 as c_int, self.datatype
                ),
            ));
        }
        let data: &[u8] = bytemuck::cast_slice(&words[HEADER..]);
        let Some(data) = usize::try_from(len).ok().and_then(|n| data.get(..n)) else {
            return Err(Error::new(
                TF_ERR_MISMATCH,
                format!("the value's length, {len} bytes, exceeds what it holds"),
            ));
        };
        match self.root {
            true => Ok(tf_status {
                is_result: 1,
                ..tf_status::default()
            }),
            false => deliver(data, self.ptr, self.bytes),
        }
    }
}

impl Pending for Bcast {
    fn is_done(&self) -> bool {
        self.fut.as_ref().is_none_or(|f| f.is_done())
    }

    fn wait(&mut self, d: Option<Duration>) -> Option<Done> {
        Some(match within(&mut self.fut, d)? {
            Ok(v) => self.deliver(v.as_slice()),
            Err(e) => Err(e.into()),
        })
    }
}

/// Starts a non-blocking broadcast of the `count` elements of datatype
/// `datatype` at `buf` on rank `root` to every member, with the options
/// `opts` (null: defaults; durability and completion do not apply), and
/// writes its handle to `*req`. Like `MPI_Ibcast`.
///
/// At the root `buf` is copied once before the call returns; elsewhere it
/// must stay valid until the request completes, and the call that
/// completes it writes the value there: a member reads the root's copy
/// where it lies (on the root's node; from a member that has it already
/// on another node) and copies it into `buf` once. The root's death before any other member had the value:
/// every survivor gets `TF_ERR_ROOT_LOST`; after, every survivor gets the
/// value. A member whose datatype or count differs from the root's gets
/// `TF_ERR_MISMATCH`.
///
/// # Safety
///
/// `buf` holds `count` elements (valid until the request completes, off
/// the root); `opts` is null or valid; `req` points to a writable
/// `tf_request`.
#[no_mangle]
pub unsafe extern "C" fn tf_ibcast(
    buf: *mut c_void,
    count: usize,
    datatype: c_int,
    root: i32,
    opts: *const tf_options,
    req: *mut tf_request,
) -> c_int {
    guard("tf_ibcast", || {
        let rt = runtime()?;
        let bytes = check(datatype, None, count)?;
        if req.is_null() {
            return Err(Error::null("req"));
        }
        if count > 0 && buf.is_null() {
            return Err(Error::null("buf"));
        }
        if root < 0 {
            return Err(Error::new(
                TF_ERR_ARGUMENT,
                format!("root {root} is negative"),
            ));
        }
        // SAFETY: the caller's contract.
        let opts = unsafe { resolve(root, opts) }?;
        let is_root = root as u32 == rt.rank();
        // SAFETY: `buf` holds `count` elements, `bytes` bytes.
        let value = is_root.then(|| unsafe { packed(datatype, buf, bytes) });
        let fut = rt.broadcast_in_place(value, opts)?;
        let p = Box::new(Bcast {
            fut: Some(fut),
            datatype,
            ptr: buf as usize,
            bytes,
            root: is_root,
        });
        // SAFETY: checked not null.
        unsafe { issue(p, req) }
    })
}
