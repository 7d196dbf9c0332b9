//! Spares at the master (`TASKFOLD_SPARES`; see the book's chapter
//! Surviving failures of the application): for each rank whose
//! replacement is awaited, the master sends a parked spare to take its
//! place ([`taskfold_transports::Transport::assign_spare`]); the spare
//! then asks to join as any replacement does. A spare that does not ask
//! in time (it died on its way) is followed by another.
//!
//! What a crash of the master loses here: nothing the spares need; they
//! park again with the standby that takes over.

use super::Master;
use actix::prelude::*;
use std::time::{Duration, Instant};
use taskfold_core::respawn::Slot;
use taskfold_core::Rank;

/// How long a called spare has to ask to join before another is called:
/// starting its transport and registering takes milliseconds.
const SPARE_WAIT: Duration = Duration::from_secs(5);

/// How often the master looks again for a parked spare when none was
/// parked at a death (spares still starting, or parking again with a
/// standby), until the rank's wait runs out.
const SPARE_POLL: Duration = Duration::from_millis(100);

/// The spare called for `rank`, dead at `died`, should have asked by now.
#[derive(Message)]
#[rtype(result = "()")]
struct SpareDue {
    rank: u32,
    died: Instant,
}

impl Master {
    /// Calls a parked spare to take `rank`'s place (dead at `died`), if
    /// the job has spares: at once, or as soon as one parks (within the
    /// rank's wait). False if no replacement can come: every spare was
    /// called already, and the launcher starts none.
    pub(super) fn call_spare(&mut self, rank: u32, died: Instant) -> bool {
        if !self.respawn.spares {
            return true;
        }
        let Some(&Slot::Awaited(dead)) = self.respawn.book.slot(rank) else {
            return true;
        };
        let t = self.out.transport();
        let again = if t.assign_spare(Rank(rank), dead + 1) {
            self.respawn.spares_called += 1;
            SPARE_WAIT
        } else if self.respawn.spares_called >= self.respawn.spares_total && !self.respawn.launcher
        {
            tracing::warn!(
                rank,
                "every spare was called: none is left to take the dead rank's place"
            );
            return false;
        } else {
            tracing::info!(rank, "no spare is parked yet to take the dead rank's place");
            SPARE_POLL
        };
        if let Some(me) = &self.me {
            let me = me.clone();
            actix::spawn(async move {
                actix_rt::time::sleep(again).await;
                me.do_send(SpareDue { rank, died });
            });
        }
        true
    }
}

impl Handler<SpareDue> for Master {
    type Result = ();

    fn handle(&mut self, m: SpareDue, _: &mut Context<Self>) {
        let still = matches!(self.respawn.book.slot(m.rank), Some(Slot::Awaited(_)));
        if !still || self.respawn.died.get(&m.rank) != Some(&m.died) {
            return; // it asked, or its wait is over
        }
        tracing::warn!(
            rank = m.rank,
            "the spare called did not ask to join: calling another"
        );
        if !self.call_spare(m.rank, m.died) {
            self.respawn.died.remove(&m.rank);
            if self.respawn.book.give_up(m.rank) {
                self.left_rollback(m.rank);
                self.give_up_reductions(m.rank);
            }
        }
    }
}
