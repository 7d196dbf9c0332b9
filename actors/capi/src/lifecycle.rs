//! Where this process stands after failures (new, restarted, reinited),
//! and the re-init entry point as a callback (global restart).

use crate::error::{guard, Error, TF_ERR_REINIT};
use crate::state::{put, runtime};
use std::ffi::{c_int, c_void};
use taskfold::{Lifecycle, ReduceError};

/// Lifecycle: started with the job, no rank replaced since.
pub const TF_LIFECYCLE_NEW: c_int = 0;
/// Lifecycle: a replacement of a dead process of this rank: restore from a
/// checkpoint and redo the work lost since.
pub const TF_LIFECYCLE_RESTARTED: c_int = 1;
/// Lifecycle: a survivor told that ranks were replaced since it started.
pub const TF_LIFECYCLE_REINITED: c_int = 2;

/// What the re-init entry point is called with.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tf_entry {
    /// One of `TF_LIFECYCLE_*`.
    pub lifecycle: c_int,
    /// For `TF_LIFECYCLE_RESTARTED`, this process's incarnation (1 for the
    /// first replacement); for `TF_LIFECYCLE_REINITED`, the replacements
    /// let in since this process started; else 0.
    pub count: u32,
    /// 1 if `resume` holds the checkpoint version to resume from (the
    /// newest every rank holds: pass it to `tf_restore`), 0 to start from
    /// the beginning.
    pub has_resume: c_int,
    /// The version to resume from, if `has_resume`.
    pub resume: u64,
}

/// The application's re-init entry point: its work, from the start or
/// from `entry->resume`. Returns `TF_SUCCESS`, an error code of its own,
/// or `TF_ERR_REINIT` when a taskfold call failed with it (the job rolls
/// back: the entry point is then called again once every rank is back).
#[allow(non_camel_case_types)]
pub type tf_entry_fn =
    Option<unsafe extern "C" fn(entry: *const tf_entry, ctx: *mut c_void) -> c_int>;

fn entry_of(l: Lifecycle, resume: Option<u64>) -> tf_entry {
    let (lifecycle, count) = match l {
        Lifecycle::New => (TF_LIFECYCLE_NEW, 0),
        Lifecycle::Restarted { incarnation } => (TF_LIFECYCLE_RESTARTED, incarnation),
        Lifecycle::Reinited { replaced } => (TF_LIFECYCLE_REINITED, replaced),
    };
    tf_entry {
        lifecycle,
        count,
        has_resume: c_int::from(resume.is_some()),
        resume: resume.unwrap_or(0),
    }
}

/// Writes where this process stands to `*lifecycle` (`TF_LIFECYCLE_*`)
/// and the matching count (see `tf_entry.count`) to `*count` (either may
/// be null).
///
/// # Safety
///
/// `lifecycle` and `count` are null or point to writable variables.
#[no_mangle]
pub unsafe extern "C" fn tf_lifecycle(lifecycle: *mut c_int, count: *mut u32) -> c_int {
    guard("tf_lifecycle", || {
        let e = entry_of(runtime()?.lifecycle(), None);
        if !lifecycle.is_null() {
            // SAFETY: not null; the caller's contract.
            unsafe { put(lifecycle, e.lifecycle, "lifecycle") }?;
        }
        if !count.is_null() {
            // SAFETY: not null; the caller's contract.
            unsafe { put(count, e.count, "count") }?;
        }
        Ok(())
    })
}

/// Returns `TF_ERR_REINIT` while the job rolls back (global restart),
/// else `TF_SUCCESS`; never blocks. A program that computes long between
/// taskfold calls checks it between units of work, to return to its entry
/// point at once.
#[no_mangle]
pub extern "C" fn tf_check_reinit() -> c_int {
    guard("tf_check_reinit", || Ok(runtime()?.check_reinit()?))
}

/// Runs `body(entry, ctx)`, the application's re-init entry point. Under
/// `TASKFOLD_RESTART=global`, when a rank is replaced every taskfold call
/// fails with `TF_ERR_REINIT`; `body` returns that code, every rank meets
/// the others here, and `body` runs again with `entry->resume`, the newest
/// checkpoint version every rank holds (a replacement meets the others
/// before its first run). Any other code `body` returns is returned,
/// `TF_SUCCESS` included. Without global restart this is one call of
/// `body`. Returns `TF_ERR_TIMEOUT` if the ranks did not meet in time.
///
/// # Safety
///
/// `body` is a valid callback; `ctx` is whatever it expects.
#[no_mangle]
pub unsafe extern "C" fn tf_run_reinit(body: tf_entry_fn, ctx: *mut c_void) -> c_int {
    let mut code = 0;
    let rc = guard("tf_run_reinit", || {
        let Some(body) = body else {
            return Err(Error::null("body"));
        };
        let rt = runtime()?;
        let ran = rt.run_reinit(|rt, entry| {
            let e = entry_of(entry.lifecycle, entry.resume);
            // SAFETY: the caller's callback, with a valid entry that lives
            // through the call.
            let rc = unsafe { body(&e, ctx) };
            if rc == TF_ERR_REINIT {
                // The rollback's own error, with its epoch; a callback
                // that says so while none is under way ends the run.
                rt.check_reinit()?;
            }
            Ok::<c_int, ReduceError>(rc)
        })?;
        code = ran;
        Ok(())
    });
    if rc != 0 {
        rc
    } else {
        code
    }
}
