//! The job key of a process: drawn fresh ([`fresh_key`], for a launcher),
//! or found where the settings say ([`job_auth`]: `TASKFOLD_JOB_KEY`, a
//! private file named by `TASKFOLD_JOB_KEY_FILE`, or the insecure mode of
//! `TASKFOLD_INSECURE`), and the handshake's nonces, from the operating
//! system's random source. The handshake itself is
//! [`taskfold_core::auth`]; the TCP transport runs it on every connection
//! (the libfabric transport's bootstrap goes through it too).
//!
//! Failures are [`TransportError::Auth`] values naming the variable at
//! fault; a key is never printed.

use crate::TransportError;
use std::path::Path;
use taskfold_core::auth::{JobAuth, JobKey, Nonce, KEY_EXPECTED, KEY_LEN, NONCE_LEN};
use taskfold_core::settings::launch::MISSING_KEY;
use taskfold_core::settings::{KeySource, Launch};

/// A fresh 256-bit job key from the operating system's random source.
pub fn fresh_key() -> Result<JobKey, TransportError> {
    let mut k = [0u8; KEY_LEN];
    getrandom::fill(&mut k)
        .map_err(|e| TransportError::Auth(format!("no random job key from the system: {e}")))?;
    Ok(JobKey::from_bytes(k))
}

/// A fresh nonce for one side of one handshake, or why there is none:
/// the handshake then ends (a predictable nonce would let a recorded
/// handshake be replayed against this side).
pub(crate) fn nonce() -> Result<Nonce, String> {
    nonce_from(getrandom::fill)
}

/// [`nonce`] with the random source given (a test makes it fail).
pub(crate) fn nonce_from(
    fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>,
) -> Result<Nonce, String> {
    let mut n = [0u8; NONCE_LEN];
    fill(&mut n).map_err(|e| format!("no random nonce from the system: {e}"))?;
    Ok(Nonce(n))
}

/// How this process proves it belongs to its job, from its settings: the
/// key given (read from its file if need be), or the insecure mode.
/// Without either, an error naming the variables ([`MISSING_KEY`]).
///
/// `TASKFOLD_JOB_KEY` is removed from this process's environment here,
/// once read: the processes the application starts do not inherit the
/// key unless it passes them one itself. (The environment the process
/// started with stays readable, as always, by its own user and root in
/// `/proc/<pid>/environ`.)
pub fn job_auth(launch: &Launch) -> Result<JobAuth, TransportError> {
    forget_env_key();
    match &launch.key {
        Some(KeySource::Value(k)) => Ok(JobAuth::Key(k.clone())),
        Some(KeySource::File(path)) => read_key_file(path).map(JobAuth::Key),
        None if launch.insecure => Ok(JobAuth::Insecure),
        None => Err(TransportError::Auth(MISSING_KEY.into())),
    }
}

/// Removes `TASKFOLD_JOB_KEY` from this process's environment.
fn forget_env_key() {
    if std::env::var_os(KEY_VAR).is_some() {
        // The environment is changed once, at the runtime's start, before
        // the transport's threads exist; an application thread reading
        // the environment meanwhile may miss this one variable, no more.
        std::env::remove_var(KEY_VAR);
    }
}

/// The variable holding the key itself.
const KEY_VAR: &str = "TASKFOLD_JOB_KEY";

/// Largest key file read: a key is 65 bytes or so.
const KEY_FILE_MAX: u64 = 4096;

