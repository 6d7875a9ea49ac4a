//! `coldstart report`: one self-contained HTML file of whatever results it is given, with the
//! same figures in CSV files beside it.
//!
//! The report reads result files, never the stages that wrote them: `measure --export-json`
//! (docs/formats/measure.md), profiles (`coldstart-profile-format`), `order --evaluate
//! --json`, and the experiment and timeline files (`coldstart-formats`). Each kind of input
//! adds its sections:
//!
//! - measurements: start-up in each cache state, before and after (the paper's Figure 5);
//! - profiles: page maps of each binary, every page coloured by whether start-up touched it;
//! - `order --evaluate`: the faults and pages of each layout;
//! - timelines: where one start-up's time went;
//! - experiments: improvement over `original` across the bandwidth x latency grid (Figure 3),
//!   bytes and requests (Figure 4), the model against the measurement, `auto`'s choice.
//!
//! The charts are SVG written here (no JavaScript library, no web font, nothing fetched):
//! the file opens the same way in a browser on a machine without a network.
//!
//! ```no_run
//! use coldstart_report::{Inputs, Options};
//!
//! let inputs = Inputs::load(&["measure.json".into(), "experiment.json".into()])?;
//! let report = coldstart_report::render(&inputs, &Options::default());
//! let written = coldstart_report::write(&report, "report.html".as_ref())?;
//! println!("{} files", written.len());
//! # Ok::<(), coldstart_report::ReportError>(())
//! ```

mod bars;
mod html;
pub mod input;
mod layouts;
pub mod network;
pub mod pagemap;
mod series;
mod startup;
mod svg;
mod table;
mod text;
mod timeline;

use std::path::{Path, PathBuf};

use coldstart_error::Category;

pub use input::{Input, Inputs, Source};
pub use table::Table;

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// An input could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The input.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// An input is not a file the report reads.
    #[error("{path} is not a result coldstart report reads ({why}): give measure --export-json, profile, order --evaluate --json, experiment or timeline files")]
    Unknown {
        /// The input.
        path: PathBuf,
        /// What it is instead.
        why: String,
    },
    /// An input is not a valid file of its kind.
    #[error("{path} is not a valid `{what}` file: {why}")]
    Invalid {
        /// The input.
        path: PathBuf,
        /// The kind of file it claims to be.
        what: String,
        /// What is wrong with it.
        why: String,
    },
    /// An input is of a version this build does not read.
    #[error("{path} is `{format}` version {found}; this coldstart reads versions {known}")]
    Version {
        /// The input.
        path: PathBuf,
        /// Its format.
        format: String,
        /// Its `version` field.
        found: u64,
        /// The versions this build reads.
        known: String,
    },
    /// A profile could not be read.
    #[error(transparent)]
    Profile(Box<coldstart_profile_format::FormatError>),
    /// An experiment or a timeline could not be read.
    #[error(transparent)]
    Results(coldstart_formats::ResultsError),
    /// No input was given.
    #[error("nothing to report: no input file given")]
    NoInput,
    /// The report could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The output.
        path: PathBuf,
        /// Why writing failed.
        source: std::io::Error,
    },
}

impl ReportError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ReportError::Read { .. }
            | ReportError::Unknown { .. }
            | ReportError::Invalid { .. }
            | ReportError::Version { .. }
            | ReportError::NoInput => Category::Usage,
            ReportError::Profile(e) => e.category(),
            ReportError::Results(e) => e.category(),
            ReportError::Write { .. } => Category::Environment,
        }
    }
}

/// A part of the page, with the tables of its figures.
#[derive(Debug, Clone)]
pub struct Section {
    /// The anchor.
    pub id: String,
    /// Its heading.
    pub title: String,
    /// Its body: text and SVG charts.
    pub html: String,
    /// The figures its charts draw.
    pub tables: Vec<Table>,
}

/// How to render.
#[derive(Debug, Clone)]
pub struct Options {
    /// The page's title.
    pub title: String,
    /// Written under the title (what made the report).
    pub subtitle: String,
    /// When it was made (seconds since the epoch), written after the subtitle as a UTC date.
    pub made_unix: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options { title: "coldstart report".into(), subtitle: String::new(), made_unix: None }
    }
}

