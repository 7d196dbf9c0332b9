//! The rendezvous file is private: written mode 0600 without following a
//! planted link, and believed by a rank only if this user wrote it so.
//! Everything binds 127.0.0.1 only.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};
use taskfold_transports::conformance::{fresh_dir, fresh_job};
use taskfold_transports::private;
use taskfold_transports::tcp::{MasterAddr, TcpConfig, TcpTransport};
use taskfold_transports::TransportError;

/// Starts rank 1 of 2 against the rendezvous file `path`; returns its
/// error and how long it took.
fn rank_one(path: &Path, job: u64) -> (TransportError, Duration) {
    let mut cfg = TcpConfig::new(1, 2, job, MasterAddr::Rendezvous(path.to_path_buf()));
    cfg.connect_timeout = Duration::from_secs(20);
    let t0 = Instant::now();
    let e = match TcpTransport::start(cfg) {
        Ok(_) => panic!("the rank must not start"),
        Err(e) => e,
    };
    (e, t0.elapsed())
}

fn good_text(job: u64) -> String {
    format!(
        "taskfold-rendezvous {} job={job:#x} addr=127.0.0.1:9 master=0\n",
        taskfold_transports::version::VERSION
    )
}

#[test]
fn a_rendezvous_file_others_may_write_is_refused_at_once() {
    let dir = fresh_dir();
    let path = dir.join("master");
    let job = fresh_job();
    std::fs::write(&path, good_text(job)).expect("the file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("mode");
    let (e, took) = rank_one(&path, job);
    let text = e.to_string();
    assert!(matches!(e, TransportError::MasterUnreachable(_)), "{e:?}");
    assert!(
        text.contains("refused") && text.contains("mode 0644"),
        "{text}"
    );
    assert!(
        took < Duration::from_secs(10),
        "refused at once, took {took:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_rendezvous_file_of_another_user_is_refused() {
    let dir = fresh_dir();
    let job = fresh_job();
    let path = dir.join("master");
    private::write_atomic(&path, good_text(job).as_bytes()).expect("the file");
    let theirs = if private::euid() == 0 {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
        path.clone()
    } else {
        // Not root: a link is how another user's file would be planted.
        let planted = dir.join("planted");
        symlink("/etc/hostname", &planted).expect("link");
        planted
    };
    let (e, took) = rank_one(&theirs, job);
    let text = e.to_string();
    assert!(
        text.contains("owned by user") || text.contains("symbolic link"),
        "{text}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_planted_link_at_the_rendezvous_path_is_refused_and_replaced() {
    let dir = fresh_dir();
    let job = fresh_job();
    // A well-formed file of ours, reached through a link: refused.
    let target = dir.join("target");
    private::write_atomic(&target, good_text(job).as_bytes()).expect("the target");
    let path = dir.join("master");
    symlink(&target, &path).expect("link");
    let (e, _) = rank_one(&path, job);
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // The master writes its file in place of the link, not through it.
    let mut cfg = TcpConfig::new(0, 1, job, MasterAddr::Rendezvous(path.clone()));
    cfg.connect_timeout = Duration::from_secs(20);
    let master = TcpTransport::start(cfg).expect("a job of one rank");
    let meta = std::fs::symlink_metadata(&path).expect("the file");
    assert!(meta.is_file(), "a regular file replaced the link");
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&path)
        .expect("read")
        .contains(&master.master_addr().to_string()));
    assert_eq!(
        std::fs::read_to_string(&target).expect("target"),
        good_text(job),
        "the link's target is untouched"
    );
    taskfold_transports::Transport::shutdown(&*master);
    let _ = std::fs::remove_dir_all(dir);
}

/// A descriptor of this process's, for the tests of what a peer names:
/// `(fd, inode, length)`, kept open by the returned file.
fn held(path: &Path) -> (std::fs::File, u32, u64, u64) {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .expect("open");
    let m = f.metadata().expect("metadata");
    let fd = f.as_raw_fd() as u32;
    (f, fd, m.ino(), m.len())
}

/// A peer that names a FIFO as its shared heap or as the master's notice
/// board makes the rank refuse it at once (the open does not block on
/// it); a file of this user's that others may read is refused too.
#[test]
fn a_fifo_or_an_open_file_named_as_a_heap_or_board_is_refused() {
    use taskfold_transports::board::{Board, BoardRef};
    use taskfold_transports::shm::{HeapRef, PeerHeap};
    let dir = fresh_dir();
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let shared = dir.join("shared");
    std::fs::write(&shared, vec![0u8; 4096]).expect("write");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let me = std::process::id();
    let t0 = Instant::now();
    for (path, why) in [(&fifo, "not a regular file"), (&shared, "mode 0644")] {
        let (_f, fd, ino, len) = held(path);
        let heap = HeapRef {
            fd,
            ino,
            len,
            offset: 0,
        };
        let Err(e) = PeerHeap::open(me, &heap) else {
            panic!("a heap mapped")
        };
        let e = e.to_string();
        assert!(e.contains(why), "{e}");
        let board = BoardRef {
            pid: me,
            fd: fd as i32,
            ino,
            node: taskfold_transports::shared_file::node_token(),
        };
        let Err(e) = Board::open(&board) else {
            panic!("a board mapped")
        };
        let e = e.to_string();
        assert!(e.contains(why), "{e}");
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "did not block");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The rendezvous file's temporary has a random name: a file planted at
/// the name a process id would give does not stop the write.
#[test]
fn a_file_planted_at_a_predictable_temporary_name_is_no_obstacle() {
    let dir = fresh_dir();
    let path = dir.join("master");
    let planted = dir.join(format!(".master.tmp.{}", std::process::id()));
    std::fs::write(&planted, b"planted").expect("plant");
    private::write_atomic(&path, b"taskfold").expect("written beside it");
    assert_eq!(std::fs::read(&path).expect("read"), b"taskfold");
    assert_eq!(std::fs::read(&planted).expect("read"), b"planted");
    let _ = std::fs::remove_dir_all(&dir);
}
