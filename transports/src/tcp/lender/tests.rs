//! The check of a loan's pid against real sockets on 127.0.0.1 and real
//! processes.
use super::*;
use std::net::{TcpListener, TcpStream};

/// A connection on 127.0.0.1, both ends in this process: (caller, the
/// listener's end).
fn connection() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let caller = TcpStream::connect(l.local_addr().expect("address")).expect("connect");
    let (accepted, _) = l.accept().expect("accept");
    (caller, accepted)
}

/// Another process of this user, alive while the guard lives.
struct Other(std::process::Child);

impl Other {
    fn start() -> Other {
        Other(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("sleep"),
        )
    }
}

impl Drop for Other {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

#[test]
fn the_process_that_holds_the_other_end_is_found() {
    let (caller, _accepted) = connection();
    let (ours, theirs) = (caller.local_addr().unwrap(), caller.peer_addr().unwrap());
    let me = std::process::id();
    // The listener's end: local = the caller's remote, and the reverse.
    assert!(holds(me, theirs, ours).expect("readable tables"));
    // The caller's own end is not the other end.
    assert!(!holds(me, ours, SocketAddr::from(([127, 0, 0, 1], 1))).unwrap());
    let other = Other::start();
    assert!(!holds(other.0.id(), theirs, ours).expect("readable tables"));
}

#[test]
fn a_loan_naming_another_process_is_a_protocol_error() {
    let (caller, _accepted) = connection();
    let (ours, theirs) = (caller.local_addr().unwrap(), caller.peer_addr().unwrap());
    let other = Other::start();
    let rt = runtime();
    let mut lender = Lender::new(ours, theirs);
    let refused = rt.block_on(lender.check(u64::from(other.0.id())));
    assert!(
        matches!(&refused, Err(ReadError::Protocol(d)) if d.contains("does not hold")),
        "{refused:?}"
    );
    // A pid that fits no process, or no pid at all.
    assert!(rt.block_on(lender.check(u64::from(u32::MAX))).is_err());
    assert!(rt.block_on(lender.check(1 << 40)).is_err());
    // The holder passes, and then its pid alone.
    let me = u64::from(std::process::id());
    assert_eq!(rt.block_on(lender.check(me)).unwrap(), Verdict::Holder);
    assert_eq!(rt.block_on(lender.check(me)).unwrap(), Verdict::Holder);
    let other_after = rt.block_on(lender.check(u64::from(other.0.id())));
    assert!(
        matches!(&other_after, Err(ReadError::Protocol(d)) if d.contains("came from pid")),
        "{other_after:?}"
    );
}

#[test]
fn an_ipv6_loopback_connection_is_found_too() {
    let Ok(l) = TcpListener::bind("[::1]:0") else {
        return; // no IPv6 here
    };
    let caller = TcpStream::connect(l.local_addr().unwrap()).expect("connect");
    let (_accepted, _) = l.accept().expect("accept");
    let (ours, theirs) = (caller.local_addr().unwrap(), caller.peer_addr().unwrap());
    assert!(holds(std::process::id(), theirs, ours).expect("readable tables"));
}

#[test]
fn addresses_are_written_as_the_kernel_writes_them() {
    let a: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    let (v4, v6) = table_addr(a);
    // On a little-endian host 127.0.0.1 prints as 0100007F.
    if cfg!(target_endian = "little") {
        assert_eq!(v4, "0100007F:1F90");
        assert_eq!(v6, "0000000000000000FFFF00000100007F:1F90");
    }
}

#[test]
fn another_process_holding_the_other_end_is_found() {
    let (caller, accepted) = connection();
    let (ours, theirs) = (caller.local_addr().unwrap(), caller.peer_addr().unwrap());
    // The listener's end goes to another process (its standard input),
    // and leaves this one.
    let fd = std::os::fd::OwnedFd::from(accepted);
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .stdin(std::process::Stdio::from(fd))
        .spawn()
        .expect("sleep");
    let found = holds(child.id(), theirs, ours);
    let here = holds(std::process::id(), theirs, ours);
    let _ = child.kill();
    let _ = child.wait();
    assert!(found.expect("readable tables"), "the child holds it");
    assert!(!here.expect("readable tables"), "this process does not");
}

#[test]
fn the_process_that_listens_at_an_address_is_found() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("address");
    let me = std::process::id();
    assert!(listens(me, addr).expect("readable tables"));
    // A connected socket on that port is no listener, and another
    // process does not hold this one.
    let other = Other::start();
    assert!(!listens(other.0.id(), addr).expect("readable tables"));
    let (caller, _accepted) = connection();
    assert!(!listens(me, caller.local_addr().unwrap()).unwrap());
    // A wildcard listener is found at any address of its port.
    let any = TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = any.local_addr().unwrap().port();
    assert!(listens(me, SocketAddr::from(([127, 0, 0, 1], port))).unwrap());
}
