//! The exposed-buffer table every transport serves gets from.

use crate::BufferKey;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::RwLock;

/// One exposed buffer: the bytes, and what the transport attaches to them
/// when a peer first asks (libfabric: their memory registration).
#[derive(Debug)]
struct Entry<R> {
    data: Bytes,
    attached: Option<R>,
}

/// The buffers a rank exposes, by key, shared by the transport's API and
/// its serving side. `R` is what the transport attaches to an exposed
/// buffer (nothing, `()`, for most).
#[derive(Debug)]
pub struct Exposed<R = ()> {
    map: RwLock<HashMap<BufferKey, Entry<R>>>,
}

impl<R> Default for Exposed<R> {
    fn default() -> Self {
        Exposed {
            map: RwLock::new(HashMap::new()),
        }
    }
}

impl<R> Exposed<R> {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<BufferKey, Entry<R>>> {
        // Every update is a single map operation: consistent after a panic.
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<BufferKey, Entry<R>>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Inserts or replaces (what was attached to an older buffer goes).
    pub fn insert(&self, key: BufferKey, data: Bytes) {
        self.write().insert(
            key,
            Entry {
                data,
                attached: None,
            },
        );
    }

    /// Removes.
    pub fn remove(&self, key: BufferKey) -> Option<Bytes> {
        self.write().remove(&key).map(|e| e.data)
    }

    /// A cheap clone of the bytes under `key`.
    pub fn lookup(&self, key: BufferKey) -> Option<Bytes> {
        self.read().get(&key).map(|e| e.data.clone())
    }

    /// Runs `f` on the bytes under `key` and what is attached to them (to
    /// attach something on first use); `None` if nothing is exposed there.
    pub fn with<T>(
        &self,
        key: BufferKey,
        f: impl FnOnce(&Bytes, &mut Option<R>) -> T,
    ) -> Option<T> {
        let mut m = self.write();
        let e = m.get_mut(&key)?;
        Some(f(&e.data, &mut e.attached))
    }

    /// Number of exposed buffers and their total bytes.
    pub fn usage(&self) -> (usize, usize) {
        let m = self.read();
        (m.len(), m.values().map(|e| e.data.len()).sum())
    }

    /// Withdraws everything (on shutdown).
    pub fn clear(&self) {
        self.write().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_attached_goes_with_its_buffer() {
        let x: Exposed<u32> = Exposed::default();
        x.insert(BufferKey(1), Bytes::from_static(b"abc"));
        assert_eq!(
            x.with(BufferKey(1), |d, a| (d.len(), *a.get_or_insert(7))),
            Some((3, 7))
        );
        assert_eq!(x.with(BufferKey(1), |_, a| *a), Some(Some(7)));
        x.insert(BufferKey(1), Bytes::from_static(b"de"));
        assert_eq!(x.with(BufferKey(1), |_, a| *a), Some(None));
        assert_eq!(x.usage(), (1, 2));
        assert_eq!(x.remove(BufferKey(1)).as_deref(), Some(&b"de"[..]));
        assert_eq!(x.with(BufferKey(2), |_, _| ()), None);
        x.insert(BufferKey(3), Bytes::new());
        x.clear();
        assert_eq!(x.usage(), (0, 0));
    }
}
