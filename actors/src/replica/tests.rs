//! The store over the serialising loopback: a copy of a peer's original
//! kept, listed, and gone with a rollback.
use super::*;
use taskfold_core::replica::{original_key, write_header, HEADER_LEN};
use taskfold_transports::loopback::LoopbackHub;
use taskfold_transports::Transport;

const KEY: u64 = 21;

/// Rank 0's store over `ts[0]`, keeping at most `limit` bytes of copies.
fn store_of(
    ts: &[Arc<taskfold_transports::loopback::LoopbackTransport>],
    limit: u64,
) -> Addr<ReplicaStore> {
    let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
    let disk = Arc::new(ReplicaDisk::open(None, 0).unwrap());
    ReplicaStore::new(0, Outbox::of(t), disk, limit).start()
}

/// The copies the store lists (`(key, owner)`).
async fn copies(store: &Addr<ReplicaStore>) -> Vec<(u64, u32)> {
    store.send(ListCopies).await.unwrap().copies
}

#[test]
fn a_rollback_drops_every_copy_of_another_ranks_original() {
    let (_hub, ts) = LoopbackHub::new(2);
    actix_rt::System::new().block_on(async move {
        // Rank 1 exposes its original of KEY, as a member does.
        let (buf, crc, len) = replica_of(&[7u8; 512]);
        ts[1].expose(BufferKey(original_key(KEY)), Bytes::from(buf));
        let store = store_of(&ts, 1 << 20);
        let offer = OfferIn {
            wants_ack: true,
            ..offer_from_elsewhere(len, crc, None)
        };
        store.send(offer).await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while copies(&store).await.is_empty() && std::time::Instant::now() < deadline {
            actix_rt::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(copies(&store).await, vec![(KEY, 1)]);
        store.send(RolledBack).await.unwrap();
        assert_eq!(copies(&store).await, vec![]);
    });
}

#[test]
fn a_rollback_drops_every_copy_of_a_roots_result() {
    let (_hub, ts) = LoopbackHub::new(2);
    actix_rt::System::new().block_on(async move {
        // Rank 1, a root, exposes its result of KEY for its buddy.
        let (buf, crc, len) = replica_of(&[5u8; 256]);
        ts[1].expose(
            BufferKey(taskfold_core::results::result_key(KEY)),
            Bytes::from(buf),
        );
        let store = store_of(&ts, 1 << 20);
        store
            .send(ResultOfferIn {
                root: Rank(1),
                from: Rank(1),
                key: KEY,
                len,
                crc,
                more: 0,
            })
            .await
            .unwrap();
        let results =
            |s: Addr<ReplicaStore>| async move { s.send(ListCopies).await.unwrap().results };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while results(store.clone()).await.is_empty() && std::time::Instant::now() < deadline {
            actix_rt::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(results(store.clone()).await, vec![(KEY, 1)]);
        store.send(RolledBack).await.unwrap();
        assert_eq!(results(store.clone()).await, vec![]);
    });
}

/// A replica buffer of `payload` (header and bytes), its checksum and its
/// length, as an owner offers it.
fn replica_of(payload: &[u8]) -> (Vec<u8>, u32, u64) {
    let mut buf = vec![0u8; HEADER_LEN];
    write_header(&mut buf, payload);
    buf.extend_from_slice(payload);
    let crc = replica::stored_crc(&buf).unwrap();
    let len = buf.len() as u64;
    (buf, crc, len)
}

/// Rank 1's offer of its original of KEY from another node (node token
/// 0: never this one), carrying `data`.
fn offer_from_elsewhere(len: u64, crc: u32, data: Option<Vec<u8>>) -> OfferIn {
    OfferIn {
        key: KEY,
        owner: Rank(1),
        len,
        crc,
        node: 0,
        file: None,
        heap: None,
        warm: None,
        wants_ack: false,
        data,
        after: 0,
    }
}

/// The copy of rank 1's original of KEY that rank 0's store serves, once
/// it does (read by rank 1, as a rank recovering the original would).
async fn served(ts: &[Arc<taskfold_transports::loopback::LoopbackTransport>]) -> Vec<u8> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match ts[1].get(Rank(0), BufferKey(replica_key(KEY, 1))).await {
            Ok(got) => return got.to_vec(),
            Err(e) if std::time::Instant::now() > deadline => panic!("no copy served: {e}"),
            Err(_) => actix_rt::time::sleep(std::time::Duration::from_millis(5)).await,
        }
    }
}

#[test]
fn bytes_carried_by_an_offer_are_kept_without_a_get() {
    let (_hub, ts) = LoopbackHub::new(2);
    actix_rt::System::new().block_on(async move {
        // Rank 1 exposes nothing: only the bytes the offer carries can
        // make the copy.
        let (buf, crc, len) = replica_of(&[3u8; 300]);
        let store = store_of(&ts, 1 << 20);
        let offer = offer_from_elsewhere(len, crc, Some(buf.clone()));
        store.send(offer).await.unwrap();
        assert_eq!(copies(&store).await, vec![(KEY, 1)], "kept at once");
        assert!(served(&ts).await == buf, "served as carried");
    });
}

