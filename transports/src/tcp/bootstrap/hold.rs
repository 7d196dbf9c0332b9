//! A test's hold of the master while it hands out the job's table
//! ([`crate::tcp::TableHold`]): the instant at which some ranks have the
//! table and the others do not, where a test kills the master.

use super::super::frame::Entry;
use super::super::TableHold;
use super::send_table;
use std::time::Duration;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// Longest hold.
const HOLD_MAX: Duration = Duration::from_secs(120);

/// Hands `table` to the first `hold.after` of `conns` (`master` runs the
/// job), then holds; returns the connections not served yet.
pub(super) async fn table_then_hold(
    hold: &TableHold,
    table: &[Entry],
    master: u32,
    mut conns: Vec<(OwnedReadHalf, OwnedWriteHalf)>,
) -> Vec<(OwnedReadHalf, OwnedWriteHalf)> {
    let rest = conns.split_off(hold.after.min(conns.len()));
    send_table(table, master, conns).await;
    let held = hold.dir.join(format!("held-{master}-table"));
    let release = hold.dir.join(format!("release-{master}-table"));
    let _ = std::fs::write(&held, std::process::id().to_string());
    tracing::warn!(after = hold.after, "test hook: holding the table");
    let deadline = tokio::time::Instant::now() + HOLD_MAX;
    while !release.exists() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rest
}
