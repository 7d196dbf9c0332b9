//! The shared heap installed as this test binary's allocator: its blocks,
//! and TCP loans read in place from it.

use std::time::{Duration, Instant};
use taskfold_transports::conformance::{self, tcp_ranks, wait};
use taskfold_transports::same_node::{self, Place};
use taskfold_transports::shm::{self, SharedHeap, MIN_SHARED};
use taskfold_transports::{BufferKey, Bytes, Rank, Received, Transport};

#[global_allocator]
static HEAP: SharedHeap = SharedHeap;

/// Held by every test here: the heap's kept blocks and free extents are
/// the process's, so a test that watches them (which block is kept, which
/// released) must not see another test's blocks taken or freed meanwhile
/// (one test's block of 4 MiB could fill the extent another test's freed
/// block left, and read as resident).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    // A test that failed holding it leaves nothing half done here.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn large_blocks_come_from_the_heap_small_ones_do_not() {
    let _serial = serial();
    let big = vec![7u8; MIN_SHARED];
    let small = vec![7u8; MIN_SHARED - 1];
    assert!(shm::active(), "the heap was created");
    let r = shm::locate(big.as_ptr(), big.len()).expect("a large block is in the heap");
    assert_eq!(r.offset as usize % 4096, 0, "heap blocks start on a page");
    assert!(shm::locate(small.as_ptr(), small.len()).is_none());
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", r.fd)).expect("the heap's file");
    assert_eq!(
        std::os::unix::fs::MetadataExt::mode(&meta) & 0o777,
        0o600,
        "only this user may open the heap"
    );
}

#[test]
fn the_pools_buffers_of_every_size_come_from_the_heap() {
    let _serial = serial();
    // A reduction buffer is in the heap whatever its size (same-node peers
    // read it in place, a same-node buddy views it there); the
    // application's own block of that size is not.
    const { assert!(shm::MIN_SHARED_POOLED <= 8) };
    for n in [8, 1 << 10, 64 << 10, 128 << 10] {
        let pooled = taskfold_core::pool::take(n);
        let own: Vec<u8> = Vec::with_capacity(n);
        assert!(shm::active(), "the heap was created");
        assert!(
            shm::locate(pooled.as_ptr(), n).is_some(),
            "a pool buffer of {n} bytes is in the heap"
        );
        assert!(shm::locate(own.as_ptr(), n).is_none(), "{n} bytes");
        assert!(!taskfold_core::pool::allocating(), "the mark is cleared");
    }
    // A small pool buffer given back leaves the heap's block for reuse:
    // many of them in turn do not grow the heap.
    let first = taskfold_core::pool::take(8);
    let at = shm::locate(first.as_ptr(), 8).expect("in the heap").offset;
    drop(first);
    for _ in 0..1000 {
        let b = taskfold_core::pool::take(8);
        let off = shm::locate(b.as_ptr(), 8).expect("in the heap").offset;
        assert!(off <= at + (64 << 20), "the heap's small blocks are reused");
    }
}

