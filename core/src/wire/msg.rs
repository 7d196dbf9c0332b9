//! The control messages.

use super::failure::{Failure, FoldFailure};
use crate::rankset::RankSet;
use rkyv::{Archive, Deserialize, Serialize};

/// Every control message of the protocol.
#[derive(Clone, Debug, PartialEq, Archive, Serialize, Deserialize)]
pub enum Msg {
    /// Worker → master: the sender's original of a reduction is ready
    /// (its first message of that reduction).
    Join(Joining),
    /// Worker → master: the sender finished a task; its data now holds the
    /// originals of `path`.
    TaskDone(TaskDone),
    /// Master → worker: fetch the provider's data and fold it into yours.
    Task(Task),
    /// Worker → master: a task could not be carried out.
    TaskFailed(TaskFailed),
    /// Master → provider: your data for `key` was consumed; drop it.
    Release {
        /// The reduction.
        key: u64,
    },
    /// Master → every participant: the reduction ended.
    Complete {
        /// The reduction.
        key: u64,
        /// `None` on success (the root holds the result), else the error.
        error: Option<Failure>,
        /// The master's number of this completion, increasing over the job
        /// (across takeovers too); `None` for any other notice. A buddy
        /// drops its copies of `key` that an owner offered before seeing a
        /// completion with this number or a later one; an owner's offer
        /// for the next use of `key` names the last number it saw
        /// (`ReplicaOffer::after`), so that copy survives a notice that
        /// reaches the buddy after it (see the book's Architecture
        /// chapter, Copies of a reused key).
        number: Option<u64>,
    },
    /// Master → every rank: `rank` was declared failed and is fenced.
    RankFailed {
        /// The failed rank.
        rank: u32,
        /// Its process that failed (a notice about an older one than a
        /// rank knows is stale: see `taskfold_core::membership`).
        incarnation: u32,
    },
    /// Master → rank: liveness probe.
    Ping {
        /// Sequence number echoed by the pong.
        seq: u64,
    },
    /// Rank → master: answer to a ping.
    Pong {
        /// The ping's sequence number.
        seq: u64,
    },
    /// Rank → master: this rank is shutting down (a barrier, like
    /// `MPI_Finalize`: ranks keep serving data until every rank got here).
    Finalize,
    /// Master → rank: every live rank reached finalize.
    FinalizeAck,
    /// Rank → master: this rank reached barrier number `seq` (barriers are
    /// numbered in call order on every rank).
    Barrier {
        /// The barrier's number.
        seq: u64,
        /// The rank's application thread reads the release on the master's
        /// notice board: it needs no `BarrierDone` for it (a failure still
        /// comes as one).
        board: bool,
    },
    /// Master → every rank that reached barrier `seq`: every rank reached
    /// it (`error: None`), or a rank of the job was declared failed, which
    /// no barrier can wait for ([`Failure::RanksLost`]).
    BarrierDone {
        /// The barrier's number.
        seq: u64,
        /// `None` once every rank reached it.
        error: Option<Failure>,
    },
    /// Master → every rank, once at start: where the master's notice
    /// board lies (`taskfold_transports::board`). A rank on the master's
    /// node maps it and waits there for released barriers and completed
    /// reductions; any other rank ignores it. Every notice is also sent as
    /// a message.
    Board {
        /// Where the board lies, as only the transports' board module
        /// reads it.
        at: Locator,
    },
    /// Owner → buddy: fetch my original of `key` and keep a copy. Also
    /// master → buddy, on behalf of an owner that died with a standing
    /// copy ([`Joining::standing`]).
    ReplicaOffer {
        /// The reduction.
        key: u64,
        /// The original's owner.
        owner: u32,
        /// Bytes of the replica buffer.
        len: u64,
        /// Its checksum.
        crc: u32,
        /// The owner's node token (0 if unknown).
        node: u64,
        /// The owner's disk copy of the same buffer, if written: a buddy on
        /// the same node (same token) may map it instead of copying.
        file: Option<String>,
        /// Where the original lies in the owner's shared memory, if it
        /// does: a buddy on the same node may keep a view of it there, with
        /// no request to the owner, which keeps it unchanged until the
        /// reduction ends (and forever if it ends abnormally there).
        heap: Option<Locator>,
        /// A place in the owner's shared heap when `heap` is not given (the
        /// owner's data, say): a buddy on the same node maps that heap now,
        /// once, ahead of the originals it will view there, so that it can
        /// still read one offered just before the owner died.
        warm: Option<Locator>,
        /// Whether the owner wants to hear that the copy is stored (a
        /// refusal is always answered): not when its join does not wait
        /// for the copy and it already knows its buddy is on its node.
        wants_ack: bool,
        /// The replica buffer itself (`len` bytes, checksum `crc`), carried
        /// with the offer when it is small and the buddy is not known to be
        /// on the owner's node: the buddy keeps it without a get, which
        /// would cost a round trip between nodes per original.
        data: Option<Vec<u8>>,
        /// The last completion number of `key` the offerer saw
        /// ([`Msg::Complete::number`]; 0 if none): the copy belongs to a
        /// later use of `key` than that completion, and outlives its
        /// notice at the buddy.
        after: u64,
    },
    /// Buddy → owner: the copy is stored (`ok`), or refused (store full).
    ReplicaAck {
        /// The reduction.
        key: u64,
        /// The original's owner.
        owner: u32,
        /// True if stored.
        ok: bool,
        /// The buddy is on the owner's node (same node token) and maps the
        /// owner's shared heap: the owner's later originals in that heap
        /// need neither a disk copy nor an offer to outlive its process
        /// (the buddy's mapping keeps them: [`Joining::standing`]).
        same_node: bool,
    },
    /// Buddy → master: `holder` keeps a copy of `owner`'s original (`ok`),
    /// or refused to (`!ok`: store full, or the original could not be
    /// read). A reduction held for the buddy's answer about a dead owner's
    /// standing copy ([`Joining::standing`]) goes on once this arrives.
    Replicated {
        /// The reduction.
        key: u64,
        /// The original's owner.
        owner: u32,
        /// True if the copy is kept.
        ok: bool,
    },
    /// Launcher → master: a rank's process exited.
    RankExited {
        /// The rank.
        rank: u32,
        /// Exit code, or -1 if killed by a signal.
        code: i32,
        /// The signal that killed it, or 0.
        signal: i32,
        /// Which process of the rank it was (0: started with the job): a
        /// report of a process that was replaced since is stale.
        incarnation: u32,
    },
    /// Rank → the standby that took over from a dead master: what this
    /// rank holds, once every task the dead master gave it has ended (see
    /// [`crate::failover`]).
    Rejoin(Rejoin),
    /// Master → every live rank: `rank` died and its replacement, process
    /// incarnation `incarnation`, asks to join; it listens at `addr` (the
    /// transport's own encoding of its address). Each rank lets the
    /// replacement in on its transport, fencing every older incarnation,
    /// and answers [`Msg::Readmitted`]; the master lets the replacement
    /// start only once every live rank did, so that no rank meets it
    /// before knowing of it.
    Respawned {
        /// The rank replaced.
        rank: u32,
        /// The replacement's incarnation (1 for the first).
        incarnation: u32,
        /// Where the replacement listens (opaque here).
        addr: Vec<u8>,
        /// The replacement's node (a spare may run elsewhere than the
        /// process it replaces).
        node: u64,
    },
    /// Master → every live rank (global restart): a rank was replaced;
    /// the job rolls back to epoch `epoch`. Every live reduction and
    /// barrier ends with `ReduceError::Reinit`, and each rank's
    /// application unwinds to its re-init entry point, where it answers
    /// [`Msg::ReinitReady`].
    Reinit {
        /// The new epoch.
        epoch: u32,
    },
    /// Rank → master: this rank's application is at its re-init entry
    /// point for `epoch` (`None`: a replacement, which knows no epoch),
    /// and the checkpoint versions it holds (the master counts the first
    /// `taskfold_core::reinit::MAX_HELD`).
    ReinitReady {
        /// The epoch it unwound for.
        epoch: Option<u32>,
        /// The checkpoint versions it holds, newest first.
        held: Vec<u64>,
    },
    /// Master → every live rank: every rank is at its entry point; go on
    /// from checkpoint `version`, the newest every rank holds (`None`:
    /// from the start).
    ReinitGo {
        /// The epoch.
        epoch: u32,
        /// The version to resume from.
        version: Option<u64>,
    },
    /// Rank → master (global restart): this rank's application returned
    /// from its re-init entry point in `epoch` and will not come back to
    /// it. Answered with [`Msg::ReinitLeft`], unless a rollback began
    /// first: then the rank's [`Msg::Reinit`] notice is on its way, and it
    /// meets the others instead.
    LeaveReinit {
        /// The epoch the rank's application finished in.
        epoch: u32,
    },
    /// Master → rank: its [`Msg::LeaveReinit`] was taken: from now on no
    /// death rolls the job back (a replacement redoes its own work, as
    /// under local restart).
    ReinitLeft {
        /// The epoch of the leave.
        epoch: u32,
    },
    /// Rank → master: the replacement of `rank`, incarnation
    /// `incarnation`, is let in on this rank's transport.
    Readmitted {
        /// The rank replaced.
        rank: u32,
        /// Its replacement's incarnation.
        incarnation: u32,
    },
    /// Rank ↔ rank: multilevel checkpoints between ranks (L2 copies, L3
    /// shards and parity, a restarted rank's queries; see
    /// [`super::checkpoint`]).
    Checkpoint(super::checkpoint::CheckpointMsg),
    /// Root ↔ buddy, root ↔ master: a root's result kept for its
    /// replacement (see [`super::results`]).
    Results(super::results::ResultMsg),
    /// Member ↔ coordinator (the master's rank): an allreduce's result or
    /// a broadcast's value going to every member (see [`super::spread`]).
    Spread(super::spread::SpreadMsg),
}

