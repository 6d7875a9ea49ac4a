//! One cancellation model for every command (issue 28): `SIGINT` and `SIGTERM` sent to a
//! long-running command while it is in its long phase (its program started and sleeping, its
//! mount serving, its server listening) end it within a second, with exit code 130 or 143,
//! and leave nothing behind: no process of its program (in its process group, its cgroup or
//! under its working directory), no mount, no cgroup, no tracefs instance, no temporary file
//! beside its outputs.
//!
//! Each test is named after the command it guards, and sends both signals, each to a fresh
//! command.

mod common;
use common::faults::{scratch_with_tools, tools};
use common::Scratch;
use common::{cache_lock, leftovers, require_root};

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a command may take to end after the signal.
const WITHIN: Duration = Duration::from_secs(1);

/// The slow program: it sleeps for much longer than any test waits.
const SLOW: [&str; 3] = ["sh", "-c", "sleep 30; true"];

impl Scratch {
    fn join(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }

    /// `coldstart ARGS`, working in the scratch directory, in a process group of its own.
    fn coldstart(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_coldstart"));
        c.args(args)
            .current_dir(self.path())
            .env("TMPDIR", self.join("tmp"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(self.join("stdout")).unwrap())
            .stderr(std::fs::File::create(self.join("stderr")).unwrap())
            .process_group(0);
        c
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.join("stderr")).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(self.join("stdout")).unwrap_or_default()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        leftovers::clean(self.path());
    }
}

/// The processes named `comm` whose working directory is under `dir` (the program a command
/// started, which inherits the command's, or has a mount point under `TMPDIR`).
fn running(dir: &Path, comm: &str) -> Vec<u32> {
    let dir = dir.canonicalize().unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let cwd = std::fs::read_link(entry.path().join("cwd")).unwrap_or_default();
        if name.trim() == comm && cwd.starts_with(&dir) {
            found.push(pid);
        }
    }
    found
}

/// The processes of process group `pgid` (the command's own: it was started as its leader).
fn group_members(pgid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(") ") else { continue };
        let f: Vec<&str> = rest.split(' ').collect();
        if f.first().is_some_and(|s| *s == "Z") {
            continue;
        }
        if f.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) {
            found.push(format!("process {pid} ({})", stat.split(' ').nth(1).unwrap_or("?")));
        }
    }
    found
}

