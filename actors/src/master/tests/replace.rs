//! Replacements let in by the master: who is told, who is waited for.
use super::*;
use crate::master::ReplacementIn;
use taskfold_core::respawn::Slot;
use taskfold_core::settings::RespawnConfig;

/// Asks the master where rank 3's replacement stands in its book.
#[derive(Message)]
#[rtype(result = "Option<Slot>")]
struct SlotOf3;

impl Handler<SlotOf3> for Master {
    type Result = Option<Slot>;

    fn handle(&mut self, _: SlotOf3, _: &mut Context<Self>) -> Option<Slot> {
        self.respawn.book.slot(3).cloned()
    }
}

/// A master of 4 ranks that expects one replacement.
fn replacing_master(ts: &[Arc<LoopbackTransport>]) -> Addr<Master> {
    let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
    let mut m = Master::new(4, Outbox::of(t), 1000);
    m.set_respawn(&RespawnConfig {
        budget: 1,
        ..RespawnConfig::default()
    });
    m.start()
}

/// The ranks told to let replacement `incarnation` of `rank` in.
fn told(ts: &[Arc<LoopbackTransport>], rank: u32, incarnation: u32) -> Vec<u32> {
    let mut to: Vec<u32> = sent(ts)
        .into_iter()
        .filter_map(|(to, m)| match m {
            Msg::Respawned {
                rank: r,
                incarnation: i,
                ..
            } if (r, i) == (rank, incarnation) => Some(to),
            _ => None,
        })
        .collect();
    to.sort_unstable();
    to
}

#[test]
fn a_rank_that_finalized_is_told_of_a_replacement_but_not_waited_for() {
    let (_hub, ts) = LoopbackHub::new(4);
    actix_rt::System::new().block_on(async move {
        let m = replacing_master(&ts);
        m.send(FinalizeIn { from: Rank(2) }).await.unwrap();
        down(&m, 3).await;
        settle().await;
        let _ = sent(&ts);
        m.send(ReplacementIn {
            peer: Rank(3),
            incarnation: 1,
            node: 0,
            addr: vec![4, 127, 0, 0, 1],
        })
        .await
        .unwrap();
        settle().await;
        // The master's own rank is told as any. Rank 2 still serves until
        // the job ends (copies, a takeover):
        // it would refuse the replacement as a stranger if not told.
        assert_eq!(told(&ts, 3, 1), vec![0, 1, 2]);
        assert!(
            matches!(m.send(SlotOf3).await.unwrap(), Some(Slot::Admitting { .. })),
            "rank 1 has not let it in"
        );
        // Rank 1's answer is the last one waited for: rank 2's never comes.
        m.send(ReadmittedIn {
            from: Rank(1),
            rank: 3,
            incarnation: 1,
        })
        .await
        .unwrap();
        settle().await;
        assert_eq!(
            m.send(SlotOf3).await.unwrap(),
            Some(Slot::Live(1)),
            "let in without rank 2's answer"
        );
    });
}
