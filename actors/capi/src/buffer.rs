//! Buffers the library allocates in the runtime's wire form
//! (`tf_buf_alloc`), so that `tf_ireduce_buf` sends them without a copy,
//! like `MPI_Alloc_mem` memory handed to `MPI_Ireduce`.

use crate::error::{guard, Error, TF_ERR_BUSY};
use crate::handles::{Kind, Table};
use crate::reduce::{check, AnyBuf};
use crate::state::{put, runtime};
use std::ffi::{c_int, c_void};
use std::sync::LazyLock;

/// A handle on a buffer from `tf_buf_alloc`.
#[allow(non_camel_case_types)]
pub type tf_buf = u64;

/// The null buffer: what `tf_buf_free` sets the caller's variable to.
pub const TF_BUF_NULL: tf_buf = 0;

/// Where a buffer's memory is.
pub enum Storage {
    /// The caller's to read and write.
    Ready(AnyBuf),
    /// Lent to a reduction that has not completed.
    Lent,
    /// Sent away (or failed): made again, zeroed, when next asked for.
    Empty,
}

/// One buffer.
pub struct Buffer {
    dtype: c_int,
    count: usize,
    /// Its memory now.
    pub storage: Storage,
}

impl Buffer {
    /// Its memory, made again if it was sent away.
    fn ready(&mut self) -> Result<&mut AnyBuf, Error> {
        if let Storage::Empty = self.storage {
            self.storage = Storage::Ready(AnyBuf::zeroed(self.dtype, self.count));
        }
        match &mut self.storage {
            Storage::Ready(b) => Ok(b),
            _ => Err(busy()),
        }
    }

    /// Lends its memory to a reduction.
    pub fn lend(&mut self) -> Result<AnyBuf, Error> {
        self.ready()?;
        match std::mem::replace(&mut self.storage, Storage::Lent) {
            Storage::Ready(b) => Ok(b),
            _ => unreachable!("made ready above"),
        }
    }
}

fn busy() -> Error {
    Error::new(
        TF_ERR_BUSY,
        "the buffer is lent to a reduction that has not completed: complete its request first",
    )
}

/// The live buffers of this process.
pub static BUFFERS: LazyLock<Table<Buffer>> = LazyLock::new(|| Table::new(Kind::Buffer));

/// Allocates a buffer of `count` zeroed elements of `datatype`, laid out
/// as the runtime sends contributions, writes its handle to `*buf` and the
/// address of its elements (aligned for the datatype) to `*data` (unless
/// null). Fill it there and reduce it with `tf_ireduce_buf`: nothing is
/// copied. The address stays valid until the buffer is lent to a
/// reduction or freed.
///
/// # Safety
///
/// `buf` points to a writable `tf_buf`; `data` is null or points to a
/// writable `void *`.
#[no_mangle]
pub unsafe extern "C" fn tf_buf_alloc(
    count: usize,
    datatype: c_int,
    buf: *mut tf_buf,
    data: *mut *mut c_void,
) -> c_int {
    guard("tf_buf_alloc", || {
        runtime()?;
        check(datatype, None, count)?;
        if buf.is_null() {
            return Err(Error::null("buf"));
        }
        let mut b = Buffer {
            dtype: datatype,
            count,
            storage: Storage::Ready(AnyBuf::zeroed(datatype, count)),
        };
        let (ptr, _) = b.ready()?.data();
        let h = BUFFERS.insert(b);
        // SAFETY: checked not null; the caller's contract.
        unsafe { buf.write(h) };
        if !data.is_null() {
            // SAFETY: not null; the caller's contract.
            unsafe { data.write(ptr) };
        }
        Ok(())
    })
}

/// Writes the address of buffer `buf`'s elements to `*data` and their
/// number to `*count` (either may be null). Fails with `TF_ERR_BUSY` while
/// the buffer is lent to a reduction. After a reduction the address may
/// differ from before: ask again.
///
/// # Safety
///
/// `data` and `count` are null or point to writable variables.
#[no_mangle]
pub unsafe extern "C" fn tf_buf_data(
    buf: tf_buf,
    data: *mut *mut c_void,
    count: *mut usize,
) -> c_int {
    guard("tf_buf_data", || {
        runtime()?;
        let (ptr, n) = BUFFERS.with(buf, |b| b.ready().map(|s| s.data()))??;
        if !data.is_null() {
            // SAFETY: not null; the caller's contract.
            unsafe { data.write(ptr) };
        }
        if !count.is_null() {
            // SAFETY: not null; the caller's contract.
            unsafe { count.write(n) };
        }
        Ok(())
    })
}

/// Frees buffer `*buf` and sets `*buf` to `TF_BUF_NULL`. Fails with
/// `TF_ERR_BUSY` while it is lent to a reduction (complete the request
/// first); freeing `TF_BUF_NULL` does nothing.
///
/// # Safety
///
/// `buf` points to a writable `tf_buf`.
#[no_mangle]
pub unsafe extern "C" fn tf_buf_free(buf: *mut tf_buf) -> c_int {
    guard("tf_buf_free", || {
        if buf.is_null() {
            return Err(Error::null("buf"));
        }
        // SAFETY: not null; the caller's contract.
        let h = unsafe { buf.read() };
        if h == TF_BUF_NULL {
            return Ok(());
        }
        let b = BUFFERS.take(h)?;
        if let Storage::Lent = b.storage {
            BUFFERS.restore(h, b);
            return Err(busy());
        }
        drop(b);
        // SAFETY: as above.
        unsafe { put(buf, TF_BUF_NULL, "buf") }
    })
}
