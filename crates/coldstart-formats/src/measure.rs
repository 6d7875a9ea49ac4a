//! The result file of `coldstart measure` (format `coldstart-measure`,
//! docs/formats/measure.md): one serialisable report, which `coldstart-measure` fills in and
//! renders (JSON, CSV, Markdown, the terminal table) and `coldstart report` reads.
//!
//! [`from_json`] reads it, checking the format name and version first, so an old or foreign
//! file gets a message that says what it is instead of a serde error. Bump [`FORMAT_VERSION`]
//! on any incompatible change.

mod eviction;
mod seek;

use std::path::PathBuf;

use coldstart_error::Category;
use serde::{Deserialize, Serialize};

pub use eviction::{EvictionReport, Holder, Residency, Unreadable, MAX_HOLDERS_PER_FILE};
pub use seek::SeekModel;

/// The `format` field of every exported report.
pub const FORMAT_NAME: &str = "coldstart-measure";
/// The `version` field of every exported report. Version 2 counts runs whose own files kept
/// pages that other processes map (reported in [`RunRecord::held_by_others`]); in version 1
/// such runs were excluded, so a reader of version 1 would take them for fully cold.
pub const FORMAT_VERSION: u32 = 2;
/// Versions this build reads: version 1 reads as version 2 without held pages.
pub const READABLE_VERSIONS: [u32; 2] = [1, 2];

/// Figures for one run of one command. `None` means "not available on this system", never 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Wall time from just before `exec` to readiness, in seconds (monotonic clock).
    pub wall_s: f64,
    /// User CPU of the whole process tree, seconds.
    pub user_s: Option<f64>,
    /// System CPU of the whole process tree, seconds.
    pub sys_s: Option<f64>,
    /// Major page faults of the whole tree (pages that had to be read from storage).
    pub major_faults: Option<u64>,
    /// Minor page faults of the whole tree.
    pub minor_faults: Option<u64>,
    /// Bytes the tree caused to be read from storage.
    pub read_bytes: Option<u64>,
    /// Read requests completed by the block devices during the run.
    pub read_requests: Option<u64>,
    /// Peak memory of the tree, bytes.
    pub peak_memory_bytes: Option<u64>,
    /// Instructions retired (user space), where `perf_event_open` supports it.
    pub instructions: Option<u64>,
    /// Read requests the emulated storage device served (`--storage` only). Only the run
    /// reads from that device, so unlike [`Counters::read_requests`] the count is exact; it
    /// covers the files on the device, not the system libraries left on the host. Absent from
    /// reports written before it existed.
    #[serde(default)]
    pub storage_read_requests: Option<u64>,
    /// Bytes the emulated storage device read (`--storage` only), exact as
    /// [`Counters::storage_read_requests`] is. Absent from reports written before it existed;
    /// in the JSON runs only (no summary, CSV column or table line).
    #[serde(default)]
    pub storage_read_bytes: Option<u64>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Outcome {
    /// The readiness signal was seen.
    Ready,
    /// The run never became ready within the timeout; it was killed.
    Timeout,
    /// The process exited before the readiness signal (for non-`exit` signals).
    ExitedBeforeReady {
        /// Its exit status, if it exited.
        code: Option<i32>,
        /// The signal that killed it, if one did.
        signal: Option<i32>,
    },
    /// Readiness was `exit` and the process exited with a non-zero status or a signal.
    Failed {
        /// Its exit status, if it exited.
        code: Option<i32>,
        /// The signal that killed it, if one did.
        signal: Option<i32>,
    },
}

/// One run of one command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// 0-based index among the measured runs of this command (warm-up runs are not recorded).
    pub index: usize,
    /// How it ended.
    pub outcome: Outcome,
    /// Its figures.
    pub counters: Counters,
    /// What eviction of the program's own files did before this run, and the residency
    /// measured after it.
    pub eviction: Option<EvictionReport>,
    /// The pages of the program's files (its own and the shared system files) that stayed
    /// cached before this run because live processes outside it map them; `None` for `hot`
    /// and when no page was held (absent in older reports).
    #[serde(default)]
    pub held_by_others: Option<HeldByOthers>,
    /// Why this run is kept out of the statistics, if it is (eviction failed, not ready,
    /// failed). Such runs are reported, never silently counted.
    pub excluded: Option<String>,
    /// The last lines the program wrote to standard error, for a run that failed, exited
    /// before the readiness signal or timed out (at most 5, each cut at 160 characters; after
    /// the line naming the error when it lies above them: `coldstart_sys::stderr::last_lines`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stderr_tail: Vec<String>,
}

