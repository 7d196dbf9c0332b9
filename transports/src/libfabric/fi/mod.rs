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

mod cq;
mod endpoint;
mod info;
mod objects;

pub use cq::{Completion, CompletionError, CompletionQueue, CqRead};
pub use endpoint::{Endpoint, RawContext};
pub use info::{Info, InfoList};
pub use objects::{AddressVector, Domain, Fabric, FiAddr, MemoryRegion};

use libfabric_sys as sys;
use std::ffi::{CStr, CString};

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

/// Capability and mode bits, re-exported for the transport.
pub mod bits {
    use super::sys;
    /// `FI_TAGGED`.
    pub const TAGGED: u64 = sys::FI_TAGGED as u64;
    /// `FI_RMA`.
    pub const RMA: u64 = sys::FI_RMA as u64;
    /// `FI_SOURCE`: completions report their source address.
    pub const SOURCE: u64 = sys::FI_SOURCE;
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
    /// `FI_ENOKEY`: a requested memory key is taken.
    pub const ENOKEY: i32 = sys::FI_ENOKEY as i32;
    /// `FI_ECANCELED`.
    pub const ECANCELED: i32 = sys::FI_ECANCELED as i32;
}
