//! The TCP sockets listening in this process's network namespace, asked
//! of the kernel through `sock_diag` netlink (`NETLINK_SOCK_DIAG`,
//! `inet_diag` with only the listening state requested).
//!
//! Why: `/proc/<pid>/net/tcp` lists a namespace's sockets by walking the
//! kernel's whole hash of established connections, every namespace's,
//! however few of them listen: with 256 ranks on 16 simulated nodes
//! (about 65,000 sockets) those walks took a sixth of the job's CPU
//! (`benches/RESULTS.md`). Asked for listening sockets only, the kernel
//! walks only its listening hash. What this returns is a hint, like any
//! read of the tables: a proof still checks the named process's
//! descriptors for the socket's inode.

use socket2::{Domain, Protocol, Socket, Type};
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// `SOCK_DIAG_BY_FAMILY`, the request and answer type of `sock_diag`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST | NLM_F_DUMP`.
const DUMP_REQUEST: u16 = 0x1 | 0x300;
/// `NLMSG_ERROR`, `NLMSG_DONE`.
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// Bytes of a `nlmsghdr`.
const NLMSG_HDR: usize = 16;
/// `TCP_LISTEN`, as a bit of `idiag_states`.
const LISTEN_STATE: u32 = 1 << 10;
/// Bytes of an `inet_diag_msg` up to and including `idiag_inode`.
const DIAG_MSG: usize = 72;
/// Answer bytes read at most: a bound on what a dump may make this
/// process read (64 Ki listening sockets).
const MAX_ANSWER: usize = 64 << 10 << 7;

/// One listening socket: its local address and its inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Listener {
    pub(crate) addr: SocketAddr,
    pub(crate) inode: u64,
}

/// The TCP sockets listening in this network namespace, IPv4 then IPv6
/// (none of a family the kernel does not have).
pub(crate) fn listeners() -> io::Result<Vec<Listener>> {
    let mut out = dump(libc::AF_INET as u8)?;
    match dump(libc::AF_INET6 as u8) {
        Ok(v6) => out.extend(v6),
        // A kernel without IPv6.
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {}
        Err(e) => return Err(e),
    }
    Ok(out)
}

