//! The files one stage writes and another reads: the result files of `coldstart measure`,
//! `coldstart experiment` and `coldstart timeline` (docs/formats/measure.md,
//! docs/formats/experiment.md, docs/formats/timeline.md), and the statistics ([`stats`]) their
//! figures are made with.
//!
//! Each is written by a stage and read by another (`coldstart report`), so their types live
//! here, on the ground floor, as the profile's do in `coldstart-profile-format`: the report
//! reads a measurement or an experiment without linking the code that ran it.
//!
//! - [`Experiment`] (format `coldstart-experiment`): a grid of links x strategies x cache
//!   states, each cell with its measured runs (start-up, bytes, requests, time stalled on
//!   misses) and the model's prediction. Written after every cell, so an interrupted
//!   experiment keeps what it measured.
//! - [`measure::MeasureReport`] (format `coldstart-measure`): every run of one or more
//!   commands in chosen cache states, its counters and how eviction went, the statistics over
//!   the runs that count, a comparison, the I/O share, the machine. `coldstart-measure` writes
//!   it and renders it; the report reads it.
//! - [`Timeline`] (format `coldstart-timeline`): one start-up on one time axis: its phases,
//!   every page it faulted or read with the file, the block requests, the time it waited on
//!   I/O, and the modules' first and last function touch.
//!
//! ```
//! use coldstart_formats::{Document, Experiment};
//!
//! let e = Experiment::new();
//! let text = serde_json::to_string(&e).unwrap();
//! let back = Experiment::from_json("e.json".as_ref(), &text).unwrap();
//! assert_eq!(back.format, "coldstart-experiment");
//! ```

mod experiment;
pub mod measure;
pub mod stats;
mod timeline;

use std::path::{Path, PathBuf};

use coldstart_error::Category;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use experiment::{
    AutoLink, Cell, CellRun, Experiment, ExperimentProgram, ExperimentSettings, HotSet, LinkSpec,
};
pub use timeline::{
    BlockRequest, FileCost, ModuleSpan, PageEvent, Phase, Timeline, TimelineFile, Wait,
};

/// Why a result file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The file is not JSON of the format.
    #[error("{path} is not a valid `{format}` file: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The format expected.
        format: &'static str,
        /// What the JSON parser found.
        source: serde_json::Error,
    },
    /// The file is of another format.
    #[error("{path} is a `{found}` file, not a `{expected}` file")]
    WrongFormat {
        /// The file.
        path: PathBuf,
        /// Its `format` field.
        found: String,
        /// The format expected.
        expected: &'static str,
    },
    /// The file is of a version this build does not read.
    #[error("{path} is `{format}` version {found}; this coldstart reads version {known} only: use a matching coldstart")]
    UnknownVersion {
        /// The file.
        path: PathBuf,
        /// Its format.
        format: &'static str,
        /// Its `version` field.
        found: u32,
        /// The version this build reads.
        known: u32,
    },
    /// The file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why writing failed.
        source: std::io::Error,
    },
}

impl ResultsError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ResultsError::Read { .. }
            | ResultsError::Parse { .. }
            | ResultsError::WrongFormat { .. }
            | ResultsError::UnknownVersion { .. } => Category::Usage,
            ResultsError::Write { .. } => Category::Environment,
        }
    }
}

/// A versioned JSON result file: its format name and version are checked before the rest is
/// parsed, so a file of another kind or version says so instead of naming a missing field.
pub trait Document: Serialize + DeserializeOwned {
    /// The `format` field.
    const FORMAT: &'static str;
    /// The only `version` this build reads and writes.
    const VERSION: u32;

    /// Parse `text`; `path` names it in errors.
    fn from_json(path: &Path, text: &str) -> Result<Self, ResultsError> {
        let (format, version) = head(text).ok_or_else(|| ResultsError::Parse {
            path: path.to_owned(),
            format: Self::FORMAT,
            source: serde_json::from_str::<serde_json::Value>(text)
                .err()
                .unwrap_or_else(|| serde::de::Error::custom("not a JSON object")),
        })?;
        if format != Self::FORMAT {
            return Err(ResultsError::WrongFormat {
                path: path.to_owned(),
                found: format,
                expected: Self::FORMAT,
            });
        }
        if version != Self::VERSION {
            return Err(ResultsError::UnknownVersion {
                path: path.to_owned(),
                format: Self::FORMAT,
                found: version,
                known: Self::VERSION,
            });
        }
        serde_json::from_str(text).map_err(|source| ResultsError::Parse {
            path: path.to_owned(),
            format: Self::FORMAT,
            source,
        })
    }

    /// Read and check a file.
    fn read(path: &Path) -> Result<Self, ResultsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ResultsError::Read { path: path.to_owned(), source })?;
        Self::from_json(path, &text)
    }

    /// Write atomically (a reader never sees half a file; an interrupted write leaves the
    /// previous one).
    fn write(&self, path: &Path) -> Result<(), ResultsError> {
        coldstart_fs::write_atomic_with(path, |w| {
            serde_json::to_writer_pretty(&mut *w, self).map_err(std::io::Error::other)?;
            w.write_all(b"\n")
        })
        .map_err(|source| ResultsError::Write { path: path.to_owned(), source })
    }
}

/// The `format` and `version` of a JSON document, if it is an object that has them (a
/// missing version reads as 0).
pub fn head(text: &str) -> Option<(String, u32)> {
    #[derive(Deserialize)]
    struct Head {
        format: Option<String>,
        version: Option<u32>,
    }
    let h: Head = serde_json::from_str(text).ok()?;
    Some((h.format.unwrap_or_default(), h.version.unwrap_or(0)))
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::ResultsError, crate::measure::ReadError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_format_or_version_is_named_not_parsed() {
        let p = Path::new("x.json");
        let e = Timeline::from_json(p, r#"{"format":"coldstart-experiment","version":1}"#);
        assert!(matches!(e, Err(ResultsError::WrongFormat { .. })), "{e:?}");
        let e = Experiment::from_json(p, r#"{"format":"coldstart-experiment","version":9}"#);
        let msg = e.unwrap_err().to_string();
        assert!(msg.contains("version 9") && msg.contains("version 1 only"), "{msg}");
        let e = Experiment::from_json(p, "not json");
        assert!(matches!(e, Err(ResultsError::Parse { .. })), "{e:?}");
    }

    #[test]
    fn written_files_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let mut t = Timeline::new(vec!["prog".into()]);
        t.wall_s = 0.25;
        t.phases.push(Phase { name: "exec".into(), start_s: 0.0, end_s: 0.01 });
        t.write(&path).unwrap();
        assert_eq!(Timeline::read(&path).unwrap(), t);
    }
}
