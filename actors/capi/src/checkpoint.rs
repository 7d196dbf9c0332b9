//! Checkpoints of a caller's buffer at the runtime's four levels, and
//! their restore.
//!
//! The buffer is checkpointed as bytes, under this library's own state
//! type, so a restore never takes a Rust application's state for a C
//! one. The levels written at a version are the runtime's settings'
//! (`TASKFOLD_CHECKPOINT_L1` .. `_L4`; see the book's Checkpoints
//! chapter).

use crate::error::{guard, Error, TF_ERR_TRUNCATED};
use crate::request::{issue, tf_request, tf_status, Done, Pending};
use crate::state::{put, runtime};
use rkyv::{Archive, Deserialize, Serialize};
use std::ffi::{c_int, c_void};
use std::time::Duration;
use taskfold::checkpoint::Written;
use taskfold::CheckpointFuture;

/// A C caller's checkpointed bytes.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
pub struct CState {
    bytes: Vec<u8>,
}

struct Checkpointing {
    fut: Option<CheckpointFuture>,
}

fn status(w: &Written) -> tf_status {
    tf_status {
        levels: w
            .levels
            .iter()
            .map(|l| 1u32 << (l.number() - 1))
            .fold(0, |a, b| a | b),
        version: w.version,
        ..tf_status::default()
    }
}

impl Pending for Checkpointing {
    fn is_done(&self) -> bool {
        self.fut.as_ref().is_none_or(|f| f.is_done())
    }

    fn wait(&mut self, d: Option<Duration>) -> Option<Done> {
        let outcome = match d {
            None => self.fut.take()?.wait(),
            Some(d) => {
                let r = self.fut.as_mut()?.wait_timeout(d)?;
                self.fut = None;
                r
            }
        };
        Some(outcome.map(|w| status(&w)).map_err(Error::from))
    }
}

/// Checkpoints the `len` bytes at `buf` as version `version` of this
/// rank's state, and writes the request's handle to `*req`. The bytes
/// are copied before the call returns (the caller may change them at
/// once); the levels due at `version` are made durable by the runtime's
/// own thread. The request completes when they are (its status's
/// `levels` says which, bit `1 << (L - 1)` for level `L`), or fails with
/// `TF_ERR_CHECKPOINT` naming the levels that failed. Number versions
/// upwards: the newest `TASKFOLD_CHECKPOINT_KEEP` are kept.
///
/// # Safety
///
/// `buf` holds `len` bytes (may be null if `len` is 0); `req` points to a
/// writable `tf_request`.
#[no_mangle]
pub unsafe extern "C" fn tf_checkpoint(
    version: u64,
    buf: *const c_void,
    len: usize,
    req: *mut tf_request,
) -> c_int {
    guard("tf_checkpoint", || {
        let rt = runtime()?;
        if req.is_null() {
            return Err(Error::null("req"));
        }
        let bytes = if len == 0 {
            Vec::new()
        } else if buf.is_null() {
            return Err(Error::null("buf"));
        } else {
            // SAFETY: `buf` holds `len` bytes (the caller's contract).
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec()
        };
        let fut = rt.checkpoints().save(version, &CState { bytes });
        // SAFETY: checked not null.
        unsafe { issue(Box::new(Checkpointing { fut: Some(fut) }), req) }
    })
}

/// Restores this rank's newest checkpointed state that survived the
/// failures the runtime learnt of, not newer than `max_version` (a
/// negative `max_version`: any), into `buf` (`cap` bytes): read from the
/// cheapest level that holds it, checksum verified. Writes its length to
/// `*len`, its version to `*version` and 1 to `*found`; if none survived,
/// `*found` is 0 and nothing else is written. If `cap` is too small, fails
/// with `TF_ERR_TRUNCATED` and writes the length needed to `*len` (call
/// again with a larger buffer; `buf` may be null to ask the length).
/// `max_version` is what `tf_run_reinit` gives a global restart to resume
/// from.
///
/// # Safety
///
/// `buf` holds `cap` bytes (or is null with `cap` 0); `len`, `version` and
/// `found` point to writable variables.
#[no_mangle]
pub unsafe extern "C" fn tf_restore(
    max_version: i64,
    buf: *mut c_void,
    cap: usize,
    len: *mut usize,
    version: *mut u64,
    found: *mut c_int,
) -> c_int {
    guard("tf_restore", || {
        let rt = runtime()?;
        for (p, what) in [
            (len.cast::<c_void>(), "len"),
            (version.cast(), "version"),
            (found.cast(), "found"),
        ] {
            if p.is_null() {
                return Err(Error::null(what));
            }
        }
        if buf.is_null() && cap > 0 {
            return Err(Error::null("buf"));
        }
        let max = u64::try_from(max_version).ok();
        let Some((v, state)) = rt.checkpoints().restore_upto::<CState>(max)? else {
            // SAFETY: checked not null; the caller's contract.
            return unsafe { put(found, 0, "found") };
        };
        let n = state.bytes.len();
        // SAFETY: checked not null; the caller's contract.
        unsafe { put(len, n, "len") }?;
        if n > cap {
            return Err(Error::new(
                TF_ERR_TRUNCATED,
                format!("the restored state (version {v}) has {n} bytes, the buffer {cap}"),
            ));
        }
        if n > 0 {
            // SAFETY: `buf` holds `cap >= n` bytes (the caller's contract).
            unsafe { std::ptr::copy_nonoverlapping(state.bytes.as_ptr(), buf.cast::<u8>(), n) };
        }
        // SAFETY: checked not null; the caller's contract.
        unsafe { put(version, v, "version") }?;
        // SAFETY: as above.
        unsafe { put(found, 1, "found") }
    })
}
