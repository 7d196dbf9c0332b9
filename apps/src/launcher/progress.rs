//! The launcher's progress bar, fed by `@taskfold-progress DONE TOTAL`
//! lines. On a terminal it is an indicatif bar; otherwise (CI logs) a plain
//! line at every quarter.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;

pub(super) struct Progress {
    bar: Mutex<Option<ProgressBar>>,
    last_quarter: Mutex<u64>,
    tty: bool,
}

impl Progress {
    pub(super) fn new() -> Self {
        Progress {
            bar: Mutex::new(None),
            last_quarter: Mutex::new(0),
            tty: std::io::stderr().is_terminal(),
        }
    }

    /// Parses `DONE TOTAL [LABEL...]` and redraws.
    pub(super) fn update(&self, rest: &str) {
        let mut parts = rest.splitn(3, ' ');
        let (Some(Ok(done)), Some(Ok(total))) = (
            parts.next().map(str::parse::<u64>),
            parts.next().map(str::parse::<u64>),
        ) else {
            return;
        };
        let label = parts.next().unwrap_or("").to_string();
        if !self.tty {
            let quarter = (done * 4).checked_div(total).unwrap_or(4);
            let mut last = self.last_quarter.lock().unwrap_or_else(|e| e.into_inner());
            if quarter > *last {
                *last = quarter;
                eprintln!("progress: {done}/{total} {label}");
            }
            return;
        }
        let mut bar = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        let b = bar.get_or_insert_with(|| {
            let b = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}",
            ) {
                b.set_style(style);
            }
            b
        });
        b.set_length(total);
        b.set_position(done);
        b.set_message(label);
    }

    /// Prints around the bar without tearing it.
    pub(super) fn suspend(&self, f: impl FnOnce()) {
        let bar = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        match bar.as_ref() {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    pub(super) fn finish(&self) {
        if let Some(b) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            b.finish();
        }
    }
}
