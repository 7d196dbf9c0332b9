//! Placeholder: the TCP transport is being written.
