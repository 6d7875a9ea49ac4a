//! The gate's result: one serialisable report (the JSON output, docs/formats/gate.md) and its
//! two renderings, a screen for the terminal and a Markdown summary for a CI job page or a
//! pull-request comment.

use serde::{Deserialize, Serialize};

use crate::baseline::Settings;
use crate::drift::Method;
use crate::environment::Difference;
use crate::figure::{Figure, Unit, Verdict};
use crate::steady::SteadyOutcome;
use crate::time::{RunBound, TimeOutcome};

/// The `format` of the JSON report.
pub const FORMAT: &str = "coldstart-gate-report";
/// Its `version`.
pub const VERSION: u32 = 1;

/// The gate's conclusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A figure is slower.
    Slower,
    /// No figure is slower and every compared one said so.
    NotSlower,
    /// No figure is slower, but a figure could not tell in the runs allowed, or the baseline
    /// was recorded elsewhere.
    Unclear,
}

impl Outcome {
    pub const fn label(self) -> &'static str {
        match self {
            Outcome::Slower => "slower",
            Outcome::NotSlower => "not slower",
            Outcome::Unclear => "unclear",
        }
    }
}

/// What fails a CI job besides "slower".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// "unclear" fails too (by default it passes, and says so).
    pub unclear_fails: bool,
    /// A drift found in the history fails too (by default it is flagged).
    pub drift_fails: bool,
}

/// The whole result of a gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    pub format: String,
    pub version: u32,
    pub verdict: Outcome,
    /// One line per figure that is slower or unclear, and per environment difference.
    pub reasons: Vec<String>,
    pub command: Vec<String>,
    /// The commit measured now, when known.
    pub commit: Option<String>,
    pub baseline: BaselineInfo,
    /// How both were measured.
    pub settings: Settings,
    /// Facts of the machine that differ from the baseline's: when any does, nothing is
    /// compared.
    pub environment_differences: Vec<Difference>,
    /// How much slower this machine ran coldstart's calibration loop than when the baseline
    /// was recorded.
    pub machine: Option<MachineSpeed>,
    pub figures: Vec<Row>,
    /// Rises found in the history (`--history`).
    pub drift: Vec<DriftRow>,
    /// The detector that looked for them.
    pub drift_method: Method,
    /// Entries of the history that could be compared with this run (same environment and
    /// settings), `null` without a history.
    pub history_entries: Option<usize>,
    pub warnings: Vec<String>,
    /// Seconds the gate's steps took, measuring and profiling (absent from reports written
    /// before it was kept).
    #[serde(default)]
    pub elapsed_s: Option<f64>,
}

/// Which baseline was compared with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineInfo {
    pub path: String,
    pub commit: Option<String>,
    pub created_unix: u64,
}

/// The calibration loop's medians and their ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineSpeed {
    pub baseline_s: f64,
    pub now_s: f64,
    /// `now_s / baseline_s`: above 1, the machine is slower now.
    pub ratio: f64,
    /// The ratio's 95% bootstrap interval. Times are judged net of its high end
    /// ([`MachineSpeed::allowance`]): taking off only its low end, the slowdown that is
    /// certain, called a start-up slower on a machine running two test suites twice in 20
    /// gate runs.
    pub ratio_ci95: (f64, f64),
}

impl MachineSpeed {
    /// How much slower the machine may be now: the high end of the ratio's interval (the
    /// ratio when the interval is not finite), at least 1.
    pub fn allowance(&self) -> f64 {
        self.interval().1.max(1.0)
    }

    /// How much faster it surely is: the high end when below 1, else 1.
    pub fn floor(&self) -> f64 {
        self.interval().1.min(1.0)
    }

    /// The ratio's interval, or the ratio itself when the interval is not finite.
    pub fn interval(&self) -> (f64, f64) {
        let (lo, hi) = self.ratio_ci95;
        if lo.is_finite() && hi.is_finite() && lo > 0.0 {
            (lo, hi)
        } else {
            (self.ratio, self.ratio)
        }
    }
}

/// One figure of one cache state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub figure: Figure,
    pub state: String,
    pub verdict: Verdict,
    /// The baseline's median.
    pub baseline: Option<f64>,
    /// The median now.
    pub now: Option<f64>,
    /// Above this the figure is slower (for time: the baseline's median times one plus the
    /// threshold).
    pub limit: Option<f64>,
    /// Why it was not compared, or what kept it unclear.
    pub note: Option<String>,
    /// The time rule's findings (time only).
    pub time: Option<TimeOutcome>,
    /// The steady rule's findings (steady figures only).
    pub steady: Option<SteadyOutcome>,
    /// How far the runs of this state could go (time only).
    pub runs: Option<RunBound>,
}

