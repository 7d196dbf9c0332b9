//! The C ABI of taskfold: `libtaskfold` (shared and static) for C, C++ and
//! Fortran programs, in the style of MPI's C API. Every function returns
//! an error code (`TF_SUCCESS` or a `TF_ERR_*`), with a message naming
//! what failed in `tf_last_error()`; no Rust panic crosses into the
//! caller (each body runs under `catch_unwind`, and a panic is
//! `TF_ERR_INTERNAL`).
//!
//! The header, `include/taskfold.h`, is generated from this crate's source
//! by cbindgen (a test fails when the checked-in one differs); the Fortran
//! module is `fortran/taskfold.f90`. The book's chapter "Embedding from C
//! and Fortran" shows them at work, with a porting table from MPI.
//!
//! ```c
//! tf_init();
//! tf_request req;
//! tf_ireduce(image, sum, n, TF_F32, TF_SUM, 0, NULL, &req);
//! /* ... compute ... */
//! tf_wait(&req, NULL);
//! tf_finalize();
//! ```
//!
//! # Layout
//!
//! - `error`: the `TF_*` codes, `tf_strerror`, `tf_last_error`, and the
//!   guard every exported function runs in.
//! - `handles`: request, buffer and operation handles as checked numbers,
//!   never pointers.
//! - `state`: the process's one runtime: `tf_init`, `tf_finalize`,
//!   `tf_rank`, `tf_size`, `tf_barrier`.
//! - `options`: `tf_options` (id, group, durability, completion).
//! - `reduce`: typed reductions, `tf_ireduce` (the send buffer copied at
//!   the call) and `tf_ireduce_buf` (a `tf_buf`, sent without a copy).
//! - `spread`: every member gets the value: `tf_iallreduce`, `tf_ibcast`.
//! - `buffer`: `tf_buf_alloc`, `tf_buf_data`, `tf_buf_free`.
//! - `custom`: custom operations (`tf_op_create`) and their reductions
//!   (`tf_ireduce_custom`, `tf_ireduce_blob`).
//! - `request`: `tf_test`, `tf_wait`, `tf_wait_timeout`, `tf_wait_all`.
//! - `checkpoint`: `tf_checkpoint` and `tf_restore` of a caller's buffer.
//! - `lifecycle`: `tf_lifecycle`, `tf_check_reinit`, `tf_run_reinit`.
//!
//! # Threads
//!
//! Every function may be called from any thread (the runtime is shared);
//! a request is completed by one thread at a time. Fold callbacks run on
//! the runtime's own threads.
//!
//! # Memory
//!
//! The library installs taskfold's shared heap as the allocator of its own
//! (Rust) allocations, as the `taskfold` binaries do: contributions and
//! reduction buffers from 128 KiB up lie in shared memory, where ranks on
//! the same node read them in place. `TASKFOLD_SHARED_HEAP=0` turns it
//! off. The caller's `malloc` is untouched.

pub mod buffer;
pub mod checkpoint;
pub mod custom;
pub mod error;
pub mod handles;
pub mod lifecycle;
pub mod options;
pub mod reduce;
pub mod request;
pub mod spread;
pub mod state;

#[global_allocator]
static HEAP: taskfold::SharedHeap = taskfold::SharedHeap;
