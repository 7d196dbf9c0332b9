use super::*;
use std::os::unix::fs::{symlink, PermissionsExt};
use taskfold_core::checkpoint::{JobId, Shard};

const JOB: JobId = JobId(0x10b);
const TAG: u64 = 0x7a9;

fn header(owner: u32, version: u64, level: Level) -> Header {
    Header {
        job: JOB,
        owner,
        version,
        type_tag: TAG,
        level,
        shard: None,
    }
}

fn expect(owner: u32, level: Level) -> Expect {
    Expect {
        job: JOB,
        type_tag: TAG,
        owner: Some(owner),
        version: None,
        level: Some(level),
    }
}

fn store(keep: usize) -> (tempfile::TempDir, FileStore) {
    let root = tempfile::tempdir().unwrap();
    let s = FileStore::open(&root.path().join("ckpt"), keep).unwrap();
    (root, s)
}

/// Runs `f` with the process's log captured: one subscriber for the whole
/// test binary, installed once, so that no callsite's interest depends on
/// which test's thread reached it first (scoped subscribers coming and
/// going on parallel tests' threads lost events). Captures take turns;
/// another thread's warning in between only adds lines.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    static BUF: std::sync::OnceLock<Buf> = std::sync::OnceLock::new();
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let buf = BUF.get_or_init(|| {
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
        buf
    });
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    buf.0.lock().unwrap().clear();
    let out = f();
    let log = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    (out, log)
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn pieces_round_trip_with_private_modes() {
    let (_root, s) = store(3);
    assert_eq!(mode(s.dir()), 0o700);
    let p1 = s.write(&header(2, 1, Level::L1), b"first").unwrap();
    s.write(&header(2, 2, Level::L1), b"second").unwrap();
    s.write(&header(5, 9, Level::L1), b"other rank").unwrap();
    assert_eq!(mode(&p1), 0o600);
    assert_eq!(s.versions(2, Level::L1).unwrap(), vec![2, 1]);
    let got = s.latest(&expect(2, Level::L1)).unwrap().unwrap();
    assert_eq!(got.payload, b"second");
    assert_eq!(got.header, header(2, 2, Level::L1));
    let key = PieceKey::of(&header(2, 1, Level::L1));
    assert_eq!(
        s.read(&key, &expect(2, Level::L1)).unwrap().payload,
        b"first"
    );
    assert!(s.latest(&expect(3, Level::L1)).unwrap().is_none());
    assert!(s.latest(&expect(2, Level::L4)).unwrap().is_none());
    // Nothing but the pieces is left in the directory.
    assert_eq!(s.names().unwrap().len(), 3);
}

#[test]
fn l3_shards_have_their_own_files() {
    let (_root, s) = store(2);
    let shard = |index: u16, owner: u32| Header {
        owner,
        shard: Some(Shard {
            group: 4,
            members: vec![1, 2],
            m: 1,
            index,
            lens: vec![3, 3],
        }),
        ..header(owner, 7, Level::L3)
    };
    // Rank 2's own data shard and a parity piece it holds for the group.
    s.write(&shard(1, 2), b"abc").unwrap();
    s.write(&shard(2, 2), b"xyzw").unwrap();
    let keys = s.list().unwrap();
    assert_eq!(keys.len(), 2);
    assert!(keys.iter().all(|k| k.shard.is_some_and(|(g, _)| g == 4)));
    for k in keys {
        let got = s.read(&k, &expect(2, Level::L3)).unwrap();
        assert_eq!(got.header.shard.unwrap().index, k.shard.unwrap().1);
    }
}

#[test]
fn a_damaged_piece_is_skipped_for_the_previous_version() {
    let (_root, s) = store(3);
    s.write(&header(0, 1, Level::L1), b"good").unwrap();
    let p2 = s
        .write(&header(0, 2, Level::L1), b"will be damaged")
        .unwrap();
    let mut bytes = fs::read(&p2).unwrap();
    bytes[piece::FIXED_LEN + 3] ^= 0x40;
    fs::write(&p2, &bytes).unwrap();
    let err = s
        .read(
            &PieceKey::of(&header(0, 2, Level::L1)),
            &expect(0, Level::L1),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Piece {
                source: PieceError::Checksum,
                ..
            }
        ),
        "{err}"
    );
    let (got, log) = logged(|| s.latest(&expect(0, Level::L1)));
    let got = got.unwrap().unwrap();
    assert_eq!((got.header.version, &got.payload[..]), (1, &b"good"[..]));
    assert!(log.contains("checkpoint piece skipped"), "{log}");
    assert!(
        log.contains("checksum mismatch"),
        "the reason is logged: {log}"
    );
    // Truncated is skipped alike.
    fs::write(&p2, &bytes[..20]).unwrap();
    assert_eq!(
        s.latest(&expect(0, Level::L1))
            .unwrap()
            .unwrap()
            .header
            .version,
        1
    );
}

