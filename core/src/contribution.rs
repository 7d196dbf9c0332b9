//! A rank's own part in one reduction, as a pure state machine.
//!
//! [`Contribution`] follows one rank's contribution from the moment the
//! application hands it over until the reduction ends here: serialising it,
//! keeping its original for recovery (a disk copy, an offer to the buddy,
//! or a same-node buddy's mapping of the buffer where it lies), the join,
//! the tasks this rank receives (fetch, fold, report), the master's
//! releases, and the end. The worker actor feeds it events (what happened)
//! and carries out the [`Action`]s it returns; it holds no I/O, buffers or
//! handles, so every rule is unit- and property-tested here.
//!
//! The rules it keeps:
//!
//! - The join is sent exactly once, and only once the original is safe as
//!   the durability asks: its disk copy written (or its write failed: a full
//!   disk is reported, not fatal) and, with [`Durability::Sync`], the
//!   buddy's answer to the offer (or no buddy left to offer it to).
//! - The contribution becomes *safe* (it survives this rank's death) at
//!   most once, and never goes back: at the join if a copy that outlives
//!   this process exists then ([`JoinFields::safe`]: the buddy's
//!   acknowledged replica, the disk copy written, or the standing copy
//!   named; always for the root, whose loss no copy recovers), else at the
//!   first release (its data was folded in), else at the end.
//! - The future is filled exactly once: by the release of an early member
//!   (`Join::early`), or at the end.
//! - An original whose place in the shared heap a buddy may view (offered
//!   in place, or standing in a same-node buddy's mapping) is never
//!   released for reuse after an abnormal end ([`End::Abandoned`]): the
//!   buddy may be recovering it from that very buffer.

mod outputs;

use crate::rankset::RankSet;
pub use crate::settings::Durability;
pub use outputs::{Action, Finish, JoinFields, Release, TaskCheck, TaskVerdict};

/// What does not change over a contribution's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// This rank is the reduction's root (it always receives, is never
    /// serialised, and keeps no original).
    pub root: bool,
    /// The copies the original gets.
    pub durability: Durability,
    /// The future completes once this member's data was folded in (its
    /// release), not when the reduction completes.
    pub early: bool,
    /// This rank's position in the group.
    pub index: usize,
    /// The group's size.
    pub members: usize,
    /// The job allows replacements: a member's death ends no reduction
    /// (its replacement is awaited), so the data a dead rank held folded
    /// in is folded in again from each live member's original.
    pub replaceable: bool,
}

/// Where the original's disk copy stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskCopy {
    /// None was attempted: a same-node buddy views the original in place.
    InMemory,
    /// Written (a file other ranks may map or read).
    Written,
    /// Its write failed, or its directory was emptied meanwhile.
    Missing,
}

/// A member keeping its original, before the join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keeping {
    /// Synchronous durability, a same-node buddy viewing the original in
    /// place: the first offer (of the heap place) is being made.
    OfferingInPlace,
    /// The disk copy is being written.
    Writing,
    /// The offer to the buddy is being made.
    Offering {
        /// The disk copy (named in the offer if written).
        copy: DiskCopy,
    },
    /// Synchronous durability: the buddy's answer is awaited.
    Awaiting {
        /// The buddy the original was offered to (global rank).
        buddy: u32,
        /// The disk copy.
        copy: DiskCopy,
    },
}

/// Where a task this rank receives stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskStep {
    /// Waiting to fetch (a test hook), or fetching the provider's data.
    Fetching,
    /// Folding the fetched data into this rank's value.
    Folding,
    /// Folded: the new data is being serialised and exposed, then reported.
    Reporting,
}

/// A joined contribution's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// A test hook holds tasks after the join: they are queued.
    Held,
    /// No task in progress.
    Ready,
    /// A task in progress.
    Task {
        /// The task's id.
        id: u64,
        /// Where it stands.
        step: TaskStep,
    },
}

/// How a contribution ended here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The reduction completed (the master's notice, or the root's last
    /// fold made its value whole).
    Completed,
    /// It failed with an error that ends it everywhere (the master's
    /// notice, or this rank could not serialise its data).
    Failed,
    /// This rank left it while it may go on elsewhere: fenced, master
    /// lost. A buddy may be recovering this rank's original.
    Abandoned,
}

/// The stage of a contribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Its data is being serialised and exposed (or a test hook holds it
    /// before that).
    Serialising,
    /// A member's original is being kept before the join.
    Keeping(Keeping),
    /// Announced to the master.
    Joined(Work),
    /// Ended here.
    Ended(End),
}

