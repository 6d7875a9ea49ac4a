//! Comparing a measurement with its baseline: every figure's verdict by its rule, the
//! overall outcome, and drift in the history.

use std::path::Path;

use crate::baseline::{Baseline, Samples};
use crate::drift::{self, Method};
use crate::environment;
use crate::figure::{Figure, Slack, Verdict};
use crate::history::{self, Entry, Level};
use crate::noise::FigureNoise;
use crate::plan::{settings_key, GateOptions};
use crate::report::{BaselineInfo, DriftRow, GateReport, MachineSpeed, Outcome, Row};
use crate::steady;
use crate::time::{self, RunBound, TimeOutcome, TimeRule};
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

    /// The time rule of `figure`: CPU time's minimum effect is at least
    /// [`crate::noise::CPU_TIME_FLOOR`].
    pub(crate) fn time_rule(&self, figure: Figure) -> TimeRule {
        match figure {
            Figure::CpuTime => TimeRule {
                min_effect: self.time.min_effect.max(crate::noise::CPU_TIME_FLOOR),
                ..self.time
            },
            _ => self.time,
        }
    }

    pub(crate) fn slack(&self, figure: Figure) -> Slack {
        self.slack.get(&figure).copied().unwrap_or_else(|| Slack::default_for(figure))
    }
}
/// Why a figure is shown but not judged, in the way `m` was measured.
pub(crate) fn not_judged(figure: Figure, m: &Baseline) -> Option<String> {
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
    let machine = machine_speed(base, now);
    let mut rows = judge_rows(base, now, &diffs, rules, machine.as_ref());
    explain_cold_time(&mut rows, base);
    explain_cpu_time(&mut rows);
    explain_cpu_time_by_work(&mut rows);
    explain_hot_time(&mut rows);
    explain_hot_time_by_work(&mut rows, base, now);
    let reasons = reasons(&diffs, &rows);
    let verdict = outcome(&diffs, &rows);
    let (drift, history_entries) = match history {
        Some(h) => drift_rows(&rows, now, h, rules.drift),
        None => (Vec::new(), None),
    };
    let warnings = warnings(base, now, machine.as_ref());
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
        elapsed_s: None,
    }
}

/// How much slower the machine ran coldstart's calibration loop now than when the baseline
/// was recorded, when both recorded it the same way.
fn machine_speed(base: &Baseline, now: &Baseline) -> Option<MachineSpeed> {
    let (b, n) = (base.calibration.as_ref()?, now.calibration.as_ref()?);
    if !b.comparable_with(n) || b.values.is_empty() || n.values.is_empty() {
        return None;
    }
    let (bs, ns) =
        (coldstart_formats::stats::median(&b.values), coldstart_formats::stats::median(&n.values));
    let (_, (low, high)) = coldstart_formats::stats::ratio_ci95(&b.values, &n.values);
    (bs > 0.0).then(|| MachineSpeed {
        baseline_s: bs,
        now_s: ns,
        ratio: ns / bs,
        ratio_ci95: (low, high),
    })
}

/// A row for every figure in every state either measurement has (the baseline's states
/// first), each judged by its rule.
fn judge_rows(
    base: &Baseline,
    now: &Baseline,
    diffs: &[environment::Difference],
    rules: &Rules,
    machine: Option<&MachineSpeed>,
) -> Vec<Row> {
    let mut states: Vec<String> = base.settings.states.clone();
    for s in &now.settings.states {
        if !states.contains(s) {
            states.push(s.clone());
        }
    }
    let mut rows = Vec::new();
    for figure in Figure::ALL {
        for state in &states {
            let (b, c) = (base.samples(figure, state), now.samples(figure, state));
            if b.is_none() && c.is_none() {
                continue;
            }
            let reads = DeviceReads::of(base, now, state);
            rows.push(judge_row(figure, state, b, c, now, diffs, rules, machine, reads));
        }
    }
    rows
}

/// The lines of the report's `reasons`: each environment difference, and each figure that
/// is slower or unclear.
fn reasons(diffs: &[environment::Difference], rows: &[Row]) -> Vec<String> {
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
    reasons
}

