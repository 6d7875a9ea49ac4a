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

impl FromStr for Link {
    type Err = LinkParseError;

    fn from_str(s: &str) -> Result<Link, LinkParseError> {
        let err = |why: &str| LinkParseError { value: s.to_owned(), why: why.to_owned() };
        let (bw, lat) = s.split_once('/').ok_or_else(|| err("no `/`"))?;
        let bw = bw.trim().to_ascii_lowercase();
        let split = bw.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(bw.len());
        let (num, unit) = bw.split_at(split);
        let num: f64 = num.parse().map_err(|_| err("the bandwidth is not a number"))?;
        let scale = match unit {
            "bit" | "bps" | "" => 1.0,
            "kbit" | "kbps" => 1e3,
            "mbit" | "mbps" => 1e6,
            "gbit" | "gbps" => 1e9,
            "kib/s" => 8.0 * 1024.0,
            "mib/s" => 8.0 * 1024.0 * 1024.0,
            _ => return Err(err("unknown bandwidth unit (bit, kbit, mbit, gbit)")),
        };
        let bits_per_second = num * scale;
        if !(bits_per_second.is_finite() && bits_per_second > 0.0) {
            return Err(err("the bandwidth must be positive"));
        }
        let lat = lat.trim().to_ascii_lowercase();
        let split = lat.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(lat.len());
        let (num, unit) = lat.split_at(split);
        let num: f64 = num.parse().map_err(|_| err("the latency is not a number"))?;
        let secs = match unit {
            "ms" => num / 1e3,
            "us" => num / 1e6,
            "s" => num,
            _ => return Err(err("unknown latency unit (us, ms, s)")),
        };
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(err("the latency must not be negative"));
        }
        Ok(Link { bits_per_second, latency: Duration::from_secs_f64(secs) })
    }
}

impl Link {
    /// What the model predicts for `bytes` in `requests` requests.
    pub fn predict(&self, bytes: u64, requests: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 * 8.0 / self.bits_per_second)
            + self.latency * requests as u32
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
