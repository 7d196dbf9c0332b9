//! Parsers and printers of the value types a variable can have: booleans,
//! counts, durations in milliseconds, sizes and named choices.
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

/// A whole number of milliseconds.
pub fn parse_millis(v: &str) -> Option<Duration> {
    parse_u64(v).map(Duration::from_millis)
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
