//! Test hooks: hold a rank at an exact point of a reduction so that a test
//! can kill it there (DESIGN.md §2's three failure places, made
//! deterministic).
//!
//! `TASKFOLD_TEST_HOOK=RANK:POINT:ID:DIR[;...]`. When rank `RANK` reaches
//! `POINT` in reduction `ID`, it writes `DIR/held-RANK-POINT` and waits
//! (only that reduction waits; the rank keeps answering pings and serving
//! data) until `DIR/release-RANK-POINT` exists, at most two minutes.
//! Points: `before-join`, `disk-written` (the original is on the local disk;
//! its join and its buddy offer wait), `after-join` (its tasks wait),
//! `before-get`, `before-fold`, and `joined` (marks only, never holds).

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where a hook holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// Before the rank announces its contribution.
    BeforeJoin,
    /// The original was written to the rank's replica directory; its join
    /// and its offer to the buddy have not been sent (a rank killed here
    /// left nothing but its disk copy).
    DiskWritten,
    /// After it announced it: its tasks of that reduction wait.
    AfterJoin,
    /// A task arrived; before fetching the provider's data.
    BeforeGet,
    /// The data arrived; before folding it.
    BeforeFold,
    /// A streamed get handed over its first segment, which is being folded;
    /// the transport reads no more of it until released (held on the
    /// transport's thread).
    MidGet,
    /// The join was sent: only writes the marker, never holds (used by
    /// `taskfold bench faults` to time its kills).
    Joined,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::BeforeJoin => "before-join",
            Point::DiskWritten => "disk-written",
            Point::AfterJoin => "after-join",
            Point::BeforeGet => "before-get",
            Point::BeforeFold => "before-fold",
            Point::MidGet => "mid-get",
            Point::Joined => "joined",
        }
    }
}

/// One hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hook {
    /// The rank that holds.
    pub rank: u32,
    /// Where.
    pub point: Point,
    /// In which reduction.
    pub id: String,
    /// The marker directory.
    pub dir: PathBuf,
}

/// Parses `RANK:POINT:ID:DIR[;...]`; malformed entries are logged and skipped.
pub fn parse(s: &str) -> Vec<Hook> {
    s.split(';')
        .filter(|e| !e.trim().is_empty())
        .filter_map(|e| {
            let mut it = e.splitn(4, ':');
            let rank = it.next()?.trim().parse().ok()?;
            let point = match it.next()? {
                "before-join" => Point::BeforeJoin,
                "disk-written" => Point::DiskWritten,
                "after-join" => Point::AfterJoin,
                "before-get" => Point::BeforeGet,
                "before-fold" => Point::BeforeFold,
                "mid-get" => Point::MidGet,
                "joined" => Point::Joined,
                other => {
                    tracing::warn!("unknown test hook point {other:?}");
                    return None;
                }
            };
            let id = it.next()?.to_string();
            let dir = PathBuf::from(it.next()?);
            Some(Hook {
                rank,
                point,
                id,
                dir,
            })
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing() {
        let h = parse(
            "2:before-fold:check-0:/tmp/x;1:after-join:a:b:/c;bad;3:nowhere:x:/y;1:disk-written:f:/d",
        );
        assert_eq!(h.len(), 3);
        assert_eq!(h[0].point, Point::BeforeFold);
        assert_eq!(h[1].dir, PathBuf::from("b:/c"));
        assert_eq!(h[2].point, Point::DiskWritten);
        assert_eq!((h[2].rank, h[2].id.as_str()), (1, "f"));
    }
}
