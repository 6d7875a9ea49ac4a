//! `coldstart launch --prefetch DB -- CMD`: start CMD while (or after) the recorded file
//! ranges are read in one sweep; behave like CMD itself (its exit code, its signals).
//!
//! The reads are issued and waited for before the command starts (with `--no-wait` only
//! issued: `readahead(2)` returns at once; a mechanism that waits for each read then runs on a
//! thread of its own while the command starts). SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and
//! SIGUSR2 sent to coldstart are sent on to the command (not those a terminal sends the whole
//! process group, which the command got already); coldstart exits with the command's exit
//! code, or 128 + the signal that killed it. The signals that end a command (SIGINT, SIGTERM,
//! SIGHUP) are noted by the one cancellation model ([`coldstart_process::cancel`]): one that
//! comes before the command starts keeps it from starting (exit 128 + the signal); the others
//! are taken with `sigtimedwait`, with SIGCHLD, as they are only passed on.

use anyhow::Context;
use coldstart_units as units;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use coldstart_prefetch::replay::{self, Plan, ReplayOptions};
use coldstart_prefetch::Database;

#[derive(Debug, clap::Args)]
#[command(after_help = "Files whose identity (size, mtime, build-id) changed since the \
    recording are skipped and named on standard error; a database that cannot be used is \
    reported and the command starts without it.\n\nExamples:\n  \
    coldstart launch --prefetch python3.prefetch -- /usr/bin/python3 -c 'import json'\n  \
    coldstart launch --prefetch ff.prefetch --refresh -- firefox-esr --headless --screenshot\n  \
    coldstart launch --prefetch ff.prefetch --no-wait --order physical -v -- firefox-esr --headless --screenshot")]
pub struct Args {
    /// The database to replay (`coldstart prefetch record`).
    #[arg(long, value_name = "DB", required = true)]
    pub prefetch: PathBuf,
    /// Start the command as soon as the reads are issued, without waiting for them (default:
    /// wait until everything is read, so that the command's own reads never cut the sweep's
    /// large reads into small ones; BENCHMARKS.md, "Prefetch").
    #[arg(long)]
    pub no_wait: bool,
    /// Order of the reads: auto (physical on a rotational disk, else first-touch),
    /// first-touch or physical (FIEMAP).
    #[arg(long, value_name = "ORDER", default_value = "auto")]
    pub order: String,
    /// How reads are asked: auto (huge with at least 4 jobs on a rotational disk, else
    /// readahead), readahead (readahead(2)), fadvise (POSIX_FADV_WILLNEED),
    /// populate (MADV_POPULATE_READ on a mapping, waits for each), huge (the same on a
    /// mapping advised MADV_HUGEPAGE: each 2 MiB block read whole in large folios, in requests
    /// as large as the device takes) or whole-file (each file read whole with read(2): the
    /// preload of old, for comparison).
    #[arg(long, value_name = "HOW", default_value = "auto")]
    pub mechanism: String,
    /// Keep what the sweep read locked in memory for this many seconds after the command
    /// starts (or until it ends), so that nothing reclaims it before start-up touches it
    /// (0: do not lock). Without root, the lock limit (`ulimit -l`) bounds it.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = super::common::wait_timeout())]
    pub hold: Duration,
    /// Threads issuing reads at once (the auto mechanism uses at least 4 when it chooses
    /// huge).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = coldstart_units::count_in::<usize>(1, 64))]
    pub jobs: usize,
    /// Threads opening the database's files at once, so that the directory and inode reads
    /// of cold opens are in the device's queue together (measured on a modelled hard disk: no
    /// gain for python3 or Firefox, so 1 by default).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = coldstart_units::count_in::<usize>(1, 64))]
    pub open_jobs: usize,
    /// Ranges of a file at most this far apart are read as one: auto (1 MiB on a rotational
    /// disk, 32 KiB on flash) or a size (0: only what start-up touched).
    #[arg(long, value_name = "SIZE", default_value = "auto")]
    pub gap: String,
    /// When the database is missing or names a changed file: after the command ends, record
    /// it again in the background (`prefetch record --refresh`, root; it runs the command
    /// twice more).
    #[arg(long)]
    pub refresh: bool,
    /// Say what the sweep did.
    #[arg(short, long)]
    pub verbose: bool,
    /// The command, after `--`.
    #[arg(last = true, value_name = "CMD", required = true)]
    pub command: Vec<OsString>,
}

/// The signals sent on to the command besides those that end a command
/// ([`coldstart_process::cancel::SIGNALS`]).
const FORWARDED: [i32; 3] = [libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];

/// How often the wait for the command looks at the signals that end a command.
const POLL: Duration = Duration::from_millis(50);

