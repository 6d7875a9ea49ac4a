//! `coldstart prefetch record|show|merge`: the prefetch database of a start-up
//! (docs/prefetch.md).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use coldstart_prefetch::{replay, Database, Recording};
use coldstart_profile::{PageMethod, ProfileError, ProfileOptions};
use coldstart_ready::Ready;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    sudo coldstart prefetch record -o python3.prefetch -- /usr/bin/python3 -c 'import json'\n  \
    sudo coldstart prefetch record --runs 3 --min-share 0.5 -o ff.prefetch -- firefox-esr --headless --screenshot\n  \
    coldstart prefetch record --from-profile p.json -o prog.prefetch\n  \
    coldstart prefetch show python3.prefetch\n  \
    coldstart launch --prefetch python3.prefetch -- /usr/bin/python3 -c 'import json'")]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Record the file ranges a start-up reads (exact page profile, root) into a database.
    Record(RecordArgs),
    /// Print a database: its files, ranges, bytes and how much of each file it covers.
    Show(ShowArgs),
    /// Merge databases, keeping the pages seen in at least --min-share of their recordings.
    Merge(MergeArgs),
}

#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Where to write the database.
    #[arg(short, long, value_name = "DB")]
    pub output: PathBuf,
    /// Build the database from page profiles (`coldstart profile --pages`) instead of
    /// running the command; repeat to merge several.
    #[arg(long, value_name = "P.json", conflicts_with = "command")]
    pub from_profile: Vec<PathBuf>,
    /// Record the command this many times and merge the recordings.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = super::common::runs(1))]
    pub runs: usize,
    /// Keep a page only when at least this share (0 to 1) of the recordings read it.
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    pub min_share: f64,
    /// When start-up is over, as for `measure --ready`.
    #[arg(long, default_value = "exit", value_name = "SIGNAL")]
    pub ready: String,
    /// Give up after this many seconds without readiness (the program is killed).
    #[arg(long, default_value = "60", value_name = "SECONDS", value_parser = super::common::wait_timeout())]
    pub timeout: std::time::Duration,
    /// Record only when the database is missing, unreadable or names a file whose identity
    /// changed (a package upgrade); else say it is up to date and do nothing.
    #[arg(long)]
    pub refresh: bool,
    /// The command whose start-up to record, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The database.
    #[arg(value_name = "DB")]
    pub db: PathBuf,
    /// List every range, not only the files.
    #[arg(long)]
    pub ranges: bool,
}

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Databases to merge.
    #[arg(required = true, value_name = "DB")]
    pub inputs: Vec<PathBuf>,
    /// Where to write the merged database.
    #[arg(short, long, value_name = "DB")]
    pub output: PathBuf,
    /// Keep a page only when at least this share (0 to 1) of all the recordings read it.
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    pub min_share: f64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Record(a) => record(a),
        Action::Show(a) => show(a),
        Action::Merge(a) => merge(a),
    }
}

fn check_share(share: f64) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&share) {
        return Err(crate::exit::usage(format!(
            "--min-share {share}: give a share between 0 and 1 (0.5: pages half the recordings read)"
        )));
    }
    Ok(())
}

fn read_db(path: &Path) -> anyhow::Result<Database> {
    Ok(Database::read(path)?)
}

