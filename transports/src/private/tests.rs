use super::*;
use std::os::unix::fs::symlink;

/// A private scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        Scratch(fresh_dir_in(&std::env::temp_dir(), "tf-private-test-").unwrap())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o777
}

fn refusal(e: &io::Error) -> String {
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
    e.to_string()
}

#[test]
fn directories_are_made_private_and_others_refused() {
    let s = Scratch::new();
    assert_eq!(mode(&s.0), 0o700);
    let d = s.0.join("a/b/c");
    create_dir_all(&d).unwrap();
    assert_eq!(mode(&d), 0o700);
    assert_eq!(mode(&s.0.join("a")), 0o700);
    // Again: an existing private directory is fine.
    create_dir_all(&d).unwrap();
    create_dir(&d).unwrap();
    // One that others may enter is refused, and left as it is.
    let open = s.0.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = refusal(&create_dir(&open).unwrap_err());
    assert!(e.contains("mode 0755"), "{e}");
    assert_eq!(mode(&open), 0o755);
}

#[test]
fn a_planted_link_to_a_directory_is_refused() {
    let s = Scratch::new();
    let target = s.0.join("theirs");
    std::fs::create_dir(&target).unwrap();
    let planted = s.0.join("replicas");
    symlink(&target, &planted).unwrap();
    for e in [
        create_dir(&planted).unwrap_err(),
        create_dir_all(&planted).unwrap_err(),
        check_dir(&planted).unwrap_err(),
    ] {
        let e = refusal(&e);
        assert!(e.contains("symbolic link"), "{e}");
        assert!(e.contains("replicas"), "{e}");
    }
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
}

#[test]
fn a_planted_link_to_a_file_is_refused_and_its_target_untouched() {
    let s = Scratch::new();
    let target = s.0.join("victim");
    std::fs::write(&target, b"precious").unwrap();
    let tmp = s.0.join("x.tmp");
    symlink(&target, &tmp).unwrap();
    let e = refusal(&create_file(&tmp).unwrap_err());
    assert!(e.contains("x.tmp"), "{e}");
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    // Read through a link: refused too.
    let e = refusal(&open_owned(&tmp).unwrap_err());
    assert!(e.contains("symbolic link"), "{e}");
    // A new file is 0600 and written.
    let fresh = s.0.join("fresh");
    create_file(&fresh).unwrap().write_all(b"mine").unwrap();
    assert_eq!(mode(&fresh), 0o600);
    assert_eq!(read_owned(&fresh, 100).unwrap(), b"mine");
    assert!(read_owned(&fresh, 2).is_err(), "longer than expected");
}

#[test]
fn atomic_writes_are_private_and_replace_a_planted_link() {
    let s = Scratch::new();
    let target = s.0.join("victim");
    std::fs::write(&target, b"precious").unwrap();
    let path = s.0.join("master.addr");
    // A link at the temporary's name and one at the file's name.
    let tmp = s.0.join(format!(".master.addr.tmp.{}", std::process::id()));
    symlink(&target, &tmp).unwrap();
    symlink(&target, &path).unwrap();
    write_atomic(&path, b"hello").unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert_eq!(mode(&path), 0o600);
    assert!(!std::fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(read_owned(&path, 100).unwrap(), b"hello");
    // The temporary has a random name: the link planted at the name the
    // process id would give is left alone, and nothing else is left.
    assert!(std::fs::symlink_metadata(&tmp)
        .unwrap()
        .file_type()
        .is_symlink());
    let left: Vec<_> = std::fs::read_dir(&s.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".master.addr.tmp.")
        })
        .collect();
    assert_eq!(left.len(), 1, "no temporary left");
}

#[test]
fn files_others_may_use_or_own_are_refused() {
    let s = Scratch::new();
    let path = s.0.join("master.addr");
    std::fs::write(&path, b"x").unwrap();
    for bits in [0o640, 0o604, 0o620, 0o602] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(bits)).unwrap();
        let e = refusal(&open_owned(&path).unwrap_err());
        assert!(e.contains(&format!("mode {bits:04o}")), "{e}");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    open_owned(&path).unwrap();
    // Another user's file: made with chown as root, else one of the
    // system's files (owned by root).
    let theirs = if euid() == 0 {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        path.clone()
    } else {
        PathBuf::from("/etc/passwd")
    };
    let e = refusal(&open_owned(&theirs).unwrap_err());
    assert!(e.contains("owned by user"), "{e}");
    // Not a regular file.
    let e = refusal(&open_owned(&s.0).unwrap_err());
    assert!(e.contains("not a regular file"), "{e}");
}

#[test]
fn fresh_directories_are_private_and_distinct() {
    let a = Scratch::new();
    let b = Scratch::new();
    assert_ne!(a.0, b.0);
    check_dir(&a.0).unwrap();
    let name = a.0.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("tf-private-test-") && name.len() == 22,
        "{name}"
    );
    assert!(fresh_dir_in(&a.0, "a/b").is_err());
    let d = fresh_dir("tf-private-fresh-").unwrap();
    check_dir(&d).unwrap();
    assert_eq!(d.parent(), Some(std::env::temp_dir().as_path()));
    std::fs::remove_dir(d).unwrap();
}