/// Reads a key file: 64 hexadecimal digits, in a regular file of this
/// user's that no one else may read or write (as `ssh` asks of a private
/// key), opened as the job's private files are ([`crate::private`]: not
/// through a symbolic link, not a FIFO or device, the checks made on the
/// file opened, at most 4 KiB read). Its text is wiped once parsed.
pub fn read_key_file(path: &Path) -> Result<JobKey, TransportError> {
    let at = |what: String| {
        TransportError::Auth(format!("TASKFOLD_JOB_KEY_FILE={}: {what}", path.display()))
    };
    let mut text = crate::private::read_owned(path, KEY_FILE_MAX).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            at(format!(
                "{e}; make it a private file of yours with `chmod 600 {}`",
                path.display()
            ))
        } else {
            at(e.to_string())
        }
    })?;
    let key = std::str::from_utf8(&text).ok().and_then(JobKey::from_hex);
    zeroize::Zeroize::zeroize(text.as_mut_slice());
    key.ok_or_else(|| at(format!("expected {KEY_EXPECTED}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn launch(key: Option<KeySource>, insecure: bool) -> Launch {
        Launch {
            key,
            insecure,
            ..Launch::default()
        }
    }

    #[test]
    fn fresh_keys_differ() {
        let (a, b) = (fresh_key().expect("a key"), fresh_key().expect("a key"));
        assert_ne!(a, b);
        assert_ne!(nonce(), nonce());
    }

    #[test]
    fn a_failed_random_source_gives_no_nonce() {
        let e = nonce_from(|_| Err(getrandom::Error::UNSUPPORTED)).unwrap_err();
        assert!(e.contains("no random nonce"), "{e}");
    }

    #[test]
    fn without_a_key_only_the_insecure_mode_starts() {
        let e = job_auth(&launch(None, false)).unwrap_err().to_string();
        for var in [
            "TASKFOLD_JOB_KEY_FILE",
            "TASKFOLD_JOB_KEY",
            "TASKFOLD_INSECURE",
        ] {
            assert!(e.contains(var), "{var} in {e}");
        }
        assert_eq!(job_auth(&launch(None, true)), Ok(JobAuth::Insecure));
        // A key wins over the insecure mode.
        let k = fresh_key().unwrap();
        let given = launch(Some(KeySource::Value(k.clone())), true);
        assert_eq!(job_auth(&given), Ok(JobAuth::Key(k)));
    }

    #[test]
    fn a_key_file_must_be_private_and_hold_a_key() {
        let dir = tempfile_dir();
        let path = dir.join("job.key");
        let k = fresh_key().unwrap();
        std::fs::write(&path, format!("{}\n", k.to_hex())).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let from_file = launch(Some(KeySource::File(path.clone())), false);
        assert_eq!(job_auth(&from_file), Ok(JobAuth::Key(k.clone())));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = job_auth(&from_file).unwrap_err().to_string();
        assert!(
            e.contains("TASKFOLD_JOB_KEY_FILE") && e.contains("chmod 600"),
            "{e}"
        );
        assert!(!e.contains(&k.to_hex()[..16]), "{e}");
        std::fs::write(&path, "not a key").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = job_auth(&from_file).unwrap_err().to_string();
        assert!(e.contains("64 hexadecimal digits"), "{e}");
        let missing = launch(Some(KeySource::File(dir.join("none"))), false);
        let e = job_auth(&missing).unwrap_err().to_string();
        assert!(e.starts_with("TASKFOLD_JOB_KEY_FILE="), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_key_file_is_opened_as_a_private_file() {
        let dir = tempfile_dir();
        let k = fresh_key().unwrap();
        let real = dir.join("real.key");
        std::fs::write(&real, k.to_hex()).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A symbolic link to a good key file is refused, not followed.
        let link = dir.join("link.key");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = read_key_file(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        // A FIFO is refused without blocking on it.
        let fifo = dir.join("fifo.key");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_key_file(&fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        // A file too large to be a key is refused.
        let big = dir.join("big.key");
        std::fs::write(&big, vec![b'a'; 10_000]).unwrap();
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = read_key_file(&big).unwrap_err().to_string();
        assert!(e.contains("10000 bytes"), "{e}");
        assert_eq!(read_key_file(&real).unwrap(), k);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Runs in a child process of its own (started by the test below):
    /// the environment is the process's, and other tests of this binary
    /// read and clear the key concurrently.
    #[test]
    fn child_forgets_the_key_once_read() {
        let Some(hex) = std::env::var_os("TASKFOLD_AUTH_TEST_CHILD") else {
            return;
        };
        let k = JobKey::from_hex(hex.to_str().unwrap()).expect("a key");
        let settings = taskfold_core::settings::Settings::from_env().unwrap();
        assert_eq!(job_auth(&settings.launch), Ok(JobAuth::Key(k)));
        assert!(std::env::var_os(KEY_VAR).is_none());
        // A child started now does not inherit it.
        let out = std::process::Command::new("sh")
            .args(["-c", "echo \"${TASKFOLD_JOB_KEY-unset}\""])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "unset");
        println!("CHILD-CHECKED");
    }

    #[test]
    fn the_key_leaves_the_environment_once_read() {
        let k = fresh_key().unwrap().to_hex();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "auth::tests::child_forgets_the_key_once_read"])
            .args(["--nocapture", "--test-threads=1"])
            .env(KEY_VAR, &k)
            .env("TASKFOLD_AUTH_TEST_CHILD", &k)
            .env_remove("TASKFOLD_JOB_KEY_FILE")
            .env_remove("TASKFOLD_INSECURE")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("CHILD-CHECKED"), "{text}");
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "taskfold-auth-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
