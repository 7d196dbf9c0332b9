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
//! after its id was left by a dead process, and is removed. (A live
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

/// Removes the files of `dir` whose names start with `<pid>:`; returns how
/// many were removed.
fn remove_regions_of(dir: &Path, pid: u32) -> usize {
    let prefix = format!("{pid}:");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
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
            "123:0:0", "123:1:0", "1234:0:0", "12:0:0", "x123:0:0", "123",
        ] {
            std::fs::write(dir.join(name), b"region").unwrap();
        }
        assert_eq!(remove_regions_of(&dir, 123), 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["123", "1234:0:0", "12:0:0", "x123:0:0"]);
        assert_eq!(remove_regions_of(&dir.join("absent"), 123), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