/// A rank's report to a new master ([`Msg::Rejoin`]). `Default` is the
/// report of a rank that holds nothing (rank 0, epoch 0).
#[derive(Clone, Debug, Default, PartialEq, Archive, Serialize, Deserialize)]
pub struct Rejoin {
    /// The sender (global rank).
    pub rank: u32,
    /// The master the sender declared lost.
    pub lost: u32,
    /// Every live reduction the sender had joined under the dead master.
    pub holding: Vec<Held>,
    /// The copies of other ranks' originals the sender keeps: `(key,
    /// owner)`.
    pub copies: Vec<(u64, u32)>,
    /// Reductions that recently ended at the sender, with their error (a
    /// member that missed the dead master's notice is told by the new one).
    pub ended: Vec<(u64, Option<Failure>)>,
    /// The barriers the sender waits in.
    pub barriers: Vec<u64>,
    /// The highest barrier released at the sender (0: none).
    pub passed: u64,
    /// The sender's finalize was sent.
    pub finalized: bool,
    /// The master took the sender's leave of its re-init entry point
    /// ([`Msg::ReinitLeft`]): no death may roll the job back.
    pub left: bool,
    /// The global restart's epoch the sender last heard of (a new master
    /// numbers its rollbacks after every rank's).
    pub epoch: u32,
    /// The roots' results the sender keeps, `(key, root)`: the new master
    /// records them, for the roots' replacements.
    pub results: Vec<(u64, u32)>,
    /// Of those, the second copies it made from a holder's once the root
    /// died (`ResultMsg::Relay`), `(key, root)`: recorded after every
    /// report's first copies.
    pub relayed: Vec<(u64, u32)>,
    /// The incarnation of every rank as the sender knows it: the new
    /// master tells it of the replacements it missed (their notices died
    /// with the master that sent them).
    pub incarnations: Vec<u32>,
}

