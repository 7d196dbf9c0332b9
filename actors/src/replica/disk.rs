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

/// Files smaller than this are small: their pages cost little to fill
/// anew, their inode does not (below).
const MIN_SPARE: u64 = 1 << 20;

/// Small files kept at most, beside the large ones: making a file
/// allocates an inode, and with many ranks writing a small original's
/// copy every reduction (their buddies on other nodes), ext4's inode
/// allocation is where that copy spent its time; a kept file is renamed
/// back instead. A few suffice for a run of same-size reductions, and
/// they never take a large spare's place.
const SMALL_SPARES: usize = 8;

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
        Self::discard(self.retire_key(key));
    }

    /// As [`Self::remove_key`], but the older spares that the files of
    /// `key` pushed out of the bounds are returned, not deleted: deleting
    /// a large file frees its blocks, which may take long, and a caller on
    /// a thread that must not wait gives them to [`Self::discard`] on
    /// another. Retiring itself is a rename (or the deletion of a small
    /// file).
    pub fn retire_key(&self, key: u64) -> Vec<PathBuf> {
        let prefix = format!("{key:016x}-");
        let mut evicted = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    evicted.extend(self.retire(e.path()));
                }
            }
        }
        evicted
    }

    /// Deletes spares that [`Self::retire_key`] pushed out.
    pub fn discard(evicted: Vec<PathBuf>) {
        for f in evicted {
            let _ = std::fs::remove_file(f);
        }
    }

    fn lock_spares(&self) -> std::sync::MutexGuard<'_, Spares> {
        // A list of paths: consistent after any panic.
        self.spares.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the file at `path` as a spare, or removes it if it is small
    /// and [`SMALL_SPARES`] are kept already (or it cannot be renamed).
    /// Returns the oldest spares that made room, to be deleted.
    fn retire(&self, path: PathBuf) -> Vec<PathBuf> {
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        let mut s = self.lock_spares();
        let small = |l: u64| l < MIN_SPARE;
        if small(len) && s.files.iter().filter(|(_, l)| small(*l)).count() >= SMALL_SPARES {
            drop(s);
            let _ = std::fs::remove_file(path);
            return Vec::new();
        }
        let spare = self.dir.join(format!("spare-{}.tmp", s.next));
        s.next += 1;
        if std::fs::rename(&path, &spare).is_err() {
            drop(s);
            let _ = std::fs::remove_file(path);
            return Vec::new();
        }
        s.files.push((spare, len));
        let mut old = Vec::new();
        while s.files.len() > MAX_SPARES
            || s.files.iter().map(|(_, l)| l).sum::<u64>() > self.spare_bytes
        {
            old.push(s.files.remove(0).0);
        }
        old
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
mod tests;
