//! The reliable-datagram endpoint and its data operations.

use super::cq::CompletionQueue;
use super::info::Info;
use super::objects::{AddressVector, Domain, FiAddr};
use super::{check, posted, FabricError, Posted};
use libfabric_sys as sys;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

/// A reliable-datagram endpoint (`FI_EP_RDM`), bound to one completion
/// queue for both directions and to an address vector, enabled.
pub struct Endpoint {
    pub(super) ptr: *mut sys::fid_ep,
    cq: Arc<CompletionQueue>,
    _av: Arc<AddressVector>,
    _domain: Arc<Domain>,
}

// SAFETY: see Fabric (FI_THREAD_SAFE).
unsafe impl Send for Endpoint {}
// SAFETY: see Fabric (FI_THREAD_SAFE).
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// Opens, binds and enables an endpoint of `info`.
    pub fn open(
        domain: &Arc<Domain>,
        info: Info<'_>,
        cq: &Arc<CompletionQueue>,
        av: &Arc<AddressVector>,
    ) -> Result<Endpoint, FabricError> {
        let mut ptr = ptr::null_mut();
        // SAFETY: a live domain, an info entry from fi_getinfo, an out
        // pointer.
        let ret = unsafe { sys::tf_fi_endpoint(domain.ptr, info.ptr, &mut ptr, ptr::null_mut()) };
        check("fi_endpoint", ret)?;
        let ep = Endpoint {
            ptr,
            cq: cq.clone(),
            _av: av.clone(),
            _domain: domain.clone(),
        };
        // SAFETY: a live endpoint and live queue / AV of the same domain;
        // the Arcs above keep them open longer than the endpoint.
        unsafe {
            check(
                "fi_ep_bind(cq)",
                sys::tf_fi_ep_bind(
                    ep.ptr,
                    &mut (*cq.ptr).fid,
                    (sys::FI_TRANSMIT | sys::FI_RECV) as u64,
                ),
            )?;
            check(
                "fi_ep_bind(av)",
                sys::tf_fi_ep_bind(ep.ptr, &mut (*av.ptr).fid, 0),
            )?;
            check("fi_enable", sys::tf_fi_enable(ep.ptr))?;
        }
        Ok(ep)
    }

    /// The completion queue of both directions.
    pub fn cq(&self) -> &Arc<CompletionQueue> {
        &self.cq
    }

    /// This endpoint's address, to be inserted into the peers' vectors.
    pub fn name(&self) -> Result<Vec<u8>, FabricError> {
        let mut buf = vec![0u8; 256];
        loop {
            let mut len = buf.len();
            // SAFETY: a live endpoint; buf is writable for len bytes; len
            // receives the address length.
            let ret = unsafe {
                sys::tf_fi_getname(&mut (*self.ptr).fid, buf.as_mut_ptr().cast(), &mut len)
            };
            if ret == -(sys::FI_ETOOSMALL as i32) && len > buf.len() && len <= 1 << 16 {
                buf.resize(len, 0);
                continue;
            }
            check("fi_getname", ret)?;
            buf.truncate(len);
            return Ok(buf);
        }
    }

    /// Posts a tagged send of `len` bytes at `buf` to `dest`.
    ///
    /// # Safety
    /// `buf` (registered with `desc` if the provider needs `FI_MR_LOCAL`)
    /// must stay valid and unchanged, and `context` (at least a
    /// `fi_context2`, for providers with `FI_CONTEXT`) must stay valid,
    /// until the completion for `context` is read or the endpoint closed.
    pub unsafe fn tsend(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: FiAddr,
        tag: u64,
        context: *mut c_void,
    ) -> Result<Posted, FabricError> {
        // SAFETY: the caller upholds the buffer and context contract.
        let ret = unsafe { sys::tf_fi_tsend(self.ptr, buf.cast(), len, desc, dest, tag, context) };
        posted("fi_tsend", ret)
    }

    /// Posts a tagged receive into `len` bytes at `buf`, matching tags
    /// equal to `tag` outside the bits of `ignore`, from any source.
    ///
    /// # Safety
    /// As [`Endpoint::tsend`], and `buf` must be writable.
    pub unsafe fn trecv(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        tag: u64,
        ignore: u64,
        context: *mut c_void,
    ) -> Result<Posted, FabricError> {
        // SAFETY: the caller upholds the buffer and context contract.
        let ret = unsafe {
            sys::tf_fi_trecv(
                self.ptr,
                buf.cast(),
                len,
                desc,
                sys::FI_ADDR_UNSPEC,
                tag,
                ignore,
                context,
            )
        };
        posted("fi_trecv", ret)
    }

    /// Posts a one-sided read of `len` bytes from `(addr, key)` on `src`
    /// into `buf`.
    ///
    /// # Safety
    /// As [`Endpoint::trecv`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn read(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        src: FiAddr,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> Result<Posted, FabricError> {
        // SAFETY: the caller upholds the buffer and context contract.
        let ret =
            unsafe { sys::tf_fi_read(self.ptr, buf.cast(), len, desc, src, addr, key, context) };
        posted("fi_read", ret)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: opened by fi_endpoint, closed once, before its queue, AV
        // and domain (held by the Arcs of this value). Operations still
        // posted are dropped by the provider: their buffers, which the owner
        // frees after this, are no longer used.
        let ret = unsafe { sys::tf_fi_close(&mut (*self.ptr).fid) };
        if ret < 0 {
            tracing::warn!(error = %FabricError::from_ret("fi_close(ep)", ret as isize), "closing an endpoint");
        }
    }
}

/// The `fi_context2` every operation context starts with (providers with
/// `FI_CONTEXT`/`FI_CONTEXT2` use it as scratch space).
pub type RawContext = sys::fi_context2;
