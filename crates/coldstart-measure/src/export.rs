//! Exporters: every format renders the same [`MeasureReport`].
//!
//! - [`to_json`]: the documented, versioned `coldstart-measure` format, with every run's raw
//!   figures (read back with `coldstart_formats::measure::from_json`).
//! - [`to_csv`]: one row per run, for spreadsheets and plotting.
//! - [`to_markdown`]: the summaries as tables, for pasting into a report or a pull request.
//! - [`to_table`]: the compact terminal view, in human units, in the manner of hyperfine.
//!
//! The binary writes them with `coldstart_fs::write_atomic`, so an interrupted export never
//! leaves a half-written file behind (and `/dev/null` or a pipe is written into, never
//! replaced).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::metric::{title_of, Metric, Unit, METRICS};
use coldstart_formats::measure::{
    CommandResult, Comparison, HeldByOthers, MeasureReport, Outcome, RunRecord,
};
// What the exporter tests build reports from (they see this module's names).
#[cfg(test)]
use {
    crate::metric::metric_value,
    coldstart_formats::measure::{Counters, Summary},
};

/// The report as pretty-printed JSON.
pub fn to_json(r: &MeasureReport) -> String {
    // The report has no maps with non-string keys, the only way serde_json can fail here.
    serde_json::to_string_pretty(r).expect("a MeasureReport always serialises to JSON")
}

/// One CSV row per run of every command, after a header row. Columns: `label`, `index`,
/// `outcome` (`ready`, `timeout`, `exited_before_ready`, `failed`), `exit_code`, `signal`,
/// `excluded` (the reason, empty when included), every counter of [`Metric::ALL`], then
/// `eviction_held`, `resident_pages_after`, and the pages other processes held
/// (`held_pages`, `held_bytes`, `held_touched_bytes`: 0 when none was, empty for `hot`). A
/// figure that was not measured is an empty cell, never 0.
pub fn to_csv(r: &MeasureReport) -> String {
    let mut out = String::new();
    let mut header = vec!["label", "index", "outcome", "exit_code", "signal", "excluded"];
    header.extend(METRICS);
    header.extend([
        "eviction_held",
        "resident_pages_after",
        "held_pages",
        "held_bytes",
        "held_touched_bytes",
    ]);
    out.push_str(&header.join(","));
    out.push('\n');
    for cmd in &r.commands {
        for run in &cmd.runs {
            let (outcome, code, signal) = outcome_parts(&run.outcome);
            let mut row = vec![
                csv_field(&cmd.label),
                run.index.to_string(),
                outcome.to_string(),
                opt(code),
                opt(signal),
                csv_field(run.excluded.as_deref().unwrap_or("")),
            ];
            row.extend(Metric::ALL.map(|m| opt(m.reading(&run.counters))));
            row.push(opt(run.eviction.as_ref().map(|e| e.held)));
            row.push(opt(run.eviction.as_ref().map(|e| e.resident_pages_after)));
            let held = run.held_by_others.as_ref();
            let evicted = run.eviction.is_some();
            let held_figure =
                |f: fn(&HeldByOthers) -> u64| opt(held.map(f).or(evicted.then_some(0)));
            row.push(held_figure(|h| h.pages));
            row.push(held_figure(|h| h.bytes));
            row.push(held_figure(|h| h.touched_bytes));
            out.push_str(&row.join(","));
            out.push('\n');
        }
    }
    out
}

fn outcome_parts(o: &Outcome) -> (&'static str, Option<i32>, Option<i32>) {
    match *o {
        Outcome::Ready => ("ready", None, None),
        Outcome::Timeout => ("timeout", None, None),
        Outcome::ExitedBeforeReady { code, signal } => ("exited_before_ready", code, signal),
        Outcome::Failed { code, signal } => ("failed", code, signal),
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// Quote a CSV field when it holds a comma, a quote or a line break (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A value of the metric named `metric` in human units: `12.3 ms`, `4.2 MiB`, `153`.
fn human(metric: &str, v: f64) -> String {
    in_unit(Unit::of_name(metric), v)
}

/// A value in human units: `12.3 ms`, `4.2 MiB`, `153`.
fn in_unit(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Seconds => {
            let a = v.abs();
            if a < 1e-3 {
                format!("{:.1} µs", v * 1e6)
            } else if a < 1.0 {
                format!("{:.1} ms", v * 1e3)
            } else {
                format!("{v:.3} s")
            }
        }
        Unit::Bytes => coldstart_units::bytes_f(v),
        Unit::Count => count(v),
    }
}

/// Whole numbers without decimals (a median of counts can end in .5).
fn count(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.1}")
    }
}

fn excluded_runs(cmd: &CommandResult) -> Vec<&RunRecord> {
    cmd.runs.iter().filter(|r| r.excluded.is_some()).collect()
}

