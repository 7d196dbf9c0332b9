//! The process's one runtime: init, finalize, rank and size, barrier.
//!
//! The library moves through three phases, once each, as MPI does: not
//! yet initialised, running, finalised. A call that needs the runtime
//! outside "running" fails with [`TF_ERR_NOT_INITIALIZED`] or
//! [`TF_ERR_FINALIZED`]; the library cannot be initialised again after
//! `tf_finalize`.

use crate::error::{
    guard, Error, TF_ERR_ALREADY_INITIALIZED, TF_ERR_FINALIZED, TF_ERR_NOT_INITIALIZED,
};
use std::ffi::c_int;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use taskfold::Runtime;

enum Phase {
    Before,
    Running(Arc<Runtime>),
    After,
}

static PHASE: RwLock<Phase> = RwLock::new(Phase::Before);

/// The running runtime, or the error of a call made outside "running".
pub fn runtime() -> Result<Arc<Runtime>, Error> {
    match &*PHASE.read().unwrap_or_else(|e| e.into_inner()) {
        Phase::Running(rt) => Ok(rt.clone()),
        Phase::Before => Err(Error::new(
            TF_ERR_NOT_INITIALIZED,
            "taskfold is not initialised: call tf_init first",
        )),
        Phase::After => Err(Error::new(
            TF_ERR_FINALIZED,
            "taskfold was finalised: no call but tf_finalized, tf_strerror and tf_last_error is allowed after tf_finalize",
        )),
    }
}

/// Writes `value` through `out`, refusing a null pointer named `what`.
///
/// # Safety
///
/// `out` is null or valid for a write of one `T`.
pub unsafe fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), Error> {
    if out.is_null() {
        return Err(Error::null(what));
    }
    // SAFETY: not null, and valid for writes by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Starts this process's rank from its environment: under `taskfold run`
/// (`TASKFOLD_RANK`, `TASKFOLD_SIZE`, the rendezvous and the job key it
/// sets), MPICH's `mpiexec` (`PMI_RANK`, `PMI_SIZE`), Open MPI's `mpirun`
/// (`OMPI_COMM_WORLD_*`) or Slurm's `srun` (`SLURM_PROCID`,
/// `SLURM_NTASKS`), with the master found through `TASKFOLD_RENDEZVOUS`
/// or `TASKFOLD_MASTER` and every other `TASKFOLD_*` setting. Connects to
/// the other ranks (rank 0 runs the master) and starts the runtime's
/// threads; it never uses the caller's. A bad setting fails with
/// `TF_ERR_START` and a message naming the variable. Call it once per
/// process, from any thread.
#[no_mangle]
pub extern "C" fn tf_init() -> c_int {
    guard("tf_init", || {
        let mut phase = PHASE.write().unwrap_or_else(|e| e.into_inner());
        match &*phase {
            Phase::Running(_) => {
                return Err(Error::new(
                    TF_ERR_ALREADY_INITIALIZED,
                    "tf_init was already called in this process",
                ))
            }
            Phase::After => {
                return Err(Error::new(
                    TF_ERR_FINALIZED,
                    "taskfold was finalised and cannot be initialised again",
                ))
            }
            Phase::Before => {}
        }
        let rt = Runtime::from_env()?;
        *phase = Phase::Running(Arc::new(rt));
        Ok(())
    })
}

/// Sets `*flag` to 1 if `tf_init` succeeded and `tf_finalize` was not
/// called yet, else 0. Allowed at any time.
///
/// # Safety
///
/// `flag` points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn tf_initialized(flag: *mut c_int) -> c_int {
    guard("tf_initialized", || {
        let running = matches!(
            &*PHASE.read().unwrap_or_else(|e| e.into_inner()),
            Phase::Running(_)
        );
        // SAFETY: the caller's contract.
        unsafe { put(flag, c_int::from(running), "flag") }
    })
}

/// Sets `*flag` to 1 once `tf_finalize` was called, else 0. Allowed at any
/// time.
///
/// # Safety
///
/// `flag` points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn tf_finalized(flag: *mut c_int) -> c_int {
    guard("tf_finalized", || {
        let after = matches!(
            &*PHASE.read().unwrap_or_else(|e| e.into_inner()),
            Phase::After
        );
        // SAFETY: the caller's contract.
        unsafe { put(flag, c_int::from(after), "flag") }
    })
}

/// Finalises: waits until every rank called `tf_finalize` (ranks keep
/// serving data until then, as with `MPI_Finalize`), then stops the
/// runtime's threads and closes its links. Reductions still live end with
/// `TF_ERR_SHUTDOWN`. Call it before `MPI_Finalize` in a program that also
/// uses MPI. Every later call but `tf_initialized`, `tf_finalized`,
/// `tf_strerror` and `tf_last_error` fails with `TF_ERR_FINALIZED`.
#[no_mangle]
pub extern "C" fn tf_finalize() -> c_int {
    guard("tf_finalize", || {
        let rt = {
            let mut phase = PHASE.write().unwrap_or_else(|e| e.into_inner());
            match std::mem::replace(&mut *phase, Phase::After) {
                Phase::Running(rt) => rt,
                other => {
                    let before = matches!(other, Phase::Before);
                    *phase = other;
                    return Err(if before {
                        Error::new(TF_ERR_NOT_INITIALIZED, "tf_finalize before tf_init")
                    } else {
                        Error::new(TF_ERR_FINALIZED, "tf_finalize was already called")
                    });
                }
            }
        };
        // Another thread may still be inside a call that holds the
        // runtime (a barrier); its call fails once the runtime stops, so
        // wait a little for it to let go, then finalize through `Drop`.
        let mut rt = rt;
        for _ in 0..500 {
            match Arc::try_unwrap(rt) {
                Ok(owned) => return owned.shutdown().map_err(Error::from),
                Err(shared) => rt = shared,
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(rt);
        Ok(())
    })
}

/// This process's rank in the job (`0 .. size`), the same as its rank in
/// `MPI_COMM_WORLD` under `mpiexec`.
///
/// # Safety
///
/// `rank` points to a writable `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn tf_rank(rank: *mut i32) -> c_int {
    guard("tf_rank", || {
        let rt = runtime()?;
        // SAFETY: the caller's contract.
        unsafe { put(rank, rt.rank() as i32, "rank") }
    })
}

/// The number of ranks in the job.
///
/// # Safety
///
/// `size` points to a writable `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn tf_size(size: *mut i32) -> c_int {
    guard("tf_size", || {
        let rt = runtime()?;
        // SAFETY: the caller's contract.
        unsafe { put(size, rt.size() as i32, "size") }
    })
}

/// Blocks until every rank of the job called `tf_barrier` (numbered in call
/// order). A rank that died or finalised before reaching it makes it fail
/// on the others with `TF_ERR_RANKS_LOST`.
#[no_mangle]
pub extern "C" fn tf_barrier() -> c_int {
    guard("tf_barrier", || Ok(runtime()?.barrier()?))
}
