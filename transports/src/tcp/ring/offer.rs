//! Setting a connection's rings up: what the caller makes and offers,
//! and what the peer checks before it takes them (see the `ring` module).

use super::{map_len, Ends, Mapping, MAGIC, RING_CAP};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

// Ring 0 carries the caller's bytes to the peer, ring 1 the peer's back.

/// What a caller offers: its pid, the rings' capacity, and its descriptors
/// of the file and of the four `eventfd`s (ring 0's data and space bells,
/// then ring 1's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offer {
    pub pid: u32,
    pub cap: u64,
    pub fds: [i32; 5],
}

/// Bytes of an encoded [`Offer`].
pub(crate) const OFFER_LEN: u32 = crate::tcp::frame::RINGS_OFFER_LEN;
const _: () = assert!(OFFER_LEN == 4 + 8 + 5 * 4);

impl Offer {
    /// Little-endian: pid, capacity, the five descriptors.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(OFFER_LEN as usize);
        v.extend_from_slice(&self.pid.to_le_bytes());
        v.extend_from_slice(&self.cap.to_le_bytes());
        for fd in self.fds {
            v.extend_from_slice(&fd.to_le_bytes());
        }
        v
    }

    /// The offer in `b`, or why not.
    pub(crate) fn decode(b: &[u8]) -> Result<Offer, String> {
        if b.len() != OFFER_LEN as usize {
            return Err(format!("a ring offer of {} bytes", b.len()));
        }
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let mut cap = [0u8; 8];
        cap.copy_from_slice(&b[4..12]);
        let mut fds = [0i32; 5];
        for (i, fd) in fds.iter_mut().enumerate() {
            *fd = u32_at(12 + 4 * i) as i32;
        }
        Ok(Offer {
            pid: u32_at(0),
            cap: u64::from_le_bytes(cap),
            fds,
        })
    }
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The caller's side before the peer answered: the rings made, what to
/// offer, and the descriptors kept until the ends are built.
pub(crate) struct Made {
    map: Arc<Mapping>,
    file: OwnedFd,
    bells: [OwnedFd; 4],
}

impl Made {
    /// Makes the file and the bells (see the module documentation).
    pub(crate) fn new(cap: u64) -> io::Result<Made> {
        // SAFETY: a constant, NUL-terminated name; the result is checked.
        let raw = unsafe {
            libc::memfd_create(
                c"taskfold-rings".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just opened and own.
        let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        file.set_len(map_len(cap))?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor we own; the result is checked.
        if unsafe { libc::fcntl(raw, libc::F_ADD_SEALS, seals) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let map = Mapping::new(raw, map_len(cap), cap)?;
        map.word(8).store(cap, SeqCst);
        map.word(0).store(MAGIC, SeqCst);
        Ok(Made {
            map: Arc::new(map),
            file: OwnedFd::from(file),
            bells: [eventfd()?, eventfd()?, eventfd()?, eventfd()?],
        })
    }

    /// What the caller offers for these rings.
    pub(crate) fn offer(&self) -> Offer {
        let b = |i: usize| self.bells[i].as_raw_fd();
        Offer {
            pid: std::process::id(),
            cap: self.map.cap,
            fds: [self.file.as_raw_fd(), b(0), b(1), b(2), b(3)],
        }
    }

    /// The caller's ends, once the peer took the rings: it writes ring 0
    /// and reads ring 1.
    pub(crate) fn ends(self, rd: OwnedReadHalf, wr: OwnedWriteHalf) -> io::Result<Ends> {
        let [d0, s0, d1, s1] = self.bells;
        Ends::new(self.map, (d1, s1, rd), (d0, s0, wr), 1)
    }
}

/// Takes descriptor `fd` of the process behind `pidfd`.
fn take_fd(pidfd: &OwnedFd, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd with a pidfd we hold; the result is checked and
    // is a new descriptor we own (O_CLOEXEC is set by the kernel).
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as RawFd) })
}

/// The peer's side: takes the offered rings (the caller has checked that
/// the offering process holds the connection): it reads ring 0 and writes
/// ring 1.
pub(crate) fn take(offer: &Offer, rd: OwnedReadHalf, wr: OwnedWriteHalf) -> Result<Ends, Refused> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let attempt = || -> io::Result<(Arc<Mapping>, [OwnedFd; 4])> {
        if offer.cap == 0 || offer.cap > RING_CAP * 64 || !offer.cap.is_multiple_of(4096) {
            return Err(invalid(format!("rings of {} bytes", offer.cap)));
        }
        // SAFETY: plain system call; the result is checked.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, offer.pid as libc::pid_t, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just opened and own.
        let pidfd = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
        let file = std::fs::File::from(take_fd(&pidfd, offer.fds[0])?);
        let len = map_len(offer.cap);
        // SAFETY: fcntl on a descriptor we own; the result is checked.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        let must = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if seals < 0 || seals & must != must || file.metadata()?.len() != len {
            return Err(invalid("the offered file is not sealed rings".into()));
        }
        let map = Mapping::new(file.as_raw_fd(), len, offer.cap)?;
        if map.word(0).load(SeqCst) != MAGIC || map.word(8).load(SeqCst) != offer.cap {
            return Err(invalid("the offered file is not taskfold's rings".into()));
        }
        let mut bells = Vec::with_capacity(4);
        for &fd in &offer.fds[1..] {
            bells.push(take_fd(&pidfd, fd)?);
        }
        let bells: [OwnedFd; 4] = bells.try_into().map_err(|_| invalid("bells".into()))?;
        Ok((Arc::new(map), bells))
    };
    match attempt() {
        Ok((map, [d0, s0, d1, s1])) => {
            Ends::new(map, (d0, s0, rd), (d1, s1, wr), 0).map_err(|e| Refused(e, None))
        }
        Err(e) => Err(Refused(e, Some((rd, wr)))),
    }
}

/// Why the offered rings were not taken, and the socket back (if it was
/// not used up) to go on over TCP.
pub(crate) struct Refused(pub io::Error, pub Option<(OwnedReadHalf, OwnedWriteHalf)>);
