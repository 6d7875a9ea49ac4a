//! `coldstart run`: mount a bundle in a temporary directory, run a command from it, unmount,
//! and report what the network did.
//!
//! The command refers to the mounted tree through `{root}`, replaced in every argument by the
//! mount point (`coldstart run URL -- {root}/bin/app --flag`); it also runs with the mount
//! point as its working directory and `COLDSTART_ROOT` set to it.
//!
//! The command runs in a process group of its own: SIGINT, SIGTERM and SIGHUP are forwarded
//! to all of it; half a second after the first, reads still waiting on the network fail (a
//! process stuck in one can then end); a second signal kills the group. When the command
//! ends, what it left running in its group is ended too (SIGTERM, then SIGKILL a second
//! later), and then the bundle is unmounted.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use coldstart_bundle::Cancel;

use super::common::network::{mount_with_bar, print_report, MountFlags};
use super::common::signals::{self, Signals};

/// How long after a signal reads still waiting on the network are failed.
const CANCEL_AFTER: Duration = Duration::from_millis(500);
/// How long what the command left running has to end on SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  coldstart run http://127.0.0.1:8080/ -- '{root}/bin/app' --version\n  \
    coldstart run http://bundles.example/app/ --strategy auto -- '{root}/bin/app'\n  \
    coldstart run /srv/bundles/app --record hot.json -- '{root}/bin/app'   (a hot list for pack)\n  \
    coldstart run https://bundles.example/app/ --ca-file ca.pem -- '{root}/bin/app'   (a private CA)\n  \
    coldstart run s3://my-bundles/app -- '{root}/bin/app'   (a private bucket: AWS_PROFILE or AWS_ACCESS_KEY_ID...)\n  \
    coldstart run http://127.0.0.1:8080/ --export-json r.json -- '{root}/bin/app'   (the report in a file)\n  \
    coldstart run http://127.0.0.1:8080/ --learn /var/tmp/learn/ -- '{root}/bin/app' --version   (what it read outside the hot set, for pack --learn-from)"
)]
pub struct Args {
    /// The bundle: `http[s]://HOST[:PORT]/PATH/[?QUERY]` (as printed by `coldstart serve`; a
    /// query, such as a signed URL's, follows each file's path), `s3://BUCKET/PREFIX` (signed
    /// with the AWS credentials of the environment: docs/network.md) or a directory.
    pub url: String,
    #[command(flatten)]
    pub flags: MountFlags,
    /// Also write the report as JSON to FILE (atomically): elapsed time, the command's exit
    /// status and the fetch statistics, apart from the command's own output.
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// The command; `{root}` in any argument is replaced by the mount point.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    if let Some(p) = &args.export_json {
        check_writable(p)?;
    }
    let cancel = Cancel::new();
    let mut opts = args.flags.options(cancel.clone())?;
    opts.learn = super::common::learn::drawn(&args.flags);
    // A signal while mounting stops every fetch at once.
    let signals = Signals::start(cancel.clone())?;
    let tmp = tempfile::Builder::new()
        .prefix("coldstart-run-")
        .tempdir()
        .context("cannot create a temporary mount point")?;
    let root = tmp.path().join("root");
    std::fs::create_dir(&root).with_context(|| format!("cannot create {}", root.display()))?;
    // If this process dies, its watchdog removes them (after unmounting).
    opts.remove_on_death = vec![root.clone(), tmp.path().to_path_buf()];
    let mount = match mount_with_bar(&args.url, &root, opts, &signals, "the command did not run")? {
        Ok(m) => m,
        Err(code) => return Ok(code),
    };
    signals.report_only();
    if let Some(c) = mount.choice() {
        eprintln!("coldstart: {}", c.summary());
    }
    let root_str = root.to_str().context("the temporary directory's path is not UTF-8")?;
    let argv: Vec<String> = args.command.iter().map(|a| a.replace("{root}", root_str)).collect();
    let command = coldstart_process::held::Spawner::command(&argv[0], &argv)
        .current_dir(&root)
        .env("COLDSTART_ROOT", &root);
    let interrupted = signals.first();
    let status = match interrupted {
        // A signal came while mounting, after the last fetch: the command does not start.
        Some(_) => None,
        None => Some(run_command(&mount, command, &signals, &cancel, &argv[0])),
    };
    // The start-up ends with the command; the unmount after it is timed apart.
    let startup = status.as_ref().is_some_and(|s| s.is_ok()).then(|| started.elapsed());
    let unmounting = Instant::now();
    let learner = super::common::learn::learner(&mount);
    let (report, result) = mount.close();
    let teardown = unmounting.elapsed();
    print_report(&report, args.flags.json)?;
    // The start completed when the command exited 0 and every read was served.
    let completed = report.errors == 0
        && result.is_ok()
        && matches!(&status, Some(Ok(ended)) if ended.status.success());
    super::common::learn::write(&args.flags, learner, completed);
    let export = |exit: Option<i32>, signal: Option<i32>| -> anyhow::Result<()> {
        let Some(p) = &args.export_json else { return Ok(()) };
        let json = serde_json::json!({
            "elapsed_ms": started.elapsed().as_secs_f64() * 1000.0,
            "startup_ms": startup.map(|d| d.as_secs_f64() * 1000.0),
            "teardown_ms": teardown.as_secs_f64() * 1000.0,
            "exit_status": exit,
            "signal": signal,
            "report": &report,
        });
        let bytes = serde_json::to_vec_pretty(&json)?;
        coldstart_layout::write_atomic(p, &bytes)
            .with_context(|| format!("cannot write --export-json {}", p.display()))
    };
    if status.as_ref().is_none_or(|s| s.is_err()) {
        // The command did not run (a signal, or it could not be started).
        export(None, signals.first())?;
    }
    if report.errors > 0 {
        eprintln!(
            "coldstart: {} reads failed with EIO; last: {}",
            report.errors,
            report.last_error.as_deref().unwrap_or("unknown")
        );
    }
    result?;
    let status = match status {
        None => {
            let s = interrupted.expect("only a signal keeps the command from starting");
            eprintln!("coldstart: {}: the command did not run", signals::name(s));
            return Ok(signals::exit_code(s));
        }
        Some(Ok(ended)) => ended,
        Some(Err(Failed::Wait(e))) => return Err(e),
        // A signal while it was being started: its exec's reads were failed on purpose.
        Some(Err(Failed::Start(_))) if signals.first().is_some() => {
            let s = signals.first().expect("checked");
            eprintln!(
                "coldstart: {} while `{}` was starting: it did not run",
                signals::name(s),
                argv[0]
            );
            return Ok(signals::exit_code(s));
        }
        Some(Err(Failed::Start(e))) if e.raw_os_error() == Some(libc::EIO) => {
            return Err(crate::exit::environment(format!(
                "cannot start `{}`: {e}: it could not be read from the bundle{}",
                argv[0],
                report.last_error.as_deref().map_or(String::new(), |l| format!(" ({l})"))
            )));
        }
        Some(Err(Failed::Start(e))) => {
            return Err(crate::exit::usage(format!(
                "cannot start `{}`: {e}: check the path (use {{root}}/... for the bundle's files)",
                argv[0]
            )));
        }
    };
    if report.opens == 0 && report.cache_hits + report.misses == 0 {
        eprintln!(
            "coldstart: warning: `{}` read nothing from the bundle: it ran what the host has, not \
             the bundle's program; name the bundle's files as {{root}}/... (e.g. {{root}}/bin/{})",
            argv[0],
            Path::new(&argv[0]).file_name().map_or(String::new(), |n| n.to_string_lossy().into())
        );
    }
    let Ended { status, signalled } = status;
    let code = match (status.code(), status.signal(), signalled) {
        (Some(c), _, _) => c,
        // Killed after a signal was forwarded (or by what its reads failing did to it): it
        // ended on that signal.
        (None, Some(_), Some(s)) => 128 + s,
        (None, Some(s), None) => 128 + s,
        _ => 1,
    };
    export(Some(code), signalled.or(status.signal()))?;
    if code != 0 {
        eprintln!("coldstart: `{}` failed: {status}", argv.join(" "));
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Refuses FILE before anything runs when its directory does not exist or is not a directory.
fn check_writable(p: &Path) -> anyhow::Result<()> {
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(crate::exit::usage(format!(
            "--export-json {}: {} is not a directory; create it or give another path",
            p.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// How the command ended: its status, and the signal forwarded to it, if one was.
struct Ended {
    status: std::process::ExitStatus,
    signalled: Option<i32>,
}

/// Why the command gave no exit status.
enum Failed {
    /// It could not be started (the error of `exec`).
    Start(std::io::Error),
    /// It could not be waited for.
    Wait(anyhow::Error),
}

/// The signals received while the command runs, and what they mean for it.
struct Interrupts<'a> {
    signals: &'a Signals,
    cancel: &'a Cancel,
    first: Option<(i32, Instant)>,
}

impl Interrupts<'_> {
    /// Waits a little for a signal: the first goes to the group (once it exists), a second
    /// kills it; half a second after the first, reads still waiting on the network fail.
    fn poll(&mut self, group: Option<&coldstart_lazyfs::Group>) {
        if let Some(s) = self.signals.next(Duration::from_millis(10)) {
            match (self.first, group) {
                (Some(_), Some(g)) => g.signal(libc::SIGKILL),
                (None, Some(g)) => g.signal(s),
                _ => {}
            }
            self.first.get_or_insert((s, Instant::now()));
        }
        if self.first.is_some_and(|(_, t)| t.elapsed() >= CANCEL_AFTER) {
            self.cancel.cancel();
        }
    }
}

/// Runs `cmd` on the mount in a process group of its own until it ends, forwarding signals
/// to the group; then ends what it left running in the group. Starting is done on a thread
/// of its own: an `exec` waiting on a read from the mount does not keep signals from being
/// handled (half a second after one, the read fails, and `exec` with it).
fn run_command(
    mount: &coldstart_lazyfs::Mount,
    command: coldstart_process::held::Spawner<'_>,
    signals: &Signals,
    cancel: &Cancel,
    name: &str,
) -> Result<Ended, Failed> {
    let mut interrupts = Interrupts { signals, cancel, first: None };
    let spawned = std::thread::scope(|scope| {
        let starting = scope.spawn(move || mount.spawn(command));
        while !starting.is_finished() {
            interrupts.poll(None);
        }
        starting.join().unwrap_or_else(|_| Err(std::io::Error::other("starting it panicked")))
    });
    let mut group = spawned.map_err(Failed::Start)?;
    // A signal that came while it was starting reaches it now.
    if let Some((s, _)) = interrupts.first {
        group.signal(s);
    }
    let status = loop {
        match group.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => interrupts.poll(Some(&group)),
            Err(e) => {
                let e = anyhow::Error::new(e).context("cannot wait for the command");
                return Err(Failed::Wait(e));
            }
        }
    };
    if group.end(GRACE) {
        eprintln!("coldstart: ended what `{name}` left running");
    }
    Ok(Ended { status, signalled: interrupts.first.map(|(s, _)| s) })
}
