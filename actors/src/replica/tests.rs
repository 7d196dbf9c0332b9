//! The store over the serialising loopback: a copy of a peer's original
//! kept, listed, and gone with a rollback.
use super::*;
use taskfold_core::replica::{write_header, HEADER_LEN};
use taskfold_transports::loopback::LoopbackHub;
use taskfold_transports::Transport;

const KEY: u64 = 21;

/// The copies the store lists (`(key, owner)`).
async fn copies(store: &Addr<ReplicaStore>) -> Vec<(u64, u32)> {
    store.send(ListCopies).await.unwrap().copies
}

#[test]
fn a_rollback_drops_every_copy_of_another_ranks_original() {
    let (_hub, ts) = LoopbackHub::new(2);
    actix_rt::System::new().block_on(async move {
        // Rank 1 exposes its original of KEY, as a member does.
        let payload = vec![7u8; 512];
        let mut buf = vec![0u8; HEADER_LEN];
        write_header(&mut buf, &payload);
        buf.extend_from_slice(&payload);
        let crc = replica::stored_crc(&buf).unwrap();
        let len = buf.len() as u64;
        ts[1].expose(BufferKey(original_key(KEY)), Bytes::from(buf));
        let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
        let disk = Arc::new(ReplicaDisk::open(None, 0).unwrap());
        let store = ReplicaStore::new(0, Outbox::of(t), disk, 1 << 20).start();
        store
            .send(OfferIn {
                key: KEY,
                owner: Rank(1),
                len,
                crc,
                node: 0,
                file: None,
                heap: None,
                warm: None,
                wants_ack: true,
            })
            .await
            .unwrap();
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
        let payload = vec![5u8; 256];
        let mut buf = vec![0u8; HEADER_LEN];
        write_header(&mut buf, &payload);
        buf.extend_from_slice(&payload);
        let crc = replica::stored_crc(&buf).unwrap();
        let len = buf.len() as u64;
        ts[1].expose(
            BufferKey(taskfold_core::results::result_key(KEY)),
            Bytes::from(buf),
        );
        let t: Arc<dyn taskfold_transports::Transport> = ts[0].clone();
        let disk = Arc::new(ReplicaDisk::open(None, 0).unwrap());
        let store = ReplicaStore::new(0, Outbox::of(t), disk, 1 << 20).start();
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
