//! `coldstart timeline`: where the start-up time of one run goes, on one time axis (phases,
//! I/O wait, the files that cost most), from the kernel's tracepoints; or from a profile.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use coldstart_formats::{Document, Timeline};
use coldstart_ready::Ready;
use coldstart_timeline::{Cache, Functions, StorageSetup, TimelineOptions};

use crate::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  coldstart timeline -- /usr/bin/python3 -c pass\n  \
    coldstart timeline -o t.json -- ./sample --workload b     (then: coldstart report t.json)\n  \
    coldstart timeline --profile p.json                       (from a profile alone)\n  \
    sudo coldstart timeline --storage hdd -- ./build/app      (./build on an emulated hard disk)")]
pub struct Args {
    /// The page-cache state of the traced run: cold (sync and drop_caches) or hot (after one
    /// untraced run).
    #[arg(long, default_value = "cold", value_parser = ["cold", "hot"])]
    pub cache: String,
    /// When start-up is over, as for `measure --ready`: exit, stdout:REGEX, stderr:REGEX,
    /// tcp:PORT, file:PATH or fd.
    #[arg(long, default_value = "exit")]
    pub ready: String,
    /// Give up after this many seconds.
    #[arg(long, default_value = "60", value_parser = super::common::run_timeout())]
    pub timeout: Duration,
    /// The module touches from this profile instead of recording one; without a command, the
    /// timeline of the profile itself (its own run's times, no kernel events).
    #[arg(long, value_name = "P.json")]
    pub profile: Option<PathBuf>,
    /// No module touches (no function profile is recorded).
    #[arg(long, conflicts_with = "profile")]
    pub no_functions: bool,
    #[command(flatten)]
    pub emulated: super::common::StorageArgs,
    /// With --storage: copy this directory onto the emulated device. Default: the directory
    /// of the program given by a path (`./build/app` copies `./build`); for a program found in
    /// PATH, its own files as `measure --storage` finds them (one run on this disk first).
    #[arg(long, value_name = "DIR", requires = "storage")]
    pub app_dir: Option<PathBuf>,
    /// Write the timeline as JSON (format coldstart-timeline; `coldstart report` draws it).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The command.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(o) = &args.output {
        coldstart_fs::check_writable(o).map_err(|e| {
            exit::usage(format!("cannot write -o {}: {e}; choose another -o", o.display()))
        })?;
    }
    let profile = match &args.profile {
        Some(p) => Some(
            coldstart_profile_format::Profile::read(p)
                .with_context(|| format!("--profile {}", p.display()))?,
        ),
        None => None,
    };
    let timeline = if args.command.is_empty() {
        let Some(p) = profile else {
            return Err(exit::usage("give a command after `--`, or --profile P.json"));
        };
        coldstart_timeline::from_profile(&p)
    } else {
        let ready: Ready = args.ready.parse().map_err(|e| exit::usage(format!("--ready: {e}")))?;
        let storage = storage_setup(&args, &ready, args.timeout)?;
        let options = TimelineOptions {
            command: args.command.clone(),
            ready,
            cache: if args.cache == "hot" { Cache::Hot } else { Cache::Cold },
            functions: match (profile, args.no_functions) {
                (Some(p), _) => Functions::From(Box::new(p)),
                (None, true) => Functions::Skip,
                (None, false) => Functions::Record,
            },
            timeout: args.timeout,
            storage,
        };
        super::common::Steps::new("timeline").say(format_args!(
            "tracing one start-up of {}{}",
            args.command.first().map_or(String::new(), |c| c.to_string_lossy().into_owned()),
            match &options.storage {
                Some(_) => " on the emulated storage (copying its files first)",
                None => "",
            }
        ));
        // A signal ends the recording through its guards (tracing, uprobes, tracefs mounted
        // for it, the emulated device), not the process.
        let caught = coldstart_process::cancel::catch().context("installing signal handlers")?;
        let recorded = coldstart_timeline::record(&options);
        drop(caught);
        match recorded {
            Ok(timeline) => timeline,
            Err(e) => {
                if let Some(signal) = e.interrupted() {
                    eprintln!("coldstart: error: {e}");
                    return Ok(ExitCode::from(128 + signal as u8));
                }
                return Err(e.into());
            }
        }
    };
    print_summary(&timeline);
    if let Some(o) = &args.output {
        timeline.write(o)?;
        println!("wrote {}", o.display());
    }
    Ok(exit::SUCCESS)
}

