//! Helpers shared by psdm's multi-process tests.

use std::path::PathBuf;

/// The psdm binary of this build.
pub fn psdm() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_psdm"))
}

/// The checksum psdm's root printed.
pub fn checksum_printed(t: &str) -> f64 {
    t.lines()
        .find_map(|l| l.split("psdm: checksum ").nth(1))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no checksum printed:\n{t}"))
}
