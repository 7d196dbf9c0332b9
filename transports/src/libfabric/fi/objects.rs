//! The fabric, its domain, address vectors and memory regions.

use super::info::Info;
use super::{check, FabricError};
use libfabric_sys as sys;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

/// An open fabric (`fi_fabric`).
pub struct Fabric {
    pub(super) ptr: *mut sys::fid_fabric,
}

// SAFETY: the domain is opened FI_THREAD_SAFE: libfabric serialises calls on
// its objects itself, so they may be used and closed from any thread.
unsafe impl Send for Fabric {}
// SAFETY: as above.
unsafe impl Sync for Fabric {}

impl Fabric {
    /// Opens the fabric of `info`.
    pub fn open(info: Info<'_>) -> Result<Arc<Fabric>, FabricError> {
        let mut ptr = ptr::null_mut();
        // SAFETY: fabric_attr comes from fi_getinfo; `ptr` receives the
        // new fabric, which we own and close in drop.
        let ret = unsafe { sys::fi_fabric(info.raw().fabric_attr, &mut ptr, ptr::null_mut()) };
        check("fi_fabric", ret)?;
        Ok(Arc::new(Fabric { ptr }))
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: opened by fi_fabric; everything opened from it holds an
        // Arc of it, so it is closed last, once.
        let ret = unsafe { sys::tf_fi_close(&mut (*self.ptr).fid) };
        if ret < 0 {
            tracing::warn!(error = %FabricError::from_ret("fi_close(fabric)", ret as isize), "closing the fabric");
        }
    }
}

/// An open domain (`fi_domain`).
pub struct Domain {
    pub(super) ptr: *mut sys::fid_domain,
    _fabric: Arc<Fabric>,
}

// SAFETY: see Fabric (FI_THREAD_SAFE).
unsafe impl Send for Domain {}
// SAFETY: see Fabric (FI_THREAD_SAFE).
unsafe impl Sync for Domain {}

impl Domain {
    /// Opens the domain of `info` on `fabric`.
    pub fn open(fabric: &Arc<Fabric>, info: Info<'_>) -> Result<Arc<Domain>, FabricError> {
        let mut ptr = ptr::null_mut();
        // SAFETY: a live fabric, an info entry from fi_getinfo (libfabric
        // copies what it keeps), an out pointer.
        let ret = unsafe { sys::tf_fi_domain(fabric.ptr, info.ptr, &mut ptr, ptr::null_mut()) };
        check("fi_domain", ret)?;
        Ok(Arc::new(Domain {
            ptr,
            _fabric: fabric.clone(),
        }))
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: opened by fi_domain; endpoints, queues, address vectors
        // and memory regions hold an Arc of it, so they are closed first.
        let ret = unsafe { sys::tf_fi_close(&mut (*self.ptr).fid) };
        if ret < 0 {
            tracing::warn!(error = %FabricError::from_ret("fi_close(domain)", ret as isize), "closing the domain");
        }
    }
}

/// A fabric address in an [`AddressVector`].
pub type FiAddr = sys::fi_addr_t;

/// An address vector (`fi_av_open`).
pub struct AddressVector {
    pub(super) ptr: *mut sys::fid_av,
    _domain: Arc<Domain>,
}

// SAFETY: see Fabric (FI_THREAD_SAFE).
unsafe impl Send for AddressVector {}
// SAFETY: see Fabric (FI_THREAD_SAFE).
unsafe impl Sync for AddressVector {}

impl AddressVector {
    /// Opens an address vector for about `count` addresses.
    pub fn open(domain: &Arc<Domain>, count: usize) -> Result<Arc<AddressVector>, FabricError> {
        let mut attr = sys::fi_av_attr {
            type_: sys::FI_AV_UNSPEC,
            count,
            ..Default::default()
        };
        let mut ptr = ptr::null_mut();
        // SAFETY: a live domain, an initialised attribute, an out pointer.
        let ret = unsafe { sys::tf_fi_av_open(domain.ptr, &mut attr, &mut ptr, ptr::null_mut()) };
        check("fi_av_open", ret)?;
        Ok(Arc::new(AddressVector {
            ptr,
            _domain: domain.clone(),
        }))
    }

