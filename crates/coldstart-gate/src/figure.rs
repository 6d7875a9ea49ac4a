//! The figures a gate compares, and what a comparison can conclude.
//!
//! A figure is one quantity of one cache state: start-up time cold and hot, and the steady
//! figures of a cold start (bytes read, read requests, major faults), the pages start-up
//! touches (from page profiles), and the work of a hot start: the instructions it retires,
//! the cycles its cache misses cost (where valgrind counts them) and its minor faults. Their
//! names are part of the baseline and history formats (docs/formats/gate.md).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One quantity a gate compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    /// Wall time from exec to readiness, seconds (judged by the time rule).
    Time,
    /// CPU time of the process tree from exec to readiness, user and system, seconds (judged
    /// by the time rule, without the machine's slowdown: waiting for a CPU is not in it).
    CpuTime,
    /// Bytes the process tree caused to be read from storage.
    ReadBytes,
    /// Read requests of the block devices during a run (exact on cgroup v2, the whole
    /// machine's otherwise).
    ReadRequests,
    /// Major page faults of the process tree.
    MajorFaults,
    /// Bytes read from the emulated device: the program's own files, exactly.
    DeviceReadBytes,
    /// Read requests the emulated device served: the program's own files, exactly.
    DeviceReadRequests,
    /// File pages start-up touched, counted from a page profile.
    PagesTouched,
    /// User-space instructions retired.
    Instructions,
    /// The cycles the start-up's cache misses cost, as valgrind's cache simulation counts
    /// them: 10 for each miss of a first-level cache, 100 for each of the last level (hot,
    /// with the instructions it counts, [`crate::instructions`]).
    MissCycles,
    /// Minor page faults of the process tree (hot): the kernel's share of the work, which
    /// instructions counted in user space leave out.
    MinorFaults,
    /// Code bytes of the functions start-up now runs that no profile of the baseline ran, by
    /// symbol name (taken when the build changed: [`crate::functions`]).
    NewFunctionBytes,
}

/// How a figure's values are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Bytes,
    Count,
}

impl Figure {
    /// Every figure, in the order reports list them.
    pub const ALL: [Figure; 12] = [
        Figure::Time,
        Figure::CpuTime,
        Figure::DeviceReadBytes,
        Figure::DeviceReadRequests,
        Figure::ReadBytes,
        Figure::ReadRequests,
        Figure::MajorFaults,
        Figure::PagesTouched,
        Figure::Instructions,
        Figure::MissCycles,
        Figure::MinorFaults,
        Figure::NewFunctionBytes,
    ];