/// The overall outcome: slower if any figure is, unclear if the environments differ or any
/// figure is unclear, otherwise not slower.
fn outcome(diffs: &[environment::Difference], rows: &[Row]) -> Outcome {
    if rows.iter().any(|r| r.verdict == Verdict::Slower) {
        Outcome::Slower
    } else if !diffs.is_empty() || rows.iter().any(|r| r.verdict == Verdict::Unclear) {
        Outcome::Unclear
    } else {
        Outcome::NotSlower
    }
}

/// The measurement's own warnings, and those of the comparison: a local build, a machine
/// much slower than when the baseline was recorded, a different command.
fn warnings(base: &Baseline, now: &Baseline, machine: Option<&MachineSpeed>) -> Vec<String> {
    let mut warnings = now.warnings.clone();
    warnings.extend(environment::local_build_note(&base.environment, &now.environment));
    if let Some(m) = machine.filter(|m| m.ratio > 1.25) {
        warnings.push(format!(
            "this machine ran coldstart's calibration loop {:.0}% slower than when the baseline was recorded \
             (other work on it?): times are judged net of that, and may stay unclear",
            (m.ratio - 1.0) * 100.0
        ));
    }
    if let (Some(b), Some(n), None) = (&base.calibration, &now.calibration, machine) {
        if !b.comparable_with(n) {
            warnings.push(format!(
                "the baseline's calibration loop is not this coldstart's ({} build, {} rounds on {} \
                 CPUs; now {}, {} on {}): times are judged without the machine's speed; record the \
                 baseline again with this coldstart (--update)",
                b.build, b.rounds, b.threads, n.build, n.rounds, n.threads
            ));
        }
    }
    if base.command != now.command {
        warnings.push(format!(
            "the baseline measured `{}`, this run `{}`",
            base.command.join(" "),
            now.command.join(" ")
        ));
    }
    warnings
}

/// The row of `figure` in `state`: its medians, and its verdict by the time or steady rule,
/// or a note saying why it is not compared.
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
    reads: Option<DeviceReads>,
) -> Row {
    let median = |s: Option<&Samples>| s.map(|s| coldstart_formats::stats::median(&s.values));
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
    match comparable(figure, b, c, now, diffs) {
        Err(why) => row.note = Some(why),
        Ok((b, c)) if figure.is_time() => judge_time(&mut row, b, c, rules, machine, reads),
        Ok((b, c)) => {
            let slack = rules.slack(figure).at(coldstart_formats::stats::median(&b.values));
            let s = steady::judge(&b.values, &c.values, FigureNoise::of(figure), slack);
            row.verdict = s.verdict;
            row.limit = Some(s.limit);
            row.steady = Some(s);
        }
    }
    row
}

/// The two sets of runs of a figure, when they can be compared; otherwise why not (another
/// environment, missing on one side, counted from different page profiles, not steady in
/// the way `now` was measured).
fn comparable<'s>(
    figure: Figure,
    b: Option<&'s Samples>,
    c: Option<&'s Samples>,
    now: &Baseline,
    diffs: &[environment::Difference],
) -> Result<(&'s Samples, &'s Samples), String> {
    if !diffs.is_empty() {
        return Err("the baseline was recorded in another environment".into());
    }
    let (Some(b), Some(c)) = (b, c) else {
        return Err(if b.is_none() { "not in the baseline" } else { "not measured now" }.into());
    };
    if b.source != c.source {
        if figure == Figure::Instructions {
            let by = |s: Option<&str>| s.map_or("the CPU".to_string(), str::to_string);
            return Err(format!(
                "counted by {} in the baseline, by {} now",
                by(b.source.as_deref()),
                by(c.source.as_deref())
            ));
        }
        return Err(format!(
            "counted from a {} page profile in the baseline, a {} one now",
            b.source.as_deref().unwrap_or("?"),
            c.source.as_deref().unwrap_or("?")
        ));
    }
    if let Some(why) = unsteady_counts(figure, b, c) {
        return Err(why);
    }
    match not_judged(figure, now) {
        Some(why) => Err(why),
        None => Ok((b, c)),
    }
}

