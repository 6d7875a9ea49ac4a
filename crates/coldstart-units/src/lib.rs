//! Sizes as people type them, parsed the same way by every flag and spec that takes one
//! (`--chunk-size`, `--readahead`, `--page-size`, `--storage custom:bps=20m,...`); durations,
//! bandwidths and counts too, and the bounded parsers every flag of the command line goes
//! through ([`duration_in`], [`size_in`], [`count_in`], [`bandwidth_in`], [`number_in`]); the
//! same figures as people read them, shown the same way by every command (sizes in binary
//! multiples, link rates in bits per second, durations, counts with their noun, p-values); and
//! a Unix time as a calendar date and time of day (UTC), for the formats that write one.
//!
//! ```
//! assert_eq!(coldstart_units::parse_size("128k"), Ok(128 << 10));
//! assert_eq!(coldstart_units::parse_size("2MiB"), Ok(2 << 20));
//! assert!(coldstart_units::parse_size("four").is_err());
//! assert_eq!(coldstart_units::bytes(98_933_028), "94.3 MiB");
//! assert_eq!(coldstart_units::bit_rate(20_000_000), "20 Mbit/s");
//! assert_eq!(coldstart_units::count(1, "file"), "1 file");
//! assert_eq!(coldstart_units::p_value(0.55), "p = 0.550");
//! ```

mod bounded;
mod show;

pub use bounded::{
    bandwidth_in, count_in, duration_in, duration_text, number_in, parse_bandwidth, parse_duration,
    size_in, DAY, HOUR, MILLISECOND, MINUTE,
};
pub use show::{bit_rate, byte_rate, bytes, bytes_f, count, count_f, p_value, plural};

/// Seconds since the Unix epoch now (0 with a clock set before it): what a file's
/// `created_unix` records.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A Unix time (seconds) as UTC `(year, month, day, hour, minute, second)`, by Howard
/// Hinnant's `civil_from_days`.
pub fn utc_from_unix(secs: u64) -> (i64, i64, i64, u64, u64, u64) {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// A UTC date and time of day as a Unix time (seconds; negative before 1970), by Howard
/// Hinnant's `days_from_civil`: the inverse of [`utc_from_unix`].
pub fn unix_from_utc(year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + hour * 3600 + minute * 60 + second
}

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
    fn a_date_and_its_unix_time_convert_both_ways() {
        assert_eq!(unix_from_utc(1970, 1, 1, 0, 0, 0), 0);
        assert_eq!(unix_from_utc(2000, 2, 29, 12, 30, 15), 951_827_415);
        assert_eq!(unix_from_utc(1969, 12, 31, 23, 59, 59), -1);
        for secs in [0u64, 951_827_415, 1_795_836_666, 4_102_444_800] {
            let (y, mo, d, h, mi, s) = utc_from_unix(secs);
            assert_eq!(unix_from_utc(y, mo, d, h as i64, mi as i64, s as i64), secs as i64);
        }
    }

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