/// Where the original is kept, for what the end removes or keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// None (the root, durability off, not serialised yet).
    Nowhere,
    /// On the disk path: a disk copy was (or is being) written. `viewable`:
    /// the original's heap place was offered to a buddy anyway, which may
    /// view it.
    Disk {
        /// A buddy may view the original in place.
        viewable: bool,
    },
    /// In this rank's shared heap, where a same-node buddy views it: no
    /// disk copy.
    Heap,
}

impl Place {
    /// A buddy may view the original where it lies.
    fn viewable(self) -> bool {
        matches!(self, Place::Heap | Place::Disk { viewable: true })
    }
}

/// The future's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Future {
    Open,
    Filled,
}

/// Whether the contribution survives this rank's death.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    /// Not yet: this rank's death may lose it.
    Open,
    /// A copy that outlives this process exists, its data was folded in,
    /// the reduction ended, or this is the root.
    Closed,
}

/// This rank's part in one reduction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contribution {
    setup: Setup,
    phase: Phase,
    place: Place,
    future: Future,
    window: Window,
    /// Group positions whose originals this rank's data holds.
    path: RankSet,
}

impl Contribution {
    /// A contribution the application just handed over.
    pub fn new(setup: Setup) -> Self {
        Contribution {
            setup,
            phase: Phase::Serialising,
            place: Place::Nowhere,
            future: Future::Open,
            window: Window::Open,
            path: RankSet::single(setup.index),
        }
    }

    /// What does not change.
    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// The current stage.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Where the original is kept.
    pub fn place(&self) -> Place {
        self.place
    }

    /// The originals this rank's data holds.
    pub fn path(&self) -> &RankSet {
        &self.path
    }

    /// Whether this contribution survives this rank's death: the root
    /// (no copy recovers its loss, so there is nothing to wait for), a
    /// member whose join named a copy that outlives this process (the
    /// buddy's acknowledged replica, the disk copy, or a same-node buddy's
    /// standing copy), a member whose data was folded in and released, or
    /// one whose reduction ended here. Once true, it stays true.
    pub fn is_safe(&self) -> bool {
        self.window == Window::Closed
    }

    /// The join was sent (and the reduction did not end here).
    pub fn joined(&self) -> bool {
        matches!(self.phase, Phase::Joined(_))
    }

    /// Whether the join waits for the buddy's answer.
    pub fn waits_for_buddy(&self) -> bool {
        self.setup.durability == Durability::Sync
    }

    /// The buddy whose answer the join awaits.
    pub fn awaited_buddy(&self) -> Option<u32> {
        match self.phase {
            Phase::Keeping(Keeping::Awaiting { buddy, .. }) => Some(buddy),
            _ => None,
        }
    }

    /// Whether an original is kept: a member with durability on.
    pub fn keeps_original(&self) -> bool {
        !self.setup.root && self.setup.durability != Durability::Off
    }

    /// Whether the member holds its original until the reduction ends:
    /// with copies ([`Contribution::keeps_original`]), or without them
    /// where replacements are allowed, in memory only (a rank that died
    /// holding it folded in makes the master ask for it again). Without
    /// either, a death that loses data ends the reduction, and the first
    /// fold may go into the original's own bytes.
    pub fn holds_original(&self) -> bool {
        self.keeps_original() || (!self.setup.root && self.setup.replaceable)
    }

    /// The first serialisation ended: the data (and, if one is kept, the
    /// original) is exposed. `in_place`: the buddy on this node that views
    /// this rank's shared heap, if the original lies there.
    pub fn serialised(&mut self, in_place: Option<u32>) -> Action {
        if self.phase != Phase::Serialising {
            return Action::Nothing;
        }
        if !self.keeps_original() {
            return self.join(None, None, false);
        }
        match (in_place, self.setup.durability) {
            (Some(buddy), Durability::Async) => {
                // The buddy's mapping keeps this very buffer if this process
                // dies: no disk copy, no offer; the join names it.
                self.place = Place::Heap;
                self.join(None, Some(buddy), false)
            }
            (Some(_), _) => {
                self.place = Place::Heap;
                self.phase = Phase::Keeping(Keeping::OfferingInPlace);
                Action::Offer {
                    file: false,
                    awaited: true,
                }
            }
            (None, _) => {
                self.place = Place::Disk { viewable: false };
                self.phase = Phase::Keeping(Keeping::Writing);
                Action::WriteDisk
            }
        }
    }

