//! Same-node replica files, shared instead of copied.
//!
//! A buddy that runs on the same node as an original's owner gains nothing
//! from a private copy of the bytes: the owner's disk copy already outlives
//! the owner's process (it stays in the node's page cache and on its disk),
//! and whatever takes the node down takes the buddy with it. Such a buddy
//! maps the owner's replica file read-only instead: no copy and no
//! checksum pass when the copy is made (the checksum is still verified
//! when the copy is read for recovery), and the mapping keeps the file's
//! pages even after the owner deletes the file or dies. The mapping is
//! exposed for gets like any other buffer.

use bytes::Bytes;
use std::io;
use std::path::Path;

/// This node's token (a hash of the kernel's boot id and the PID and
/// mount namespaces), or 0 if it cannot be known. Two ranks with the same
/// non-zero token run on one kernel and share a mount namespace, so a path
/// means the same file to both (and if it somehow does not, the offer's
/// length and checksum do not match and the buddy copies the bytes).
pub fn node_token() -> u64 {
    crate::same_node::node_token()
}

/// Maps the file at `path` read-only; fails unless it is exactly `len`
/// bytes long, and unless it is a private file of this user
/// ([`crate::private::open_owned`]: another user could truncate a file
/// of theirs under the mapping).
pub fn map(path: &Path, len: u64) -> io::Result<Bytes> {
    let file = crate::private::open_owned(path)?;
    let actual = file.metadata()?.len();
    if actual != len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {actual} bytes, expected {len}", path.display()),
        ));
    }
    if len == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: a replica file is written once, under a temporary name that
    // is then renamed, and never modified in place afterwards; taskfold
    // only deletes it, which leaves a mapping's pages intact. The mapping
    // is read-only. (A process outside the job truncating the file would
    // make reads fault: the replica directory belongs to the job.)
    let map = unsafe { memmap2::Mmap::map(&file)? };
    Ok(Bytes::from_owner(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_a_file_that_outlives_its_name() {
        let dir = std::env::temp_dir().join(format!("tf-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("copy");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        crate::private::write_atomic(&path, &data).unwrap();
        let mapped = map(&path, data.len() as u64).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&mapped[..], &data[..], "the pages stay after the unlink");
        assert_eq!(mapped.as_ptr() as usize % 16, 0, "aligned for rkyv");
        crate::private::write_atomic(&path, &data).unwrap();
        assert_eq!(
            map(&path, 5).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        // A file others may write is not mapped.
        std::fs::write(dir.join("open"), &data).unwrap();
        std::fs::set_permissions(
            dir.join("open"),
            std::os::unix::fs::PermissionsExt::from_mode(0o666),
        )
        .unwrap();
        assert_eq!(
            map(&dir.join("open"), data.len() as u64)
                .unwrap_err()
                .kind(),
            io::ErrorKind::PermissionDenied
        );
        assert!(map(&dir.join("missing"), 5).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_ne!(node_token(), 0);
    }
}