/// One reduction in a [`Rejoin`].
#[derive(Clone, Debug, PartialEq, Archive, Serialize, Deserialize)]
pub struct Held {
    /// The sender's join, as it was sent (its `direct` is where its data
    /// lies now).
    pub joining: Joining,
    /// The group positions folded into the sender's data.
    pub path: RankSet,
    /// Whether the sender still holds that data.
    pub has_value: bool,
}

/// A rank's first message of a reduction: its original is ready, as the
/// single-original path of its group position.
#[derive(Clone, Debug, PartialEq, Archive, Serialize, Deserialize)]
pub struct Joining {
    /// The reduction ([`crate::ReductionKey`]).
    pub key: u64,
    /// The sender (global rank).
    pub rank: u32,
    /// What the sender says about the reduction.
    pub join: Join,
    /// With synchronous durability: the buddy that acknowledged a copy of
    /// the sender's original.
    pub replica: Option<u32>,
    /// The sender's original lies in its shared heap, which its buddy on
    /// the same node maps (it said so when it stored an earlier original
    /// there): that mapping is the second copy, and no offer goes to the
    /// buddy. If the sender dies while its original is still needed, the
    /// master offers the original to that buddy on the sender's behalf
    /// ([`Msg::ReplicaOffer`] from the master) and holds the reduction until
    /// the buddy answers ([`Msg::Replicated`]).
    pub standing: Option<Standing>,
    /// Where a receiver on the sender's node can read the sender's data in
    /// place, without asking the sender (see [`Locator`]).
    pub direct: Option<Locator>,
}

