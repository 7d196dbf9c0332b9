//! Copies each rank's output to ours (or to a log file), line by line,
//! prefixed with its rank.

use super::progress::Progress;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A log file shared by every rank's pumps.
pub(super) type Log = Arc<Mutex<std::fs::File>>;

/// Starts one thread per output stream of `child`; its lines go to `log`
/// if there is one.
pub(super) fn pump(
    rank: u32,
    child: &mut Child,
    progress: Arc<Progress>,
    log: Option<Log>,
) -> Vec<JoinHandle<()>> {
    let mut threads = Vec::new();
    if let Some(out) = child.stdout.take() {
        let p = progress.clone();
        threads.push(spawn(out, rank, false, p, log.clone()));
    }
    if let Some(err) = child.stderr.take() {
        threads.push(spawn(err, rank, true, progress, log));
    }
    threads
}

fn spawn(
    stream: impl Read + Send + 'static,
    rank: u32,
    is_err: bool,
    progress: Arc<Progress>,
    log: Option<Log>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let reader = BufReader::new(stream);
        for line in reader.split(b'\n') {
            let Ok(line) = line else { break };
            let text = String::from_utf8_lossy(&line);
            if let Some(rest) = text.strip_prefix("@taskfold-progress ") {
                progress.update(rest);
                continue;
            }
            if let Some(f) = &log {
                let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
                let _ = writeln!(f, "[{rank}] {text}");
                continue;
            }
            progress.suspend(|| {
                if is_err {
                    let _ = writeln!(std::io::stderr().lock(), "[{rank}] {text}");
                } else {
                    let _ = writeln!(std::io::stdout().lock(), "[{rank}] {text}");
                }
            });
        }
    })
}
