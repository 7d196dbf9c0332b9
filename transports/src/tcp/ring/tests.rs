use super::*;
use std::os::fd::FromRawFd;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// A loopback connection: the caller's halves, then the peer's.
async fn socket_pair() -> (
    (OwnedReadHalf, OwnedWriteHalf),
    (OwnedReadHalf, OwnedWriteHalf),
) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (p, _) = l.accept().await.unwrap();
    (c.into_split(), p.into_split())
}

/// Rings of `cap` bytes set up as a caller and its peer do (in one
/// process: `pidfd_getfd` takes this process's own descriptors).
async fn pair(cap: u64) -> (Ends, Ends) {
    let ((crd, cwr), (prd, pwr)) = socket_pair().await;
    let made = Made::new(cap).unwrap();
    let offer = Offer::decode(&made.offer().encode()).unwrap();
    let peer = match take(&offer, prd, pwr) {
        Ok(e) => e,
        Err(Refused(e, _)) => panic!("rings not taken: {e}"),
    };
    (made.ends(crd, cwr).unwrap(), peer)
}

/// Writes all of `bytes`, waiting for room as the writer task does.
async fn write_all(tx: &RingWrite, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match tx.try_write_vectored(&[IoSlice::new(bytes)]) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tx.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn an_offer_reads_back_and_a_short_one_is_refused() {
    let o = Offer {
        pid: 77,
        cap: 65536,
        fds: [3, 4, 5, 6, -1],
    };
    assert_eq!(Offer::decode(&o.encode()), Ok(o));
    assert!(Offer::decode(&o.encode()[1..]).is_err());
}

#[tokio::test]
async fn bytes_cross_both_ways_in_order_many_times_the_capacity() {
    let (caller, peer) = pair(4096).await;
    let (
        Ends {
            rx: mut crx,
            tx: ctx,
        },
        Ends {
            rx: mut prx,
            tx: ptx,
        },
    ) = (caller, peer);
    let out = pattern(1 << 20, 7);
    let back = pattern(300_000, 99);
    let (o, b) = (out.clone(), back.clone());
    let w1 = tokio::spawn(async move { write_all(&ctx, &o).await.map(|_| ctx) });
    let w2 = tokio::spawn(async move { write_all(&ptx, &b).await.map(|_| ptx) });
    let mut got = vec![0u8; out.len()];
    prx.read_exact(&mut got).await.unwrap();
    assert!(got == out, "the caller's bytes arrive as written");
    let mut got = vec![0u8; back.len()];
    crx.read_exact(&mut got).await.unwrap();
    assert!(got == back, "the peer's bytes arrive as written");
    let _ = (w1.await.unwrap().unwrap(), w2.await.unwrap().unwrap());
}

#[tokio::test]
async fn the_stream_ends_after_the_last_byte_once_the_writer_is_gone() {
    let (caller, peer) = pair(4096).await;
    let Ends { tx, rx: _keep } = caller;
    let mut prx = peer.rx;
    write_all(&tx, b"last words").await.unwrap();
    drop(tx); // closes the caller's direction of the socket, as a death would
    let mut all = Vec::new();
    prx.read_to_end(&mut all).await.unwrap();
    assert_eq!(all, b"last words");
}

#[tokio::test]
async fn a_writer_waiting_for_room_stops_when_its_stream_ends() {
    let (caller, peer) = pair(4096).await;
    let Ends { tx, rx: crx } = caller;
    write_all(&tx, &pattern(4096, 1)).await.unwrap();
    assert_eq!(
        tx.try_write_vectored(&[IoSlice::new(b"x")])
            .unwrap_err()
            .kind(),
        io::ErrorKind::WouldBlock
    );
    let waiting = tokio::spawn(async move { tx.writable().await });
    // The peer goes away: the caller's reader meets the socket's end.
    drop(peer);
    let mut crx = crx;
    let mut rest = Vec::new();
    crx.read_to_end(&mut rest).await.unwrap();
    let r = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .expect("the writer stops waiting")
        .unwrap();
    assert_eq!(r.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
}

#[tokio::test]
async fn a_byte_on_the_socket_after_the_switch_is_an_error() {
    use tokio::io::AsyncWriteExt;
    let ((crd, mut cwr), (prd, pwr)) = socket_pair().await;
    let made = Made::new(4096).unwrap();
    let Ok(mut peer) = take(&made.offer(), prd, pwr) else {
        panic!("rings not taken");
    };
    cwr.write_all(b"?").await.unwrap();
    let mut b = [0u8; 4];
    let e = peer.rx.read(&mut b).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    drop(crd);
}

#[tokio::test]
async fn broken_indices_end_the_stream_as_invalid_data() {
    let (caller, mut peer) = pair(4096).await;
    // A peer writes a tail beyond what the ring can hold.
    caller.tx.map.word(word(0, TAIL)).store(1 << 40, SeqCst);
    let mut b = [0u8; 4];
    let e = peer.rx.read(&mut b).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    // The connection's end blames the peer: a protocol error, counted.
    match crate::tcp::conn::ReadError::Io(e).blamed() {
        crate::tcp::conn::ReadError::Protocol(d) => assert!(d.contains("indices"), "{d}"),
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unsealed_or_foreign_file_is_refused_and_the_socket_given_back() {
    let (_caller, (prd, pwr)) = socket_pair().await;
    let made = Made::new(4096).unwrap();
    // An ordinary memfd of the right size, not sealed.
    let raw = unsafe { libc::memfd_create(c"other".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(raw >= 0);
    let other = unsafe { OwnedFd::from_raw_fd(raw) };
    std::fs::File::from(other.try_clone().unwrap())
        .set_len(map_len(4096))
        .unwrap();
    let mut offer = made.offer();
    offer.fds[0] = other.as_raw_fd();
    let Err(Refused(e, Some((prd, pwr)))) = take(&offer, prd, pwr) else {
        panic!("an unsealed file was taken");
    };
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    // A descriptor this process does not have.
    offer.fds[0] = 1 << 20;
    let Err(Refused(_, Some(_))) = take(&offer, prd, pwr) else {
        panic!("a closed descriptor was taken");
    };
}

/// Writes of `writes` sizes, read with buffers of `reads` sizes (cycled),
/// through rings of `cap` bytes, both sides at once.
async fn stream(cap: u64, writes: Vec<usize>, reads: Vec<usize>) {
    let (caller, peer) = pair(cap).await;
    let Ends { tx, rx: _keep } = caller;
    let mut rx = peer.rx;
    let total: usize = writes.iter().sum();
    let sent = pattern(total, writes.len() as u8);
    let out = sent.clone();
    let writer = tokio::spawn(async move {
        let mut at = 0;
        for w in writes {
            write_all(&tx, &out[at..at + w]).await.unwrap();
            at += w;
        }
        tx
    });
    let mut got = Vec::with_capacity(total);
    let mut sizes = reads.iter().cycle();
    while got.len() < total {
        let want = (*sizes.next().unwrap()).min(total - got.len());
        let mut b = vec![0u8; want];
        let n = rx.read(&mut b).await.unwrap();
        assert!(n > 0, "the stream ended early");
        got.extend_from_slice(&b[..n]);
    }
    assert!(got == sent, "every byte in order");
    drop(writer.await.unwrap());
    let mut rest = Vec::new();
    rx.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "nothing after the last byte, then the end");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Any sizes of writes and reads, across the ring's end any number of
    /// times, give the bytes written, in order, then the end.
    #[test]
    fn any_writes_and_reads_give_the_bytes_in_order(
        cap in proptest::sample::select(vec![4096u64, 8192]),
        writes in proptest::collection::vec(1usize..20_000, 1..24),
        reads in proptest::collection::vec(1usize..12_000, 1..8),
    ) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(stream(cap, writes, reads));
    }
}