fn options(args: &Args) -> anyhow::Result<(ReplayOptions, bool)> {
    let bad = |flag: &str, e: String| crate::exit::usage(format!("{flag}: {e}"));
    let whole = args.mechanism == "whole-file";
    let mechanism = if whole {
        replay::Mechanism::Readahead
    } else {
        args.mechanism.parse().map_err(|e| bad("--mechanism", e))?
    };
    Ok((
        ReplayOptions {
            order: args.order.parse().map_err(|e| bad("--order", e))?,
            mechanism,
            jobs: args.jobs,
            gap: match args.gap.as_str() {
                "auto" => None,
                g => Some(coldstart_units::size_in(0, 1 << 30)(g).map_err(|e| bad("--gap", e))?),
            },
            wait: !args.no_wait,
            hold: !args.hold.is_zero(),
            check_in_sweep: true,
            open_jobs: args.open_jobs,
        },
        whole,
    ))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (options, whole) = options(&args)?;
    let program = args.command[0].clone();
    // A database that cannot be used never keeps the command from starting.
    let db = match Database::read(&args.prefetch) {
        Ok(mut db) => {
            let budget = coldstart_prefetch::db::available_memory().unwrap_or(u64::MAX) / 2;
            let dropped = db.truncate_to(budget);
            if dropped > 0 {
                eprintln!(
                    "coldstart: prefetch: {} covers {}, more than half the available memory: only its first {} in first-touch order are read",
                    args.prefetch.display(),
                    units::bytes(db.bytes() + dropped),
                    units::bytes(db.bytes())
                );
            }
            Some(db)
        }
        Err(e) => {
            eprintln!(
                "coldstart: prefetch: {e}; starting {} without prefetch",
                program.to_string_lossy()
            );
            None
        }
    };
    let mut stale = db.is_none();
    let _caught =
        coldstart_process::cancel::catch().context("cannot install the signal handler")?;
    let mut waited: Vec<i32> = FORWARDED.to_vec();
    waited.push(libc::SIGCHLD);
    let blocked = coldstart_process::forward::Blocked::new(&waited);
    let mut sweeper = None;
    // Without --no-wait everything is read before the command starts. With it, readahead(2)
    // and fadvise are still issued before the command starts (they return at once), so its
    // own reads queue behind them instead of cutting the sweep's large reads into small ones;
    // a mechanism that waits for each read runs beside the command.
    // (`auto` may choose a mechanism that waits.)
    let beside = !options.wait
        && (whole || options.mechanism.waits() || options.mechanism == replay::Mechanism::Auto);
    if let Some(db) = &db {
        if !beside {
            let (plan, issued) = sweep(db, &options, whole);
            report_skipped(&plan);
            report(&plan, &issued, args.verbose);
            // The locks end after --hold seconds, or with coldstart when the command ends.
            let held = issued.held.clone();
            let hold = args.hold;
            let _ = std::thread::Builder::new().name("coldstart-hold".into()).spawn(move || {
                std::thread::sleep(hold);
                drop(held);
            });
            stale |= !plan.skipped.is_empty();
            if let Some(s) = coldstart_process::cancel::raised() {
                eprintln!("coldstart: {}: the command did not start", signal_name(s));
                return Ok(exit_for_signal(s));
            }
        } else if args.refresh {
            // What changed must be known after the command ends: the plan is made first.
            let plan = replay::plan(db, &options);
            stale |= !plan.skipped.is_empty();
        }
    }
    let mut command = std::process::Command::new(&program);
    command.args(&args.command[1..]);
    // The command starts with no signal blocked, as it would without coldstart.
    coldstart_process::forward::unblocked(&mut command);
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
            eprintln!("coldstart: cannot start {}: {e}", program.to_string_lossy());
            return Ok(ExitCode::from(code));
        }
    };
    if let (Some(db), true) = (db, beside) {
        let (verbose, options) = (args.verbose, options.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("coldstart-prefetch".into())
            .spawn(move || {
                let plan = replay::plan(&db, &options);
                report_skipped(&plan);
                let _ = tx.send(());
                let issued = if whole { read_whole(&plan) } else { replay::issue(&plan, &options) };
                report(&plan, &issued, verbose);
            })
            .ok();
        sweeper = Some(rx);
    }
    let pid = child.id();
    let mut passed = 0;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(anyhow::Error::new(e).context("waiting for the command")),
        }
        // An ending signal since the last look: on to the command too.
        let (count, last) = coldstart_process::cancel::received();
        if count > passed {
            passed = count;
            if let (Some(sig), false) = (last, coldstart_process::cancel::last_from_kernel()) {
                let _ = coldstart_process::forward::send(pid, sig);
            }
        }
        if let Some((sig, from_kernel)) = blocked.wait(POLL) {
            // A terminal's signals went to the whole process group, the command included.
            if sig != libc::SIGCHLD && !from_kernel {
                // To our own child, not yet reaped.
                let _ = coldstart_process::forward::send(pid, sig);
            }
        }
    };
    // The files skipped are said even when the command ended first (the reads are not
    // waited for: they no longer help anyone).
    if let Some(planned) = sweeper {
        let _ = planned.recv_timeout(Duration::from_secs(1));
    }
    if args.refresh && stale {
        refresh(&args);
    }
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(s)) => exit_for_signal(s),
        _ => ExitCode::from(70),
    })
}

