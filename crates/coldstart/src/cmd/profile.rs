//! `coldstart profile`: record the first-touch order of functions (and file pages) of a
//! start-up; `coldstart profile merge`: merge profiles of several workloads.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use coldstart_profile::{Follow, ProfileError, ProfileOptions, Tracer};
use coldstart_profile_format::{self as format, Profile, Stop, Via};
use coldstart_ready::Ready;

#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "By default the program a wrapper executes is profiled (python3 through a shim \
    profiles Python), and so are child processes that run their parent's program (a browser's \
    content processes); the summary says what was followed and what was not.\n\nExamples:\n  \
    coldstart profile -o p.json -- clang-19 -c hello.c\n  \
    coldstart profile --ready 'stdout:listening' --kill-at-ready -o p.json -- ./server\n  \
    sudo coldstart profile --pages -o p.json -- python3 -c 'import json'\n  \
    sudo coldstart profile --pages=traced -o p.json -- ./myprog\n  \
    coldstart profile --workload b -o b.json -- ./myprog --open big.txt\n  \
    coldstart profile merge a.json b.json -o merged.json\n  \
    coldstart order p.json -o prog.order"
)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// When start-up is over, as for `measure --ready`: exit, stdout:REGEX, stderr:REGEX,
    /// tcp:PORT, file:PATH, window:REGEX or fd.
    #[arg(long, default_value = "exit", value_name = "SIGNAL")]
    pub ready: String,
    /// Also record the file pages start-up touches, in runs of their own. METHOD: exact (the
    /// default as root: the files start-up reads are copied onto a private device with
    /// read-ahead off and traced there, so each 4 KiB page touched is recorded once, in
    /// first-touch order, whatever this machine's read-ahead), traced (root: traced where the
    /// files are, read-ahead and fault-around included), sampled (the default without root:
    /// page faults sampled with perf).
    #[arg(long, value_name = "METHOD", num_args = 0..=1, require_equals = true, default_missing_value = "auto")]
    pub pages: Option<String>,
    /// Where an exact page run makes its private device (default: /dev/shm when it has room
    /// for twice the files to copy, else /var/tmp).
    #[arg(long, value_name = "WORK", requires = "pages")]
    pub pages_dir: Option<PathBuf>,
    /// Profile every child process (default: the children that run their parent's program,
    /// such as a browser's content processes; not a child that runs another program).
    #[arg(long, conflicts_with = "no_follow_forks")]
    pub follow_forks: bool,
    /// Profile the command's own process only.
    #[arg(long)]
    pub no_follow_forks: bool,
    /// Keep profiling a process that executes another program (the default: the program a
    /// wrapper script, `env` or a shim executes is the one profiled).
    #[arg(long, conflicts_with = "no_follow_exec", hide = true)]
    pub follow_exec: bool,
    /// Stop profiling a process when it executes another program.
    #[arg(long)]
    pub no_follow_exec: bool,
    /// Kill the program at readiness (default: detach and let it run on).
    #[arg(long)]
    pub kill_at_ready: bool,
    /// Label of this workload, kept when profiles are merged.
    #[arg(long, default_value = "default", value_name = "LABEL")]
    pub workload: String,
    /// Give up after this many seconds without readiness (0: never).
    #[arg(long, default_value = "60", value_name = "SECONDS", value_parser = super::common::wait_timeout())]
    pub timeout: Duration,
    /// First-touch tracer: audit (an LD_AUDIT agent handles the breakpoints in the program,
    /// fast), ptrace (every program, loader included), or auto (audit unless the program is
    /// static or setuid; a program that crashes under audit is profiled again with ptrace).
    #[arg(long, default_value = "auto", value_name = "auto|audit|ptrace")]
    pub tracer: String,
    /// Where to write the profile.
    #[arg(short, long, value_name = "P.json", required = true)]
    pub output: Option<PathBuf>,
    /// The command to profile, after `--`.
    #[arg(last = true, value_name = "CMD", required = true)]
    pub command: Vec<OsString>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Merge profiles of several workloads, keeping each workload's data.
    Merge(MergeArgs),
}

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Profiles to merge.
    #[arg(required = true, value_name = "P.json")]
    pub inputs: Vec<PathBuf>,
    /// Where to write the merged profile.
    #[arg(short, long, value_name = "M.json")]
    pub output: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(Action::Merge(m)) = args.action {
        return merge(m);
    }
    let output = args.output.ok_or_else(|| crate::exit::usage("give -o P.json"))?;
    let ready: Ready =
        args.ready.parse().map_err(|e| crate::exit::usage(format!("--ready: {e}")))?;
    let mut options = ProfileOptions::new(args.command);
    options.ready = ready;
    if let Some(method) = &args.pages {
        options.pages = true;
        options.page_method =
            method.parse().map_err(|e| crate::exit::usage(format!("--pages: {e}")))?;
    }
    if let Some(dir) = &args.pages_dir {
        if !dir.is_dir() {
            return Err(crate::exit::usage(format!(
                "--pages-dir {}: not a directory (give an existing directory on a file system that takes O_DIRECT, such as /dev/shm or /var/tmp)",
                dir.display()
            )));
        }
    }
    options.page_work_dir = args.pages_dir;
    options.follow_forks = match (args.follow_forks, args.no_follow_forks) {
        (true, _) => Follow::All,
        (_, true) => Follow::None,
        _ => Follow::Same,
    };
    options.follow_exec = !args.no_follow_exec;
    options.kill_at_ready = args.kill_at_ready;
    options.workload = args.workload;
    options.tracer =
        args.tracer.parse().map_err(|e| crate::exit::usage(format!("--tracer: {e}")))?;
    options.timeout = (!args.timeout.is_zero()).then_some(args.timeout);
    // A profile that cannot be written is refused before the program runs.
    Profile::check_writable(&output)?;
    let caught = coldstart_process::cancel::catch().context("installing signal handlers")?;
    super::common::Steps::new("profile").say(format_args!(
        "recording the start-up of {}{}",
        options.command.first().map_or(String::new(), |c| c.to_string_lossy().into_owned()),
        if options.pages { " (functions, then pages)" } else { "" }
    ));
    let recording = match coldstart_profile::profile(&options) {
        Err(ProfileError::Interrupted { signal }) => {
            eprintln!("coldstart: error: {}", ProfileError::Interrupted { signal });
            return Ok(ExitCode::from(128 + signal as u8));
        }
        other => other?,
    };
    let profile = &recording.profile;
    if let Some(notice) = recording.notice.as_ref().filter(|n| !profile.warnings.contains(n)) {
        eprintln!("coldstart: {notice}");
    }
    profile.write(&output).with_context(|| format!("writing {}", output.display()))?;
    // From here on the signals do what they do by default (a program left running after
    // the profile is not coldstart's to stop).
    drop(caught);
    summarize(profile, &output);
    print_processes(profile, &options);
    if matches!(profile.stop, Stop::Crash { .. }) && options.tracer == Tracer::Audit {
        eprintln!(
            "coldstart: the audit tracer ran the program; if it does not crash without coldstart, the profiler caused it: profile it with --tracer ptrace (or auto, which does so by itself)"
        );
    }
    let code = match profile.stop {
        Stop::Crash { .. } | Stop::Timeout { .. } => ExitCode::from(crate::exit::FAILURE_FOUND),
        _ => crate::exit::SUCCESS,
    };
    if recording.forwarding_output() {
        eprintln!(
            "coldstart: the program runs on; forwarding its output until it closes it (use --kill-at-ready to stop it at readiness)"
        );
        recording.wait_for_output();
    }
    Ok(code)
}