    /// The disk copy's write ended: `copy` says whether the file exists.
    pub fn disk_written(&mut self, copy: bool) -> Action {
        if self.phase != Phase::Keeping(Keeping::Writing) {
            return Action::Nothing;
        }
        let copy = if copy {
            DiskCopy::Written
        } else {
            DiskCopy::Missing
        };
        self.phase = Phase::Keeping(Keeping::Offering { copy });
        Action::Offer {
            file: copy == DiskCopy::Written,
            awaited: self.waits_for_buddy(),
        }
    }

    /// The offer was made: `to`, the buddy it went to (`None`: no buddy
    /// left, or it could not be sent); `heap`, the original's place in the
    /// heap was named (the buddy may view it).
    pub fn offered(&mut self, to: Option<u32>, heap: bool) -> Action {
        // `None`: the first offer of an original kept in place.
        let copy = match self.phase {
            Phase::Keeping(Keeping::OfferingInPlace) => None,
            Phase::Keeping(Keeping::Offering { copy }) => Some(copy),
            _ => return Action::Nothing,
        };
        if heap {
            if let Place::Disk { viewable } = &mut self.place {
                *viewable = true;
            }
        }
        let Some(copy) = copy else {
            return match to {
                Some(buddy) => {
                    self.phase = Phase::Keeping(Keeping::Awaiting {
                        buddy,
                        copy: DiskCopy::InMemory,
                    });
                    Action::AwaitBuddy { in_memory: true }
                }
                None => {
                    // The buddy cannot be told: a disk copy after all. Its
                    // place in the heap was offered: it stays viewable.
                    self.place = Place::Disk { viewable: true };
                    self.phase = Phase::Keeping(Keeping::Writing);
                    Action::WriteDisk
                }
            };
        };
        match to {
            Some(buddy) if self.waits_for_buddy() => {
                self.phase = Phase::Keeping(Keeping::Awaiting { buddy, copy });
                Action::AwaitBuddy { in_memory: false }
            }
            _ => self.join(None, None, copy == DiskCopy::Written),
        }
    }

    /// The buddy `from` answered an offer: stored (`ok`) or refused.
    pub fn buddy_answered(&mut self, from: u32, ok: bool) -> Action {
        let Phase::Keeping(Keeping::Awaiting { buddy, copy }) = self.phase else {
            return Action::Nothing;
        };
        if buddy != from {
            return Action::Nothing;
        }
        let replica = ok.then_some(buddy);
        self.join(replica, None, copy == DiskCopy::Written)
    }

    /// The master declared `rank` failed: if the join awaited its answer,
    /// the original is offered to the next buddy.
    pub fn buddy_failed(&mut self, rank: u32) -> Action {
        let Phase::Keeping(Keeping::Awaiting { buddy, copy }) = self.phase else {
            return Action::Nothing;
        };
        if buddy != rank {
            return Action::Nothing;
        }
        self.phase = Phase::Keeping(Keeping::Offering { copy });
        Action::Offer {
            file: copy == DiskCopy::Written,
            awaited: true,
        }
    }

    fn join(&mut self, replica: Option<u32>, standing: Option<u32>, disk: bool) -> Action {
        self.phase = Phase::Joined(Work::Ready);
        // A copy outside this process (the buddy's, the disk's, or the
        // buddy's mapping of this rank's heap) lets the master recover the
        // original once this rank dies; the root needs none.
        let safe = self.setup.root
            || (self.keeps_original() && (replica.is_some() || standing.is_some() || disk));
        if safe {
            self.window = Window::Closed;
        }
        Action::Join(JoinFields {
            replica,
            standing,
            disk,
            safe,
        })
    }

    /// A test hook holds tasks after the join: they queue until
    /// [`Contribution::resume_tasks`].
    pub fn hold_tasks(&mut self) {
        if self.phase == Phase::Joined(Work::Ready) {
            self.phase = Phase::Joined(Work::Held);
        }
    }

    /// The hook let go: the queued tasks are handed in again.
    pub fn resume_tasks(&mut self) {
        if self.phase == Phase::Joined(Work::Held) {
            self.phase = Phase::Joined(Work::Ready);
        }
    }

