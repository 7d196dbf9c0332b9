//! The taskfold book, as doc tests.
//!
//! # Layout
//!
//! (being written)