fn summarize(profile: &Profile, output: &std::path::Path) {
    for w in &profile.warnings {
        eprintln!("coldstart: warning: {w}");
    }
    say_early_stop(&profile.stop);
    print_functions(profile);
    if let Some(p) = &profile.pages {
        print_pages(p);
        print_sections(p);
    }
    println!("written to {}", output.display());
}

/// On stderr: the program crashed or timed out, and what of the profile is kept.
fn say_early_stop(stop: &Stop) {
    match stop {
        Stop::Crash { signal, pid, fault } => {
            eprint!("coldstart: the program crashed during start-up: pid {pid} killed by {signal}");
            if let Some(f) = fault {
                eprint!(" at {:#x}", f.ip);
                if let Some(l) = &f.location {
                    eprint!(" ({l})");
                }
            }
            eprintln!("; the profile up to the crash is kept");
        }
        Stop::Timeout { seconds } => {
            eprintln!("coldstart: not ready after {seconds} s: the program was killed; the profile so far is kept")
        }
        _ => {}
    }
}

/// The functions recorded, per module, and the last ones before the end.
fn print_functions(profile: &Profile) {
    let total: usize = profile.modules.iter().map(|m| m.functions.len()).sum();
    println!(
        "profile `{}`: {} in {}, {:.1} ms to {}",
        profile.workload,
        coldstart_units::count(total as u64, "function"),
        coldstart_units::count(
            profile.modules.iter().filter(|m| !m.functions.is_empty()).count() as u64,
            "module"
        ),
        profile.duration_ns as f64 / 1e6,
        match &profile.stop {
            Stop::Ready { signal, .. } => format!("readiness ({signal})"),
            Stop::Exit { code } => format!("exit (status {code})"),
            Stop::Crash { signal, .. } => format!("crash ({signal})"),
            Stop::Timeout { .. } => "timeout".into(),
            Stop::Merged => "merge".into(),
        }
    );
    for m in profile.modules.iter().filter(|m| !m.functions.is_empty()) {
        println!(
            "  {:>6} / {:<6} {} ({})",
            m.functions.len(),
            m.functions_total,
            m.path.display(),
            m.symbols
        );
    }
    let order = profile.first_touch_order();
    if !order.is_empty() {
        let last: Vec<String> = order
            .iter()
            .filter(|(m, _)| m.symbols != "none")
            .rev()
            .take(3)
            .map(|(_, t)| coldstart_elf::demangle(&t.names[0]))
            .collect();
        println!(
            "  last functions before the end: {}",
            last.into_iter().rev().collect::<Vec<_>>().join(", ")
        );
    }
}

