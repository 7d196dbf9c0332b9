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
use taskfold::{InPlace, Max, Min, Prod, Reduce, ReduceError, Runtime, SpreadFuture};
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

/// A broadcast in progress: the datatype and the bytes.
struct Bcast {
    fut: Option<SpreadFuture<(i32, Vec<u8>)>>,
    datatype: c_int,
    ptr: usize,
    bytes: usize,
}

impl Pending for Bcast {
    fn is_done(&self) -> bool {
        self.fut.as_ref().is_none_or(|f| f.is_done())
    }

    fn wait(&mut self, d: Option<Duration>) -> Option<Done> {
        Some(match within(&mut self.fut, d)? {
            Ok((dt, _)) if dt != self.datatype => Err(Error::new(
                TF_ERR_MISMATCH,
                format!(
                    "the root broadcast datatype {dt}, this rank asked for {}",
                    self.datatype
                ),
            )),
            Ok((_, v)) => deliver(&v, self.ptr, self.bytes),
            Err(e) => Err(e.into()),
        })
    }
}

/// Starts a non-blocking broadcast of the `count` elements of datatype
/// `datatype` at `buf` on rank `root` to every member, with the options
/// `opts` (null: defaults; durability and completion do not apply), and
/// writes its handle to `*req`. Like `MPI_Ibcast`.
///
/// At the root `buf` is copied before the call returns; elsewhere it must
/// stay valid until the request completes, and the call that completes it
/// writes the value there. Members fetch the value from a member that has
/// it already. The root's death before any other member had the value:
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
        let value = (root as u32 == rt.rank()).then(|| {
            let mut v = vec![0u8; bytes];
            if bytes > 0 {
                // SAFETY: `buf` holds `count` elements, `bytes` bytes.
                let src = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), bytes) };
                v.copy_from_slice(src);
            }
            (datatype, v)
        });
        let fut = rt.broadcast(value, opts)?;
        let p = Box::new(Bcast {
            fut: Some(fut),
            datatype,
            ptr: buf as usize,
            bytes,
        });
        // SAFETY: checked not null.
        unsafe { issue(p, req) }
    })
}
