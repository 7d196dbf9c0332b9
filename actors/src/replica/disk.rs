//! Replica files: one per (reduction, owner), in this rank's replica
//! directory. Every read verifies the checksum in the replica header.

use bytes::Bytes;
use std::io::Write;
use std::path::{Path, PathBuf};
use taskfold_core::replica;

/// This rank's replica directory.
#[derive(Debug)]
pub struct ReplicaDisk {
    dir: PathBuf,
    /// Remove the directory on drop (it was made for this process).
    owned: bool,
}

impl ReplicaDisk {
    /// Opens (creating) `dir`, or a fresh per-process directory under the
    /// system's temporary directory.
    pub fn open(dir: Option<&Path>, rank: u32) -> std::io::Result<Self> {
        let (dir, owned) = match dir {
            Some(d) => (d.join(format!("rank-{rank}")), false),
            None => (
                std::env::temp_dir()
                    .join(format!("taskfold-replicas-{}-r{rank}", std::process::id())),
                true,
            ),
        };
        std::fs::create_dir_all(&dir)?;
        Ok(ReplicaDisk { dir, owned })
    }

    fn path(&self, key: u64, owner: u32) -> PathBuf {
        file_in(&self.dir, key, owner)
    }

    /// This rank's directory, if it was configured (`replica_dir`), so that
    /// other ranks on the node or on a shared file system can find it.
    pub fn shared_dir(&self) -> Option<String> {
        (!self.owned).then(|| self.dir.to_string_lossy().into_owned())
    }

    /// Reads and verifies another rank's disk copy of `owner`'s original of
    /// `key`, in that rank's directory `dir`.
    pub fn read_other(dir: &Path, key: u64, owner: u32) -> Result<Bytes, String> {
        let path = file_in(dir, key, owner);
        let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        replica::verify(&data).map_err(|e| format!("{}: {e}", path.display()))?;
        metrics::counter!(crate::metrics::REPLICA_BYTES_READ).increment(data.len() as u64);
        Ok(Bytes::from(data))
    }

    /// Writes a replica buffer (header + archive). A full disk is
    /// an error value, never a crash.
    pub fn write(&self, key: u64, owner: u32, buf: &[u8]) -> std::io::Result<()> {
        match self.write_file(key, owner, buf) {
            // The reduction ended while we wrote, and its files were removed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.dir.exists() => Ok(()),
            other => other,
        }
    }

    fn write_file(&self, key: u64, owner: u32, buf: &[u8]) -> std::io::Result<()> {
        let path = self.path(key, owner);
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        // No fsync: the copy guards against the process dying, and the page
        // cache outlives the process; a node crash takes the disk's value to
        // the other ranks with it anyway.
        f.write_all(buf)?;
        drop(f);
        std::fs::rename(&tmp, &path)?;
        metrics::counter!(crate::metrics::REPLICA_BYTES_WRITTEN).increment(buf.len() as u64);
        Ok(())
    }

    /// Reads and verifies a replica buffer.
    pub fn read(&self, key: u64, owner: u32) -> Result<Bytes, String> {
        let path = self.path(key, owner);
        let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        replica::verify(&data).map_err(|e| format!("{}: {e}", path.display()))?;
        metrics::counter!(crate::metrics::REPLICA_BYTES_READ).increment(data.len() as u64);
        Ok(Bytes::from(data))
    }

    /// Removes every replica file of reduction `key`.
    pub fn remove_key(&self, key: u64) {
        let prefix = format!("{key:016x}-");
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

fn file_in(dir: &Path, key: u64, owner: u32) -> PathBuf {
    dir.join(format!("{key:016x}-{owner}.replica"))
}

impl Drop for ReplicaDisk {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
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

    fn tempdir() -> PathBuf {
        let p = std::env::temp_dir().join(format!("tf-disk-test-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}