/// Plan the replay of `db` and issue it.
fn sweep(db: &Database, options: &ReplayOptions, whole: bool) -> (Plan, replay::Issued) {
    let plan = replay::plan(db, options);
    let issued = if whole { read_whole(&plan) } else { replay::issue(&plan, options) };
    (plan, issued)
}

/// Name the refused reads; with `verbose`, what the sweep did.
fn report(plan: &Plan, issued: &replay::Issued, verbose: bool) {
    if let Some(e) = &issued.first_error {
        eprintln!(
            "coldstart: prefetch: {} refused: {e}",
            units::count(issued.failed as u64, "read")
        );
    }
    if verbose {
        eprintln!(
            "coldstart: prefetch: {} opened and checked in {:.1} ms; {}, {}, order {:?}, {:?}, in {:.1} ms{}",
            units::count(plan.open.len() as u64, "file"),
            plan.elapsed.as_secs_f64() * 1e3,
            units::count(issued.requests as u64, "read"),
            units::bytes(issued.bytes),
            plan.order,
            plan.mechanism,
            issued.elapsed.as_secs_f64() * 1e3,
            if plan.moved > 0 {
                format!(" ({} moved)", units::count(plan.moved as u64, "file"))
            } else {
                String::new()
            }
        );
        let locked = issued.held.bytes.load(std::sync::atomic::Ordering::Relaxed);
        let refused = issued.held.refused.load(std::sync::atomic::Ordering::Relaxed);
        if locked > 0 || refused > 0 {
            eprintln!(
                "coldstart: prefetch: {} locked in memory{}",
                units::bytes(locked),
                if refused > 0 {
                    let ranges = units::count(refused as u64, "range");
                    format!(", {ranges} over the lock limit (ulimit -l) only read")
                } else {
                    String::new()
                }
            );
        }
    }
}

/// Name the files skipped.
fn report_skipped(plan: &Plan) {
    if !plan.skipped.is_empty() {
        let names: Vec<String> = plan
            .skipped
            .iter()
            .take(3)
            .map(|s| format!("{} ({})", s.path.display(), s.why))
            .collect();
        eprintln!(
            "coldstart: prefetch: {} skipped, changed since the recording: {}{}; record again (launch --refresh, or prefetch record --refresh)",
            units::count(plan.skipped.len() as u64, "file"),
            names.join(", "),
            if plan.skipped.len() > 3 { ", ..." } else { "" }
        );
    }
}

/// Record the database again, in the background, detached from this terminal.
fn refresh(args: &Args) {
    if !coldstart_sys::is_root() {
        eprintln!(
            "coldstart: prefetch: {} is stale or missing; recording it needs root: sudo coldstart prefetch record --refresh -o {} -- {}",
            args.prefetch.display(),
            args.prefetch.display(),
            args.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
        );
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["prefetch", "record", "--refresh", "-o"])
        .arg(&args.prefetch)
        .arg("--")
        .args(&args.command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // Its own session, away from our terminal.
    coldstart_process::forward::own_session(&mut cmd);
    match cmd.spawn() {
        Ok(_) => eprintln!(
            "coldstart: prefetch: recording {} again in the background",
            args.prefetch.display()
        ),
        Err(e) => eprintln!("coldstart: prefetch: cannot record again: {e}"),
    }
}

/// Read each file of the plan whole with read(2), in the order of the plan's first read of
/// it: the whole-file preload of old, for comparison.
fn read_whole(plan: &Plan) -> replay::Issued {
    use std::io::Read;
    let start = std::time::Instant::now();
    let mut done = replay::Issued::default();
    let mut seen = vec![false; plan.open.len()];
    let mut buf = vec![0u8; 1 << 20];
    for r in &plan.requests {
        if std::mem::replace(&mut seen[r.file], true) {
            continue;
        }
        let mut f = &plan.open[r.file];
        loop {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => done.bytes += n as u64,
                Err(e) => {
                    done.failed += 1;
                    done.first_error.get_or_insert(e.to_string());
                    break;
                }
            }
        }
        done.requests += 1;
    }
    done.elapsed = start.elapsed();
    done
}

fn exit_for_signal(signal: i32) -> ExitCode {
    ExitCode::from((128 + signal).clamp(0, 255) as u8)
}

fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        s => format!("signal {s}"),
    }
}
