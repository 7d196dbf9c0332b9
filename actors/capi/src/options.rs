//! The options of a reduction as C passes them: root, id, group,
//! durability and completion.

use crate::error::{Error, TF_ERR_ARGUMENT};
use std::ffi::{c_char, c_int, CStr};
use taskfold::{Completion, Durability, Reduce};

/// Durability: the runtime's default (`TASKFOLD_DURABILITY`).
pub const TF_DURABILITY_DEFAULT: c_int = 0;
/// Durability: the buddy's copy is made while the reduction runs.
pub const TF_DURABILITY_ASYNC: c_int = 1;
/// Durability: the call returns once the buddy acknowledged its copy.
pub const TF_DURABILITY_SYNC: c_int = 2;
/// Durability: no copy; a dead rank's contribution is lost.
pub const TF_DURABILITY_OFF: c_int = 3;

/// Completion: the runtime's default (`TASKFOLD_COMPLETION`).
pub const TF_COMPLETION_DEFAULT: c_int = 0;
/// Completion: a member's request completes once the root holds the result.
pub const TF_COMPLETION_RESULT: c_int = 1;
/// Completion: a member's request completes once its data was folded in
/// (as `MPI_Reduce` returns on a rank other than the root).
pub const TF_COMPLETION_CONTRIBUTED: c_int = 2;

/// Options of one reduction beside its root. A zeroed struct (`tf_options
/// o = {0};`) or a null pointer means every default.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug)]
pub struct tf_options {
    /// The reduction's id, a NUL-terminated UTF-8 string unique among the
    /// group's live reductions. Null: the runtime numbers the group's
    /// reductions in call order, so every member must then start them in
    /// the same order, as with MPI.
    pub id: *const c_char,
    /// The ranks taking part (`group_len` of them); null: every rank.
    pub group: *const i32,
    /// Entries in `group`.
    pub group_len: usize,
    /// One of `TF_DURABILITY_*`.
    pub durability: c_int,
    /// One of `TF_COMPLETION_*`.
    pub completion: c_int,
}

/// The runtime's options from `root` and `opts` (null: defaults).
///
/// # Safety
///
/// `opts` is null or points to a valid `tf_options` whose `id` is null or
/// NUL-terminated and whose `group` is null or holds `group_len` entries.
pub unsafe fn resolve(root: i32, opts: *const tf_options) -> Result<Reduce, Error> {
    let root = u32::try_from(root)
        .map_err(|_| Error::new(TF_ERR_ARGUMENT, format!("root {root} is negative")))?;
    let mut r = Reduce::root(root);
    if opts.is_null() {
        return Ok(r);
    }
    // SAFETY: not null; valid by the caller's contract.
    let o = unsafe { &*opts };
    if !o.id.is_null() {
        // SAFETY: NUL-terminated by the caller's contract.
        let id = unsafe { CStr::from_ptr(o.id) };
        let id = id
            .to_str()
            .map_err(|_| Error::new(TF_ERR_ARGUMENT, "the reduction id is not UTF-8"))?;
        r = r.id(id);
    }
    if !o.group.is_null() {
        // SAFETY: `group_len` entries by the caller's contract.
        let g = unsafe { std::slice::from_raw_parts(o.group, o.group_len) };
        let ranks = g
            .iter()
            .map(|&m| {
                u32::try_from(m).map_err(|_| {
                    Error::new(TF_ERR_ARGUMENT, format!("group member {m} is negative"))
                })
            })
            .collect::<Result<Vec<u32>, Error>>()?;
        r = r.group(ranks);
    } else if o.group_len != 0 {
        return Err(Error::null("options.group (with group_len > 0)"));
    }
    r = match o.durability {
        TF_DURABILITY_DEFAULT => r,
        TF_DURABILITY_ASYNC => r.durability(Durability::Async),
        TF_DURABILITY_SYNC => r.durability(Durability::Sync),
        TF_DURABILITY_OFF => r.durability(Durability::Off),
        d => {
            return Err(Error::new(
                TF_ERR_ARGUMENT,
                format!("unknown durability {d}"),
            ))
        }
    };
    r = match o.completion {
        TF_COMPLETION_DEFAULT => r,
        TF_COMPLETION_RESULT => r.completion(Completion::Result),
        TF_COMPLETION_CONTRIBUTED => r.completion(Completion::Contributed),
        c => {
            return Err(Error::new(
                TF_ERR_ARGUMENT,
                format!("unknown completion {c}"),
            ))
        }
    };
    Ok(r)
}
