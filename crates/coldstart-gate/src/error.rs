//! Why a gate could not give a verdict. Each says what to do.

use std::path::PathBuf;

use coldstart_error::Category;

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("no baseline at {}: record one on the commit to compare with, with --update", path.display())]
    NoBaseline { path: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{} is not a {what}: {message}", path.display())]
    Parse { path: PathBuf, what: &'static str, message: String },
    #[error(
        "{} is a `{format}` file of version {version}; this coldstart reads `{expected}` version {known}: \
         record the baseline again with this coldstart (--update)",
        path.display()
    )]
    Version { path: PathBuf, format: String, version: u32, expected: &'static str, known: u32 },
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Invalid(String),
    #[error(
        "{what}: the baseline {} was recorded with {baseline}, this gate asked for {now}; gate with the \
         baseline's settings (leave the flag out) or record a new baseline with --update",
        path.display()
    )]
    Settings { path: PathBuf, what: &'static str, baseline: String, now: String },
    #[error(
        "{what}: the baseline {} measured {baseline}, this gate {now}; {}",
        path.display(),
        if *flag == "--new-build" {
            "the program changed since the baseline was recorded (an upgrade?): record a new baseline with \
             --update, or, if gating a new build of your own program is what you mean (a CI job), add --new-build"
        } else {
            "a gate compares a start-up with its own baseline: gate the baseline's command, record a baseline of \
             this one with --update, or, if comparing the two is what you mean, add --other-command"
        }
    )]
    Identity { path: PathBuf, what: String, baseline: String, now: String, flag: &'static str },
    #[error(transparent)]
    Measure(#[from] coldstart_measure::measure::MeasureError),
    #[error("page profile: {0}")]
    Profile(#[from] coldstart_profile::ProfileError),
    #[error(
        "no run of the {state} state counted ({reasons}): the figures cannot be compared; see why with \
         coldstart measure --cache {state} -- CMD"
    )]
    NoRunCounted { state: String, reasons: String },
    #[error("interrupted by signal {signal}: the runs were stopped and nothing was written")]
    Interrupted { signal: i32 },
}

impl GateError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            GateError::NoBaseline { .. }
            | GateError::Read { .. }
            | GateError::Parse { .. }
            | GateError::Version { .. }
            | GateError::Invalid(_)
            | GateError::Settings { .. }
            | GateError::Identity { .. } => Category::Usage,
            GateError::Write { .. }
            | GateError::NoRunCounted { .. }
            | GateError::Interrupted { .. } => Category::Environment,
            GateError::Measure(e) => e.category(),
            GateError::Profile(e) => e.category(),
        }
    }
}