/// Instructions counted under valgrind whose counts, on either side, moved among themselves by
/// more than [`crate::instructions::STEADY_RANGE`]: why they are not judged. On such a program
/// (a JIT compiler that replaces a hot loop sooner or later, as its threads happen to run) a
/// count says little of the work, and judged it would settle CPU time that it cannot.
fn unsteady_counts(figure: Figure, b: &Samples, c: &Samples) -> Option<String> {
    let counted = matches!(figure, Figure::Instructions | Figure::MissCycles);
    if !counted || b.source.as_deref() != Some(crate::instructions::VALGRIND) {
        return None;
    }
    let range = |s: &Samples| -> f64 {
        let (lo, hi) =
            s.values.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        let m = coldstart_formats::stats::median(&s.values);
        if m > 0.0 && hi >= lo {
            (hi - lo) / m
        } else {
            0.0
        }
    };
    let (rb, rc) = (range(b), range(c));
    let limit = crate::instructions::STEADY_RANGE;
    let (side, r) = if rb > limit {
        ("the baseline's", rb)
    } else if rc > limit {
        ("this gate's", rc)
    } else {
        return None;
    };
    Some(format!(
        "not steady on this program: {side} counts under valgrind moved by {:.0}% among themselves (a JIT \
         compiler replacing code sooner or later?), more than the {:.0}% an unchanged program's do; CPU time \
         judges its work",
        r * 100.0,
        limit * 100.0
    ))
}

/// Judge a time figure's runs by the time rule into `row`: net of the machine's slowdown
/// (wall time only) and, on a device throttled to a number of reads a second, at the
/// baseline's reads; the note says what kept it unclear and how the reads were allowed for.
fn judge_time(
    row: &mut Row,
    b: &Samples,
    c: &Samples,
    rules: &Rules,
    machine: Option<&MachineSpeed>,
    reads: Option<DeviceReads>,
) {
    let figure = row.figure;
    let machine = machine.filter(|_| matches!(figure, Figure::Time | Figure::CpuTime));
    let allowance = machine.map(|m| match figure {
        Figure::CpuTime => cpu_allowance(m.interval()),
        _ => m.interval(),
    });
    // A cold start on a device that serves a fixed number of reads a second takes a read's
    // share of a second for each read: judged at the baseline's reads, the runs that read
    // more (a cluster of the device's reads, docs/gate.md) are not slower for it.
    let reads = reads.filter(|r| figure == Figure::Time && r.aligned(b, c) && r.bound(&b.values));
    let (bv, cv) = match reads {
        Some(r) => (r.at_baseline(&b.values, r.base), r.at_baseline(&c.values, r.now)),
        None => (b.values.clone(), c.values.clone()),
    };
    let rule = rules.time_rule(figure);
    let t = time::judge(&bv, &cv, &rule, allowance);
    let mut bound = time::run_bound(&bv, t.threshold, &rule, 0);
    row.verdict = t.verdict;
    row.limit = Some(t.baseline * (1.0 + t.threshold));
    // Slower beyond the threshold, but not beyond what the machine's own slowdown may
    // explain: more runs narrow the calibration's interval, so they go on to the bound.
    let machine_in_the_way = machine.zip(allowance).filter(|(_, (_, hi))| {
        t.verdict == Verdict::Unclear
            && ((*hi > 1.0 && t.ratio > 1.0 + t.threshold)
                || (*hi < 1.0 && t.ratio <= 1.0 + t.threshold))
    });
    if let Some((m, _)) = machine_in_the_way {
        bound.runs = rules.time.max_runs;
        row.note = Some(machine_note(&t, m, rules.time.max_runs));
    } else if t.verdict == Verdict::Unclear {
        row.note = Some(unresolved_note(&t, &bound));
    }
    if let Some(r) = reads {
        let note = r.note(&t, figure);
        row.note = Some(match row.note.take() {
            Some(n) => format!("{n}; {note}"),
            None => note,
        });
    }
    row.runs = Some(bound);
    row.time = Some(t);
}

/// How much the machine's slowdown `(lo, hi)` may stretch a start-up's CPU time: its square
/// root. CPU time leaves out waiting for a CPU, but other work on the machine stretches it too
/// (caches, memory and the other hardware thread shared): an unchanged Node.js script's hot
/// CPU time rose 37% (95% interval +28% to +49%) while the calibration loop on every CPU ran
/// 2.05 times slower (interval 1.84 to 2.26; the root of 2.26 is 1.50), Debian's python3's
/// 33% at 2.3 times, and 23% at 1.96 times with the loop on one CPU. Without the allowance,
/// runs added to an unclear CPU time made such a rise certain, and the gate said SLOWER. On a
/// machine no busier than at the baseline it is at most 1: the rule is the plain one, or stricter.
fn cpu_allowance((lo, hi): (f64, f64)) -> (f64, f64) {
    (lo.max(0.0).sqrt(), hi.max(0.0).sqrt())
}

