//! Comparing a measurement with its baseline: every figure's verdict by its rule, the
//! overall outcome, and drift in the history.

use std::path::Path;

use crate::baseline::{Baseline, Samples};
use crate::drift::{self, Method};
use crate::environment;
use crate::figure::{Figure, Slack, Verdict};
use crate::history::{self, Entry, Level};
use crate::report::{BaselineInfo, DriftRow, GateReport, MachineSpeed, Outcome, Row};
use crate::run::{settings_key, GateOptions};
use crate::steady;
use crate::time::{self, TimeRule};
use std::collections::BTreeMap;

/// What comparing needs besides the two measurements.
#[derive(Debug, Clone)]
pub struct Rules {
    pub time: TimeRule,
    pub slack: BTreeMap<Figure, Slack>,
    pub drift: Method,
}

impl Rules {
    pub fn of(opts: &GateOptions) -> Rules {
        Rules { time: opts.time, slack: opts.slack.clone(), drift: opts.drift }
    }

    fn slack(&self, figure: Figure) -> Slack {
        self.slack.get(&figure).copied().unwrap_or_else(|| Slack::default_for(figure))
    }
}
/// Why a figure is shown but not judged, in the way `m` was measured.
fn not_judged(figure: Figure, m: &Baseline) -> Option<String> {
    let emulated = m.settings.storage.is_some();
    match figure {
        Figure::ReadBytes | Figure::MajorFaults | Figure::ReadRequests if emulated => Some(
            "not steady here: it includes the system libraries left on this machine's disk, whose pages other \
             processes keep cached or read back; the device figures count the program's own files exactly"
                .into(),
        ),
        Figure::ReadRequests if m.environment.cgroup != "v2" => Some(
            "not steady here: counted for the whole machine (on cgroup v1 a run's own requests are not \
             counted apart), so other processes' reads are in it"
                .into(),
        ),
        _ => None,
    }
}

/// Compare a measurement with a baseline: every figure's verdict, the overall outcome, and
/// drift in `history` (the current run is appended to each series).
pub fn compare(
    base: &Baseline,
    now: &Baseline,
    path: &Path,
    rules: &Rules,
    history: Option<&[Entry]>,
) -> GateReport {
    let diffs = environment::differences(&base.environment, &now.environment);
    let machine = match (&base.calibration, &now.calibration) {
        (Some(b), Some(n))
            if b.build == n.build
                && b.rounds == n.rounds
                && !b.values.is_empty()
                && !n.values.is_empty() =>
        {
            let (bs, ns) = (
                coldstart_measure::stats::median(&b.values),
                coldstart_measure::stats::median(&n.values),
            );
            let (_, (low, high)) = coldstart_measure::stats::ratio_ci95(&b.values, &n.values);
            (bs > 0.0).then(|| MachineSpeed {
                baseline_s: bs,
                now_s: ns,
                ratio: ns / bs,
                ratio_ci95: (low, high),
            })
        }
        _ => None,
    };
    let mut rows = Vec::new();
    let mut states: Vec<String> = base.settings.states.clone();
    for s in &now.settings.states {
        if !states.contains(s) {
            states.push(s.clone());
        }
    }
    for figure in Figure::ALL {
        for state in &states {
            let (b, c) = (base.samples(figure, state), now.samples(figure, state));
            if b.is_none() && c.is_none() {
                continue;
            }
            rows.push(judge_row(figure, state, b, c, now, &diffs, rules, machine.as_ref()));
        }
    }
    let mut reasons: Vec<String> = diffs
        .iter()
        .map(|d| {
            format!(
                "the baseline was recorded with {} {}, this run has {}",
                d.what, d.baseline, d.now
            )
        })
        .collect();
    if !diffs.is_empty() {
        reasons.push("nothing was compared: record a baseline here with --update".into());
    }
    for r in rows.iter().filter(|r| matches!(r.verdict, Verdict::Slower | Verdict::Unclear)) {
        reasons.push(reason(r));
    }
    let verdict = if rows.iter().any(|r| r.verdict == Verdict::Slower) {
        Outcome::Slower
    } else if !diffs.is_empty() || rows.iter().any(|r| r.verdict == Verdict::Unclear) {
        Outcome::Unclear
    } else {
        Outcome::NotSlower
    };
    let (drift, history_entries) = match history {
        Some(h) => drift_rows(&rows, now, h, rules.drift),
        None => (Vec::new(), None),
    };
    let mut warnings = now.warnings.clone();
    if let Some(m) = machine.as_ref().filter(|m| m.ratio > 1.25) {
        warnings.push(format!(
            "this machine ran coldstart's calibration loop {:.0}% slower than when the baseline was recorded \
             (other work on it?): times are judged net of that, and may stay unclear",
            (m.ratio - 1.0) * 100.0
        ));
    }
    if base.command != now.command {
        warnings.push(format!(
            "the baseline measured `{}`, this run `{}`",
            base.command.join(" "),
            now.command.join(" ")
        ));
    }
    GateReport {
        format: crate::report::FORMAT.into(),
        version: crate::report::VERSION,
        verdict,
        reasons,
        command: now.command.clone(),
        commit: now.commit.clone(),
        baseline: BaselineInfo {
            path: path.display().to_string(),
            commit: base.commit.clone(),
            created_unix: base.created_unix,
        },
        settings: now.settings.clone(),
        environment_differences: diffs,
        machine,
        figures: rows,
        drift,
        drift_method: rules.drift,
        history_entries,
        warnings,
    }
}

