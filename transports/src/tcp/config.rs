//! A rank's TCP settings ([`TcpConfig`]) and where its master listens
//! ([`MasterAddr`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use taskfold_core::auth::JobAuth;

/// Where the master (rank 0) listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MasterAddr {
    /// A fixed address: rank 0 binds it, the others connect to it.
    Addr(SocketAddr),
    /// A file: rank 0 binds `bind_host:0` and writes its address there
    /// (atomically); the others poll the file until it names their job.
    Rendezvous(PathBuf),
    /// The launcher's key-value store: rank 0 binds `bind_host:0` and puts
    /// its address there; the others get it after the store's fence
    /// ([`crate::pmi`]).
    Store(Arc<crate::pmi::StoreMaster>),
}

/// Configuration of [`TcpTransport::start`].
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// This process's rank.
    pub rank: u32,
    /// Number of ranks in the job.
    pub size: u32,
    /// Job id; connections of another job are refused.
    pub job: u64,
    /// The job key every connection proves, both ways, first (the
    /// `handshake` module). [`TcpConfig::new`] leaves the job open
    /// ([`JobAuth::Insecure`], warned about at start); a runtime sets it
    /// from its settings ([`crate::auth::job_auth`]).
    pub auth: JobAuth,
    /// How to find the master.
    pub master: MasterAddr,
    /// Address listeners bind (port 0) and advertise; must be reachable by
    /// the other ranks (an unspecified address is replaced by the address
    /// the master sees). Default `127.0.0.1`.
    pub bind_host: IpAddr,
    /// Largest control frame, sent or received (at most `u32::MAX`).
    /// Default 64 MiB.
    pub max_frame: u64,
    /// Payload bytes per get response frame, rounded down to a multiple of
    /// 64 (a chunk never splits an array element). Default 1 MiB: a
    /// segmented get ([`Transport::get_segments`]) hands over a chunk at a
    /// time, so that the caller's fold of one overlaps the transfer of the
    /// next.
    pub chunk: usize,
    /// Largest buffer a get accepts (a peer announcing more is refused
    /// before anything is allocated, and its link dropped); a caller that
    /// knows the length asks for less ([`Transport::get_within`]).
    /// Default 64 GiB.
    pub max_get: u64,
    /// How long to wait for the master, and for all ranks to register, and
    /// to connect to a peer. Default 30 s.
    pub connect_timeout: Duration,
    /// Serve and ask for same-node loans (one `process_vm_readv` copy, or
    /// a view of the owner's shared heap, instead of a TCP stream), and
    /// read same-node peers' memory in place ([`Transport::same_node`];
    /// the libfabric transport's same-node reads follow this too).
    /// Default: on (`TASKFOLD_TCP_CMA=off` turns it off in a runtime's
    /// transport, see [`crate::select`]).
    pub loans: bool,
    /// Move each connection to a peer of this node off the socket after
    /// its handshake, onto a pair of shared-memory rings (see the book's
    /// Transports chapter): the same frames, in the same order, without
    /// the kernel's TCP paths. Default: on (`TASKFOLD_TCP_RINGS=off` turns
    /// it off in a runtime's transport, see [`crate::select`]). A
    /// connection stays on TCP if either side has it off.
    pub rings: bool,
    /// Threads of the transport's runtime (default 2,
    /// `TASKFOLD_TCP_THREADS`). On a node with more ranks than cores, one
    /// thread wakes fewer threads per message and single reductions get
    /// faster; two keep many concurrent reductions moving (see the book's
    /// Transports chapter for the measurements).
    ///
    /// 0: no thread of its own. The transport's tasks run on a
    /// single-threaded runtime that the caller takes with
    /// [`Driven::take_driver`] ([`Transport::driven`]) and runs on a thread
    /// of its own (the runtime's actors do: an incoming frame then wakes
    /// their thread alone), closing it with [`Driven::close_on_driver`]
    /// before that thread stops. Nothing moves until the caller runs it. Rank 0's
    /// bootstrap runs it itself while it waits for the ranks to register.
    pub threads: usize,
    /// This process's incarnation (default 0): `k > 0` registers it as the
    /// `k`-th replacement of its rank, which the master lets in only if
    /// that rank died and a replacement is expected ([`crate::Event::Replacement`]).
    pub incarnation: u32,
    /// Seal every frame after the handshake with a MAC (default false;
    /// `TASKFOLD_INTEGRITY=mac`): see `taskfold_core::auth::FrameMac`. Every
    /// rank of the job must agree; one that does not is refused after the
    /// handshake.
    pub integrity: bool,
    /// A test's hold of the master's bootstrap: `None` but in builds with
    /// test hooks, from `TASKFOLD_TEST_HOOK`'s `table` point.
    pub table_hold: Option<TableHold>,
}

/// Where the master holds its bootstrap, for a test to kill it there:
/// once it has handed the job's table to `after` ranks, it writes its
/// process id to `DIR/held-RANK-table` and waits (at most two minutes)
/// until `DIR/release-RANK-table` exists; then it hands the table to the
/// others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableHold {
    /// The ranks handed the table before the hold.
    pub after: usize,
    /// The marker directory.
    pub dir: std::path::PathBuf,
}

impl TcpConfig {
    /// A configuration with the defaults.
    pub fn new(rank: u32, size: u32, job: u64, master: MasterAddr) -> Self {
        TcpConfig {
            rank,
            size,
            job,
            auth: JobAuth::Insecure,
            master,
            bind_host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            max_frame: 64 << 20,
            chunk: 1 << 20,
            max_get: 64 << 30,
            connect_timeout: Duration::from_secs(30),
            loans: true,
            rings: true,
            threads: 2,
            incarnation: 0,
            integrity: false,
            table_hold: None,
        }
    }
}
