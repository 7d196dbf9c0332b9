//! The bootstrap's pure rules.
use super::{reachable, replaces_registered, Entry, Hello};
use super::{Role, NONCE_LEN};
use std::net::SocketAddr;

fn hello(rank: u32, incarnation: u32) -> Hello {
    Hello {
        version: crate::version::VERSION,
        role: Role::Register,
        job: 1,
        rank,
        size: 4,
        addr: None,
        node: 0,
        nonce: [0; NONCE_LEN],
        incarnation,
        mac: false,
    }
}

#[test]
fn a_replacement_of_a_registered_rank_waits_for_the_job_to_run() {
    let at = |incarnation| Entry {
        addr: "127.0.0.1:4000".parse().expect("address"),
        node: 0,
        incarnation,
        dead: false,
    };
    let table = [Some(at(0)), Some(at(0)), None, Some(at(1))];
    // Rank 1 registered and died: its replacement asks once the job runs.
    assert!(replaces_registered(0, &hello(1, 1), &table));
    // A rank not registered yet registers as itself, whatever its
    // incarnation; a second start of a registered one is refused; so
    // is an incarnation not newer than the one registered, or a claim
    // to be the master's rank.
    assert!(!replaces_registered(0, &hello(2, 1), &table));
    assert!(!replaces_registered(0, &hello(1, 0), &table));
    assert!(!replaces_registered(0, &hello(3, 1), &table));
    assert!(!replaces_registered(0, &hello(0, 1), &table));
}

#[test]
fn a_concrete_address_is_kept_and_a_wildcard_is_replaced() {
    let a: SocketAddr = "127.0.0.5:4000".parse().expect("address");
    assert_eq!(reachable(a), a);
    let w: SocketAddr = "0.0.0.0:4000".parse().expect("address");
    let r = reachable(w);
    assert!(!r.ip().is_unspecified(), "{r}");
    assert_eq!(r.port(), 4000);
}
