//! Test hooks as data: `TASKFOLD_TEST_HOOK=RANK:POINT:ID:DIR[;...]`.
//!
//! When rank `RANK` reaches `POINT` in reduction `ID`, it writes
//! `DIR/held-RANK-POINT` and waits until `DIR/release-RANK-POINT` exists
//! (the runtime's `hooks` module does the holding). `ID` may not contain
//! `:` or `;`; `DIR` may contain `:` but not `;`.

use std::path::PathBuf;

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
    /// A task that gathers further providers arrived (instead of
    /// `before-get` for such a task): before any of their data is read.
    BeforeGather,
    /// A gathering task's data was read (the further providers' in place);
    /// before folding it (instead of `before-fold` for such a task).
    BeforeGatheredFold,
    /// A streamed get handed over its first segment, which is being folded;
    /// the transport reads no more of it until released (held on the
    /// transport's thread).
    MidGet,
    /// The join was sent: only writes the marker, never holds (used by
    /// `taskfold bench faults` to time its kills).
    Joined,
    /// The checkpoint writer is about to write version `ID` (held on the
    /// writer's thread: the application goes on).
    Checkpoint,
    /// An allreduce's root holds the result, or a broadcast's root its
    /// value, in spread `ID`: before it is exposed and announced.
    BeforeShare,
    /// A member of spread `ID` was told where to fetch the value: before
    /// it fetches.
    BeforeSpreadGet,
    /// The master's bootstrap has handed the job's table to `ID` ranks (a
    /// number) and not to the others yet (held on the bootstrap's thread;
    /// the marker holds the process id, as no pid file exists yet).
    Table,
}

/// Every point, in the order of a reduction.
pub const POINTS: [Point; 13] = [
    Point::BeforeJoin,
    Point::DiskWritten,
    Point::AfterJoin,
    Point::BeforeGet,
    Point::BeforeFold,
    Point::BeforeGather,
    Point::BeforeGatheredFold,
    Point::MidGet,
    Point::Joined,
    Point::Checkpoint,
    Point::BeforeShare,
    Point::BeforeSpreadGet,
    Point::Table,
];

impl Point {
    /// The point's name in `TASKFOLD_TEST_HOOK` and in marker file names.
    pub fn name(self) -> &'static str {
        match self {
            Point::BeforeJoin => "before-join",
            Point::DiskWritten => "disk-written",
            Point::AfterJoin => "after-join",
            Point::BeforeGet => "before-get",
            Point::BeforeFold => "before-fold",
            Point::BeforeGather => "before-gather",
            Point::BeforeGatheredFold => "before-gathered-fold",
            Point::MidGet => "mid-get",
            Point::Joined => "joined",
            Point::Checkpoint => "checkpoint",
            Point::BeforeShare => "before-share",
            Point::BeforeSpreadGet => "before-spread-get",
            Point::Table => "table",
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

/// What `TASKFOLD_TEST_HOOK` accepts (for error messages).
pub const EXPECTED: &str = "RANK:POINT:ID:DIR entries separated by `;`, POINT one of \
     before-join, disk-written, after-join, before-get, before-fold, before-gather, \
     before-gathered-fold, mid-get, joined, checkpoint, before-share, before-spread-get, table (its ID a number)";

/// Parses `RANK:POINT:ID:DIR[;...]` (empty entries are skipped); `None` if
/// any entry is malformed.
pub fn parse(s: &str) -> Option<Vec<Hook>> {
    s.split(';')
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut it = e.splitn(4, ':');
            let rank = super::values::parse_u64(it.next()?)?;
            let name = it.next()?;
            let point = POINTS.into_iter().find(|p| p.name() == name)?;
            let id = it.next()?.to_string();
            if point == Point::Table && id.parse::<usize>().is_err() {
                return None;
            }
            let dir = it.next().filter(|d| !d.is_empty())?;
            Some(Hook {
                rank: u32::try_from(rank).ok()?,
                point,
                id,
                dir: PathBuf::from(dir),
            })
        })
        .collect()
}

/// The text [`parse`] reads back (`None` if a hook cannot be written: an
/// id with `:` or `;`, a directory with `;` or not in UTF-8).
pub fn format(hooks: &[Hook]) -> Option<String> {
    let entries: Option<Vec<String>> = hooks
        .iter()
        .map(|h| {
            let dir = h.dir.to_str()?;
            let ok = !h.id.contains([':', ';']) && !dir.contains(';') && !dir.is_empty();
            ok.then(|| format!("{}:{}:{}:{}", h.rank, h.point.name(), h.id, dir))
        })
        .collect();
    Some(entries?.join(";"))
}