/// Pages that stayed cached before a run because processes outside it map them: inherent on
/// a running system (every shell maps libc, the locale archive, the gconv cache and its own
/// binary), so they do not exclude the run, and are reported with it instead.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldByOthers {
    /// Files with held pages.
    pub files: usize,
    /// Held pages, summed over the files.
    pub pages: u64,
    /// `pages` in bytes.
    pub bytes: u64,
    /// Of `pages`, those start-up uses: the pages a discovery run had in its page tables (at
    /// fault-around granularity), with every held page of a file it was not seen to map
    /// counted (so this is an upper bound where [`HeldFile::touched_pages`] is `None`).
    pub touched_pages: u64,
    /// `touched_pages` in bytes: what start-up would have read of them after a fresh boot.
    pub touched_bytes: u64,
    /// Per file, most held pages first.
    pub by_file: Vec<HeldFile>,
    /// Processes that map them, at most [`HeldByOthers::MAX_HOLDERS`], one entry each.
    pub holders: Vec<Holder>,
    /// Processes beyond those.
    pub holders_omitted: usize,
}

impl HeldByOthers {
    /// At most this many holders are recorded.
    pub const MAX_HOLDERS: usize = 8;
}

/// One file with held pages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldFile {
    /// The file.
    pub path: PathBuf,
    /// Held pages of the file.
    pub pages: u64,
    /// Of those, the pages start-up uses; `None` when start-up was not seen to map the file.
    pub touched_pages: Option<u64>,
    /// Whether it is one of the program's own files (else a shared system file: a system
    /// library, system-wide data).
    pub own: bool,
}

/// All runs of one command and their statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandResult {
    /// A short label (`A`, `B`, or the command line).
    pub label: String,
    /// The command line.
    pub command: Vec<String>,
    /// Every measured run, counted or not.
    pub runs: Vec<RunRecord>,
    /// Statistics over the included runs, per metric (`wall_s`, `major_faults`, ...: the
    /// names of the [`Counters`] fields they were read from).
    pub summaries: Vec<(String, Summary)>,
}

impl CommandResult {
    /// The statistics of the metric named `metric`, if it was measured.
    pub fn summary(&self, metric: &str) -> Option<&Summary> {
        self.summaries.iter().find(|(m, _)| m == metric).map(|(_, s)| s)
    }
}

/// Statistics of one metric over the included runs (computed by [`Summary::from_samples`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Samples: the included runs that measured the metric.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Their median.
    pub median: f64,
    /// Mean with the highest and lowest sample dropped (the paper's method); the plain mean
    /// when fewer than 3 samples.
    pub trimmed_mean: f64,
    /// Sample standard deviation (n - 1 in the denominator).
    pub stddev: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// 95% bootstrap confidence interval of the median.
    pub ci95: (f64, f64),
    /// Median absolute deviation (scaled by 1.4826 to estimate sigma).
    pub mad: f64,
    /// Indices (into the samples given) of outliers: |x - median| > 3 MAD.
    pub outliers: Vec<usize>,
}

/// The comparison of two commands measured interleaved (A B A B ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Which metric (normally `wall_s`).
    pub metric: String,
    /// median(B) / median(A).
    pub ratio: f64,
    /// 95% bootstrap confidence interval of the ratio.
    pub ratio_ci95: (f64, f64),
    /// Two-sided Mann-Whitney U p-value.
    pub p_value: f64,
    /// What A has that B lacks, when A is the change and B the base (`measure --prefetch DB
    /// --compare`: "the prefetch"); the comparison is then said of A against B. `None`: B is
    /// the change, said against A.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
}

/// The part of start-up spent waiting for storage, estimated as the Firefox measurements
/// recommend: median wall time in a colder state minus median wall time hot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoShare {
    /// The command's label (without the cache state).
    pub label: String,
    /// The colder state (`cold`, `selective` or `warm`).
    pub cache: String,
    /// Median wall time in that state, seconds.
    pub cold_median_s: f64,
    /// Median wall time hot, seconds.
    pub hot_median_s: f64,
    /// `cold_median_s - hot_median_s`, seconds.
    pub io_s: f64,
    /// `io_s / cold_median_s`: the fraction of the colder start-up that is I/O.
    pub fraction: f64,
}

/// Facts about the machine and the measurement that a reader needs to trust the figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// CPUs available.
    pub cpus: usize,
    /// `v1` or `v2`: which cgroup hierarchy counted the runs.
    pub cgroup: String,
    /// Scaling governor of cpu0, if exposed.
    pub cpu_governor: Option<String>,
    /// Whether the measurement ran as root.
    pub is_root: bool,
    /// What reclaims idle page-cache pages on its own on this machine, if anything does
    /// (`DAMON pageout (kdamond 0)`, `DAMON_RECLAIM`): warm and hot pages may leave the cache
    /// between runs.
    #[serde(default)]
    pub page_reclaim: Option<String>,
}

