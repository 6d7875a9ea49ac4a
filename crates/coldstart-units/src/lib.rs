//! Sizes as people type them, parsed the same way by every flag and spec that takes one
//! (`--chunk-size`, `--readahead`, `--page-size`, `--storage custom:bps=20m,...`).
//!
//! ```
//! assert_eq!(coldstart_units::parse_size("128k"), Ok(128 << 10));
//! assert_eq!(coldstart_units::parse_size("2MiB"), Ok(2 << 20));
//! assert!(coldstart_units::parse_size("four").is_err());
//! ```

/// Parse a byte size: `4096`, `4k`, `128K`, `128KiB`, `2m`, `1g` (binary multiples; a
/// trailing `b` or `ib` is accepted). The error says what was wrong, for the caller to put
/// after the flag's name.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.trim_end_matches('b').trim_end_matches('i');
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 =
        num.parse().map_err(|_| format!("`{s}` is not a size (examples: 4096, 4k, 128k, 2m)"))?;
    n.checked_mul(mult).ok_or_else(|| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_multiples() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("128K"), Ok(128 << 10));
        assert_eq!(parse_size("128KiB"), Ok(128 << 10));
        assert_eq!(parse_size("2mb"), Ok(2 << 20));
        assert_eq!(parse_size(" 1g "), Ok(1 << 30));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(parse_size("k").is_err());
        assert!(parse_size("four").is_err());
        assert!(parse_size("-4k").is_err());
        assert!(parse_size("99999999999999999999k").is_err());
        assert!(parse_size("18014398509481984k").unwrap_err().contains("too large"));
    }
}