fn record(args: RecordArgs) -> anyhow::Result<ExitCode> {
    check_share(args.min_share)?;
    if args.from_profile.is_empty() && args.command.is_empty() {
        return Err(crate::exit::usage(
            "give the command to record after `--`, or --from-profile P.json",
        ));
    }
    if args.refresh && args.output.exists() {
        if let Ok(db) = Database::read(&args.output) {
            let plan = replay::plan(&db, &checks_only());
            if plan.skipped.is_empty() {
                println!(
                    "{} is up to date: every file it names is as recorded",
                    args.output.display()
                );
                return Ok(crate::exit::SUCCESS);
            }
            eprintln!(
                "coldstart: {} changed since {} was recorded (first: {}: {}); recording again",
                coldstart_units::count(plan.skipped.len() as u64, "file"),
                args.output.display(),
                plan.skipped[0].path.display(),
                plan.skipped[0].why
            );
        }
    }
    coldstart_fs::check_writable(&args.output)
        .map_err(|e| crate::exit::usage(format!("-o {}: {e}", args.output.display())))?;
    let mut recordings = Vec::new();
    for p in &args.from_profile {
        let profile = coldstart_profile_format::Profile::read(p)
            .map_err(|e| crate::exit::usage(e.to_string()))?;
        let Some(pages) = profile.pages.as_ref() else {
            return Err(crate::exit::usage(format!(
                "{} has no file pages: record it with `coldstart profile --pages`",
                p.display()
            )));
        };
        recordings.push(Recording::from_page_profile(profile.command.clone(), pages));
    }
    if !args.command.is_empty() {
        if !coldstart_sys::is_root() {
            return Err(crate::exit::privilege(
                "recording needs root: the exact page profiler traces the page cache (tracefs) on a private copy of the files. Run it with sudo; without root, record a sampled page profile with `coldstart profile --pages=sampled -o P.json -- CMD` and use `prefetch record --from-profile P.json` (sampled faults miss the pages read with read(2) and those mapped by fault-around, so that database is partial)",
            ));
        }
        let mut options = ProfileOptions::new(args.command.clone());
        options.ready =
            args.ready.parse::<Ready>().map_err(|e| crate::exit::usage(format!("--ready: {e}")))?;
        options.pages = true;
        options.page_method = PageMethod::Exact;
        options.kill_at_ready = true;
        options.timeout = (!args.timeout.is_zero()).then_some(args.timeout);
        let caught = coldstart_process::cancel::catch().context("installing signal handlers")?;
        let command: Vec<String> =
            args.command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let steps = super::common::Steps::new("prefetch record");
        for i in 0..args.runs {
            steps.say(format_args!(
                "run {} of {}: recording the pages start-up reads",
                i + 1,
                args.runs
            ));
            let run = match coldstart_profile::profile_pages(&options) {
                Err(ProfileError::Interrupted { signal }) => {
                    eprintln!("coldstart: error: {}", ProfileError::Interrupted { signal });
                    return Ok(ExitCode::from(128 + signal as u8));
                }
                other => other?,
            };
            for w in &run.warnings {
                eprintln!("coldstart: warning: {w}");
            }
            if args.runs > 1 {
                let pages: u64 = run.pages.accesses.iter().map(|a| a.count).sum();
                eprintln!("coldstart: recording {} of {}: {pages} pages", i + 1, args.runs);
            }
            recordings.push(Recording::from_page_profile(command.clone(), &run.pages));
        }
        drop(caught);
    }
    let db = coldstart_prefetch::merge(&recordings, args.min_share);
    db.write(&args.output).with_context(|| format!("writing {}", args.output.display()))?;
    for w in &db.warnings {
        eprintln!("coldstart: warning: {w}");
    }
    summary(&db);
    println!("written to {}", args.output.display());
    Ok(crate::exit::SUCCESS)
}

fn summary(db: &Database) {
    use coldstart_units::{bytes, count};
    println!(
        "{}, {}, {} to read ({}{})",
        count(db.files.len() as u64, "file"),
        count(db.ranges.len() as u64, "range"),
        bytes(db.bytes()),
        count(db.recordings as u64, "recording"),
        if db.min_share > 0.0 { format!(", min share {}", db.min_share) } else { String::new() }
    );
}

fn show(args: ShowArgs) -> anyhow::Result<ExitCode> {
    let db = read_db(&args.db)?;
    if !db.command.is_empty() {
        println!("command: {}", db.command.join(" "));
    }
    summary(&db);
    for w in &db.warnings {
        println!("warning: {w}");
    }
    let pages = db.pages_per_file();
    let plan = replay::plan(&db, &checks_only());
    println!("{:>10} {:>7} {:>8}  file", "read", "ranges", "of file");
    let mut ranges = vec![0usize; db.files.len()];
    for r in &db.ranges {
        ranges[r.file] += 1;
    }
    for (i, f) in db.files.iter().enumerate() {
        let bytes = pages[i] * coldstart_prefetch::db::PAGE;
        let share = if f.size == 0 { 0.0 } else { bytes as f64 * 100.0 / f.size as f64 };
        let state = match plan.skipped.iter().find(|s| s.path == f.path) {
            Some(s) => format!("  (changed: {})", s.why),
            None => String::new(),
        };
        println!(
            "{:>10} {:>7} {:>7.0}%  {}{}",
            coldstart_units::bytes(bytes),
            ranges[i],
            share.min(100.0),
            f.path.display(),
            state
        );
        if args.ranges {
            for r in db.ranges.iter().filter(|r| r.file == i) {
                println!("{:>28}pages {}..{} (seen in {})", "", r.page, r.page + r.pages, r.seen);
            }
        }
    }
    if !plan.skipped.is_empty() {
        println!(
            "{} changed since the recording and would be skipped: record again (`coldstart prefetch record --refresh -o {} -- CMD`)",
            coldstart_units::count(plan.skipped.len() as u64, "file"),
            args.db.display()
        );
    }
    Ok(crate::exit::SUCCESS)
}

fn merge(args: MergeArgs) -> anyhow::Result<ExitCode> {
    check_share(args.min_share)?;
    let mut recordings = Vec::new();
    for p in &args.inputs {
        recordings.push(Recording::from_database(&read_db(p)?));
    }
    let db = coldstart_prefetch::merge(&recordings, args.min_share);
    db.write(&args.output).with_context(|| format!("writing {}", args.output.display()))?;
    summary(&db);
    println!("written to {}", args.output.display());
    Ok(crate::exit::SUCCESS)
}

/// Replay options for checking a database's files without reading what it names.
fn checks_only() -> replay::ReplayOptions {
    replay::ReplayOptions { check_in_sweep: false, ..Default::default() }
}
