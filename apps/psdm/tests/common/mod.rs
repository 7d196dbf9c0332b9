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

/// The checksum each of ranks `0..ranks` printed for the image it kept
/// (`--allreduce`).
#[allow(dead_code)] // only the tests of `--allreduce` use it
pub fn kept_checksums(t: &str, ranks: u32) -> Vec<f64> {
    (0..ranks)
        .map(|r| {
            let prefix = format!("[{r}] psdm: ");
            let line = t
                .lines()
                .find(|l| l.starts_with(&prefix) && l.contains("keeps the stacked image"))
                .unwrap_or_else(|| panic!("rank {r} kept no image:\n{t}"));
            let sum = line.rsplit("checksum ").next().unwrap().trim();
            sum.parse().unwrap_or_else(|e| panic!("{sum:?}: {e}"))
        })
        .collect()
}
