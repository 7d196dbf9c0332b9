//! The completion queue: completions of posted operations, and the wait
//! object the progress thread sleeps on.

use super::info::c_str;
use super::objects::Domain;
use super::{check, strerror, FabricError};
use libfabric_sys as sys;
use std::ptr;
use std::sync::Arc;

/// One completion (`struct fi_cq_tagged_entry`).
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    /// The context pointer the operation was posted with.
    pub context: usize,
    /// `FI_SEND`, `FI_RECV`, `FI_READ`, ... (`FI_*` operation flags).
    pub flags: u64,
    /// Bytes received (receives).
    pub len: usize,
    /// The message's tag (tagged receives).
    pub tag: u64,
    /// Where a received message came from (`FI_SOURCE`): the sender's
    /// index in the address vector, or `FI_ADDR_NOTAVAIL` for an endpoint
    /// that is not in it. Only receives carry one.
    pub src: super::objects::FiAddr,
}

/// A failed operation, from the completion queue's error entry.
#[derive(Debug, Clone)]
pub struct CompletionError {
    /// The context pointer the operation was posted with (0 if unknown).
    pub context: usize,
    /// The operation's flags.
    pub flags: u64,
    /// libfabric's error number (`FI_ECANCELED`, `FI_ETRUNC`, ...).
    pub code: i32,
    /// libfabric's and the provider's messages.
    pub message: String,
}

/// What [`CompletionQueue::read`] found.
#[derive(Debug)]
pub enum CqRead {
    /// `n` completions were written to the buffer (0: none ready).
    Entries(usize),
    /// An operation failed.
    Failed(CompletionError),
}

/// A completion queue (`fi_cq_open`, tagged format).
pub struct CompletionQueue {
    pub(super) ptr: *mut sys::fid_cq,
    waitable: bool,
    _domain: Arc<Domain>,
}

