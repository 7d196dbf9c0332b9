//! Error codes, the last error's message, and the guard every exported
//! function runs its body in, so that no Rust panic reaches the caller.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use taskfold::{CheckpointError, ReduceError, StartError};

/// The call succeeded.
pub const TF_SUCCESS: c_int = 0;
/// A pointer argument that must not be null was null.
pub const TF_ERR_NULL_POINTER: c_int = 1;
/// An argument is out of range: an unknown datatype or operation, a size
/// too large, a negative rank.
pub const TF_ERR_ARGUMENT: c_int = 2;
/// Called before `tf_init`.
pub const TF_ERR_NOT_INITIALIZED: c_int = 3;
/// Called after `tf_finalize` (the library cannot be initialised again).
pub const TF_ERR_FINALIZED: c_int = 4;
/// `tf_init` was called twice.
pub const TF_ERR_ALREADY_INITIALIZED: c_int = 5;
/// The runtime could not start (a bad `TASKFOLD_*` setting, no rank
/// identity, the master unreachable, ...): `tf_last_error` says why.
pub const TF_ERR_START: c_int = 6;
/// A handle (request, buffer or operation) that is not a live one of this
/// process: already completed or freed, of another kind, or never made by
/// this library.
pub const TF_ERR_HANDLE: c_int = 7;
/// The buffer is lent to a reduction that has not completed yet.
pub const TF_ERR_BUSY: c_int = 8;
/// The reduction's options are invalid (root or this rank outside the
/// group, a bad id).
pub const TF_ERR_INVALID_OPTIONS: c_int = 9;
/// A reduction with this id is already live in this group on this rank.
pub const TF_ERR_DUPLICATE_ID: c_int = 10;
/// The ranks disagree on the reduction: its datatype or operation, its
/// length, or its root.
pub const TF_ERR_MISMATCH: c_int = 11;
/// A fold failed: a user fold callback reported failure, or the data did
/// not fold.
pub const TF_ERR_FOLD: c_int = 12;
/// Ranks died and their contributions could not be recovered.
pub const TF_ERR_RANKS_LOST: c_int = 13;
/// The reduction's root died.
pub const TF_ERR_ROOT_LOST: c_int = 14;
/// The master is unreachable or died.
pub const TF_ERR_MASTER_LOST: c_int = 15;
/// The wait's time ran out; the request is still live.
pub const TF_ERR_TIMEOUT: c_int = 16;
/// This rank was declared failed and fenced from the job.
pub const TF_ERR_FENCED: c_int = 17;
/// The runtime shut down before the operation finished.
pub const TF_ERR_SHUTDOWN: c_int = 18;
/// The network failed in a way that ended the operation.
pub const TF_ERR_TRANSPORT: c_int = 19;
/// The result could not be decoded.
pub const TF_ERR_DECODE: c_int = 20;
/// Too many reductions live at once (`TASKFOLD_MAX_REDUCTIONS`).
pub const TF_ERR_TOO_MANY: c_int = 21;
/// The job rolls back after a rank was replaced (global restart): return
/// to the re-init entry point (`tf_run_reinit`).
pub const TF_ERR_REINIT: c_int = 22;
/// A checkpoint was not written, or a restore failed.
pub const TF_ERR_CHECKPOINT: c_int = 23;
/// The caller's buffer is too small for the restored state (its size is
/// returned).
pub const TF_ERR_TRUNCATED: c_int = 24;
/// A bug inside the library was caught (a Rust panic); the call did
/// nothing further. `tf_last_error` has the panic's message.
pub const TF_ERR_INTERNAL: c_int = 25;
/// `tf_wait_all`: at least one request failed; each status says how.
pub const TF_ERR_IN_STATUS: c_int = 26;
/// This process has nothing to do in the job and should exit with status
/// 0: it replaces a rank that already finished its work, or it is a
/// spare (`TASKFOLD_SPARES`) that the job ended without needing.
pub const TF_ERR_RANK_FINISHED: c_int = 27;
/// The reduction completed before this replacement joined it again, and
/// no copy of the result it needs survived: a replaced root's result, or
/// the value of an allreduce or broadcast that had finished.
pub const TF_ERR_RESULT_LOST: c_int = 28;