/// A finished task: the receiver's data now holds `path`.
#[derive(Clone, Debug, PartialEq, Archive, Serialize, Deserialize)]
pub struct TaskDone {
    /// The reduction ([`crate::ReductionKey`]).
    pub key: u64,
    /// The sender, the task's receiver (global rank).
    pub rank: u32,
    /// The task's id.
    pub task_id: u64,
    /// Group positions whose originals are folded into the sender's data.
    pub path: RankSet,
    /// Wall time of fetch + fold, in nanoseconds (feeds the performance
    /// counter).
    pub nanos: u64,
    /// Bytes fetched.
    pub bytes: u64,
    /// Where a receiver on the sender's node can read the sender's new
    /// data in place (see [`Locator`]).
    pub direct: Option<Locator>,
}

/// A copy of a rank's original that its buddy on the same node holds
/// without being offered it: the buddy maps the rank's shared heap, where
/// the original lies unchanged until the reduction ends (see
/// [`Joining::standing`]). The fields are those of the offer the master makes
/// on the rank's behalf if it dies.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Standing {
    /// The buddy (global rank).
    pub buddy: u32,
    /// The tag in its header (an original kept in memory carries a tag
    /// instead of a checksum).
    pub crc: u32,
    /// Bytes of the replica buffer (header included).
    pub len: u64,
    /// The sender's node token.
    pub node: u64,
    /// Where the replica buffer lies in the sender's shared memory.
    pub heap: Locator,
}

/// Bytes of a [`Locator`].
pub const LOCATOR_LEN: usize = 48;

/// Where a rank's data lies in memory that a receiver on the same node
/// reads in place, without a request to its owner: a one-sided get through
/// shared memory. The owner keeps the bytes unchanged until the master
/// releases them (the fold that consumed them was reported), or the
/// reduction ends.
///
/// Opaque to the protocol: only the transports' same-node module makes and
/// reads it (`taskfold_transports::same_node`). Untrusted like every field
/// of a message: the receiver reads only what it can check is on its node,
/// in the memory the locator names.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Locator(pub [u8; LOCATOR_LEN]);

impl Locator {
    /// A locator holding `words` (each a little-endian integer's bytes at
    /// its offset), zero elsewhere. What the words mean is its reader's.
    ///
    /// # Panics
    /// If a word does not fit (a caller's broken layout, not a peer's
    /// input).
    pub fn from_words(words: &[(usize, &[u8])]) -> Locator {
        let mut b = [0u8; LOCATOR_LEN];
        for &(at, w) in words {
            b[at..at + w.len()].copy_from_slice(w);
        }
        Locator(b)
    }

