//! The PMI-1 wire protocol, client side, on the socket the launcher passes
//! as `PMI_FD` (MPICH's Hydra; Slurm's `mpi/pmi2` plugin speaks it too).
//!
//! Each request is one line of `key=value` words, `cmd=` first; each
//! answer is one line, `cmd=` naming it and `rc=0` (or no `rc`) for
//! success, another `rc` with `msg=` for a failure:
//!
//! | request | answer |
//! | --- | --- |
//! | `cmd=init pmi_version=1 pmi_subversion=1` | `cmd=response_to_init rc=0 ...` |
//! | `cmd=get_maxes` | `cmd=maxes keylen_max=64 vallen_max=1024 ...` |
//! | `cmd=get_my_kvsname` | `cmd=my_kvsname kvsname=NAME` |
//! | `cmd=put kvsname=NAME key=K value=V` | `cmd=put_result rc=0` |
//! | `cmd=barrier_in` | `cmd=barrier_out` (once every rank sent it) |
//! | `cmd=get kvsname=NAME key=K` | `cmd=get_result rc=0 value=V` |
//! | `cmd=finalize` | `cmd=finalize_ack` |
//!
//! The socket is the process's, not ours: it is never closed here (an MPI
//! library in the same process may hold it too), and its receive timeout
//! is put back as it was when the connection ends.

use super::Kvs;
use socket2::Socket;
use std::io::Read;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::time::Duration;

/// Longest answer line read (PMI-1 values are at most 1024 bytes).
const MAX_LINE: usize = 4096;

/// A PMI-1 connection on the launcher's socket.
pub(crate) struct Pmi1 {
    sock: ManuallyDrop<Socket>,
    /// The socket's receive timeout before us, put back at the end.
    before: Option<Duration>,
    kvsname: String,
    /// The store's limits on a key's and a value's length.
    max: (usize, usize),
    /// Bytes read past the last answer line.
    pending: Vec<u8>,
    timeout: Duration,
}

/// Whether `fd` is an open socket of this process.
fn is_socket(fd: i32) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(format!("/proc/self/fd/{fd}")).is_ok_and(|m| m.file_type().is_socket())
}

impl Pmi1 {
    /// Says hello on `fd` and learns the job's KVS name; each answer but a
    /// fence's is waited for at most `timeout`. `rank` is only for errors.
    pub(crate) fn connect(fd: i32, rank: u32, timeout: Duration) -> Result<Pmi1, String> {
        if fd < 0 || !is_socket(fd) {
            return Err(format!(
                "PMI_FD={fd} is not an open socket of this process (rank {rank}): was it \
                 inherited from a launcher further up? Set TASKFOLD_PMI=off there"
            ));
        }
        // SAFETY: `fd` is an open socket of this process (checked above),
        // which the launcher left open for it. ManuallyDrop: we never close
        // it, so it stays valid for whoever else holds the number; reads,
        // writes and socket options do not take it over. `open` lets one
        // connection per process exist.
        let sock = ManuallyDrop::new(unsafe { Socket::from_raw_fd(fd) });
        let before = sock
            .read_timeout()
            .map_err(|e| format!("PMI_FD={fd}: {e}"))?;
        let mut c = Pmi1 {
            sock,
            before,
            kvsname: String::new(),
            max: (64, 1024),
            pending: Vec::new(),
            timeout,
        };
        c.call(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
        )?;
        let maxes = c.call("cmd=get_maxes", "maxes")?;
        let limit = |name: &str, default: usize| {
            field(&maxes, name)
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        c.max = (limit("keylen_max", 64), limit("vallen_max", 1024));
        let named = c.call("cmd=get_my_kvsname", "my_kvsname")?;
        c.kvsname = field(&named, "kvsname")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("no kvsname in {named:?}"))?
            .to_string();
        Ok(c)
    }

    /// Sends `request`, reads the answer, checks it is `expected` with
    /// `rc` 0 (or none); returns its line.
    fn call(&mut self, request: &str, expected: &str) -> Result<String, String> {
        self.call_within(request, expected, self.timeout)
    }

    fn call_within(
        &mut self,
        request: &str,
        expected: &str,
        timeout: Duration,
    ) -> Result<String, String> {
        let what = request.split_whitespace().next().unwrap_or(request);
        let io = |e: std::io::Error| format!("{what}: {e}");
        let mut line = request.as_bytes().to_vec();
        line.push(b'\n');
        self.send_all(&line).map_err(io)?;
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(io)?;
        let answer = self.read_line().map_err(|e| format!("{what}: {e}"))?;
        if field(&answer, "cmd") != Some(expected) {
            return Err(format!(
                "{what}: expected cmd={expected}, the launcher said {answer:?}"
            ));
        }
        match field(&answer, "rc") {
            None | Some("0") => Ok(answer),
            Some(rc) => {
                let msg = field(&answer, "msg").unwrap_or("no message");
                Err(format!("{what}: the launcher answered rc={rc} ({msg})"))
            }
        }
    }

    /// Writes all of `bytes`; a launcher gone is an error, never the
    /// SIGPIPE that would end a process embedding taskfold from C.
    fn send_all(&self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            match self.sock.send_with_flags(bytes, libc::MSG_NOSIGNAL) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One answer line, without its newline.
    fn read_line(&mut self) -> Result<String, String> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return String::from_utf8(line[..end].to_vec())
                    .map_err(|_| "an answer that is not text".to_string());
            }
            if self.pending.len() > MAX_LINE {
                return Err(format!("an answer longer than {MAX_LINE} bytes"));
            }
            let mut buf = [0u8; 1024];
            match (&*self.sock).read(&mut buf) {
                Ok(0) => return Err("the launcher closed the connection".into()),
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err("no answer from the launcher in time".into())
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Checks that `word` can travel as one word of a line.
    fn word<'a>(word: &'a str, what: &str, max: usize) -> Result<&'a str, String> {
        if word.is_empty()
            || word.len() > max
            || word.contains(|c: char| c.is_whitespace() || c == '=')
        {
            return Err(format!(
                "{what} {word:?} cannot be sent (empty, longer than {max} bytes, or with a \
                 space or '=')"
            ));
        }
        Ok(word)
    }
}

/// The value of `name=` in an answer line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

impl Kvs for Pmi1 {
    fn name(&self) -> &str {
        &self.kvsname
    }

    fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
        let key = Self::word(key, "key", self.max.0)?;
        let value = Self::word(value, "value", self.max.1)?;
        let req = format!("cmd=put kvsname={} key={key} value={value}", self.kvsname);
        self.call(&req, "put_result").map(drop)
    }

    fn fence(&mut self, timeout: Duration) -> Result<(), String> {
        self.call_within("cmd=barrier_in", "barrier_out", timeout)
            .map(drop)
            .map_err(|e| {
                format!("{e} (every rank of the job must reach the fence within {timeout:?})")
            })
    }

    fn get(&mut self, _rank: u32, key: &str) -> Result<String, String> {
        let key = Self::word(key, "key", self.max.0)?;
        let req = format!("cmd=get kvsname={} key={key}", self.kvsname);
        let answer = self.call(&req, "get_result")?;
        field(&answer, "value")
            .map(str::to_string)
            .ok_or_else(|| format!("get {key}: no value in {answer:?}"))
    }

    fn finalize(&mut self) -> Result<(), String> {
        self.call("cmd=finalize", "finalize_ack").map(drop)
    }
}

impl Drop for Pmi1 {
    /// Puts the socket's receive timeout back; the socket stays open.
    fn drop(&mut self) {
        let _ = self.sock.set_read_timeout(self.before);
    }
}
