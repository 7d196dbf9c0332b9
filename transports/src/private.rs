//! Private files: what taskfold writes on a node that other users share.
//!
//! Every directory a job makes (the launcher's job directory, replica
//! directories) is created mode 0700, every file (replica files, their
//! temporaries, the rendezvous file) mode 0600, and never through a link
//! planted in advance:
//!
//! - [`create_file`] creates a new file only (`O_CREAT | O_EXCL`, plus
//!   `O_NOFOLLOW`): a file or a symbolic link already at the path makes it
//!   fail, so a planted link never truncates or writes its target.
//! - [`create_dir`] / [`create_dir_all`] create directories 0700; one that
//!   already exists is used only if [`check_dir`] accepts it: a real
//!   directory (not a symbolic link), owned by this user, with no
//!   permission for group or others.
//! - [`open_owned`] opens a file another process of the job wrote (the
//!   rendezvous file, a same-node replica file) without following a
//!   symbolic link, and refuses it unless it is a regular file owned by
//!   this user with no permission for group or others: a file planted by
//!   another user is never believed.
//! - [`fresh_dir`] makes a new private directory with an unguessable name
//!   (`mkdtemp`) under the system's temporary directory (`$TMPDIR`, else
//!   `/tmp`). Not under `$XDG_RUNTIME_DIR`: that is a small memory file
//!   system on most systems, and replica files are as large as the data
//!   reduced; an unguessable name created exclusively, mode 0700, is as
//!   safe in a shared directory.
//!
//! A failure is an [`std::io::Error`] whose message names the path and
//! what is wrong with it (kind `PermissionDenied` for a refused file or
//! directory); nothing at the path is changed by a refusal.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of the directories taskfold creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the files taskfold creates.
pub const FILE_MODE: u32 = 0o600;

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn refused(path: &Path, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{}: refused: {why}", path.display()),
    )
}

/// Whether `meta` (of `path`, read without following a link) is owned by
/// this user and gives no permission to group or others; `what` names the
/// kind of file in the error.
fn check_private(path: &Path, meta: &Metadata, what: &str) -> io::Result<()> {
    let me = euid();
    if meta.uid() != me {
        return Err(refused(
            path,
            format!(
                "the {what} is owned by user {}, not by this user ({me})",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(refused(
            path,
            format!("the {what} has mode {mode:04o}: group or others may use it (expected no bits beyond 0700)"),
        ));
    }
    Ok(())
}

/// Checks that `path` is a private directory of this user: a directory
/// itself (not a symbolic link to one), owned by this user, mode 0700 or
/// stricter.
pub fn check_dir(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    if meta.file_type().is_symlink() {
        return Err(refused(path, "a symbolic link, not a directory".into()));
    }
    if !meta.is_dir() {
        return Err(refused(path, "not a directory".into()));
    }
    check_private(path, &meta, "directory")
}

/// Creates the directory `path` mode 0700 (its parent must exist); if it
/// exists already, it is used only if [`check_dir`] accepts it.
pub fn create_dir(path: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(DIR_MODE).create(path) {
        Ok(()) => check_dir(path),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => check_dir(path),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

/// Creates `path` and its missing parents, each mode 0700, and checks
/// `path` with [`check_dir`] (the parents that existed are left as they
/// are: they are where the caller chose to put the directory).
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .mode(DIR_MODE)
        .recursive(true)
        .create(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    check_dir(path)
}

/// Creates a new file at `path`, mode 0600, for writing. Fails if anything
/// is at `path` already, a symbolic link included (its target is not
/// touched).
pub fn create_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                refused(
                    path,
                    "something is already there (a file or a symbolic link); it is left untouched"
                        .into(),
                )
            } else {
                io::Error::new(e.kind(), format!("{}: {e}", path.display()))
            }
        })
}

/// Opens the file at `path` without following a symbolic link, for
/// reading (and writing if `write`), and checks it: a regular file owned
/// by this user with no permission for group or others.
fn open_checked(path: &Path, write: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                refused(path, "a symbolic link".into())
            } else {
                io::Error::new(e.kind(), format!("{}: {e}", path.display()))
            }
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused(path, "not a regular file".into()));
    }
    check_private(path, &meta, "file")?;
    Ok(file)
}