/// Every code with its short description, for `tf_strerror`.
const DESCRIPTIONS: [(c_int, &CStr); 29] = [
    (TF_SUCCESS, c"success"),
    (TF_ERR_NULL_POINTER, c"a required pointer argument is null"),
    (TF_ERR_ARGUMENT, c"an argument is out of range"),
    (
        TF_ERR_NOT_INITIALIZED,
        c"taskfold is not initialised (call tf_init first)",
    ),
    (TF_ERR_FINALIZED, c"taskfold was finalised"),
    (
        TF_ERR_ALREADY_INITIALIZED,
        c"taskfold is already initialised",
    ),
    (TF_ERR_START, c"the runtime could not start"),
    (TF_ERR_HANDLE, c"not a live handle of this process"),
    (
        TF_ERR_BUSY,
        c"the buffer is lent to a reduction in progress",
    ),
    (TF_ERR_INVALID_OPTIONS, c"invalid reduction options"),
    (
        TF_ERR_DUPLICATE_ID,
        c"a reduction with this id is already live",
    ),
    (
        TF_ERR_MISMATCH,
        c"the ranks disagree on the reduction (type, length or root)",
    ),
    (TF_ERR_FOLD, c"a fold failed"),
    (
        TF_ERR_RANKS_LOST,
        c"ranks died and their contributions were lost",
    ),
    (TF_ERR_ROOT_LOST, c"the reduction's root died"),
    (TF_ERR_MASTER_LOST, c"the master is unreachable"),
    (TF_ERR_TIMEOUT, c"timed out (the request is still live)"),
    (TF_ERR_FENCED, c"this rank was declared failed"),
    (TF_ERR_SHUTDOWN, c"the runtime shut down"),
    (TF_ERR_TRANSPORT, c"transport error"),
    (TF_ERR_DECODE, c"the result could not be decoded"),
    (TF_ERR_TOO_MANY, c"too many reductions live at once"),
    (
        TF_ERR_REINIT,
        c"the job rolls back: return to the re-init entry point",
    ),
    (TF_ERR_CHECKPOINT, c"checkpoint error"),
    (TF_ERR_TRUNCATED, c"the buffer is too small"),
    (TF_ERR_INTERNAL, c"internal error (a caught panic)"),
    (TF_ERR_IN_STATUS, c"a request failed: see its status"),
    (
        TF_ERR_RANK_FINISHED,
        c"nothing to do: the rank finished, or the spare was not needed",
    ),
    (
        TF_ERR_RESULT_LOST,
        c"the result of a completed reduction is lost to its replacement",
    ),
];

/// An error of a call: its code and the message `tf_last_error` gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// One of the `TF_ERR_*` codes.
    pub code: c_int,
    /// What went wrong, naming the argument or the failure.
    pub message: String,
}

impl Error {
    /// An error of `code` saying `message`.
    pub fn new(code: c_int, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }

    /// A null pointer where `what` was expected.
    pub fn null(what: &str) -> Error {
        Error::new(TF_ERR_NULL_POINTER, format!("{what} is a null pointer"))
    }
}

impl From<ReduceError> for Error {
    fn from(e: ReduceError) -> Error {
        let code = match &e {
            ReduceError::InvalidOptions(_) => TF_ERR_INVALID_OPTIONS,
            ReduceError::DuplicateId(_) => TF_ERR_DUPLICATE_ID,
            ReduceError::Mismatched { .. } => TF_ERR_MISMATCH,
            ReduceError::Fold { .. } => TF_ERR_FOLD,
            ReduceError::RanksLost { .. } => TF_ERR_RANKS_LOST,
            ReduceError::RootLost { .. } => TF_ERR_ROOT_LOST,
            ReduceError::MasterLost(_) => TF_ERR_MASTER_LOST,
            ReduceError::Timeout(_) => TF_ERR_TIMEOUT,
            ReduceError::Fenced => TF_ERR_FENCED,
            ReduceError::Shutdown => TF_ERR_SHUTDOWN,
            ReduceError::Transport(_) => TF_ERR_TRANSPORT,
            ReduceError::Decode(_) => TF_ERR_DECODE,
            ReduceError::TooManyReductions { .. } => TF_ERR_TOO_MANY,
            ReduceError::Reinit { .. } => TF_ERR_REINIT,
            ReduceError::ResultLost { .. } => TF_ERR_RESULT_LOST,
        };
        Error::new(code, e.to_string())
    }
}