/// The inode of the TCP socket of this network namespace bound to
/// `local` and connected to `remote`, looked up by its addresses (no
/// walk of any table); `None` if there is none. An IPv4 pair is also
/// looked for as an IPv6 socket's, its addresses v4-mapped.
pub(crate) fn connection(local: SocketAddr, remote: SocketAddr) -> io::Result<Option<u64>> {
    let mapped = |a: SocketAddr| match a.ip() {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
        IpAddr::V6(_) => a,
    };
    let mut pairs = vec![(local, remote)];
    if local.is_ipv4() && remote.is_ipv4() {
        pairs.push((mapped(local), mapped(remote)));
    } else if local.is_ipv4() != remote.is_ipv4() {
        return Ok(None);
    }
    for (l, r) in pairs {
        let family = if l.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        let sock = netlink()?;
        sock.send(&exact(family as u8, l, r))?;
        let mut buf = vec![0u8; 4 << 10];
        let n = (&sock).read(&mut buf)?;
        let mut found = Vec::new();
        match answers(&buf[..n], &mut found) {
            Ok(_) => {
                if let Some(x) = found.first() {
                    return Ok(Some(x.inode));
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// A `sock_diag` socket, its reads bounded in time.
fn netlink() -> io::Result<Socket> {
    let sock = Socket::new(
        Domain::from(libc::AF_NETLINK),
        Type::RAW,
        Some(Protocol::from(libc::NETLINK_SOCK_DIAG)),
    )?;
    sock.set_read_timeout(Some(Duration::from_secs(2)))?;
    Ok(sock)
}

/// The listening TCP sockets of one address family.
fn dump(family: u8) -> io::Result<Vec<Listener>> {
    let sock = netlink()?;
    // An unconnected netlink socket sends to the kernel.
    sock.send(&request(family))?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 32 << 10];
    let mut total = 0;
    loop {
        let n = (&sock).read(&mut buf)?;
        total += n;
        if n == 0 || total > MAX_ANSWER {
            return Err(io::Error::other("sock_diag: the answer did not end"));
        }
        if answers(&buf[..n], &mut out)? {
            return Ok(out);
        }
    }
}

/// A dump request of `family`'s listening TCP sockets: a `nlmsghdr`,
/// then an `inet_diag_req_v2` (its socket id left zero).
fn request(family: u8) -> Vec<u8> {
    let len = (NLMSG_HDR + 56) as u32;
    let mut r = Vec::with_capacity(len as usize);
    r.extend_from_slice(&len.to_ne_bytes());
    r.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    r.extend_from_slice(&DUMP_REQUEST.to_ne_bytes());
    r.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    r.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
    r.extend_from_slice(&[family, libc::IPPROTO_TCP as u8, 0, 0]);
    r.extend_from_slice(&LISTEN_STATE.to_ne_bytes());
    r.resize(len as usize, 0);
    r
}

/// A request for the one TCP socket of `family` bound to `local` and
/// connected to `remote` (any state, any cookie).
fn exact(family: u8, local: SocketAddr, remote: SocketAddr) -> Vec<u8> {
    let mut r = request(family);
    // A lookup, not a dump.
    r[6..8].copy_from_slice(&0x1u16.to_ne_bytes());
    r[NLMSG_HDR + 4..NLMSG_HDR + 8].copy_from_slice(&u32::MAX.to_ne_bytes());
    let id = NLMSG_HDR + 8;
    r[id..id + 2].copy_from_slice(&local.port().to_be_bytes());
    r[id + 2..id + 4].copy_from_slice(&remote.port().to_be_bytes());
    let octets = |a: SocketAddr| match a.ip() {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    let (src, dst) = (octets(local), octets(remote));
    r[id + 4..id + 4 + src.len()].copy_from_slice(&src);
    r[id + 20..id + 20 + dst.len()].copy_from_slice(&dst);
    // No cookie: INET_DIAG_NOCOOKIE.
    r[id + 40..id + 48].copy_from_slice(&[0xff; 8]);
    r
}

/// Reads the messages of one datagram into `out`; true once the dump's
/// end came. A message that does not fit is an error, never read past.
fn answers(mut data: &[u8], out: &mut Vec<Listener>) -> io::Result<bool> {
    let bad = || io::Error::other("sock_diag: a malformed answer");
    while data.len() >= NLMSG_HDR {
        let len = u32::from_ne_bytes(data[0..4].try_into().map_err(|_| bad())?) as usize;
        let kind = u16::from_ne_bytes(data[4..6].try_into().map_err(|_| bad())?);
        if len < NLMSG_HDR || len > data.len() {
            return Err(bad());
        }
        let body = &data[NLMSG_HDR..len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = body
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .map(i32::from_ne_bytes)
                    .ok_or_else(bad)?;
                return Err(io::Error::from_raw_os_error(-errno));
            }
            SOCK_DIAG_BY_FAMILY => out.push(listener(body).ok_or_else(bad)?),
            _ => {}
        }
        // Messages are aligned to 4 bytes.
        let next = (len + 3) & !3;
        data = data.get(next..).unwrap_or(&[]);
    }
    Ok(false)
}

/// One `inet_diag_msg`: family, state, then the socket id (ports and
/// addresses in network order), then queues, uid and inode.
fn listener(m: &[u8]) -> Option<Listener> {
    if m.len() < DIAG_MSG {
        return None;
    }
    let port = u16::from_be_bytes([m[4], m[5]]);
    let ip = match i32::from(m[0]) {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(m[8], m[9], m[10], m[11])),
        libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&m[8..24]).ok()?)),
        _ => return None,
    };
    let inode = u32::from_ne_bytes(m[68..72].try_into().ok()?);
    Some(Listener {
        addr: SocketAddr::new(ip, port),
        inode: u64::from(inode),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_of_this_process_is_listed_with_its_inode() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let all = listeners().unwrap();
        let found = all.iter().find(|x| x.addr == addr).expect("listed");
        // The same inode as the kernel's text tables give.
        let table = super::super::listening(std::process::id()).unwrap();
        assert_eq!(super::super::listener_at(&table, addr), Some(found.inode));
        assert!(super::super::holds_inode(std::process::id(), found.inode).unwrap());
        // A connection is not listed: only listening sockets are asked for.
        let c = std::net::TcpStream::connect(addr).unwrap();
        let local = c.local_addr().unwrap();
        assert!(listeners().unwrap().iter().all(|x| x.addr != local));
    }

    #[test]
    fn a_connection_is_found_by_its_addresses() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (local, remote) = (c.local_addr().unwrap(), c.peer_addr().unwrap());
        let inode = connection(local, remote).unwrap().expect("found");
        assert!(super::super::holds_inode(std::process::id(), inode).unwrap());
        // The other end is another socket.
        let other = connection(remote, local).unwrap().expect("found");
        assert_ne!(other, inode);
        // A pair nobody holds.
        let nobody = SocketAddr::new(local.ip(), 1);
        assert_eq!(connection(nobody, remote).unwrap(), None);
    }

    #[test]
    fn malformed_answers_are_errors_not_reads_past_their_end() {
        let mut out = Vec::new();
        // A length beyond the datagram.
        let mut m = 200u32.to_ne_bytes().to_vec();
        m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m.resize(NLMSG_HDR + 8, 0);
        assert!(answers(&m, &mut out).is_err());
        // A socket message too short for its fields.
        let mut m = ((NLMSG_HDR + 8) as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m.resize(NLMSG_HDR + 8, 0);
        assert!(answers(&m, &mut out).is_err());
        // The end of the dump.
        let mut m = (NLMSG_HDR as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        m.resize(NLMSG_HDR, 0);
        assert!(answers(&m, &mut out).unwrap());
        assert!(out.is_empty());
    }
}