/// A rise found in the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftRow {
    pub figure: Figure,
    pub state: String,
    /// The level it rose from, and since which run.
    pub then: f64,
    pub now: f64,
    pub since_commit: Option<String>,
    pub since_unix: u64,
    /// History entries from then to now (this run included).
    pub runs: usize,
}

impl GateReport {
    /// Whether the CI job should fail under `policy`.
    pub fn fails(&self, policy: Policy) -> bool {
        match self.verdict {
            Outcome::Slower => true,
            Outcome::Unclear if policy.unclear_fails => true,
            _ => policy.drift_fails && !self.drift.is_empty(),
        }
    }

    /// The JSON report.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self)
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        s.push('\n');
        s
    }

    /// One screen for the terminal.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!("coldstart gate: {}\n", self.verdict.label().to_uppercase()));
        for r in &self.reasons {
            out.push_str(&format!("  {r}\n"));
        }
        out.push_str(&format!("  baseline: {}\n", self.baseline_line()));
        out.push_str(&format!("  storage:  {}\n\n", self.storage_line()));
        let table = self.table();
        let widths: Vec<usize> = (0..table[0].len())
            .map(|c| table.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for (i, row) in table.iter().enumerate() {
            let line: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, cell)| {
                    let pad = widths[c] - cell.chars().count();
                    if c == 0 || c + 1 == row.len() {
                        format!("{cell}{}", " ".repeat(pad))
                    } else {
                        format!("{}{cell}", " ".repeat(pad))
                    }
                })
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
            if i == 0 {
                out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
                out.push('\n');
            }
        }
        let notes = self.notes();
        if !notes.is_empty() {
            out.push('\n');
            for n in notes {
                out.push_str(&format!("{n}\n"));
            }
        }
        out
    }

    /// The Markdown summary: a heading with the verdict, the table, and the notes.
    pub fn to_markdown(&self) -> String {
        let mark = match self.verdict {
            Outcome::Slower => "❌",
            Outcome::NotSlower => "✅",
            Outcome::Unclear => "⚠️",
        };
        let mut out = format!(
            "### {mark} Start-up: {} (`{}`)\n\n",
            self.verdict.label(),
            self.command.join(" ").replace('`', "'")
        );
        for r in &self.reasons {
            out.push_str(&format!("- {}\n", md(r)));
        }
        if !self.reasons.is_empty() {
            out.push('\n');
        }
        let table = self.table();
        for (i, row) in table.iter().enumerate() {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(
                    |(c, cell)| {
                        if i > 0 && c + 1 == row.len() {
                            verdict_md(cell)
                        } else {
                            md(cell)
                        }
                    },
                )
                .collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
            if i == 0 {
                out.push_str("| --- | ---: | ---: | ---: | ---: | --- |\n");
            }
        }
        out.push_str(&format!(
            "\nBaseline: {}. Storage: {}.\n",
            md(&self.baseline_line()),
            md(&self.storage_line())
        ));
        let notes = self.notes();
        if !notes.is_empty() {
            out.push_str(&format!("\n<details><summary>Notes ({})</summary>\n\n", notes.len()));
            for n in notes {
                out.push_str(&format!("- {}\n", md(&n)));
            }
            out.push_str("\n</details>\n");
        }
        out
    }

    fn baseline_line(&self) -> String {
        let commit = self.baseline.commit.as_deref().map_or("no commit".to_string(), short);
        let now = self.commit.as_deref().map_or(String::new(), |c| format!("; now {}", short(c)));
        format!("{} ({commit}, {}){now}", self.baseline.path, utc(self.baseline.created_unix))
    }

    fn storage_line(&self) -> String {
        match &self.settings.storage {
            Some(p) => format!("{}: {}", p.describe(), self.settings.storage_reason),
            None => format!("this machine's disk: {}", self.settings.storage_reason),
        }
    }

    /// Header and one line per figure: figure, baseline, now, change, limit, verdict.
    fn table(&self) -> Vec<Vec<String>> {
        let mut rows = vec![["figure", "baseline", "now", "change", "limit", "verdict"]
            .map(String::from)
            .to_vec()];
        for r in &self.figures {
            let unit = r.figure.unit();
            let value = |v: Option<f64>| v.map_or("-".to_string(), |v| fmt_value(v, unit));
            let change = match (r.baseline, r.now) {
                (Some(b), Some(n)) if n == b => "0".into(),
                (Some(b), Some(n)) if b != 0.0 => format!("{:+.1}%", (n / b - 1.0) * 100.0),
                (Some(b), Some(n)) if n != b => format!("+{}", fmt_value(n - b, unit)),
                (Some(_), Some(_)) => "0".into(),
                _ => "-".into(),
            };
            let limit = match (&r.time, r.limit) {
                (Some(t), _) => format!("+{:.1}%", t.threshold * 100.0),
                (None, Some(l)) => fmt_limit(l, r.figure),
                _ => "-".into(),
            };
            let mut verdict = r.verdict.label().to_string();
            if let Some(t) = &r.time {
                verdict.push_str(&format!(
                    " ({}, {})",
                    coldstart_units::count(t.n_now as u64, "run"),
                    coldstart_units::p_value(t.p_value)
                ));
            }
            rows.push(vec![
                format!("{}, {}", r.figure.title(), r.state),
                value(r.baseline),
                value(r.now),
                change,
                limit,
                verdict,
            ]);
        }
        rows
    }

    /// The lines below the table: why figures were not compared, the machine's speed, drift,
    /// warnings.
    fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        for r in &self.figures {
            if let Some(n) = &r.note {
                if !seen.contains(&n.as_str())
                    && !self.reasons.iter().any(|x| x.contains(n.as_str()))
                {
                    seen.push(n);
                    let same: Vec<String> = self
                        .figures
                        .iter()
                        .filter(|x| x.note.as_deref() == Some(n))
                        .map(|x| format!("{}, {}", x.figure.title(), x.state))
                        .collect();
                    out.push(format!("{}: {n}", same.join("; ")));
                }
            }
        }
        if let Some(m) = &self.machine {
            out.push(format!(
                "Machine: the calibration loop took {:.2} ms (baseline {:.2} ms): {}",
                m.now_s * 1e3,
                m.baseline_s * 1e3,
                {
                    let (lo, hi) = m.interval();
                    format!(
                        "{:+.0}% against then (95% interval {:+.0}% to {:+.0}%); a time is called slower only \
                         beyond {:.0}% more than its threshold, and not slower only {:.0}% below it",
                        (m.ratio - 1.0) * 100.0,
                        (lo - 1.0) * 100.0,
                        (hi - 1.0) * 100.0,
                        (m.allowance() - 1.0) * 100.0,
                        (1.0 - m.floor()) * 100.0
                    )
                }
            ));
        }
        for d in &self.drift {
            let unit = d.figure.unit();
            out.push(format!(
                "Drift: {}, {} rose from {} to {} over the last {} runs of the history (since {} of {})",
                d.figure.title(),
                d.state,
                fmt_value(d.then, unit),
                fmt_value(d.now, unit),
                d.runs,
                d.since_commit.as_deref().map_or("a run".to_string(), short),
                utc(d.since_unix)
            ));
        }
        if let Some(n) = self.history_entries {
            if self.drift.is_empty() {
                out.push(format!(
                    "History: no drift in {n} comparable runs ({} detector)",
                    self.drift_method.name()
                ));
            }
        }
        for w in &self.warnings {
            out.push(format!("Warning: {w}"));
        }
        out
    }
}

