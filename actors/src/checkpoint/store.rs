//! One directory of checkpoint pieces: atomic writes, validated reads,
//! the last versions kept.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use taskfold_core::checkpoint::piece::{self, Expect, Header, PieceError};
use taskfold_core::checkpoint::Level;

/// Suffix of a piece's file.
const SUFFIX: &str = ".tfck";
/// Marks a temporary file (a write under way, or cut short by a crash).
const TEMP: &str = ".tmp-";

/// Why the store refuses its directory or a piece.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file-system call failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The directory is a symbolic link (it could point anywhere).
    #[error("{0}: a symbolic link, refused")]
    Symlink(PathBuf),
    /// The path is not a directory.
    #[error("{0}: not a directory")]
    NotDir(PathBuf),
    /// The directory belongs to another user.
    #[error("{path}: owned by uid {owner}, this process runs as uid {euid}")]
    Owner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        euid: u32,
    },
    /// Others may write into the directory (mode 0700 is required).
    #[error("{path}: mode {mode:04o} lets other users in (0700 required)")]
    Mode {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The temporary file of a write already exists: planted, or left by
    /// a crashed writer of the same process id. Nothing was written.
    #[error("{0}: temporary file already exists, not written through")]
    TempExists(PathBuf),
    /// The piece's name holds something other than a regular file.
    #[error("{0}: not a regular file")]
    NotAFile(PathBuf),
    /// The piece is refused (damaged, foreign, or not the one asked for).
    #[error("{path}: {source}")]
    Piece {
        /// The piece's file.
        path: PathBuf,
        /// Why it is refused.
        #[source]
        source: PieceError,
    },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Which piece a file holds, as its name says (the header, checked when
/// the file is read, has the last word).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PieceKey {
    /// The piece's owner.
    pub owner: u32,
    /// Its level.
    pub level: Level,
    /// L3 only: its group and shard index.
    pub shard: Option<(u32, u16)>,
    /// Its version.
    pub version: u64,
}

impl PieceKey {
    /// The key of the piece `header` describes.
    pub fn of(header: &Header) -> PieceKey {
        PieceKey {
            owner: header.owner,
            level: header.level,
            shard: header.shard.as_ref().map(|s| (s.group, s.index)),
            version: header.version,
        }
    }

    /// Its file name: `r<owner>-L<level>[-g<group>-s<index>]-v<version>.tfck`.
    fn file_name(&self) -> String {
        let shard = self
            .shard
            .map_or(String::new(), |(g, i)| format!("-g{g}-s{i}"));
        let (owner, level, version) = (self.owner, self.level.number(), self.version);
        format!("r{owner}-L{level}{shard}-v{version}{SUFFIX}")
    }

    /// The key a file name gives, if it is a piece's name.
    fn parse(name: &str) -> Option<PieceKey> {
        let stem = name.strip_suffix(SUFFIX)?;
        let mut parts = stem.split('-');
        let num = |p: Option<&str>, tag: char| p?.strip_prefix(tag)?.parse::<u64>().ok();
        let owner = u32::try_from(num(parts.next(), 'r')?).ok()?;
        let level = Level::from_number(u8::try_from(num(parts.next(), 'L')?).ok()?)?;
        let shard = if level == Level::L3 {
            let g = u32::try_from(num(parts.next(), 'g')?).ok()?;
            Some((g, u16::try_from(num(parts.next(), 's')?).ok()?))
        } else {
            None
        };
        let version = num(parts.next(), 'v')?;
        let key = PieceKey {
            owner,
            level,
            shard,
            version,
        };
        (parts.next().is_none() && key.file_name() == name).then_some(key)
    }

    /// Whether two keys are versions of one piece.
    fn same_piece(&self, other: &PieceKey) -> bool {
        (self.owner, self.level, self.shard) == (other.owner, other.level, other.shard)
    }
}

/// A piece read back and verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Its header.
    pub header: Header,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// One directory of checkpoint pieces.
#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    keep: usize,
    /// Versions from this one up are never pruned (`u64::MAX`: none):
    /// held while a global restart's meeting may agree on one of them.
    /// A prune holds the lock from reading the floor to its last removal,
    /// so a hold set while it runs waits for it: the versions listed after
    /// [`FileStore::hold_from`] returns are the ones that stay.
    floor: std::sync::Mutex<u64>,
}

