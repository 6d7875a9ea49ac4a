//! The order of a gate's steps, apart from running anything: a [`Runner`] measures (the
//! Linux one in [`crate::linux`], a scripted one in tests), and this module decides what to
//! measure, how many runs, and what the figures say.
//!
//! **Recording** (`--update`): every cache state `baseline_runs` times, then the page
//! profiles; the result is a [`Baseline`].
//!
//! **Gating**: measured exactly as the baseline was (its cache states, storage, readiness,
//! page profiles; a flag asking for something else is refused). A first batch of
//! `first_runs` per state; then, while a state's time is unclear and its runs are below the
//! bound the time rule sets ([`crate::time::run_bound`]), another batch of that state. The
//! steady figures use every run. When the environment differs from the baseline's, the first
//! batch is all that runs and nothing is compared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use coldstart_measure::result::Counters;
use coldstart_measure::storage::StorageProfile;
use coldstart_measure::{CacheState, Ready};

use crate::baseline::{Baseline, Calibration, Samples, Settings, FORMAT, VERSION};
use crate::compare::{compare, Rules};
use crate::drift::{self, Method};
use crate::environment::{self, Environment};
use crate::error::GateError;
use crate::figure::{Figure, Slack, Verdict};
use crate::history::Entry;
use crate::report::GateReport;
use crate::time::{self, TimeRule};

/// Where the program's files are read from.
#[derive(Debug, Clone, PartialEq)]
pub enum StorageChoice {
    /// Emulated storage where this machine's disk hides cold start and coldstart runs as root
    /// (the default; a gate takes its baseline's).
    Auto,
    /// This machine's disk.
    Off,
    /// This emulated device.
    Profile(StorageProfile),
}

/// The profile [`StorageChoice::Auto`] emulates: a hard disk, on which a cold start's time is
/// its reads, so a change in what start-up reads shows in its time as well.
pub fn default_profile() -> StorageProfile {
    StorageProfile::hdd()
}

/// What a gate is asked to do. `None` fields take the baseline's setting when gating, and the
/// default when recording.
#[derive(Debug, Clone)]
pub struct GateOptions {
    pub command: Vec<String>,
    pub ready: Option<Ready>,
    pub states: Option<Vec<CacheState>>,
    pub storage: StorageChoice,
    /// Where the emulated device's backing file goes.
    pub storage_dir: PathBuf,
    pub page_profiles: Option<usize>,
    pub timeout: Option<Duration>,
    /// Runs per state of a baseline.
    pub baseline_runs: usize,
    /// Runs per state of a gate's first batch, and of each batch after it.
    pub first_runs: usize,
    pub time: TimeRule,
    /// Slack per steady figure (others: [`Slack::default_for`]).
    pub slack: BTreeMap<Figure, Slack>,
    /// The commit measured; `None`: [`detect_commit`].
    pub commit: Option<String>,
    /// Facts to record and compare (`--env NAME=VALUE`).
    pub facts: BTreeMap<String, String>,
    pub drift: Method,
}

impl GateOptions {
    pub fn new(command: Vec<String>) -> GateOptions {
        GateOptions {
            command,
            ready: None,
            states: None,
            storage: StorageChoice::Auto,
            storage_dir: PathBuf::from(coldstart_measure::storage::DEFAULT_WORK_DIR),
            page_profiles: None,
            timeout: None,
            baseline_runs: 30,
            first_runs: 10,
            time: TimeRule::default(),
            slack: BTreeMap::new(),
            commit: None,
            facts: BTreeMap::new(),
            drift: drift::DEFAULT_METHOD,
        }
    }

    fn validate(&self) -> Result<(), GateError> {
        if self.command.is_empty() {
            return Err(GateError::Invalid("no command to gate: give it after `--`".into()));
        }
        if self.baseline_runs < time::MIN_RUNS || self.first_runs < time::MIN_RUNS {
            return Err(GateError::Invalid(format!(
                "runs per state must be at least {}",
                time::MIN_RUNS
            )));
        }
        let t = &self.time;
        if !(t.min_effect >= 0.0 && t.min_effect.is_finite()) {
            return Err(GateError::Invalid(
                "the minimum effect must be a share of 0 or more".into(),
            ));
        }
        if t.max_runs < self.first_runs {
            return Err(GateError::Invalid(format!(
                "--max-runs {} is below the first batch of {} runs",
                t.max_runs, self.first_runs
            )));
        }
        Ok(())
    }
}

