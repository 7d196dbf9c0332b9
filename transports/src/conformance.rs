//! Placeholder: the conformance suite is being written.