/// A figure's value for people: times in ms or s, sizes in KiB or MiB, counts whole.
pub fn fmt_value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Seconds if v.abs() >= 1.0 => format!("{v:.2} s"),
        Unit::Seconds => format!("{:.1} ms", v * 1e3),
        Unit::Bytes => coldstart_units::bytes_f(v),
        // Instructions: millions, to a ten-thousandth of the count, which is its noise.
        Unit::Count if v.abs() >= 1e7 => format!("{:.2} M", v / 1e6),
        Unit::Count if v.fract() == 0.0 || v.abs() >= 1000.0 => format!("{v:.0}"),
        Unit::Count => format!("{v:.1}"),
    }
}

/// A steady figure's limit: a count is the most allowed, whole, with its noun (`613 reads`:
/// the limit 613.9 lets 613 pass and calls 614 slower); a size as [`fmt_value`] shows it.
pub fn fmt_limit(limit: f64, figure: Figure) -> String {
    match figure.noun() {
        Some(_) if limit >= 1e7 => fmt_value(limit, figure.unit()),
        Some(noun) => coldstart_units::count(limit.max(0.0).floor() as u64, noun),
        None => fmt_value(limit, figure.unit()),
    }
}

fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

/// `YYYY-MM-DD HH:MM UTC` of a Unix time.
pub fn utc(t: u64) -> String {
    let (y, m, d, h, min, _) = coldstart_units::utc_from_unix(t);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02} UTC")
}

/// Text safe in a Markdown table cell or list item.
fn md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn verdict_md(cell: &str) -> String {
    if cell.starts_with("slower") {
        format!("**{}**", md(cell))
    } else {
        md(cell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_in_their_units() {
        assert_eq!(fmt_value(0.0851, Unit::Seconds), "85.1 ms");
        assert_eq!(fmt_value(2.5, Unit::Seconds), "2.50 s");
        assert_eq!(fmt_value(929_792.0, Unit::Bytes), "908.0 KiB");
        assert_eq!(fmt_value(12.0, Unit::Count), "12");
        assert_eq!(fmt_value(11.5, Unit::Count), "11.5");
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(1_795_312_345), "2026-11-22 01:52 UTC");
    }
}
