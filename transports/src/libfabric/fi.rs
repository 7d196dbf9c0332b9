//! A safe wrapper over the parts of libfabric the transport uses: provider
//! discovery (`fi_getinfo`), fabric, domain, completion queue, address
//! vector, reliable-datagram endpoint and memory registration.
//!
//! Every fabric call's error becomes a [`FabricError`] carrying the call's
//! name and libfabric's own message (`fi_strerror`). Objects hold an `Arc`
//! of what they were opened from, so they are closed in the right order
//! (endpoint, then its completion queue and address vector, memory regions,
//! then the domain, then the fabric) whatever order the owner drops them in.
//!
//! The data operations ([`Endpoint::tsend`], [`Endpoint::trecv`],
//! [`Endpoint::read`]) are `unsafe`: the provider uses the buffer after the
//! call returns, until the operation's completion is read from the queue
//! (or the endpoint is closed). The transport's progress thread keeps every
//! such buffer alive in its operation table for that long.

use libfabric_sys as sys;
use std::ffi::{c_void, CStr, CString};
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

/// The libfabric API version this wrapper asks for (1.10: provider-owned
/// error data, the `FI_MR_*` bits of `mr_mode`).
const API_VERSION: u32 = sys::fi_version_of(1, 10);

/// A failed libfabric call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call}: {message} (error {code})")]
pub struct FabricError {
    /// The libfabric call that failed (`"fi_getinfo"`, `"fi_read"`, ...).
    pub call: &'static str,
    /// libfabric's error number (positive: `FI_EAGAIN`, `FI_ENODATA`, ...).
    pub code: i32,
    /// libfabric's message for it (`fi_strerror`), or the provider's.
    pub message: String,
}

impl FabricError {
    /// The error for return value `ret` (negative) of `call`.
    pub fn from_ret(call: &'static str, ret: isize) -> FabricError {
        let code = i32::try_from(ret.unsigned_abs()).unwrap_or(i32::MAX);
        FabricError {
            call,
            code,
            message: strerror(code),
        }
    }

    /// An error detected by this wrapper rather than returned by libfabric.
    pub fn local(call: &'static str, message: impl Into<String>) -> FabricError {
        FabricError {
            call,
            code: sys::FI_EOTHER as i32,
            message: message.into(),
        }
    }
}

impl From<FabricError> for crate::TransportError {
    fn from(e: FabricError) -> Self {
        crate::TransportError::Io(format!("libfabric: {e}"))
    }
}

/// libfabric's message for error number `code` (`fi_strerror`).
pub fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror accepts any error number and returns a pointer to
    // a static, NUL-terminated string (or to a thread-local buffer for
    // unknown numbers); we copy it at once.
    let p = unsafe { sys::fi_strerror(code) };
    if p.is_null() {
        return format!("unknown error {code}");
    }
    // SAFETY: non-null, NUL-terminated (see above), valid for this call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn check(call: &'static str, ret: i32) -> Result<(), FabricError> {
    if ret < 0 {
        Err(FabricError::from_ret(call, ret as isize))
    } else {
        Ok(())
    }
}

/// What a data operation call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    /// Queued: its completion will come through the completion queue.
    Yes,
    /// `FI_EAGAIN`: the provider is out of resources; progress the
    /// completion queue and try again.
    Again,
}

fn posted(call: &'static str, ret: isize) -> Result<Posted, FabricError> {
    if ret == 0 {
        Ok(Posted::Yes)
    } else if ret == -(sys::FI_EAGAIN as isize) {
        Ok(Posted::Again)
    } else if ret < 0 {
        Err(FabricError::from_ret(call, ret))
    } else {
        Ok(Posted::Yes)
    }
}

fn cstring(call: &'static str, s: &str) -> Result<CString, FabricError> {
    CString::new(s).map_err(|_| FabricError::local(call, format!("{s:?} contains a NUL byte")))
}

/// What the application asks of a provider.
#[derive(Debug, Clone)]
pub struct Hints {
    /// Provider name (`"tcp;ofi_rxm"`, `"sockets"`, `"shm"`), or any.
    pub provider: Option<String>,
    /// Source address to bind (`"127.0.0.1"`), or the provider's choice.
    pub source: Option<String>,
    /// Capabilities (`FI_TAGGED | FI_RMA`, ...).
    pub caps: u64,
    /// Modes the application supports (`FI_CONTEXT`, ...).
    pub mode: u64,
    /// Memory registration modes the application supports (`FI_MR_*`).
    pub mr_mode: u32,
    /// Ask for manual progress (the application polls the completion
    /// queue; no provider thread).
    pub manual_progress: bool,
}

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
    ptr: *mut sys::fi_info,
    _list: PhantomData<&'a InfoList>,
}

