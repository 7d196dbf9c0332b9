//! Replica files: one per (reduction, owner), in this rank's replica
//! directory. Every read verifies the checksum in the replica header.

use bytes::Bytes;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;
use taskfold_core::replica;
use taskfold_transports::private;

/// This rank's replica directory.
#[derive(Debug)]
pub struct ReplicaDisk {
    dir: PathBuf,
    /// Remove the directory on drop (it was made for this process).
    owned: bool,
    /// Held while an original's file is renamed into place and while a
    /// reduction's writes are sealed: once [`ReplicaDisk::seal`] returns, no
    /// write of that reduction can still create its file.
    commit: Mutex<()>,
    /// Files of ended reductions kept for reuse (see [`SPARE_BYTES`]).
    spares: Mutex<Spares>,
    /// Bound on the spares' bytes (tests lower it).
    spare_bytes: u64,
}

/// Files of ended reductions are kept, up to this many bytes, to be written
/// over: writing into a file's existing pages costs a fraction of filling
/// fresh ones (no page allocation and zeroing), and removing a file frees its pages only to allocate them again for the
/// next reduction. Enough for 28 concurrent reductions of 8 MiB; the same
/// bound as the buffer pool's default. Oldest spares go first.
const SPARE_BYTES: u64 = 256 << 20;

/// And at most this many files.
const MAX_SPARES: usize = 64;

/// Files smaller than this are removed, not kept (cheap to write anew).
const MIN_SPARE: u64 = 1 << 20;

#[derive(Debug, Default)]
struct Spares {
    /// Paths and lengths, oldest first.
    files: Vec<(PathBuf, u64)>,
    next: u64,
}

impl ReplicaDisk {
    /// Opens (creating) this rank's directory under the configured root
    /// `dir`, or a fresh per-process directory with an unguessable name
    /// (`mkdtemp` under the system's temporary directory).
    /// Either is private (mode 0700, this user's): a directory or a link
    /// planted at the rank's path is refused, naming it (see
    /// [`taskfold_transports::private`]).
    pub fn open(dir: Option<&Path>, rank: u32) -> std::io::Result<Self> {
        let (dir, owned) = match dir {
            Some(d) => {
                let dir = rank_dir(d, rank);
                private::create_dir_all(&dir)?;
                (dir, false)
            }
            None => (
                private::fresh_dir(&format!("taskfold-replicas-r{rank}-"))?,
                true,
            ),
        };
        Ok(ReplicaDisk {
            dir,
            owned,
            commit: Mutex::new(()),
            spares: Mutex::new(Spares::default()),
            spare_bytes: SPARE_BYTES,
        })
    }

    /// Where this rank's copy of `owner`'s original of `key` is kept.
    pub(crate) fn path(&self, key: u64, owner: u32) -> PathBuf {
        file_in(&self.dir, key, owner)
    }

    /// This rank's directory, if it was configured (`replica_dir`), so that
    /// other ranks on the node or on a shared file system can find it.
    pub fn shared_dir(&self) -> Option<String> {
        (!self.owned).then(|| self.dir.to_string_lossy().into_owned())
    }

    /// The directory of `rank`'s disk copies beside this rank's, on this
    /// node's disk (the layout of [`ReplicaDisk::open`]); `None` if this
    /// rank's directory is its own, not under a configured root.
    pub(crate) fn peer_dir(&self, rank: u32) -> Option<PathBuf> {
        let root = self.dir.parent().filter(|_| !self.owned)?;
        Some(rank_dir(root, rank))
    }

    /// Reads and verifies another rank's disk copy of `owner`'s original of
    /// `key`, in that rank's directory `dir`.
    pub fn read_other(dir: &Path, key: u64, owner: u32) -> Result<Bytes, String> {
        let path = file_in(dir, key, owner);
        let data = read_replica_file(&path)?;
        replica::verify(&data).map_err(|e| format!("{}: {e}", path.display()))?;
        metrics::counter!(crate::metrics::REPLICA_BYTES_READ).increment(data.len() as u64);
        Ok(Bytes::from(data))
    }

    /// Writes a replica buffer (header + archive) whatever the state of its
    /// reduction (tests set up files with it). A full disk is an error
    /// value, never a crash.
    #[cfg(test)]
    pub fn write(&self, key: u64, owner: u32, buf: &[u8]) -> std::io::Result<()> {
        match self.write_file(key, owner, buf) {
            // The reduction ended while we wrote, and its files were removed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.dir.exists() => Ok(()),
            other => other,
        }
    }

    #[cfg(test)]
    fn write_file(&self, key: u64, owner: u32, buf: &[u8]) -> std::io::Result<()> {
        self.write_file_if(key, owner, buf, None).map(|_| ())
    }

