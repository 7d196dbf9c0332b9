//! Byte sizes on the command line: `128K`, `8M`, `1G`, `4096`.

/// Parses a size with an optional binary suffix (K, M, G; KiB etc. too).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 128K, 8M)"))?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use K, M or G)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

pub use taskfold_benches::units::human;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("128K"), Ok(128 << 10));
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("32MiB"), Ok(32 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("8X").is_err());
        assert!(parse_size("M").is_err());
        assert_eq!(human((8 << 20) as f64), "8 MiB");
    }
}