fn nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Refuses `dir` unless it is a real directory, owned by this process's
/// user, closed to others; returns it opened (without following a link),
/// to sync it.
fn checked_dir(dir: &Path) -> Result<File, StoreError> {
    let md = fs::symlink_metadata(dir).map_err(io_at(dir))?;
    if md.file_type().is_symlink() {
        return Err(StoreError::Symlink(dir.to_path_buf()));
    }
    // Opened without following a link, and checked through the handle:
    // a link swapped in after the look above is refused too.
    let flags = nofollow() | rustix::fs::OFlags::DIRECTORY.bits() as i32;
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(dir)
        .map_err(|e| match e.raw_os_error() {
            Some(c) if c == rustix::io::Errno::LOOP.raw_os_error() => {
                StoreError::Symlink(dir.into())
            }
            Some(c) if c == rustix::io::Errno::NOTDIR.raw_os_error() => {
                StoreError::NotDir(dir.into())
            }
            _ => io_at(dir)(e),
        })?;
    let md = handle.metadata().map_err(io_at(dir))?;
    if !md.is_dir() {
        return Err(StoreError::NotDir(dir.to_path_buf()));
    }
    let euid = rustix::process::geteuid().as_raw();
    if md.uid() != euid {
        return Err(StoreError::Owner {
            path: dir.to_path_buf(),
            owner: md.uid(),
            euid,
        });
    }
    let mode = md.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(StoreError::Mode {
            path: dir.to_path_buf(),
            mode,
        });
    }
    Ok(handle)
}