    /// A task arrived from the master. An accepted task becomes the
    /// current one (the master gives a rank one task at a time; a later one
    /// replaces it, and the earlier fetch's data is then dropped).
    pub fn task_arrived(&mut self, t: TaskCheck<'_>) -> TaskVerdict {
        let Phase::Joined(work) = self.phase else {
            // Tasks go to joined ranks only.
            return TaskVerdict::Unknown;
        };
        if work == Work::Held {
            return TaskVerdict::Queue;
        }
        if !t.receiver_path.is_disjoint(t.provider_path) {
            return TaskVerdict::Overlap;
        }
        let holds = if t.restore {
            *t.receiver_path == RankSet::single(self.setup.index)
        } else {
            self.path == *t.receiver_path && t.has_value
        };
        if !holds {
            return TaskVerdict::Unknown;
        }
        self.phase = Phase::Joined(Work::Task {
            id: t.id,
            step: TaskStep::Fetching,
        });
        TaskVerdict::Start
    }

    /// Task `id`'s data arrived: true if it is the current task's fetch
    /// (then it folds next); false if that fetch was cancelled or replaced
    /// meanwhile (its data must be dropped: the task was settled).
    pub fn fetched(&mut self, id: u64) -> bool {
        let current = Phase::Joined(Work::Task {
            id,
            step: TaskStep::Fetching,
        });
        if self.phase != current {
            return false;
        }
        self.phase = Phase::Joined(Work::Task {
            id,
            step: TaskStep::Folding,
        });
        true
    }

    /// Task `id` reloaded this rank's own original: the value holds it alone.
    pub fn restored(&mut self, id: u64) {
        if matches!(self.phase, Phase::Joined(Work::Task { id: i, .. }) if i == id) {
            self.path = RankSet::single(self.setup.index);
        }
    }

    /// Task `id` ended without a fold (refused, cancelled, failed fetch or
    /// fold): the master is told and reschedules it.
    pub fn task_failed(&mut self, id: u64) {
        if matches!(self.phase, Phase::Joined(Work::Task { id: i, .. }) if i == id) {
            self.phase = Phase::Joined(Work::Ready);
        }
    }

    /// Task `id`'s fold succeeded: the value now also holds
    /// `provider_path` (whatever the state: the value folded it), and the
    /// new data is to be serialised and reported.
    pub fn folded(&mut self, id: u64, provider_path: &RankSet) {
        if matches!(self.phase, Phase::Ended(_)) {
            return;
        }
        self.path = self.path.union(provider_path);
        if let Phase::Joined(_) = self.phase {
            self.phase = Phase::Joined(Work::Task {
                id,
                step: TaskStep::Reporting,
            });
        }
    }

    /// Task `id`'s new data is exposed and reported to the master. Returns
    /// whether this is the root and its value is whole: it then ends the
    /// reduction itself ([`Contribution::end`] with [`End::Completed`]).
    pub fn reported(&mut self, id: u64) -> bool {
        let current = Phase::Joined(Work::Task {
            id,
            step: TaskStep::Reporting,
        });
        if self.phase == current {
            self.phase = Phase::Joined(Work::Ready);
        }
        !matches!(self.phase, Phase::Ended(_))
            && self.setup.root
            && self.path.is_full(self.setup.members)
    }

    /// The master released this rank's data (another rank folded it).
    pub fn released(&mut self) -> Release {
        if let Phase::Ended(_) = self.phase {
            return Release {
                drop_value: false,
                fill: false,
                safe: false,
            };
        }
        let fill = self.setup.early && self.future == Future::Open;
        if fill {
            self.future = Future::Filled;
        }
        // Folded into another rank's data, which the master tracks from
        // now on: this rank's own death no longer loses it (a later loss
        // of that rank is recovered as its own durability allows).
        let safe = self.joined() && self.window == Window::Open;
        if safe {
            self.window = Window::Closed;
        }
        Release {
            drop_value: self.path.len() > 1,
            fill,
            safe,
        }
    }

    /// The contribution ends here; `None` if it had ended already.
    pub fn end(&mut self, how: End) -> Option<Finish> {
        if let Phase::Ended(_) = self.phase {
            return None;
        }
        self.phase = Phase::Ended(how);
        self.window = Window::Closed;
        let fill = self.future == Future::Open;
        self.future = Future::Filled;
        Some(Finish {
            fill,
            remove_disk: self.setup.durability != Durability::Off && self.place != Place::Heap,
            strand: how == End::Abandoned && self.place.viewable(),
        })
    }
}

#[cfg(test)]
mod tests;
