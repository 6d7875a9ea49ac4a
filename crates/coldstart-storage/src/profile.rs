//! Storage profiles: the read IOPS, read bandwidth and read-ahead of a class of device.
//!
//! The built-in figures and their sources are listed in `docs/storage.md`. They describe reads
//! at queue depth 1, because that is what a cold start issues: one page fault, one wait.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use coldstart_formats::measure::SeekModel;

/// The Linux default read-ahead (`read_ahead_kb`) of a block device.
pub const DEFAULT_READAHEAD_KB: u64 = 128;

/// How slow storage is emulated: read IOPS and bytes per second enforced by cgroup I/O
/// throttling, or a disk model that times each request by where it lies (`hdd-seek`), and the
/// block device's read-ahead.
///
/// Parse one with [`FromStr`]: `hdd`, `hdd-seek`, `emmc`, `sata-ssd`, `nvme`, or
/// `custom:iops=N,bps=N[k|m|g],readahead=N[k|m]` (any key may be left out; `readahead` defaults to
/// 128 KiB, a missing `iops` or `bps` is not limited).
///
/// ```
/// use coldstart_storage::StorageProfile;
///
/// let hdd: StorageProfile = "hdd".parse().unwrap();
/// assert_eq!(hdd.read_iops, Some(100));
/// let custom: StorageProfile = "custom:iops=500,bps=20m,readahead=256k".parse().unwrap();
/// assert_eq!(custom.read_bps, Some(20 * 1024 * 1024));
/// assert_eq!(custom.readahead_kb, 256);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageProfile {
    /// `hdd`, `hdd-seek`, `emmc`, `sata-ssd`, `nvme` or `custom`.
    pub name: String,
    /// Read requests per second the device serves; `None`: not limited.
    pub read_iops: Option<u64>,
    /// Bytes per second the device reads; `None`: not limited.
    pub read_bps: Option<u64>,
    /// Read-ahead of the device in KiB (`/sys/block/DEV/queue/read_ahead_kb`).
    pub readahead_kb: u64,
    /// A disk model that times every read by seek distance, rotation and transfer (the device
    /// is then served by this process, not throttled by the cgroup); `None` for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seek: Option<SeekModel>,
}

/// The names [`StorageProfile::from_str`] accepts besides `custom:...`.
pub const BUILTIN_PROFILES: [&str; 5] = ["hdd", "hdd-seek", "emmc", "sata-ssd", "nvme"];

const MB: u64 = 1_000_000;

impl StorageProfile {
    /// A 7200 rpm desktop hard disk: about 10 ms per random read (seek plus half a
    /// revolution), 120 MB/s sequential.
    pub fn hdd() -> Self {
        Self::builtin("hdd", Some(100), Some(120 * MB))
    }

    /// The same 7200 rpm disk timed by a model of its mechanics instead of a request rate:
    /// each read pays a seek that grows with its distance from the last one (1 ms to the next
    /// track, 8.5 ms on average, a full stroke across the device) and half a revolution
    /// (4.2 ms), unless it starts where the last one ended or in the track the drive read on
    /// into its buffer; then only its transfer at 120 MB/s. Adjacent small reads, which the
    /// `hdd` profile charges one request slot each, cost what they cost a disk.
    pub fn hdd_seek() -> Self {
        Self { seek: Some(SeekModel::desktop_7200()), ..Self::builtin("hdd-seek", None, None) }
    }

    /// eMMC 5.1 (HS400) as in budget laptops, Chromebooks and boards: 4000 random 4 KiB reads
    /// per second at queue depth 1, 160 MB/s sequential.
    pub fn emmc() -> Self {
        Self::builtin("emmc", Some(4_000), Some(160 * MB))
    }

    /// A SATA SSD: 10 000 random 4 KiB reads per second at queue depth 1, 540 MB/s (the SATA
    /// 6 Gb/s ceiling).
    pub fn sata_ssd() -> Self {
        Self::builtin("sata-ssd", Some(10_000), Some(540 * MB))
    }

    /// An NVMe SSD: no throttle (the host's disk), only the common 128 KiB read-ahead.
    pub fn nvme() -> Self {
        Self::builtin("nvme", None, None)
    }

    fn builtin(name: &str, read_iops: Option<u64>, read_bps: Option<u64>) -> Self {
        Self {
            name: name.to_owned(),
            read_iops,
            read_bps,
            readahead_kb: DEFAULT_READAHEAD_KB,
            seek: None,
        }
    }

