//! The result of `coldstart experiment`: format `coldstart-experiment`, version 1.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::stats::checked_median;
use crate::Document;

/// A grid of network starts: every link x strategy x cache state, measured and predicted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    /// Always `coldstart-experiment`.
    pub format: String,
    /// The format's version: 1.
    pub version: u32,
    /// When the experiment started, seconds since the Unix epoch.
    pub created_unix: u64,
    /// `/proc/sys/kernel/osrelease`, for the reader of the figures.
    pub kernel: String,
    /// The CPUs available.
    pub cpus: usize,
    /// The program started.
    pub program: ExperimentProgram,
    /// The grid.
    pub settings: ExperimentSettings,
    /// The measured command's start-up with every byte local and cached (median), seconds;
    /// the model's `local` term.
    pub local_s: Option<f64>,
    /// The hot set packed into the bundle (recorded from the profiled workload).
    pub hot_set: Option<HotSet>,
    /// Bytes the measured workload reads from the bundle at start-up (recorded in a paged
    /// run of it): the bytes term of Eq. 1's bound.
    pub used_bytes: Option<u64>,
    /// The cells measured so far, in the order measured.
    pub cells: Vec<Cell>,
    /// Warnings that name a remedy.
    pub warnings: Vec<String>,
}

/// The program started over the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentProgram {
    /// The directory packed into the bundle.
    pub dir: PathBuf,
    /// The measured (held-out) command, its executable relative to `dir`.
    pub command: Vec<String>,
    /// The profiled command whose start-up reads are the hot set, relative to `dir`.
    pub profiled: Vec<String>,
    /// Regular files in `dir`.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// What the grid is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentSettings {
    /// The emulated links.
    pub links: Vec<LinkSpec>,
    /// Strategy names as `coldstart run --strategy` takes them (`auto` included).
    pub strategies: Vec<String>,
    /// `cold` (empty chunk cache, the server's files evicted from its page cache) or
    /// `warm-remote` (empty chunk cache, the server's files cached).
    pub caches: Vec<String>,
    /// Runs per cell.
    pub runs: u32,
    /// The bundle's chunk size, bytes.
    pub chunk_size: u64,
    /// The mount's read-ahead, bytes.
    pub readahead: u64,
}

/// An emulated link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// As given, e.g. `1mbit/100ms`.
    pub label: String,
    /// Bandwidth, bits per second.
    pub bits_per_second: f64,
    /// Added once per request.
    pub latency_s: f64,
}

/// The bundle's hot set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotSet {
    /// Its bytes.
    pub bytes: u64,
    /// The chunks it spans.
    pub chunks: u64,
}

/// One cell: a link, a strategy and a cache state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The emulated link.
    pub link: LinkSpec,
    /// The strategy, as `coldstart run --strategy` takes it.
    pub strategy: String,
    /// `cold` or `warm-remote` (see [`ExperimentSettings::caches`]).
    pub cache: String,
    /// The starts measured, in order.
    pub runs: Vec<CellRun>,
    /// `coldstart predict`'s start-up for this strategy (for `auto`: for the strategy it
    /// would choose), link given, cache as the runs found it, seconds.
    pub predicted_s: Option<f64>,
    /// The strategy `predict` would choose on this link and cache.
    pub predicted_choice: Option<String>,
    /// `predicted_s` with the link measured by `predict` instead of given (asked for; absent
    /// otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_measured_s: Option<f64>,
}

/// One measured start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellRun {
    /// Mount, manifest, strategy, the program to its exit, unmount: what a user waits for.
    /// The start-up is this less the unmount ([`CellRun::startup_s`]).
    pub wall_s: f64,
    /// Over the network, retries and the manifest included.
    pub bytes_fetched: u64,
    /// Requests made over the network, counted as `bytes_fetched` is.
    pub requests: u64,
    /// Time reads waited on chunk misses, summed (parallel misses overlap).
    pub stall_s: f64,
    /// The command's exit code (`None`: killed by a signal).
    pub exit_code: Option<i32>,
    /// For `auto`: the strategy it chose.
    pub chosen: Option<String>,
    /// Of `wall_s`, the unmount after the program exited, which is no part of the start-up
    /// (absent in older files).
    #[serde(default)]
    pub teardown_s: Option<f64>,
    /// Reads of chunks outside the hot set that waited for the network, and those chunks'
    /// bytes: what the mount's miss history keeps for the model (absent in older files).
    #[serde(default)]
    pub held_out_misses: Option<u64>,
    #[serde(default)]
    /// The bytes of those chunks (see [`CellRun::held_out_misses`]; absent in older files).
    pub held_out_bytes: Option<u64>,
    /// Bytes fetched besides the manifest's and the hot set's request (absent in older
    /// files).
    #[serde(default)]
    pub other_bytes: Option<u64>,
    /// For `auto`: the link it predicted on, as it measured it (or was told): what its choice
    /// can be checked against (absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_link: Option<AutoLink>,
}

/// The link `auto` predicted on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AutoLink {
    /// Bandwidth, bits per second.
    pub bits_per_second: f64,
    /// Added once per request.
    pub latency_s: f64,
}

