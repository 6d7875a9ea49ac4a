//! What an experiment runs: its grid (links, strategies, cache states), the defaults of each,
//! and how it reports progress.

use std::path::PathBuf;

use coldstart_bundle::{Cancel, PackOptions};
use coldstart_lazyfs::StrategyOrAuto;
use coldstart_serve::Link;

/// A cache state of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheState {
    /// An empty chunk cache, and the server's files evicted from its page cache.
    Cold,
    /// An empty chunk cache, the server's files cached.
    WarmRemote,
}

impl CacheState {
    /// Its name in the options and the results (`cold`, `warm-remote`).
    pub fn name(self) -> &'static str {
        match self {
            CacheState::Cold => "cold",
            CacheState::WarmRemote => "warm-remote",
        }
    }
}

impl std::str::FromStr for CacheState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cold" => Ok(CacheState::Cold),
            "warm-remote" => Ok(CacheState::WarmRemote),
            o => Err(format!("unknown cache state `{o}`: use cold or warm-remote")),
        }
    }
}

/// A link of the grid, as given.
#[derive(Debug, Clone)]
pub struct GridLink {
    /// As given (`1mbit/100ms`).
    pub label: String,
    /// The link it emulates.
    pub link: Link,
    /// Starts per cell on this link, if not [`ExperimentOptions::runs`] (a slow link's cells
    /// take minutes a start).
    pub runs: Option<u32>,
}

/// The links of the grid unless told: the paper's (56 kbit/s to 3 Mbit/s at 10 to 200 ms) and
/// two modern ones (a 20 Mbit/s home link at 40 ms, a 100 Mbit/s office link at 5 ms).
pub fn default_links() -> Vec<GridLink> {
    let mut out = Vec::new();
    for bw in ["56kbit", "256kbit", "1mbit", "3mbit"] {
        for lat in ["10ms", "50ms", "200ms"] {
            out.push(format!("{bw}/{lat}"));
        }
    }
    out.push("20mbit/40ms".into());
    out.push("100mbit/5ms".into());
    out.iter().map(|l| grid_link(l).expect("the default links parse")).collect()
}

/// A link of the grid from its text (`20mbit/40ms`, or `56kbit/200ms:1` with its own number
/// of starts per cell), labelled as written without the starts.
pub fn grid_link(text: &str) -> Result<GridLink, String> {
    let text = text.trim();
    let (link, runs) = match text.rsplit_once(':') {
        Some((l, n)) => match n.parse::<u32>() {
            Ok(n) if n > 0 && u64::from(n) <= MAX_RUNS => (l, Some(n)),
            _ => {
                return Err(format!(
                    "{text}: the starts after `:` must be a whole number from 1 to {MAX_RUNS}, as in 56kbit/200ms:1"
                ))
            }
        },
        None => (text, None),
    };
    let parsed = link.parse().map_err(|e: coldstart_serve::LinkParseError| e.to_string())?;
    Ok(GridLink { label: link.to_owned(), link: parsed, runs })
}

/// A strategy of the grid: a mount's (a fixed one or `auto`), or `auto-hint`: `auto` told the
/// link (`--link-hint`) instead of measuring it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GridStrategy {
    /// A mount's strategy, a fixed one or `auto`.
    Mount(StrategyOrAuto),
    /// `auto` told the link instead of measuring it.
    AutoHint,
}

impl GridStrategy {
    /// Its name in the results.
    pub fn name(self) -> String {
        match self {
            GridStrategy::Mount(s) => s.to_string(),
            GridStrategy::AutoHint => "auto-hint".into(),
        }
    }

    pub(crate) fn mount(self) -> StrategyOrAuto {
        match self {
            GridStrategy::Mount(s) => s,
            GridStrategy::AutoHint => StrategyOrAuto::Auto,
        }
    }
}

impl std::str::FromStr for GridStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto-hint" => Ok(GridStrategy::AutoHint),
            s => s.parse().map(GridStrategy::Mount).map_err(|e| format!("{e}, or auto-hint")),
        }
    }
}

/// The strategies unless told: every fixed one, then `auto`.
pub fn default_strategies() -> Vec<GridStrategy> {
    let mut out: Vec<GridStrategy> = coldstart_lazyfs::Strategy::ALL
        .iter()
        .map(|s| GridStrategy::Mount(StrategyOrAuto::Fixed(*s)))
        .collect();
    out.push(GridStrategy::Mount(StrategyOrAuto::Auto));
    out
}

/// The cache states unless told: both.
pub const DEFAULT_CACHES: [CacheState; 2] = [CacheState::Cold, CacheState::WarmRemote];

/// Runs per cell unless told.
pub const DEFAULT_RUNS: u32 = 3;

/// The most runs per cell (`--runs`, a link's `:N`).
pub const MAX_RUNS: u64 = 1000;

/// The chunk size unless told: `pack`'s.
pub fn default_chunk_size() -> u64 {
    PackOptions::default().chunk_size
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ExperimentOptions {
    /// The program's directory, packed into the bundle.
    pub dir: PathBuf,
    /// The measured (held-out) command; its program relative to `dir`.
    pub command: Vec<String>,
    /// The profiled command, whose start-up reads are the hot set; relative to `dir`.
    pub profiled: Vec<String>,
    /// The links of the grid.
    pub links: Vec<GridLink>,
    /// The strategies of the grid.
    pub strategies: Vec<GridStrategy>,
    /// The cache states of the grid.
    pub caches: Vec<CacheState>,
    /// Starts per cell (unless a link says otherwise: [`GridLink::runs`]).
    pub runs: u32,
    /// The bundle's chunk size, bytes.
    pub chunk_size: u64,
    /// The mount's read-ahead in bytes; `None`: the mount chooses, as `mount` does.
    pub readahead: Option<u32>,
    /// Where bundles, chunk caches and mount points go (removed by the caller).
    pub work: PathBuf,
    /// The result file, written after every cell; an existing one is resumed.
    pub output: PathBuf,
    /// Measure nothing: predict the cells the result file holds again, with the model as it
    /// is now ([`run`](crate::run)).
    pub repredict: bool,
    /// Predict each link a second time with the link measured by `predict`, not given
    /// ([`Cell::predicted_measured_s`](coldstart_formats::Cell::predicted_measured_s)).
    pub predict_measured: bool,
    /// Once set, the experiment stops (packing, fetches, between starts) and keeps what it
    /// measured ([`ExperimentError::Interrupted`](crate::ExperimentError::Interrupted)).
    pub cancel: Cancel,
}

/// What the experiment reports as it goes (a progress bar). Every figure is in estimated
/// seconds of work, so that the remaining time can be told while cells differ a thousandfold.
pub trait Progress {
    /// The work ahead: its estimate in seconds, and what was already done (resumed).
    fn start(&mut self, total_s: f64, done_s: f64);
    /// A step of preparation or a run is starting.
    fn message(&mut self, text: &str);
    /// A run ended; it was estimated at `estimate_s`.
    fn advance(&mut self, estimate_s: f64);
}

/// Does nothing.
pub struct Quiet;

impl Progress for Quiet {
    fn start(&mut self, _: f64, _: f64) {}
    fn message(&mut self, _: &str) {}
    fn advance(&mut self, _: f64) {}
}