impl From<StartError> for Error {
    fn from(e: StartError) -> Error {
        let code = match e {
            StartError::RankFinished | StartError::Spare => TF_ERR_RANK_FINISHED,
            _ => TF_ERR_START,
        };
        Error::new(code, format!("cannot start: {e}"))
    }
}

impl From<CheckpointError> for Error {
    fn from(e: CheckpointError) -> Error {
        let code = match e {
            CheckpointError::Shutdown => TF_ERR_SHUTDOWN,
            _ => TF_ERR_CHECKPOINT,
        };
        Error::new(code, e.to_string())
    }
}

thread_local! {
    /// The message of the last failed call on this thread.
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `e` as this thread's last error and returns its code.
pub fn fail(e: Error) -> c_int {
    // An interior NUL cannot come from our own messages, but a user's id
    // may hold one: cut there rather than lose the message.
    let bytes: Vec<u8> = e
        .message
        .into_bytes()
        .into_iter()
        .take_while(|&b| b != 0)
        .collect();
    let msg = CString::new(bytes).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = msg);
    e.code
}

/// Runs `body`, the body of exported function `name`: its error becomes
/// this thread's last error and its code, and a panic inside it becomes
/// [`TF_ERR_INTERNAL`] naming the function, never an unwind into C.
pub fn guard(name: &str, body: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => TF_SUCCESS,
        Ok(Err(e)) => fail(e),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            fail(Error::new(
                TF_ERR_INTERNAL,
                format!("internal error in {name}: {what}"),
            ))
        }
    }
}

/// The short, constant description of error code `code` (an unknown code
/// gets "unknown error code"). The string is static: never free it.
#[no_mangle]
pub extern "C" fn tf_strerror(code: c_int) -> *const c_char {
    DESCRIPTIONS
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(c"unknown error code".as_ptr(), |(_, d)| d.as_ptr())
}

/// The message of the last call that failed on the calling thread, naming
/// what failed (the argument, the ranks lost, the variable refused); an
/// empty string if none failed. Like `errno`, it is per thread and only
/// meaningful right after a call returned an error: the pointer stays
/// valid until the next failing call on this thread. Never free it.
#[no_mangle]
pub extern "C" fn tf_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// Panics inside the library on purpose and returns what every exported
/// function returns for a panic: `TF_ERR_INTERNAL`, with the message in
/// `tf_last_error`. For checking, with a program's own toolchain and
/// flags, that a Rust panic never unwinds into the caller.
#[no_mangle]
pub extern "C" fn tf_selftest_panic() -> c_int {
    guard("tf_selftest_panic", || {
        panic!("tf_selftest_panic was called: this panic is on purpose")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: tf_last_error returns a valid NUL-terminated string of
        // this thread, alive until the next failing call.
        unsafe { CStr::from_ptr(tf_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_an_error_code_and_a_message() {
        assert_eq!(tf_selftest_panic(), TF_ERR_INTERNAL);
        assert!(last().contains("on purpose"), "{}", last());
        let code = guard("tf_example", || panic!("boom {}", 7));
        assert_eq!(code, TF_ERR_INTERNAL);
        assert_eq!(last(), "internal error in tf_example: boom 7");
    }

    #[test]
    fn every_code_has_a_description() {
        for code in 0..=TF_ERR_RESULT_LOST {
            // SAFETY: static NUL-terminated strings.
            let d = unsafe { CStr::from_ptr(tf_strerror(code)) };
            assert_ne!(d.to_str().unwrap(), "unknown error code", "{code}");
        }
        // SAFETY: as above.
        let d = unsafe { CStr::from_ptr(tf_strerror(999)) };
        assert_eq!(d.to_str().unwrap(), "unknown error code");
    }

    #[test]
    fn reduce_errors_map_to_their_codes() {
        let e: Error = ReduceError::RanksLost {
            id: "x".into(),
            ranks: vec![2],
        }
        .into();
        assert_eq!(e.code, TF_ERR_RANKS_LOST);
        assert!(e.message.contains("[2]"));
        assert_eq!(fail(Error::new(TF_ERR_ARGUMENT, "a\0b")), TF_ERR_ARGUMENT);
        assert_eq!(last(), "a");
    }
}
