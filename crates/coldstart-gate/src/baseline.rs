//! The baseline file: every run's figures of a recorded start-up, how it was measured, and
//! where (docs/formats/gate.md). Written atomically; a reader rejects another format or
//! version with a message that says what to do.

use std::path::Path;

use coldstart_storage::StorageProfile;
use serde::{Deserialize, Serialize};

use crate::budget::Costs;
use crate::environment::Environment;
use crate::error::GateError;
use crate::figure::Figure;
use crate::functions::FunctionRuns;
use crate::identity::Program;

/// Rounds of coldstart's calibration loop ([`crate::linux::calibrate`]).
pub const CALIBRATION_ROUNDS: u64 = 10_000_000;

/// The rounds of calibrations recorded before they were said (a shorter loop).
fn first_rounds() -> u64 {
    400_000
}

/// The `format` of a baseline file.
pub const FORMAT: &str = "coldstart-gate-baseline";
/// The `version` this build writes and reads.
pub const VERSION: u32 = 1;

/// A recorded start-up to gate against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub format: String,
    pub version: u32,
    /// Seconds since the epoch when recorded.
    pub created_unix: u64,
    /// The coldstart version that recorded it.
    pub coldstart: String,
    /// The commit measured (`--commit`, `$GITHUB_SHA`, `$CI_COMMIT_SHA` or `git rev-parse
    /// HEAD` in the working directory), when known.
    pub commit: Option<String>,
    /// The command measured.
    pub command: Vec<String>,
    /// The program it ran, and its build-id (absent from baselines recorded before it was
    /// kept: then not checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<Program>,
    /// The working directory it ran in (absent likewise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    pub settings: Settings,
    pub environment: Environment,
    /// Every figure's values, one per counted run (per page profile for `pages_touched`).
    pub figures: Vec<Samples>,
    /// The machine's speed while the runs ran (see [`Calibration`]).
    pub calibration: Option<Calibration>,
    /// What the recording warned about.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The functions the baseline's function profiles ran, by name: what a gate of a new build
    /// compares its own with ([`crate::functions`]; absent from baselines recorded before
    /// they were kept: then new functions are not compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions: Option<FunctionRuns>,
    /// What each step of the recording cost: a gate plans its steps (and `--budget`) with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub costs: Option<Costs>,
}

/// How the start-up is measured: a gate measures as its baseline did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The cache states measured: a cold one (`cold`, or `selective` without root) and `hot`.
    pub states: Vec<String>,
    /// The readiness signal (`exit`, `stdout:REGEX`, ...).
    pub ready: String,
    /// The emulated storage the runs read the program's files from; `null`: this machine's
    /// disk.
    pub storage: Option<StorageProfile>,
    /// Why the storage is what it is (emulated because this disk hides cold start, ...).
    pub storage_reason: String,
    /// Page profiles recorded for `pages_touched` (0: none).
    pub page_profiles: usize,
    /// Bound of each run, seconds.
    pub timeout_s: f64,
}

/// The values of one figure in one cache state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    pub figure: Figure,
    /// The cache state (`cold`, `selective`, `hot`); `hot` for page profiles (recorded with the
    /// program's files cached).
    pub state: String,
    pub values: Vec<f64>,
    /// How the values were counted, where it can change between builds (the page profile's
    /// source: `tracefs`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// How fast this machine ran a fixed loop in coldstart between the runs: a slower machine
/// (another job on a shared runner) slows every start-up, and a gate must not blame the
/// program for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// `release` or `debug`: the loop's speed depends on how coldstart was built, so only
    /// calibrations of the same build are compared.
    pub build: String,
    /// Rounds of the loop: calibrations of other lengths are not compared.
    #[serde(default = "first_rounds")]
    pub rounds: u64,
    /// Seconds the loop took, once after each measured run.
    pub values: Vec<f64>,
    /// How many copies of the loop ran at once, one a CPU (1 in baselines recorded before
    /// they ran on every CPU): calibrations of other widths are not compared.
    #[serde(default = "one_thread")]
    pub threads: usize,
}

fn one_thread() -> usize {
    1
}

impl Calibration {
    /// Whether `other` ran the same loop (the same build, rounds and copies): only then are
    /// their times compared.
    pub fn comparable_with(&self, other: &Calibration) -> bool {
        self.build == other.build && self.rounds == other.rounds && self.threads == other.threads
    }
}

impl Baseline {
    /// The values of `figure` in `state`, if recorded.
    pub fn samples(&self, figure: Figure, state: &str) -> Option<&Samples> {
        self.figures.iter().find(|s| s.figure == figure && s.state == state)
    }

