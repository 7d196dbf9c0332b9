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
pub fn job_auth(launch: &Launch) -> Result<JobAuth, TransportError> {
    match &launch.key {
        Some(KeySource::Value(k)) => Ok(JobAuth::Key(k.clone())),
        Some(KeySource::File(path)) => read_key_file(path).map(JobAuth::Key),
        None if launch.insecure => Ok(JobAuth::Insecure),
        None => Err(TransportError::Auth(MISSING_KEY.into())),
    }
}

/// Reads a key file: 64 hexadecimal digits, in a file no one but its
/// owner may read or write (as `ssh` asks of a private key).
pub fn read_key_file(path: &Path) -> Result<JobKey, TransportError> {
    use std::os::unix::fs::MetadataExt;
    let at = |what: String| {
        TransportError::Auth(format!("TASKFOLD_JOB_KEY_FILE={}: {what}", path.display()))
    };
    let meta = std::fs::metadata(path).map_err(|e| at(e.to_string()))?;
    if !meta.is_file() {
        return Err(at("not a file".into()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(at(format!(
            "other users may read or write it (mode {:o}); make it private with `chmod 600 {}`",
            meta.mode() & 0o777,
            path.display()
        )));
    }
    // A key file is 65 bytes or so; anything much larger is not one.
    if meta.len() > 4096 {
        return Err(at(format!("{} bytes, expected {KEY_EXPECTED}", meta.len())));
    }
    let text = std::fs::read_to_string(path).map_err(|e| at(e.to_string()))?;
    JobKey::from_hex(&text).ok_or_else(|| at(format!("expected {KEY_EXPECTED}")))
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
