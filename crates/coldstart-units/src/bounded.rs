//! Durations, bandwidths and counts as people type them, and every value of a flag checked
//! against the range its flag accepts before any work starts: a value out of range is an
//! error that says the range, never a panic or an endless wait later (a `Duration` made from
//! `1e20` seconds panics; `Instant::now() + Duration::MAX` does too).
//!
//! The `*_in` functions give a parser for one flag, to hand to clap (`value_parser =
//! coldstart_units::duration_in(MS, DAY)`): its error is the text clap puts after the flag's
//! name, and clap exits with status 2.

use std::time::Duration;

use crate::parse_size;

/// One millisecond.
pub const MILLISECOND: Duration = Duration::from_millis(1);
/// One minute.
pub const MINUTE: Duration = Duration::from_secs(60);
/// One hour.
pub const HOUR: Duration = Duration::from_secs(3600);
/// One day: the longest any wait of coldstart may be told to be.
pub const DAY: Duration = Duration::from_secs(86_400);

/// Parse a duration: a number of seconds (`10`, `0.5`) or a number with a unit: `us`, `ms`,
/// `s`, `min`, `h` (`100ms`, `1.5s`, `2min`). Negative, not finite and longer than a year
/// (so that a later sum cannot overflow) are refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let secs = seconds(s)?;
    if secs > 366.0 * 86_400.0 {
        return Err(format!("`{s}` is too long (more than a year)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// [`parse_duration`]'s number of seconds, finite and not negative, before any bound.
fn seconds(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("`{s}` is not a duration (examples: 10, 0.5, 100ms, 2min)");
    let n: f64 = num.parse().map_err(|_| bad())?;
    let scale = match unit.trim() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(bad()),
    };
    let secs = n * scale;
    if !secs.is_finite() {
        return Err(bad());
    }
    Ok(secs)
}

/// Parse a bandwidth in bits per second: `56kbit`, `20mbit`, `1gbit` (decimal multiples, as
/// links are sold; `bps`, `kbps`... too), `100kib/s` and `2mib/s` (binary bytes). At most
/// 10 Tbit/s.
pub fn parse_bandwidth(s: &str) -> Result<f64, String> {
    let bits = bits_per_second(s)?;
    if bits > 1e13 {
        return Err(format!("`{s}` is too fast (more than 10 Tbit/s)"));
    }
    Ok(bits)
}

/// [`parse_bandwidth`]'s bits per second, finite, before any bound.
fn bits_per_second(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("`{s}` is not a bandwidth (examples: 56kbit, 20mbit, 1gbit)");
    let n: f64 = num.parse().map_err(|_| bad())?;
    let scale = match unit.trim() {
        "bit" | "bps" | "" => 1.0,
        "kbit" | "kbps" => 1e3,
        "mbit" | "mbps" => 1e6,
        "gbit" | "gbps" => 1e9,
        "kib/s" => 8.0 * 1024.0,
        "mib/s" => 8.0 * 1024.0 * 1024.0,
        _ => return Err(format!("`{s}`: unknown bandwidth unit (bit, kbit, mbit, gbit)")),
    };
    let bits = n * scale;
    if !bits.is_finite() {
        return Err(bad());
    }
    Ok(bits)
}

/// A duration, in the most natural unit: `500 ms`, `10 s`, `1 day`.
pub fn duration_text(d: Duration) -> String {
    let secs = d.as_secs_f64();
    let whole = |unit: u64| {
        d >= Duration::from_secs(unit)
            && d == Duration::from_secs(d.as_secs())
            && d.as_secs().is_multiple_of(unit)
    };
    match () {
        _ if d.is_zero() => "0 s".into(),
        _ if whole(86_400) => crate::count(d.as_secs() / 86_400, "day"),
        _ if whole(3600) => crate::count(d.as_secs() / 3600, "hour"),
        _ if whole(60) => crate::count(d.as_secs() / 60, "minute"),
        _ if secs >= 1.0 => format!("{} s", trim(secs)),
        _ if secs >= 1e-3 => format!("{} ms", trim(secs * 1e3)),
        _ => format!("{} us", trim(secs * 1e6)),
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A parser of durations from `min` to `max` ([`parse_duration`]'s syntax).
pub fn duration_in(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| {
        let secs = seconds(s)?;
        if secs < min.as_secs_f64() || secs > max.as_secs_f64() {
            return Err(format!(
                "`{s}` is out of range: give {} to {}",
                duration_text(min),
                duration_text(max)
            ));
        }
        Ok(Duration::from_secs_f64(secs))
    }
}

/// A parser of byte sizes from `min` to `max` ([`parse_size`]'s syntax).
pub fn size_in(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| {
        let n = parse_size(s)?;
        if n < min || n > max {
            return Err(format!(
                "`{s}` is out of range: give {} to {}",
                crate::bytes(min),
                crate::bytes(max)
            ));
        }
        Ok(n)
    }
}

/// A parser of whole numbers from `min` to `max`, as type `T`.
pub fn count_in<T>(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<u64>,
{
    move |s| {
        let range = || format!("`{s}` is out of range: give a whole number from {min} to {max}");
        let n: u64 = s.trim().parse().map_err(|_| {
            if s.trim().starts_with('-') || s.trim().bytes().all(|b| b.is_ascii_digit()) {
                range()
            } else {
                format!("`{s}` is not a whole number")
            }
        })?;
        if n < min || n > max {
            return Err(range());
        }
        T::try_from(n).map_err(|_| range())
    }
}

/// A parser of bandwidths from `min` to `max` bits per second ([`parse_bandwidth`]'s syntax).
pub fn bandwidth_in(
    min: f64,
    max: f64,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s| {
        let b = bits_per_second(s)?;
        if b < min || b > max {
            return Err(format!(
                "`{s}` is out of range: give {} to {}",
                crate::bit_rate(min as u64),
                crate::bit_rate(max as u64)
            ));
        }
        Ok(b)
    }
}

/// A parser of numbers from `min` to `max` (a share, a percentage), not a whole number
/// necessarily.
pub fn number_in(
    min: f64,
    max: f64,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s| {
        let x: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
        if !(x >= min && x <= max) {
            return Err(format!("`{s}` is out of range: give {} to {}", trim(min), trim(max)));
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_what_would_overflow() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration(" 1h "), Ok(HOUR));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        for bad in ["", "-1", "1 parsec", "nan", "inf", "1e3", "ten"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        for huge in ["18446744073709551615", "18446744073709551615s", "1e400", "9999999h"] {
            assert!(parse_duration(huge).is_err(), "{huge}");
        }
    }

    #[test]
    fn bounded_parsers_name_their_range() {
        let timeout = duration_in(MILLISECOND, DAY);
        assert_eq!(timeout("10"), Ok(Duration::from_secs(10)));
        let e = timeout("18446744073709551615").unwrap_err();
        assert_eq!(e, "`18446744073709551615` is out of range: give 1 ms to 1 day");
        assert_eq!(
            timeout("2 days").unwrap_err(),
            "`2 days` is not a duration (examples: 10, 0.5, 100ms, 2min)"
        );
        assert_eq!(timeout("25h").unwrap_err(), "`25h` is out of range: give 1 ms to 1 day");
        assert_eq!(timeout("0").unwrap_err(), "`0` is out of range: give 1 ms to 1 day");
        let connections = count_in::<usize>(1, 256);
        assert_eq!(connections("4"), Ok(4));
        assert_eq!(
            connections("0").unwrap_err(),
            "`0` is out of range: give a whole number from 1 to 256"
        );
        assert!(connections("-1").unwrap_err().contains("from 1 to 256"));
        assert!(connections("99999999999999999999999").unwrap_err().contains("from 1 to 256"));
        assert_eq!(connections("four").unwrap_err(), "`four` is not a whole number");
        let u8s = count_in::<u8>(0, 1000);
        assert!(u8s("300").is_err(), "not representable");
        let chunk = size_in(4096, 64 << 20);
        assert_eq!(chunk("64k"), Ok(65536));
        assert_eq!(chunk("1g").unwrap_err(), "`1g` is out of range: give 4 KiB to 64 MiB");
        assert!(size_in(1, 1 << 30)("0").unwrap_err().contains("give 1 B to 1 GiB"));
        let bw = bandwidth_in(1e3, 1e12);
        assert_eq!(bw("20mbit"), Ok(2e7));
        assert_eq!(bw("1bit").unwrap_err(), "`1bit` is out of range: give 1 kbit/s to 1 Tbit/s");
        assert!(bw("1e400").is_err());
        let share = number_in(0.0, 1.0);
        assert_eq!(share("0.5"), Ok(0.5));
        assert!(share("NaN").is_err() && share("1.5").is_err() && share("inf").is_err());
    }

    #[test]
    fn durations_are_shown_in_their_unit() {
        assert_eq!(duration_text(DAY), "1 day");
        assert_eq!(duration_text(2 * HOUR), "2 hours");
        assert_eq!(duration_text(MINUTE), "1 minute");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(duration_text(MILLISECOND), "1 ms");
        assert_eq!(duration_text(Duration::ZERO), "0 s");
    }
}
