//! Figures as every command shows them, so that one quantity reads the same in `measure`,
//! `gate`, `serve`, `pack` and the rest.

/// A size in binary multiples, as the size flags take them: `512 B`, `12.5 KiB`, `94.3 MiB`,
/// `1.25 GiB`; a whole multiple without decimals (`128 KiB`, `4 MiB`).
pub fn bytes(b: u64) -> String {
    match [(30, "GiB"), (20, "MiB"), (10, "KiB")].into_iter().find(|(shift, _)| b >= 1 << shift) {
        Some((shift, unit)) if b.is_multiple_of(1 << shift) => format!("{} {unit}", b >> shift),
        _ => bytes_f(b as f64),
    }
}

/// [`bytes`] of a figure that need not be whole (a median, a difference; may be negative).
pub fn bytes_f(b: f64) -> String {
    const KIB: f64 = 1024.0;
    let a = b.abs();
    if a < KIB {
        format!("{b:.0} B")
    } else if a < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else if a < KIB * KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else {
        format!("{:.2} GiB", b / (KIB * KIB * KIB))
    }
}

/// A storage throughput: [`bytes`] per second (`114.4 MiB/s`).
pub fn byte_rate(bytes_per_s: u64) -> String {
    format!("{}/s", bytes(bytes_per_s))
}

/// A network link's rate in bits per second, in decimal multiples as links are sold and as
/// `--link 20mbit/...` takes them: `56 kbit/s`, `20 Mbit/s`, `1.5 Gbit/s`, `1 Tbit/s`.
pub fn bit_rate(bits_per_s: u64) -> String {
    let b = bits_per_s as f64;
    let (v, unit) = match bits_per_s {
        0..1_000 => (b, "bit/s"),
        1_000..1_000_000 => (b / 1e3, "kbit/s"),
        1_000_000..1_000_000_000 => (b / 1e6, "Mbit/s"),
        1_000_000_000..1_000_000_000_000 => (b / 1e9, "Gbit/s"),
        _ => (b / 1e12, "Tbit/s"),
    };
    if v.fract() == 0.0 {
        format!("{v:.0} {unit}")
    } else {
        format!("{} {unit}", trim_zeros(&format!("{v:.2}")))
    }
}

fn trim_zeros(s: &str) -> &str {
    s.trim_end_matches('0').trim_end_matches('.')
}

/// The plural of an English noun of coldstart's messages (`run`, `file`, `process`, `entry`).
pub fn plural(noun: &str) -> String {
    if noun.ends_with(['s', 'x']) || noun.ends_with("ch") || noun.ends_with("sh") {
        format!("{noun}es")
    } else if noun.ends_with('y') && !["ay", "ey", "oy", "uy"].iter().any(|e| noun.ends_with(e)) {
        format!("{}ies", &noun[..noun.len() - 1])
    } else {
        format!("{noun}s")
    }
}

/// `n` and its noun, singular or plural by `n`: `1 file`, `2 files`, `0 processes`.
pub fn count(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ => format!("{n} {}", plural(noun)),
    }
}

/// A count that need not be whole (a median of counts, which can end in .5), with its noun:
/// `282.5 reads`, `614 reads`, `1 read`.
pub fn count_f(v: f64, noun: &str) -> String {
    if v == 1.0 {
        format!("1 {noun}")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", plural(noun))
    } else {
        format!("{v:.1} {}", plural(noun))
    }
}

/// A p-value, the one way every command writes it: `p = 0.550`, `p = 0.012`, `p < 0.001`.
pub fn p_value(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".to_string()
    } else {
        format!("p = {p:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_rates_counts_and_p_values_read_one_way() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(131_072), "128 KiB");
        assert_eq!(bytes(12_800), "12.5 KiB");
        assert_eq!(bytes(3096 << 10), "3.0 MiB");
        assert_eq!(bytes(3 << 20), "3 MiB");
        assert_eq!(bytes_f(131_072.0), "128.0 KiB");
        assert_eq!(bytes(98_933_028), "94.3 MiB");
        assert_eq!(bytes(3 << 30), "3 GiB");
        assert_eq!(bytes((3 << 30) + 1), "3.00 GiB");
        assert_eq!(bytes_f(-2048.0), "-2.0 KiB");
        assert_eq!(byte_rate(120_000_000), "114.4 MiB/s");
        assert_eq!(bit_rate(20_000_000), "20 Mbit/s");
        assert_eq!(bit_rate(56_000), "56 kbit/s");
        assert_eq!(bit_rate(1_500_000_000), "1.5 Gbit/s");
        assert_eq!(bit_rate(999), "999 bit/s");
        assert_eq!(bit_rate(1_000_000_000_000), "1 Tbit/s");
        assert_eq!(count(1, "attempt"), "1 attempt");
        assert_eq!(count(4, "attempt"), "4 attempts");
        assert_eq!(count(0, "file"), "0 files");
        assert_eq!(count(2, "process"), "2 processes");
        assert_eq!(count(2, "entry"), "2 entries");
        assert_eq!(count(2, "day"), "2 days");
        assert_eq!(count_f(614.0, "read"), "614 reads");
        assert_eq!(count_f(1.0, "read"), "1 read");
        assert_eq!(count_f(282.5, "read"), "282.5 reads");
        assert_eq!(p_value(0.55), "p = 0.550");
        assert_eq!(p_value(0.0004), "p < 0.001");
    }
}
