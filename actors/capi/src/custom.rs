//! Custom reductions: a fold callback from C or Fortran over a byte layout
//! the caller describes (an element size and a count, or an opaque blob).
//!
//! The callback cannot travel with the data: every rank registers it under
//! the same name (`tf_op_create`, as every rank of an MPI job calls
//! `MPI_Op_create`), and a contribution carries the name's hash, the
//! element size and the count. A fold looks the operation up in this
//! process's registry and calls it on the two sides' bytes in place (the
//! peer's in the receive buffer: nothing is deserialised). Two sides of
//! different operations or layouts are refused before the callback runs.
//! The bytes are held as 64-bit words, so both sides are 8-byte aligned.

use crate::error::{guard, Error, TF_ERR_ARGUMENT};
use crate::handles::{Kind, Table};
use crate::options::{resolve, tf_options};
use crate::request::{issue, outcome_within, tf_request, tf_status, Done, Pending};
use crate::state::runtime;
use rkyv::munge::munge;
use rkyv::seal::Seal;
use rkyv::vec::ArchivedVec;
use rkyv::{Archive, Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{LazyLock, RwLock};
use std::time::Duration;
use taskfold::{FoldError, ReduceFuture, ReducerBody};

#[cfg(target_endian = "big")]
compile_error!("custom folds hand archived words to C as native ones: little-endian only");

/// A fold callback: folds the `len` elements at `input` into those at
/// `inout` (`inout[i] = inout[i] op input[i]`), with the `ctx` given to
/// `tf_op_create`. Returns 0 on success; any other value fails the
/// reduction on every member with `TF_ERR_FOLD`. It must be associative
/// and commutative (the runtime folds in arrival order), must not call
/// taskfold, and may run on any of the runtime's threads, concurrently
/// for different reductions. Both pointers are 8-byte aligned.
#[allow(non_camel_case_types)]
pub type tf_fold_fn = Option<
    unsafe extern "C" fn(
        inout: *mut c_void,
        input: *const c_void,
        len: usize,
        ctx: *mut c_void,
    ) -> c_int,
>;

/// A handle on a custom operation from `tf_op_create`.
#[allow(non_camel_case_types)]
pub type tf_op = u64;

/// The null operation: what `tf_op_free` sets the caller's variable to.
pub const TF_OP_NULL: tf_op = 0;

/// A registered operation.
#[derive(Clone)]
struct Op {
    name: String,
    f: unsafe extern "C" fn(*mut c_void, *const c_void, usize, *mut c_void) -> c_int,
    /// The caller's context pointer, as an address (it is the caller's to
    /// keep alive and thread-safe).
    ctx: usize,
}

/// Operations by the hash of their name: what a fold looks up.
static BY_ID: LazyLock<RwLock<HashMap<u64, Op>>> = LazyLock::new(Default::default);
/// Operation handles, each naming its hash.
static OPS: LazyLock<Table<u64>> = LazyLock::new(|| Table::new(Kind::Op));

/// A contribution of a custom reduction: the operation's id, the layout,
/// and the bytes as aligned words.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
pub struct Custom {
    op: u64,
    elem: u64,
    count: u64,
    words: Vec<u64>,
}

impl Custom {
    fn bytes(&self) -> usize {
        (self.elem * self.count) as usize
    }
}

/// Checks that two sides may fold and calls the operation.
fn apply(
    (op, elem, count): (u64, u64, u64),
    (their_op, their_elem, their_count): (u64, u64, u64),
    inout: *mut c_void,
    input: *const c_void,
) -> Result<(), FoldError> {
    let ops = BY_ID.read().unwrap_or_else(|e| e.into_inner());
    let name = |id: u64| {
        ops.get(&id)
            .map_or_else(|| format!("{id:#x}"), |o| o.name.clone())
    };
    if op != their_op {
        return Err(FoldError::Custom(format!(
            "custom operation {:?} here, {:?} from the peer",
            name(op),
            name(their_op)
        )));
    }
    if (elem, count) != (their_elem, their_count) {
        return Err(FoldError::Custom(format!(
            "layout of {count} elements of {elem} bytes here, {their_count} of {their_elem} from the peer"
        )));
    }
    let Some(o) = ops.get(&op) else {
        return Err(FoldError::Custom(format!(
            "custom operation {op:#x} is not created on this rank (tf_op_create)"
        )));
    };
    // SAFETY: both sides hold `count` elements of `elem` bytes (checked
    // equal above; each side's words cover its bytes), 8-byte aligned;
    // `inout` is this side's, writable and not aliased by `input`. The
    // function and its context are the caller's, valid while the
    // operation is registered.
    let rc = unsafe { (o.f)(inout, input, count as usize, o.ctx as *mut c_void) };
    match rc {
        0 => Ok(()),
        rc => Err(FoldError::Custom(format!(
            "the fold callback of custom operation {:?} returned {rc}",
            o.name
        ))),
    }
}

impl ReducerBody for Custom {
    fn fold(&mut self, other: &ArchivedCustom) -> Result<(), FoldError> {
        let theirs = (
            other.op.to_native(),
            other.elem.to_native(),
            other.count.to_native(),
        );
        apply(
            (self.op, self.elem, self.count),
            theirs,
            self.words.as_mut_ptr().cast(),
            other.words.as_ptr().cast(),
        )
    }

    fn shape(&self) -> Option<u64> {
        // The master refuses members of different sizes before any data
        // moves; same size but another layout is refused at the fold.
        Some(self.elem * self.count)
    }

    fn size_hint(&self) -> usize {
        self.words.len() * 8 + 64
    }

    const FOLDS_ARCHIVES: bool = true;

    fn fold_archived(
        mine: Seal<'_, ArchivedCustom>,
        other: &ArchivedCustom,
    ) -> Result<(), FoldError> {
        munge!(let ArchivedCustom { op, elem, count, words } = mine);
        let here = (op.to_native(), elem.to_native(), count.to_native());
        let theirs = (
            other.op.to_native(),
            other.elem.to_native(),
            other.count.to_native(),
        );
        let words = ArchivedVec::as_slice_seal(words).unseal();
        apply(
            here,
            theirs,
            words.as_mut_ptr().cast(),
            other.words.as_ptr().cast(),
        )
    }
}

/// Creates custom operation `name` (NUL-terminated; every rank creates it
/// under the same name) folding with `fn` and its context `ctx`, and
/// writes its handle to `*op`. Like `MPI_Op_create`. The name must not be
/// that of a live operation of this process.
///
/// # Safety
///
/// `name` is a NUL-terminated string; `fn` is a valid callback (see
/// `tf_fold_fn`), `ctx` valid for it as long as the operation lives;
/// `op` points to a writable `tf_op`.
#[no_mangle]
pub unsafe extern "C" fn tf_op_create(
    name: *const c_char,
    r#fn: tf_fold_fn,
    ctx: *mut c_void,
    op: *mut tf_op,
) -> c_int {
    guard("tf_op_create", || {
        if name.is_null() {
            return Err(Error::null("name"));
        }
        let Some(f) = r#fn else {
            return Err(Error::null("fn"));
        };
        if op.is_null() {
            return Err(Error::null("op"));
        }
        // SAFETY: NUL-terminated by the caller's contract.
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| Error::new(TF_ERR_ARGUMENT, "the operation's name is not UTF-8"))?
            .to_string();
        let id = taskfold_core::id::stable_hash(&format!("taskfold-capi-op:{name}"));
        let mut ops = BY_ID.write().unwrap_or_else(|e| e.into_inner());
        if ops.contains_key(&id) {
            return Err(Error::new(
                TF_ERR_ARGUMENT,
                format!("a custom operation named {name:?} already exists"),
            ));
        }
        ops.insert(
            id,
            Op {
                name,
                f,
                ctx: ctx as usize,
            },
        );
        let h = OPS.insert(id);
        // SAFETY: checked not null; the caller's contract.
        unsafe { op.write(h) };
        Ok(())
    })
}