/// "1 excluded (eviction did not hold: 1)": reasons grouped by their text before the first
/// colon, so that per-run details do not split the count.
fn excluded_summary(cmd: &CommandResult) -> String {
    let excluded = excluded_runs(cmd);
    let included = cmd.runs.len() - excluded.len();
    if excluded.is_empty() {
        return format!("{included} included, 0 excluded");
    }
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for run in &excluded {
        let reason = run.excluded.as_deref().unwrap_or("");
        *reasons.entry(reason.split(':').next().unwrap_or(reason).trim()).or_default() += 1;
    }
    let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{r}: {n}")).collect();
    format!("{included} included, {} excluded ({})", excluded.len(), reasons.join(", "))
}

fn command_line(cmd: &CommandResult) -> String {
    cmd.command.join(" ")
}

fn p_text(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".to_string()
    } else {
        format!("p = {p:.3}")
    }
}

/// The comparison said of the change against the base, each named: "B (./new) is 1.23x
/// slower than A (./old) [1.10, 1.35], p = 0.002"; with [`Comparison::change`], of A against
/// B: "With the prefetch (A): 8.01x faster than without (B) [7.52, 8.44], p < 0.001". Faster
/// inverts the ratio and its interval.
pub fn comparison_sentence(r: &MeasureReport, c: &Comparison) -> String {
    let label = |i: usize, default: &str| {
        r.commands.get(i).map(|c| c.label.clone()).unwrap_or_else(|| default.to_string())
    };
    let named = |i: usize, default: &str| match r.commands.get(i) {
        Some(cmd) => format!("{} ({})", cmd.label, short_command(&command_line(cmd))),
        None => default.to_string(),
    };
    let (a, b) = (named(0, "A"), named(1, "B"));
    if !c.ratio.is_finite() || c.ratio <= 0.0 {
        return format!("{b} and {a} cannot be compared on {}", title_of(&c.metric));
    }
    // Who is said against whom ("B (./new) is" or "With the prefetch (A):"), and the change's
    // figure over the base's with its interval.
    let (is, has, base, ratio, (lo, hi)) = match &c.change {
        None => (format!("{b} is"), format!("{b} has"), a, c.ratio, c.ratio_ci95),
        Some(what) => {
            let with = format!("With {what} ({}):", label(0, "A"));
            let (lo, hi) = c.ratio_ci95;
            (
                with.clone(),
                with,
                format!("without ({})", label(1, "B")),
                1.0 / c.ratio,
                (1.0 / hi, 1.0 / lo),
            )
        }
    };
    let p = p_text(c.p_value);
    if Unit::of_name(&c.metric) != Unit::Seconds {
        let metric = title_of(&c.metric);
        return format!("{has} {ratio:.2}x the {metric} of {base} [{lo:.2}, {hi:.2}], {p}");
    }
    let what =
        if c.metric == Metric::Wall.name() { String::new() } else { format!(" in {}", c.metric) };
    if ratio >= 1.0 {
        format!("{is} {ratio:.2}x slower than {base}{what} [{lo:.2}, {hi:.2}], {p}")
    } else {
        let (x, lo, hi) = (1.0 / ratio, 1.0 / hi, 1.0 / lo);
        format!("{is} {x:.2}x faster than {base}{what} [{lo:.2}, {hi:.2}], {p}")
    }
}

/// A command line cut to fit a sentence: its first 40 characters and `...`.
fn short_command(line: &str) -> String {
    match line.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line.to_string(),
    }
}

/// The metrics of the terminal table, in order, with their row titles.
const TABLE_ROWS: [(Metric, &str); 5] = [
    (Metric::Wall, "Time (median):"),
    (Metric::MajorFaults, "Major faults (median):"),
    (Metric::ReadBytes, "Read from storage (median):"),
    (Metric::ReadRequests, "Read requests (median):"),
    // Only with `--storage`.
    (Metric::StorageReadRequests, "  on the device (median):"),
];