fn c_str(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: libfabric's attribute strings are NUL-terminated and live
        // as long as the info list, which the caller borrows.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Info<'_> {
    fn raw(&self) -> &sys::fi_info {
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

/// An open fabric (`fi_fabric`).
pub struct Fabric {
    ptr: *mut sys::fid_fabric,
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
    ptr: *mut sys::fid_domain,
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
    ptr: *mut sys::fid_cq,
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
        out: &mut [Completion],
    ) -> Result<CqRead, FabricError> {
        if ret > 0 {
            let n = (ret as usize).min(out.len());
            for (o, r) in out.iter_mut().zip(&raw[..n]) {
                *o = Completion {
                    context: r.op_context as usize,
                    flags: r.flags,
                    len: r.len,
                    tag: r.tag,
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
    /// drives the provider's progress).
    pub fn read(&self, out: &mut [Completion]) -> Result<CqRead, FabricError> {
        let mut raw = [sys::fi_cq_tagged_entry::default(); 32];
        let n = out.len().min(raw.len());
        // SAFETY: a live queue of tagged format and a buffer of n entries.
        let ret = unsafe { sys::tf_fi_cq_read(self.ptr, raw.as_mut_ptr().cast(), n) };
        self.entries("fi_cq_read", ret, &raw, out)
    }

    /// Like [`CompletionQueue::read`], but waits up to `timeout_ms` for a
    /// completion or a [`CompletionQueue::signal`]. Only on a waitable queue.
    pub fn sread(&self, out: &mut [Completion], timeout_ms: i32) -> Result<CqRead, FabricError> {
        if !self.waitable {
            return self.read(out);
        }
        let mut raw = [sys::fi_cq_tagged_entry::default(); 32];
        let n = out.len().min(raw.len());
        // SAFETY: a live queue of tagged format with a wait object, a buffer
        // of n entries, no condition.
        let ret = unsafe {
            sys::tf_fi_cq_sread(
                self.ptr,
                raw.as_mut_ptr().cast(),
                n,
                ptr::null(),
                timeout_ms,
            )
        };
        if ret == -(sys::FI_ETIMEDOUT as isize) || ret == -(sys::FI_ECANCELED as isize) {
            return Ok(CqRead::Entries(0));
        }
        self.entries("fi_cq_sread", ret, &raw, out)
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

/// A fabric address in an [`AddressVector`].
pub type FiAddr = sys::fi_addr_t;

/// An address vector (`fi_av_open`).
pub struct AddressVector {
    ptr: *mut sys::fid_av,
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

    /// Inserts one endpoint name (from [`Endpoint::name`]); returns its
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
    ptr: *mut sys::fid_mr,
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

/// A reliable-datagram endpoint (`FI_EP_RDM`), bound to one completion
/// queue for both directions and to an address vector, enabled.
pub struct Endpoint {
    ptr: *mut sys::fid_ep,
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

/// Capability and mode bits, re-exported for the transport.
pub mod bits {
    use super::sys;
    /// `FI_TAGGED`.
    pub const TAGGED: u64 = sys::FI_TAGGED as u64;
    /// `FI_RMA`.
    pub const RMA: u64 = sys::FI_RMA as u64;
    /// `FI_READ`.
    pub const READ: u64 = sys::FI_READ as u64;
    /// `FI_REMOTE_READ`.
    pub const REMOTE_READ: u64 = sys::FI_REMOTE_READ as u64;
    /// `FI_SEND`.
    pub const SEND: u64 = sys::FI_SEND as u64;
    /// `FI_RECV`.
    pub const RECV: u64 = sys::FI_RECV as u64;
    /// `FI_CONTEXT`.
    pub const CONTEXT: u64 = sys::FI_CONTEXT;
    /// `FI_CONTEXT2`.
    pub const CONTEXT2: u64 = sys::FI_CONTEXT2;
    /// `FI_MR_LOCAL`.
    pub const MR_LOCAL: u32 = sys::FI_MR_LOCAL;
    /// `FI_MR_VIRT_ADDR`.
    pub const MR_VIRT_ADDR: u32 = sys::FI_MR_VIRT_ADDR;
    /// `FI_MR_ALLOCATED`.
    pub const MR_ALLOCATED: u32 = sys::FI_MR_ALLOCATED;
    /// `FI_MR_PROV_KEY`.
    pub const MR_PROV_KEY: u32 = sys::FI_MR_PROV_KEY;
    /// `FI_ENODATA`: no provider matches.
    pub const ENODATA: i32 = sys::FI_ENODATA as i32;
    /// `FI_ECANCELED`.
    pub const ECANCELED: i32 = sys::FI_ECANCELED as i32;
}