/// Why a time is unclear when the machine's own slowdown could explain its change, and what
/// the runs did about it: added up to `max_runs` to narrow it, or stopped short of that (the
/// gate stops once a steady figure is slower, or when its --budget runs out).
fn machine_note(t: &TimeOutcome, m: &MachineSpeed, max_runs: usize) -> String {
    let (lo, hi) = m.interval();
    let runs = if t.n_now >= max_runs {
        format!("runs were added up to --max-runs {max_runs} to narrow that")
    } else {
        format!("{} runs were made; more, up to --max-runs {max_runs}, would narrow that", t.n_now)
    };
    format!(
        "{:+.1}% against a {:.1}% threshold, but the machine itself ran {:+.0}% to {:+.0}% against when \
         the baseline was recorded (its calibration loop), which could explain it: {runs}; on a \
         machine as busy as then it resolves",
        (t.ratio - 1.0) * 100.0,
        t.threshold * 100.0,
        (lo - 1.0) * 100.0,
        (hi - 1.0) * 100.0,
    )
}

/// Why a time is unclear when the runs cannot resolve its threshold: how many the rank test
/// needs, or that the baseline's runs are too few whatever the runs now.
fn unresolved_note(t: &TimeOutcome, bound: &RunBound) -> String {
    match bound.needed {
        None => format!(
            "a {:.1}% change is {:.2} interquartile ranges of the baseline's runs, which its {} runs \
             cannot resolve whatever the runs now (record the baseline with more --runs)",
            t.threshold * 100.0,
            bound.effect_iqr,
            t.n_baseline
        ),
        Some(n) => format!("the rank test needs about {n} runs for a {:.1}% change", t.threshold * 100.0),
    }
}

/// The reads of the emulated device, where each costs a fixed share of a second (a device
/// throttled to a number of reads a second, without a seek model), beside a cold state's
/// times.
#[derive(Debug, Clone, Copy)]
struct DeviceReads<'a> {
    iops: f64,
    /// The baseline's median reads.
    level: f64,
    base: &'a [f64],
    now: &'a [f64],
}

impl<'a> DeviceReads<'a> {
    fn of(base: &'a Baseline, now: &'a Baseline, state: &str) -> Option<DeviceReads<'a>> {
        let p = base.settings.storage.as_ref().filter(|p| p.seek.is_none())?;
        let iops = p.read_iops.filter(|i| *i > 0)? as f64;
        let b = base.samples(Figure::DeviceReadRequests, state)?;
        let n = now.samples(Figure::DeviceReadRequests, state)?;
        let level = coldstart_formats::stats::median(&b.values);
        level.is_finite().then_some(DeviceReads { iops, level, base: &b.values, now: &n.values })
    }

    /// Whether each time has its run's reads beside it.
    fn aligned(&self, b: &Samples, c: &Samples) -> bool {
        b.values.len() == self.base.len() && c.values.len() == self.now.len()
    }

    /// Each run's time had it read the baseline's median number of requests.
    fn at_baseline(&self, times: &[f64], reads: &[f64]) -> Vec<f64> {
        times.iter().zip(reads).map(|(t, r)| t - (r - self.level) / self.iops).collect()
    }

    /// The share of the baseline's median time the device's reads take.
    fn share(&self, times: &[f64]) -> f64 {
        let t = coldstart_formats::stats::median(times);
        if t > 0.0 {
            self.level / self.iops / t
        } else {
            0.0
        }
    }

    /// Whether the reads bound the time (`times`, the baseline's): they take most of it, and
    /// not more (a start-up of a few reads between long pauses takes less than its reads'
    /// share of a second each, as the throttle lets a read through at once after a pause; its
    /// time is not the reads').
    fn bound(&self, times: &[f64]) -> bool {
        (EXPLAINED_SHARE..=BOUND_SHARE_MAX).contains(&self.share(times))
    }

    /// How a time judged at the baseline's reads (`t`) allowed for them.
    fn note(&self, t: &TimeOutcome, figure: Figure) -> String {
        format!(
            "judged at the baseline's {:.0} reads of the device, each {:.0} ms at {} reads/s: {} -> {}",
            self.level,
            1e3 / self.iops,
            self.iops,
            crate::report::fmt_value(t.baseline, figure.unit()),
            crate::report::fmt_value(t.now, figure.unit())
        )
    }
}

