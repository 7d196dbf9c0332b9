//! Where settings come from, and which source gave each: the environment
//! (`TASKFOLD_*`), over an optional settings file, over the defaults.
//!
//! The file is `TASKFOLD_CONFIG` (a path; a file that cannot be read is
//! an error naming the variable), else `taskfold.toml` in the working
//! directory if there is one. It is TOML, one `key = value` per line, its
//! keys the variables' names without `TASKFOLD_`, in lower case:
//!
//! ```toml
//! # taskfold.toml
//! ping_ms = 100
//! durability = "sync"
//! notice_board = false
//! buffer_pool = "64M"
//! ```
//!
//! A value is a string, a whole number or a boolean, read as the variable
//! reads its text. A key that is no setting is refused (the file is
//! written on purpose, unlike an environment that may hold another
//! version's variables), naming the closest one; so are `job_key` (a
//! secret belongs in a file of its own, `job_key_file`) and
//! `shared_heap` (the heap decides before `main`, from the environment
//! alone). Parsing is pure ([`Loaded::from_sources`]); reading the
//! environment and the file is [`Loaded::from_env`].

use super::{variables, Settings, SettingsError, Variable, SECRETS};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The variable naming the settings file.
pub const CONFIG_VAR: &str = "TASKFOLD_CONFIG";

/// The settings file looked for in the working directory.
pub const DEFAULT_FILE: &str = "taskfold.toml";

/// Keys a settings file may not hold, and why.
const NOT_IN_FILE: [(&str, &str); 2] = [
    (
        "TASKFOLD_JOB_KEY",
        "a key belongs in a file of its own, readable by you alone: job_key_file",
    ),
    (
        "TASKFOLD_SHARED_HEAP",
        "the shared heap decides before the file is read: set TASKFOLD_SHARED_HEAP in the \
         environment",
    ),
];

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// No source set it.
    Default,
    /// The settings file.
    File,
    /// The environment (or the overrides of a launcher).
    Environment,
}

impl Source {
    /// Its name, as `taskfold config` prints it.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::File => "file",
            Source::Environment => "environment",
        }
    }
}

/// A settings file's path and text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsFile {
    /// Where it was read.
    pub path: PathBuf,
    /// What it holds.
    pub text: String,
}

/// Settings with the source of each variable's value.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The settings in effect.
    pub settings: Settings,
    /// The settings file read, if any.
    pub file: Option<PathBuf>,
    /// Each variable of [`variables`] with the source of its value.
    pub sources: Vec<(&'static str, Source)>,
}

impl Loaded {
    /// The settings of `env` (name and value pairs, the last of a name
    /// wins) over those of `file` (if any) over the defaults.
    pub fn from_sources<I, K, V>(
        env: I,
        file: Option<&SettingsFile>,
    ) -> Result<Loaded, SettingsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let from_file = match file {
            Some(f) => file_pairs(f)?,
            None => BTreeMap::new(),
        };
        let env = super::relevant(env);
        let set = |name: &str| env.get(name).is_some_and(|v| !super::is_blank(v));
        let sources = variables()
            .iter()
            .map(|v| {
                let source = if set(v.name) {
                    Source::Environment
                } else if from_file.contains_key(v.name) {
                    Source::File
                } else {
                    Source::Default
                };
                (v.name, source)
            })
            .collect();
        let mut merged: BTreeMap<String, OsString> = from_file
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        merged.extend(env.into_iter().filter(|(_, v)| !super::is_blank(v)));
        Ok(Loaded {
            settings: Settings::from_map(merged)?,
            file: file.map(|f| f.path.clone()),
            sources,
        })
    }

    /// The process environment with `overrides` on top, over the settings
    /// file it names (or the working directory's `taskfold.toml`).
    pub fn from_env_with<I, K, V>(overrides: I) -> Result<Loaded, SettingsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let extra = overrides
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_os_string(), v.as_ref().to_os_string()));
        let env: Vec<(OsString, OsString)> = std::env::vars_os().chain(extra).collect();
        let named = env
            .iter()
            .rev()
            .find(|(k, _)| k == CONFIG_VAR)
            .map(|(_, v)| v.clone())
            .filter(|v| !super::is_blank(v));
        let file = read_file(named.as_deref())?;
        Loaded::from_sources(env, file.as_ref())
    }

    /// The process environment, over its settings file.
    pub fn from_env() -> Result<Loaded, SettingsError> {
        Loaded::from_env_with(std::iter::empty::<(OsString, OsString)>())
    }

    /// The source of variable `name` (`None`: no such variable).
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s)
    }
}

