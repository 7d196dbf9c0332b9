//! The settings parser (every `TASKFOLD_*` variable and the launchers'
//! rank and size) and the test hooks' parser.

use crate::{shaped, SLACK};
use arbitrary::{Arbitrary, Result, Unstructured};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
#[cfg(feature = "test-hooks")]
use taskfold_core::settings::hooks::{self, Hook, POINTS};
use taskfold_core::settings::launch::SOURCES;
use taskfold_core::settings::{variables, Settings};

/// A value: the variable's own shape mutated, a number, or raw bytes.
fn value(u: &mut Unstructured<'_>) -> Result<OsString> {
    let samples = [
        "1",
        "0",
        "true",
        "off",
        "4096",
        "64k",
        "2M",
        "1.5",
        "-1",
        "18446744073709551616",
        "127.0.0.1:9",
        "tcp",
        "libfabric",
        "/tmp/x",
        "0x2a",
        "30s",
        "100ms",
        "auto",
        "",
    ];
    let b = shaped(u, |u| Ok(u.choose(&samples)?.as_bytes().to_vec()))?;
    Ok(OsString::from_vec(b))
}

/// `Settings::from_pairs` on arbitrary pairs of known and unknown names:
/// a refusal names a variable; accepted settings written back with
/// `to_pairs` read back the same.
pub fn settings_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let vars = variables();
    let mut pairs = Vec::new();
    let mut bytes = 0;
    for _ in 0..u.int_in_range(0..=6u8)? {
        let name = match u.int_in_range(0..=5u8)? {
            0 => OsString::from_vec(Vec::<u8>::arbitrary(u)?),
            1 => {
                let (r, s, _) = *u.choose(&SOURCES)?;
                (*u.choose(&[r, s])?).into()
            }
            _ => u.choose(vars)?.name.into(),
        };
        let v = value(u)?;
        bytes += name.len() + v.len();
        pairs.push((name, v));
    }
    match Settings::from_pairs(pairs.iter().cloned()) {
        Ok(s) => {
            crate::hit();
            let again = Settings::from_pairs(s.to_pairs()).expect("written settings read back");
            assert_eq!(again, s, "settings round trip");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("TASKFOLD_")
                    || SOURCES
                        .iter()
                        .any(|(r, s, _)| msg.contains(r) || msg.contains(s)),
                "a refusal names its variable: {msg}"
            );
        }
    }
    Ok(64 * bytes + 16 * SLACK)
}

/// `hooks::parse`: parsed hooks formatted back parse the same.
#[cfg(feature = "test-hooks")]
pub fn hooks_target(u: &mut Unstructured<'_>) -> Result<usize> {
    let b = shaped(u, |u| {
        let mut s = String::new();
        for _ in 0..u.int_in_range(1..=3u8)? {
            let p = u.choose(&POINTS)?.name();
            s.push_str(&format!(
                "{}:{p}:id{}:/tmp/d{};",
                u8::arbitrary(u)?,
                u8::arbitrary(u)?,
                u8::arbitrary(u)?
            ));
        }
        Ok(s.into_bytes())
    })?;
    let s = String::from_utf8_lossy(&b);
    if let Some(h) = hooks::parse(&s) {
        crate::hit();
        let n = s.split(';').filter(|e| !e.trim().is_empty()).count();
        assert_eq!(h.len(), n);
        let back: Option<Vec<Hook>> =
            hooks::format(&h).map(|f| hooks::parse(&f).expect("formatted hooks parse"));
        if let Some(back) = back {
            assert_eq!(back, h, "hooks round trip");
        }
    }
    Ok(8 * b.len() + SLACK)
}
