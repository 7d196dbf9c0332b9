//! What the application asks of its rank's runtime: the one channel from
//! the application's threads ([`crate::Runtime`], its futures, the
//! collectives, the global restart's entry point) to the actors. The
//! router ([`crate::router`]) receives each command and hands it to the
//! actor that owns it.
//!
//! A leaf: it names the messages of the actors it reaches and nothing
//! else, so the application's side and the actors' side never need each
//! other's modules.

/// What application threads ask of the runtime (over a flume channel).
pub(crate) enum Command {
    Start(crate::worker::StartReduce),
    Finalize(crate::worker::FinalizeReq),
    Barrier(crate::worker::BarrierReq),
    MasterStats(flume::Sender<crate::master::MasterStats>),
    /// The application is at its re-init entry point (global restart).
    ReinitReady {
        epoch: Option<u32>,
        held: Vec<u64>,
    },
    /// The application returned from its re-init entry point in this
    /// epoch (global restart), for good.
    LeaveReinit(u32),
    LocalStats(flume::Sender<crate::perf::LocalStats>),
    /// A checkpoint that followed these results' handovers is durable
    /// (see `crate::results`).
    ReleaseResults(Vec<u64>),
    /// This rank holds a spread's value (see `crate::spread`).
    Share(crate::spread::Share),
    /// This rank wants a spread's value.
    Ask(crate::spread::Ask),
    /// This source cannot serve its spread's value.
    Gone(crate::spread::Gone),
    Stop,
}
