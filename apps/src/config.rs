//! `taskfold config`: every setting in effect here — what a rank started
//! in this directory with this environment gets — and where each comes
//! from: the environment, the settings file, or the default.

use clap::Args;
use std::process::ExitCode;
use taskfold::Settings;
use taskfold_core::settings::sources::{key_of, Loaded, CONFIG_VAR, DEFAULT_FILE};
use taskfold_core::settings::{variables, Source, SECRETS};

/// Examples of `taskfold config --help`.
const EXAMPLES: &str = "\
Examples:
  taskfold config                                 every setting, its value and source
  taskfold config --changed                       only those a file or variable sets
  TASKFOLD_CONFIG=job.toml taskfold config        with another settings file
  TASKFOLD_PING_MS=100 taskfold config --changed  what a variable changes";

/// Options of `taskfold config`.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct ConfigArgs {
    /// Only the settings that the environment or the file sets.
    #[arg(long)]
    changed: bool,
}

/// Prints the settings in effect, one per line: variable, key in the
/// file, value, source. A bad value is refused as a rank would refuse it
/// (exit 2).
pub fn main(args: ConfigArgs) -> ExitCode {
    let loaded = match Loaded::from_env() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("taskfold config: {e}");
            return ExitCode::from(2);
        }
    };
    for line in lines(&loaded, args.changed) {
        println!("{line}");
    }
    ExitCode::SUCCESS
}

/// The lines `taskfold config` prints.
fn lines(loaded: &Loaded, changed: bool) -> Vec<String> {
    let file = match &loaded.file {
        Some(path) => format!("settings file: {}", path.display()),
        None => format!("settings file: none ({CONFIG_VAR} unset, no {DEFAULT_FILE} here)"),
    };
    let mut out = vec![
        file,
        "the environment wins over the file, the file over the defaults".to_string(),
        String::new(),
        format!(
            "{:<32} {:<24} {:<24} source",
            "variable", "key in the file", "value"
        ),
    ];
    for v in variables() {
        let source = loaded.source(v.name).cloned().unwrap_or(Source::Default);
        if changed && source == Source::Default {
            continue;
        }
        let value = shown(&loaded.settings, v.name, (v.get)(&loaded.settings));
        out.push(format!(
            "{:<32} {:<24} {:<24} {}",
            v.name,
            key_of(v.name),
            value,
            source.name()
        ));
    }
    for name in &loaded.settings.unknown {
        out.push(format!(
            "{name:<32} {:<24} {:<24} ignored: no such setting",
            "", "(set)"
        ));
    }
    out
}

/// A value as printed: secrets hidden, unset ones said.
fn shown(_s: &Settings, name: &str, value: Option<std::ffi::OsString>) -> String {
    match value {
        Some(_) if SECRETS.contains(&name) => "(set, not shown)".to_string(),
        Some(v) => v.to_string_lossy().into_owned(),
        None => "(unset)".to_string(),
    }
}
