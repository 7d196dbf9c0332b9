//! The TCP transport's decoders: frame headers, hellos, the master's
//! table, addresses, get chunks and loans, the rendezvous file.

use crate::{shaped, SLACK};
use arbitrary::{Arbitrary, Result, Unstructured};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use taskfold_core::auth::NONCE_LEN;
use taskfold_transports::shm::HeapRef;
use taskfold_transports::tcp::frame::{self, kind, Entry, Header, Hello, Role, HEADER_LEN};
use taskfold_transports::tcp::fuzzing;
use taskfold_transports::version::VERSION;

fn addr(u: &mut Unstructured<'_>) -> Result<SocketAddr> {
    let ip: IpAddr = if bool::arbitrary(u)? {
        Ipv4Addr::from(u32::arbitrary(u)?).into()
    } else {
        Ipv6Addr::from(u128::arbitrary(u)?).into()
    };
    Ok(SocketAddr::new(ip, u16::arbitrary(u)?))
}

fn header(u: &mut Unstructured<'_>) -> Result<Header> {
    let any = u32::arbitrary(u)?;
    Ok(Header {
        kind: u.int_in_range(0..=13)?,
        len: *u.choose(&[0, 8, 40, 64, 32, 83, any])?,
        a: u64::arbitrary(u)?,
        b: u64::arbitrary(u)?,
        c: u64::arbitrary(u)?,
    })
}

fn header_bytes(u: &mut Unstructured<'_>) -> Result<[u8; HEADER_LEN]> {
    let v = shaped(u, |u| Ok(header(u)?.encode().to_vec()))?;
    let mut h = [0u8; HEADER_LEN];
    let n = v.len().min(HEADER_LEN);
    h[..n].copy_from_slice(&v[..n]);
    Ok(h)
}

/// `Header::decode`: a decoded header re-encodes to the same 32 bytes,
/// and bodiless or fixed-size kinds announce their lengths.
pub fn header_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let h = header_bytes(u)?;
    if let Ok(d) = Header::decode(&h) {
        crate::hit();
        assert_eq!(d.encode(), h, "header round trip");
        if matches!(
            d.kind,
            kind::GET_REQ | kind::GET_ERR | kind::GOODBYE | kind::GET_RETURN
        ) {
            assert_eq!(d.len, 0);
        }
    }
    Ok(SLACK)
}

fn hello(u: &mut Unstructured<'_>) -> Result<Hello> {
    Ok(Hello {
        version: if u.ratio(1, 8)? {
            u16::arbitrary(u)?
        } else {
            VERSION
        },
        role: *u.choose(&[Role::Register, Role::Peer, Role::Launcher])?,
        job: u64::arbitrary(u)?,
        rank: u32::arbitrary(u)?,
        size: u32::arbitrary(u)?,
        addr: if bool::arbitrary(u)? {
            Some(addr(u)?)
        } else {
            None
        },
        node: u64::arbitrary(u)?,
        nonce: <[u8; NONCE_LEN]>::arbitrary(u)?,
        incarnation: u32::arbitrary(u)?,
        mac: bool::arbitrary(u)?,
    })
}

/// `Hello::decode`: a hello of this version re-encodes to its bytes
/// (exactly `HELLO_LEN`); another version is decoded as far as the version.
pub fn hello_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let b = shaped(u, |u| Ok(hello(u)?.encode()))?;
    if let Ok(h) = Hello::decode(&b) {
        assert_eq!(h.version, u16::from_le_bytes([b[0], b[1]]));
        if h.version == VERSION {
            crate::hit();
            assert_eq!(b.len(), frame::HELLO_LEN);
            let again = Hello::decode(&h.encode()).expect("a hello re-encoded decodes");
            assert_eq!(again, h, "hello round trip");
            // Every byte the decode reads re-encodes as it was: not the
            // reserved ones, nor an absent or IPv4 address's unused ones.
            let e = h.encode();
            let a = 24..24 + frame::ADDR_LEN;
            let unused = |i: usize| match h.addr {
                None => a.contains(&i),
                Some(x) => x.is_ipv4() && (29..41).contains(&i),
            };
            for i in (0..b.len()).filter(|&i| !(12..16).contains(&i) && !unused(i)) {
                assert_eq!(e[i], b[i], "hello byte {i}");
            }
        }
    }
    Ok(4 * b.len() + SLACK)
}