#[test]
fn foreign_pieces_are_skipped() {
    let (_root, s) = store(5);
    s.write(&header(1, 1, Level::L4), b"ours").unwrap();
    let other_job = Header {
        job: JobId(0xbad),
        ..header(1, 3, Level::L4)
    };
    s.write(&other_job, b"another job's").unwrap();
    let other_type = Header {
        type_tag: 1,
        ..header(1, 2, Level::L4)
    };
    s.write(&other_type, b"another type").unwrap();
    let (got, log) = logged(|| s.latest(&expect(1, Level::L4)));
    assert_eq!(got.unwrap().unwrap().payload, b"ours");
    assert!(log.contains("another job's piece"), "{log}");
    assert!(log.contains("type tag"), "{log}");
    let err = s
        .read(&PieceKey::of(&other_job), &expect(1, Level::L4))
        .unwrap_err();
    assert!(matches!(err, StoreError::Piece { ref source, .. } if source.is_foreign()));
    // A piece renamed to pose as another owner's is refused by its header.
    let ours = s.path(&PieceKey::of(&header(1, 1, Level::L4)));
    let posing = s.path(&PieceKey::of(&header(6, 1, Level::L4)));
    fs::copy(&ours, &posing).unwrap();
    assert!(s.latest(&expect(6, Level::L4)).unwrap().is_none());
}

#[test]
fn only_the_newest_versions_are_kept() {
    let (_root, s) = store(2);
    for v in 1..=4 {
        s.write(&header(3, v, Level::L1), format!("v{v}").as_bytes())
            .unwrap();
        s.write(&header(3, v, Level::L2), b"copy").unwrap();
    }
    assert_eq!(s.versions(3, Level::L1).unwrap(), vec![4, 3]);
    assert_eq!(s.versions(3, Level::L2).unwrap(), vec![4, 3]);
    assert_eq!(s.names().unwrap().len(), 4);
}

#[test]
fn a_linked_directory_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let real = root.path().join("real");
    fs::DirBuilder::new().mode(0o700).create(&real).unwrap();
    let link = root.path().join("link");
    symlink(&real, &link).unwrap();
    assert!(matches!(
        FileStore::open(&link, 1),
        Err(StoreError::Symlink(_))
    ));
    // Swapped for a link after it was opened: every write checks again.
    let dir = root.path().join("ckpt");
    let s = FileStore::open(&dir, 1).unwrap();
    fs::remove_dir(&dir).unwrap();
    symlink(&real, &dir).unwrap();
    assert!(matches!(
        s.write(&header(0, 1, Level::L1), b"x"),
        Err(StoreError::Symlink(_))
    ));
    assert_eq!(
        fs::read_dir(&real).unwrap().count(),
        0,
        "nothing written through"
    );
}

#[test]
fn open_directories_and_files_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let open = root.path().join("open");
    fs::DirBuilder::new().mode(0o700).create(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
    assert!(matches!(
        FileStore::open(&open, 1),
        Err(StoreError::Mode { mode: 0o755, .. })
    ));
    let file = root.path().join("file");
    fs::write(&file, b"").unwrap();
    assert!(matches!(
        FileStore::open(&file, 1),
        Err(StoreError::NotDir(_))
    ));
    // Another user's directory (only root can make one to test with).
    let theirs = root.path().join("theirs");
    fs::DirBuilder::new().mode(0o700).create(&theirs).unwrap();
    if std::os::unix::fs::chown(&theirs, Some(65534), None).is_ok() {
        assert!(matches!(
            FileStore::open(&theirs, 1),
            Err(StoreError::Owner { owner: 65534, .. })
        ));
    }
}