/// How runs are made, resolved from the options (and the baseline).
#[derive(Debug, Clone)]
pub struct Plan {
    pub command: Vec<String>,
    pub ready: Ready,
    pub states: Vec<CacheState>,
    pub storage: Option<StorageProfile>,
    pub storage_reason: String,
    pub storage_dir: PathBuf,
    pub page_profiles: usize,
    pub timeout: Duration,
}

impl Plan {
    fn settings(&self) -> Settings {
        Settings {
            states: self.states.iter().map(|s| s.to_string()).collect(),
            ready: self.ready.to_string(),
            storage: self.storage.clone(),
            storage_reason: self.storage_reason.clone(),
            page_profiles: self.page_profiles,
            timeout_s: self.timeout.as_secs_f64(),
        }
    }
}

/// The counted runs of one cache state in one batch.
#[derive(Debug, Clone, Default)]
pub struct StateRuns {
    /// The counters of the runs that counted.
    pub counters: Vec<Counters>,
    /// Why the others were excluded.
    pub excluded: Vec<String>,
}

/// What one measurement gave: per cache state asked for, in that order.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub states: Vec<StateRuns>,
    /// The calibration loop's time after each measured run.
    pub calibration: Vec<f64>,
    /// How runs were counted (`v1`, `v2`, `rusage`).
    pub cgroup: String,
    pub warnings: Vec<String>,
}

/// What the page profiles gave.
#[derive(Debug, Clone, Default)]
pub struct PageCounts {
    /// Pages touched, per profile.
    pub values: Vec<f64>,
    /// The profiles' `pages.source`.
    pub source: String,
    /// Whether the profiles were samples (perf, without root): then they are not steady.
    pub sampled: bool,
    pub warnings: Vec<String>,
}

/// What measures for a gate.
pub trait Runner {
    /// `runs` measured runs of each of `states`, in that order, as `plan` says.
    fn measure(
        &mut self,
        plan: &Plan,
        states: &[CacheState],
        runs: usize,
    ) -> Result<Batch, GateError>;
    /// `profiles` page profiles of the start-up, with the program's files cached.
    fn pages(&mut self, plan: &Plan, profiles: usize) -> Result<PageCounts, GateError>;
}

/// What a gate tells its caller while it works.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A step begins (`cold, hot: 10 runs each`).
    Step(String),
}

/// The commit measured: `$GITHUB_SHA`, `$CI_COMMIT_SHA`, else `git rev-parse HEAD` in the
/// working directory.
pub fn detect_commit() -> Option<String> {
    for var in ["GITHUB_SHA", "CI_COMMIT_SHA"] {
        if let Some(v) = std::env::var(var).ok().filter(|v| !v.trim().is_empty()) {
            return Some(v.trim().to_string());
        }
    }
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let head = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !head.is_empty()).then_some(head)
}

/// The key of the settings a history entry was measured with.
pub fn settings_key(s: &Settings) -> String {
    let storage = s.storage.as_ref().map_or("disk".to_string(), |p| {
        format!("{}:{:?}:{:?}:{}", p.name, p.read_iops, p.read_bps, p.readahead_kb)
    });
    format!("states={} ready={} storage={storage}", s.states.join(","), s.ready)
}

fn program(command: &[String]) -> Result<PathBuf, GateError> {
    coldstart_measure::launch::resolve_program(command)
        .map_err(|e| GateError::Measure(coldstart_measure::measure::MeasureError::Launch(e)))
}