/// The settings file: the one `named` (`TASKFOLD_CONFIG`), which must be
/// readable, else `taskfold.toml` in the working directory if it exists.
fn read_file(named: Option<&OsStr>) -> Result<Option<SettingsFile>, SettingsError> {
    let (path, required) = match named {
        Some(p) => (PathBuf::from(p), true),
        None => (PathBuf::from(DEFAULT_FILE), false),
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(SettingsFile { path, text })),
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => {
            let expected = format!("a settings file that can be read ({e})");
            let mut err = SettingsError::new(CONFIG_VAR, path.as_os_str(), &expected);
            if !required {
                err.file = Some(path);
            }
            Err(err)
        }
    }
}

/// A file key's variable: `ping_ms` is `TASKFOLD_PING_MS`.
pub fn variable_of_key(key: &str) -> Option<&'static Variable> {
    let upper = format!("TASKFOLD_{}", key.to_ascii_uppercase());
    let plain = key
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    variables().iter().find(|v| plain && v.name == upper)
}

/// The key of a variable in a settings file: `TASKFOLD_PING_MS` is
/// `ping_ms`.
pub fn key_of(name: &str) -> String {
    name.trim_start_matches("TASKFOLD_").to_ascii_lowercase()
}

/// The variables `file` sets, each value checked by its variable.
fn file_pairs(file: &SettingsFile) -> Result<BTreeMap<&'static str, OsString>, SettingsError> {
    let path = &file.path;
    let doc: toml_edit::DocumentMut = file.text.parse().map_err(|e: toml_edit::TomlError| {
        let why = e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        file_error(
            path,
            CONFIG_VAR,
            "",
            &format!("a TOML file of settings: {why}"),
        )
    })?;
    let mut pairs = BTreeMap::new();
    for (key, item) in doc.iter() {
        let shown = shown(item);
        let shown = shown.as_str();
        let Some(var) = variable_of_key(key) else {
            let hint = match closest(&format!("TASKFOLD_{}", key.to_ascii_uppercase())) {
                Some(name) => format!("a setting (did you mean {}?)", key_of(name)),
                None => "a setting: see `taskfold config` for every name".to_string(),
            };
            return Err(file_error(path, key, shown, &hint));
        };
        if let Some((_, why)) = NOT_IN_FILE.iter().find(|(n, _)| *n == var.name) {
            let shown = if SECRETS.contains(&var.name) {
                "(secret, not shown)"
            } else {
                shown
            };
            return Err(file_error(
                path,
                var.name,
                shown,
                &format!("no such key here: {why}"),
            ));
        }
        let value = match item.as_value() {
            Some(toml_edit::Value::String(s)) => s.value().clone(),
            Some(toml_edit::Value::Integer(i)) => i.value().to_string(),
            Some(toml_edit::Value::Boolean(b)) => {
                super::values::format_bool(*b.value()).to_string()
            }
            _ => {
                let expected = format!("a string, a whole number or true/false ({})", var.expected);
                return Err(file_error(path, var.name, shown, &expected));
            }
        };
        let value = OsString::from(value);
        if !super::is_blank(&value) {
            (var.set)(&mut Settings::default(), &value)
                .map_err(|()| file_error(path, var.name, shown, var.expected))?;
        }
        pairs.insert(var.name, value);
    }
    Ok(pairs)
}

/// A value of the file as an error quotes it.
fn shown(item: &toml_edit::Item) -> String {
    use toml_edit::{Item, Value};
    match item {
        Item::Value(Value::String(s)) => s.value().clone(),
        Item::Value(Value::Integer(i)) => i.value().to_string(),
        Item::Value(Value::Float(f)) => f.value().to_string(),
        Item::Value(Value::Boolean(b)) => b.value().to_string(),
        Item::Value(Value::Datetime(d)) => d.value().to_string(),
        Item::Value(Value::Array(_)) | Item::ArrayOfTables(_) => "[an array]".into(),
        Item::Value(Value::InlineTable(_)) | Item::Table(_) => "[a table]".into(),
        Item::None => String::new(),
    }
}

/// An error about `name` (a variable, or a key that is none) in `file`.
fn file_error(file: &Path, name: &str, value: &str, expected: &str) -> SettingsError {
    let mut e = SettingsError::new(name, OsStr::new(value), expected);
    e.file = Some(file.to_path_buf());
    e
}

/// The variable closest to `name` (a `TASKFOLD_*` name that is none), if
/// one is close enough to be a misspelling: at most a third of the
/// longer name's part after `TASKFOLD_` differs (at least one edit).
pub fn closest(name: &str) -> Option<&'static str> {
    let strip = |n: &str| {
        n.strip_prefix("TASKFOLD_")
            .unwrap_or(n)
            .to_ascii_uppercase()
    };
    let want = strip(name);
    variables()
        .iter()
        .map(|v| (v.name, edits(&want, &strip(v.name))))
        .filter(|(n, d)| *d <= (strip(n).len().max(want.len()) / 3).max(1))
        .min_by_key(|(_, d)| *d)
        .map(|(n, _)| n)
}

/// The edit distance between `a` and `b` (Levenshtein, by characters).
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}
