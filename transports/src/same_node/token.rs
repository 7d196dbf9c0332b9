//! The node token: which ranks share a kernel, and so can read each
//! other's memory.

use std::os::unix::fs::MetadataExt;

/// This node's token, or 0 if it cannot be known (then nothing is read in
/// place or lent). It hashes the kernel's boot id with the PID and mount
/// namespaces, so two processes agree only if they share all three: the
/// same kernel, PIDs that mean the same process, and paths (`/dev/shm`,
/// replica files) that mean the same file. Ranks in different mount
/// namespaces (as the simulated nodes of `taskfold run --sim-nodes`) are on
/// different nodes. Read once per process.
pub fn node_token() -> u64 {
    static TOKEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOKEN.get_or_init(read_node_token)
}

fn read_node_token() -> u64 {
    let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
        return 0;
    };
    let (Ok(pid), Ok(mnt)) = (
        std::fs::metadata("/proc/self/ns/pid"),
        std::fs::metadata("/proc/self/ns/mnt"),
    ) else {
        return 0;
    };
    let h = taskfold_core::id::stable_hash(&format!(
        "{}/{}:{}/{}:{}",
        boot.trim(),
        pid.dev(),
        pid.ino(),
        mnt.dev(),
        mnt.ino()
    ));
    h | 1
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_token_is_known_and_stable() {
        assert_ne!(
            super::node_token(),
            0,
            "Linux has a boot id and a pid namespace"
        );
        assert_eq!(super::node_token(), super::node_token());
    }
}
