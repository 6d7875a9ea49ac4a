//! Recorded runs, and a [`Runner`] that replays them: the evidence the rules' limits come from.
//!
//! A **recording** (`coldstart-gate-noise`, written by `bench/gate-noise.sh` through the
//! `noise-record` example) holds every run of an unchanged program measured as a gate measures
//! it: batches of cold and hot runs on the emulated device (each batch its own discovery and
//! device, as a gate's batches are), the calibration loop after each run, and exact page
//! profiles, with the disturbance the machine was under while they ran (quiet, CPU load,
//! another process's direct-I/O reads, memory pressure, buffered reads with read-ahead) and
//! how long each step took. The recordings under `tests/noise/` are the noise model of
//! docs/gate.md.
//!
//! [`Replay`] serves those runs to [`crate::run::record`] and [`crate::run::gate`] in the order
//! they were measured, so the rules and the order of steps are tested on what real programs
//! did on a busy machine, without running anything.

use std::collections::VecDeque;
use std::path::Path;

use coldstart_formats::measure::Counters;
use coldstart_measure::CacheState;
use coldstart_storage::StorageProfile;
use serde::{Deserialize, Serialize};

use crate::budget::Costs;
use crate::error::GateError;
use crate::run::{Batch, PageCounts, Plan, Runner, StateRuns};

/// The `format` of a recording.
pub const FORMAT: &str = "coldstart-gate-noise";
/// Its `version`.
pub const VERSION: u32 = 1;

/// The figures of one recorded run: [`Counters`] without what a gate does not read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub wall_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sys_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_faults: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_read_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_read_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<u64>,
}

impl From<&Counters> for Run {
    fn from(c: &Counters) -> Run {
        Run {
            wall_s: c.wall_s,
            user_s: c.user_s,
            sys_s: c.sys_s,
            major_faults: c.major_faults,
            read_bytes: c.read_bytes,
            read_requests: c.read_requests,
            device_read_requests: c.storage_read_requests,
            device_read_bytes: c.storage_read_bytes,
            instructions: c.instructions,
        }
    }
}

impl Run {
    /// The counters a measurement would have given.
    pub fn counters(&self) -> Counters {
        Counters {
            wall_s: self.wall_s,
            user_s: self.user_s,
            sys_s: self.sys_s,
            major_faults: self.major_faults,
            read_bytes: self.read_bytes,
            read_requests: self.read_requests,
            storage_read_requests: self.device_read_requests,
            storage_read_bytes: self.device_read_bytes,
            instructions: self.instructions,
            ..Counters::default()
        }
    }
}

/// One measurement of a recording: as a gate's batch, its own discovery and emulated device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordedBatch {
    pub cold: Vec<Run>,
    pub hot: Vec<Run>,
    /// The calibration loop's seconds after each measured run.
    pub calibration: Vec<f64>,
    /// How long the whole measurement took (discovery, copy, warm-ups, runs).
    pub seconds: f64,
}

/// Every run of an unchanged program under one disturbance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    pub format: String,
    pub version: u32,
    /// `node`, `python3`, `sample`, `sample-bench`, ...
    pub program: String,
    /// `quiet`, `busy1`, `busy2`, `direct-io`, `reclaim`, `readahead`.
    pub disturbance: String,
    /// What the disturbance was, in words.
    pub description: String,
    pub command: Vec<String>,
    /// The emulated device the runs read the program's files from.
    pub storage: Option<StorageProfile>,
    /// The machine's 1-minute load average before and after.
    pub load: (f64, f64),
    /// Seconds since the epoch when it began.
    pub created_unix: u64,
    pub batches: Vec<RecordedBatch>,
    /// Pages touched per exact page profile.
    pub pages: Vec<f64>,
    /// The profiles' `pages.source`.
    pub pages_source: String,
    /// Seconds each page profile took.
    pub pages_seconds: Vec<f64>,
}

impl Recording {
    /// Read and check a recording.
    pub fn read(path: &Path) -> Result<Recording, GateError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| GateError::Read { path: path.to_owned(), source })?;
        let r: Recording = serde_json::from_str(&text).map_err(|e| GateError::Parse {
            path: path.to_owned(),
            what: "gate noise recording",
            message: e.to_string(),
        })?;
        if r.format != FORMAT || r.version != VERSION {
            return Err(GateError::Parse {
                path: path.to_owned(),
                what: "gate noise recording",
                message: format!(
                    "it is `{}` version {}; this build reads `{FORMAT}` version {VERSION}",
                    r.format, r.version
                ),
            });
        }
        Ok(r)
    }

    /// Every recorded run of `state` (`cold` or `hot`), batch after batch.
    pub fn runs(&self, state: CacheState) -> Vec<&Run> {
        self.batches
            .iter()
            .flat_map(|b| if state == CacheState::Hot { &b.hot } else { &b.cold })
            .collect()
    }

    /// The calibration loop's values, batch after batch.
    pub fn calibration(&self) -> Vec<f64> {
        self.batches.iter().flat_map(|b| b.calibration.iter().copied()).collect()
    }

    /// What the steps cost while it was recorded: a run of a state its median time scaled by
    /// the measurements' overhead (the recorded batches' seconds over their runs' times),
    /// a page profile its median.
    pub fn costs(&self) -> Costs {
        let walls: f64 =
            self.batches.iter().flat_map(|b| b.cold.iter().chain(&b.hot)).map(|r| r.wall_s).sum();
        let seconds: f64 = self.batches.iter().map(|b| b.seconds).sum();
        let overhead = if walls > 0.0 { (seconds / walls).max(1.0) } else { 1.0 };
        let median = |xs: Vec<f64>| coldstart_formats::stats::median(&xs);
        let mut costs = Costs::default();
        for state in [CacheState::Cold, CacheState::Hot] {
            let t = median(self.runs(state).iter().map(|r| r.wall_s).collect());
            if t.is_finite() {
                costs.run_s.insert(state.to_string(), t * overhead);
            }
        }
        let p = median(self.pages_seconds.clone());
        costs.profile_s = p.is_finite().then_some(p);
        costs
    }
}

