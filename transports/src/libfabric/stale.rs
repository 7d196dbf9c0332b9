//! Shared-memory regions that libfabric's `shm` provider left behind.
//!
//! The provider names an endpoint's region after its process
//! (`/dev/shm/<pid>:<n>:<m>` with libfabric 1.17) and refuses to create one
//! that exists: `fi_enable` fails with `EBUSY`. A process killed with
//! SIGKILL closes nothing, so its regions stay until the node reboots, and
//! a later process that happens to get the same process id cannot start
//! its endpoint. (A `bench faults` or fault-test run over `shm` leaves one
//! per killed rank; on the development machine, 41 had piled up when a
//! rank of a later job met one.)
//!
//! Before this process makes its first `shm` endpoint, any region named
//! after its id was left by a dead process, and is removed if it is
//! provably this user's and this tool's: a regular file (not a link)
//! owned by this user and named exactly `<pid>:<n>:<m>`. Any other file is
//! left alone. (A live
//! process with the same id in another PID namespace sharing `/dev/shm`
//! would collide with this one inside libfabric anyway.)

use std::path::Path;
use std::sync::Once;

/// Where the kernel keeps POSIX shared-memory objects.
const SHM_DIR: &str = "/dev/shm";

/// Removes, once per process, the regions in `/dev/shm` named after this
/// process's id (see the module's documentation).
pub(crate) fn clear_before_first_endpoint() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let pid = std::process::id();
        let removed = remove_regions_of(Path::new(SHM_DIR), pid);
        if removed > 0 {
            tracing::warn!(
                pid,
                removed,
                "removed shared-memory regions left by a dead process with this process's id"
            );
        }
    });
}

/// Whether `name` is the name libfabric's `shm` provider gives a region
/// of process `pid`: exactly `<pid>:<n>:<m>`, decimal numbers.
fn is_region_of(name: &str, pid: u32) -> bool {
    let mut parts = name.split(':');
    let digits =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    parts.next() == Some(pid.to_string().as_str())
        && digits(parts.next())
        && digits(parts.next())
        && parts.next().is_none()
}

/// Removes the regions of `dir` that are provably this user's, this
/// tool's and dead: regular files (not links) owned by this user, named
/// exactly as the provider names a region of process `pid` (this
/// process's id, so their process is gone). Returns how many were
/// removed.
fn remove_regions_of(dir: &Path, pid: u32) -> usize {
    use std::os::unix::fs::MetadataExt;
    let me = crate::private::euid();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| is_region_of(n, pid)))
        .filter(|e| std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_file() && m.uid() == me))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_regions_named_after_the_process_go() {
        let dir = std::env::temp_dir().join(format!("tf-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "123:0:0",
            "123:1:0",
            "1234:0:0",
            "12:0:0",
            "x123:0:0",
            "123",
            "123:a:0",
            "123:0:0:0",
            "123::0",
        ] {
            std::fs::write(dir.join(name), b"region").unwrap();
        }
        // A link named like a region: left (and its target untouched).
        let target = dir.join("target");
        std::fs::write(&target, b"theirs").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("123:2:0")).unwrap();
        // Another user's region (made with chown as root): left.
        let theirs = crate::private::euid() == 0;
        if theirs {
            std::fs::write(dir.join("123:3:0"), b"region").unwrap();
            std::os::unix::fs::chown(dir.join("123:3:0"), Some(65534), None).unwrap();
        }
        assert_eq!(remove_regions_of(&dir, 123), 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected = vec![
            "123",
            "123:0:0:0",
            "123:2:0",
            "123::0",
            "123:a:0",
            "1234:0:0",
            "12:0:0",
            "target",
            "x123:0:0",
        ];
        if theirs {
            expected.insert(4, "123:3:0");
        }
        expected.sort();
        assert_eq!(left, expected);
        assert_eq!(std::fs::read(&target).unwrap(), b"theirs");
        assert_eq!(remove_regions_of(&dir.join("absent"), 123), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
