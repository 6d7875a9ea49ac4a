//! The emulated network link: bandwidth and per-request latency.
//!
//! The model is the paper's: a transfer of `B` bytes in `R` requests takes
//! `B / bandwidth + R x latency`. [`Pacer`] enforces the bandwidth for everything sent through
//! it, shared by all connections (they share one link): each slice of bytes reserves the
//! link's next free time and is written when its last bit would have arrived. The latency is
//! added once per request, before the response starts.

use std::io::{self, Write};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bandwidth and latency of an emulated link, parsed from `1mbit/100ms`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Bits per second.
    pub bits_per_second: f64,
    /// Added once per request.
    pub latency: Duration,
}

/// Why a `--link` value could not be read.
#[derive(Debug, thiserror::Error)]
#[error("bad link `{value}`: {why}; write BANDWIDTH/LATENCY, e.g. 56kbit/100ms, 1mbit/10ms, 20mbit/40ms")]
pub struct LinkParseError {
    value: String,
    why: String,
}

/// The slowest link accepted: 1 kbit/s.
pub const MIN_BANDWIDTH: f64 = 1e3;
/// The fastest link accepted: 1 Tbit/s.
pub const MAX_BANDWIDTH: f64 = 1e12;
/// The longest latency accepted: one minute per request.
pub const MAX_LATENCY: Duration = coldstart_units::MINUTE;

impl FromStr for Link {
    type Err = LinkParseError;

    /// `BANDWIDTH/LATENCY` in the units' syntax ([`coldstart_units::parse_bandwidth`],
    /// [`coldstart_units::parse_duration`]), each in its range: 1 kbit/s to 1 Tbit/s, 0 to one
    /// minute (a latency must say its unit).
    fn from_str(s: &str) -> Result<Link, LinkParseError> {
        let err = |why: String| LinkParseError { value: s.to_owned(), why };
        let (bw, lat) = s.split_once('/').ok_or_else(|| err("no `/`".into()))?;
        let bits_per_second = coldstart_units::bandwidth_in(MIN_BANDWIDTH, MAX_BANDWIDTH)(bw)
            .map_err(|e| err(format!("bandwidth {e}")))?;
        if lat.trim().bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(err("the latency has no unit (us, ms, s)".into()));
        }
        let latency = coldstart_units::duration_in(Duration::ZERO, MAX_LATENCY)(lat)
            .map_err(|e| err(format!("latency {e}")))?;
        Ok(Link { bits_per_second, latency })
    }
}

impl Link {
    /// What the model predicts for `bytes` in `requests` requests.
    pub fn predict(&self, bytes: u64, requests: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 * 8.0 / self.bits_per_second)
            .saturating_add(self.latency.saturating_mul(requests.min(u32::MAX as u64) as u32))
    }
}

/// Paces writes to a link's bandwidth. One pacer is one link, shared by its connections.
#[derive(Debug)]
pub struct Pacer {
    link: Option<Link>,
    next_free: Mutex<Option<Instant>>,
}

impl Pacer {
    /// A pacer for `link`; `None` sends at full speed.
    pub fn new(link: Option<Link>) -> Pacer {
        Pacer { link, next_free: Mutex::new(None) }
    }

    /// The emulated link.
    pub fn link(&self) -> Option<Link> {
        self.link
    }

    /// Waits one request's latency.
    pub fn request_latency(&self) {
        if let Some(l) = self.link {
            std::thread::sleep(l.latency);
        }
    }

    /// Writes `data` no faster than the link allows.
    pub fn write_all(&self, w: &mut dyn Write, data: &[u8]) -> io::Result<()> {
        let Some(link) = self.link else { return w.write_all(data) };
        let bytes_per_sec = link.bits_per_second / 8.0;
        // Slices of about 5 ms of transfer, at least 512 bytes, at most 64 KiB.
        let slice = ((bytes_per_sec * 0.005) as usize).clamp(512, 64 * 1024);
        for part in data.chunks(slice) {
            let done = {
                let mut next = self.next_free.lock().unwrap();
                let now = Instant::now();
                // The link is busy until `next`; if it has been idle, it starts now. A little
                // credit (one slice's worth of time, at most 10 ms) makes up for sleeping
                // longer than asked, without letting an idle link burst.
                let credit = Duration::from_secs_f64((slice as f64 / bytes_per_sec).min(0.010));
                let start = match *next {
                    Some(t) if t + credit > now => t,
                    _ => now,
                };
                let done = start + Duration::from_secs_f64(part.len() as f64 / bytes_per_sec);
                *next = Some(done);
                done
            };
            let now = Instant::now();
            if done > now {
                std::thread::sleep(done - now);
            }
            w.write_all(part)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_parse() {
        let l: Link = "1mbit/100ms".parse().unwrap();
        assert_eq!(l.bits_per_second, 1e6);
        assert_eq!(l.latency, Duration::from_millis(100));
        let l: Link = "56kbit/10ms".parse().unwrap();
        assert_eq!(l.bits_per_second, 56e3);
        let l: Link = "2.5Mbit/0.5s".parse().unwrap();
        assert_eq!((l.bits_per_second, l.latency), (2.5e6, Duration::from_millis(500)));
        for bad in ["1mbit", "fast/10ms", "1mbit/10", "0mbit/1ms", "1xbit/1ms", "1mbit/-1ms"] {
            let e = bad.parse::<Link>().unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn links_out_of_range_are_refused_not_a_panic() {
        for (bad, why) in [
            (
                "1mbit/18446744073709551615s",
                "latency `18446744073709551615s` is out of range: give 0 s to 1 minute",
            ),
            ("1mbit/2min", "latency `2min` is out of range: give 0 s to 1 minute"),
            ("1e400mbit/1ms", "bandwidth `1e400mbit`: unknown bandwidth unit"),
            (
                "99999999999999999999gbit/1ms",
                "bandwidth `99999999999999999999gbit` is out of range",
            ),
            ("10bit/1ms", "bandwidth `10bit` is out of range: give 1 kbit/s to 1 Tbit/s"),
        ] {
            let e = bad.parse::<Link>().unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let slowest: Link = "1kbit/1min".parse().unwrap();
        assert!(slowest.predict(u64::MAX, u64::MAX) > Duration::from_secs(1 << 40));
    }

    #[test]
    fn the_pacer_holds_the_bandwidth() {
        let pacer = Pacer::new(Some("800kbit/0ms".parse().unwrap()));
        let t = Instant::now();
        let mut sink = Vec::new();
        pacer.write_all(&mut sink, &vec![0u8; 25_000]).unwrap();
        let took = t.elapsed().as_secs_f64();
        assert_eq!(sink.len(), 25_000);
        assert!((took - 0.25).abs() < 0.025, "25 kB at 100 kB/s took {took} s");
    }
}