/// `--storage`, `--app-dir` and `--storage-dir` as the library takes them.
fn storage_setup(
    args: &Args,
    ready: &Ready,
    timeout: Duration,
) -> anyhow::Result<Option<StorageSetup>> {
    let Some(name) = &args.emulated.storage else { return Ok(None) };
    let profile: coldstart_storage::StorageProfile =
        name.parse().map_err(|e| exit::usage(format!("--storage: {e}")))?;
    let paths = match &args.app_dir {
        Some(dir) => vec![std::fs::canonicalize(dir)
            .map_err(|e| exit::usage(format!("--app-dir {}: {e}", dir.display())))?],
        None => {
            let program = std::path::Path::new(&args.command[0]);
            let in_path = || {
                let dir = program.parent().and_then(|d| std::fs::canonicalize(d).ok());
                coldstart_process::search_path()
                    .iter()
                    .any(|p| std::fs::canonicalize(p).ok().is_some_and(|p| Some(p) == dir))
            };
            if program.components().count() < 2 || in_path() {
                // A program in PATH: its own files, found as `measure --storage` finds them
                // (its directory would be all of /usr/bin).
                let command: Vec<String> = args
                    .command
                    .iter()
                    .map(|a| a.clone().into_string())
                    .collect::<Result<_, _>>()
                    .map_err(|a| {
                        exit::usage(format!(
                            "--storage: the argument {a:?} is not UTF-8; name what to copy onto \
                             the device with --app-dir DIR"
                        ))
                    })?;
                eprintln!(
                    "timeline: finding the files of {} (one run on this disk)",
                    program.display()
                );
                coldstart_measure::storage_files(&command, ready.clone(), timeout)?
            } else {
                let dir = program.parent().unwrap_or(std::path::Path::new("."));
                vec![std::fs::canonicalize(dir)
                    .map_err(|e| exit::usage(format!("{}: {e}", dir.display())))?]
            }
        }
    };
    Ok(Some(StorageSetup { profile, paths, work_dir: args.emulated.storage_dir.clone() }))
}

fn ms(s: f64) -> String {
    format!("{:.2} ms", s * 1e3)
}

/// `name` in at most `width` characters: the start and the end kept, `...` between.
fn fit(name: &str, width: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= width {
        return name.to_owned();
    }
    let tail = (width - 3) * 2 / 3;
    let head = width - 3 - tail;
    let mut out: String = chars[..head].iter().collect();
    out.push_str("...");
    out.extend(&chars[chars.len() - tail..]);
    out
}

fn print_summary(t: &Timeline) {
    println!(
        "{} start of {}: {} to readiness ({}); named phases cover {:.0}%",
        t.cache,
        t.command.join(" "),
        ms(t.wall_s),
        t.ready,
        t.named_share() * 100.0
    );
    println!("{:<28} {:>10} {:>10} {:>6}", "phase", "starts", "takes", "share");
    for p in &t.phases {
        let d = p.end_s - p.start_s;
        let share = if t.wall_s > 0.0 { d / t.wall_s * 100.0 } else { 0.0 };
        println!("{:<28} {:>10} {:>10} {:>5.0}%", p.name, ms(p.start_s), ms(d), share);
    }
    if !t.waits.is_empty() || t.cache != "hot" {
        println!(
            "waiting on I/O: {} ({:.0}% of the wall time; {} summed over {} waits of every thread); {} block requests",
            ms(t.io_wait_wall_s),
            if t.wall_s > 0.0 { t.io_wait_wall_s / t.wall_s * 100.0 } else { 0.0 },
            ms(t.io_wait_s),
            t.waits.len(),
            t.block.len()
        );
    }
    if !t.costs.is_empty() {
        println!(
            "{:<60} {:>10} {:>7} {:>10}",
            "files that cost most", "pages read", "faults", "waited"
        );
        for c in t.costs.iter().take(8) {
            let f = &t.files[c.file];
            let name = if f.path.is_empty() {
                format!("(dev {} inode {})", f.dev, f.ino)
            } else {
                f.path.clone()
            };
            println!(
                "{:<60} {:>10} {:>7} {:>10}",
                fit(&name, 60),
                c.pages_read,
                c.faults,
                ms(c.wait_s)
            );
        }
    }
    if !t.modules.is_empty() {
        println!("{} modules touched; see the report for when", t.modules.len());
    }
    for w in &t.warnings {
        eprintln!("coldstart: warning: {w}");
    }
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn a_long_file_name_keeps_its_column() {
        let long =
            "/usr/lib/python3.11/encodings/__pycache__/aliases.cpython-311.pyc.and.more.text";
        let f = fit(long, 60);
        assert_eq!(f.chars().count(), 60);
        assert!(f.starts_with("/usr/lib/") && f.ends_with("cpython-311.pyc.and.more.text"), "{f}");
        assert_eq!(fit("/etc/ld.so.cache", 60), "/etc/ld.so.cache");
    }
}