#[allow(clippy::too_many_arguments)]
fn judge_row(
    figure: Figure,
    state: &str,
    b: Option<&Samples>,
    c: Option<&Samples>,
    now: &Baseline,
    diffs: &[environment::Difference],
    rules: &Rules,
    machine: Option<&MachineSpeed>,
) -> Row {
    let median = |s: Option<&Samples>| s.map(|s| coldstart_measure::stats::median(&s.values));
    let mut row = Row {
        figure,
        state: state.to_string(),
        verdict: Verdict::NotCompared,
        baseline: median(b),
        now: median(c),
        limit: None,
        note: None,
        time: None,
        steady: None,
        runs: None,
    };
    if !diffs.is_empty() {
        row.note = Some("the baseline was recorded in another environment".into());
        return row;
    }
    let (Some(b), Some(c)) = (b, c) else {
        row.note =
            Some(if b.is_none() { "not in the baseline" } else { "not measured now" }.into());
        return row;
    };
    if b.source != c.source {
        row.note = Some(format!(
            "counted from a {} page profile in the baseline, a {} one now",
            b.source.as_deref().unwrap_or("?"),
            c.source.as_deref().unwrap_or("?")
        ));
        return row;
    }
    if let Some(why) = not_judged(figure, now) {
        row.note = Some(why);
        return row;
    }
    if figure.is_time() {
        let t = time::judge(&b.values, &c.values, &rules.time, machine.map(|m| m.interval()));
        let mut bound = time::run_bound(&b.values, t.threshold, &rules.time, 0);
        row.verdict = t.verdict;
        row.limit = Some(t.baseline * (1.0 + t.threshold));
        // Slower beyond the threshold, but not beyond what the machine's own slowdown may
        // explain: more runs narrow the calibration's interval, so they go on to the bound.
        let machine_in_the_way = machine.filter(|m| {
            t.verdict == Verdict::Unclear
                && ((m.allowance() > 1.0 && t.ratio > 1.0 + t.threshold)
                    || (m.floor() < 1.0 && t.ratio <= 1.0 + t.threshold))
        });
        if let Some(m) = machine_in_the_way {
            bound.runs = rules.time.max_runs;
            let (lo, hi) = m.interval();
            row.note = Some(format!(
                "{:+.1}% against a {:.1}% threshold, but the machine itself ran {:+.0}% to {:+.0}% against when \
                 the baseline was recorded (its calibration loop), which could explain it: runs were added up \
                 to --max-runs {} to narrow that; on a machine as busy as then it resolves",
                (t.ratio - 1.0) * 100.0,
                t.threshold * 100.0,
                (lo - 1.0) * 100.0,
                (hi - 1.0) * 100.0,
                rules.time.max_runs
            ));
        } else if t.verdict == Verdict::Unclear {
            row.note = Some(match bound.needed {
                None => format!(
                    "a {:.1}% change is {:.2} interquartile ranges of the baseline's runs, which its {} runs \
                     cannot resolve whatever the runs now (record the baseline with more --runs)",
                    t.threshold * 100.0,
                    bound.effect_iqr,
                    t.n_baseline
                ),
                Some(n) => format!("the rank test needs about {n} runs for a {:.1}% change", t.threshold * 100.0),
            });
        }
        row.runs = Some(bound);
        row.time = Some(t);
    } else {
        let slack = rules.slack(figure).at(coldstart_measure::stats::median(&b.values));
        let s = steady::judge(&b.values, &c.values, slack);
        row.verdict = s.verdict;
        row.limit = Some(s.limit);
        row.steady = Some(s);
    }
    row
}