    /// Writes this rank's own original of `key`, unless its reduction was
    /// sealed (`live` false) meanwhile: a write that lands after its
    /// reduction ended would leave a file the master could mistake for the
    /// original of a later reduction with the same key. Returns whether the
    /// file was written.
    pub fn write_original(
        &self,
        key: u64,
        owner: u32,
        buf: &[u8],
        live: &AtomicBool,
    ) -> std::io::Result<bool> {
        match self.write_file_if(key, owner, buf, Some(live)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.dir.exists() => Ok(false),
            other => other,
        }
    }

    /// Ends the writes of a reduction: clears `live` under the commit lock,
    /// so that a write in progress either renamed its file before (and the
    /// reduction's removal that follows deletes it) or never will.
    pub fn seal(&self, live: &AtomicBool) {
        let _g = self.commit.lock().unwrap_or_else(|e| e.into_inner());
        live.store(false, Ordering::SeqCst);
    }

    fn write_file_if(
        &self,
        key: u64,
        owner: u32,
        buf: &[u8],
        live: Option<&AtomicBool>,
    ) -> std::io::Result<bool> {
        let path = self.path(key, owner);
        // A spare file of the same length is written over (its pages are
        // reused), else a new one is made. Only an exact fit: cutting a
        // longer file costs even for a few bytes (ext4 zeroes the tail of
        // the last, possibly large, folio and frees its blocks).
        let len = buf.len() as u64;
        let spare = {
            let mut s = self.lock_spares();
            let i = s.files.iter().rposition(|(_, l)| *l == len);
            i.map(|i| s.files.remove(i).0)
        };
        let (tmp, mut f) =
            match spare.and_then(|p| private::open_owned_for_write(&p).ok().map(|f| (p, f))) {
                Some(s) => s,
                None => {
                    // A temporary left by a failed write of this rank goes
                    // first: the new one is created, never opened through
                    // whatever is at its name.
                    let tmp = path.with_extension("tmp");
                    let _ = std::fs::remove_file(&tmp);
                    let f = private::create_file(&tmp)?;
                    (tmp, f)
                }
            };
        // No fsync: the copy guards against the process dying, and the page
        // cache outlives the process; a node crash takes the disk's value to
        // the other ranks with it anyway.
        let written = f.write_all(buf);
        drop(f);
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        {
            let _g = self.commit.lock().unwrap_or_else(|e| e.into_inner());
            if live.is_some_and(|l| !l.load(Ordering::SeqCst)) {
                let _ = std::fs::remove_file(&tmp);
                return Ok(false);
            }
            std::fs::rename(&tmp, &path)?;
        }
        metrics::counter!(crate::metrics::REPLICA_BYTES_WRITTEN).increment(buf.len() as u64);
        Ok(true)
    }

    /// Reads and verifies a replica buffer.
    pub fn read(&self, key: u64, owner: u32) -> Result<Bytes, String> {
        let path = self.path(key, owner);
        let data = read_replica_file(&path)?;
        replica::verify(&data).map_err(|e| format!("{}: {e}", path.display()))?;
        metrics::counter!(crate::metrics::REPLICA_BYTES_READ).increment(data.len() as u64);
        Ok(Bytes::from(data))
    }

