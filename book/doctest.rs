//! The taskfold book (`book/src`, built with `mdbook build book`), as doc
//! tests: every page is the documentation of one module below, so
//! `cargo test -p taskfold-book` compiles and runs every Rust code block of
//! the book. Blocks marked `no_run` (a `main` that needs a launcher) are
//! compiled only. The C and Fortran blocks (tagged `c` and `fortran`) are
//! whole programs: `tests/c_blocks.rs` compiles each against
//! libtaskfold and runs it under `taskfold run -n 2` (`no_run`: compiled
//! only). `tests/quick_start.rs` follows the Quick start into a new crate
//! outside the workspace and runs it under `taskfold run -n 4`.
//!
//! # Layout
//!
//! One empty module per page, in the order of `src/SUMMARY.md`:
//! [`introduction`], [`getting_started`], [`quick_start`], [`embedding`],
//! [`embedding_c`],
//! [`reducer_body`],
//! [`non_blocking`], [`fault_tolerance`], [`checkpoints`], [`surviving`],
//! [`transports`],
//! [`launching`], [`configuration`], [`security`], [`metrics`],
//! [`benchmarks`],
//! [`architecture`].

#[doc = include_str!("src/introduction.md")]
pub mod introduction {}

#[doc = include_str!("src/getting-started.md")]
pub mod getting_started {}

#[doc = include_str!("src/quick-start.md")]
pub mod quick_start {}

#[doc = include_str!("src/embedding.md")]
pub mod embedding {}

#[doc = include_str!("src/embedding-c.md")]
pub mod embedding_c {}

#[doc = include_str!("src/reducer-body.md")]
pub mod reducer_body {}

#[doc = include_str!("src/non-blocking.md")]
pub mod non_blocking {}

#[doc = include_str!("src/fault-tolerance.md")]
pub mod fault_tolerance {}

#[doc = include_str!("src/checkpoints.md")]
pub mod checkpoints {}

#[doc = include_str!("src/surviving.md")]
pub mod surviving {}

#[doc = include_str!("src/transports.md")]
pub mod transports {}

#[doc = include_str!("src/launching.md")]
pub mod launching {}

#[doc = include_str!("src/configuration.md")]
pub mod configuration {}

#[doc = include_str!("src/security.md")]
pub mod security {}

#[doc = include_str!("src/metrics.md")]
pub mod metrics {}

#[doc = include_str!("src/benchmarks.md")]
pub mod benchmarks {}

#[doc = include_str!("src/architecture.md")]
pub mod architecture {}

/// Every page listed in `src/SUMMARY.md` is one of the modules above, so no
/// page's code escapes the tests.
#[cfg(test)]
mod tests {
    #[test]
    fn every_page_is_tested() {
        let summary = include_str!("src/SUMMARY.md");
        let this = include_str!("doctest.rs");
        let pages: Vec<&str> = summary
            .lines()
            .filter_map(|l| l.split("](").nth(1))
            .filter_map(|rest| rest.split(')').next())
            .collect();
        assert_eq!(pages.len(), 17, "{pages:?}");
        for page in pages {
            let include = format!("include_str!(\"src/{page}\")");
            assert!(
                this.contains(&include),
                "{page} is not included as a doc test"
            );
        }
    }
}
