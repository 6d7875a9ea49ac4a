//! The result files the report reads, recognised by their `format` field (or, for
//! `order --evaluate --json`, which has none, by its shape), each read through its documented
//! format alone.
//!
//! A measurement, an experiment and a timeline are read with their types in
//! `coldstart-formats`, a profile with `coldstart-profile-format`; `order --evaluate` results
//! are read into the few fields the report draws (`Evaluation` in coldstart-layout). The
//! report needs none of the stages: the files are the interface.

use std::path::{Path, PathBuf};

use coldstart_formats::measure::{self, MeasureReport, ReadError};
use coldstart_formats::{Document, Experiment, Timeline};
use coldstart_profile_format::Profile;
use serde::Deserialize;

use crate::ReportError;

/// One input file, read.
#[derive(Debug, Clone)]
pub enum Input {
    /// A `coldstart measure --export-json` file.
    Measure(Box<MeasureReport>),
    /// A profile (`coldstart profile -o`).
    Profile(Box<Profile>),
    /// `coldstart order --evaluate --json` output.
    Evaluation(Evaluation),
    /// A `coldstart experiment` result.
    Experiment(Box<Experiment>),
    /// A `coldstart timeline` result.
    Timeline(Box<Timeline>),
}

/// An input and where it came from.
#[derive(Debug, Clone)]
pub struct Source {
    /// The file as given.
    pub path: PathBuf,
    /// What it holds.
    pub input: Input,
    /// How the report names it: its file name, with as many parent directories as it takes
    /// to tell it from the other inputs (`a/measure.json`, `b/measure.json`).
    label: String,
}

impl Source {
    /// The file's name, to label what it contributed.
    pub fn name(&self) -> String {
        self.label.clone()
    }
}

/// The last `depth + 1` components of a path.
fn tail(path: &Path, depth: usize) -> String {
    let parts: Vec<String> =
        path.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let from = parts.len().saturating_sub(depth + 1);
    let s = parts[from..].join("/").replace("//", "/");
    if s.is_empty() {
        path.display().to_string()
    } else {
        s
    }
}

/// Names for paths, each its file name unless another input's is the same.
fn names(paths: &[PathBuf]) -> Vec<String> {
    let mut depth = vec![0; paths.len()];
    for _ in 0..16 {
        let names: Vec<String> = paths.iter().zip(&depth).map(|(p, d)| tail(p, *d)).collect();
        let mut changed = false;
        for i in 0..paths.len() {
            let clash =
                (0..paths.len()).any(|j| j != i && names[j] == names[i] && paths[j] != paths[i]);
            if clash && tail(&paths[i], depth[i] + 1) != names[i] {
                depth[i] += 1;
                changed = true;
            }
        }
        if !changed {
            return names;
        }
    }
    paths.iter().map(|p| p.display().to_string()).collect()
}

/// Everything the report was given, in the order given.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The files, in the order given.
    pub sources: Vec<Source>,
}

impl Inputs {
    /// Read every file; the first that cannot be read is the error (nothing is written then).
    pub fn load(paths: &[PathBuf]) -> Result<Inputs, ReportError> {
        let mut sources = Vec::new();
        for (p, label) in paths.iter().zip(names(paths)) {
            sources.push(Source { path: p.clone(), input: read(p)?, label });
        }
        Ok(Inputs { sources })
    }

    /// The measurements, with their sources.
    pub fn measures(&self) -> impl Iterator<Item = (&Source, &MeasureReport)> {
        self.sources.iter().filter_map(|s| match &s.input {
            Input::Measure(m) => Some((s, m.as_ref())),
            _ => None,
        })
    }

    /// The profiles, with their sources.
    pub fn profiles(&self) -> impl Iterator<Item = (&Source, &Profile)> {
        self.sources.iter().filter_map(|s| match &s.input {
            Input::Profile(p) => Some((s, p.as_ref())),
            _ => None,
        })
    }

    /// The layout evaluations, with their sources.
    pub fn evaluations(&self) -> impl Iterator<Item = (&Source, &Evaluation)> {
        self.sources.iter().filter_map(|s| match &s.input {
            Input::Evaluation(e) => Some((s, e)),
            _ => None,
        })
    }

    /// The experiments, with their sources.
    pub fn experiments(&self) -> impl Iterator<Item = (&Source, &Experiment)> {
        self.sources.iter().filter_map(|s| match &s.input {
            Input::Experiment(e) => Some((s, e.as_ref())),
            _ => None,
        })
    }

    /// The timelines, with their sources.
    pub fn timelines(&self) -> impl Iterator<Item = (&Source, &Timeline)> {
        self.sources.iter().filter_map(|s| match &s.input {
            Input::Timeline(t) => Some((s, t.as_ref())),
            _ => None,
        })
    }
}

/// Read one result file of any kind the report knows.
pub fn read(path: &Path) -> Result<Input, ReportError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ReportError::Read { path: path.to_owned(), source })?;
    from_json(path, &text)
}

