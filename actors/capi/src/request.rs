//! Request handles: what a non-blocking call returns, and the calls that
//! complete it (`tf_test`, `tf_wait`, `tf_wait_timeout`, `tf_wait_all`).
//!
//! A request lives in [`REQUESTS`] until a call completes it; the call
//! that completes it frees it and sets the caller's variable to
//! `TF_REQUEST_NULL`, as MPI does. While one thread waits on a request it
//! is taken out of the table, so that no lock is held during the wait; a
//! second thread waiting on the same request gets `TF_ERR_HANDLE`.

use crate::error::{guard, Error, TF_ERR_IN_STATUS, TF_ERR_TIMEOUT};
use crate::handles::{Kind, Table};
use crate::state::put;
use std::ffi::c_int;
use std::sync::LazyLock;
use std::time::Duration;

/// A handle on a non-blocking operation (a reduction or a checkpoint).
#[allow(non_camel_case_types)]
pub type tf_request = u64;

/// The null request: what a completed request's variable is set to.
/// Testing or waiting on it succeeds at once.
pub const TF_REQUEST_NULL: tf_request = 0;

/// How a completed request ended.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tf_status {
    /// `TF_SUCCESS`, or the error code the operation ended with (the same
    /// code the completing call returns, with `tf_last_error` set).
    pub error: c_int,
    /// 1 if this rank received the reduction's result (the root), else 0.
    pub is_result: c_int,
    /// For a checkpoint: the levels it was written at, bit `1 << (L - 1)`
    /// for level `L` (1 to 4); 0 otherwise.
    pub levels: u32,
    /// For a checkpoint: its version; 0 otherwise.
    pub version: u64,
}

/// What a completed operation reports.
pub type Done = Result<tf_status, Error>;

/// An operation in progress, behind a request handle.
pub trait Pending: Send {
    /// Whether it completed (never blocks).
    fn is_done(&self) -> bool;
    /// Waits at most `d` (`None`: until it completes); `None` if it did
    /// not complete in time. On completion the operation also delivers its
    /// result (into the receive buffer, or back into a lent buffer).
    fn wait(&mut self, d: Option<Duration>) -> Option<Done>;
}

/// A reduction's outcome once it is known within `d` (`None`: however
/// long it takes); `None` if it is not known by then (the future stays).
/// The future is gone once its outcome was taken.
pub fn outcome_within<T: 'static>(
    fut: &mut Option<taskfold::ReduceFuture<T>>,
    d: Option<Duration>,
) -> Option<Result<Option<T>, taskfold::ReduceError>> {
    match d {
        None => Some(fut.take()?.get()),
        Some(d) => match fut.as_mut()?.wait_timeout(d) {
            Err(taskfold::ReduceError::Timeout(_)) => None,
            other => {
                *fut = None;
                Some(other)
            }
        },
    }
}

/// The live requests of this process.
pub static REQUESTS: LazyLock<Table<Box<dyn Pending>>> =
    LazyLock::new(|| Table::new(Kind::Request));

/// Keeps `p` and writes its handle to `out`.
///
/// # Safety
///
/// `out` is valid for a write of one `tf_request` (checked non-null by
/// the caller).
pub unsafe fn issue(p: Box<dyn Pending>, out: *mut tf_request) -> Result<(), Error> {
    let h = REQUESTS.insert(p);
    // SAFETY: the caller's contract.
    unsafe { out.write(h) };
    Ok(())
}

/// Reads a request variable, refusing a null pointer.
///
/// # Safety
///
/// `req` is null or valid for reads.
unsafe fn read(req: *const tf_request) -> Result<tf_request, Error> {
    if req.is_null() {
        return Err(Error::null("request"));
    }
    // SAFETY: not null; valid by the caller's contract.
    Ok(unsafe { req.read() })
}

