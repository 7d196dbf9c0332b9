//! The test hooks in a build without the cargo feature `test-hooks`: none
//! can be set (`TASKFOLD_TEST_HOOK` is refused, `Config` has no hooks), so
//! every check here is a constant "no hook" and its call site compiles to
//! nothing. The real ones are in `hooks.rs`, for test builds.

/// No hook exists in this build.
#[derive(Clone, Debug)]
pub(crate) enum Hook {}

/// The points a hook could hold at (see `hooks.rs`), named by the call
/// sites.
#[allow(dead_code)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    BeforeJoin,
    DiskWritten,
    AfterJoin,
    BeforeGet,
    BeforeFold,
    BeforeGather,
    BeforeGatheredFold,
    MidGet,
    Joined,
    Checkpoint,
    BeforeShare,
    BeforeSpreadGet,
    Table,
}

/// The hooks of `config`: none.
pub(crate) fn of(_config: &crate::Config) -> Vec<Hook> {
    Vec::new()
}

/// Never armed.
pub(crate) fn armed(_: &[Hook], _: u32, _: Point, _: &str) -> bool {
    false
}

/// Never holds.
pub(crate) fn hold(_: &[Hook], _: u32, _: Point, _: &str) -> Option<std::future::Ready<()>> {
    None
}

/// Never holds.
pub(crate) fn hold_blocking(_: &[Hook], _: u32, _: Point, _: &str) -> Option<fn()> {
    None
}

/// Never holds.
pub(crate) fn table_hold(_: &[Hook], _: u32) -> Option<taskfold_transports::tcp::TableHold> {
    None
}
