//! Parsers and printers of the value types a variable can have: booleans,
//! counts, durations (in milliseconds, or with a unit), sizes and named
//! choices.
//!
//! Every parser trims surrounding whitespace and returns `None` for a value
//! it does not accept; the caller turns that into a
//! [`super::SettingsError`] naming the variable. [`parse_bool`] never
//! allocates: the shared heap calls it from inside the global allocator.

use std::time::Duration;

/// Spellings of a boolean, case-insensitive: `(text, value)`.
const BOOLS: [(&str, bool); 8] = [
    ("1", true),
    ("0", false),
    ("true", true),
    ("false", false),
    ("on", true),
    ("off", false),
    ("yes", true),
    ("no", false),
];

/// What a boolean variable accepts (for error messages).
pub const BOOL_EXPECTED: &str = "on or off (1/0, true/false, on/off, yes/no)";

/// `1`/`0`, `true`/`false`, `on`/`off`, `yes`/`no`, in any case; anything
/// else is `None`. Never allocates.
pub fn parse_bool(v: &str) -> Option<bool> {
    let v = v.trim();
    BOOLS
        .iter()
        .find(|(text, _)| text.eq_ignore_ascii_case(v))
        .map(|&(_, b)| b)
}

/// The canonical spelling of a boolean (`on` or `off`).
pub fn format_bool(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// A whole number of decimal digits (no sign, no suffix).
pub fn parse_u64(v: &str) -> Option<u64> {
    let v = v.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// A duration in milliseconds: a whole number (`250`, the unit the
/// variables' names say), or a duration with its unit ([`parse_duration`]:
/// `250ms`, `3s`).
pub fn parse_millis(v: &str) -> Option<Duration> {
    parse_u64(v)
        .map(Duration::from_millis)
        .or_else(|| parse_duration(v))
}

/// The units a duration may carry, and their length in nanoseconds. A
/// suffix is matched whole (`ms` is never `m` then `s`).
const DURATION_UNITS: [(&str, u64); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// What a duration accepts (for error messages).
pub const DURATION_EXPECTED: &str =
    "a duration with its unit: ns, us, ms, s, m or h (e.g. 500ms, 30s, 1.5s, 2m)";

/// A duration with its unit: a decimal number followed by `ns`, `us`,
/// `ms`, `s`, `m` (or `min`) or `h`, in any case, with optional spaces
/// between (`500ms`, `30s`, `1.5s`, `2m`). `None` for a bare number (its
/// unit would be a guess), another unit, or more than `u64::MAX`
/// nanoseconds; a fraction of a nanosecond is dropped.
pub fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (number, unit) = v.split_at(end);
    let unit = unit.trim_start().to_lowercase();
    let &(_, scale) = DURATION_UNITS.iter().find(|(u, _)| *u == unit)?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos = whole.checked_mul(u128::from(scale))?;
    // At most 19 fraction digits matter below a nanosecond of an hour.
    let fraction = &fraction[..fraction.len().min(19)];
    if !fraction.is_empty() {
        let f: u128 = fraction.parse().ok()?;
        nanos += f * u128::from(scale) / 10u128.pow(fraction.len() as u32);
    }
    u64::try_from(nanos).ok().map(Duration::from_nanos)
}

/// A duration as [`parse_duration`] reads it back, in the largest unit
/// that gives a whole number (`30s`, `1500ms`, `2m`; `0s` for zero).
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    for (unit, scale) in [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if nanos.is_multiple_of(scale) {
            return format!("{}{unit}", nanos / scale);
        }
    }
    format!("{nanos}ns")
}

/// A command-line option's duration ([`parse_duration`]), with an error
/// that says why: a bare number is refused with a hint to give its unit.
pub fn parse_duration_arg(v: &str) -> Result<Duration, String> {
    if let Some(d) = parse_duration(v) {
        return Ok(d);
    }
    if parse_u64(v).is_some() {
        return Err(format!(
            "{v:?} has no unit: write {v}s for seconds or {v}ms for milliseconds"
        ));
    }
    Err(format!("{v:?}: expected {DURATION_EXPECTED}"))
}

/// A duration as whole milliseconds (what [`parse_millis`] reads back; a
/// fraction of a millisecond is dropped).
pub fn format_millis(d: Duration) -> String {
    d.as_millis().to_string()
}

/// Binary multiples a size may end with (`K` = 1024 bytes).
const UNITS: [(u8, u32); 5] = [(b'K', 10), (b'M', 20), (b'G', 30), (b'T', 40), (b'P', 50)];

/// What a size variable accepts (for error messages).
pub const SIZE_EXPECTED: &str =
    "a size in bytes, optionally with a binary unit (e.g. 4096, 512K, 4M, 1G, 2GiB)";

/// A size in bytes: digits, optionally followed by a binary unit `K`, `M`,
/// `G`, `T` or `P` (powers of 1024, any case, optionally spelt `KiB` or
/// `KB`), or by `B` alone. `None` on overflow.
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let digits = v.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = v.split_at(digits);
    let n = parse_u64(number)?;
    let unit = unit.trim_start().as_bytes();
    let shift = match unit {
        [] => 0,
        [b] if b.eq_ignore_ascii_case(&b'B') => 0,
        [u, rest @ ..] => {
            let &(_, shift) = UNITS.iter().find(|(c, _)| c.eq_ignore_ascii_case(u))?;
            let suffix_ok = rest.is_empty()
                || rest.eq_ignore_ascii_case(b"B")
                || rest.eq_ignore_ascii_case(b"iB");
            if !suffix_ok {
                return None;
            }
            shift
        }
    };
    n.checked_mul(1u64 << shift)
}

