//! The settings file, the sources of each value, the closest names.

use super::sources::{closest, key_of, variable_of_key, Loaded, SettingsFile, Source};
use std::path::PathBuf;
use std::time::Duration;

fn file(text: &str) -> SettingsFile {
    SettingsFile {
        path: PathBuf::from("taskfold.toml"),
        text: text.to_string(),
    }
}

#[test]
fn the_environment_over_the_file_over_the_defaults() {
    let f = file(
        "# settings kept with the job\n\
         ping_ms = 100\n\
         durability = \"sync\"\n\
         notice_board = false\n\
         buffer_pool = \"64M\"\n",
    );
    let env = [("TASKFOLD_DURABILITY", "off"), ("HOME", "/home/me")];
    let l = Loaded::from_sources(env, Some(&f)).unwrap();
    let s = &l.settings;
    assert_eq!(s.runtime.ping_period, Duration::from_millis(100));
    assert_eq!(s.runtime.durability, super::Durability::Off);
    assert!(!s.runtime.notice_board);
    assert_eq!(s.runtime.buffer_pool, 64 << 20);
    assert_eq!(l.source("TASKFOLD_PING_MS"), Some(&Source::File));
    assert_eq!(l.source("TASKFOLD_DURABILITY"), Some(&Source::Environment));
    assert_eq!(
        l.source("TASKFOLD_FAILURE_TIMEOUT_MS"),
        Some(&Source::Default)
    );
    assert_eq!(l.file, Some(PathBuf::from("taskfold.toml")));
    assert_eq!(l.sources.len(), super::variables().len());
    // A blank environment value is unset: the file's stands.
    let l = Loaded::from_sources([("TASKFOLD_PING_MS", " ")], Some(&f)).unwrap();
    assert_eq!(l.source("TASKFOLD_PING_MS"), Some(&Source::File));
}

#[test]
fn a_bad_value_in_the_file_names_the_file_and_the_key() {
    let e = Loaded::from_sources(
        std::iter::empty::<(&str, &str)>(),
        Some(&file("ping_ms = \"soon\"")),
    )
    .unwrap_err();
    assert_eq!(e.name, "TASKFOLD_PING_MS");
    assert_eq!(
        e.to_string(),
        "taskfold.toml: ping_ms = \"soon\": expected milliseconds, at least 1 (e.g. 250, or \
         with a unit: 250ms, 3s)"
    );
    let e = Loaded::from_sources(
        std::iter::empty::<(&str, &str)>(),
        Some(&file("ping_ms = 1.5")),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("expected a string, a whole number or true/false"),
        "{e}"
    );
}

#[test]
fn a_key_that_is_no_setting_is_refused_with_the_closest() {
    let none = std::iter::empty::<(&str, &str)>;
    let e = Loaded::from_sources(none(), Some(&file("ping_mz = 100"))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "taskfold.toml: ping_mz = \"100\": expected a setting (did you mean ping_ms?)"
    );
    let e = Loaded::from_sources(none(), Some(&file("PING_MS = 100"))).unwrap_err();
    assert!(e.to_string().contains("did you mean ping_ms?"), "{e}");
    let e = Loaded::from_sources(none(), Some(&file("colour = \"blue\""))).unwrap_err();
    assert!(e.to_string().contains("see `taskfold config`"), "{e}");
    // No secret in a file, and never quoted.
    let key = "ab".repeat(32);
    let e = Loaded::from_sources(none(), Some(&file(&format!("job_key = \"{key}\"")))).unwrap_err();
    assert!(e.to_string().contains("job_key_file"), "{e}");
    assert!(!e.to_string().contains(&key), "{e}");
    let e = Loaded::from_sources(none(), Some(&file("shared_heap = false"))).unwrap_err();
    assert!(e.to_string().contains("in the environment"), "{e}");
    let e = Loaded::from_sources(none(), Some(&file("[runtime]\nping_ms = 1"))).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("taskfold.toml: runtime = \"[a table]\""),
        "{e}"
    );
    let e = Loaded::from_sources(none(), Some(&file("ping_ms = "))).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("taskfold.toml: expected a TOML file of settings"),
        "{e}"
    );
}

#[test]
fn keys_are_the_names_without_the_prefix_in_lower_case() {
    for v in super::variables() {
        let key = key_of(v.name);
        assert_eq!(variable_of_key(&key).map(|v| v.name), Some(v.name));
        assert_eq!(
            variable_of_key(&key.to_ascii_uppercase()).map(|v| v.name),
            None
        );
    }
}

#[test]
fn a_misspelt_name_has_a_closest_one_and_a_stranger_none() {
    assert_eq!(closest("TASKFOLD_PING_MZ"), Some("TASKFOLD_PING_MS"));
    assert_eq!(closest("TASKFOLD_DURABLITY"), Some("TASKFOLD_DURABILITY"));
    assert_eq!(
        closest("TASKFOLD_FAILURE_TIMEOUT"),
        Some("TASKFOLD_FAILURE_TIMEOUT_MS")
    );
    assert_eq!(closest("TASKFOLD_POOL_MIB"), None);
    assert_eq!(closest("TASKFOLD_COLOUR"), None);
}

#[test]
fn the_launcher_says_it_warned() {
    let s = super::Settings::from_pairs([("TASKFOLD_PING_MZ", "1")]).unwrap();
    assert_eq!(s.unknown, ["TASKFOLD_PING_MZ"]);
    assert!(!s.unknown_warned, "a rank on its own warns");
    let s = super::Settings::from_pairs([("TASKFOLD_PING_MZ", "1"), ("TASKFOLD_RUN_CHECKED", "1")])
        .unwrap();
    assert_eq!(s.unknown, ["TASKFOLD_PING_MZ"]);
    assert!(s.unknown_warned, "taskfold run warned for the job");
}