/// Opens a file that a process of this job wrote, for reading, if it is
/// one this user made privately (see the [module documentation](self)).
pub fn open_owned(path: &Path) -> io::Result<File> {
    open_checked(path, false)
}

/// As [`open_owned`], for writing over a file of this user in place (a
/// replica file kept for reuse).
pub fn open_owned_for_write(path: &Path) -> io::Result<File> {
    open_checked(path, true)
}

/// Opens descriptor `fd` of process `pid` through `/proc/<pid>/fd` (a
/// same-node peer's shared heap or the master's notice board, which the
/// peer names in its messages), for reading (and writing if `write`),
/// and checks what was opened as [`open_owned`] does: a regular file
/// owned by this user with no permission for group or others (else an
/// error of kind `InvalidData`, naming the path and why). Opened
/// without blocking (a FIFO named there is refused, not waited on); the
/// process must be this user's (the kernel's own check on `/proc/<pid>/fd`
/// asks the right to trace it).
pub fn open_peer_fd(pid: u32, fd: impl std::fmt::Display, write: bool) -> io::Result<File> {
    let path = PathBuf::from(format!("/proc/{pid}/fd/{fd}"));
    // No O_NOFOLLOW: these entries are the kernel's links to the open
    // files themselves, not names another user could plant.
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let meta = file.metadata()?;
    // Refused as "not what was named" (`InvalidData`), not as the kernel
    // saying no: the descriptor may have been closed and reused.
    let not_named = |e: io::Error| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    if !meta.is_file() {
        return Err(not_named(refused(&path, "not a regular file".into())));
    }
    check_private(&path, &meta, "file").map_err(not_named)?;
    Ok(file)
}

/// Reads the whole file at `path` after [`open_owned`] accepted it,
/// refusing one longer than `max` bytes.
pub fn read_owned(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let file = open_owned(path)?;
    let len = file.metadata()?.len();
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: {len} bytes, more than the {max} expected",
                path.display()
            ),
        ));
    }
    let mut buf = Vec::with_capacity(len as usize);
    file.take(max).read_to_end(&mut buf)?;
    Ok(buf)
}

/// 64 random bits in hexadecimal: a temporary name nobody can plant a
/// file at in advance.
fn random_suffix() -> io::Result<String> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| io::Error::other(format!("no random name: {e}")))?;
    Ok(format!("{:016x}", u64::from_le_bytes(b)))
}

/// Writes `bytes` to `path` atomically and privately: into a new
/// temporary file mode 0600 beside it with a random name ([`create_file`]),
/// synced, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let tmp = path.with_file_name(format!(".{name}.tmp.{}", random_suffix()?));
    let mut f = create_file(&tmp)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())));
    }
    Ok(())
}

/// Makes a new private directory (mode 0700) named `prefix` followed by
/// random characters, under the system's temporary directory (`$TMPDIR`,
/// else `/tmp`; see the [module documentation](self)). The caller
/// removes it.
pub fn fresh_dir(prefix: &str) -> io::Result<PathBuf> {
    fresh_dir_in(&std::env::temp_dir(), prefix)
}

/// As [`fresh_dir`], under `base`.
pub fn fresh_dir_in(base: &Path, prefix: &str) -> io::Result<PathBuf> {
    use std::ffi::CString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    if prefix.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a directory prefix has no '/'",
        ));
    }
    let template = base.join(format!("{prefix}XXXXXX"));
    let mut raw = CString::new(template.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?
        .into_bytes_with_nul();
    // SAFETY: `raw` is a writable, NUL-terminated buffer ending in six
    // `X`s, which `mkdtemp` replaces in place; the result is checked.
    let made = unsafe { libc::mkdtemp(raw.as_mut_ptr().cast()) };
    if made.is_null() {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{}: {e}", base.display())));
    }
    raw.pop();
    let path = PathBuf::from(std::ffi::OsString::from_vec(raw));
    // mkdtemp creates it 0700; check it all the same (a strict umask
    // never widens a mode).
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(DIR_MODE))?;
    check_dir(&path)?;
    Ok(path)
}

#[cfg(test)]
mod tests;
