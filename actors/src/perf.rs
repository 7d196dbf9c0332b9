//! The performance counter (every rank): timings of this rank's tasks.
//!
//! Each finished task's time also rides on its ready message to the master,
//! which keeps the table behind the "faster rank" rule
//! ([`taskfold_core::perf::PerfTable`]); this actor keeps the local view and
//! feeds the metrics. A crash loses only these counters.

use actix::prelude::*;

/// The performance counter of one rank.
pub struct PerformanceCounter {
    rank: String,
    tasks: u64,
    bytes: u64,
    nanos: u64,
}

impl PerformanceCounter {
    pub(crate) fn new(rank: u32) -> Self {
        PerformanceCounter {
            rank: rank.to_string(),
            tasks: 0,
            bytes: 0,
            nanos: 0,
        }
    }
}

impl Actor for PerformanceCounter {
    type Context = Context<Self>;
}

/// A task of this rank finished: fetch + fold took `nanos` for `bytes`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct TaskTimed {
    pub(crate) nanos: u64,
    pub(crate) bytes: u64,
}

impl Handler<TaskTimed> for PerformanceCounter {
    type Result = ();

    fn handle(&mut self, m: TaskTimed, _: &mut Context<Self>) {
        self.tasks += 1;
        self.bytes += m.bytes;
        self.nanos += m.nanos;
        let rank = self.rank.clone();
        metrics::counter!(crate::metrics::TASKS, "rank" => rank.clone()).increment(1);
        metrics::counter!(crate::metrics::BYTES_FETCHED, "rank" => rank.clone()).increment(m.bytes);
        metrics::histogram!(crate::metrics::TASK_SECONDS, "rank" => rank)
            .record(m.nanos as f64 * 1e-9);
    }
}

/// This rank's task counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalStats {
    /// Tasks executed (as receiver).
    pub tasks: u64,
    /// Bytes fetched by those tasks.
    pub bytes_fetched: u64,
    /// Total fetch + fold time, nanoseconds.
    pub task_nanos: u64,
    /// Barriers whose release this rank's application threads read on the
    /// master's notice board, before the master's message came (see
    /// [`crate::Config::notice_board`]).
    pub barriers_by_board: u64,
    /// Futures of this rank (a member other than the root, waiting for the
    /// result) that read their reduction's completion on the master's
    /// notice board, before the master's message came.
    pub reductions_by_board: u64,
}

/// Asks for [`LocalStats`].
#[derive(Message)]
#[rtype(result = "LocalStats")]
pub(crate) struct GetLocalStats;

impl Handler<GetLocalStats> for PerformanceCounter {
    type Result = MessageResult<GetLocalStats>;

    fn handle(&mut self, _: GetLocalStats, _: &mut Context<Self>) -> Self::Result {
        MessageResult(LocalStats {
            tasks: self.tasks,
            bytes_fetched: self.bytes,
            task_nanos: self.nanos,
            barriers_by_board: 0,
            reductions_by_board: 0,
        })
    }
}