// SAFETY: see Fabric (FI_THREAD_SAFE).
unsafe impl Send for CompletionQueue {}
// SAFETY: see Fabric (FI_THREAD_SAFE).
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    /// Opens a completion queue of `size` entries, with a file-descriptor
    /// wait object if `wait` (then [`CompletionQueue::sread`] blocks).
    pub fn open(
        domain: &Arc<Domain>,
        size: usize,
        wait: bool,
    ) -> Result<Arc<CompletionQueue>, FabricError> {
        let mut attr = sys::fi_cq_attr {
            size,
            format: sys::FI_CQ_FORMAT_TAGGED,
            // A file descriptor, not FI_WAIT_UNSPEC: some providers' default
            // wait (shm: FI_WAIT_YIELD) spins on a core.
            wait_obj: if wait {
                sys::FI_WAIT_FD
            } else {
                sys::FI_WAIT_NONE
            },
            ..Default::default()
        };
        let mut ptr = ptr::null_mut();
        // SAFETY: a live domain, an initialised attribute, an out pointer.
        let ret = unsafe { sys::tf_fi_cq_open(domain.ptr, &mut attr, &mut ptr, ptr::null_mut()) };
        check("fi_cq_open", ret)?;
        Ok(Arc::new(CompletionQueue {
            ptr,
            waitable: wait,
            _domain: domain.clone(),
        }))
    }

    /// True if the queue has a wait object ([`CompletionQueue::sread`]).
    pub fn waitable(&self) -> bool {
        self.waitable
    }

    fn entries(
        &self,
        call: &'static str,
        ret: isize,
        raw: &[sys::fi_cq_tagged_entry],
        src: &[sys::fi_addr_t],
        out: &mut [Completion],
    ) -> Result<CqRead, FabricError> {
        if ret > 0 {
            let n = (ret as usize).min(out.len());
            for ((o, r), &src) in out.iter_mut().zip(&raw[..n]).zip(src) {
                *o = Completion {
                    context: r.op_context as usize,
                    flags: r.flags,
                    len: r.len,
                    tag: r.tag,
                    src,
                };
            }
            Ok(CqRead::Entries(n))
        } else if ret == -(sys::FI_EAGAIN as isize) || ret == 0 {
            Ok(CqRead::Entries(0))
        } else if ret == -(sys::FI_EAVAIL as isize) {
            self.read_error().map(CqRead::Failed)
        } else {
            Err(FabricError::from_ret(call, ret))
        }
    }

    /// Reads up to `out.len()` completions without blocking (this also
    /// drives the provider's progress), each with its source address
    /// (`fi_cq_readfrom`: the endpoint is opened with `FI_SOURCE`).
    pub fn read(&self, out: &mut [Completion]) -> Result<CqRead, FabricError> {
        let mut raw = [sys::fi_cq_tagged_entry::default(); 32];
        let mut src = [sys::FI_ADDR_NOTAVAIL; 32];
        let n = out.len().min(raw.len());
        // SAFETY: a live queue of tagged format, a buffer of n entries and
        // n source addresses.
        let ret = unsafe {
            sys::tf_fi_cq_readfrom(self.ptr, raw.as_mut_ptr().cast(), n, src.as_mut_ptr())
        };
        self.entries("fi_cq_readfrom", ret, &raw, &src, out)
    }

    /// Like [`CompletionQueue::read`], but waits up to `timeout_ms` for a
    /// completion or a [`CompletionQueue::signal`]. Only on a waitable queue.
    pub fn sread(&self, out: &mut [Completion], timeout_ms: i32) -> Result<CqRead, FabricError> {
        if !self.waitable {
            return self.read(out);
        }
        let mut raw = [sys::fi_cq_tagged_entry::default(); 32];
        let mut src = [sys::FI_ADDR_NOTAVAIL; 32];
        let n = out.len().min(raw.len());
        // SAFETY: a live queue of tagged format with a wait object, a buffer
        // of n entries and n source addresses, no condition.
        let ret = unsafe {
            sys::tf_fi_cq_sreadfrom(
                self.ptr,
                raw.as_mut_ptr().cast(),
                n,
                src.as_mut_ptr(),
                ptr::null(),
                timeout_ms,
            )
        };
        if ret == -(sys::FI_ETIMEDOUT as isize) || ret == -(sys::FI_ECANCELED as isize) {
            return Ok(CqRead::Entries(0));
        }
        self.entries("fi_cq_sreadfrom", ret, &raw, &src, out)
    }

    /// Wakes a thread blocked in [`CompletionQueue::sread`].
    pub fn signal(&self) -> Result<(), FabricError> {
        if !self.waitable {
            return Ok(());
        }
        // SAFETY: a live queue with a wait object.
        check("fi_cq_signal", unsafe { sys::tf_fi_cq_signal(self.ptr) })
    }

    fn read_error(&self) -> Result<CompletionError, FabricError> {
        let mut e = sys::fi_cq_err_entry::default();
        // SAFETY: a live queue and a zeroed entry (err_data_size 0: the
        // provider keeps the error data, valid until the next read).
        let ret = unsafe { sys::tf_fi_cq_readerr(self.ptr, &mut e, 0) };
        if ret < 0 {
            return Err(FabricError::from_ret("fi_cq_readerr", ret));
        }
        let mut buf = [0 as std::os::raw::c_char; 256];
        // SAFETY: a live queue; err_data is the provider's, valid until the
        // next read; buf is writable for its length.
        let prov = unsafe {
            let p = sys::tf_fi_cq_strerror(
                self.ptr,
                e.prov_errno,
                e.err_data,
                buf.as_mut_ptr(),
                buf.len(),
            );
            c_str(p)
        };
        let mut message = strerror(e.err);
        if !prov.is_empty() && prov != message {
            message = format!("{message} ({prov})");
        }
        Ok(CompletionError {
            context: e.op_context as usize,
            flags: e.flags,
            code: e.err,
            message,
        })
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: opened by fi_cq_open; the endpoint bound to it holds an
        // Arc of it, so it is closed first.
        let ret = unsafe { sys::tf_fi_close(&mut (*self.ptr).fid) };
        if ret < 0 {
            tracing::warn!(error = %FabricError::from_ret("fi_close(cq)", ret as isize), "closing a completion queue");
        }
    }
}