impl FileStore {
    /// Opens the directory `dir`, creating it (mode 0700, its parents as
    /// the umask says) if absent, keeping the newest `keep` versions of
    /// each piece (at least 1). Refuses a directory that is a symbolic
    /// link, another user's, or open to others. Every write lists the
    /// directory (to drop old versions): in a shared directory, a
    /// subdirectory per rank keeps that cheap.
    pub fn open(dir: &Path, keep: usize) -> Result<FileStore, StoreError> {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(io_at(parent))?;
        }
        match fs::DirBuilder::new().mode(0o700).create(dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(io_at(dir)(e)),
            _ => {}
        }
        checked_dir(dir)?;
        Ok(FileStore {
            dir: dir.to_path_buf(),
            keep: keep.max(1),
            floor: std::sync::Mutex::new(u64::MAX),
        })
    }

    /// Removes the temporary files of `owner`'s pieces that a crashed
    /// write left behind (or that were planted: a link is removed, never
    /// its target). Only `owner`'s writer may call it: in a directory
    /// shared by several ranks, another owner's temporary file may be a
    /// write under way.
    pub fn sweep(&self, owner: u32) -> Result<(), StoreError> {
        let prefix = format!(".r{owner}-");
        for name in self.names()? {
            if name.starts_with(&prefix) && name.contains(TEMP) {
                let path = self.dir.join(&name);
                fs::remove_file(&path).map_err(io_at(&path))?;
            }
        }
        Ok(())
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the piece `key` is kept.
    pub fn path(&self, key: &PieceKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The temporary file a write of `key` goes through.
    fn temp_path(&self, key: &PieceKey) -> PathBuf {
        let pid = std::process::id();
        self.dir.join(format!(".{}{TEMP}{pid}", key.file_name()))
    }

    fn names(&self) -> Result<Vec<String>, StoreError> {
        let entries = fs::read_dir(&self.dir).map_err(io_at(&self.dir))?;
        let mut names = Vec::new();
        for e in entries {
            let e = e.map_err(io_at(&self.dir))?;
            if let Ok(name) = e.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// Writes a piece atomically: to a new temporary file (mode 0600, never
    /// through a link), synced, renamed over the piece's file, the
    /// directory synced; then drops the versions of that piece beyond the
    /// newest `keep`. Returns the piece's file. Two writes of one piece at
    /// once in one process share a temporary name: the second is refused
    /// ([`StoreError::TempExists`]), never interleaved.
    pub fn write(&self, header: &Header, payload: &[u8]) -> Result<PathBuf, StoreError> {
        let dir = checked_dir(&self.dir)?;
        let key = PieceKey::of(header);
        let path = self.path(&key);
        let (head, sum) = piece::frame(header, payload).map_err(|source| StoreError::Piece {
            path: path.clone(),
            source,
        })?;
        let temp = self.temp_path(&key);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nofollow())
            .open(&temp)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => StoreError::TempExists(temp.clone()),
                _ => io_at(&temp)(e),
            })?;
        let written = (|| {
            file.write_all(&head)?;
            file.write_all(payload)?;
            file.write_all(&sum)?;
            file.sync_all()?;
            fs::rename(&temp, &path)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            return Err(io_at(&path)(e));
        }
        dir.sync_all().map_err(io_at(&self.dir))?;
        self.prune(&key)?;
        Ok(path)
    }

    /// Every piece in the directory, by its file name, newest version
    /// first.
    pub fn list(&self) -> Result<Vec<PieceKey>, StoreError> {
        let mut keys: Vec<PieceKey> = self
            .names()?
            .iter()
            .filter_map(|n| PieceKey::parse(n))
            .collect();
        keys.sort_by(|a, b| b.version.cmp(&a.version).then(a.cmp(b)));
        Ok(keys)
    }

    /// The versions present of `owner`'s pieces at `level`, newest first
    /// (by file name; a version's piece may still prove damaged).
    pub fn versions(&self, owner: u32, level: Level) -> Result<Vec<u64>, StoreError> {
        let mut v: Vec<u64> = self
            .list()?
            .into_iter()
            .filter(|k| k.owner == owner && k.level == level)
            .map(|k| k.version)
            .collect();
        v.dedup();
        Ok(v)
    }

    /// Reads the piece `key` (never through a link) and verifies it: intact,
    /// and the one `expect` describes.
    pub fn read(&self, key: &PieceKey, expect: &Expect) -> Result<Stored, StoreError> {
        let path = self.path(key);
        // Not blocking on a FIFO planted in the piece's place either.
        let flags = nofollow() | rustix::fs::OFlags::NONBLOCK.bits() as i32;
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(&path)
            .map_err(io_at(&path))?;
        let md = file.metadata().map_err(io_at(&path))?;
        if !md.is_file() {
            return Err(StoreError::NotAFile(path));
        }
        let len = md.len();
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.read_to_end(&mut bytes).map_err(io_at(&path))?;
        let refused = |source| StoreError::Piece {
            path: path.clone(),
            source,
        };
        let piece = piece::check(&bytes, expect).map_err(refused)?;
        let header = piece.header;
        // The payload ends where the checksum trailer starts.
        let end = bytes.len() - piece::SUM_LEN;
        let start = end - piece.payload.len();
        bytes.truncate(end);
        bytes.drain(..start);
        Ok(Stored {
            header,
            payload: bytes,
        })
    }

    /// The newest version of the piece `expect` describes (its owner and
    /// level; any version if `expect.version` is `None`) that reads back
    /// intact and is the one expected. Every piece skipped on the way is
    /// logged with the reason. `None` if no version is fit.
    pub fn latest(&self, expect: &Expect) -> Result<Option<Stored>, StoreError> {
        for key in self.list()? {
            let wanted = expect.owner.is_none_or(|o| o == key.owner)
                && expect.level.is_none_or(|l| l == key.level)
                && expect.version.is_none_or(|v| v == key.version);
            if !wanted {
                continue;
            }
            let exact = Expect {
                version: Some(key.version),
                ..*expect
            };
            match self.read(&key, &exact) {
                Ok(stored) => return Ok(Some(stored)),
                Err(e) => tracing::warn!(
                    owner = key.owner,
                    version = key.version,
                    level = %key.level,
                    reason = %e,
                    "checkpoint piece skipped"
                ),
            }
        }
        Ok(None)
    }

    /// Keeps every version from `version` up, whatever `keep` says, until
    /// [`FileStore::release`]: a rank that reported the versions it holds
    /// to a global restart's meeting must still hold the one agreed on
    /// when it restores, though writes queued before the rollback land
    /// meanwhile. Returns once no prune that read the old floor is under
    /// way: `hold_from(0)`, then listing, lists versions none of which
    /// goes before the hold is moved or released.
    pub fn hold_from(&self, version: u64) {
        *self.floor_lock() = version;
    }

    /// Ends [`FileStore::hold_from`]: the next write prunes as usual.
    pub fn release(&self) {
        *self.floor_lock() = u64::MAX;
    }

    /// The floor, locked; a poisoned lock still guards a plain number.
    fn floor_lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.floor.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes the versions of `key`'s piece beyond the newest `keep`,
    /// except those held ([`FileStore::hold_from`]).
    fn prune(&self, key: &PieceKey) -> Result<(), StoreError> {
        // Held to the last removal: see `floor`.
        let held = self.floor_lock();
        let floor = *held;
        let old = self
            .list()?
            .into_iter()
            .filter(|k| k.same_piece(key))
            .skip(self.keep)
            .filter(|k| k.version < floor);
        for k in old {
            let path = self.path(&k);
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_at(&path)(e)),
                _ => {}
            }
        }
        drop(held);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