/// Frees custom operation `*op` and sets `*op` to `TF_OP_NULL` (freeing
/// `TF_OP_NULL` does nothing). Free it only once the reductions that use
/// it completed on this rank: a fold that finds it gone fails.
///
/// # Safety
///
/// `op` points to a writable `tf_op`.
#[no_mangle]
pub unsafe extern "C" fn tf_op_free(op: *mut tf_op) -> c_int {
    guard("tf_op_free", || {
        if op.is_null() {
            return Err(Error::null("op"));
        }
        // SAFETY: not null; the caller's contract.
        let h = unsafe { op.read() };
        if h == TF_OP_NULL {
            return Ok(());
        }
        let id = OPS.take(h)?;
        BY_ID.write().unwrap_or_else(|e| e.into_inner()).remove(&id);
        // SAFETY: as above.
        unsafe { op.write(TF_OP_NULL) };
        Ok(())
    })
}

/// A custom reduction in progress.
struct CustomPending {
    fut: Option<ReduceFuture<Custom>>,
    recv: usize,
}

impl Pending for CustomPending {
    fn is_done(&self) -> bool {
        self.fut.as_ref().is_none_or(|f| f.is_done())
    }

    fn wait(&mut self, d: Option<Duration>) -> Option<Done> {
        let outcome = outcome_within(&mut self.fut, d)?;
        Some(match outcome {
            Err(e) => Err(e.into()),
            Ok(None) => Ok(tf_status::default()),
            Ok(Some(v)) => {
                let bytes = v.bytes();
                // SAFETY: the root's receive buffer holds `elem * count`
                // bytes and stays valid until the request completes
                // (tf_ireduce_custom's contract); `words` covers them.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        v.words.as_ptr().cast::<u8>(),
                        self.recv as *mut u8,
                        bytes,
                    )
                };
                Ok(tf_status {
                    is_result: 1,
                    ..tf_status::default()
                })
            }
        })
    }
}

