//! PMI-2 through Slurm's `libpmi2` (cargo feature `pmi2`; the crate
//! `pmi2-sys`): `srun --mpi=pmi2`, asked for with `TASKFOLD_PMI=pmi2`
//! (the PMI-1 wire protocol of [`super::pmi1`] serves the same launcher
//! without a library).
//!
//! The library waits at a fence without a deadline; the fence runs on a
//! thread of its own, and a fence that does not end within the timeout is
//! an error (the thread stays blocked, and the store is not used again:
//! the rank fails to start).

use super::Kvs;
use std::ffi::{c_char, c_int, CStr, CString};
use std::time::Duration;

/// Longest value (PMI2_MAX_VALLEN, and its NUL).
const MAX_VALUE: usize = pmi2_sys::PMI2_MAX_VALLEN as usize + 1;
/// Longest job id.
const MAX_JOBID: usize = 256;

/// This process's PMI-2 client.
pub(crate) struct Pmi2 {
    jobid: CString,
    name: String,
    /// A fence timed out: its thread still waits in the library.
    stuck: bool,
}

fn check(what: &str, rc: c_int) -> Result<(), String> {
    if rc == pmi2_sys::PMI2_SUCCESS as c_int {
        Ok(())
    } else {
        Err(format!("{what}: PMI-2 error {rc}"))
    }
}

fn c_string(what: &str, s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} {s:?} holds a NUL byte"))
}

impl Pmi2 {
    /// `PMI2_Init`; the launcher must name this process rank `rank`.
    pub(crate) fn init(rank: u32) -> Result<Pmi2, String> {
        let (mut spawned, mut size, mut theirs, mut appnum) = (0, 0, 0, 0);
        // SAFETY: four valid ints to write.
        let rc = unsafe { pmi2_sys::PMI2_Init(&mut spawned, &mut size, &mut theirs, &mut appnum) };
        check("PMI2_Init", rc)?;
        if u32::try_from(theirs) != Ok(rank) {
            return Err(format!(
                "PMI-2 names this process rank {theirs}, the launcher's variables rank {rank}"
            ));
        }
        let mut buf = [0 as c_char; MAX_JOBID];
        // SAFETY: `buf` holds MAX_JOBID bytes, the size passed.
        let rc = unsafe { pmi2_sys::PMI2_Job_GetId(buf.as_mut_ptr(), MAX_JOBID as c_int) };
        check("PMI2_Job_GetId", rc)?;
        buf[MAX_JOBID - 1] = 0;
        // SAFETY: NUL-terminated within its length (set just above).
        let jobid = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_owned();
        let name = jobid.to_string_lossy().into_owned();
        Ok(Pmi2 {
            jobid,
            name,
            stuck: false,
        })
    }
}

impl Kvs for Pmi2 {
    fn name(&self) -> &str {
        &self.name
    }

    fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
        let (k, v) = (c_string("key", key)?, c_string("value", value)?);
        // SAFETY: both NUL-terminated and alive for the call.
        let rc = unsafe { pmi2_sys::PMI2_KVS_Put(k.as_ptr(), v.as_ptr()) };
        check(&format!("PMI2_KVS_Put {key}"), rc)
    }

    fn fence(&mut self, timeout: Duration) -> Result<(), String> {
        if self.stuck {
            return Err("an earlier fence never ended".into());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("taskfold-pmi2-fence".into())
            .spawn(move || {
                // SAFETY: no pointers; the library was initialised, and no
                // other call runs while the fence waits (the caller waits).
                let rc = unsafe { pmi2_sys::PMI2_KVS_Fence() };
                let _ = tx.send(rc);
            })
            .map_err(|e| format!("PMI2_KVS_Fence: no thread: {e}"))?;
        match rx.recv_timeout(timeout) {
            Ok(rc) => check("PMI2_KVS_Fence", rc),
            Err(_) => {
                self.stuck = true;
                Err(format!(
                    "PMI2_KVS_Fence: every rank of the job must reach the fence within {timeout:?}"
                ))
            }
        }
    }

    fn get(&mut self, rank: u32, key: &str) -> Result<String, String> {
        let k = c_string("key", key)?;
        let src =
            c_int::try_from(rank).map_err(|_| format!("rank {rank} is out of PMI-2's range"))?;
        let mut buf = vec![0 as c_char; MAX_VALUE];
        let mut len: c_int = 0;
        // SAFETY: the job id and key are NUL-terminated; `buf` holds
        // MAX_VALUE bytes, the size passed; `len` is a valid int.
        let rc = unsafe {
            pmi2_sys::PMI2_KVS_Get(
                self.jobid.as_ptr(),
                src,
                k.as_ptr(),
                buf.as_mut_ptr(),
                MAX_VALUE as c_int,
                &mut len,
            )
        };
        check(&format!("PMI2_KVS_Get {key} of rank {rank}"), rc)?;
        buf[MAX_VALUE - 1] = 0;
        // SAFETY: NUL-terminated within its length (set just above).
        let v = unsafe { CStr::from_ptr(buf.as_ptr()) };
        Ok(v.to_string_lossy().into_owned())
    }

    fn finalize(&mut self) -> Result<(), String> {
        if self.stuck {
            return Ok(());
        }
        // SAFETY: no pointers; called once, after init.
        let rc = unsafe { pmi2_sys::PMI2_Finalize() };
        check("PMI2_Finalize", rc)
    }
}
