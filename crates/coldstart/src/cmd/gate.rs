//! `coldstart gate`: compare a start-up with a stored baseline, for CI.
//!
//! The arguments become a [`GateOptions`]; `--update` records a baseline (and shows how it
//! compares with the one it replaces), otherwise the stage gates against the baseline. This
//! module prints the report, writes the JSON and Markdown outputs and the history, and turns
//! the verdict into the exit code: 0 not slower (and, unless `--unclear fail`, unclear), 1
//! slower, 2 when the gate could not measure, whatever kept it from it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use coldstart_gate::compare::{compare, history_entry, Rules};
use coldstart_gate::drift::Method;
use coldstart_gate::identity::Allow;
use coldstart_gate::linux::LinuxRunner;
use coldstart_gate::run::Progress;
use coldstart_gate::{
    history, plan, summary, Baseline, Figure, GateError, GateOptions, Policy, Slack, StorageChoice,
};
use coldstart_measure::CacheState;
use coldstart_ready::Ready;
use coldstart_storage::StorageProfile;

use crate::exit;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Unclear {
    /// An unclear verdict passes (exit 0), and says so.
    Pass,
    /// An unclear verdict fails (exit 1).
    Fail,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Steady figures (bytes and reads of the emulated device, pages touched from exact page \
    profiles, instructions and their cache misses, minor faults) are slower when their median is above a limit the baseline's spread and the \
    measured noise set; time, cold and hot, by a rank test with a minimum effect above the noise, adding \
    runs only while unclear. The baseline records what it measured: another command, program or working \
    directory is refused before anything runs (--other-command allows it), and so is another build of the \
    program (--new-build allows it: a CI job gating its own new build). It records how it was measured (a \
    gate measures the same way; a --storage, --cache or --ready other than its own is refused) and where: \
    one from another kernel, CPU or disk is flagged, not compared (docs/gate.md).\n\nExit codes: 0 not slower (and unclear, unless \
    --unclear fail), 1 slower, 2 could not measure.\n\nExamples:\n  \
    sudo coldstart gate --baseline startup.json --update -- ./build/myprog --version\n  \
    sudo coldstart gate --baseline startup.json --new-build --export-markdown summary.md -- ./build/myprog --version\n  \
    sudo coldstart gate --baseline startup.json --history startup-history.jsonl --update -- ./build/myprog"
)]
pub struct Args {
    /// The baseline file (docs/formats/gate.md): read to gate against, written with --update.
    #[arg(long, value_name = "FILE")]
    pub baseline: PathBuf,
    /// Record a new baseline (atomically), showing how it compares with the one it replaces;
    /// exit 0 once written.
    #[arg(long)]
    pub update: bool,
    /// Append this run to a history file (one JSON line per run) and look for a slow drift
    /// across the runs in it.
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Cache states to measure, a colder one and hot (default: cold,hot as root,
    /// selective,hot otherwise). A gate takes its baseline's.
    #[arg(long, value_name = "STATE,STATE")]
    pub cache: Option<String>,
    /// When start-up ends (as for measure; default exit). A gate takes its baseline's.
    #[arg(long, value_name = "SIGNAL")]
    pub ready: Option<String>,
    /// Storage to read the program's files from: a profile (hdd, hdd-seek, emmc, sata-ssd,
    /// nvme, custom:...) or none. Default: an emulated hdd where this machine's disk hides cold
    /// start (a read-ahead above 128 KiB, or a solid-state disk) and coldstart runs as root.
    /// A gate takes its baseline's.
    #[arg(long, value_name = "PROFILE|none")]
    pub storage: Option<String>,
    /// Where the emulated device's backing file goes.
    #[arg(long, value_name = "DIR", default_value = coldstart_storage::DEFAULT_WORK_DIR)]
    pub storage_dir: PathBuf,
    /// Page profiles for the pages-touched figure (default 5 as root, 0 otherwise). A gate
    /// takes its baseline's.
    #[arg(long, value_name = "N", value_parser = coldstart_units::count_in::<usize>(0, 100))]
    pub page_profiles: Option<usize>,
    /// With --update: counts of the instructions start-up runs, under valgrind, where the CPU
    /// does not count them (0: none; the CPU time then judges CPU work alone, which other
    /// work on the machine stretches). A gate takes its baseline's.
    #[arg(long, value_name = "N", default_value_t = coldstart_gate::instructions::BASELINE_COUNTS, value_parser = coldstart_units::count_in::<usize>(0, 20))]
    pub instruction_counts: usize,
    /// With --update: hot runs of the baseline.
    #[arg(long, value_name = "N", default_value_t = plan::DEFAULT_BASELINE_RUNS, value_parser = super::common::runs(1))]
    pub runs: usize,
    /// With --update: runs of the baseline's colder state (cold or selective).
    #[arg(long, value_name = "N", default_value_t = plan::DEFAULT_BASELINE_COLD_RUNS, value_parser = super::common::runs(1))]
    pub cold_runs: usize,
    /// Hot runs of the gate's first batch, and of each batch added while hot time is unclear.
    #[arg(long, value_name = "N", default_value_t = plan::DEFAULT_FIRST_RUNS, value_parser = super::common::runs(1))]
    pub batch: usize,
    /// Runs of the colder state in the gate's first batch, and in each batch added while its
    /// time is unclear and the device's reads do not explain it.
    #[arg(long, value_name = "N", default_value_t = plan::DEFAULT_COLD_FIRST_RUNS, value_parser = super::common::runs(1))]
    pub cold_batch: usize,
    /// The most the gate may take, in seconds, measuring included: its first steps shrink to
    /// fit, later ones run only if they fit, and what is still unclear when it runs out stays
    /// unclear (docs/gate.md). Default: no bound.
    #[arg(long, value_name = "SECONDS", value_parser = coldstart_units::duration_in(coldstart_units::MILLISECOND, coldstart_units::DAY))]
    pub budget: Option<Duration>,
    /// The program may be another build than the baseline's (a CI job gating a new build of
    /// its own program against a baseline of the old one). Without it, another build-id is
    /// refused (exit 2): an upgraded system program is not the program the baseline measured.
    #[arg(long)]
    pub new_build: bool,
    /// The command, the program it resolves to or the working directory may differ from the
    /// baseline's. Without it, they are refused (exit 2) before anything runs.
    #[arg(long)]
    pub other_command: bool,
    /// Runs per cache state never exceed this.
    #[arg(long, value_name = "N", default_value_t = 60, value_parser = super::common::runs(1))]
    pub max_runs: usize,
    /// The smallest slowdown of time to fail for, in percent (the threshold rises to the
    /// measured noise when that is larger).
    #[arg(long, value_name = "PERCENT", default_value_t = 5.0, value_parser = coldstart_units::number_in(0.0, 1000.0))]
    pub min_effect: f64,
    /// An allowance on a steady figure's limit: NAME=VALUE, VALUE a count, a size (4k) or a
    /// percentage of the baseline's median (1%); repeatable. Figures: read_bytes,
    /// read_requests, major_faults, device_read_bytes, device_read_requests, pages_touched,
    /// instructions.
    #[arg(long, value_name = "NAME=VALUE")]
    pub slack: Vec<String>,
    /// Bound of each run, in seconds (default 60, a gate takes its baseline's).
    #[arg(long, value_name = "SECS", value_parser = super::common::run_timeout())]
    pub timeout: Option<Duration>,
    /// The commit measured (default: $GITHUB_SHA, $CI_COMMIT_SHA, or git rev-parse HEAD here).
    #[arg(long, value_name = "REV")]
    pub commit: Option<String>,
    /// A fact of the environment to record and compare, NAME=VALUE (a compiler's version, a
    /// runner image); repeatable. A baseline with other facts is flagged, not compared.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub facts: Vec<String>,
    /// Also write the report as JSON (docs/formats/gate.md).
    #[arg(long, value_name = "FILE", alias = "json")]
    pub export_json: Option<PathBuf>,
    /// Also write the summary as Markdown, for a CI job page or a pull-request comment.
    #[arg(long, value_name = "FILE", alias = "markdown")]
    pub export_markdown: Option<PathBuf>,
    /// What an unclear verdict does to the exit code.
    #[arg(long, value_enum, default_value_t = Unclear::Pass)]
    pub unclear: Unclear,
    /// Exit 1 when the history shows a drift (by default it is flagged in the report).
    #[arg(long, requires = "history")]
    pub fail_on_drift: bool,
    /// How drift is found in the history: change-point or historical-changes.
    #[arg(long, value_name = "METHOD", default_value = "change-point")]
    pub drift_method: String,
    /// The command whose start-up is gated (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// A slack value: `1%`, `4k`, `12`.
fn parse_slack(figure: Figure, value: &str) -> Result<Slack, String> {
    let v = value.trim();
    if let Some(p) = v.strip_suffix('%') {
        let share: f64 = p.trim().parse().map_err(|_| format!("`{value}` is not a percentage"))?;
        if !(share >= 0.0 && share.is_finite()) {
            return Err(format!("`{value}`: a percentage of 0 or more"));
        }
        return Ok(Slack { absolute: 0.0, relative: share / 100.0 });
    }
    let absolute = if figure.unit() == coldstart_gate::figure::Unit::Bytes {
        coldstart_units::parse_size(v).map_err(|e| format!("`{value}`: {e}"))? as f64
    } else {
        let n: f64 = v.parse().map_err(|_| format!("`{value}` is not a number"))?;
        if !(n >= 0.0 && n.is_finite()) {
            return Err(format!("`{value}`: a number of 0 or more"));
        }
        n
    };
    Ok(Slack { absolute, relative: 0.0 })
}

fn name_value(flag: &str, item: &str) -> anyhow::Result<(String, String)> {
    let (n, v) = item
        .split_once('=')
        .filter(|(n, _)| !n.trim().is_empty())
        .ok_or_else(|| exit::usage(format!("{flag} {item}: give NAME=VALUE")))?;
    Ok((n.trim().to_string(), v.to_string()))
}

/// Turn the arguments into validated options (bad input: exit code 2).
fn options(args: &Args) -> anyhow::Result<GateOptions> {
    if args.command.is_empty() {
        return Err(exit::usage("no command to gate: give it after `--`, e.g. coldstart gate --baseline b.json -- ./myprog"));
    }
    let mut command = args.command.clone();
    if command[0].contains('/') {
        if let Ok(abs) = std::path::absolute(&command[0]) {
            command[0] = abs.to_string_lossy().into_owned();
        }
    }
    let mut o = GateOptions::new(command);
    if let Some(c) = &args.cache {
        let mut states = Vec::new();
        for s in c.split(',') {
            states.push(
                s.trim()
                    .parse::<CacheState>()
                    .map_err(|e| exit::usage(format!("--cache {c}: {e}")))?,
            );
        }
        o.states = Some(states);
    }
    if let Some(r) = &args.ready {
        o.ready = Some(r.parse::<Ready>().map_err(|e| exit::usage(format!("--ready: {e}")))?);
    }
    o.storage = match args.storage.as_deref() {
        None => StorageChoice::Auto,
        Some("none") => StorageChoice::Off,
        Some(p) => StorageChoice::Profile(
            p.parse::<StorageProfile>().map_err(|e| exit::usage(format!("--storage: {e}")))?,
        ),
    };
    o.storage_dir = args.storage_dir.clone();
    o.page_profiles = args.page_profiles;
    o.instruction_counts = args.instruction_counts;
    o.baseline_runs = args.runs;
    o.baseline_cold_runs = args.cold_runs;
    o.first_runs = args.batch;
    o.cold_first_runs = args.cold_batch;
    o.time.max_runs = args.max_runs;
    o.allow = Allow { new_build: args.new_build, other_command: args.other_command };
    o.budget = args.budget;
    o.time.min_effect = args.min_effect / 100.0;
    for item in &args.slack {
        let (name, value) = name_value("--slack", item)?;
        let figure: Figure =
            name.parse().map_err(|e| exit::usage(format!("--slack {item}: {e}")))?;
        let slack =
            parse_slack(figure, &value).map_err(|e| exit::usage(format!("--slack {item}: {e}")))?;
        o.slack.insert(figure, slack);
    }
    o.timeout = args.timeout;
    o.commit = args.commit.clone();
    let mut facts = BTreeMap::new();
    for item in &args.facts {
        let (name, value) = name_value("--env", item)?;
        facts.insert(name, value);
    }
    o.facts = facts;
    o.drift = args
        .drift_method
        .parse::<Method>()
        .map_err(|e| exit::usage(format!("--drift-method: {e}")))?;
    Ok(o)
}

fn check_output(flag: &str, path: &Path) -> anyhow::Result<()> {
    coldstart_fs::check_writable(path)
        .map_err(|e| exit::usage(format!("{flag} {}: {e}", path.display())))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match gate(&args) {
        Ok(code) => Ok(code),
        Err(e) => {
            if let Some(GateError::Interrupted { signal }) = e.downcast_ref::<GateError>() {
                eprintln!("coldstart: error: {}", exit::render(&e));
                return Ok(ExitCode::from(128 + *signal as u8));
            }
            // Recording a baseline gives no verdict: its errors keep their own exit code (a
            // full disk is the machine's, 70), not the gate's "could not measure".
            if args.update {
                return Err(e);
            }
            Err(exit::could_not_measure(e))
        }
    }
}

fn gate(args: &Args) -> anyhow::Result<ExitCode> {
    let opts = options(args)?;
    for (flag, p) in [
        ("--export-json", &args.export_json),
        ("--export-markdown", &args.export_markdown),
        ("--history", &args.history),
    ] {
        if let Some(p) = p {
            check_output(flag, p)?;
        }
    }
    if args.update {
        check_output("--baseline", &args.baseline)?;
    }
    let history = match &args.history {
        Some(p) => Some(history::read(p)?),
        None => None,
    };
    // A signal ends the work through its guards (runs, cgroups, emulated storage, tracing);
    // `main` then exits with 128 + the signal.
    let _caught =
        coldstart_process::cancel::catch().context("cannot install the signal handler")?;
    let steps = super::common::Steps::new("gate");
    let mut runner = match steps.as_lines() {
        true => LinuxRunner::with_steps(move |s| steps.say(s)),
        false => LinuxRunner::new(),
    };
    let mut progress = |p: Progress| match p {
        Progress::Step(s) => eprintln!("coldstart gate: {s}"),
    };

    if args.update {
        // The baseline it replaces, if it can be read, for the comparison shown.
        let previous = Baseline::read(&args.baseline).ok();
        let new = coldstart_gate::record(&opts, &mut runner, &mut progress)?;
        let report = previous
            .as_ref()
            .map(|old| compare(old, &new, &args.baseline, &Rules::of(&opts), history.as_deref()));
        new.write(&args.baseline)?;
        if let Some(h) = &args.history {
            history::append(h, &history_entry(&new, "baseline"))?;
        }
        let mut out = std::io::stdout().lock();
        if let Some(r) = &report {
            writeln!(out, "Against the baseline it replaces:")?;
            out.write_all(r.to_text().as_bytes())?;
            write_outputs(args, r)?;
        }
        writeln!(
            out,
            "baseline written to {} (storage: {})\n",
            args.baseline.display(),
            new.settings
                .storage
                .as_ref()
                .map_or("this machine's disk".to_string(), |p| format!("emulated {}", p.name))
        )?;
        out.write_all(summary::baseline_table(&new, &Rules::of(&opts)).as_bytes())?;
        for w in &new.warnings {
            writeln!(out, "Warning: {w}")?;
        }
        return Ok(exit::SUCCESS);
    }

    let base = Baseline::read(&args.baseline)?;
    let (report, now) = coldstart_gate::gate(
        &opts,
        &base,
        &args.baseline,
        history.as_deref(),
        &mut runner,
        &mut progress,
    )?;
    if let Some(h) = &args.history {
        history::append(h, &history_entry(&now, report.verdict.label()))?;
    }
    write_outputs(args, &report)?;
    std::io::stdout().lock().write_all(report.to_text().as_bytes())?;
    let policy =
        Policy { unclear_fails: args.unclear == Unclear::Fail, drift_fails: args.fail_on_drift };
    Ok(if report.fails(policy) { ExitCode::from(exit::FAILURE_FOUND) } else { exit::SUCCESS })
}

fn write_outputs(args: &Args, report: &coldstart_gate::GateReport) -> anyhow::Result<()> {
    if let Some(p) = &args.export_json {
        coldstart_fs::write_atomic(p, report.to_json().as_bytes())
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    if let Some(p) = &args.export_markdown {
        coldstart_fs::write_atomic(p, report.to_markdown().as_bytes())
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_reads_counts_sizes_and_percentages() {
        assert_eq!(
            parse_slack(Figure::DeviceReadRequests, "2"),
            Ok(Slack { absolute: 2.0, relative: 0.0 })
        );
        assert_eq!(
            parse_slack(Figure::DeviceReadBytes, "4k"),
            Ok(Slack { absolute: 4096.0, relative: 0.0 })
        );
        assert_eq!(
            parse_slack(Figure::Instructions, "0.5%"),
            Ok(Slack { absolute: 0.0, relative: 0.005 })
        );
        assert!(parse_slack(Figure::MajorFaults, "-1").is_err());
        assert!(parse_slack(Figure::MajorFaults, "lots").is_err());
    }
}
