//! PMIx through the system `libpmix` (cargo feature `pmix`; the shim of
//! the crate `pmix-sys`): Open MPI's `mpirun`, Slurm's `srun --mpi=pmix`.
//!
//! PMIx counts `PMIx_Init` and `PMIx_Finalize` per process, so an MPI
//! library in the same process that uses PMIx too keeps its own
//! connection.

use super::Kvs;
use std::ffi::{c_char, c_int, CStr, CString};
use std::time::Duration;

/// Longest value got (a key or an address is far shorter).
const MAX_VALUE: usize = 4096;
/// Longest namespace (PMIX_MAX_NSLEN, 255, and its NUL).
const MAX_NSPACE: usize = 256;

/// This process's PMIx client.
pub(crate) struct Pmix {
    nspace: String,
    /// How long a get waits for its value.
    timeout: Duration,
}

/// What a PMIx status means, for an error about `what`.
fn error(what: &str, rc: c_int) -> String {
    // SAFETY: the shim returns a NUL-terminated string that PMIx (or the
    // shim) owns for the life of the process, never NULL.
    let msg = unsafe { CStr::from_ptr(pmix_sys::tf_pmix_error(rc)) };
    format!("{what}: {} (PMIx status {rc})", msg.to_string_lossy())
}

/// `timeout` in whole seconds, at least 1 (PMIx's 0 means forever).
fn secs(timeout: Duration) -> c_int {
    let s = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    c_int::try_from(s.max(1)).unwrap_or(c_int::MAX)
}

fn c_string(what: &str, s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} {s:?} holds a NUL byte"))
}

impl Pmix {
    /// `PMIx_Init`; the server must name this process rank `rank`. A get
    /// waits at most `timeout`.
    pub(crate) fn init(rank: u32, timeout: Duration) -> Result<Pmix, String> {
        let mut ns = [0 as c_char; MAX_NSPACE];
        let mut theirs = 0u32;
        // SAFETY: `ns` holds MAX_NSPACE bytes and the shim writes at most
        // that many, NUL included; `theirs` is a valid u32 to write.
        let rc = unsafe { pmix_sys::tf_pmix_init(ns.as_mut_ptr(), ns.len(), &mut theirs) };
        if rc != 0 {
            return Err(error("PMIx_Init", rc));
        }
        // SAFETY: the shim NUL-terminated `ns` within its length.
        let nspace = unsafe { CStr::from_ptr(ns.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let me = Pmix { nspace, timeout };
        if theirs != rank {
            return Err(format!(
                "PMIx names this process rank {theirs} of namespace {}, the launcher's variables \
                 rank {rank}",
                me.nspace
            ));
        }
        Ok(me)
    }
}

impl Kvs for Pmix {
    fn name(&self) -> &str {
        &self.nspace
    }

    fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
        let (k, v) = (c_string("key", key)?, c_string("value", value)?);
        // SAFETY: both are NUL-terminated strings that outlive the call;
        // PMIx copies the value.
        let rc = unsafe { pmix_sys::tf_pmix_put(k.as_ptr(), v.as_ptr()) };
        if rc != 0 {
            return Err(error(&format!("PMIx_Put {key}"), rc));
        }
        Ok(())
    }

    fn fence(&mut self, timeout: Duration) -> Result<(), String> {
        // SAFETY: no pointers; PMIx was initialised.
        let rc = unsafe { pmix_sys::tf_pmix_fence(secs(timeout)) };
        if rc != 0 {
            let e = error("PMIx_Fence", rc);
            return Err(format!(
                "{e} (every rank of the job must reach the fence within {timeout:?})"
            ));
        }
        Ok(())
    }

    fn get(&mut self, rank: u32, key: &str) -> Result<String, String> {
        let k = c_string("key", key)?;
        let mut buf = vec![0 as c_char; MAX_VALUE];
        // SAFETY: `k` is NUL-terminated; `buf` holds MAX_VALUE bytes and
        // the shim writes at most that many, NUL included.
        let rc = unsafe {
            pmix_sys::tf_pmix_get(
                rank,
                k.as_ptr(),
                secs(self.timeout),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if rc != 0 {
            return Err(error(&format!("PMIx_Get {key} of rank {rank}"), rc));
        }
        // SAFETY: on success the shim NUL-terminated `buf` within its length.
        let v = unsafe { CStr::from_ptr(buf.as_ptr()) };
        Ok(v.to_string_lossy().into_owned())
    }

    fn finalize(&mut self) -> Result<(), String> {
        // SAFETY: no pointers; called once, after init.
        let rc = unsafe { pmix_sys::tf_pmix_finalize() };
        if rc != 0 {
            return Err(error("PMIx_Finalize", rc));
        }
        Ok(())
    }
}