/// A size with the largest binary unit that divides it exactly (`4M`,
/// `1536K`, `1000`): what [`parse_size`] reads back.
pub fn format_size(n: u64) -> String {
    for &(c, shift) in UNITS.iter().rev() {
        let unit = 1u64 << shift;
        if n != 0 && n.is_multiple_of(unit) {
            return format!("{}{}", n / unit, c as char);
        }
    }
    n.to_string()
}

/// A value chosen among named alternatives (`sync`, `async`, `off`, ...).
pub trait Named: Sized + Copy + PartialEq + 'static {
    /// Every accepted spelling and its value; the first spelling of a value
    /// is its canonical one (what [`Named::name`] prints).
    const NAMES: &'static [(&'static str, Self)];
    /// What the variable accepts (for error messages).
    const EXPECTED: &'static str;

    /// The value `v` names, in any case.
    fn parse(v: &str) -> Option<Self> {
        let v = v.trim();
        Self::NAMES
            .iter()
            .find(|(text, _)| text.eq_ignore_ascii_case(v))
            .map(|&(_, x)| x)
    }

    /// The canonical spelling of this value.
    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, x)| *x == self)
            .map(|&(text, _)| text)
            .expect("every value has a name")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_carry_their_unit() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("500ms", ms(500)),
            ("30s", ms(30_000)),
            ("1.5s", ms(1500)),
            (" 2 m ", ms(120_000)),
            ("2min", ms(120_000)),
            ("1h", ms(3_600_000)),
            ("250us", Duration::from_micros(250)),
            ("0.5ms", Duration::from_micros(500)),
            ("7ns", Duration::from_nanos(7)),
            ("3S", ms(3000)),
            (".25s", ms(250)),
        ] {
            assert_eq!(parse_duration(text), Some(want), "{text}");
            assert_eq!(parse_duration(&format_duration(want)), Some(want), "{text}");
        }
        for bad in ["30", "", "s", "1.2.3s", "-1s", "1d", "5 seconds", "1e3ms"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert_eq!(parse_duration("99999999999999h"), None, "overflow");
        assert_eq!(format_duration(ms(1500)), "1500ms");
        assert_eq!(format_duration(ms(120_000)), "2m");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn a_bare_number_on_the_command_line_asks_for_its_unit() {
        assert_eq!(parse_duration_arg("30s"), Ok(Duration::from_secs(30)));
        let e = parse_duration_arg("30").unwrap_err();
        assert!(e.contains("30s") && e.contains("30ms"), "{e}");
        let e = parse_duration_arg("soon").unwrap_err();
        assert!(e.contains("e.g. 500ms, 30s"), "{e}");
    }

    #[test]
    fn milliseconds_are_bare_or_with_a_unit() {
        assert_eq!(parse_millis("250"), Some(Duration::from_millis(250)));
        assert_eq!(parse_millis("3s"), Some(Duration::from_secs(3)));
        assert_eq!(parse_millis("abc"), None);
    }
}
