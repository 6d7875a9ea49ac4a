//! `coldstart measure`: start a command many times in a known, verified cache state and
//! report its start-up.
//!
//! The arguments become a [`MeasureOptions`] (validated before anything runs: a command
//! that does not exist is exit code 2, `--cache cold` without root exit code 3), the library
//! measures with the Linux executor, and this module draws the progress bar (only on a
//! terminal), prints the table and warnings, and writes the exports atomically as soon as
//! each cache state is done.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use coldstart_formats::measure::MeasureReport;
use coldstart_measure::launch::LinuxExecutor;
use coldstart_measure::measure::{Progress, StorageOptions};
use coldstart_measure::{export, CacheState, MeasureOptions};
use coldstart_ready::Ready;
use coldstart_storage::StorageProfile;

use super::common::Steps;
use crate::exit;
use coldstart_units as units;

/// The separator between the two commands of a comparison.
const SEPARATOR: &str = ":::";

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The program runs with standard input and output on /dev/null (except the stream a \
    stdout:/stderr: signal reads), in its own process group and cgroup, without a shell: a script \
    (#!) or a wrapper that runs another program is measured whole, as typed.\n\nIn cold, selective \
    and warm states, pages that other processes map cannot leave the page cache; they are \
    counted and shown (Stayed cached), and only pages no other process maps exclude a run \
    (--strict: any page).\n\nExamples:\n  coldstart measure --cache cold,hot -- ./myprog --version\n  \
    coldstart measure --cache cold --strict --runs 20 -- ./myprog --version\n  \
    coldstart measure --ready 'stdout:listening' -- ./server\n  \
    coldstart measure --compare --cache selective -- ./old ::: ./new\n  \
    sudo coldstart measure --storage hdd --cache cold --prefetch p.prefetch --launch-options '--order physical --jobs 4' --compare -- ./myprog\n  \
    sudo coldstart measure --storage hdd --cache cold,hot -- ./myprog"
)]
pub struct Args {
    /// Cache state before each run: hot, warm, selective or cold; several separated by commas
    /// (`cold,hot` also reports the I/O share: cold median minus hot median).
    #[arg(long, value_name = "STATE[,STATE]", default_value = "hot")]
    pub cache: String,
    /// When start-up ends: exit, stdout:REGEX, stderr:REGEX, tcp:PORT, file:PATH,
    /// window:NAME-REGEX or fd (the program writes to the fd in $COLDSTART_READY_FD).
    #[arg(long, value_name = "SIGNAL", default_value = "exit")]
    pub ready: String,
    /// Measured runs per command and cache state.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = super::common::runs(1))]
    pub runs: usize,
    /// Unrecorded runs before the measured ones (at least one for `hot`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = super::common::runs(0))]
    pub warmup: usize,
    /// Bound of each run, in seconds; a run not ready by then is killed and excluded.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = super::common::run_timeout())]
    pub timeout: Duration,
    /// Write the full report (every run's figures) as JSON (docs/formats/measure.md).
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// Write every run as CSV.
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,
    /// Write the summary as a Markdown table.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
    /// Compare two commands separated by `:::`, run interleaved (A B A B ...).
    #[arg(long)]
    pub compare: bool,
    /// Exclude a run when any page of the program's own files stayed cached, even one another
    /// process maps (a shell maps libc, the locale archive, the gconv cache and its own
    /// binary): a perfectly cold state, as on a dedicated benchmark machine. Without it such
    /// held pages are counted and shown with the figures, and only pages no other process maps
    /// exclude a run.
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub emulated: super::common::StorageArgs,
    /// With --storage: copy this directory onto the emulated device, instead of the files a
    /// discovery run finds (the executable, its non-system libraries, its data).
    #[arg(long, value_name = "DIR", requires = "storage")]
    pub app_dir: Option<PathBuf>,
    /// Start every measured run through `coldstart launch --prefetch DB` (after the cache
    /// state is set: the sweep is part of the timed start-up). With --compare and one
    /// command: that command with the prefetch (A) against without (B).
    #[arg(long, value_name = "DB")]
    pub prefetch: Option<PathBuf>,
    /// With --prefetch: options for launch, as one word (e.g. `--order physical --jobs 4`).
    #[arg(long, value_name = "OPTIONS", requires = "prefetch", allow_hyphen_values = true)]
    pub launch_options: Option<String>,
    /// The command to measure (after `--`), and with --compare a second one after `:::`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Turn the arguments into validated options (exit code 2 or 3 on bad input).
fn options(args: &Args) -> anyhow::Result<MeasureOptions> {
    let mut caches = Vec::new();
    for s in args.cache.split(',') {
        let state: CacheState =
            s.trim().parse().map_err(|e| exit::usage(format!("--cache {}: {e}", args.cache)))?;
        caches.push(state);
    }
    let ready: Ready = args.ready.parse().map_err(|e| exit::usage(format!("--ready: {e}")))?;
    let mut commands: Vec<Vec<String>> =
        args.command.split(|a| a == SEPARATOR).map(|c| c.to_vec()).collect();
    if commands.len() == 1 && commands[0].is_empty() {
        return Err(exit::usage(
            "no command to measure: give it after `--`, e.g. coldstart measure -- ls",
        ));
    }
    if commands.iter().any(|c| c.is_empty()) {
        return Err(exit::usage(format!("an empty command around `{SEPARATOR}`")));
    }
    let mut launchers = Vec::new();
    if let Some(db) = &args.prefetch {
        let exe = std::env::current_exe().context("finding coldstart's own binary")?;
        let db = std::path::absolute(db).unwrap_or_else(|_| db.clone());
        let mut launcher = vec![
            exe.to_string_lossy().into_owned(),
            "launch".to_string(),
            "--prefetch".to_string(),
            db.to_string_lossy().into_owned(),
        ];
        if let Some(extra) = &args.launch_options {
            launcher.extend(extra.split_whitespace().map(String::from));
        }
        // Checked now, so a bad database is bad input and not runs that fail one by one.
        coldstart_prefetch::Database::read(&db)?;
        launcher.push("--".into());
        if args.compare && commands.len() == 1 {
            commands.push(commands[0].clone());
            launchers = vec![launcher];
        } else {
            launchers = vec![launcher; commands.len()];
        }
    }
    match (args.compare, commands.len()) {
        (false, 1) | (true, 2) => {}
        (true, _) => {
            return Err(exit::usage(format!(
            "--compare needs exactly two commands separated by `{SEPARATOR}`: -- A {SEPARATOR} B"
        )))
        }
        (false, _) => {
            return Err(exit::usage(format!(
                "`{SEPARATOR}` separates two commands to compare: add --compare"
            )))
        }
    }
    // Resolve relative program paths against the current directory once, so what was
    // validated is what runs.
    for c in &mut commands {
        if c[0].contains('/') {
            if let Ok(abs) = std::path::absolute(&c[0]) {
                c[0] = abs.to_string_lossy().into_owned();
            }
        }
    }
    let storage = match &args.emulated.storage {
        Some(p) => {
            let profile: StorageProfile =
                p.parse().map_err(|e| exit::usage(format!("--storage: {e}")))?;
            let app_dir = match &args.app_dir {
                Some(d) => Some(
                    std::path::absolute(d)
                        .map_err(|e| exit::usage(format!("--app-dir {}: {e}", d.display())))?,
                ),
                None => None,
            };
            Some(StorageOptions { profile, app_dir, work_dir: args.emulated.storage_dir.clone() })
        }
        None => None,
    };
    let opts = MeasureOptions {
        commands,
        caches,
        ready,
        runs: args.runs,
        warmup: args.warmup,
        timeout: args.timeout,
        storage,
        strict: args.strict,
        change: (args.compare && args.prefetch.is_some() && launchers.len() == 1)
            .then(|| "the prefetch".to_string()),
        launchers,
    };
    opts.validate()?;
    Ok(opts)
}

fn write_exports(args: &Args, report: &MeasureReport) -> anyhow::Result<()> {
    let write =
        |path: &Option<PathBuf>, render: &dyn Fn(&MeasureReport) -> String| -> anyhow::Result<()> {
            if let Some(p) = path {
                coldstart_fs::write_atomic(p, render(report).as_bytes())
                    .with_context(|| format!("cannot write {}", p.display()))?;
            }
            Ok(())
        };
    write(&args.export_json, &export::to_json)?;
    write(&args.export_csv, &export::to_csv)?;
    write(&args.export_markdown, &export::to_markdown)?;
    Ok(())
}

fn check_export_dirs(args: &Args) -> anyhow::Result<()> {
    for (flag, p) in [
        ("--export-json", &args.export_json),
        ("--export-csv", &args.export_csv),
        ("--export-markdown", &args.export_markdown),
    ] {
        if let Some(p) = p {
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !dir.is_dir() {
                return Err(exit::usage(format!(
                    "{flag} {}: directory {} does not exist",
                    p.display(),
                    dir.display()
                )));
            }
            if p.is_dir() {
                return Err(exit::usage(format!("{flag} {}: is a directory", p.display())));
            }
        }
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = options(&args)?;
    check_export_dirs(&args)?;
    // A signal ends the work through its guards (runs, cgroups, emulated storage, tracing);
    // `main` then exits with 128 + the signal.
    let _caught =
        coldstart_process::cancel::catch().context("cannot install the signal handler")?;
    let mut exec = LinuxExecutor::new();

    let bar = std::io::stderr().is_terminal().then(|| {
        // Hidden until the first phase gives it a length.
        let b = indicatif::ProgressBar::with_draw_target(
            Some(0),
            indicatif::ProgressDrawTarget::hidden(),
        );
        b.set_style(
            indicatif::ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        b
    });
    let mut export_error = None;
    let steps = Steps::new("measure");
    let (mut phase, mut done, mut runs) = (String::new(), 0, 0);
    let mut on_progress = |p: Progress| match p {
        Progress::Phase { cache, total } => {
            (phase, done, runs) = (cache.to_string(), 0, total);
            steps.say(format_args!("{phase}: {}", units::count(total as u64, "run")));
            if let Some(b) = &bar {
                b.set_prefix(cache.to_string());
                b.set_length(total as u64);
                b.set_position(0);
                b.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            }
        }
        Progress::Run { label, measured, wall_s } => {
            done += 1;
            let kind = if measured { "" } else { " (warm-up)" };
            let ms = wall_s * 1e3;
            match runs {
                // Before the first state: the discovery run that finds the files to copy
                // onto emulated storage.
                0 => steps.say(format_args!("finding the program's files: {label} {ms:.1} ms")),
                _ => steps
                    .say(format_args!("{phase}: run {done} of {runs}: {label}{kind} {ms:.1} ms")),
            }
            if let Some(b) = &bar {
                b.set_message(format!("{label}{kind}: {ms:.1} ms"));
                b.inc(1);
            }
        }
        Progress::Step(s) => {
            steps.say(&s);
            if let Some(b) = &bar {
                b.set_message(s);
            }
        }
        Progress::Snapshot(report) => {
            if let Err(e) = write_exports(&args, &report) {
                export_error.get_or_insert(e);
            }
        }
    };
    let report = coldstart_measure::measure(&opts, &mut exec, &mut on_progress)?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if let Some(e) = export_error {
        return Err(e);
    }
    write_exports(&args, &report)?;

    let mut out = std::io::stdout().lock();
    out.write_all(export::to_table(&report).as_bytes())?;
    if let Some(st) = &report.storage {
        let profile = StorageProfile {
            name: st.profile.clone(),
            read_iops: st.read_iops,
            read_bps: st.read_bps,
            readahead_kb: st.readahead_kb,
            seek: st.seek,
        };
        writeln!(out, "Storage: {}", profile.describe())?;
    }
    for share in &report.io_share {
        writeln!(
            out,
            "I/O share of {} ({} - hot): {:.1} ms of {:.1} ms ({:.0}%)",
            share.label,
            share.cache,
            share.io_s * 1e3,
            share.cold_median_s * 1e3,
            share.fraction * 100.0
        )?;
    }
    out.flush()?;
    // The table ends with the warnings.
    let empty: Vec<&str> = report
        .commands
        .iter()
        .filter(|c| c.runs.iter().all(|r| r.excluded.is_some()))
        .map(|c| c.label.as_str())
        .collect();
    if !empty.is_empty() {
        eprintln!(
            "coldstart: error: no run of {} counted (see the warnings above)",
            empty.join(", ")
        );
        return Ok(ExitCode::from(exit::FAILURE_FOUND));
    }
    Ok(exit::SUCCESS)
}