/// Above this share of the time the reads cannot take, were the device the bound: see
/// [`DeviceReads::bound`].
/// The sample program's cold start reads 12 times (120 ms at 100 reads a second) in 92 ms:
/// 1.30, its reads all of it. At 1.25 it was not settled by them, and a baseline recorded
/// while the machine was slower left every quiet gate of it unclear on cold time.
const BOUND_SHARE_MAX: f64 = 1.5;

/// A cold start whose time is mostly the emulated device's reads is settled by them: when
/// its time is unclear, the device's reads and bytes and the pages touched are not slower, and
/// its change is within the threshold, it is not slower, and no more cold runs are made. What
/// the device does not explain, the program's own work, is what hot time judges.
pub const EXPLAINED_SHARE: f64 = 0.5;

fn explain_cold_time(rows: &mut [Row], base: &Baseline) {
    let settled = |rows: &[Row], f: Figure| {
        rows.iter().filter(|r| r.figure == f).all(|r| r.verdict == Verdict::NotSlower)
            && rows.iter().any(|r| r.figure == f)
    };
    let device_fine = settled(rows, Figure::DeviceReadRequests)
        && settled(rows, Figure::DeviceReadBytes)
        && rows
            .iter()
            .filter(|r| r.figure == Figure::PagesTouched)
            .all(|r| r.verdict == Verdict::NotSlower);
    if !device_fine {
        return;
    }
    for row in rows.iter_mut() {
        let Some(t) = row.time.as_ref() else { continue };
        if row.verdict != Verdict::Unclear || row.state == "hot" {
            continue;
        }
        let Some(b) = base.samples(Figure::Time, &row.state) else { continue };
        let Some(reads) = DeviceReads::of(base, base, &row.state) else { continue };
        let share = reads.share(&b.values);
        let within = t.ratio <= (1.0 + t.threshold) * t.machine.map_or(1.0, |m| m.1.max(1.0));
        if reads.bound(&b.values) && within {
            row.verdict = Verdict::NotSlower;
            row.note = Some(format!(
                "explained by the device: its reads take {:.0}% of the baseline's {} and are not slower, nor \
                 are the bytes it read or the pages touched; what they leave, the program's own work, hot time judges",
                (share.min(1.0)) * 100.0,
                crate::report::fmt_value(t.baseline, Figure::Time.unit()),
            ));
        }
    }
}

/// A hot start that runs no more instructions than its baseline (counted, [`crate::instructions`]):
/// its CPU time, unclear, within the threshold once the machine's own slowdown is allowed for
/// ([`cpu_allowance`]), is not slower: the program does the same work, which a busier machine
/// runs slower. The instructions are the work; CPU time on a shared machine is the work times
/// how much of the CPU's caches and cycles the other jobs leave it (one busy job stretched an
/// unchanged start-up's by up to 47% on the project's machine), which no number of runs
/// separates from 20% more work. (What this gives up: a start-up whose instructions stay the
/// same but run slower, by less than the machine's slowdown allows, is not seen while the
/// machine is that busy; time in the kernel, which the count leaves out, is judged by the
/// pages touched and the device's reads.)
fn explain_cpu_time(rows: &mut [Row]) {
    let same_work = rows.iter().any(|r| {
        r.figure == Figure::Instructions && r.state == "hot" && r.verdict == Verdict::NotSlower
    });
    if !same_work {
        return;
    }
    let instructions = rows
        .iter()
        .find(|r| r.figure == Figure::Instructions && r.state == "hot")
        .and_then(|r| Some((r.baseline?, r.now?)));
    for row in rows.iter_mut().filter(|r| r.figure == Figure::CpuTime && r.state == "hot") {
        let Some(t) = row.time.as_ref() else { continue };
        let hi = t.machine.map_or(1.0, |m| m.1.max(1.0));
        if row.verdict == Verdict::Unclear && t.ratio <= (1.0 + t.threshold) * hi {
            row.verdict = Verdict::NotSlower;
            let counted = instructions
                .map_or(String::new(), |(b, n)| format!(" ({})", percent_change(Some(b), Some(n))));
            row.note = Some(format!(
                "explained by the machine: the instructions are not more{counted}, and the CPU time's {:+.1}% \
                 is within {:+.1}%: its threshold ({:+.1}%) and what the machine's own slowdown stretches \
                 CPU time by (up to {:+.0}%, the square root of the calibration loop's)",
                (t.ratio - 1.0) * 100.0,
                ((1.0 + t.threshold) * hi - 1.0) * 100.0,
                t.threshold * 100.0,
                (hi - 1.0) * 100.0
            ));
        }
    }
}