    /// Inserts one endpoint name (from [`super::Endpoint::name`]); returns its
    /// fabric address.
    pub fn insert(&self, name: &[u8]) -> Result<FiAddr, FabricError> {
        if name.is_empty() {
            return Err(FabricError::local("fi_av_insert", "empty endpoint name"));
        }
        let mut addr: FiAddr = sys::FI_ADDR_UNSPEC;
        // SAFETY: a live AV; `name` is one address in the provider's format
        // (it came from fi_getname of the same provider; the provider reads
        // at most its address length); `addr` receives one fi_addr_t.
        let ret = unsafe {
            sys::tf_fi_av_insert(
                self.ptr,
                name.as_ptr().cast(),
                1,
                &mut addr,
                0,
                ptr::null_mut(),
            )
        };
        if ret != 1 {
            return Err(if ret < 0 {
                FabricError::from_ret("fi_av_insert", ret as isize)
            } else {
                FabricError::local("fi_av_insert", "the provider rejected the address")
            });
        }
        Ok(addr)
    }
}

impl Drop for AddressVector {
    fn drop(&mut self) {
        // SAFETY: opened by fi_av_open; the endpoint bound to it holds an
        // Arc of it, so it is closed first.
        let ret = unsafe { sys::tf_fi_close(&mut (*self.ptr).fid) };
        if ret < 0 {
            tracing::warn!(error = %FabricError::from_ret("fi_close(av)", ret as isize), "closing an address vector");
        }
    }
}

/// A registered memory region (`fi_mr_reg`). The memory must outlive it:
/// see [`MemoryRegion::register`].
pub struct MemoryRegion {
    pub(super) ptr: *mut sys::fid_mr,
    _domain: Arc<Domain>,
}

// SAFETY: see Fabric (FI_THREAD_SAFE).
unsafe impl Send for MemoryRegion {}
// SAFETY: see Fabric (FI_THREAD_SAFE).
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers `len` bytes at `buf` for `access` (`FI_READ`,
    /// `FI_REMOTE_READ`, ...), asking for `requested_key` (ignored by
    /// providers with `FI_MR_PROV_KEY`).
    ///
    /// # Safety
    /// The memory must stay allocated (and not be moved) until the region
    /// is dropped, and until every operation using it has completed.
    pub unsafe fn register(
        domain: &Arc<Domain>,
        buf: *const u8,
        len: usize,
        access: u64,
        requested_key: u64,
    ) -> Result<MemoryRegion, FabricError> {
        let mut ptr = ptr::null_mut();
        // SAFETY: a live domain; the caller keeps the memory valid for the
        // region's lifetime; `ptr` receives the region, closed in drop.
        let ret = unsafe {
            sys::tf_fi_mr_reg(
                domain.ptr,
                buf.cast(),
                len,
                access,
                0,
                requested_key,
                0,
                &mut ptr,
                ptr::null_mut(),
            )
        };
        check("fi_mr_reg", ret)?;
        Ok(MemoryRegion {
            ptr,
            _domain: domain.clone(),
        })
    }

    /// The local descriptor (for `FI_MR_LOCAL` providers).
    pub fn desc(&self) -> *mut c_void {
        // SAFETY: a live region.
        unsafe { sys::tf_fi_mr_desc(self.ptr) }
    }

    /// The remote key a peer uses to access the region.
    pub fn key(&self) -> u64 {
        // SAFETY: a live region.
        unsafe { sys::tf_fi_mr_key(self.ptr) }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered by fi_mr_reg, closed once; the memory is still
        // valid (the owner drops it after the region).
        let ret = unsafe { sys::tf_fi_close(&mut (*self.ptr).fid) };
        if ret < 0 {
            tracing::warn!(error = %FabricError::from_ret("fi_close(mr)", ret as isize), "deregistering memory");
        }
    }
}
