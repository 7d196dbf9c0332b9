//! The fixed header every transport frames its messages with, written
//! once: two magic bytes (which transport), the kind, a reserved zero byte,
//! the payload's length (u32) and the kind's fields (u64 each), all
//! little-endian.
//!
//! ```text
//! offset  size  field
//!      0     2  magic
//!      2     1  kind
//!      3     1  reserved, 0
//!      4     4  len     payload bytes after the header
//!      8  8 × n fields  u64 each, meaning depends on the kind
//! ```
//!
//! TCP frames carry three fields (a 32-byte header, `tcp::frame`), the
//! libfabric transport's messages five (48 bytes, `libfabric::wire`).

/// Bytes of a header with `fields` fields.
pub const fn header_len(fields: usize) -> usize {
    8 + 8 * fields
}

/// Writes a header into `out`, which is exactly [`header_len`] of
/// `fields.len()` bytes.
pub fn encode(out: &mut [u8], magic: [u8; 2], kind: u8, len: u32, fields: &[u64]) {
    debug_assert_eq!(out.len(), header_len(fields.len()));
    out[..2].copy_from_slice(&magic);
    out[2] = kind;
    out[3] = 0;
    out[4..8].copy_from_slice(&len.to_le_bytes());
    for (i, f) in fields.iter().enumerate() {
        out[8 + 8 * i..16 + 8 * i].copy_from_slice(&f.to_le_bytes());
    }
}

/// Reads a header from the first [`header_len`] of `fields.len()` bytes of
/// `b` into `fields`; returns the kind and the payload length. Checks the
/// magic, the reserved byte and the length of `b` (untrusted input: what
/// is wrong is named).
pub fn decode(b: &[u8], magic: [u8; 2], fields: &mut [u64]) -> Result<(u8, u32), String> {
    let n = header_len(fields.len());
    if b.len() < n {
        return Err(format!("{} bytes, shorter than a header of {n}", b.len()));
    }
    if b[..2] != magic {
        return Err(format!("bad magic {:02x?}", &b[..2]));
    }
    if b[3] != 0 {
        return Err("reserved header byte is not zero".into());
    }
    for (i, f) in fields.iter_mut().enumerate() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[8 + 8 * i..16 + 8 * i]);
        *f = u64::from_le_bytes(w);
    }
    Ok((b[2], u32::from_le_bytes([b[4], b[5], b[6], b[7]])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_garbage_is_named() {
        let mut h = [0u8; header_len(3)];
        encode(&mut h, *b"xy", 7, 42, &[1, 2, u64::MAX]);
        let mut f = [0u64; 3];
        assert_eq!(decode(&h, *b"xy", &mut f), Ok((7, 42)));
        assert_eq!(f, [1, 2, u64::MAX]);
        assert!(decode(&h, *b"zz", &mut f).unwrap_err().contains("magic"));
        assert!(decode(&h[..20], *b"xy", &mut f)
            .unwrap_err()
            .contains("shorter"));
        h[3] = 1;
        assert!(decode(&h, *b"xy", &mut f).unwrap_err().contains("reserved"));
    }
}
