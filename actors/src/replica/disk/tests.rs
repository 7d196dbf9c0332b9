use super::*;

#[test]
fn write_read_verify_remove() {
    let tmp = tempdir();
    let d = ReplicaDisk::open(Some(&tmp), 3).unwrap();
    let payload = vec![9u8; 1000];
    let mut buf = vec![0u8; replica::HEADER_LEN];
    replica::write_header(&mut buf, &payload);
    buf.extend_from_slice(&payload);
    d.write(7, 3, &buf).unwrap();
    assert_eq!(&d.read(7, 3).unwrap()[..], &buf[..]);
    // Corruption on disk is detected.
    let p = d.path(7, 3);
    let mut raw = std::fs::read(&p).unwrap();
    raw[500] ^= 0xff;
    std::fs::write(&p, raw).unwrap();
    assert!(d.read(7, 3).unwrap_err().contains("checksum"));
    d.remove_key(7);
    assert!(d.read(7, 3).is_err());
    let _ = std::fs::remove_dir_all(tmp);
}

/// A directory a peer names is read only as this user's private replica
/// files: a link to `/dev/zero` (which `std::fs::read` would read until
/// memory runs out), a FIFO or a file whose header announces more than
/// it holds are refused at once.
#[test]
fn a_named_directory_yields_only_private_replica_files() {
    let dir = tempdir_named("named");
    std::os::unix::fs::symlink("/dev/zero", file_in(&dir, 1, 0)).unwrap();
    let e = ReplicaDisk::read_other(&dir, 1, 0).unwrap_err();
    assert!(e.contains("symbolic link"), "{e}");
    let fifo = file_in(&dir, 2, 0);
    let made = std::process::Command::new("mkfifo")
        .arg("-m600")
        .arg(&fifo)
        .status();
    assert!(made.unwrap().success());
    let e = ReplicaDisk::read_other(&dir, 2, 0).unwrap_err();
    assert!(e.contains("not a regular file"), "{e}");
    let mut buf = vec![0u8; replica::HEADER_LEN];
    replica::write_header(&mut buf, &[5u8; 64]);
    buf.extend_from_slice(&[5u8; 10]);
    let short = file_in(&dir, 3, 0);
    private::create_file(&short)
        .unwrap()
        .write_all(&buf)
        .unwrap();
    let e = ReplicaDisk::read_other(&dir, 3, 0).unwrap_err();
    assert!(e.contains("announces 80 bytes, it holds 26"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ended_files_are_written_over_and_spares_removed_on_drop() {
    let tmp = tempdir_named("spares");
    let mut d = ReplicaDisk::open(Some(&tmp), 1).unwrap();
    let live = AtomicBool::new(true);
    let big = original(1, 3 << 20);
    assert!(d.write_original(1, 1, &big, &live).unwrap());
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let first = ino(&d.path(1, 1));
    d.remove_key(1);
    assert!(d.read(1, 1).is_err(), "the file is gone under its name");
    // An original of another length gets a file of its own...
    let shorter = original(2, 2 << 20);
    assert!(d.write_original(2, 1, &shorter, &live).unwrap());
    assert_ne!(ino(&d.path(2, 1)), first);
    assert_eq!(&d.read(2, 1).unwrap()[..], &shorter[..]);
    // ...one of the same length is written over the kept file.
    let next = original(3, 3 << 20);
    assert!(d.write_original(3, 1, &next, &live).unwrap());
    assert_eq!(ino(&d.path(3, 1)), first, "the spare was reused");
    assert_eq!(&d.read(3, 1).unwrap()[..], &next[..]);
    // Spares are bounded, and removed with the disk.
    d.spare_bytes = 4 * big.len() as u64;
    for k in 10..20 {
        assert!(d.write_original(k, 1, &big, &live).unwrap(), "write {k}");
    }
    for k in 10..20 {
        d.remove_key(k);
    }
    let spares = || spares_in(&rank_dir(&tmp, 1));
    assert_eq!(spares(), 4);
    drop(d);
    assert_eq!(spares(), 0);
    let _ = std::fs::remove_dir_all(tmp);
}

#[test]
fn small_files_are_kept_a_few_at_a_time() {
    let tmp = tempdir_named("small-spares");
    let d = ReplicaDisk::open(Some(&tmp), 1).unwrap();
    let small = original(7, 8);
    let live = AtomicBool::new(true);
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    assert!(d.write_original(1, 1, &small, &live).unwrap());
    let first = ino(&d.path(1, 1));
    d.remove_key(1);
    // The next original of that length is written into the kept file:
    // no new inode.
    assert!(d.write_original(2, 1, &small, &live).unwrap());
    assert_eq!(ino(&d.path(2, 1)), first, "the small spare was reused");
    assert_eq!(&d.read(2, 1).unwrap()[..], &small[..]);
    d.remove_key(2);
    // Many at once: only SMALL_SPARES of them stay.
    for k in 10..30 {
        assert!(d.write_original(k, 1, &small, &live).unwrap());
    }
    for k in 10..30 {
        d.remove_key(k);
    }
    assert_eq!(spares_in(&rank_dir(&tmp, 1)), SMALL_SPARES);
    drop(d);
    let _ = std::fs::remove_dir_all(tmp);
}

#[test]
fn a_sealed_reduction_writes_no_file() {
    let tmp = tempdir_named("sealed");
    let d = ReplicaDisk::open(Some(&tmp), 2).unwrap();
    let mut buf = vec![0u8; replica::HEADER_LEN];
    replica::write_header(&mut buf, b"");
    let live = AtomicBool::new(true);
    assert!(d.write_original(5, 2, &buf, &live).unwrap());
    assert!(d.read(5, 2).is_ok());
    d.remove_key(5);
    // The reduction ended here: a write still in flight leaves nothing
    // (neither the file nor its temporary).
    d.seal(&live);
    assert!(!d.write_original(5, 2, &buf, &live).unwrap());
    assert_eq!(std::fs::read_dir(&d.dir).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(tmp);
}

#[test]
fn facts_and_the_clock_probe() {
    let tmp = tempdir_named("facts");
    let d = ReplicaDisk::open(Some(&tmp), 1).unwrap();
    assert_eq!(
        d.shared_dir(),
        Some(rank_dir(&tmp, 1).to_string_lossy().into_owned())
    );
    let payload = vec![3u8; 40];
    let mut buf = vec![0u8; replica::HEADER_LEN];
    replica::write_header(&mut buf, &payload);
    buf.extend_from_slice(&payload);
    let before = SystemTime::now();
    d.write(9, 1, &buf).unwrap();
    let f = file_facts(&file_in(&rank_dir(&tmp, 1), 9, 1)).unwrap();
    assert_eq!(f.len, buf.len() as u64);
    assert_eq!(f.header, buf[..replica::HEADER_LEN]);
    // File times lag the clock by at most a tick; never lead it.
    assert!(f.modified <= SystemTime::now());
    assert!(f.modified + std::time::Duration::from_secs(1) > before);
    assert!(file_facts(&file_in(&tmp, 9, 1)).is_none());
    // On one machine the file system's clock is this process's clock.
    assert!(clock_lead(&tmp).unwrap().is_zero());
    let _ = std::fs::remove_dir_all(tmp);
}

#[test]
fn directories_and_files_are_private_and_planted_links_refused() {
    use std::os::unix::fs::{symlink, MetadataExt};
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o777;
    let tmp = tempdir_named("private");
    // A link planted at a rank's directory: refused, target untouched.
    let target = tmp.join("theirs");
    std::fs::create_dir(&target).unwrap();
    symlink(&target, rank_dir(&tmp, 4)).unwrap();
    let e = ReplicaDisk::open(Some(&tmp), 4).unwrap_err().to_string();
    assert!(e.contains("rank-4") && e.contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    // A rank's own directory is 0700, its files 0600.
    let d = ReplicaDisk::open(Some(&tmp), 5).unwrap();
    assert_eq!(mode(&rank_dir(&tmp, 5)), 0o700);
    let mut buf = vec![0u8; replica::HEADER_LEN];
    replica::write_header(&mut buf, b"abc");
    buf.extend_from_slice(b"abc");
    // A link at the temporary's name is removed, not written through.
    let victim = tmp.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    symlink(&victim, d.path(8, 5).with_extension("tmp")).unwrap();
    d.write(8, 5, &buf).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(mode(&d.path(8, 5)), 0o600);
    assert_eq!(&d.read(8, 5).unwrap()[..], &buf[..]);
    // Without a configured root: a fresh private directory, removed
    // on drop.
    let own = ReplicaDisk::open(None, 6).unwrap();
    assert_eq!(mode(&own.dir), 0o700);
    let name = own.dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("taskfold-replicas-r6-"), "{name}");
    let own_dir = own.dir.clone();
    drop(own);
    assert!(!own_dir.exists());
    let _ = std::fs::remove_dir_all(tmp);
}

fn tempdir() -> PathBuf {
    tempdir_named("rw")
}

fn tempdir_named(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tf-disk-test-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// The spare files kept in `dir`.
fn spares_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("spare-")
        })
        .count()
}

/// A replica buffer of `len` bytes of `fill`: its header, then them.
fn original(fill: u8, len: usize) -> Vec<u8> {
    let payload = vec![fill; len];
    let mut buf = vec![0u8; replica::HEADER_LEN];
    replica::write_header(&mut buf, &payload);
    buf.extend_from_slice(&payload);
    buf
}

/// Retiring a reduction's files on a thread that must not wait leaves the
/// older spares it pushes out (large ones, whose deletion frees blocks)
/// to the caller: they stay on disk until discarded.
#[test]
fn retired_spares_pushed_out_are_handed_back_not_deleted() {
    let tmp = tempdir_named("evicted");
    let mut d = ReplicaDisk::open(Some(&tmp), 1).unwrap();
    let live = AtomicBool::new(true);
    // Each of another length: none is written over a spare.
    let big = |k: u64| original(k as u8, (2 << 20) + 4096 * k as usize);
    d.spare_bytes = (big(2).len() + big(3).len()) as u64;
    for k in 1..=2 {
        assert!(d.write_original(k, 1, &big(k), &live).unwrap());
        assert!(d.retire_key(k).is_empty(), "room for spare {k}");
    }
    assert!(d.write_original(3, 1, &big(3), &live).unwrap());
    let evicted = d.retire_key(3);
    assert_eq!(evicted.len(), 1, "the oldest spare made room");
    assert!(evicted[0].exists(), "handed back, not deleted");
    ReplicaDisk::discard(evicted.clone());
    assert!(!evicted[0].exists());
    assert_eq!(spares_in(&rank_dir(&tmp, 1)), 2, "two spares kept");
    drop(d);
    let _ = std::fs::remove_dir_all(tmp);
}