/// What the long phase of a command is, to wait for before the signal.
enum Phase {
    /// The slow program runs: a process of this name under the scratch directory.
    Program(&'static str),
    /// Standard error says this.
    Says(&'static str),
    /// Standard output says this.
    Prints(&'static str),
}

/// Starts `command` (made anew for each signal), waits until it is in its `phase`, sends
/// SIGINT (then, to a second command, SIGTERM), and checks that it ended within [`WITHIN`]
/// with 128 + the signal, leaving nothing behind.
fn ends_on_each_signal(what: &str, make: impl Fn(&Scratch) -> Command, phase: Phase) {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let d = Scratch::new();
        let mut child = make(&d).spawn().unwrap();
        wait_for_phase(&d, &mut child, &phase, what);
        // Well into the phase, not at its first instant.
        std::thread::sleep(Duration::from_millis(300));
        let pid = child.id();
        common::signal(pid, sig);
        let sent = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if sent.elapsed() > WITHIN * 5 {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = sent.elapsed();
        let name = if sig == libc::SIGINT { "SIGINT" } else { "SIGTERM" };
        let Some(status) = status else {
            panic!("{what}: still running {took:?} after {name}\nstderr: {}", d.stderr());
        };
        assert!(took <= WITHIN, "{what}: ended {took:?} after {name}\nstderr: {}", d.stderr());
        assert_eq!(
            status.code(),
            Some(128 + sig),
            "{what}: {status} after {name}\nstderr: {}",
            d.stderr()
        );
        println!("{what}: {name} -> exit {status} in {} ms", took.as_millis());
        let group = group_members(pid);
        assert!(group.is_empty(), "{what}, {name}: left in its process group: {group:#?}");
        let left = leftovers::after(d.path(), &[pid], Duration::from_millis(500));
        assert!(left.is_empty(), "{what}, {name}: left behind: {left:#?}");
    }
}

fn wait_for_phase(d: &Scratch, child: &mut Child, phase: &Phase, what: &str) {
    let t = Instant::now();
    loop {
        let there = match phase {
            Phase::Program(comm) => !running(d.path(), comm).is_empty(),
            Phase::Says(s) => d.stderr().contains(s),
            Phase::Prints(s) => d.stdout().contains(s),
        };
        if there {
            return;
        }
        if let Some(s) = child.try_wait().unwrap() {
            panic!("{what}: ended ({s}) before its long phase\nstderr: {}", d.stderr());
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: not in its long phase after 60 s\nstderr: {}", d.stderr());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `ARGS -- sh -c 'sleep 30; true'`.
fn on_slow(args: &[&'static str]) -> Vec<&'static str> {
    args.iter().copied().chain(["--"]).chain(SLOW).collect()
}

#[test]
fn measure_ends_on_a_signal_killing_its_run_and_removing_its_cgroup() {
    ends_on_each_signal(
        "measure --cache hot",
        |d| d.coldstart(&on_slow(&["measure", "--cache", "hot", "--runs", "1"])),
        Phase::Program("sleep"),
    );
}

#[test]
fn profile_ends_on_a_signal_killing_its_program_and_writing_nothing() {
    ends_on_each_signal(
        "profile",
        |d| d.coldstart(&on_slow(&["profile", "-o", "p.json"])),
        Phase::Program("sleep"),
    );
}

#[test]
fn timeline_ends_on_a_signal_killing_its_program_and_removing_its_tracing() {
    if !require_root("the timeline's tracing") {
        return;
    }
    ends_on_each_signal(
        "timeline",
        |d| d.coldstart(&on_slow(&["timeline", "-o", "t.json"])),
        Phase::Program("sleep"),
    );
}

#[test]
fn gate_ends_on_a_signal_under_one_handler_killing_its_run() {
    if !require_root("the gate's cold runs (dropping the page cache)") {
        return;
    }
    let _lock = cache_lock();
    ends_on_each_signal(
        "gate --update",
        |d| d.coldstart(&on_slow(&["gate", "--baseline", "b.json", "--update"])),
        Phase::Program("sleep"),
    );
}

/// The gate's page profiles ran under profile's handler, which replaced measure's for their
/// while (two cancellation models at once): a signal there must end the gate as anywhere else.
/// The program sleeps only while coldstart (its parent) has a tracefs instance: in a page
/// profile, not in the measured runs before it.
#[test]
fn gate_ends_on_a_signal_while_it_profiles_pages() {
    if !require_root("the gate's cold runs and page tracing") {
        return;
    }
    let _lock = cache_lock();
    let program = "[ -d /sys/kernel/tracing/instances/coldstart-$PPID ] && sleep 30; true";
    ends_on_each_signal(
        "gate --update, in a page profile",
        |d| {
            d.coldstart(&[
                "gate",
                "--baseline",
                "b.json",
                "--update",
                "--page-profiles",
                "1",
                "--",
                "sh",
                "-c",
                program,
            ])
        },
        Phase::Program("sleep"),
    );
}

#[test]
fn prefetch_record_ends_on_a_signal_killing_its_program_and_writing_nothing() {
    ends_on_each_signal(
        "prefetch record",
        |d| d.coldstart(&on_slow(&["prefetch", "record", "-o", "p.db"])),
        Phase::Program("sleep"),
    );
}

#[test]
fn launch_ends_on_a_signal_passing_it_to_its_command() {
    // `sleep` itself: a shell waiting for its command would outlive the signal until the
    // command ends.
    ends_on_each_signal(
        "launch",
        |d| d.coldstart(&["launch", "--prefetch", "missing.db", "--", "sleep", "30"]),
        Phase::Program("sleep"),
    );
}

#[test]
fn serve_ends_on_a_signal_closing_its_listener() {
    let d = Scratch::new();
    let t = tools(d.path());
    let bundle = t.bundle.to_str().unwrap().to_owned();
    ends_on_each_signal("serve", |s| s.coldstart(&["serve", &bundle]), Phase::Prints("http://"));
}

#[test]
fn mount_ends_on_a_signal_unmounting() {
    let Some((_d, t)) = scratch_with_tools("FUSE") else { return };
    let (_server, url) = common::serve(&t.bundle, &[]);
    ends_on_each_signal(
        "mount",
        |s| {
            std::fs::create_dir(s.join("mnt")).unwrap();
            s.coldstart(&["mount", &url, "mnt", "--cache-dir", "cache"])
        },
        Phase::Says("mounted"),
    );
}

#[test]
fn run_ends_on_a_signal_ending_its_command_and_unmounting() {
    let Some((_d, t)) = scratch_with_tools("FUSE") else { return };
    let (_server, url) = common::serve(&t.bundle, &[]);
    ends_on_each_signal(
        "run",
        |s| s.coldstart(&["run", &url, "--cache-dir", "cache", "--", "{root}/bin/nap", "30"]),
        Phase::Program("nap"),
    );
}

#[test]
fn experiment_ends_on_a_signal_unmounting_and_stopping_its_server() {
    let Some((_d, t)) = scratch_with_tools("FUSE") else { return };
    let app = t.app.to_str().unwrap().to_owned();
    ends_on_each_signal(
        "experiment",
        |s| {
            s.coldstart(&[
                "experiment",
                &app,
                "-o",
                "e.json",
                "--link",
                "100mbit/5ms",
                "--strategy",
                "original",
                "--cache",
                "warm-remote",
                "--runs",
                "1",
                "--",
                "bin/nap",
                "30",
            ])
        },
        Phase::Program("nap"),
    );
}