/// `decode_table`: exactly `size` entries of `ENTRY_LEN` bytes, each
/// re-encoding to the same address.
pub fn table_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let mut entries = Vec::new();
    for _ in 0..u.int_in_range(0..=8u8)? {
        entries.push(Entry {
            addr: addr(u)?,
            node: u64::arbitrary(u)?,
            incarnation: u32::arbitrary(u)?,
            dead: bool::arbitrary(u)?,
        });
    }
    let n = entries.len() as u32;
    let b = shaped(u, |_| Ok(frame::encode_table(&entries)))?;
    let size = if bool::arbitrary(u)? {
        n
    } else {
        u32::arbitrary(u)?
    };
    if let Ok(t) = frame::decode_table(&b, size) {
        crate::hit();
        assert_eq!(t.len() as u64, u64::from(size));
        assert_eq!(b.len(), t.len() * frame::ENTRY_LEN);
        assert_eq!(frame::decode_table(&frame::encode_table(&t), size), Ok(t));
    }
    Ok(4 * b.len() + SLACK)
}

/// `decode_addr`: 19 bytes, family 4 or 6; the decoded address
/// re-encodes to the same bytes but for an IPv4 address's unused ones.
pub fn addr_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let b = shaped(u, |u| Ok(frame::encode_addr(addr(u)?).to_vec()))?;
    if let Ok(a) = frame::decode_addr(&b) {
        crate::hit();
        let e = frame::encode_addr(a);
        assert_eq!(b.len(), frame::ADDR_LEN);
        assert_eq!((e[0], &e[17..]), (b[0], &b[17..]), "family and port");
        let used = if a.is_ipv4() { 5 } else { 17 };
        assert_eq!(e[1..used], b[1..used], "address bytes");
    }
    Ok(SLACK + b.len())
}

/// The get receiver's chunk checks (`get::prepare_chunk`, the function
/// the reader runs on every `GET_CHUNK`): the total within what the get
/// accepts, chunks bounded, in order, within the total; the buffer holds
/// exactly the bytes accepted and grows with them, never past the total.
pub fn chunks_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let max = if bool::arbitrary(u)? {
        u64::from(u16::arbitrary(u)?)
    } else {
        u64::arbitrary(u)? % (1 << 28)
    };
    let max_chunk = u64::from(u.int_in_range(1..=1u32 << 16)?);
    let segmented = u.ratio(1, 4)?;
    let total = if bool::arbitrary(u)? {
        u64::arbitrary(u)? % (max + 1)
    } else {
        u64::arbitrary(u)?
    };
    let mut frames = Vec::new();
    let mut at = 0u64;
    for _ in 0..u.int_in_range(0..=16u8)? {
        let len = if bool::arbitrary(u)? {
            max_chunk.min(total - at.min(total))
        } else {
            u64::from(u16::arbitrary(u)?)
        };
        let h = Header {
            kind: if u.ratio(1, 16)? {
                u8::arbitrary(u)?
            } else {
                kind::GET_CHUNK
            },
            len: len as u32,
            a: if u.ratio(1, 16)? {
                u64::arbitrary(u)?
            } else {
                fuzzing::REQ
            },
            b: if u.ratio(1, 8)? {
                u64::arbitrary(u)?
            } else {
                at
            },
            c: if u.ratio(1, 16)? {
                u64::arbitrary(u)?
            } else {
                total
            },
        };
        let mut bytes = h.encode();
        if u.ratio(1, 16)? {
            let i = u.choose_index(HEADER_LEN)?;
            bytes[i] ^= u.int_in_range(1..=255u8)?;
        }
        frames.push(bytes);
        at = at.saturating_add(len);
    }
    let run = fuzzing::chunks(max, max_chunk, segmented, &frames);
    assert!(run.total <= max, "a total past the get's maximum: {run:?}");
    assert!(run.accepted <= run.total || run.chunks == 0, "{run:?}");
    if run.completed {
        crate::hit();
        assert_eq!(run.accepted, run.total);
    }
    if !segmented {
        assert_eq!(
            run.len as u64, run.accepted,
            "buffer holds the bytes accepted"
        );
        assert!(
            run.capacity as u64 <= run.total.max(1) + 64,
            "room past the total: {run:?}"
        );
    }
    // The documented reservation: the first chunk reserves at most
    // min(total, 64 MiB); beyond, room at most doubles the bytes received.
    let room = run.total.min((64u64 << 20).max(2 * run.accepted));
    Ok(room as usize + max_chunk as usize + SLACK + 64 * frames.len() * HEADER_LEN)
}