/// Starts a non-blocking reduction of `count` elements of `elem_size`
/// bytes each at `sendbuf` (a C struct, a Fortran derived type, ...) with
/// custom operation `op` to rank `root`, and writes its handle to `*req`.
/// The fold callback gets `len = count`. As `tf_ireduce` otherwise:
/// `sendbuf` is copied before the call returns; at the root `recvbuf`
/// (`elem_size * count` bytes) receives the result when the request
/// completes; members whose sizes differ fail with `TF_ERR_MISMATCH`,
/// whose operations or layouts differ with `TF_ERR_FOLD`; a callback that
/// returns non-zero fails the reduction with `TF_ERR_FOLD`.
///
/// # Safety
///
/// `sendbuf` holds `elem_size * count` bytes; at the root `recvbuf` holds
/// as many and stays valid until the request completes; `opts` is null or
/// valid; `req` points to a writable `tf_request`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tf_ireduce_custom(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    elem_size: usize,
    count: usize,
    op: tf_op,
    root: i32,
    opts: *const tf_options,
    req: *mut tf_request,
) -> c_int {
    guard("tf_ireduce_custom", || {
        let rt = runtime()?;
        let id = OPS.with(op, |id| *id)?;
        if elem_size == 0 {
            return Err(Error::new(TF_ERR_ARGUMENT, "elem_size must be at least 1"));
        }
        let bytes = elem_size
            .checked_mul(count)
            .filter(|&b| b <= (i32::MAX as usize) - 64)
            .ok_or_else(|| {
                Error::new(
                    TF_ERR_ARGUMENT,
                    format!("{count} elements of {elem_size} bytes exceed the 2 GiB a contribution may hold"),
                )
            })?;
        if req.is_null() {
            return Err(Error::null("req"));
        }
        if sendbuf.is_null() && bytes > 0 {
            return Err(Error::null("sendbuf"));
        }
        if recvbuf.is_null() && bytes > 0 && root >= 0 && root as u32 == rt.rank() {
            return Err(Error::null("recvbuf (at the root)"));
        }
        // SAFETY: the caller's contract.
        let opts = unsafe { resolve(root, opts) }?;
        let mut words = vec![0u64; bytes.div_ceil(8)];
        if bytes > 0 {
            // SAFETY: `sendbuf` holds `bytes` bytes (the caller's
            // contract), read as bytes: no alignment needed.
            let src = unsafe { std::slice::from_raw_parts(sendbuf.cast::<u8>(), bytes) };
            bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes].copy_from_slice(src);
        }
        let value = Custom {
            op: id,
            elem: elem_size as u64,
            count: count as u64,
            words,
        };
        let fut = rt.reduce(value, opts)?;
        let p = Box::new(CustomPending {
            fut: Some(fut),
            recv: recvbuf as usize,
        });
        // SAFETY: checked not null.
        unsafe { issue(p, req) }
    })
}

/// `tf_ireduce_custom` of an opaque blob of `len` bytes: an element size
/// of 1, so the callback gets `len` bytes.
///
/// # Safety
///
/// As `tf_ireduce_custom` with `elem_size` 1 and `count` `len`.
#[no_mangle]
pub unsafe extern "C" fn tf_ireduce_blob(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    len: usize,
    op: tf_op,
    root: i32,
    opts: *const tf_options,
    req: *mut tf_request,
) -> c_int {
    // SAFETY: the caller's contract, as above.
    unsafe { tf_ireduce_custom(sendbuf, recvbuf, 1, len, op, root, opts, req) }
}