/// A rendered report.
#[derive(Debug, Clone)]
pub struct Report {
    /// The page, one self-contained HTML file.
    pub html: String,
    /// Every table of figures, in page order.
    pub tables: Vec<Table>,
    /// The sections the inputs gave (their titles).
    pub sections: Vec<String>,
    /// The few figures at the top of the page: (value, caption).
    pub highlights: Vec<(String, String)>,
}

/// Render the inputs.
pub fn render(inputs: &Inputs, options: &Options) -> Report {
    let mut sections: Vec<Section> = [
        startup::section(inputs),
        pagemap::section(inputs),
        layouts::section(inputs),
        timeline::section(inputs),
        network::section(inputs),
    ]
    .into_iter()
    .flatten()
    .collect();
    let tables = csv_names(sections.iter().flat_map(|s| s.tables.clone()).collect());
    let highlights = highlights(inputs);
    let mut footer = String::from("Made by <code>coldstart report</code> from ");
    let names: Vec<String> =
        inputs.sources.iter().map(|s| format!("<code>{}</code>", svg::esc(&s.name()))).collect();
    footer.push_str(&names.join(", "));
    footer.push_str(". The figures are also in CSV files beside this one.");
    if sections.is_empty() {
        sections.push(Section {
            id: "empty".into(),
            title: "Nothing to draw".into(),
            html: "<p>The inputs hold no figures this report draws.</p>".into(),
            tables: Vec::new(),
        });
    }
    let html = html::page(options, &highlights, &sections, &footer);
    Report {
        html,
        tables,
        sections: sections.iter().map(|s| s.title.clone()).collect(),
        highlights,
    }
}

/// Tables with distinct names (a second `network` table becomes `network-2`).
fn csv_names(mut tables: Vec<Table>) -> Vec<Table> {
    let mut seen: Vec<String> = Vec::new();
    for t in &mut tables {
        let base = t.name.clone();
        let mut n = 1;
        while seen.contains(&t.name) {
            n += 1;
            t.name = format!("{base}-{n}");
        }
        seen.push(t.name.clone());
    }
    tables
}

/// The headline figures of the inputs. Every caption says what the figure is of: the file,
/// the cache state and, for measurements, the storage.
fn highlights(inputs: &Inputs) -> Vec<(String, String)> {
    let mut out = series::highlights(&series::series(inputs));
    for (src, t) in inputs.timelines() {
        let on =
            t.storage.as_ref().map_or("this machine's disk".into(), |d| format!("an emulated {d}"));
        let program = t.command.first().map(|c| c.rsplit('/').next().unwrap_or(c)).unwrap_or("");
        out.push((
            svg::seconds(t.io_wait_wall_s),
            format!(
                "of {program}'s {} {} start on {on} spent waiting on I/O; named phases cover \
                 {:.0}% ({})",
                svg::seconds(t.wall_s),
                t.cache,
                t.named_share() * 100.0,
                src.name()
            ),
        ));
    }
    for (src, e) in inputs.experiments() {
        out.extend(network::highlights(e, &src.name()));
    }
    out
}

/// Write the page to `out` and each table to `STEM-NAME.csv` beside it, atomically; returns
/// the files written, the page first.
pub fn write(report: &Report, out: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let w = |path: &Path, bytes: &[u8]| {
        coldstart_fs::write_atomic(path, bytes)
            .map_err(|source| ReportError::Write { path: path.to_owned(), source })
    };
    let mut written = Vec::new();
    let stem =
        out.file_stem().map_or_else(|| "report".into(), |s| s.to_string_lossy().into_owned());
    let dir = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    for t in &report.tables {
        let p = dir.join(format!("{stem}-{}.csv", t.name));
        w(&p, t.csv().as_bytes())?;
        written.push(p);
    }
    w(out, report.html.as_bytes())?;
    written.insert(0, out.to_owned());
    Ok(written)
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::ReportError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_names_stay_distinct() {
        let t = |n: &str| Table::new(n, &["a"]);
        let names: Vec<String> = csv_names(vec![t("network"), t("auto"), t("network")])
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, vec!["network", "auto", "network-2"]);
    }
}
