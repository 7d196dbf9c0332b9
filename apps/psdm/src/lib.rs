//! psdm: a Kirchhoff pre-stack depth migration mini-app.
//!
//! # Layout
//!
//! (being written)
