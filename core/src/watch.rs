//! A rank's watch over its master: when the master counts as lost.
//!
//! The master pings every other rank every ping period. A rank declares
//! its master lost, once, when
//!
//! - its link to the master goes down (the process died: its sockets
//!   closed): at once; or
//! - it heard no ping for longer than the failure timeout (the master is
//!   stopped, hung, or its node unreachable without a reset). The watch
//!   is checked every ping period, so silence is decided at most one
//!   period after the timeout ran out: within `failure_timeout +
//!   ping_period` of the last ping heard.
//!
//! Time this rank itself did not run (stopped, or its thread not
//! scheduled) is not the master's silence: the pings sent meanwhile wait
//! unread in its socket. A check that comes more than two periods after
//! the one before discounts the gap beyond one period, so that a rank
//! resumed after a long stop reads what came meanwhile (perhaps the
//! notice that it was fenced) before it judges the master.
//!
//! [`MasterWatch`] is a pure state machine: the caller passes the time of
//! each event, so every rule is tested without a clock or a socket.

use std::time::{Duration, Instant};

/// The two settings the rule reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How often the master pings (and this rank checks).
    pub period: Duration,
    /// How long a silent master is still taken as alive.
    pub timeout: Duration,
}

impl Timing {
    /// The longest a live rank takes to declare a silent master lost,
    /// counted from the last ping it heard.
    pub fn silence_bound(&self) -> Duration {
        self.timeout + self.period
    }
}

/// Why the master counts as lost.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    /// No ping for this long (this rank's own absences discounted).
    #[error("no ping from the master for {} ms", .0.as_millis())]
    Silent(Duration),
    /// The link to the master went down.
    #[error("the link to the master went down: {0}")]
    LinkDown(String),
}

/// Where a rank stands with its master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MasterWatch {
    /// Alive: last heard at `heard` (moved later by this rank's own
    /// absences); the last check ran at `checked`.
    Heard {
        /// The last ping, as the rule counts it.
        heard: Instant,
        /// The last check.
        checked: Instant,
    },
    /// Declared lost (final).
    Lost(Lost),
}

impl MasterWatch {
    /// A watch started at `now` (the master counts as just heard).
    pub fn new(now: Instant) -> Self {
        MasterWatch::Heard {
            heard: now,
            checked: now,
        }
    }

    /// A ping came at `now`. Nothing changes once the master is lost.
    pub fn heard(&mut self, now: Instant) {
        if let MasterWatch::Heard { heard, .. } = self {
            *heard = (*heard).max(now);
        }
    }

    /// The periodic check at `now`: `Some` exactly once, when the silence
    /// exceeds the timeout.
    pub fn check(&mut self, now: Instant, timing: Timing) -> Option<Lost> {
        let MasterWatch::Heard { heard, checked } = self else {
            return None;
        };
        let gap = now.saturating_duration_since(*checked);
        if gap > timing.period * 2 {
            // This rank was not running: that time is not silence.
            *heard = (*heard + (gap - timing.period)).min(now);
        }
        *checked = (*checked).max(now);
        let silent = now.saturating_duration_since(*heard);
        if silent <= timing.timeout {
            return None;
        }
        let lost = Lost::Silent(silent);
        *self = MasterWatch::Lost(lost.clone());
        Some(lost)
    }

    /// The link to the master went down: `Some` unless it was lost
    /// already.
    pub fn link_down(&mut self, reason: &str) -> Option<Lost> {
        if self.is_lost() {
            return None;
        }
        let lost = Lost::LinkDown(reason.to_string());
        *self = MasterWatch::Lost(lost.clone());
        Some(lost)
    }

    /// When silence from now on would be declared at the latest (`None`
    /// once lost): the check after `heard + timeout`.
    pub fn deadline(&self, timing: Timing) -> Option<Instant> {
        match self {
            MasterWatch::Heard { heard, .. } => Some(*heard + timing.silence_bound()),
            MasterWatch::Lost(_) => None,
        }
    }

    /// True once the master was declared lost.
    pub fn is_lost(&self) -> bool {
        matches!(self, MasterWatch::Lost(_))
    }
}

#[cfg(test)]
mod tests;
