//! This rank's view of the job's membership
//! ([`taskfold_core::membership::Membership`]): every rank's incarnation
//! and node, which ranks are dead or unreachable from here, and which rank
//! runs the master. One per rank, shared by every part of the runtime —
//! the router changes it as it hears the master's notices and its
//! transport's events, the master as it decides; the worker, the failure
//! detector, the standby rule and the checkpoint engine read it (see the
//! book's Architecture chapter, Membership).
//!
//! What a crash loses: nothing another rank needs. The master's view is
//! the job's (every notice comes from it); a standby that takes over
//! starts from its own view, which heard every notice the dead master
//! sent it.

use std::sync::{Arc, RwLock, RwLockReadGuard};
use taskfold_core::membership::{Change, Membership};
use taskfold_core::{Rank, RankSet};
use taskfold_transports::Transport;

/// A handle on this rank's membership view; its clones share it.
#[derive(Clone, Debug)]
pub(crate) struct View(Arc<RwLock<Membership>>);

impl View {
    /// The view `transport` joined with: every rank live, with the node
    /// and incarnation of the master's table, the master where it was.
    pub(crate) fn joined(transport: &dyn Transport) -> View {
        let size = transport.size() as usize;
        let nodes = transport
            .nodes()
            .map(<[u64]>::to_vec)
            .unwrap_or_else(|| vec![0; size]);
        let incarnations = transport.incarnations();
        let master = transport.master_rank().0;
        let mut m = Membership::new(&nodes, &incarnations, master);
        // A replacement: the deaths the master knew when it let it in.
        for rank in transport.dead_at_join() {
            let incarnation = m.incarnation(rank);
            m.apply(Change::Failed { rank, incarnation });
        }
        View(Arc::new(RwLock::new(m)))
    }

    /// Reads the view (briefly: every part of the runtime shares it).
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Membership> {
        // Every change is one call of `Membership::apply`: consistent
        // after a panic elsewhere.
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `c`; true if it changed the view.
    pub(crate) fn apply(&self, c: Change) -> bool {
        let changed = self.0.write().unwrap_or_else(|e| e.into_inner()).apply(c);
        if changed {
            tracing::debug!(change = ?c, "membership changed");
        }
        changed
    }

    /// The master declared `rank` failed, its current incarnation.
    pub(crate) fn failed(&self, rank: Rank) -> bool {
        let incarnation = self.read().incarnation(rank.0);
        self.apply(Change::Failed {
            rank: rank.0,
            incarnation,
        })
    }

    /// The rank that runs the master.
    pub(crate) fn master(&self) -> Rank {
        Rank(self.read().master())
    }

    /// Whether `rank` was declared failed.
    pub(crate) fn is_dead(&self, rank: u32) -> bool {
        self.read().is_dead(rank)
    }

    /// The ranks declared failed.
    pub(crate) fn dead(&self) -> RankSet {
        self.read().dead()
    }

    /// Every rank's node, if every rank's is known.
    pub(crate) fn nodes(&self) -> Option<Vec<u64>> {
        let nodes = self.read().nodes();
        nodes.iter().all(|&n| n != 0).then_some(nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::View;
    use bytes::Bytes;
    use taskfold_core::Rank;
    use taskfold_transports::{BufferKey, Event, GetFuture, Transport, TransportError};

    /// A replacement's transport as it joined a job of 4 ranks on two
    /// nodes: rank 1 is incarnation 2, rank 2 runs the master, and the
    /// master had declared rank 3 failed when it let this process in.
    struct Joined;

    impl Transport for Joined {
        fn rank(&self) -> Rank {
            Rank(1)
        }
        fn size(&self) -> u32 {
            4
        }
        fn name(&self) -> &'static str {
            "joined"
        }
        fn send(&self, _: Rank, _: Bytes) -> Result<(), TransportError> {
            Ok(())
        }
        fn expose(&self, _: BufferKey, _: Bytes) {}
        fn withdraw(&self, _: BufferKey) -> Option<Bytes> {
            None
        }
        fn get(&self, from: Rank, _: BufferKey) -> GetFuture {
            Box::pin(async move {
                Err(TransportError::LinkDown {
                    peer: from.0,
                    reason: "no data in this test".into(),
                })
            })
        }
        fn events(&self) -> flume::Receiver<Event> {
            flume::unbounded().1
        }
        fn shutdown(&self) {}
        fn nodes(&self) -> Option<&[u64]> {
            Some(&[7, 7, 9, 9])
        }
        fn incarnations(&self) -> Vec<u32> {
            vec![0, 2, 0, 1]
        }
        fn master_rank(&self) -> Rank {
            Rank(2)
        }
        fn dead_at_join(&self) -> Vec<u32> {
            vec![3]
        }
    }

    /// The view a replacement starts from is the master's when it let it
    /// in: incarnations, nodes, the master, and the deaths it had
    /// declared (each of the incarnation the table names).
    #[test]
    fn a_replacement_starts_from_the_masters_view_with_its_deaths() {
        let v = View::joined(&Joined);
        let m = v.read();
        assert_eq!(m.incarnations(), vec![0, 2, 0, 1]);
        assert_eq!((m.node(0), m.node(3)), (7, 9));
        assert_eq!(m.master(), 2);
        assert!(m.is_dead(3), "declared failed before the join");
        assert!(!(0..3).any(|r| m.is_dead(r)));
        drop(m);
        assert_eq!(v.dead().iter().collect::<Vec<_>>(), vec![3]);
        assert_eq!(v.nodes(), Some(vec![7, 7, 9, 9]));
    }
}
