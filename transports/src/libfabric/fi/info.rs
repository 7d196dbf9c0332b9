//! Provider discovery: the list `fi_getinfo` returns and its entries.

use super::{check, cstring, FabricError, Hints, API_VERSION};
use libfabric_sys as sys;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::ptr;

/// The list `fi_getinfo` returned; freed on drop.
pub struct InfoList {
    head: *mut sys::fi_info,
}

// SAFETY: the list is plain data owned by this value; libfabric keeps no
// reference to it, and we only read it (or free it, in drop).
unsafe impl Send for InfoList {}
// SAFETY: shared access only reads.
unsafe impl Sync for InfoList {}

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.head.is_null() {
            // SAFETY: head came from fi_getinfo and is freed exactly once.
            unsafe { sys::fi_freeinfo(self.head) };
        }
    }
}

/// Frees a hints structure built by [`InfoList::get`].
struct OwnedInfo(*mut sys::fi_info);

impl Drop for OwnedInfo {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: allocated by fi_allocinfo; its strings by strdup, which
            // is what fi_freeinfo frees them with.
            unsafe { sys::fi_freeinfo(self.0) };
        }
    }
}

impl InfoList {
    /// The providers matching `hints` for a reliable-datagram endpoint
    /// (`FI_EP_RDM`, thread-safe domain), best first. `FI_ENODATA` means
    /// none matches.
    pub fn get(hints: &Hints) -> Result<InfoList, FabricError> {
        // SAFETY: fi_allocinfo (fi_dupinfo(NULL)) returns a zeroed fi_info
        // with every attribute structure allocated, or NULL.
        let h = OwnedInfo(unsafe { sys::tf_fi_allocinfo() });
        if h.0.is_null() {
            return Err(FabricError::local("fi_allocinfo", "out of memory"));
        }
        let prov = hints
            .provider
            .as_deref()
            .map(|p| cstring("fi_getinfo", p))
            .transpose()?;
        let node = hints
            .source
            .as_deref()
            .map(|s| cstring("fi_getinfo", s))
            .transpose()?;
        // SAFETY: h.0 and its attribute pointers were allocated by
        // fi_allocinfo and are non-null; the strings we store are strdup'ed
        // (freed by fi_freeinfo in OwnedInfo's drop).
        unsafe {
            let info = &mut *h.0;
            info.caps = hints.caps;
            info.mode = hints.mode;
            (*info.ep_attr).type_ = sys::FI_EP_RDM;
            let dom = &mut *info.domain_attr;
            dom.mr_mode = hints.mr_mode as i32;
            dom.threading = sys::FI_THREAD_SAFE;
            if hints.manual_progress {
                dom.data_progress = sys::FI_PROGRESS_MANUAL;
                dom.control_progress = sys::FI_PROGRESS_MANUAL;
            }
            if let Some(p) = &prov {
                let dup = sys::tf_fi_strdup(p.as_ptr());
                if dup.is_null() {
                    return Err(FabricError::local("strdup", "out of memory"));
                }
                (*info.fabric_attr).prov_name = dup;
            }
        }
        let mut out: *mut sys::fi_info = ptr::null_mut();
        let (node_ptr, flags) = match &node {
            Some(n) => (n.as_ptr(), sys::FI_SOURCE),
            None => (ptr::null(), 0),
        };
        // SAFETY: valid hints, a NUL-terminated node or NULL, and an out
        // pointer; on success `out` owns a list we free in drop.
        let ret =
            unsafe { sys::fi_getinfo(API_VERSION, node_ptr, ptr::null(), flags, h.0, &mut out) };
        check("fi_getinfo", ret)?;
        if out.is_null() {
            return Err(FabricError::from_ret(
                "fi_getinfo",
                -(sys::FI_ENODATA as isize),
            ));
        }
        Ok(InfoList { head: out })
    }

    /// The first (best) entry.
    pub fn first(&self) -> Info<'_> {
        Info {
            ptr: self.head,
            _list: PhantomData,
        }
    }

    /// Every entry, best first.
    pub fn iter(&self) -> impl Iterator<Item = Info<'_>> {
        let mut p = self.head;
        std::iter::from_fn(move || {
            if p.is_null() {
                return None;
            }
            let i = Info {
                ptr: p,
                _list: PhantomData,
            };
            // SAFETY: p is a live node of the list this borrow keeps alive.
            p = unsafe { (*p).next };
            Some(i)
        })
    }
}

/// One entry of an [`InfoList`].
#[derive(Clone, Copy)]
pub struct Info<'a> {
    pub(super) ptr: *mut sys::fi_info,
    _list: PhantomData<&'a InfoList>,
}

pub(super) fn c_str(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: libfabric's attribute strings are NUL-terminated and live
        // as long as the info list, which the caller borrows.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Info<'_> {
    pub(super) fn raw(&self) -> &sys::fi_info {
        // SAFETY: ptr is a node of a list kept alive by the borrow.
        unsafe { &*self.ptr }
    }
    fn domain_attr(&self) -> &sys::fi_domain_attr {
        // SAFETY: fi_getinfo fills every attribute pointer of its results.
        unsafe { &*self.raw().domain_attr }
    }
    fn ep_attr(&self) -> &sys::fi_ep_attr {
        // SAFETY: as above.
        unsafe { &*self.raw().ep_attr }
    }
    /// The provider's name (`"tcp;ofi_rxm"`).
    pub fn provider(&self) -> String {
        // SAFETY: as above.
        c_str(unsafe { (*self.raw().fabric_attr).prov_name })
    }
    /// The fabric's name.
    pub fn fabric_name(&self) -> String {
        // SAFETY: as above.
        c_str(unsafe { (*self.raw().fabric_attr).name })
    }
    /// The domain's name.
    pub fn domain_name(&self) -> String {
        c_str(self.domain_attr().name)
    }
    /// True if the provider's addresses are IP socket addresses (so that a
    /// source address such as `127.0.0.1` means something to it).
    pub fn ip_addressed(&self) -> bool {
        matches!(
            self.raw().addr_format,
            sys::FI_SOCKADDR | sys::FI_SOCKADDR_IN | sys::FI_SOCKADDR_IN6
        )
    }
    /// The memory registration modes the provider requires (`FI_MR_*`).
    pub fn mr_mode(&self) -> u32 {
        self.domain_attr().mr_mode as u32
    }
    /// The modes the provider requires (`FI_CONTEXT`, ...).
    pub fn mode(&self) -> u64 {
        self.raw().mode
    }
    /// Size of memory keys in bytes.
    pub fn mr_key_size(&self) -> usize {
        self.domain_attr().mr_key_size
    }
    /// True if the provider makes data progress only when polled.
    pub fn manual_progress(&self) -> bool {
        self.domain_attr().data_progress == sys::FI_PROGRESS_MANUAL
    }
    /// Largest message (and RMA transfer) the endpoint accepts.
    pub fn max_msg_size(&self) -> usize {
        self.ep_attr().max_msg_size
    }
    /// Depth of the transmit queue.
    pub fn tx_size(&self) -> usize {
        // SAFETY: as above.
        unsafe { (*self.raw().tx_attr).size }
    }
    /// Depth of the receive queue.
    pub fn rx_size(&self) -> usize {
        // SAFETY: as above.
        unsafe { (*self.raw().rx_attr).size }
    }
}