/// The owner heard that use 1 of KEY completed (number 5) and offered its
/// copy for use 2 before this rank heard of that completion: the late end
/// of use 1 leaves the copy, the end of use 2 (number 9) drops it, as an
/// end with no number drops any copy (the book's Architecture chapter,
/// Copies of a reused key).
#[test]
fn a_copy_for_the_next_use_of_a_key_outlives_the_previous_end() {
    let (_hub, ts) = LoopbackHub::new(2);
    actix_rt::System::new().block_on(async move {
        let drop_key = |upto| DropKey {
            key: KEY,
            upto,
            disk: Removal::Nothing,
        };
        let (buf, crc, len) = replica_of(&[4u8; 300]);
        let store = store_of(&ts, 1 << 20);
        let offer = |after| OfferIn {
            after,
            ..offer_from_elsewhere(len, crc, Some(buf.clone()))
        };
        store.send(offer(5)).await.unwrap();
        store.send(drop_key(5)).await.unwrap();
        assert_eq!(copies(&store).await, vec![(KEY, 1)], "kept");
        assert!(served(&ts).await == buf, "still served");
        store.send(drop_key(9)).await.unwrap();
        assert_eq!(copies(&store).await, vec![], "dropped at its own end");
        store.send(offer(9)).await.unwrap();
        store.send(drop_key(u64::MAX)).await.unwrap();
        assert_eq!(copies(&store).await, vec![], "dropped by a failure");
    });
}

#[test]
fn damaged_carried_bytes_are_dropped_and_the_original_fetched() {
    let (_hub, ts) = LoopbackHub::new(2);
    actix_rt::System::new().block_on(async move {
        let (buf, crc, len) = replica_of(&[9u8; 300]);
        ts[1].expose(BufferKey(original_key(KEY)), Bytes::from(buf.clone()));
        // One byte of the payload changed on the way: its checksum fails.
        let mut damaged = buf.clone();
        damaged[HEADER_LEN + 7] ^= 1;
        let store = store_of(&ts, 1 << 20);
        let offer = offer_from_elsewhere(len, crc, Some(damaged));
        store.send(offer).await.unwrap();
        assert!(served(&ts).await == buf, "the owner's own bytes, fetched");
    });
}

#[test]
fn a_small_disk_copy_is_retired_as_its_reduction_ends_here() {
    let (_hub, ts) = LoopbackHub::new(1);
    let dir = tempfile::tempdir().unwrap();
    actix_rt::System::new().block_on(async move {
        let disk = Arc::new(ReplicaDisk::open(Some(dir.path()), 0).unwrap());
        let (buf, _, _) = replica_of(&[1u8; 64]);
        let live = std::sync::atomic::AtomicBool::new(true);
        assert!(disk.write_original(KEY, 0, &buf, &live).unwrap());
        let path = disk.path(KEY, 0);
        assert!(path.exists());
        let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
        let store = ReplicaStore::new(0, Outbox::of(t), disk, 1 << 20).start();
        let removal = Removal::of(true, buf.len());
        assert_eq!(removal, Removal::Here);
        store
            .send(DropKey {
                key: KEY,
                upto: u64::MAX,
                disk: removal,
            })
            .await
            .unwrap();
        // Gone by the time the store has handled the message: no blocking
        // task to wait for.
        assert!(!path.exists(), "{} retired", path.display());
    });
}

/// The answers rank 1 (the owner) got so far: `(ok, same_node)`.
fn answers_to_owner(
    ts: &[Arc<taskfold_transports::loopback::LoopbackTransport>],
) -> Vec<(bool, bool)> {
    ts[1]
        .events()
        .try_iter()
        .filter_map(|e| match e {
            taskfold_transports::Event::Message { frame, .. } => {
                match taskfold_core::wire::decode(&frame).expect("a valid frame") {
                    taskfold_core::wire::Msg::ReplicaAck { ok, same_node, .. } => {
                        Some((ok, same_node))
                    }
                    _ => None,
                }
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_carried_offer_is_answered_only_if_asked_or_refused() {
    let (_hub, ts) = LoopbackHub::new(2);
    actix_rt::System::new().block_on(async move {
        let (buf, crc, len) = replica_of(&[4u8; 300]);
        // Room for one copy only.
        let store = store_of(&ts, len);
        let offer = offer_from_elsewhere(len, crc, Some(buf.clone()));
        store.send(offer).await.unwrap();
        assert_eq!(copies(&store).await, vec![(KEY, 1)]);
        // Kept, not asked: no answer. Then the same owner's original of
        // another reduction, beyond the store's room: refused, and told.
        let mut second = offer_from_elsewhere(len, crc, Some(buf));
        second.key = KEY + 1;
        store.send(second).await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut got = Vec::new();
        while got.is_empty() && std::time::Instant::now() < deadline {
            actix_rt::time::sleep(std::time::Duration::from_millis(5)).await;
            got.extend(answers_to_owner(&ts));
        }
        assert_eq!(got, vec![(false, false)], "one answer: the refusal");
    });
}