    /// Whether the emulated device says it is rotational (`queue/rotational`), as the device
    /// it emulates would: a hard disk is, flash is not; `None` for a custom profile (the loop
    /// device's own flag is kept). Programs and the kernel choose by this flag, as `launch
    /// --prefetch` chooses its defaults.
    pub fn rotational(&self) -> Option<bool> {
        match self.name.as_str() {
            "hdd" | "hdd-seek" => Some(true),
            "emmc" | "sata-ssd" | "nvme" => Some(false),
            _ => None,
        }
    }

    /// Whether the profile limits reads through the cgroup (an `nvme` profile does not, nor
    /// does `hdd-seek`, whose disk model times the reads itself).
    pub fn is_throttled(&self) -> bool {
        self.read_iops.is_some() || self.read_bps.is_some()
    }
}

/// A `--storage` value that is not a profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid storage profile `{input}`: {reason}; use one of hdd, hdd-seek, emmc, sata-ssd, nvme or \
     custom:iops=N,bps=N[k|m|g],readahead=N[k|m]"
)]
pub struct ParseProfileError {
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FromStr for StorageProfile {
    type Err = ParseProfileError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| ParseProfileError { input: s.to_owned(), reason };
        match s.trim() {
            "hdd" => return Ok(Self::hdd()),
            "hdd-seek" => return Ok(Self::hdd_seek()),
            "emmc" => return Ok(Self::emmc()),
            "sata-ssd" | "ssd" => return Ok(Self::sata_ssd()),
            "nvme" => return Ok(Self::nvme()),
            _ => {}
        }
        let Some(spec) = s.trim().strip_prefix("custom:") else {
            return Err(err("unknown profile".into()));
        };
        let mut profile = Self::builtin("custom", None, None);
        let mut seen = Vec::new();
        for item in spec.split(',').filter(|i| !i.trim().is_empty()) {
            let (key, value) =
                item.split_once('=').ok_or_else(|| err(format!("`{item}` is not KEY=VALUE")))?;
            let key = key.trim();
            if seen.contains(&key) {
                return Err(err(format!("`{key}` given twice")));
            }
            seen.push(key);
            // Each in a range the kernel takes (io.max, read_ahead_kb).
            let range = match key {
                "iops" => (1, 10_000_000),
                "bps" => (1, 1 << 40),
                "readahead" => (1, 256 << 20),
                other => return Err(err(format!("unknown key `{other}` (iops, bps, readahead)"))),
            };
            // A rate of reads is a count; the others are sizes (`8m`, `128k`).
            let number = match key {
                "iops" => coldstart_units::count_in::<u64>(range.0, range.1)(value.trim()),
                _ => coldstart_units::size_in(range.0, range.1)(value.trim()),
            }
            .map_err(|e| err(format!("{key}: {e}")))?;
            match key {
                "iops" => profile.read_iops = Some(number),
                "bps" => profile.read_bps = Some(number),
                "readahead" => {
                    if number % 1024 != 0 {
                        return Err(err(
                            "readahead must be a whole number of KiB (e.g. 128k)".into()
                        ));
                    }
                    profile.readahead_kb = number / 1024;
                }
                _ => unreachable!("checked above"),
            }
        }
        if seen.is_empty() {
            return Err(err("custom: needs at least one of iops, bps, readahead".into()));
        }
        Ok(profile)
    }
}

impl StorageProfile {
    /// The device in words, as every command shows it: `emulated hdd (100 reads/s,
    /// 114.4 MiB/s, read-ahead 128 KiB)`; a seek model's figures in place of the limits.
    pub fn describe(&self) -> String {
        let timing = match &self.seek {
            Some(m) => m.to_string(),
            None => {
                let iops = self.read_iops.map_or("unlimited reads/s".into(), |v| {
                    format!("{}/s", coldstart_units::count(v, "read"))
                });
                let bps =
                    self.read_bps.map_or("unlimited bytes/s".into(), coldstart_units::byte_rate);
                format!("{iops}, {bps}")
            }
        };
        let readahead = coldstart_units::bytes(self.readahead_kb * 1024);
        format!("emulated {} ({timing}, read-ahead {readahead})", self.name)
    }
}

