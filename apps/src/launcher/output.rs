//! Copies each rank's output to ours, line by line, prefixed with its rank.

use super::progress::Progress;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::Child;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Starts one thread per output stream of `child`.
pub(super) fn pump(rank: u32, child: &mut Child, progress: Arc<Progress>) -> Vec<JoinHandle<()>> {
    let mut threads = Vec::new();
    if let Some(out) = child.stdout.take() {
        let p = progress.clone();
        threads.push(spawn(out, rank, false, p));
    }
    if let Some(err) = child.stderr.take() {
        threads.push(spawn(err, rank, true, progress));
    }
    threads
}

fn spawn(
    stream: impl Read + Send + 'static,
    rank: u32,
    is_err: bool,
    progress: Arc<Progress>,
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