    /// The name in files and on the command line (`--slack NAME=VALUE`).
    pub const fn name(self) -> &'static str {
        match self {
            Figure::Time => "time",
            Figure::CpuTime => "cpu_time",
            Figure::ReadBytes => "read_bytes",
            Figure::ReadRequests => "read_requests",
            Figure::MajorFaults => "major_faults",
            Figure::DeviceReadBytes => "device_read_bytes",
            Figure::DeviceReadRequests => "device_read_requests",
            Figure::PagesTouched => "pages_touched",
            Figure::Instructions => "instructions",
            Figure::MissCycles => "miss_cycles",
            Figure::MinorFaults => "minor_faults",
            Figure::NewFunctionBytes => "new_function_bytes",
        }
    }

    /// How reports title it.
    pub const fn title(self) -> &'static str {
        match self {
            Figure::Time => "time",
            Figure::CpuTime => "CPU time",
            Figure::ReadBytes => "read from storage",
            Figure::ReadRequests => "read requests",
            Figure::MajorFaults => "major faults",
            Figure::DeviceReadBytes => "read from the device",
            Figure::DeviceReadRequests => "reads of the device",
            Figure::PagesTouched => "pages touched",
            Figure::Instructions => "instructions",
            Figure::MissCycles => "cycles of cache misses",
            Figure::MinorFaults => "minor faults",
            Figure::NewFunctionBytes => "new functions run",
        }
    }

    /// What one of a count figure is (`613 reads`); `None` for times and sizes.
    pub const fn noun(self) -> Option<&'static str> {
        match self {
            Figure::ReadRequests | Figure::DeviceReadRequests => Some("read"),
            Figure::MajorFaults | Figure::MinorFaults => Some("fault"),
            Figure::PagesTouched => Some("page"),
            Figure::Instructions => Some("instruction"),
            Figure::MissCycles => Some("cycle"),
            Figure::Time
            | Figure::CpuTime
            | Figure::ReadBytes
            | Figure::DeviceReadBytes
            | Figure::NewFunctionBytes => None,
        }
    }

    pub const fn unit(self) -> Unit {
        match self {
            Figure::Time | Figure::CpuTime => Unit::Seconds,
            Figure::ReadBytes | Figure::DeviceReadBytes | Figure::NewFunctionBytes => Unit::Bytes,
            _ => Unit::Count,
        }
    }

    /// Whether the time rule judges it (else the steady rule).
    pub const fn is_time(self) -> bool {
        matches!(self, Figure::Time | Figure::CpuTime)
    }

    /// Whether its value is a level of the program's own (else it is measured against a
    /// baseline, as new functions are, and has no history of its own).
    pub const fn is_level(self) -> bool {
        !matches!(self, Figure::NewFunctionBytes)
    }
}

impl fmt::Display for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Figure {
    type Err = String;
    fn from_str(s: &str) -> Result<Figure, String> {
        Figure::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Figure::ALL.iter().map(|f| f.name()).collect();
            format!("unknown figure `{s}`: use one of {}", names.join(", "))
        })
    }
}

/// What the comparison of one figure concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Slower beyond the figure's threshold.
    Slower,
    /// Not slower by the figure's threshold (faster, the same, or a change within it).
    NotSlower,
    /// The runs allowed could not tell; never resolved by a coin flip.
    Unclear,
    /// Shown, not judged: missing on one side, or not steady where it was measured (the
    /// reason says which).
    NotCompared,
}

impl Verdict {
    pub const fn label(self) -> &'static str {
        match self {
            Verdict::Slower => "slower",
            Verdict::NotSlower => "not slower",
            Verdict::Unclear => "unclear",
            Verdict::NotCompared => "not compared",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A small allowance added to a steady figure's threshold: absolute (in the figure's unit)
/// plus a share of the baseline's median. Given on the command line as `NAME=VALUE` with
/// VALUE a number, a size (`4k`) or a percentage (`0.5%`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Slack {
    pub absolute: f64,
    pub relative: f64,
}

impl Slack {
    pub const NONE: Slack = Slack { absolute: 0.0, relative: 0.0 };

    /// The allowance for a baseline whose median is `median`.
    pub fn at(self, median: f64) -> f64 {
        self.absolute + self.relative * median.abs()
    }

    /// The slack of a figure when none is given. Counts of the program's own reads get
    /// none (one more request is a regression); instructions vary by a few thousand from
    /// run to run (the environment, the auxiliary vector), hence a relative allowance.
    pub fn default_for(figure: Figure) -> Slack {
        match figure {
            Figure::Instructions => Slack { absolute: 0.0, relative: 0.005 },
            _ => Slack::NONE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for f in Figure::ALL {
            assert_eq!(f.name().parse::<Figure>(), Ok(f));
            assert_eq!(serde_json::to_string(&f).unwrap(), format!("\"{}\"", f.name()));
        }
        assert!("nonsense".parse::<Figure>().unwrap_err().contains("major_faults"));
    }

    #[test]
    fn slack_adds_a_share_of_the_median() {
        let s = Slack { absolute: 2.0, relative: 0.01 };
        assert!((s.at(1000.0) - 12.0).abs() < 1e-12);
        assert_eq!(Slack::default_for(Figure::DeviceReadRequests), Slack::NONE);
    }
}