/// The most a hot start's CPU time may rise and still be the machine's when the work is the
/// same (its instructions, misses, minor faults and pages): twice the baseline's. The host
/// stretched an unchanged Node.js script's by up to 1.58 times on the project's quiet machine;
/// a rise beyond twice is judged as measured, since the kernel's work besides faults (system
/// calls) is not counted.
pub const SAME_WORK_CPU_TIME: f64 = 2.0;

/// A hot start that does the same work as its baseline: the instructions, the cycles of their
/// cache misses (both counted by valgrind, [`crate::instructions`]), its minor faults and the
/// pages it touched all not slower. Its CPU time, slower or unclear by less than
/// [`SAME_WORK_CPU_TIME`], is the machine's: the same program doing the same work, which the
/// machine now runs slower. The calibration loop does not always see that (on the project's
/// quiet machine the host stretched an unchanged Node.js script's hot CPU time by 27% to 37%
/// while the loop ran 10% to 15% slower, and no probe of the machine followed it well), and more
/// runs do not separate it from more work. What still fails: more instructions (20% more CPU
/// work), more misses (a change that walks memory the caches do not hold), more faults (memory
/// the kernel must map), more pages, and a wait (the time off the CPU, which hot time judges).
/// What this gives up: a start-up that makes more or costlier system calls, without faults,
/// by less than twice its CPU time.
fn explain_cpu_time_by_work(rows: &mut [Row]) {
    let hot =
        |rows: &[Row], f: Figure| rows.iter().find(|r| r.figure == f && r.state == "hot").cloned();
    let fine = |r: &Option<Row>| r.as_ref().is_some_and(|r| r.verdict == Verdict::NotSlower);
    let work =
        [Figure::Instructions, Figure::MissCycles, Figure::MinorFaults].map(|f| hot(rows, f));
    if !work.iter().all(fine) {
        return;
    }
    // Pages touched, where they were profiled.
    if rows.iter().any(|r| r.figure == Figure::PagesTouched && r.verdict == Verdict::Slower) {
        return;
    }
    let changes: Vec<String> = work
        .iter()
        .flatten()
        .map(|r| format!("{} {}", r.figure.title(), percent_change(r.baseline, r.now)))
        .collect();
    for row in rows.iter_mut().filter(|r| r.figure == Figure::CpuTime && r.state == "hot") {
        let Some(t) = row.time.as_ref() else { continue };
        if !matches!(row.verdict, Verdict::Slower | Verdict::Unclear)
            || t.ratio > SAME_WORK_CPU_TIME
        {
            continue;
        }
        row.verdict = Verdict::NotSlower;
        row.note = Some(format!(
            "explained by the machine: the same work ({}, none slower, nor the pages touched), so the CPU \
             time's {:+.1}% is the machine running it slower (up to {:+.0}% is taken as such)",
            changes.join(", "),
            (t.ratio - 1.0) * 100.0,
            (SAME_WORK_CPU_TIME - 1.0) * 100.0
        ));
    }
}

/// A change from `b` to `n` as a signed percentage (`+1.2%`), or `-` without both.
fn percent_change(b: Option<f64>, n: Option<f64>) -> String {
    match (b, n) {
        (Some(b), Some(n)) if b > 0.0 => format!("{:+.1}%", (n / b - 1.0) * 100.0),
        _ => "-".into(),
    }
}

