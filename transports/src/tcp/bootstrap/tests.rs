//! The bootstrap's pure rules.
use super::{reachable, replaces_registered, started, Entry, Hello};
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

fn entry(port: u16, incarnation: u32) -> Entry {
    Entry {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        node: 7,
        incarnation,
        dead: false,
    }
}

#[test]
fn a_kept_table_is_believed_only_for_its_job_version_and_size() {
    let dir = crate::private::fresh_dir("tf-table-test-").expect("temporary directory");
    let at = super::MasterAddr::Rendezvous(dir.join("rendezvous"));
    let table = [entry(4000, 0), entry(4001, 0), entry(4002, 2)];
    started::write(&at, 0xab, 0, &table).expect("write the table");
    assert!(started::job_started(&at, 0xab, 3));
    // Another job's, or a table of another size, is none of this job's.
    assert!(!started::job_started(&at, 0xac, 3));
    assert!(!started::job_started(&at, 0xab, 4));
    let path = dir.join("rendezvous.table");
    let bytes = std::fs::read(&path).expect("read the table file");
    assert_eq!(started::parse(&bytes, 0xab, 3), Some((0, table.to_vec())));
    // Another protocol version, a master outside the job, a cut file.
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let other = text.replacen(&format!(" {} ", crate::version::VERSION), " 1 ", 1);
    assert_eq!(started::parse(other.as_bytes(), 0xab, 3), None);
    let outside = text.replacen("master=0", "master=3", 1);
    assert_eq!(started::parse(outside.as_bytes(), 0xab, 3), None);
    assert_eq!(started::parse(&bytes[..bytes.len() - 1], 0xab, 3), None);
    started::remove(&at);
    assert!(!started::job_started(&at, 0xab, 3));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rank_adopts_only_a_table_that_names_its_own_process() {
    let listen: SocketAddr = "127.0.0.1:4001".parse().expect("address");
    let wild: SocketAddr = "0.0.0.0:4001".parse().expect("address");
    assert!(started::names(&entry(4001, 0), listen, 7, 0));
    assert!(started::names(&entry(4001, 0), wild, 7, 0));
    // Another process: another port, node or incarnation, or one declared
    // failed.
    assert!(!started::names(&entry(4002, 0), listen, 7, 0));
    assert!(!started::names(&entry(4001, 0), listen, 8, 0));
    assert!(!started::names(&entry(4001, 1), listen, 7, 0));
    let dead = Entry {
        dead: true,
        ..entry(4001, 0)
    };
    assert!(!started::names(&dead, listen, 7, 0));
    let elsewhere: SocketAddr = "127.0.0.2:4001".parse().expect("address");
    assert!(!started::names(&entry(4001, 0), elsewhere, 7, 0));
}
