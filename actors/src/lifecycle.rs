//! Where this process stands after failures of the job (Reinit++'s NEW,
//! RESTARTED and REINITED), and the failure events the application hears
//! without polling. See the book's chapter Surviving failures of the
//! application.

use std::sync::{Arc, Mutex};

/// What this process is, as far as failures go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Started with the job, and no rank has been replaced since.
    New,
    /// A replacement of a dead process of this rank (its `incarnation`,
    /// 1 for the first replacement): it should restore its state from a
    /// checkpoint and redo the work lost since.
    Restarted {
        /// This process's incarnation.
        incarnation: u32,
    },
    /// A survivor told that `replaced` ranks were replaced since it
    /// started (the most recent last in [`Recovery::events`]).
    Reinited {
        /// Replacements let in since this process started.
        replaced: u32,
    },
}

/// A failure event of the job, as this rank hears it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryEvent {
    /// The master declared `rank` failed.
    RankFailed {
        /// The dead rank.
        rank: u32,
    },
    /// A replacement of `rank`, process `incarnation`, joined the job.
    Respawned {
        /// The rank replaced.
        rank: u32,
        /// The replacement's incarnation.
        incarnation: u32,
    },
}

/// Events kept for an application that does not read them, at most: the
/// oldest is dropped beyond.
const KEPT: usize = 1024;

/// The lifecycle and event channel shared by the runtime and its actors.
#[derive(Clone, Debug)]
pub(crate) struct Recovery {
    state: Arc<Mutex<Lifecycle>>,
    tx: flume::Sender<RecoveryEvent>,
    rx: flume::Receiver<RecoveryEvent>,
}

impl Recovery {
    /// The lifecycle of a process of `incarnation`.
    pub(crate) fn new(incarnation: u32) -> Self {
        let (tx, rx) = flume::bounded(KEPT);
        let state = match incarnation {
            0 => Lifecycle::New,
            i => Lifecycle::Restarted { incarnation: i },
        };
        Recovery {
            state: Arc::new(Mutex::new(state)),
            tx,
            rx,
        }
    }

    /// Where this process stands now.
    pub(crate) fn lifecycle(&self) -> Lifecycle {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The events, for the application.
    pub(crate) fn events(&self) -> flume::Receiver<RecoveryEvent> {
        self.rx.clone()
    }

    /// Records `ev`; a replacement makes a survivor `Reinited` (a
    /// replacement stays `Restarted`).
    pub(crate) fn heard(&self, ev: RecoveryEvent) {
        if let RecoveryEvent::Respawned { .. } = ev {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            *s = match *s {
                Lifecycle::New => Lifecycle::Reinited { replaced: 1 },
                Lifecycle::Reinited { replaced } => Lifecycle::Reinited {
                    replaced: replaced + 1,
                },
                restarted => restarted,
            };
        }
        if let Err(flume::TrySendError::Full(ev)) = self.tx.try_send(ev) {
            // Unread: the oldest goes.
            let _ = self.rx.try_recv();
            let _ = self.tx.try_send(ev);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_survivor_becomes_reinited_and_a_replacement_stays_restarted() {
        let survivor = Recovery::new(0);
        assert_eq!(survivor.lifecycle(), Lifecycle::New);
        survivor.heard(RecoveryEvent::RankFailed { rank: 2 });
        assert_eq!(survivor.lifecycle(), Lifecycle::New);
        let back = RecoveryEvent::Respawned {
            rank: 2,
            incarnation: 1,
        };
        survivor.heard(back);
        survivor.heard(back);
        assert_eq!(survivor.lifecycle(), Lifecycle::Reinited { replaced: 2 });
        let events: Vec<_> = survivor.events().try_iter().collect();
        assert_eq!(events.len(), 3);
        let replacement = Recovery::new(3);
        replacement.heard(back);
        assert_eq!(
            replacement.lifecycle(),
            Lifecycle::Restarted { incarnation: 3 }
        );
    }

    #[test]
    fn unread_events_keep_the_newest() {
        let r = Recovery::new(0);
        for rank in 0..(KEPT as u32 + 10) {
            r.heard(RecoveryEvent::RankFailed { rank });
        }
        let events: Vec<_> = r.events().try_iter().collect();
        assert_eq!(events.len(), KEPT);
        assert_eq!(
            events.last(),
            Some(&RecoveryEvent::RankFailed {
                rank: KEPT as u32 + 9
            })
        );
    }
}