/// A [`Runner`] that serves recorded runs in order: each state's runs from one queue, the
/// calibration values with them, page counts from another; at the end of a queue it starts
/// over (a recording is a sample of a program's behaviour, not a script of one gate).
#[derive(Debug, Clone)]
pub struct Replay {
    cold: VecDeque<Run>,
    hot: VecDeque<Run>,
    calibration: VecDeque<f64>,
    pages: VecDeque<f64>,
    source: String,
    costs: Costs,
    all: Recording,
    /// The runs asked for, per call: (states, runs).
    pub calls: Vec<(Vec<CacheState>, usize)>,
    /// The page profiles asked for, per call.
    pub profile_calls: Vec<usize>,
    /// Change every served run (a regression applied to a recorded program).
    pub change: Option<fn(CacheState, &mut Run)>,
    /// Pages added to every served page count.
    pub extra_pages: f64,
}

impl Replay {
    pub fn new(recording: &Recording) -> Replay {
        let mut r = Replay {
            cold: VecDeque::new(),
            hot: VecDeque::new(),
            calibration: VecDeque::new(),
            pages: VecDeque::new(),
            source: recording.pages_source.clone(),
            costs: recording.costs(),
            all: recording.clone(),
            calls: Vec::new(),
            profile_calls: Vec::new(),
            change: None,
            extra_pages: 0.0,
        };
        r.refill();
        r
    }

    /// Start from `skip` runs in (another part of the same recording).
    pub fn skip(mut self, skip: usize) -> Replay {
        for _ in 0..skip {
            self.next(CacheState::Cold);
            self.next(CacheState::Hot);
            self.next_calibration();
        }
        self
    }

    fn refill(&mut self) {
        let all = &self.all;
        if self.cold.is_empty() {
            self.cold = all.runs(CacheState::Cold).into_iter().cloned().collect();
        }
        if self.hot.is_empty() {
            self.hot = all.runs(CacheState::Hot).into_iter().cloned().collect();
        }
        if self.calibration.is_empty() {
            self.calibration = all.calibration().into();
        }
        if self.pages.is_empty() {
            self.pages = all.pages.iter().copied().collect();
        }
    }

    fn next(&mut self, state: CacheState) -> Option<Run> {
        self.refill();
        let q = if state == CacheState::Hot { &mut self.hot } else { &mut self.cold };
        let mut run = q.pop_front()?;
        if let Some(f) = self.change {
            f(state, &mut run);
        }
        Some(run)
    }

    fn next_calibration(&mut self) -> Option<f64> {
        self.refill();
        self.calibration.pop_front()
    }
}

impl Runner for Replay {
    fn measure(
        &mut self,
        _plan: &Plan,
        states: &[CacheState],
        runs: usize,
    ) -> Result<Batch, GateError> {
        self.calls.push((states.to_vec(), runs));
        let mut out = Batch { cgroup: "v1".into(), ..Batch::default() };
        for &state in states {
            let counters =
                (0..runs).filter_map(|_| self.next(state)).map(|r| r.counters()).collect();
            out.states.push(StateRuns { counters, excluded: Vec::new() });
            out.seconds += self.costs.run(state).unwrap_or(0.0) * runs as f64;
            for _ in 0..runs {
                if let Some(c) = self.next_calibration() {
                    out.calibration.push(c);
                }
            }
        }
        Ok(out)
    }

    fn pages(&mut self, _plan: &Plan, profiles: usize) -> Result<PageCounts, GateError> {
        self.profile_calls.push(profiles);
        let mut values = Vec::new();
        for _ in 0..profiles {
            self.refill();
            if let Some(p) = self.pages.pop_front() {
                values.push(p + self.extra_pages);
            }
        }
        let seconds = self.costs.profile().unwrap_or(0.0) * profiles as f64;
        Ok(PageCounts { values, source: self.source.clone(), seconds, ..PageCounts::default() })
    }
}
