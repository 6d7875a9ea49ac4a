//! The figures of a hard disk model (`--storage hdd-seek`) and the service times that follow
//! from them. `coldstart-storage` serves an emulated disk with them; a measurement records them
//! with its storage, so they are part of the format.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The figures of a disk model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeekModel {
    /// A seek to the next track, in microseconds (the settle time every seek pays).
    pub track_to_track_us: u64,
    /// The average seek between two random positions, in microseconds.
    pub average_seek_us: u64,
    /// Revolutions per minute: a request that seeks waits half a revolution on average.
    pub rpm: u64,
    /// Bytes per second read from the platter.
    pub media_bps: u64,
}

impl SeekModel {
    /// A 7200 rpm desktop disk: 1 ms track to track, 8.5 ms average seek, 120 MB/s.
    pub const fn desktop_7200() -> Self {
        Self {
            track_to_track_us: 1_000,
            average_seek_us: 8_500,
            rpm: 7_200,
            media_bps: 120_000_000,
        }
    }

    /// One revolution.
    pub fn revolution(&self) -> Duration {
        Duration::from_nanos(60_000_000_000 / self.rpm.max(1))
    }

    /// Bytes that pass under the head in one revolution: a track, and what the drive reads
    /// ahead into its buffer after a request at most.
    pub fn track_bytes(&self) -> u64 {
        (self.media_bps as u128 * self.revolution().as_nanos() / 1_000_000_000) as u64
    }

    /// A seek across the whole device, from the average (see the module docs).
    pub fn full_stroke(&self) -> Duration {
        let extra = self.average_seek_us.saturating_sub(self.track_to_track_us);
        Duration::from_micros(self.track_to_track_us + extra * 15 / 8)
    }

    /// The seek over `distance` bytes of a device of `size` bytes.
    pub fn seek(&self, distance: u64, size: u64) -> Duration {
        let t2t = Duration::from_micros(self.track_to_track_us);
        let span = self.full_stroke().saturating_sub(t2t);
        let fraction = (distance as f64 / size.max(1) as f64).min(1.0);
        t2t + span.mul_f64(fraction.sqrt())
    }

    /// Moving `bytes` at the media rate.
    pub fn transfer(&self, bytes: u64) -> Duration {
        Duration::from_nanos((bytes as u128 * 1_000_000_000 / self.media_bps.max(1) as u128) as u64)
    }
}

impl std::fmt::Display for SeekModel {
    /// `8.5 ms average seek, 7200 rpm, 114.4 MiB/s`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ms average seek, {} rpm, {}",
            self.average_seek_us as f64 / 1e3,
            self.rpm,
            coldstart_units::byte_rate(self.media_bps)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }

    #[test]
    fn the_desktop_disk_has_its_published_figures() {
        let m = SeekModel::desktop_7200();
        assert!((ms(m.revolution()) - 8.333).abs() < 0.01);
        assert_eq!(m.track_bytes(), 999_999);
        assert!((ms(m.full_stroke()) - 15.06).abs() < 0.01, "{:?}", m.full_stroke());
        // The mean of the seek over random pairs of positions is the published average.
        let size = 1u64 << 40;
        let mut x = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % size
        };
        let n = 20_000;
        let total: f64 = (0..n).map(|_| ms(m.seek(next().abs_diff(next()), size))).sum();
        assert!((total / n as f64 - 8.5).abs() < 0.1, "{}", total / n as f64);
        assert!((ms(m.transfer(120_000)) - 1.0).abs() < 1e-9);
    }
}
