//! Test hooks: hold a rank at an exact point of a reduction so that a test
//! can kill it there (the places where a rank can fail during a reduction:
//! before its contribution is announced, before its replica left it, while
//! its data is fetched or folded), deterministically.
//!
//! `TASKFOLD_TEST_HOOK=RANK:POINT:ID:DIR[;...]` (parsed with the settings,
//! see `taskfold_core::settings::hooks`; a malformed entry stops the
//! start), in builds with the cargo feature `test-hooks` only: the test
//! suites enable it, a release build has no hooks (`hooks_off.rs`). When rank `RANK` reaches `POINT` in reduction `ID`, it
//! writes `DIR/held-RANK-POINT` and waits (only that reduction waits; the
//! rank keeps answering pings and serving data) until
//! `DIR/release-RANK-POINT` exists, at most two minutes.
//! Points: `before-join`, `disk-written` (the original is on the local disk;
//! its join and its buddy offer wait), `after-join` (its tasks wait),
//! `before-get`, `before-fold`, and `joined` (marks only, never holds);
//! and `checkpoint`, where `ID` is a checkpoint's version: the rank's
//! checkpoint writer holds before writing it (the application goes on);
//! `before-share` and `before-spread-get`, where `ID` is an allreduce's or
//! a broadcast's: its root holds the value before serving it, a member
//! before fetching it; and `table`, where `ID` is a number of ranks: the
//! master's bootstrap holds once it handed the job's table to that many
//! (its marker holds its process id; see `taskfold_transports::tcp::TableHold`).

use std::time::{Duration, Instant};
pub use taskfold_core::settings::hooks::{Hook, Point};

/// The hooks of `config`.
pub(crate) fn of(config: &crate::Config) -> Vec<Hook> {
    config.hooks.clone()
}

/// The hook of `rank` at `point` in reduction `id`, if any.
fn find<'a>(hooks: &'a [Hook], rank: u32, point: Point, id: &str) -> Option<&'a Hook> {
    hooks
        .iter()
        .find(|h| h.rank == rank && h.point == point && h.id == id)
}

/// Whether a hook of `rank` at `point` in reduction `id` exists (without
/// marking it held).
pub fn armed(hooks: &[Hook], rank: u32, point: Point, id: &str) -> bool {
    find(hooks, rank, point, id).is_some()
}

/// If a hook matches, marks it held and returns a future that resolves once
/// it is released (or after two minutes).
pub fn hold(
    hooks: &[Hook],
    rank: u32,
    point: Point,
    id: &str,
) -> Option<impl std::future::Future<Output = ()>> {
    let h = find(hooks, rank, point, id)?;
    let tag = format!("{}-{}", rank, point.name());
    let _ = std::fs::write(h.dir.join(format!("held-{tag}")), b"");
    if point == Point::Joined {
        return None;
    }
    let release = h.dir.join(format!("release-{tag}"));
    tracing::warn!(rank, point = point.name(), id, "test hook: holding");
    Some(async move {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !release.exists() && Instant::now() < deadline {
            actix_rt::time::sleep(Duration::from_millis(10)).await;
        }
    })
}

/// If a hook matches, marks it held and returns a function that blocks the
/// calling thread until it is released (or for two minutes): for holds on
/// threads that are not the actor's (a transport's).
pub fn hold_blocking(
    hooks: &[Hook],
    rank: u32,
    point: Point,
    id: &str,
) -> Option<impl FnOnce() + Send + 'static> {
    let h = find(hooks, rank, point, id)?;
    let tag = format!("{}-{}", rank, point.name());
    let (held, release) = (
        h.dir.join(format!("held-{tag}")),
        h.dir.join(format!("release-{tag}")),
    );
    Some(move || {
        let _ = std::fs::write(held, b"");
        tracing::warn!(rank, point = point.name(), "test hook: holding");
        let deadline = Instant::now() + Duration::from_secs(120);
        while !release.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

/// The master's hold while it hands out the job's table, if a hook of
/// `rank` at `table` exists (its id is the number of ranks served first).
pub(crate) fn table_hold(hooks: &[Hook], rank: u32) -> Option<taskfold_transports::tcp::TableHold> {
    let h = hooks
        .iter()
        .find(|h| h.rank == rank && h.point == Point::Table)?;
    Some(taskfold_transports::tcp::TableHold {
        after: h.id.parse().ok()?,
        dir: h.dir.clone(),
    })
}