/// The plan of a new baseline: the options, else the defaults (cold and hot as root,
/// selective and hot otherwise; emulated storage where this disk hides cold start; five page
/// profiles as root, none otherwise).
pub fn plan_for_record(opts: &GateOptions) -> Result<(Plan, Vec<String>), GateError> {
    opts.validate()?;
    let root = coldstart_sys::is_root();
    let mut warnings = Vec::new();
    let states = opts.states.clone().unwrap_or_else(|| {
        let colder = if root { CacheState::Cold } else { CacheState::Selective };
        vec![colder, CacheState::Hot]
    });
    let disk = environment::disk_of(&program(&opts.command)?);
    let (storage, storage_reason) = match &opts.storage {
        StorageChoice::Off => (None, "--storage none".to_string()),
        StorageChoice::Profile(p) => (Some(p.clone()), format!("--storage {}", p.name)),
        StorageChoice::Auto => match environment::hides_cold_start(disk.as_ref()) {
            Some(why) if root => (Some(default_profile()), why),
            Some(why) => {
                warnings.push(format!(
                    "{why}; the storage emulation that would show it needs root: the I/O figures here \
                     may miss what a user's disk reads"
                ));
                (None, format!("{why}, but emulating storage needs root"))
            }
            None => (
                None,
                disk.as_ref().map_or("not on a block device".to_string(), |d| {
                    format!(
                        "{} reads ahead {} KiB and is rotational, as users' disks",
                        d.device, d.readahead_kb
                    )
                }),
            ),
        },
    };
    let page_profiles = match opts.page_profiles {
        Some(n) => n,
        None if root => 5,
        None => {
            warnings.push(
                "pages touched are not counted: an exact page profile needs root (tracefs); run as root for them"
                    .into(),
            );
            0
        }
    };
    let plan = Plan {
        command: opts.command.clone(),
        ready: opts.ready.clone().unwrap_or(Ready::Exit),
        states,
        storage,
        storage_reason,
        storage_dir: opts.storage_dir.clone(),
        page_profiles,
        timeout: opts.timeout.unwrap_or(Duration::from_secs(60)),
    };
    Ok((plan, warnings))
}

/// The plan of a gate against `base` (read from `path`): the baseline's settings; an option
/// that asks for others is refused.
pub fn plan_from_baseline(
    opts: &GateOptions,
    base: &Baseline,
    path: &Path,
) -> Result<Plan, GateError> {
    opts.validate()?;
    let s = &base.settings;
    let mismatch = |what: &'static str, baseline: String, now: String| GateError::Settings {
        path: path.to_owned(),
        what,
        baseline,
        now,
    };
    let mut states = Vec::new();
    for name in &s.states {
        states.push(name.parse::<CacheState>().map_err(|e| GateError::Parse {
            path: path.to_owned(),
            what: "gate baseline",
            message: format!("settings.states: {e}"),
        })?);
    }
    if let Some(asked) = &opts.states {
        if asked != &states {
            let list =
                |v: &[CacheState]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
            return Err(mismatch("--cache", list(&states), list(asked)));
        }
    }
    let ready: Ready = s.ready.parse().map_err(|e| GateError::Parse {
        path: path.to_owned(),
        what: "gate baseline",
        message: format!("settings.ready: {e}"),
    })?;
    if let Some(asked) = &opts.ready {
        if asked.to_string() != s.ready {
            return Err(mismatch("--ready", s.ready.clone(), asked.to_string()));
        }
    }
    let name =
        |p: &Option<StorageProfile>| p.as_ref().map_or("none".to_string(), |p| p.name.clone());
    match &opts.storage {
        StorageChoice::Auto => {}
        StorageChoice::Off if s.storage.is_none() => {}
        StorageChoice::Profile(p) if s.storage.as_ref() == Some(p) => {}
        StorageChoice::Off => return Err(mismatch("--storage", name(&s.storage), "none".into())),
        StorageChoice::Profile(p) => {
            return Err(mismatch("--storage", name(&s.storage), p.name.clone()))
        }
    }
    if let Some(n) = opts.page_profiles.filter(|n| *n != s.page_profiles) {
        return Err(mismatch("--page-profiles", s.page_profiles.to_string(), n.to_string()));
    }
    Ok(Plan {
        command: opts.command.clone(),
        ready,
        states,
        storage: s.storage.clone(),
        storage_reason: s.storage_reason.clone(),
        storage_dir: opts.storage_dir.clone(),
        page_profiles: s.page_profiles,
        timeout: opts.timeout.unwrap_or(Duration::from_secs_f64(s.timeout_s)),
    })
}

/// The runs gathered so far.
#[derive(Debug, Default)]
struct Gathered {
    /// Per state of the plan: counted runs, runs made, exclusion reasons.
    counted: Vec<Vec<Counters>>,
    made: Vec<usize>,
    excluded: Vec<Vec<String>>,
    calibration: Vec<f64>,
    cgroup: String,
    pages: Option<PageCounts>,
    warnings: Vec<String>,
}

impl Gathered {
    fn new(plan: &Plan) -> Gathered {
        let n = plan.states.len();
        Gathered {
            counted: vec![Vec::new(); n],
            made: vec![0; n],
            excluded: vec![Vec::new(); n],
            ..Gathered::default()
        }
    }