/// A whole `coldstart measure` invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasureReport {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// Always [`FORMAT_VERSION`] when written by this build.
    pub version: u32,
    /// The cache state, as given (`cold`, `selective`, `warm`, `hot`).
    pub cache: String,
    /// The readiness signal, as given.
    pub ready: String,
    /// Warm-up runs before the measured runs of each command (not recorded).
    pub warmup: usize,
    /// The machine.
    pub environment: Environment,
    /// Each command in each cache state (in a comparison: `A` and `B`).
    pub commands: Vec<CommandResult>,
    /// A against B, when two commands were compared.
    pub comparison: Option<Comparison>,
    /// The I/O share of start-up, when a hot state was measured beside a colder one.
    #[serde(default)]
    pub io_share: Vec<IoShare>,
    /// Warnings that name a remedy.
    pub warnings: Vec<String>,
    /// The emulated storage the runs read the program's files from (`--storage`); `None`
    /// when they ran on this machine's own disk.
    #[serde(default)]
    pub storage: Option<StorageInfo>,
    /// For each warm or hot series: the cached pages held in memory through its runs, so
    /// neither memory pressure nor a proactive reclaimer could take them back between runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resident_holds: Vec<ResidentHoldInfo>,
}

/// The pages a warm or hot series held resident (`mlock(2)` of what the warm-up left cached:
/// no page read in, none let go).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResidentHoldInfo {
    /// `warm` or `hot`.
    pub cache: String,
    /// Files with pages held.
    pub files: usize,
    /// Bytes held.
    pub bytes: u64,
    /// Why part of what was cached was not held (no privilege to lock memory, the budget).
    pub incomplete: Option<String>,
}

/// The emulated storage of a measurement: the profile, what was put on it, and how fast this
/// machine's disk is through it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageInfo {
    /// Profile name: `hdd`, `hdd-seek`, `emmc`, `sata-ssd`, `nvme` or `custom`.
    pub profile: String,
    /// Read requests per second allowed; `None`: not limited.
    pub read_iops: Option<u64>,
    /// Read bytes per second allowed; `None`: not limited.
    pub read_bps: Option<u64>,
    /// Read-ahead of the emulated device, KiB.
    pub readahead_kb: u64,
    /// The disk model that timed the reads (`hdd-seek`), when not the cgroup's limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seek: Option<SeekModel>,
    /// The files and directories copied onto the device (bind-mounted at these paths).
    pub paths: Vec<std::path::PathBuf>,
    /// Random 4 KiB reads per second this machine served through the unthrottled device.
    pub host_read_iops: Option<f64>,
    /// Set when that is too slow to emulate the profile faithfully (also in `warnings`).
    pub fidelity_warning: Option<String>,
}

/// Why a JSON report could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The `format` field is missing or is not `coldstart-measure`.
    #[error(
        "not a {FORMAT_NAME} report: its format is {found} (version {version}); this build reads \
         format \"{FORMAT_NAME}\" versions 1 to {FORMAT_VERSION}"
    )]
    WrongFormat {
        /// The `format` field as found (JSON), or `missing`.
        found: String,
        /// The `version` field as found (JSON), or `missing`.
        version: String,
    },
    /// The format is right but the version is not one this build reads.
    #[error(
        "unsupported {FORMAT_NAME} report version {found}: this build reads format \
         \"{FORMAT_NAME}\" versions 1 to {FORMAT_VERSION}; re-export it with a matching coldstart"
    )]
    UnsupportedVersion {
        /// The `version` field as found (JSON), or `missing`.
        found: String,
    },
    /// The JSON is malformed or does not match the format.
    #[error("invalid {FORMAT_NAME} report: {0}")]
    Json(#[from] serde_json::Error),
}

impl ReadError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ReadError::WrongFormat { .. }
            | ReadError::UnsupportedVersion { .. }
            | ReadError::Json(_) => Category::Usage,
        }
    }
}

/// Read a report (as `coldstart measure --export-json` writes it), rejecting other formats and versions by name. A
/// version 1 report reads as the current version: its fields are a subset, and none of its
/// counted runs had pages held by other processes (such runs were excluded then).
pub fn from_json(s: &str) -> Result<MeasureReport, ReadError> {
    let value: serde_json::Value = serde_json::from_str(s)?;
    let shown = |v: Option<&serde_json::Value>| match v {
        None => "missing".to_string(),
        Some(v) => v.to_string(),
    };
    let format = value.get("format");
    if format.and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
        return Err(ReadError::WrongFormat {
            found: shown(format),
            version: shown(value.get("version")),
        });
    }
    let version = value.get("version");
    if !version
        .and_then(|v| v.as_u64())
        .is_some_and(|v| READABLE_VERSIONS.map(u64::from).contains(&v))
    {
        return Err(ReadError::UnsupportedVersion { found: shown(version) });
    }
    let mut report: MeasureReport = serde_json::from_value(value)?;
    report.version = FORMAT_VERSION;
    Ok(report)
}