    /// Read and check a baseline.
    pub fn read(path: &Path) -> Result<Baseline, GateError> {
        let text = std::fs::read_to_string(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                GateError::NoBaseline { path: path.to_owned() }
            } else {
                GateError::Read { path: path.to_owned(), source }
            }
        })?;
        Baseline::from_json(path, &text)
    }

    /// Parse a baseline read from `path`.
    pub fn from_json(path: &Path, text: &str) -> Result<Baseline, GateError> {
        let parse = |message: String| GateError::Parse {
            path: path.to_owned(),
            what: "gate baseline",
            message,
        };
        let head: serde_json::Value =
            serde_json::from_str(text).map_err(|e| parse(e.to_string()))?;
        let format = head.get("format").and_then(|f| f.as_str()).unwrap_or("");
        let version = head.get("version").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
        if format != FORMAT || version != VERSION {
            if format != FORMAT && !format.is_empty() && !format.starts_with("coldstart") {
                return Err(parse(format!("its format is `{format}`")));
            }
            return Err(GateError::Version {
                path: path.to_owned(),
                format: if format.is_empty() { "(no format)".into() } else { format.into() },
                version,
                expected: FORMAT,
                known: VERSION,
            });
        }
        let b: Baseline = serde_json::from_value(head).map_err(|e| parse(e.to_string()))?;
        // Read back as a run's bound: a day at most, as `--timeout` takes.
        let t = b.settings.timeout_s;
        if !(t >= 0.001 && t <= coldstart_units::DAY.as_secs_f64()) {
            return Err(parse(format!("its settings.timeout_s {t} is not from 0.001 to 86400")));
        }
        Ok(b)
    }

    /// Write the baseline atomically.
    pub fn write(&self, path: &Path) -> Result<(), GateError> {
        let mut text = serde_json::to_string_pretty(self)
            .map_err(|e| GateError::Invalid(format!("cannot serialise the baseline: {e}")))?;
        text.push('\n');
        coldstart_fs::write_atomic(path, text.as_bytes())
            .map_err(|source| GateError::Write { path: path.to_owned(), source })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn example() -> Baseline {
        Baseline {
            format: FORMAT.into(),
            version: VERSION,
            created_unix: 1_795_312_345,
            coldstart: "0.1.0".into(),
            commit: Some("5f0c6a7e".into()),
            command: vec!["/opt/app/bin/app".into()],
            program: Some(Program {
                path: "/opt/app/bin/app".into(),
                build_id: Some("5f0c6a7e12ab".into()),
                interpreter: None,
            }),
            cwd: Some("/opt/app".into()),
            settings: Settings {
                states: vec!["cold".into(), "hot".into()],
                ready: "exit".into(),
                storage: Some(StorageProfile::hdd()),
                storage_reason: "vda reads ahead 8192 KiB".into(),
                page_profiles: 3,
                timeout_s: 60.0,
            },
            environment: Environment::default(),
            figures: vec![Samples {
                figure: Figure::DeviceReadRequests,
                state: "cold".into(),
                values: vec![12.0, 12.0, 12.0],
                source: None,
            }],
            calibration: Some(Calibration {
                build: "debug".into(),
                rounds: CALIBRATION_ROUNDS,
                values: vec![0.001],
                threads: 1,
            }),
            warnings: vec![],
            functions: None,
            costs: None,
        }
    }

    #[test]
    fn a_baseline_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.json");
        let b = example();
        b.write(&path).unwrap();
        assert_eq!(Baseline::read(&path).unwrap(), b);
        assert!(b.samples(Figure::DeviceReadRequests, "cold").is_some());
        assert!(b.samples(Figure::DeviceReadRequests, "hot").is_none());
    }

    #[test]
    fn another_format_or_version_is_refused_with_what_to_do() {
        let p = Path::new("b.json");
        let e = Baseline::from_json(p, r#"{"format": "coldstart-gate-baseline", "version": 9}"#)
            .unwrap_err();
        assert!(e.to_string().contains("version 9") && e.to_string().contains("--update"), "{e}");
        let e =
            Baseline::from_json(p, r#"{"format": "coldstart-measure", "version": 2}"#).unwrap_err();
        assert!(e.to_string().contains("coldstart-measure"), "{e}");
        let e = Baseline::from_json(p, "not json").unwrap_err();
        assert!(e.to_string().contains("is not a gate baseline"), "{e}");
        let e = Baseline::read(Path::new("/nonexistent/b.json")).unwrap_err();
        assert!(matches!(e, GateError::NoBaseline { .. }));
        assert!(e.to_string().contains("--update"));
    }

    #[test]
    fn a_baseline_whose_run_bound_is_out_of_range_is_refused_not_a_panic() {
        let p = Path::new("b.json");
        for bad in [1.8446744073709552e19, 1e300, 0.0, -1.0, 86_401.0] {
            let mut b = example();
            b.settings.timeout_s = bad;
            let e = Baseline::from_json(p, &serde_json::to_string(&b).unwrap()).unwrap_err();
            assert!(e.to_string().contains("timeout_s"), "{bad}: {e}");
        }
    }
}