#[test]
fn blocks_are_disjoint_zeroed_and_reused() {
    let _serial = serial();
    // Many threads allocating, filling, checking and freeing blocks of
    // several sizes: a block handed out twice would be overwritten.
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            std::thread::spawn(move || {
                for round in 0..20usize {
                    let sizes = [MIN_SHARED, 3 << 20, (1 << 20) + 12345, 9 << 20];
                    let blocks: Vec<Vec<u8>> = sizes
                        .iter()
                        .map(|&n| {
                            let v = vec![0u8; n];
                            assert!(v.iter().all(|&b| b == 0), "a fresh block is zeroed");
                            v
                        })
                        .collect();
                    let mut blocks = blocks;
                    for (i, b) in blocks.iter_mut().enumerate() {
                        b.fill(t.wrapping_mul(17).wrapping_add((round + i) as u8));
                    }
                    for (i, b) in blocks.iter().enumerate() {
                        let want = t.wrapping_mul(17).wrapping_add((round + i) as u8);
                        assert!(b.iter().all(|&x| x == want), "block {i} was overwritten");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no thread panicked");
    }
}

/// Whether every page of `len` bytes at `at` is in memory.
fn resident(at: usize, len: usize) -> bool {
    let page = 4096;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `at` is page-aligned (heap blocks start on a page) and
    // `at..at + len` lies in the heap's mapping, which is never unmapped;
    // `vec` has one byte per page of the range.
    let r = unsafe { libc::mincore(at as *mut libc::c_void, len, vec.as_mut_ptr()) };
    r == 0 && vec.iter().all(|&b| b & 1 == 1)
}

#[test]
fn a_freed_block_keeps_its_pages_for_the_next_of_its_size() {
    let _serial = serial();
    // A size no other test here uses: the kept block is taken again by
    // the next block of exactly its size.
    const N: usize = (6 << 20) + 7 * (64 << 10);
    let mut kept = 0;
    for round in 0..10u8 {
        let mut v = vec![0u8; N];
        assert!(shm::locate(v.as_ptr(), N).is_some());
        assert!(
            v.iter().all(|&b| b == 0),
            "round {round}: a zeroed block reads as zeros, kept or not"
        );
        v.fill(round + 1);
        let at = v.as_ptr() as usize;
        drop(v);
        // Other tests' blocks freed meanwhile may push this one out.
        if resident(at, N) {
            kept += 1;
        }
    }
    assert!(
        kept >= 5,
        "a freed block kept its pages in {kept} of 10 rounds"
    );
    // Beyond the bound, a freed block's pages go back at once.
    let big = vec![1u8; shm::HOT_BYTES + (64 << 10)];
    let at = big.as_ptr() as usize;
    drop(big);
    assert!(
        !resident(at, 64 << 10),
        "a block above the bound is released"
    );
}

#[test]
fn beyond_its_count_of_kept_blocks_the_oldest_freed_is_released() {
    let _serial = serial();
    // Sizes no other test here uses (each of its own, so none is taken
    // again), far below the bound in bytes: the count decides.
    let sizes: Vec<usize> = (1..=shm::HOT_BLOCKS + 1)
        .map(|k| (4 << 20) + k * (64 << 10))
        .collect();
    let mut blocks: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![1u8; n]).collect();
    let first = (blocks[0].as_ptr() as usize, sizes[0]);
    blocks.reverse(); // freed below from the last, so the first goes first
    while let Some(b) = blocks.pop() {
        drop(b);
    }
    // No other test takes or frees blocks meanwhile (`serial`).
    assert!(
        !resident(first.0, first.1),
        "the oldest of {} freed blocks is released",
        shm::HOT_BLOCKS + 1
    );
}

#[test]
fn growing_and_shrinking_keeps_the_contents() {
    let _serial = serial();
    let mut v: Vec<u32> = Vec::new();
    for i in 0..2_000_000u32 {
        v.push(i); // grows through the system allocator into the heap
    }
    assert!(shm::locate(v.as_ptr().cast(), v.len() * 4).is_some());
    v.truncate(1000);
    v.shrink_to_fit(); // back to the system allocator
    assert!(shm::locate(v.as_ptr().cast(), v.len() * 4).is_none());
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
}

fn pattern(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ (i >> 12) as u8)
        .collect::<Vec<u8>>()
        .into()
}

#[test]
fn same_node_loans_are_read_in_place_and_returned_on_drop() {
    let _serial = serial();
    let ts = tcp_ranks(2, &|_| {});
    let (t0, t1) = (ts[0].clone(), ts[1].clone());
    let data = pattern(5 << 20);
    let heap = shm::locate(data.as_ptr(), data.len()).expect("the buffer is in the heap");
    t1.expose(BufferKey(1), data.clone());
    let t = t0.clone();
    let got = wait("get", async move { t.get(Rank(1), BufferKey(1)).await }).expect("a loan");
    let Received::Shared(view) = &got else {
        panic!("a same-node buffer in the heap comes back as a view, not {got:?}");
    };
    assert!(view[..] == data[..], "the view shows the owner's bytes");
    // Our own heap, mapped a second time: the same pages at another address.
    assert_ne!(view.as_ptr(), data.as_ptr());
    assert!(heap.offset > 0 || heap.len > 0);
    // While the loan is out, the owner keeps the buffer even when it is
    // withdrawn and our last other reference is dropped.
    drop(t1.withdraw(BufferKey(1)));
    drop(data);
    let want = pattern(5 << 20);
    assert!(got[..] == want[..], "a withdrawn buffer stays lent");
    // A copy of a loan returns it at once.
    t1.expose(BufferKey(2), pattern(3 << 20));
    let t = t0.clone();
    let owned = wait("get", async move { t.get(Rank(1), BufferKey(2)).await })
        .expect("a loan")
        .into_owned();
    assert!(owned[..] == pattern(3 << 20)[..]);
    drop(got);
    // The return reaches the owner: the loaned block goes back to the heap
    // (observable as the owner's loans reaching zero).
    let deadline = Instant::now() + conformance::WAIT;
    while t1.loans_out() > 0 {
        assert!(Instant::now() < deadline, "the loans were never returned");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_peer_heap_is_checked_before_it_is_mapped_and_bounded_when_read() {
    let _serial = serial();
    let block = vec![5u8; MIN_SHARED];
    let r = shm::locate(block.as_ptr(), block.len()).expect("in the heap");
    let pid = std::process::id();
    let wrong_inode = shm::HeapRef {
        ino: r.ino ^ 1,
        ..r
    };
    assert!(
        shm::PeerHeap::open(pid, &wrong_inode).is_err(),
        "another file"
    );
    let wrong_len = shm::HeapRef {
        len: r.len - 4096,
        ..r
    };
    assert!(
        shm::PeerHeap::open(pid, &wrong_len).is_err(),
        "another length"
    );
    let heap = shm::PeerHeap::open(pid, &r).expect("our own heap maps");
    assert!(heap.is(pid, &r) && !heap.is(pid + 1, &r));
    let seen = heap.slice(r.offset as usize, block.len()).expect("inside");
    assert!(seen.iter().all(|&b| b == 5), "the same pages");
    assert!(heap.slice(r.len as usize - 10, 11).is_none());
    assert!(heap.slice(usize::MAX, 2).is_none());
}

/// A one-sided get through shared memory: the owner says where its bytes
/// lie (`locate`), a same-node peer reads them there (`view`) without a
/// request, a loan or a return; what is not in the heap, too small to
/// lend, of another node or outside the heap is refused.
#[test]
fn located_bytes_are_read_in_place_without_a_request() {
    let _serial = serial();
    let ts = tcp_ranks(2, &|_| {});
    let (t0, t1) = (ts[0].clone(), ts[1].clone());
    let data = pattern(4 << 20);
    t1.expose(BufferKey(9), data.clone());
    let (s0, s1) = (t0.same_node().unwrap(), t1.same_node().unwrap());
    let at = s1.locate(&data).expect("a heap buffer of a lendable size");
    let place = Place::decode(&at);
    assert_eq!(place.len, data.len() as u64);
    assert_eq!(place.pid, std::process::id());
    let got = s0.view(Rank(1), &at).expect("read in place");
    let Received::Shared(view) = &got else {
        panic!("a view, not {got:?}");
    };
    assert!(view[..] == data[..], "the owner's bytes");
    assert_ne!(view.as_ptr(), data.as_ptr(), "through the peer's mapping");
    assert_eq!(
        t1.loans_out(),
        0,
        "nothing was lent: the owner took no part"
    );
    // A sub-range of a located buffer reads those bytes only.
    let part = s1.locate(&data[1 << 20..]).expect("still in the heap");
    let got = s0.view(Rank(1), &part).expect("read in place");
    assert!(got[..] == data[1 << 20..]);
    // Small ranges too: a located read needs no request, whatever its
    // size (small contributions are read in place like large ones).
    let small = s1.locate(&data[..8]).expect("a small range of the heap");
    let got = s0.view(Rank(1), &small).expect("read in place");
    assert!(matches!(got, Received::Shared(_)) && got[..] == data[..8]);
    assert!(s1.locate(&data[..0]).is_none(), "nothing to read");
    // Refused: memory outside the heap, another node, a range past the
    // heap's end, a rank that is not in the job.
    let outside = vec![1u8; 100 << 10];
    assert!(s1.locate(&outside).is_none(), "not in the shared heap");
    let elsewhere = Place {
        node: place.node ^ 2,
        ..place
    }
    .encode();
    assert!(s0.view(Rank(1), &elsewhere).is_none(), "another node");
    let mut past = place;
    past.heap.offset = place.heap.len - 10;
    assert!(
        s0.view(Rank(1), &past.encode()).is_none(),
        "past the heap's end"
    );
    assert!(s0.view(Rank(7), &at).is_none(), "no such rank");
    // A locator that names the heap only reads nothing, but maps the heap.
    let warm = same_node::heap_of(&at);
    assert_eq!(Place::decode(&warm).len, 0);
    assert!(s0.view(Rank(1), &warm).is_some_and(|v| v.is_empty()));
}

/// A buddy keeps reading a dead owner's bytes through the mapping of its
/// heap it made while the owner lived (`view_retained`), where a plain
/// `view` is refused once the link is down, until it forgets that memory;
/// and it maps nothing new for a dead peer.
#[test]
fn a_dead_owners_heap_serves_its_buddy_until_forgotten() {
    let _serial = serial();
    let ts = tcp_ranks(3, &|_| {});
    let (buddy, owner) = (ts[0].clone(), ts[1].clone());
    let data = pattern(2 << 20);
    owner.expose(BufferKey(3), data.clone());
    let at = owner
        .same_node()
        .and_then(|s| s.locate(&data))
        .expect("a heap buffer of a lendable size");
    let sn = buddy.same_node().expect("TCP reads in place");
    // The owner talks to both (links are made by the first frame), and
    // the buddy maps the owner's heap while it lives (its first offer).
    for r in [0, 2] {
        owner.send(Rank(r), Bytes::from_static(b"offer")).unwrap();
        match conformance::next_event(&*ts[r as usize], "the owner's frame") {
            taskfold_transports::Event::Message { from, .. } => assert_eq!(from, Rank(1)),
            e => panic!("expected a frame, got {e:?}"),
        }
    }
    assert!(sn.view(Rank(1), &at).is_some());
    // The owner crashes: no goodbye.
    owner.abort();
    match conformance::next_event(&*buddy, "the owner's link goes down") {
        taskfold_transports::Event::LinkDown { peer, .. } => assert_eq!(peer, Rank(1)),
        e => panic!("expected a link down, got {e:?}"),
    }
    assert!(
        sn.view(Rank(1), &at).is_none(),
        "a plain view needs the link"
    );
    let got = sn
        .view_retained(Rank(1), &at)
        .expect("the mapping made while the owner lived still serves");
    assert!(got[..] == data[..], "the owner's bytes");
    // Rank 2 never mapped the owner's heap: nothing is mapped for a dead
    // peer, even where its memory could still be opened.
    match conformance::next_event(&*ts[2], "rank 2 sees the link go down") {
        taskfold_transports::Event::LinkDown { .. } => {}
        e => panic!("expected a link down, got {e:?}"),
    }
    assert!(ts[2]
        .same_node()
        .and_then(|s| s.view_retained(Rank(1), &at))
        .is_none());
    sn.forget_memory(Rank(1));
    assert!(
        sn.view_retained(Rank(1), &at).is_none(),
        "forgotten: nothing more is read there"
    );
    assert!(
        got[..] == data[..],
        "a view taken before keeps what it read"
    );
}

/// The libfabric transport offers the same reads in place as TCP (shared
/// memory needs no fabric): a same-node peer views a located buffer with
/// no request; once the link is down only a retained view reads it.
#[cfg(feature = "libfabric")]
#[test]
fn libfabric_ranks_read_each_other_in_place() {
    let _serial = serial();
    let provider = "tcp;ofi_rxm";
    if !taskfold_transports::libfabric::provider_available(provider) {
        assert!(std::env::var_os("CI").is_none(), "{provider} is missing");
        eprintln!("skipped: no libfabric provider {provider} here");
        return;
    }
    let ts = conformance::libfabric_ranks(2, provider, &|_| {});
    let (reader, owner) = (ts[0].clone(), ts[1].clone());
    let data = pattern(3 << 20);
    owner.expose(BufferKey(4), data.clone());
    let at = owner
        .same_node()
        .and_then(|s| s.locate(&data))
        .expect("a heap buffer of a lendable size");
    let sn = reader.same_node().expect("libfabric reads in place");
    let got = sn.view(Rank(1), &at).expect("read in place");
    assert!(matches!(got, Received::Shared(_)), "a view, not a copy");
    assert!(got[..] == data[..], "the owner's bytes");
    owner.abort();
    match conformance::next_event(&*reader, "the owner's link goes down") {
        taskfold_transports::Event::LinkDown { peer, .. } => assert_eq!(peer, Rank(1)),
        e => panic!("expected a link down, got {e:?}"),
    }
    assert!(
        sn.view(Rank(1), &at).is_none(),
        "a plain view needs the link"
    );
    assert!(
        sn.view_retained(Rank(1), &at)
            .is_some_and(|v| v[..] == data[..]),
        "the mapping made while the owner lived still serves"
    );
}

/// A process of this user that is no rank of the job, holding a private
/// file of known bytes open as its descriptor 0, alive while the guard
/// lives: what a peer with the key might name in a locator to make a rank
/// map another process's file.
struct Bystander {
    child: std::process::Child,
    path: std::path::PathBuf,
    ino: u64,
    len: u64,
}

impl Bystander {
    fn start() -> Bystander {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let path = std::env::temp_dir().join(format!(
            "taskfold-bystander-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .expect("a private file");
        std::io::Write::write_all(&mut f, &[0x5a; 64 << 10]).expect("written");
        let meta = f.metadata().expect("its inode");
        let child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::fs::File::open(&path).expect("opened"))
            .spawn()
            .expect("sleep");
        Bystander {
            child,
            path,
            ino: meta.ino(),
            len: meta.len(),
        }
    }

    /// A locator naming the bystander's file as if it were a peer's heap.
    fn locator(&self, node: u64) -> same_node::Locator {
        Place {
            node,
            pid: self.child.id(),
            heap: shm::HeapRef {
                fd: 0,
                ino: self.ino,
                len: self.len,
                offset: 0,
            },
            len: 4096,
        }
        .encode()
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Checks that `reader` refuses a locator of rank 1 naming a bystander's
/// process, before and after rank 1's genuine locator was read, and that
/// the genuine one (`genuine`, whose bytes are `data`) reads in place.
fn foreign_pids_are_refused(
    reader: &same_node::SameNode,
    genuine: &same_node::Locator,
    data: &[u8],
) {
    let other = Bystander::start();
    let forged = other.locator(reader.token());
    let refused = same_node::locators_refused();
    assert!(
        reader.view(Rank(1), &forged).is_none(),
        "nothing of a process that is not rank 1's is read"
    );
    assert!(
        same_node::locators_refused() > refused,
        "the refusal is counted"
    );
    let got = reader
        .view(Rank(1), genuine)
        .expect("the peer's own heap reads in place");
    assert!(got[..] == data[..], "the owner's bytes");
    let refused = same_node::locators_refused();
    assert!(
        reader.view(Rank(1), &forged).is_none(),
        "once rank 1's process is proven, no other pid is opened"
    );
    assert!(same_node::locators_refused() > refused, "counted again");
}

/// A locator whose pid is not the peer's process opens nothing: a peer
/// with the key cannot make a rank map another process's file.
#[test]
fn a_locator_naming_another_process_reads_nothing() {
    let _serial = serial();
    let ts = tcp_ranks(2, &|_| {});
    let (t0, t1) = (ts[0].clone(), ts[1].clone());
    let data = pattern(1 << 20);
    t1.expose(BufferKey(3), data.clone());
    let at = t1
        .same_node()
        .and_then(|s| s.locate(&data))
        .expect("in the heap");
    foreign_pids_are_refused(t0.same_node().expect("tcp reads in place"), &at, &data);
}

/// As [`a_locator_naming_another_process_reads_nothing`], over libfabric.
#[cfg(feature = "libfabric")]
#[test]
fn libfabric_a_locator_naming_another_process_reads_nothing() {
    let _serial = serial();
    let provider = "tcp;ofi_rxm";
    if !taskfold_transports::libfabric::provider_available(provider) {
        assert!(std::env::var_os("CI").is_none(), "{provider} is missing");
        eprintln!("skipped: no libfabric provider {provider} here");
        return;
    }
    let ts = conformance::libfabric_ranks(2, provider, &|_| {});
    let data = pattern(1 << 20);
    ts[1].expose(BufferKey(3), data.clone());
    let at = ts[1]
        .same_node()
        .and_then(|s| s.locate(&data))
        .expect("in the heap");
    foreign_pids_are_refused(
        ts[0].same_node().expect("libfabric reads in place"),
        &at,
        &data,
    );
}