/// The compact terminal view: per command the median wall time with its 95% interval, the
/// median major faults, bytes read and read requests, and how many runs were excluded; then the
/// comparison and the warnings.
pub fn to_table(r: &MeasureReport) -> String {
    let mut out = String::new();
    for cmd in &r.commands {
        let _ = writeln!(out, "{}: {}", cmd.label, command_line(cmd));
        for (metric, title) in TABLE_ROWS {
            let summary = cmd.summary(metric.name());
            if metric == Metric::StorageReadRequests && summary.is_none() {
                continue;
            }
            let unit = metric.unit();
            let value = match summary {
                None => "n/a".to_string(),
                Some(s) if s.n == 0 => "n/a (no included run)".to_string(),
                Some(s) if metric == Metric::Wall => format!(
                    "{}   95% CI [{}, {}]   trimmed mean {}",
                    in_unit(unit, s.median),
                    in_unit(unit, s.ci95.0),
                    in_unit(unit, s.ci95.1),
                    in_unit(unit, s.trimmed_mean)
                ),
                Some(s) => in_unit(unit, s.median),
            };
            let _ = writeln!(out, "  {title:<29}{value}");
        }
        let _ = writeln!(out, "  {:<29}{}", "Runs:", excluded_summary(cmd));
        if let Some((first, second)) = held_lines(cmd) {
            let _ = writeln!(out, "  {:<29}{first}", "Stayed cached:");
            let _ = writeln!(out, "  {:<29}{second}", "");
        }
        if let Some(s) = cmd.summary(Metric::Wall.name()).filter(|s| !s.outliers.is_empty()) {
            let _ = writeln!(out, "  {:<29}{} of wall time", "Outliers:", s.outliers.len());
        }
        out.push('\n');
    }
    if let Some(c) = &r.comparison {
        let _ = writeln!(out, "{}\n", comparison_sentence(r, c));
    }
    for w in &r.warnings {
        let _ = writeln!(out, "Warning: {w}");
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// The pages other processes held before the runs of `cmd`, from the run where most were (the
/// counted runs first): a line of figures and a line naming the files and the processes.
fn held_lines(cmd: &CommandResult) -> Option<(String, String)> {
    let worst = |counted: bool| {
        cmd.runs
            .iter()
            .filter(|r| r.excluded.is_none() == counted)
            .filter_map(|r| r.held_by_others.as_ref())
            .max_by_key(|h| h.pages)
    };
    let h = worst(true).or_else(|| worst(false))?;
    let varies = cmd.runs.iter().any(|r| {
        r.eviction.is_some() && r.held_by_others.as_ref().map_or(0, |o| o.pages) != h.pages
    });
    let figures = format!(
        "{}{} pages ({}) of {} file{} that other processes map; start-up uses {} of them",
        if varies { "up to " } else { "" },
        h.pages,
        in_unit(Unit::Bytes, h.bytes as f64),
        h.files,
        if h.files == 1 { "" } else { "s" },
        in_unit(Unit::Bytes, h.touched_bytes as f64),
    );
    let mut files: Vec<String> =
        h.by_file.iter().take(3).map(|f| format!("{} ({})", f.path.display(), f.pages)).collect();
    if h.by_file.len() > 3 {
        files.push(format!("{} more", h.by_file.len() - 3));
    }
    let mut holders: Vec<String> = h.holders.iter().take(3).map(|p| p.who()).collect();
    let more = h.holders.len().saturating_sub(3) + h.holders_omitted;
    let holders = match more {
        0 => holders.join(", "),
        _ => {
            holders.push(format!("{more} more"));
            holders.join(", ")
        }
    };
    Some((figures, format!("{}; mapped by {holders}", files.join(", "))))
}

/// Escape what would break a Markdown table cell.
fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A code span that survives backticks in the text.
fn md_code(s: &str) -> String {
    let fence = if s.contains('`') { "``" } else { "`" };
    format!("{fence}{}{fence}", md_cell(s))
}

/// The report as Markdown: the set-up line, then per command a table with one row per metric
/// (median, trimmed mean, 95% interval, n, outliers) and the excluded runs, then the comparison
/// and the warnings.
pub fn to_markdown(r: &MeasureReport) -> String {
    let mut out = String::from("# Start-up measurement\n\n");
    let env = &r.environment;
    let _ = writeln!(
        out,
        "Cache state {}, readiness {}, {}. Linux {}, {}, cgroup {}{}.\n",
        md_code(&r.cache),
        md_code(&r.ready),
        coldstart_units::count(r.warmup as u64, "warm-up run"),
        env.kernel,
        coldstart_units::count(env.cpus as u64, "CPU"),
        env.cgroup,
        env.cpu_governor.as_ref().map(|g| format!(", governor {g}")).unwrap_or_default()
    );
    for cmd in &r.commands {
        let _ = writeln!(out, "## {}: {}\n", md_cell(&cmd.label), md_code(&command_line(cmd)));
        let _ = writeln!(out, "Runs: {}.\n", excluded_summary(cmd));
        if let Some((first, second)) = held_lines(cmd) {
            let _ = writeln!(out, "Stayed cached: {}; {}.\n", md_cell(&first), md_cell(&second));
        }
        out.push_str("| metric | median | trimmed mean | 95% CI of the median | n | outliers |\n");
        out.push_str("| --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (metric, s) in &cmd.summaries {
            let m = metric.as_str();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} – {} | {} | {} |",
                md_cell(title_of(m)),
                human(m, s.median),
                human(m, s.trimmed_mean),
                human(m, s.ci95.0),
                human(m, s.ci95.1),
                s.n,
                s.outliers.len()
            );
        }
        let excluded = excluded_runs(cmd);
        if !excluded.is_empty() {
            out.push_str("\nExcluded runs:\n\n");
            for run in excluded {
                let _ = writeln!(
                    out,
                    "- run {}: {}",
                    run.index,
                    md_cell(run.excluded.as_deref().unwrap_or(""))
                );
            }
        }
        out.push('\n');
    }
    if let Some(c) = &r.comparison {
        let _ = writeln!(
            out,
            "## Comparison\n\n{} (ratio of median {}, 95% bootstrap interval, two-sided \
             Mann-Whitney U).\n",
            comparison_sentence(r, c),
            title_of(&c.metric)
        );
    }
    if !r.warnings.is_empty() {
        out.push_str("## Warnings\n\n");
        for w in &r.warnings {
            let _ = writeln!(out, "- {}", md_cell(w));
        }
        out.push('\n');
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests;
