//! The per-run metrics: their names in reports, their units, their titles in tables, and how
//! each is read from a run's [`Counters`].
//!
//! Statistics ([`crate::stats`]) and every exporter ([`crate::export`]) go through [`Metric`],
//! so a new counter is added here once. Reports still carry metric names as strings
//! ([`CommandResult::summaries`](coldstart_formats::measure::CommandResult::summaries),
//! [`Comparison::metric`](coldstart_formats::measure::Comparison::metric)): the format is read by other
//! tools and by later builds, and a report may name a metric this build does not know; the
//! functions taking a name ([`metric_value`], [`Unit::of_name`], [`title_of`]) accept any.

use std::fmt;

use coldstart_formats::measure::Counters;

/// One per-run figure of [`Counters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Wall time to readiness (`wall_s`).
    Wall,
    /// User CPU of the tree (`user_s`).
    UserCpu,
    /// System CPU of the tree (`sys_s`).
    SysCpu,
    /// Major page faults (`major_faults`).
    MajorFaults,
    /// Minor page faults (`minor_faults`).
    MinorFaults,
    /// Bytes read from storage (`read_bytes`).
    ReadBytes,
    /// Read requests of the block devices (`read_requests`).
    ReadRequests,
    /// Peak memory (`peak_memory_bytes`).
    PeakMemory,
    /// Instructions retired (`instructions`).
    Instructions,
    /// Read requests the emulated device served (`storage_read_requests`).
    StorageReadRequests,
}

/// How a metric's values read: seconds, bytes or plain counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Seconds.
    Seconds,
    /// Bytes.
    Bytes,
    /// A plain count.
    Count,
}

/// A metric's value as [`Counters`] holds it: times as `f64`, counts and bytes as `u64`.
/// Its [`Display`](fmt::Display) is exact (the CSV cells).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    /// A time, seconds.
    Float(f64),
    /// A count or bytes.
    Integer(u64),
}

impl Metric {
    /// Every metric, in the order of the CSV columns and of
    /// [`CommandResult::summaries`](coldstart_formats::measure::CommandResult::summaries).
    pub const ALL: [Metric; 10] = [
        Metric::Wall,
        Metric::UserCpu,
        Metric::SysCpu,
        Metric::MajorFaults,
        Metric::MinorFaults,
        Metric::ReadBytes,
        Metric::ReadRequests,
        Metric::PeakMemory,
        Metric::Instructions,
        Metric::StorageReadRequests,
    ];

    /// The name in reports: the field of [`Counters`] it is read from.
    pub const fn name(self) -> &'static str {
        match self {
            Metric::Wall => "wall_s",
            Metric::UserCpu => "user_s",
            Metric::SysCpu => "sys_s",
            Metric::MajorFaults => "major_faults",
            Metric::MinorFaults => "minor_faults",
            Metric::ReadBytes => "read_bytes",
            Metric::ReadRequests => "read_requests",
            Metric::PeakMemory => "peak_memory_bytes",
            Metric::Instructions => "instructions",
            Metric::StorageReadRequests => "storage_read_requests",
        }
    }

    /// The metric named `name` in a report, if this build knows it.
    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    /// How its values read.
    pub const fn unit(self) -> Unit {
        match self {
            Metric::Wall | Metric::UserCpu | Metric::SysCpu => Unit::Seconds,
            Metric::ReadBytes | Metric::PeakMemory => Unit::Bytes,
            Metric::MajorFaults
            | Metric::MinorFaults
            | Metric::ReadRequests
            | Metric::Instructions
            | Metric::StorageReadRequests => Unit::Count,
        }
    }

    /// What the metric is called in tables.
    pub const fn title(self) -> &'static str {
        match self {
            Metric::Wall => "wall time",
            Metric::UserCpu => "user CPU",
            Metric::SysCpu => "system CPU",
            Metric::MajorFaults => "major faults",
            Metric::MinorFaults => "minor faults",
            Metric::ReadBytes => "read from storage",
            Metric::ReadRequests => "read requests",
            Metric::PeakMemory => "peak memory",
            Metric::Instructions => "instructions",
            Metric::StorageReadRequests => "read requests to the emulated device",
        }
    }

    /// The metric's value in `c` as it is held there; `None` when not measured.
    pub fn reading(self, c: &Counters) -> Option<Reading> {
        let int = |v: Option<u64>| v.map(Reading::Integer);
        match self {
            Metric::Wall => Some(Reading::Float(c.wall_s)),
            Metric::UserCpu => c.user_s.map(Reading::Float),
            Metric::SysCpu => c.sys_s.map(Reading::Float),
            Metric::MajorFaults => int(c.major_faults),
            Metric::MinorFaults => int(c.minor_faults),
            Metric::ReadBytes => int(c.read_bytes),
            Metric::ReadRequests => int(c.read_requests),
            Metric::PeakMemory => int(c.peak_memory_bytes),
            Metric::Instructions => int(c.instructions),
            Metric::StorageReadRequests => int(c.storage_read_requests),
        }
    }

    /// The metric's value in `c` as a sample for the statistics; `None` when not measured.
    pub fn value(self, c: &Counters) -> Option<f64> {
        self.reading(c).map(Reading::as_f64)
    }
}

