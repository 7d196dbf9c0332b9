//! Byte counts for people.

/// Formats bytes as `8 MiB`.
pub fn human(bytes: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", units[u])
    } else {
        format!("{v:.2} {}", units[u])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn binary_units() {
        assert_eq!(super::human((8 << 20) as f64), "8 MiB");
        assert_eq!(super::human((128 << 10) as f64), "128 KiB");
        assert_eq!(super::human((3 << 19) as f64), "1.50 MiB");
    }
}