impl fmt::Display for StorageProfile {
    /// The profile's name, or a `custom:` spec that parses back to the same profile.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name != "custom" {
            return f.write_str(&self.name);
        }
        let mut parts = Vec::new();
        if let Some(iops) = self.read_iops {
            parts.push(format!("iops={iops}"));
        }
        if let Some(bps) = self.read_bps {
            parts.push(format!("bps={bps}"));
        }
        parts.push(format!("readahead={}k", self.readahead_kb));
        write!(f, "custom:{}", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `measure` and `gate` print the device with this one function: sizes and rates in the
    /// tool's binary units, counts with their noun.
    #[test]
    fn a_device_is_described_in_the_units_of_every_command() {
        assert_eq!(
            StorageProfile::hdd().describe(),
            "emulated hdd (100 reads/s, 114.4 MiB/s, read-ahead 128 KiB)"
        );
        assert_eq!(
            StorageProfile::hdd_seek().describe(),
            "emulated hdd-seek (8.5 ms average seek, 7200 rpm, 114.4 MiB/s, read-ahead 128 KiB)"
        );
        let custom: StorageProfile = "custom:iops=1,readahead=4k".parse().unwrap();
        assert_eq!(
            custom.describe(),
            "emulated custom (1 read/s, unlimited bytes/s, read-ahead 4 KiB)"
        );
    }

    #[test]
    fn builtins_parse_to_their_documented_figures() {
        let hdd: StorageProfile = "hdd".parse().unwrap();
        assert_eq!(hdd.rotational(), Some(true));
        assert_eq!(StorageProfile::emmc().rotational(), Some(false));
        assert_eq!(StorageProfile::nvme().rotational(), Some(false));
        assert_eq!(
            (hdd.read_iops, hdd.read_bps, hdd.readahead_kb),
            (Some(100), Some(120 * MB), 128)
        );
        let nvme: StorageProfile = "nvme".parse().unwrap();
        assert!(!nvme.is_throttled());
        let seek: StorageProfile = "hdd-seek".parse().unwrap();
        assert!(!seek.is_throttled());
        assert_eq!(seek.seek, Some(SeekModel::desktop_7200()));
        assert_eq!((seek.rotational(), seek.readahead_kb), (Some(true), 128));
        assert_eq!(hdd.seek, None);
        assert_eq!(nvme.readahead_kb, 128);
        for name in BUILTIN_PROFILES {
            let p: StorageProfile = name.parse().unwrap();
            assert_eq!(p.name, name);
            assert_eq!(p.to_string(), name);
        }
    }

    #[test]
    fn custom_profile_parses_units() {
        let p: StorageProfile = "custom:iops=250,bps=8m,readahead=1m".parse().unwrap();
        assert_eq!(p.read_iops, Some(250));
        assert_eq!(p.read_bps, Some(8 << 20));
        assert_eq!(p.readahead_kb, 1024);
        let p: StorageProfile = "custom:bps=1g".parse().unwrap();
        assert_eq!((p.read_iops, p.read_bps, p.readahead_kb), (None, Some(1 << 30), 128));
        let p: StorageProfile = "custom:readahead=64KiB".parse().unwrap();
        assert_eq!(p.readahead_kb, 64);
    }

    #[test]
    fn custom_profile_round_trips_through_display() {
        let p: StorageProfile = "custom:iops=7,bps=3k,readahead=32k".parse().unwrap();
        assert_eq!(p.to_string(), "custom:iops=7,bps=3072,readahead=32k");
        assert_eq!(p.to_string().parse::<StorageProfile>().unwrap(), p);
    }

    #[test]
    fn bad_profiles_say_what_is_wrong() {
        for (input, needle) in [
            ("floppy", "unknown profile"),
            ("custom:", "at least one"),
            ("custom:iops=0", "out of range: give a whole number from 1 to 10000000"),
            ("custom:bps=2000g", "out of range"),
            ("custom:readahead=1g", "out of range: give 1 B to 256 MiB"),
            ("custom:iops=ten", "is not a whole number"),
            ("custom:bps=ten", "is not a size"),
            ("custom:speed=5", "unknown key `speed`"),
            ("custom:iops=5,iops=6", "given twice"),
            ("custom:readahead=1000", "whole number of KiB"),
            ("custom:iops", "not KEY=VALUE"),
        ] {
            let e = input.parse::<StorageProfile>().unwrap_err().to_string();
            assert!(e.contains(needle), "{input}: {e}");
            assert!(e.contains("custom:iops=N"), "{input}: {e}");
        }
    }
}