/// A `GET_LEND` frame and its payload: the payload is the owner's pid,
/// maybe a heap place (descriptor within u32), and re-encodes to the same
/// bytes; the loan's total is within what the get accepts.
pub fn lend_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let max = u64::arbitrary(u)?;
    let heap = if bool::arbitrary(u)? {
        Some(HeapRef {
            fd: u32::arbitrary(u)?,
            ino: u64::arbitrary(u)?,
            len: u64::arbitrary(u)?,
            offset: u64::arbitrary(u)?,
        })
    } else {
        None
    };
    let pid = if bool::arbitrary(u)? {
        u64::from(u32::arbitrary(u)?)
    } else {
        u64::arbitrary(u)?
    };
    let body = shaped(u, |_| Ok(frame::encode_lend(pid, heap)))?;
    let mut h = Header::new(kind::GET_LEND, body.len() as u32);
    (h.a, h.b, h.c) = (
        1,
        u64::arbitrary(u)?,
        u64::arbitrary(u)? % max.saturating_add(2),
    );
    if let Ok((pid, heap)) = fuzzing::lend(max, &h.encode(), &body) {
        crate::hit();
        assert!(h.c <= max && pid <= u64::from(u32::MAX));
        assert_eq!(frame::encode_lend(pid, heap), body, "loan round trip");
    }
    let h = header_bytes(u)?;
    let _ = fuzzing::lend(max, &h, &body);
    Ok(4 * body.len() + SLACK)
}

/// The rendezvous file's text: only `tf-rendezvous VERSION job=0x.. addr=..`
/// of this job is believed; what the master writes reads back as its
/// address.
pub fn rendezvous_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let job = if bool::arbitrary(u)? {
        0x2a
    } else {
        u64::arbitrary(u)?
    };
    let a = addr(u)?;
    let m = u32::arbitrary(u)?;
    let text = shaped(u, |_| Ok(fuzzing::rendezvous_text(job, a, m).into_bytes()))?;
    let text = String::from_utf8_lossy(&text);
    if let Ok(got) = fuzzing::rendezvous(&text, job) {
        crate::hit();
        assert!(text.contains(&format!("job={job:#x}")) || text.contains("job=0x"));
        let _ = got;
    }
    assert_eq!(
        fuzzing::rendezvous(&fuzzing::rendezvous_text(job, a, m), job),
        Ok((a, m)),
        "rendezvous round trip"
    );
    // Debug quoting of a bad version may widen each char to `\u{..}`.
    Ok(16 * text.len() + SLACK)
}

/// The table file a master keeps beside the rendezvous file: only a file
/// of this job, this version and `size` entries is believed, its master
/// within the job; what the master writes reads back.
pub fn table_file_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let job = if bool::arbitrary(u)? {
        0x2a
    } else {
        u64::arbitrary(u)?
    };
    let size = u.int_in_range(1..=8u32)?;
    let master = u.int_in_range(0..=size)?;
    let table: Vec<Entry> = (0..size)
        .map(|_| {
            Ok(Entry {
                addr: addr(u)?,
                node: u64::arbitrary(u)?,
                incarnation: u32::arbitrary(u)?,
                dead: bool::arbitrary(u)?,
            })
        })
        .collect::<Result<_>>()?;
    let written = fuzzing::table_file_bytes(job, master, &table);
    let bytes = shaped(u, |_| Ok(written.clone()))?;
    if let Some((m, got)) = fuzzing::table_file(&bytes, job, size) {
        crate::hit();
        assert!(m < size, "a master outside the job");
        assert_eq!(got.len(), size as usize, "one entry per rank");
    }
    let back = fuzzing::table_file(&written, job, size);
    if master < size {
        assert_eq!(back, Some((master, table.clone())), "table file round trip");
    } else {
        assert_eq!(back, None, "a master outside the job is refused");
    }
    Ok(bytes.len() + size as usize * 64 + SLACK)
}
