//! Views of a same-node peer's memory, read in place.

use crate::shm::PeerHeap;
use std::sync::Arc;

/// A lent range of a same-node peer's shared heap ([`crate::shm`]), mapped
/// read-only. Dropping it returns the loan to the owner, if it was one.
pub struct SharedView {
    heap: Arc<PeerHeap>,
    offset: usize,
    len: usize,
    /// Returns the loan when dropped (after the view's last read).
    _loan: Box<dyn Send + Sync>,
}

impl SharedView {
    /// A view of `len` bytes at `offset` in `heap`, returned by dropping
    /// `loan`; `None` (and the loan returned) if the range is outside it.
    pub fn new(
        heap: Arc<PeerHeap>,
        offset: usize,
        len: usize,
        loan: Box<dyn Send + Sync>,
    ) -> Option<SharedView> {
        heap.slice(offset, len)?;
        Some(SharedView {
            heap,
            offset,
            len,
            _loan: loan,
        })
    }
}

impl AsRef<[u8]> for SharedView {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::ops::Deref for SharedView {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.heap
            .slice(self.offset, self.len)
            .expect("checked when the view was made")
    }
}

impl std::fmt::Debug for SharedView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedView")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}