impl Reading {
    /// The value as a float (for statistics).
    pub fn as_f64(self) -> f64 {
        match self {
            Reading::Float(v) => v,
            Reading::Integer(v) => v as f64,
        }
    }
}

impl fmt::Display for Reading {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reading::Float(v) => v.fmt(f),
            Reading::Integer(v) => v.fmt(f),
        }
    }
}

impl Unit {
    /// The unit of the metric named `name`; for a name this build does not know, the one its
    /// name says by the convention of [`Metric::name`]: `_s` seconds, `_bytes` bytes, else a
    /// count.
    pub fn of_name(name: &str) -> Unit {
        match Metric::from_name(name) {
            Some(m) => m.unit(),
            None if name.ends_with("_s") => Unit::Seconds,
            None if name.ends_with("_bytes") => Unit::Bytes,
            None => Unit::Count,
        }
    }
}

/// The title of the metric named `name` ([`Metric::title`]); an unknown name is its own title.
pub fn title_of(name: &str) -> &str {
    Metric::from_name(name).map_or(name, |m| m.title())
}

/// The names of [`Metric::ALL`], in that order.
pub const METRICS: [&str; 10] = {
    let mut names = [""; 10];
    let mut i = 0;
    while i < names.len() {
        names[i] = Metric::ALL[i].name();
        i += 1;
    }
    names
};

/// The value of the metric named `name` in `counters` (`None` when not measured or unknown).
pub fn metric_value(counters: &Counters, name: &str) -> Option<f64> {
    Metric::from_name(name)?.value(counters)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_follow_the_unit_convention() {
        for m in Metric::ALL {
            assert_eq!(Metric::from_name(m.name()), Some(m));
            let by_name = if m.name().ends_with("_s") {
                Unit::Seconds
            } else if m.name().ends_with("_bytes") {
                Unit::Bytes
            } else {
                Unit::Count
            };
            assert_eq!(m.unit(), by_name, "{m:?}");
        }
        assert_eq!(Metric::from_name("nonsense"), None);
        assert_eq!(Unit::of_name("boot_s"), Unit::Seconds);
        assert_eq!(Unit::of_name("cache_bytes"), Unit::Bytes);
        assert_eq!(title_of("boot_s"), "boot_s");
        assert_eq!(title_of("read_bytes"), "read from storage");
    }

    #[test]
    fn readings_print_exactly() {
        let c = Counters { wall_s: 0.0123, instructions: Some(u64::MAX), ..Counters::default() };
        assert_eq!(Metric::Wall.reading(&c).unwrap().to_string(), "0.0123");
        assert_eq!(Metric::Instructions.reading(&c).unwrap().to_string(), u64::MAX.to_string());
        assert_eq!(Metric::UserCpu.reading(&c), None);
    }
}