/// How many pages the profile names, and how exactly.
fn print_pages(p: &format::PageProfile) {
    let pages: u64 = p.accesses.iter().map(|a| a.count).sum();
    if p.is_exact() {
        println!(
            "  {} touched in {} (exact: each 4 KiB page once, in first-touch order)",
            coldstart_units::count(pages, "page"),
            coldstart_units::count(p.files.len() as u64, "file")
        );
    } else {
        println!(
            "  {} ({}) in {}{}",
            coldstart_units::count(p.accesses.len() as u64, "page access"),
            coldstart_units::count(pages, "page"),
            coldstart_units::count(p.files.len() as u64, "file"),
            match p.source.as_str() {
                _ if p.sampled => " (sampled)",
                format::SOURCE_TRACEFS =>
                    " (traced in place: read-ahead and fault-around included)",
                _ => "",
            }
        );
    }
}

/// Code, relocations and data read per section, for the files start-up touched most.
fn print_sections(p: &format::PageProfile) {
    let sections = coldstart_profile::pages::section_pages(p);
    let mut by_use: Vec<(usize, u64)> = sections
        .iter()
        .enumerate()
        .map(|(i, s)| (i, s.iter().map(|x| x.touched).sum::<u64>()))
        .filter(|&(_, n)| n > 0)
        .collect();
    by_use.sort_by_key(|&(i, n)| (std::cmp::Reverse(n), i));
    for &(i, _) in by_use.iter().take(3) {
        let list: Vec<String> = sections[i]
            .iter()
            .filter(|s| s.touched > 0)
            .map(|s| format!("{} {}/{}", s.name, s.touched, s.pages))
            .collect();
        println!("  pages by section in {}: {}", p.files[i].path.display(), list.join(", "));
    }
}