/// Recognise and parse one result file.
pub fn from_json(path: &Path, text: &str) -> Result<Input, ReportError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        ReportError::Unknown { path: path.to_owned(), why: format!("not JSON: {e}") }
    })?;
    let format = value.get("format").and_then(|f| f.as_str()).unwrap_or_default().to_owned();
    let format = format.as_str();
    let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
    let bad = |e: serde_json::Error| ReportError::Invalid {
        path: path.to_owned(),
        what: if format.is_empty() { "order --evaluate".into() } else { format.to_owned() },
        why: e.to_string(),
    };
    match format {
        "coldstart-measure" => match measure::from_json(text) {
            Ok(m) => Ok(Input::Measure(Box::new(m))),
            Err(ReadError::UnsupportedVersion { .. }) => Err(ReportError::Version {
                path: path.to_owned(),
                format: format.into(),
                found: version,
                known: measure::READABLE_VERSIONS.map(|v| v.to_string()).join(" and "),
            }),
            Err(ReadError::Json(e)) => Err(bad(e)),
            Err(e @ ReadError::WrongFormat { .. }) => {
                Err(ReportError::Unknown { path: path.to_owned(), why: e.to_string() })
            }
        },
        "coldstart-profile" => Profile::from_json(path, text)
            .map(|p| Input::Profile(Box::new(p)))
            .map_err(|e| ReportError::Profile(Box::new(e))),
        "coldstart-experiment" => Experiment::from_json(path, text)
            .map(|e| Input::Experiment(Box::new(e)))
            .map_err(ReportError::Results),
        "coldstart-timeline" => Timeline::from_json(path, text)
            .map(|t| Input::Timeline(Box::new(t)))
            .map_err(ReportError::Results),
        "" if value.get("holdout").is_some() && value.get("rows").is_some() => {
            Ok(Input::Evaluation(serde_json::from_value(value).map_err(bad)?))
        }
        "" => Err(ReportError::Unknown {
            path: path.to_owned(),
            why: "it has no `format` field and is not `order --evaluate --json` output".into(),
        }),
        other => Err(ReportError::Unknown {
            path: path.to_owned(),
            why: format!("its format `{other}` is not one the report reads"),
        }),
    }
}

/// `coldstart order --evaluate --json`: each layout's cost for a held-out start-up.
#[derive(Debug, Clone, Deserialize)]
pub struct Evaluation {
    /// The held-out workload's name.
    pub holdout: String,
    /// Each layout's cost.
    pub rows: Vec<EvaluationRow>,
    /// The layout with the fewest faults (then fewest pages read).
    pub best: String,
}

/// One evaluated layout.
#[derive(Debug, Clone, Deserialize)]
pub struct EvaluationRow {
    /// The layout (an ordering algorithm, or `default`).
    pub layout: String,
    /// What the held-out start-up costs under it.
    pub cost: Cost,
}

/// The page model's cost of a layout.
#[derive(Debug, Clone, Deserialize)]
pub struct Cost {
    /// Distinct pages touched.
    pub pages_touched: u64,
    /// Major faults (read requests).
    pub faults: u64,
    /// Pages read from the file.
    pub pages_read: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_recognised_by_its_format_or_shape() {
        let p = Path::new("r.json");
        let m = r#"{"format":"coldstart-measure","version":2,"cache":"cold,hot","ready":"exit",
            "warmup":1,"environment":{"kernel":"6.18","cpus":2,"cgroup":"v2","cpu_governor":null,
            "is_root":true},"comparison":null,"warnings":[],"commands":[{"label":"cold",
            "command":["x"],"runs":[],"summaries":[["wall_s",{"n":3,"mean":0.5,"median":0.5,
            "trimmed_mean":0.5,"stddev":0.1,"min":0.4,"max":0.6,"ci95":[0.4,0.6],"mad":0.1,
            "outliers":[]}]]}]}"#;
        let Input::Measure(m) = from_json(p, m).unwrap() else { panic!("not a measurement") };
        assert_eq!(m.commands[0].summary("wall_s").unwrap().median, 0.5);
        let e = r#"{"holdout":"b","model":{},"rows":[{"layout":"default","cost":{"pages_touched":3,"faults":2,"pages_read":9,"curve":[]}}],"best":"first-touch"}"#;
        assert!(matches!(from_json(p, e).unwrap(), Input::Evaluation(_)));
        let x = r#"{"format":"coldstart-experiment","version":1,"created_unix":0,"kernel":"","cpus":2,
            "program":{"dir":"/a","command":["a"],"profiled":["a"],"files":1,"bytes":1},
            "settings":{"links":[],"strategies":[],"caches":[],"runs":1,"chunk_size":1,"readahead":1},
            "local_s":null,"hot_set":null,"used_bytes":null,"cells":[],"warnings":[]}"#;
        assert!(matches!(from_json(p, x).unwrap(), Input::Experiment(_)));
    }

    #[test]
    fn two_inputs_of_one_file_name_are_named_by_their_directories() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            names(&[p("/r/before/measure.json"), p("/r/after/measure.json"), p("timeline.json")]),
            ["before/measure.json", "after/measure.json", "timeline.json"]
        );
        assert_eq!(names(&[p("m.json"), p("m.json")]), ["m.json", "m.json"]);
    }

    #[test]
    fn an_unknown_file_or_version_is_refused_with_its_name() {
        let p = Path::new("some.json");
        let e = from_json(p, r#"{"format":"something-else"}"#).unwrap_err().to_string();
        assert!(e.contains("some.json") && e.contains("something-else"), "{e}");
        let e = from_json(p, r#"{"format":"coldstart-measure","version":7}"#).unwrap_err();
        assert!(e.to_string().contains("version 7"), "{e}");
        let e = from_json(p, "[1, 2").unwrap_err().to_string();
        assert!(e.contains("not JSON"), "{e}");
    }
}