/// Completes `*req` within `d`: `Ok(None)` if it is still running (then it
/// stays live), else its outcome, with the request freed and `*req` set to
/// `TF_REQUEST_NULL`.
///
/// # Safety
///
/// `req` is valid for reads and writes.
unsafe fn complete(req: *mut tf_request, d: Option<Duration>) -> Result<Option<Done>, Error> {
    // SAFETY: the caller's contract.
    let h = unsafe { read(req) }?;
    if h == TF_REQUEST_NULL {
        return Ok(Some(Ok(tf_status::default())));
    }
    let mut p = REQUESTS.take(h)?;
    // The wait runs outside the table's lock; a panic inside it loses this
    // request (its handle then reads as completed), never the table.
    match p.wait(d) {
        None => {
            REQUESTS.restore(h, p);
            Ok(None)
        }
        Some(done) => {
            // SAFETY: the caller's contract.
            unsafe { req.write(TF_REQUEST_NULL) };
            Ok(Some(done))
        }
    }
}

/// Writes `done` into `status` (if not null) and turns it into the call's
/// result.
///
/// # Safety
///
/// `status` is null or valid for a write of one `tf_status`.
unsafe fn report(done: Done, status: *mut tf_status) -> Result<(), Error> {
    let s = match &done {
        Ok(s) => *s,
        Err(e) => tf_status {
            error: e.code,
            ..tf_status::default()
        },
    };
    if !status.is_null() {
        // SAFETY: not null; valid by the caller's contract.
        unsafe { status.write(s) };
    }
    done.map(|_| ())
}

/// Seconds as a duration, refusing what is not a finite non-negative
/// number.
fn seconds(s: f64) -> Result<Duration, Error> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        Error::new(
            crate::error::TF_ERR_ARGUMENT,
            format!("seconds must be a finite number at least 0, not {s}"),
        )
    })
}