    /// The little-endian `u64` at byte `at` (at most `LOCATOR_LEN - 8`).
    pub fn u64_at(&self, at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.0[at..at + 8]);
        u64::from_le_bytes(w)
    }

    /// The little-endian `u32` at byte `at` (at most `LOCATOR_LEN - 4`).
    pub fn u32_at(&self, at: usize) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&self.0[at..at + 4]);
        u32::from_le_bytes(w)
    }
}

/// What a rank says about a reduction when it joins it.
#[derive(Clone, Debug, PartialEq, Archive, Serialize, Deserialize)]
pub struct Join {
    /// The user's id.
    pub id: String,
    /// Global ranks of the group, sorted.
    pub group: Vec<u32>,
    /// Global rank of the root.
    pub root: u32,
    /// Tag of the value's type.
    pub type_tag: u64,
    /// The value's shape, if it has one.
    pub shape: Option<u64>,
    /// The directory where this rank keeps its replica files, if other ranks
    /// may be able to read it (same node, or a shared file system): a dead
    /// rank's original can then be read from its disk copy.
    pub disk: Option<String>,
    /// This member's future completes once its data was folded in (it is
    /// not the root): the master tells it so with a release even when that
    /// data is its single original.
    pub early: bool,
}

/// A task `(receiver, P_r, provider, P_p)`, sent to the receiver.
#[derive(Clone, Debug, PartialEq, Archive, Serialize, Deserialize)]
pub struct Task {
    /// The reduction.
    pub key: u64,
    /// Unique per reduction.
    pub task_id: u64,
    /// Global rank to fetch from.
    pub provider: u32,
    /// The provider's path.
    pub provider_path: RankSet,
    /// The receiver's path before the fold.
    pub receiver_path: RankSet,
    /// The receiver must first reload its own original (it re-enters the
    /// reduction after a failure).
    pub restore: bool,
    /// Where the provider's data is.
    pub source: DataSource,
    /// With [`DataSource::Data`]: where a receiver on the provider's node
    /// reads it in place, as the provider announced it.
    pub direct: Option<Locator>,
    /// Further providers, all on the receiver's node, whose data it reads
    /// in place and folds in the same task (a small reduction's root
    /// gathering its node's data); empty otherwise. One it cannot read is
    /// left out of its report, and the master schedules it again.
    pub more: Vec<Gathered>,
}

/// A further provider of a task, read in place on the receiver's node.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Gathered {
    /// Global rank of the provider.
    pub provider: u32,
    /// The provider's path.
    pub path: RankSet,
    /// Where its data lies, as the provider announced it.
    pub direct: Locator,
}

/// Where a task's receiver fetches the provider's data.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum DataSource {
    /// The provider's intermediate data.
    Data,
    /// The provider's own original (the provider is alive).
    Original,
    /// A dead provider's original, from the replica `holder` keeps.
    Replica {
        /// The rank holding the replica.
        holder: u32,
    },
    /// A dead provider's original, from its own disk copy in `dir` (readable
    /// when the receiver shares the node or a file system with it).
    Disk {
        /// The dead rank's replica directory.
        dir: String,
    },
}

/// A task that failed.
#[derive(Clone, Debug, PartialEq, Archive, Serialize, Deserialize)]
pub struct TaskFailed {
    /// The reduction.
    pub key: u64,
    /// The task.
    pub task_id: u64,
    /// What went wrong.
    pub reason: TaskFailure,
}

/// Why a task failed.
#[derive(Clone, Debug, PartialEq, Archive, Serialize, Deserialize)]
pub enum TaskFailure {
    /// The fold refused the data: the reduction cannot succeed.
    Fold(FoldFailure),
    /// The provider could not be reached.
    Fetch {
        /// What the transport said.
        reason: String,
        /// True if the link to the provider is down (it is probably dead).
        peer_down: bool,
    },
    /// The receiver has no data for this reduction (a protocol error).
    Unknown,
}
