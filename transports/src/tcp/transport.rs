//! [`Transport`] for [`TcpTransport`]: the trait's calls, each handed to
//! the shared state the connection tasks serve (`peer::Shared`), the
//! gets (`get`), the replacements (`respawn`) and the spares (`spare`).

use super::*;

impl Transport for TcpTransport {
    fn rank(&self) -> Rank {
        Rank(self.shared.rank)
    }

    fn size(&self) -> u32 {
        self.shared.size
    }

    fn name(&self) -> &'static str {
        "tcp"
    }

    fn send(&self, to: Rank, frame: Bytes) -> Result<(), TransportError> {
        self.check_peer(to)?;
        link::check_frame(frame.len(), self.shared.max_frame)?;
        let s = &self.shared;
        if to.0 == s.rank {
            link::send_to_self(&s.events_tx, to, &frame);
            return Ok(());
        }
        let mut slot = s.slot(to.0);
        if s.is_closed() {
            return Err(TransportError::Closed);
        }
        if let Some(e) = slot.link.error(to.0) {
            return Err(e);
        }
        s.outgoing(&mut slot, to.0)
            .send(conn::OutFrame::Control(frame))
            .map_err(|_| TransportError::LinkDown {
                peer: to.0,
                reason: format!("connection to rank {} is closed", to.0),
            })
    }

    fn expose(&self, key: BufferKey, data: Bytes) {
        if !self.shared.is_closed() {
            self.shared.exposed.insert(key, data);
        }
    }

    fn withdraw(&self, key: BufferKey) -> Option<Bytes> {
        self.shared.exposed.remove(key)
    }

    /// From a same-node peer, a buffer of at least
    /// [`crate::same_node::MIN_LOAN`] bytes is a loan: a view of the
    /// owner's shared heap, or one copy by the kernel.
    fn get(&self, from: Rank, key: BufferKey) -> GetFuture {
        if let Err(e) = self.check_peer(from) {
            return Box::pin(async move { Err(e) });
        }
        if from.0 == self.shared.rank {
            let r = link::copy_exposed(&self.shared.exposed, from, key);
            return Box::pin(async move { r });
        }
        self.requested(from, key, true, u64::MAX, None)
    }

    /// Refuses a larger announced total before allocating anything, and
    /// drops the link to the peer that announced it.
    fn get_within(&self, from: Rank, key: BufferKey, max: u64) -> GetFuture {
        if self.check_peer(from).is_err() || from.0 == self.shared.rank {
            return crate::checked_within(self.get(from, key), from, max);
        }
        self.requested(from, key, true, max, None)
    }

    /// Streamed gets hand over each chunk as it is read (chunks are
    /// [`TcpConfig::chunk`] bytes of the owner's); a same-node loan, or a
    /// get from this rank, is one segment.
    fn get_segments(
        &self,
        from: Rank,
        key: BufferKey,
        sink: crate::SegmentSink,
    ) -> crate::SegmentsFuture {
        self.get_segments_within(from, key, u64::MAX, sink)
    }

    fn get_segments_within(
        &self,
        from: Rank,
        key: BufferKey,
        max: u64,
        sink: crate::SegmentSink,
    ) -> crate::SegmentsFuture {
        if self.check_peer(from).is_err() || from.0 == self.shared.rank {
            let f = crate::checked_within(self.get(from, key), from, max);
            return crate::one_segment(f, sink);
        }
        let f = self.requested(from, key, false, max, Some(sink));
        Box::pin(async move { f.await.map(|_| ()) })
    }

    fn events(&self) -> flume::Receiver<Event> {
        self.shared.events_rx.clone()
    }

    /// Graceful: flushes what is queued, says goodbye on every connection
    /// and waits (at most 2 s) for the peers to close their side, so that
    /// they report no failure. Blocking. A transport whose driver the
    /// caller runs is closed on it ([`Driven::close_on_driver`]);
    /// here it only says goodbye, without waiting for tasks that nothing
    /// may run any more.
    fn shutdown(&self) {
        if !say_goodbye(&self.shared) {
            return;
        }
        let deadline = Instant::now() + GOODBYE_WAIT;
        while !self.driven && self.shared.live_tasks() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Some(rt) = self.take_runtime() {
            rt.shutdown_background();
        }
        tracing::debug!(rank = self.shared.rank, "tcp transport shut down");
    }

    fn replaces(&self) -> bool {
        true
    }

    fn incarnation(&self) -> u32 {
        self.shared.incarnation
    }

    fn admit(&self, peer: Rank, incarnation: u32, dead: &[u32]) -> Result<(), TransportError> {
        self.check_peer(peer)?;
        respawn::admit(&self.shared, peer.0, incarnation, dead)
    }

    fn dead_at_join(&self) -> Vec<u32> {
        self.dead_at_join.clone()
    }

    fn refuse_replacement(&self, peer: Rank, incarnation: u32, reason: &str) {
        if peer.0 >= self.shared.size {
            return;
        }
        let shared = self.shared.clone();
        let reason = reason.to_string();
        self.shared.handle.spawn(async move {
            respawn::refuse_held(&shared, peer.0, incarnation, reason).await;
        });
    }

    fn readmit(&self, peer: Rank, incarnation: u32, addr: &[u8]) -> Result<(), TransportError> {
        self.check_peer(peer)?;
        if peer.0 == self.shared.rank {
            return Ok(());
        }
        let e = respawn::decode(addr, peer.0)?;
        self.shared.readmit(peer.0, incarnation, e.addr, e.node);
        Ok(())
    }

    fn address_of(&self, peer: Rank) -> Option<Vec<u8>> {
        let mut e = self.shared.table().into_iter().nth(peer.0 as usize)?;
        e.dead = false;
        Some(e.encode().to_vec())
    }

    /// Reads in place from same-node peers, through the heap mappings
    /// that its loans use too (none when loans are off).
    fn same_node(&self) -> Option<&SameNode> {
        Some(&self.shared.same)
    }

    fn nodes(&self) -> Option<&[u64]> {
        self.nodes.as_deref()
    }

    fn assign_spare(&self, peer: Rank, incarnation: u32) -> bool {
        peer.0 < self.shared.size && spare::assign(&self.shared, peer.0, incarnation)
    }

    fn spares_parked(&self) -> usize {
        self.shared.parked().len()
    }

    /// Every parked spare is dismissed, and a rendezvous file, if the job
    /// has one, says the job is over (the table kept beside it goes).
    fn job_over(&self) -> Result<(), TransportError> {
        spare::dismiss_all(&self.shared);
        if let (MasterAddr::Rendezvous(path), true) = (&self.rendezvous, self.shared.hosts_master())
        {
            super::bootstrap::started::remove(&self.rendezvous);
            rendezvous::write_over(path, self.shared.job).map_err(|e| {
                TransportError::Io(format!(
                    "writing the rendezvous file {}: {e}",
                    path.display()
                ))
            })?;
        }
        Ok(())
    }

    fn incarnations(&self) -> Vec<u32> {
        self.incarnations.clone()
    }

    fn master_rank(&self) -> Rank {
        Rank(self.master)
    }

    /// Takes the master's part: replacements and the launcher's reports
    /// are taken here from now on, and a rendezvous file, if the job has
    /// one, names this rank's address, so that replacements find it.
    fn become_master(&self) -> Result<(), TransportError> {
        self.shared.set_hosts_master();
        if let MasterAddr::Rendezvous(path) = &self.rendezvous {
            let public = bootstrap::reachable(self.listen_addr);
            rendezvous::write_rendezvous(path, self.shared.job, public, self.shared.rank).map_err(
                |e| {
                    TransportError::Io(format!(
                        "writing the rendezvous file {}: {e}",
                        path.display()
                    ))
                },
            )?;
        }
        Ok(())
    }

    fn driven(&self) -> Option<&dyn Driven> {
        self.driven.then_some(self as &dyn Driven)
    }
}