/// The line of `reasons` for a figure that is slower or unclear.
fn reason(r: &Row) -> String {
    let unit = r.figure.unit();
    let v = |x: Option<f64>| x.map_or("-".into(), |x| crate::report::fmt_value(x, unit));
    match (&r.time, &r.steady) {
        (Some(t), _) => format!(
            "{}, {}: {} -> {} ({:+.1}%, 95% CI {:+.1}% to {:+.1}%; threshold {:+.1}%; {}; {}): {}",
            r.figure.title(),
            r.state,
            v(r.baseline),
            v(r.now),
            (t.ratio - 1.0) * 100.0,
            (t.ratio_ci95.0 - 1.0) * 100.0,
            (t.ratio_ci95.1 - 1.0) * 100.0,
            t.threshold * 100.0,
            coldstart_units::p_value(t.p_value),
            coldstart_units::count(t.n_now as u64, "run"),
            r.verdict
        ),
        (None, Some(s)) => format!(
            "{}, {}: {} -> {} (limit {}): {}",
            r.figure.title(),
            r.state,
            v(r.baseline),
            v(r.now),
            crate::report::fmt_limit(s.limit, r.figure),
            r.verdict
        ),
        _ => format!("{}, {}: {}", r.figure.title(), r.state, r.verdict),
    }
}

/// Drift of each judged figure over the comparable history, the current run last.
fn drift_rows(
    rows: &[Row],
    now: &Baseline,
    history: &[Entry],
    method: Method,
) -> (Vec<DriftRow>, Option<usize>) {
    let env = now.environment.key();
    let settings = settings_key(&now.settings);
    let comparable =
        history.iter().filter(|e| e.environment == env && e.settings == settings).count();
    let mut out = Vec::new();
    for r in rows
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Slower | Verdict::NotSlower | Verdict::Unclear))
    {
        let Some(current) = r.now else { continue };
        let threshold = match (&r.time, &r.steady) {
            (Some(t), _) => t.threshold * t.baseline,
            (None, Some(s)) => s.spread + s.slack,
            _ => continue,
        };
        let points = history::series(history, &env, &settings, r.figure, &r.state);
        let mut series: Vec<f64> = points.iter().map(|p| p.1).collect();
        series.push(current);
        if let Some(d) = drift::detect(&series, threshold, method) {
            let (since_commit, since_unix) =
                points.get(d.since).map_or((now.commit.clone(), now.created_unix), |p| {
                    (history[p.0].commit.clone(), history[p.0].time_unix)
                });
            out.push(DriftRow {
                figure: r.figure,
                state: r.state.clone(),
                then: d.then,
                now: d.now,
                since_commit,
                since_unix,
                runs: series.len() - d.since,
            });
        }
    }
    (out, Some(comparable))
}

/// The history line of a measurement.
pub fn history_entry(m: &Baseline, verdict: &str) -> Entry {
    Entry {
        format: history::FORMAT.into(),
        version: history::VERSION,
        time_unix: m.created_unix,
        commit: m.commit.clone(),
        environment: m.environment.key(),
        settings: settings_key(&m.settings),
        verdict: verdict.into(),
        figures: m
            .figures
            .iter()
            .map(|s| Level {
                figure: s.figure,
                state: s.state.clone(),
                median: coldstart_measure::stats::median(&s.values),
                n: s.values.len(),
            })
            .collect(),
    }
}
