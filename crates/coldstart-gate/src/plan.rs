//! What a gate is asked to do and how its runs are made: the options, and the plan they
//! resolve to (with the baseline's settings when gating; a flag asking for others is refused).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use coldstart_measure::CacheState;
use coldstart_ready::Ready;
use coldstart_storage::StorageProfile;

use crate::baseline::{Baseline, Settings};
use crate::drift::{self, Method};
use crate::environment;
use crate::error::GateError;
use crate::figure::{Figure, Slack};
use crate::identity::Allow;
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

/// Hot runs of a baseline: cheap, and the time rule's reference.
pub const DEFAULT_BASELINE_RUNS: usize = 30;
/// Cold runs of a baseline (see [`GateOptions::baseline_cold_runs`]).
pub const DEFAULT_BASELINE_COLD_RUNS: usize = 10;
/// Hot runs of a gate's batch.
pub const DEFAULT_FIRST_RUNS: usize = 10;
/// Cold runs of a gate's batch.
pub const DEFAULT_COLD_FIRST_RUNS: usize = 5;
/// Exact page profiles of a baseline, and the most a gate makes.
pub const DEFAULT_PAGE_PROFILES: usize = 3;
/// Exact page profiles a gate makes first; more, up to the baseline's, only when one is above
/// its limit (then their median is judged).
pub const FIRST_PAGE_PROFILES: usize = 1;
/// Function profiles of a baseline (about a second each for the 47 MB sample and for
/// Node.js): the functions start-up runs, and those that come and go between runs.
pub const BASELINE_FUNCTION_PROFILES: usize = 3;
/// Function profiles a gate of a new build makes first; more, up to the baseline's, only
/// when new code is above its limit (then their median is judged).
pub const FIRST_FUNCTION_PROFILES: usize = 1;

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
    /// Exact page profiles of a baseline; a gate takes its baseline's as the most it makes.
    pub page_profiles: Option<usize>,
    /// Counts of instructions under valgrind a baseline takes where the CPU does not count
    /// them ([`crate::instructions`]); a gate takes its baseline's.
    pub instruction_counts: usize,
    pub timeout: Option<Duration>,
    /// Hot runs of a baseline.
    pub baseline_runs: usize,
    /// Runs of a baseline's colder state (each one of a cold start on the emulated device
    /// costs a read per 10 ms: the noise model says how few suffice, docs/gate.md).
    pub baseline_cold_runs: usize,
    /// Hot runs of a gate's first batch, and of each batch after it.
    pub first_runs: usize,
    /// Runs of the colder state in a gate's first batch, and in each batch after it.
    pub cold_first_runs: usize,
    pub time: TimeRule,
    /// What may differ from the baseline's command and program (`--other-command`,
    /// `--new-build`).
    pub allow: Allow,
    /// The most a gate may take, measuring included (`--budget`); `None`: no bound.
    pub budget: Option<Duration>,
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
            storage_dir: PathBuf::from(coldstart_storage::DEFAULT_WORK_DIR),
            page_profiles: None,
            instruction_counts: crate::instructions::BASELINE_COUNTS,
            timeout: None,
            baseline_runs: DEFAULT_BASELINE_RUNS,
            baseline_cold_runs: DEFAULT_BASELINE_COLD_RUNS,
            first_runs: DEFAULT_FIRST_RUNS,
            cold_first_runs: DEFAULT_COLD_FIRST_RUNS,
            time: TimeRule::default(),
            allow: Allow::default(),
            budget: None,
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
        let runs =
            [self.baseline_runs, self.baseline_cold_runs, self.first_runs, self.cold_first_runs];
        if runs.iter().any(|r| *r < time::MIN_RUNS) {
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
        let batch = self.first_runs.max(self.cold_first_runs);
        if t.max_runs < batch {
            return Err(GateError::Invalid(format!(
                "--max-runs {} is below a first batch of {batch} runs",
                t.max_runs
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
    pub(crate) fn settings(&self) -> Settings {
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
        None if root => DEFAULT_PAGE_PROFILES,
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