/// What the processes of the run ran, what was followed and what was not (nothing when the
/// command ran one program in one process).
fn print_processes(profile: &Profile, options: &ProfileOptions) {
    let images = &profile.images;
    let Some(root) = images.iter().find(|i| i.via == Via::Start).map(|i| i.pid) else { return };
    if images.len() <= 1 {
        return;
    }
    let chain: Vec<String> = images
        .iter()
        .filter(|i| i.pid == root && i.via != Via::Fork && i.profiled)
        .map(|i| i.path.display().to_string())
        .collect();
    let mut line = format!("  followed: pid {root} ran {}", chain.join(" → "));
    let others = last_per_process(images.iter().filter(|i| i.pid != root && i.profiled));
    if !others.is_empty() {
        let programs = count_by_path(others.iter().copied());
        line.push_str(&format!("; {} child processes ({programs})", others.len()));
    }
    println!("{line}");
    let skipped_exec: Vec<_> =
        images.iter().filter(|i| !i.profiled && i.pid == root && i.via == Via::Exec).collect();
    if !skipped_exec.is_empty() {
        println!(
            "  not followed: the command's process executed {} (drop --no-follow-exec to profile it)",
            count_by_path(skipped_exec.into_iter())
        );
    }
    let skipped = last_per_process(images.iter().filter(|i| !i.profiled && i.pid != root));
    if !skipped.is_empty() {
        let what = match (options.follow_exec, options.follow_forks) {
            (true, Follow::Same) => {
                "child processes running another program (add --follow-forks to profile them)"
            }
            (true, Follow::None) => "child processes (--no-follow-forks)",
            (false, _) => "child processes (--no-follow-exec)",
            (true, Follow::All) => "child processes (started after readiness)",
        };
        println!(
            "  not followed: {} {what}: {}",
            skipped.len(),
            count_by_path(skipped.iter().copied())
        );
    }
}

/// The last of `images` of each process, in the order the processes first appear.
fn last_per_process<'a>(
    images: impl Iterator<Item = &'a coldstart_profile_format::Image>,
) -> Vec<&'a coldstart_profile_format::Image> {
    let mut out: Vec<&coldstart_profile_format::Image> = Vec::new();
    for i in images {
        match out.iter_mut().find(|o| o.pid == i.pid) {
            Some(o) => *o = i,
            None => out.push(i),
        }
    }
    out
}

/// `PATH (N), PATH (M)`: the programs of `images` by how often they appear, most first.
fn count_by_path<'a>(images: impl Iterator<Item = &'a coldstart_profile_format::Image>) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for i in images {
        let path = i.path.display().to_string();
        match counts.iter_mut().find(|(p, _)| *p == path) {
            Some((_, n)) => *n += 1,
            None => counts.push((path, 1)),
        }
    }
    counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let shown: Vec<String> = counts.iter().take(5).map(|(p, n)| format!("{p} ({n})")).collect();
    let more = counts.len().saturating_sub(5);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

fn merge(args: MergeArgs) -> anyhow::Result<ExitCode> {
    let mut inputs = Vec::new();
    for path in &args.inputs {
        inputs.push(Profile::read(path).map_err(|e| crate::exit::usage(e.to_string()))?);
    }
    let merged = format::merge(inputs).map_err(|e| crate::exit::usage(e.to_string()))?;
    merged.write(&args.output).with_context(|| format!("writing {}", args.output.display()))?;
    summarize(&merged, &args.output);
    Ok(crate::exit::SUCCESS)
}
