//! Handles given to C: 64-bit numbers, never pointers, so that a wrong
//! handle is told apart from a live one instead of being dereferenced.
//!
//! A handle is `kind << 56 | session << 32 | serial`: `kind` says what it
//! names (a request, a buffer, an operation), `session` is drawn once per
//! process, `serial` counts up from 1. So a handle already completed (its
//! serial was handed out and is gone), one of another kind, and one this
//! process never made (an uninitialised variable, another process's) each
//! get an error saying which.

use crate::error::{Error, TF_ERR_HANDLE};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// What a handle names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A `tf_request`.
    Request = 0x71,
    /// A `tf_buf`.
    Buffer = 0x72,
    /// A `tf_op`.
    Op = 0x73,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Buffer => "buffer",
            Kind::Op => "operation",
        }
    }

    fn of(tag: u64) -> Option<Kind> {
        [Kind::Request, Kind::Buffer, Kind::Op]
            .into_iter()
            .find(|k| *k as u64 == tag)
    }
}

/// This process's session number (24 bits, never 0).
fn session() -> u64 {
    static SESSION: OnceLock<u64> = OnceLock::new();
    *SESSION.get_or_init(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mixed = (t ^ (u64::from(std::process::id()) << 17)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((mixed >> 33) & 0xff_ffff).max(1)
    })
}

/// The live objects of one kind, by handle.
pub struct Table<T> {
    kind: Kind,
    inner: Mutex<Inner<T>>,
}

struct Inner<T> {
    next: u32,
    live: HashMap<u64, T>,
}

impl<T> Table<T> {
    /// An empty table of `kind`.
    pub fn new(kind: Kind) -> Self {
        Table {
            kind,
            inner: Mutex::new(Inner {
                next: 1,
                live: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `value` and returns its new handle.
    pub fn insert(&self, value: T) -> u64 {
        let mut inner = self.lock();
        let serial = inner.next;
        inner.next = inner.next.wrapping_add(1).max(1);
        let h = (self.kind as u64) << 56 | session() << 32 | u64::from(serial);
        inner.live.insert(h, value);
        h
    }

    /// Takes the object of `h` out (the caller puts it back with
    /// [`Table::restore`] if it stays live).
    pub fn take(&self, h: u64) -> Result<T, Error> {
        let mut inner = self.lock();
        match inner.live.remove(&h) {
            Some(v) => Ok(v),
            None => Err(self.why(h, inner.next)),
        }
    }

    /// How many objects are live.
    pub fn count(&self) -> usize {
        self.lock().live.len()
    }

    /// Puts back an object taken from handle `h`.
    pub fn restore(&self, h: u64, value: T) {
        self.lock().live.insert(h, value);
    }

    /// Runs `f` on the object of `h`, in place.
    pub fn with<R>(&self, h: u64, f: impl FnOnce(&mut T) -> R) -> Result<R, Error> {
        let mut inner = self.lock();
        let next = inner.next;
        match inner.live.get_mut(&h) {
            Some(v) => Ok(f(v)),
            None => Err(self.why(h, next)),
        }
    }

    /// Why `h` names no live object of this table.
    fn why(&self, h: u64, next: u32) -> Error {
        let what = self.kind.name();
        let (tag, sess, serial) = (h >> 56, (h >> 32) & 0xff_ffff, h as u32);
        let msg = if h == 0 {
            format!("the {what} handle is null (0)")
        } else if sess != session() || serial == 0 {
            format!("{h:#x} is not a {what} handle of this process")
        } else if tag != self.kind as u64 {
            match Kind::of(tag) {
                Some(other) => format!("{h:#x} is a {} handle, not a {what}", other.name()),
                None => format!("{h:#x} is not a {what} handle of this process"),
            }
        } else if serial < next {
            format!("{what} {h:#x} was already completed or freed (or is being waited on by another thread)")
        } else {
            format!("{h:#x} is not a {what} handle of this process")
        };
        Error::new(TF_ERR_HANDLE, msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_foreign_and_wrong_kind_handles_are_told_apart() {
        let requests = Table::new(Kind::Request);
        let buffers = Table::new(Kind::Buffer);
        let r = requests.insert("r");
        let b = buffers.insert("b");
        assert_eq!(requests.take(r).unwrap(), "r");
        let gone = requests.take(r).unwrap_err();
        assert_eq!(gone.code, TF_ERR_HANDLE);
        assert!(
            gone.message.contains("already completed"),
            "{}",
            gone.message
        );
        let kind = requests.take(b).unwrap_err();
        assert!(
            kind.message.contains("is a buffer handle, not a request"),
            "{}",
            kind.message
        );
        let foreign = requests.take(0x1234_5678).unwrap_err();
        assert!(foreign
            .message
            .contains("not a request handle of this process"));
        let null = requests.take(0).unwrap_err();
        assert!(null.message.contains("null"));
        assert_eq!(buffers.with(b, |v| *v).unwrap(), "b");
    }
}