    fn add(&mut self, plan: &Plan, states: &[CacheState], runs: usize, batch: Batch) {
        for (state, got) in states.iter().zip(batch.states) {
            if let Some(i) = plan.states.iter().position(|s| s == state) {
                self.made[i] += runs;
                self.counted[i].extend(got.counters);
                self.excluded[i].extend(got.excluded);
            }
        }
        self.calibration.extend(batch.calibration);
        self.cgroup = batch.cgroup;
        // A later batch repeats the first one's warnings with other numbers: one of each kind.
        let kind =
            |w: &str| -> String { w.chars().filter(|c| !c.is_ascii_digit()).take(60).collect() };
        for w in batch.warnings {
            if !self.warnings.iter().any(|x| kind(x) == kind(&w)) {
                self.warnings.push(w);
            }
        }
    }

    /// Fail when a state has no counted run.
    fn check(&self, plan: &Plan) -> Result<(), GateError> {
        for (i, state) in plan.states.iter().enumerate() {
            if self.counted[i].is_empty() {
                let mut reasons = self.excluded[i].clone();
                reasons.dedup();
                reasons.truncate(2);
                return Err(GateError::NoRunCounted {
                    state: state.to_string(),
                    reasons: reasons.join("; "),
                });
            }
        }
        Ok(())
    }

    /// The measurement as a baseline (what `--update` writes, and what a gate compares).
    fn to_baseline(
        &self,
        plan: &Plan,
        env: &Environment,
        commit: Option<String>,
        warnings: &[String],
    ) -> Baseline {
        let mut figures = Vec::new();
        for (i, state) in plan.states.iter().enumerate() {
            figures.extend(figures_of(*state, &self.counted[i]));
        }
        if let Some(p) = self.pages.as_ref().filter(|p| !p.sampled && !p.values.is_empty()) {
            figures.push(Samples {
                figure: Figure::PagesTouched,
                state: CacheState::Hot.to_string(),
                values: p.values.clone(),
                source: Some(p.source.clone()),
            });
        }
        let mut all_warnings: Vec<String> = warnings.to_vec();
        all_warnings.extend(self.warnings.iter().cloned());
        if let Some(p) = &self.pages {
            all_warnings.extend(p.warnings.iter().cloned());
        }
        all_warnings.dedup();
        Baseline {
            format: FORMAT.into(),
            version: VERSION,
            created_unix: now_unix(),
            coldstart: env!("CARGO_PKG_VERSION").into(),
            commit,
            command: plan.command.clone(),
            settings: plan.settings(),
            environment: env.clone(),
            figures,
            calibration: (!self.calibration.is_empty()).then(|| Calibration {
                build: build().into(),
                rounds: crate::baseline::CALIBRATION_ROUNDS,
                values: self.calibration.clone(),
            }),
            warnings: all_warnings,
        }
    }
}

/// `release` or `debug`: how this coldstart was built (the calibration loop's speed depends
/// on it).
pub fn build() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The figures of one state's counted runs: time in every state, the I/O figures in a colder
/// one, instructions hot. A figure no run measured is left out (not available here).
/// How a figure's value is read from a run's counters.
type Reader = fn(&Counters) -> Option<f64>;

fn figures_of(state: CacheState, runs: &[Counters]) -> Vec<Samples> {
    let mut list: Vec<(Figure, Reader)> = vec![(Figure::Time, |c| Some(c.wall_s))];
    if state == CacheState::Hot {
        list.push((Figure::Instructions, |c| c.instructions.map(|v| v as f64)));
    } else {
        list.push((Figure::DeviceReadBytes, |c| c.storage_read_bytes.map(|v| v as f64)));
        list.push((Figure::DeviceReadRequests, |c| c.storage_read_requests.map(|v| v as f64)));
        list.push((Figure::ReadBytes, |c| c.read_bytes.map(|v| v as f64)));
        list.push((Figure::ReadRequests, |c| c.read_requests.map(|v| v as f64)));
        list.push((Figure::MajorFaults, |c| c.major_faults.map(|v| v as f64)));
    }
    list.into_iter()
        .filter_map(|(figure, get)| {
            let values: Vec<f64> = runs.iter().filter_map(get).collect();
            (!values.is_empty()).then(|| Samples {
                figure,
                state: state.to_string(),
                values,
                source: None,
            })
        })
        .collect()
}