/// A hot start whose CPU time is not slower, on a machine that may be busier now than when the
/// baseline was recorded: its time, unclear, within the threshold once the machine's own
/// slowdown is allowed for, is not slower: the program does the same work, and waits longer
/// for a CPU. (What this gives up: a start-up that now waits more, not computes more, by less
/// than the machine's slowdown, is not seen while the machine is that busy.)
fn explain_hot_time(rows: &mut [Row]) {
    let cpu_fine = rows.iter().any(|r| {
        r.figure == Figure::CpuTime && r.state == "hot" && r.verdict == Verdict::NotSlower
    });
    if !cpu_fine {
        return;
    }
    for row in rows.iter_mut().filter(|r| r.figure == Figure::Time && r.state == "hot") {
        let Some(t) = row.time.as_ref() else { continue };
        let Some((_, hi)) = t.machine.filter(|m| m.1 >= 1.0) else { continue };
        if row.verdict == Verdict::Unclear && t.ratio <= (1.0 + t.threshold) * hi {
            row.verdict = Verdict::NotSlower;
            row.note = Some(format!(
                "explained by the machine: the CPU time is not slower, and the calibration loop ran up to {:+.0}% \
                 against when the baseline was recorded, which the time's {:+.1}% is within",
                (hi - 1.0) * 100.0,
                (t.ratio - 1.0) * 100.0
            ));
        }
    }
}

/// A hot start that does the same work and waits no longer: the instructions not more, the
/// CPU time not slower, and the time it spends off the CPU (each run's time less its CPU
/// time) no longer by more than the time's threshold. Its time, slower or unclear, is the
/// machine's speed for that work, which the calibration loop does not always show: the
/// sample's 1.2 ms hot start (its loader, page tables, cached pages faulted in) ran 11% slower
/// in 11 of 50 quiet gates, same instructions and CPU time +11%, while the loop ran 1% to 4%
/// faster; Debian's python3 was unclear on a machine 20% faster by the loop and 5% to 12% by
/// itself.
fn explain_hot_time_by_work(rows: &mut [Row], base: &Baseline, now: &Baseline) {
    let judged = |rows: &[Row], f: Figure| {
        rows.iter()
            .find(|r| r.figure == f && r.state == "hot")
            .filter(|r| r.verdict == Verdict::NotSlower)
            .cloned()
    };
    let (Some(instructions), Some(cpu)) =
        (judged(rows, Figure::Instructions), judged(rows, Figure::CpuTime))
    else {
        return;
    };
    let (Some(off_b), Some(off_n)) = (off_cpu(base), off_cpu(now)) else { return };
    for row in rows.iter_mut().filter(|r| r.figure == Figure::Time && r.state == "hot") {
        let Some(t) = row.time.as_ref() else { continue };
        if !matches!(row.verdict, Verdict::Slower | Verdict::Unclear) {
            continue;
        }
        if off_n > off_b + t.threshold * t.baseline {
            continue;
        }
        let change = |r: &Row| percent_change(r.baseline, r.now);
        row.verdict = Verdict::NotSlower;
        row.note = Some(format!(
            "explained by the machine: the same work (instructions {}, CPU time {}, not slower) and no more \
             time off the CPU ({} -> {}): the time's {:+.1}% is the machine's speed for it",
            change(&instructions),
            change(&cpu),
            crate::report::fmt_value(off_b, Figure::Time.unit()),
            crate::report::fmt_value(off_n, Figure::Time.unit()),
            (t.ratio - 1.0) * 100.0
        ));
    }
}

/// The median time a measurement's hot runs spent off the CPU: each run's time less its CPU
/// time (negative for a start-up whose threads run at once); `None` unless every hot run has
/// both.
fn off_cpu(m: &Baseline) -> Option<f64> {
    let (wall, cpu) = (m.samples(Figure::Time, "hot")?, m.samples(Figure::CpuTime, "hot")?);
    if wall.values.len() != cpu.values.len() || wall.values.is_empty() {
        return None;
    }
    let off: Vec<f64> = wall.values.iter().zip(&cpu.values).map(|(w, c)| w - c).collect();
    Some(coldstart_formats::stats::median(&off))
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
    for r in rows.iter().filter(|r| {
        r.figure.is_level()
            && matches!(r.verdict, Verdict::Slower | Verdict::NotSlower | Verdict::Unclear)
    }) {
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
            .filter(|s| s.figure.is_level())
            .map(|s| Level {
                figure: s.figure,
                state: s.state.clone(),
                median: coldstart_formats::stats::median(&s.values),
                n: s.values.len(),
            })
            .collect(),
    }
}