impl CellRun {
    /// The start-up: from the mount to the program's exit, the unmount after it left out
    /// (in a file older than `teardown_s`, the wall time).
    pub fn startup_s(&self) -> f64 {
        self.wall_s - self.teardown_s.unwrap_or(0.0)
    }
}

impl Cell {
    /// Median of the runs' start-up times, unmounts left out (`None` without runs): the
    /// figure measured against the prediction and compared between strategies.
    pub fn startup_s(&self) -> Option<f64> {
        checked_median(&self.runs.iter().map(CellRun::startup_s).collect::<Vec<f64>>())
    }
    /// Median bytes fetched.
    pub fn bytes_fetched(&self) -> Option<f64> {
        checked_median(&self.runs.iter().map(|r| r.bytes_fetched as f64).collect::<Vec<f64>>())
    }
    /// Median requests.
    pub fn requests(&self) -> Option<f64> {
        checked_median(&self.runs.iter().map(|r| r.requests as f64).collect::<Vec<f64>>())
    }
    /// Median time stalled on misses.
    pub fn stall_s(&self) -> Option<f64> {
        checked_median(&self.runs.iter().map(|r| r.stall_s).collect::<Vec<f64>>())
    }
    /// The strategy `auto` chose most often in the runs.
    pub fn chosen(&self) -> Option<&str> {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for c in self.runs.iter().filter_map(|r| r.chosen.as_deref()) {
            match counts.iter_mut().find(|(n, _)| *n == c) {
                Some((_, k)) => *k += 1,
                None => counts.push((c, 1)),
            }
        }
        counts.into_iter().max_by_key(|(_, k)| *k).map(|(c, _)| c)
    }
}

impl Experiment {
    /// An experiment with nothing measured yet.
    pub fn new() -> Experiment {
        Experiment {
            format: Self::FORMAT.into(),
            version: Self::VERSION,
            created_unix: 0,
            kernel: String::new(),
            cpus: 0,
            program: ExperimentProgram {
                dir: PathBuf::new(),
                command: Vec::new(),
                profiled: Vec::new(),
                files: 0,
                bytes: 0,
            },
            settings: ExperimentSettings {
                links: Vec::new(),
                strategies: Vec::new(),
                caches: Vec::new(),
                runs: 0,
                chunk_size: 0,
                readahead: 0,
            },
            local_s: None,
            hot_set: None,
            used_bytes: None,
            cells: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The measured cell of this link, strategy and cache, if any.
    pub fn cell(&self, link: &str, strategy: &str, cache: &str) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.link.label == link && c.strategy == strategy && c.cache == cache)
    }
}

impl Default for Experiment {
    fn default() -> Self {
        Experiment::new()
    }
}

impl Document for Experiment {
    const FORMAT: &'static str = "coldstart-experiment";
    const VERSION: u32 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(wall_s: f64, chosen: Option<&str>) -> CellRun {
        CellRun {
            wall_s,
            bytes_fetched: 10,
            requests: 2,
            stall_s: 0.0,
            exit_code: Some(0),
            chosen: chosen.map(Into::into),
            teardown_s: None,
            held_out_misses: None,
            held_out_bytes: None,
            other_bytes: None,
            auto_link: None,
        }
    }

    #[test]
    fn a_cell_summarises_its_runs_by_the_median_and_the_most_frequent_choice() {
        let link = LinkSpec { label: "1mbit/10ms".into(), bits_per_second: 1e6, latency_s: 0.01 };
        let mut c = Cell {
            link,
            strategy: "auto".into(),
            cache: "cold".into(),
            runs: vec![
                run(3.0, Some("paged")),
                run(1.0, Some("reordered")),
                run(2.0, Some("paged")),
            ],
            predicted_s: None,
            predicted_choice: None,
            predicted_measured_s: None,
        };
        assert_eq!(c.startup_s(), Some(2.0));
        assert_eq!(c.chosen(), Some("paged"));
        c.runs.pop();
        assert_eq!(c.startup_s(), Some(2.0), "the mean of the middle two");
        c.runs.clear();
        assert_eq!(c.startup_s(), None);
    }

    #[test]
    fn the_start_up_leaves_the_unmount_out() {
        let slow_unmount = CellRun { teardown_s: Some(5.0), ..run(5.75, None) };
        assert!((slow_unmount.startup_s() - 0.75).abs() < 1e-12);
        // A file from before `teardown_s` has only the wall time.
        assert_eq!(run(5.75, None).startup_s(), 5.75);
        let link = LinkSpec { label: "32mbit/10ms".into(), bits_per_second: 32e6, latency_s: 0.01 };
        let c = Cell {
            link,
            strategy: "paged".into(),
            cache: "cold".into(),
            runs: vec![slow_unmount, CellRun { teardown_s: Some(0.01), ..run(0.81, None) }],
            predicted_s: None,
            predicted_choice: None,
            predicted_measured_s: None,
        };
        assert!((c.startup_s().unwrap() - 0.775).abs() < 1e-12, "{:?}", c.startup_s());
    }
}