#[test]
fn a_planted_link_is_never_written_or_read_through() {
    let (root, s) = store(2);
    let target = root.path().join("target");
    fs::write(&target, b"precious").unwrap();
    // In place of the temporary file: the write is refused.
    let h = header(0, 1, Level::L1);
    let temp = s.temp_path(&PieceKey::of(&h));
    symlink(&target, &temp).unwrap();
    assert!(matches!(s.write(&h, b"x"), Err(StoreError::TempExists(_))));
    assert_eq!(fs::read(&target).unwrap(), b"precious");
    // Sweeping another owner's temporary files leaves it; the owner's
    // sweep removes the link, not its target.
    let theirs = s.temp_path(&PieceKey::of(&header(10, 1, Level::L1)));
    fs::write(&theirs, b"a write under way").unwrap();
    s.sweep(1).unwrap();
    assert!(fs::symlink_metadata(&temp).is_ok());
    s.sweep(0).unwrap();
    assert!(fs::symlink_metadata(&temp).is_err());
    assert!(
        fs::symlink_metadata(&theirs).is_ok(),
        "rank 10's is not rank 1's"
    );
    assert_eq!(fs::read(&target).unwrap(), b"precious");
    // In place of the piece: the rename replaces the link, the target is
    // untouched.
    let path = s.path(&PieceKey::of(&h));
    symlink(&target, &path).unwrap();
    s.write(&h, b"state").unwrap();
    assert_eq!(fs::read(&target).unwrap(), b"precious");
    assert!(!fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_symlink());
    // A link posing as a newer piece, even to a valid piece, is skipped.
    let elsewhere = root.path().join("elsewhere");
    fs::copy(&path, &elsewhere).unwrap();
    let newer = s.path(&PieceKey::of(&header(0, 2, Level::L1)));
    symlink(&elsewhere, &newer).unwrap();
    let got = s.latest(&expect(0, Level::L1)).unwrap().unwrap();
    assert_eq!(got.header.version, 1);
    assert!(matches!(
        s.read(
            &PieceKey::of(&header(0, 2, Level::L1)),
            &expect(0, Level::L1)
        ),
        Err(StoreError::Io { .. })
    ));
    // Nor does a FIFO in a piece's place block the reader.
    let fifo = s.path(&PieceKey::of(&header(0, 3, Level::L1)));
    let private = rustix::fs::Mode::from_raw_mode(0o600);
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, private).unwrap();
    assert!(matches!(
        s.read(
            &PieceKey::of(&header(0, 3, Level::L1)),
            &expect(0, Level::L1)
        ),
        Err(StoreError::NotAFile(_))
    ));
    let got = s.latest(&expect(0, Level::L1)).unwrap().unwrap();
    assert_eq!(got.header.version, 1);
}

#[test]
fn file_names_parse_back_strictly() {
    let keys = [
        PieceKey::of(&header(3, 17, Level::L2)),
        PieceKey {
            owner: 0,
            level: Level::L3,
            shard: Some((9, 4)),
            version: 0,
        },
    ];
    for k in keys {
        assert_eq!(PieceKey::parse(&k.file_name()), Some(k));
    }
    for bad in [
        "r3-L2-v17.tfck.tmp",
        "r3-L5-v17.tfck",
        "r3-L3-v17.tfck",
        "r03-L2-v17.tfck",
        "r3-L2-v17-x.tfck",
        "r-1-L2-v17.tfck",
        ".r3-L2-v17.tfck.tmp-12",
    ] {
        assert_eq!(PieceKey::parse(bad), None, "{bad}");
    }
}

/// Versions reported to a global restart's meeting stay on disk while
/// writes queued before the rollback land (they would prune the older
/// one the meeting may agree on); released, the next write prunes again.
#[test]
fn held_versions_survive_later_writes_until_released() {
    let (_root, s) = store(2);
    for v in [16, 17] {
        s.write(&header(3, v, Level::L1), b"state").unwrap();
    }
    s.hold_from(16);
    for v in [18, 19] {
        s.write(&header(3, v, Level::L1), b"state").unwrap();
    }
    assert_eq!(s.versions(3, Level::L1).unwrap(), vec![19, 18, 17, 16]);
    s.release();
    s.write(&header(3, 20, Level::L1), b"state").unwrap();
    assert_eq!(s.versions(3, Level::L1).unwrap(), vec![20, 19]);
}

/// What a global restart's rank does (hold everything, list, narrow the
/// hold to the oldest listed), against writes landing all the while: no
/// version listed is ever pruned before the release. A prune that read
/// the floor before the hold and removed after the listing took, under
/// load, the very version a meeting agreed on.
#[test]
fn a_version_listed_under_a_hold_is_never_pruned_by_a_write_under_way() {
    let (_root, s) = store(1);
    let s = std::sync::Arc::new(s);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut v = 1;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && v < 200_000 {
                s.write(&header(3, v, Level::L1), b"state").unwrap();
                v += 1;
            }
        })
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut holds = 0;
    while std::time::Instant::now() < until && holds < 2_000 {
        // Released, the writes prune again: the next hold meets them
        // pruning, as a meeting meets the writes of the steps before it.
        let pruned = std::time::Instant::now() + std::time::Duration::from_millis(50);
        while s.versions(3, Level::L1).unwrap().len() > 2 && std::time::Instant::now() < pruned {
            std::thread::yield_now();
        }
        s.hold_from(0);
        let listed = s.versions(3, Level::L1).unwrap();
        if let Some(&oldest) = listed.last() {
            s.hold_from(oldest);
        }
        std::thread::yield_now();
        let now = s.versions(3, Level::L1).unwrap();
        let lost: Vec<u64> = listed
            .iter()
            .filter(|v| !now.contains(v))
            .copied()
            .collect();
        s.release();
        assert!(
            lost.is_empty(),
            "hold {holds}: listed {} versions, lost {lost:?}",
            listed.len()
        );
        holds += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(holds > 10, "only {holds} holds in 3 s");
}