/// Record a baseline.
pub fn record(
    opts: &GateOptions,
    runner: &mut dyn Runner,
    progress: &mut dyn FnMut(Progress),
) -> Result<Baseline, GateError> {
    let (plan, warnings) = plan_for_record(opts)?;
    let mut got = Gathered::new(&plan);
    progress(Progress::Step(format!(
        "{}: {} runs each",
        states_list(&plan.states),
        opts.baseline_runs
    )));
    let batch = runner.measure(&plan, &plan.states, opts.baseline_runs)?;
    got.add(&plan, &plan.states, opts.baseline_runs, batch);
    got.check(&plan)?;
    if plan.page_profiles > 0 {
        progress(Progress::Step(format!("{} page profiles", plan.page_profiles)));
        got.pages = Some(runner.pages(&plan, plan.page_profiles)?);
    }
    let env = Environment::collect(&program(&plan.command)?, &got.cgroup, opts.facts.clone());
    let commit = opts.commit.clone().or_else(detect_commit);
    Ok(got.to_baseline(&plan, &env, commit, &warnings))
}

fn states_list(states: &[CacheState]) -> String {
    states.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
}

/// Gate a start-up against `base` (read from `path`): measure as it was measured, compare,
/// look for drift in `history`. Returns the report and the measurement (for the history).
pub fn gate(
    opts: &GateOptions,
    base: &Baseline,
    path: &Path,
    history: Option<&[Entry]>,
    runner: &mut dyn Runner,
    progress: &mut dyn FnMut(Progress),
) -> Result<(GateReport, Baseline), GateError> {
    let plan = plan_from_baseline(opts, base, path)?;
    let rules = Rules::of(opts);
    let commit = opts.commit.clone().or_else(detect_commit);
    let mut got = Gathered::new(&plan);
    progress(Progress::Step(format!(
        "{}: {} runs each",
        states_list(&plan.states),
        opts.first_runs
    )));
    let batch = runner.measure(&plan, &plan.states, opts.first_runs)?;
    got.add(&plan, &plan.states, opts.first_runs, batch);
    got.check(&plan)?;
    if plan.page_profiles > 0 {
        progress(Progress::Step(format!("{} page profiles", plan.page_profiles)));
        got.pages = Some(runner.pages(&plan, plan.page_profiles)?);
    }
    let env = Environment::collect(&program(&plan.command)?, &got.cgroup, opts.facts.clone());
    let mut now = got.to_baseline(&plan, &env, commit.clone(), &[]);
    let mut report = compare(base, &now, path, &rules, history);
    if report.environment_differences.is_empty() {
        loop {
            let mut more = Vec::new();
            for (i, state) in plan.states.iter().enumerate() {
                let name = state.to_string();
                let Some(row) =
                    report.figures.iter().find(|r| r.figure == Figure::Time && r.state == name)
                else {
                    continue;
                };
                let (Some(bound), Verdict::Unclear) = (row.runs, row.verdict) else { continue };
                if got.made[i] < bound.runs {
                    more.push((*state, opts.first_runs.min(bound.runs - got.made[i])));
                }
            }
            if more.is_empty() {
                break;
            }
            // States needing the same number of runs share one measurement (one discovery,
            // one emulated device).
            let mut sizes: Vec<usize> = more.iter().map(|m| m.1).collect();
            sizes.sort_unstable();
            sizes.dedup();
            for runs in sizes {
                let states: Vec<CacheState> =
                    more.iter().filter(|m| m.1 == runs).map(|m| m.0).collect();
                let made: Vec<String> = states
                    .iter()
                    .map(|s| format!("{s} after {}", got.made[plan_index(&plan, *s)]))
                    .collect();
                progress(Progress::Step(format!(
                    "time unclear ({} runs): {runs} more",
                    made.join(", ")
                )));
                let batch = runner.measure(&plan, &states, runs)?;
                got.add(&plan, &states, runs, batch);
            }
            now = got.to_baseline(&plan, &env, commit.clone(), &[]);
            report = compare(base, &now, path, &rules, history);
        }
    }
    Ok((report, now))
}

fn plan_index(plan: &Plan, state: CacheState) -> usize {
    plan.states.iter().position(|s| *s == state).unwrap_or(0)
}

#[cfg(test)]
mod tests;