/// Checks whether request `*req` completed, without blocking. If it did,
/// `*flag` is 1, the request is freed, `*req` becomes `TF_REQUEST_NULL`,
/// its result is delivered (a reduction's into the root's receive buffer),
/// `*status` (unless null) says how it ended and the call returns that
/// outcome's code. Otherwise `*flag` is 0 and the call returns
/// `TF_SUCCESS`. A request already completed (a copy of its old handle)
/// fails with `TF_ERR_HANDLE`.
///
/// # Safety
///
/// `req` and `flag` point to writable variables; `status` is null or
/// points to a writable `tf_status`.
#[no_mangle]
pub unsafe extern "C" fn tf_test(
    req: *mut tf_request,
    flag: *mut c_int,
    status: *mut tf_status,
) -> c_int {
    guard("tf_test", || {
        if flag.is_null() {
            return Err(Error::null("flag"));
        }
        // SAFETY: the caller's contract (`req` checked inside).
        let h = unsafe { read(req) }?;
        let done = h == TF_REQUEST_NULL || REQUESTS.with(h, |p| p.is_done())?;
        // SAFETY: checked not null above.
        unsafe { flag.write(c_int::from(done)) };
        if !done {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        match unsafe { complete(req, Some(Duration::ZERO)) }? {
            // SAFETY: the caller's contract.
            Some(done) => unsafe { report(done, status) },
            None => {
                // SAFETY: checked not null above.
                unsafe { flag.write(0) };
                Ok(())
            }
        }
    })
}

/// Blocks until request `*req` completes, then frees it, sets `*req` to
/// `TF_REQUEST_NULL`, delivers its result and fills `*status` (unless
/// null). Returns the operation's outcome: `TF_SUCCESS`, or its error code
/// (e.g. `TF_ERR_RANKS_LOST`, `TF_ERR_MISMATCH`, `TF_ERR_FOLD`) with
/// `tf_last_error` naming what failed. Waiting on `TF_REQUEST_NULL`
/// returns at once; on a request already completed (a copy of its handle),
/// `TF_ERR_HANDLE`.
///
/// # Safety
///
/// `req` points to a writable `tf_request`; `status` is null or points to
/// a writable `tf_status`.
#[no_mangle]
pub unsafe extern "C" fn tf_wait(req: *mut tf_request, status: *mut tf_status) -> c_int {
    guard("tf_wait", || {
        // SAFETY: the caller's contract.
        match unsafe { complete(req, None) }? {
            // SAFETY: the caller's contract.
            Some(done) => unsafe { report(done, status) },
            None => unreachable!("a wait without a limit returned before completion"),
        }
    })
}

/// As `tf_wait`, blocking at most `seconds`: returns `TF_ERR_TIMEOUT` if
/// the request did not complete by then (it stays live and `*req`
/// unchanged: wait on it again later).
///
/// # Safety
///
/// As `tf_wait`.
#[no_mangle]
pub unsafe extern "C" fn tf_wait_timeout(
    req: *mut tf_request,
    seconds: f64,
    status: *mut tf_status,
) -> c_int {
    guard("tf_wait_timeout", || {
        let d = self::seconds(seconds)?;
        // SAFETY: the caller's contract.
        match unsafe { complete(req, Some(d)) }? {
            // SAFETY: the caller's contract.
            Some(done) => unsafe { report(done, status) },
            None => Err(Error::new(
                TF_ERR_TIMEOUT,
                format!("the request did not complete within {seconds} s; it is still live"),
            )),
        }
    })
}

/// Waits for all `count` requests of `reqs` (entries that are
/// `TF_REQUEST_NULL` count as complete), each freed and set to
/// `TF_REQUEST_NULL`, each status written to `statuses[i]` (unless
/// `statuses` is null). Returns `TF_SUCCESS` if every one succeeded, else
/// `TF_ERR_IN_STATUS` (each status's `error` says which failed, and
/// `tf_last_error` names the first failure). A handle that is not a live
/// request fails its entry with `TF_ERR_HANDLE`, and the others are still
/// waited for.
///
/// # Safety
///
/// `reqs` points to `count` writable requests; `statuses` is null or
/// points to `count` writable `tf_status`.
#[no_mangle]
pub unsafe extern "C" fn tf_wait_all(
    count: usize,
    reqs: *mut tf_request,
    statuses: *mut tf_status,
) -> c_int {
    guard("tf_wait_all", || {
        if count == 0 {
            return Ok(());
        }
        if reqs.is_null() {
            return Err(Error::null("reqs"));
        }
        let mut first: Option<Error> = None;
        for i in 0..count {
            // SAFETY: `reqs` holds `count` requests (the caller's contract).
            let req = unsafe { reqs.add(i) };
            // SAFETY: as above; `statuses` likewise, if not null.
            let st = if statuses.is_null() {
                std::ptr::null_mut()
            } else {
                unsafe { statuses.add(i) }
            };
            // SAFETY: valid entries, by the caller's contract.
            let outcome = unsafe { complete(req, None) }.and_then(|d| {
                let done = d.unwrap_or_else(|| unreachable!("a wait without a limit"));
                // SAFETY: valid entries, by the caller's contract.
                unsafe { report(done, st) }
            });
            if let Err(e) = outcome {
                if !st.is_null() {
                    let failed = tf_status {
                        error: e.code,
                        ..tf_status::default()
                    };
                    // SAFETY: as above (a handle error reaches no report).
                    unsafe { st.write(failed) };
                }
                first.get_or_insert(e);
            }
        }
        match first {
            None => Ok(()),
            Some(e) => Err(Error::new(
                TF_ERR_IN_STATUS,
                format!("a request failed ({}): {}", e.code, e.message),
            )),
        }
    })
}

/// Writes the number of live requests of this process to `*count`
/// (those neither completed nor being waited on): a program can check at
/// its end that it completed every request it started.
///
/// # Safety
///
/// `count` points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn tf_requests_live(count: *mut usize) -> c_int {
    guard("tf_requests_live", || {
        let n = REQUESTS.count();
        // SAFETY: the caller's contract.
        unsafe { put(count, n, "count") }
    })
}
