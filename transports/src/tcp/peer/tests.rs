//! The link state's transitions, without sockets.

use super::*;
use crate::tcp::{MasterAddr, TcpConfig};

fn shared() -> Arc<Shared> {
    let cfg = TcpConfig::new(0, 2, 1, MasterAddr::Addr(([127, 0, 0, 1], 1).into()));
    Arc::new(Shared::new(&cfg, Handle::current()))
}

fn next(s: &Shared) -> Event {
    s.events_rx.try_recv().expect("an event")
}

/// Our connection to a peer ends while the peer's connection to us
/// still holds frames it sent before it died: they are delivered, then
/// the link goes down, with the failure first seen.
#[tokio::test]
async fn frames_read_after_our_connection_broke_come_before_the_link_down() {
    let s = shared();
    s.slot(1).incoming = Some(Writer::new().0);
    s.link_lost(1, "our connection ended".into(), false);
    assert!(
        s.events_rx.is_empty(),
        "no LinkDown while the peer's frames are read"
    );
    assert!(matches!(s.slot(1).link, Link::Draining(_)));
    assert!(s.slot(1).link.error(1).is_some(), "nothing more is sent");
    s.deliver(1, Bytes::from_static(b"join"));
    s.link_lost(1, "the peer's connection ended".into(), true);
    match next(&s) {
        Event::Message { from, frame } => {
            assert_eq!((from, &frame[..]), (Rank(1), &b"join"[..]));
        }
        e => panic!("{e:?}"),
    }
    match next(&s) {
        Event::LinkDown { peer, reason } => {
            assert_eq!((peer, reason.as_str()), (Rank(1), "our connection ended"));
        }
        e => panic!("{e:?}"),
    }
    s.deliver(1, Bytes::from_static(b"late"));
    s.link_lost(1, "again".into(), true);
    assert!(s.events_rx.is_empty(), "nothing follows the LinkDown");
}

/// A peer that lives on with our connection to it broken is reported
/// down after the grace.
#[tokio::test(start_paused = true)]
async fn a_draining_link_goes_down_after_the_grace() {
    let s = shared();
    s.slot(1).incoming = Some(Writer::new().0);
    s.link_lost(1, "our connection ended".into(), false);
    tokio::time::sleep(DRAIN_GRACE / 2).await;
    assert!(s.events_rx.is_empty());
    tokio::time::sleep(DRAIN_GRACE).await;
    assert!(matches!(next(&s), Event::LinkDown { .. }));
    assert!(matches!(s.slot(1).link, Link::Down(_)));
}

/// Without a connection from the peer there is nothing to drain.
#[tokio::test]
async fn a_link_with_no_connection_from_the_peer_goes_down_at_once() {
    let s = shared();
    s.link_lost(1, "connect failed".into(), false);
    assert!(matches!(next(&s), Event::LinkDown { .. }));
}