    /// Removes every replica file of reduction `key` (keeping large ones,
    /// renamed and up to `SPARE_BYTES`, to be written over later).
    ///
    /// A buddy on this node that mapped such a file would see it change
    /// when it is reused; the reduction has ended by then, and a buddy's
    /// copy is verified against its checksum whenever it is read.
    pub fn remove_key(&self, key: u64) {
        let prefix = format!("{key:016x}-");
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    self.retire(e.path());
                }
            }
        }
    }

    fn lock_spares(&self) -> std::sync::MutexGuard<'_, Spares> {
        // A list of paths: consistent after any panic.
        self.spares.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the file at `path` as a spare (the oldest spare makes room),
    /// or removes it if it is small.
    fn retire(&self, path: PathBuf) {
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        if len < MIN_SPARE {
            let _ = std::fs::remove_file(path);
            return;
        }
        let mut s = self.lock_spares();
        let spare = self.dir.join(format!("spare-{}.tmp", s.next));
        s.next += 1;
        if std::fs::rename(&path, &spare).is_err() {
            drop(s);
            let _ = std::fs::remove_file(path);
            return;
        }
        s.files.push((spare, len));
        let mut old = Vec::new();
        while s.files.len() > MAX_SPARES
            || s.files.iter().map(|(_, l)| l).sum::<u64>() > self.spare_bytes
        {
            old.push(s.files.remove(0).0);
        }
        drop(s);
        for f in old {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The replica directory of `rank` under a configured (shared) replica
/// directory `root`: the one layout both a rank and the master use.
pub(crate) fn rank_dir(root: &Path, rank: u32) -> PathBuf {
    root.join(format!("rank-{rank}"))
}

/// The file holding `owner`'s original of `key` in directory `dir`.
pub(crate) fn file_in(dir: &Path, key: u64, owner: u32) -> PathBuf {
    dir.join(format!("{key:016x}-{owner}.replica"))
}

/// The keys of `owner`'s originals with a file in directory `dir` (named
/// as [`file_in`] names them; anything else there is passed over).
pub(crate) fn keys_in(dir: &Path, owner: u32) -> Vec<u64> {
    let suffix = format!("-{owner}.replica");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let hex = name.strip_suffix(&suffix)?;
            (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
        })
        .collect()
}

/// What the master can learn cheaply about a replica file without reading
/// it whole: when it was last written, its length, and its header.
#[derive(Clone, Debug)]
pub(crate) struct FileFacts {
    /// Last modification (the time its content was written: renaming the
    /// file into place does not change it).
    pub(crate) modified: SystemTime,
    /// Length in bytes.
    pub(crate) len: u64,
    /// The first [`replica::HEADER_LEN`] bytes (fewer if the file is shorter).
    pub(crate) header: Vec<u8>,
}

/// Reads a replica file, as the job's private files are read (a regular
/// file of this user's, private, not through a symbolic link, no FIFO or
/// device: `taskfold_transports::private`), and no more of it than its
/// header announces, which must be its length: a directory a peer names
/// can make this rank read only a replica file of this user's.
fn read_replica_file(path: &Path) -> Result<Vec<u8>, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = private::open_owned(path).map_err(|e| at(&e))?;
    let len = file.metadata().map_err(|e| at(&e))?.len();
    let mut header = Vec::with_capacity(replica::HEADER_LEN);
    let mut file = std::io::BufReader::new(file);
    (&mut file)
        .take(replica::HEADER_LEN as u64)
        .read_to_end(&mut header)
        .map_err(|e| at(&e))?;
    // The length field of any replica header (checked or not: `verify`
    // says what is wrong with the rest).
    let total = header
        .get(8..16)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .and_then(|n| n.checked_add(replica::HEADER_LEN as u64))
        .ok_or_else(|| at(&"not a replica file"))?;
    if total != len {
        return Err(at(&format!(
            "its header announces {total} bytes, it holds {len}"
        )));
    }
    let mut data = header;
    data.try_reserve_exact(len as usize - data.len())
        .map_err(|e| at(&e))?;
    file.take(len - replica::HEADER_LEN as u64)
        .read_to_end(&mut data)
        .map_err(|e| at(&e))?;
    Ok(data)
}

/// Reads the facts of the file at `path`; `None` if it cannot be read.
pub(crate) fn file_facts(path: &Path) -> Option<FileFacts> {
    let mut f = std::fs::File::open(path).ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut header = Vec::with_capacity(replica::HEADER_LEN);
    (&mut f)
        .take(replica::HEADER_LEN as u64)
        .read_to_end(&mut header)
        .ok()?;
    Some(FileFacts {
        modified: meta.modified().ok()?,
        len: meta.len(),
        header,
    })
}

/// Compares the file system's clock with this process's: writes a probe
/// file in `dir` and returns how far its modification time is ahead of the
/// clock read just after the write (zero if it is not ahead). `Err` if the
/// probe cannot be written or its time read.
pub(crate) fn clock_lead(dir: &Path) -> std::io::Result<std::time::Duration> {
    let probe = dir.join(format!(".clock-probe-{}", std::process::id()));
    let _ = std::fs::remove_file(&probe);
    private::create_file(&probe)?.write_all(b"probe")?;
    let after = SystemTime::now();
    let modified = std::fs::metadata(&probe).and_then(|m| m.modified());
    let _ = std::fs::remove_file(&probe);
    Ok(modified?.duration_since(after).unwrap_or_default())
}

impl Drop for ReplicaDisk {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            for (f, _) in self.lock_spares().files.drain(..) {
                let _ = std::fs::remove_file(f);
            }
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
        let original = |fill: u8, len: usize| {
            let payload = vec![fill; len];
            let mut buf = vec![0u8; replica::HEADER_LEN];
            replica::write_header(&mut buf, &payload);
            buf.extend_from_slice(&payload);
            buf
        };
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
        let spares = || {
            std::fs::read_dir(rank_dir(&tmp, 1))
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .starts_with("spare-")
                })
                .count()
        };
        assert_eq!(spares(), 4);
        drop(d);
        assert_eq!(spares(), 0);
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
}
