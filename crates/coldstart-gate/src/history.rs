//! The history file: one JSON object per line, one line per gated run (and per baseline
//! recorded), each with every figure's median (docs/formats/gate.md). The drift detectors
//! ([`crate::drift`]) read the series of one figure from the entries recorded in the same
//! environment with the same settings.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::GateError;
use crate::figure::Figure;

/// The `format` of every history line.
pub const FORMAT: &str = "coldstart-gate-history";
/// The `version` this build writes and reads.
pub const VERSION: u32 = 1;

/// One gated run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub format: String,
    pub version: u32,
    /// Seconds since the epoch.
    pub time_unix: u64,
    pub commit: Option<String>,
    /// [`crate::environment::Environment::key`] of the machine.
    pub environment: String,
    /// [`crate::run::settings_key`] of how it was measured.
    pub settings: String,
    /// `slower`, `not slower`, `unclear` or `baseline` (a baseline recorded with `--update`).
    pub verdict: String,
    /// The medians of this run.
    pub figures: Vec<Level>,
}

/// The median of one figure in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub figure: Figure,
    pub state: String,
    pub median: f64,
    /// Runs (or page profiles) behind it.
    pub n: usize,
}

impl Entry {
    pub fn level(&self, figure: Figure, state: &str) -> Option<f64> {
        self.figures.iter().find(|l| l.figure == figure && l.state == state).map(|l| l.median)
    }
}

/// Read a history; a file that does not exist yet is an empty history.
pub fn read(path: &Path) -> Result<Vec<Entry>, GateError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(GateError::Read { path: path.to_owned(), source }),
    };
    parse(path, &text)
}

/// Parse the lines of a history read from `path` (empty lines are skipped).
pub fn parse(path: &Path, text: &str) -> Result<Vec<Entry>, GateError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| GateError::Parse {
            path: path.to_owned(),
            what: "gate history",
            message: format!("line {}: {message}", i + 1),
        };
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let format = v.get("format").and_then(|f| f.as_str()).unwrap_or("");
        let version = v.get("version").and_then(|f| f.as_u64()).unwrap_or(0) as u32;
        if format != FORMAT || version != VERSION {
            return Err(bad(format!(
                "`{format}` version {version}; this coldstart reads `{FORMAT}` version {VERSION} (start a new history file)"
            )));
        }
        out.push(serde_json::from_value(v).map_err(|e| bad(e.to_string()))?);
    }
    Ok(out)
}

/// Add `entry` at the end of the history at `path`, writing the whole file atomically (a
/// crash leaves the old history or the new one, never half a line).
pub fn append(path: &Path, entry: &Entry) -> Result<(), GateError> {
    let mut text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(GateError::Read { path: path.to_owned(), source }),
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let line = serde_json::to_string(entry)
        .map_err(|e| GateError::Invalid(format!("cannot serialise a history entry: {e}")))?;
    text.push_str(&line);
    text.push('\n');
    coldstart_fs::write_atomic(path, text.as_bytes())
        .map_err(|source| GateError::Write { path: path.to_owned(), source })
}

/// The medians of `figure` in `state` over the entries recorded in `environment` with
/// `settings`, oldest first, with each one's index in `entries`.
pub fn series(
    entries: &[Entry],
    environment: &str,
    settings: &str,
    figure: Figure,
    state: &str,
) -> Vec<(usize, f64)> {
    entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.environment == environment && e.settings == settings)
        .filter_map(|(i, e)| e.level(figure, state).map(|m| (i, m)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(median: f64, env: &str) -> Entry {
        Entry {
            format: FORMAT.into(),
            version: VERSION,
            time_unix: 1,
            commit: None,
            environment: env.into(),
            settings: "s".into(),
            verdict: "not slower".into(),
            figures: vec![Level { figure: Figure::Time, state: "cold".into(), median, n: 10 }],
        }
    }

    #[test]
    fn appended_entries_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.jsonl");
        assert!(read(&path).unwrap().is_empty());
        append(&path, &entry(1.0, "a")).unwrap();
        append(&path, &entry(2.0, "b")).unwrap();
        append(&path, &entry(3.0, "a")).unwrap();
        let h = read(&path).unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
        assert_eq!(series(&h, "a", "s", Figure::Time, "cold"), [(0, 1.0), (2, 3.0)]);
        assert!(series(&h, "a", "s", Figure::Time, "hot").is_empty());
    }

    #[test]
    fn a_bad_line_is_named() {
        let e = parse(Path::new("h.jsonl"), "\n{\"format\": \"x\", \"version\": 1}\n").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = parse(Path::new("h.jsonl"), "{").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
    }
}
