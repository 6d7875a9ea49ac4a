//! The Linux executor against the real kernel: file discovery, cgroup life cycle, counters.
//! Needs root (cgroups, fanotify); each test skips with a message without it.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use coldstart_formats::measure::Outcome;
use coldstart_measure::launch::{Executor, LinuxExecutor, RunSpec};
use coldstart_ready::Ready;
use coldstart_testkit::{require, require_root};

/// The tests of this file run one at a time: one checks that no run cgroup of this process is
/// left, which another test's live run would contradict.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Root, then this file's lock; returns from the test where it cannot run.
macro_rules! root_and_serial {
    () => {
        if !require_root("cgroups, fanotify") {
            return;
        }
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    };
}

fn spec(argv: &[&str], ready: Ready, discover: bool) -> RunSpec {
    RunSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        cwd: None,
        ready,
        timeout: Duration::from_secs(20),
        discover_files: discover,
    }
}

fn run_cgroups_of_this_process() -> Vec<PathBuf> {
    let prefix = format!("run-{}-", std::process::id());
    let mut out = Vec::new();
    for h in ["memory", "cpuacct", "blkio", "freezer", "pids", "unified"] {
        let Ok(rd) = fs::read_dir(format!("/sys/fs/cgroup/{h}/coldstart")) else { continue };
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                out.push(e.path());
            }
        }
    }
    out
}

#[test]
fn discovery_finds_files_read_and_closed_as_well_as_mapped() {
    root_and_serial!();
    let dir = tempfile::tempdir().unwrap();
    let read_only = dir.path().join("config.txt");
    fs::write(&read_only, "x").unwrap();
    let mut exec = LinuxExecutor::new();
    let script = format!("cat {} > /dev/null", read_only.display());
    let out = exec.run(&spec(&["sh", "-c", &script], Ready::Exit, true)).unwrap();
    assert_eq!(out.outcome(), Outcome::Ready);
    // `cat` opened, read and closed it before exiting: only fanotify can see that.
    assert!(out.files.contains(&read_only), "{:?}", out.files);
    // The shell and cat themselves were executed.
    assert!(out.files.iter().any(|f| f.ends_with("cat")), "{:?}", out.files);
    // Files of processes outside the run are not listed.
    assert!(!out
        .files
        .iter()
        .any(|f| f.ends_with("coldstart") || f.to_string_lossy().contains("/target/")));
    let out = exec.run(&spec(&["true"], Ready::Exit, false)).unwrap();
    assert!(out.files.is_empty());
}

#[test]
fn each_run_gets_a_cgroup_that_is_removed_afterwards() {
    root_and_serial!();
    let mut exec = LinuxExecutor::new();
    assert!(exec.accounting() == "v1" || exec.accounting() == "v2");
    let out = exec
        .run(&spec(&["sh", "-c", "sleep 0.05 & cat /proc/self/cgroup"], Ready::Exit, false))
        .unwrap();
    assert_eq!(out.outcome(), Outcome::Ready);
    assert!(out.counters.minor_faults.unwrap() > 0);
    assert!(out.counters.peak_memory_bytes.unwrap() > 0);
    assert!(out.counters.user_s.unwrap() + out.counters.sys_s.unwrap() > 0.0);
    assert!(run_cgroups_of_this_process().is_empty(), "{:?}", run_cgroups_of_this_process());
}

#[test]
fn no_empty_parent_cgroup_is_left_when_the_executor_ends() {
    root_and_serial!();
    let mut exec = LinuxExecutor::new();
    exec.run(&spec(&["true"], Ready::Exit, false)).unwrap();
    drop(exec);
    for h in ["memory", "cpuacct", "blkio", "freezer", "pids", "unified"] {
        let parent = Path::new("/sys/fs/cgroup").join(h).join("coldstart");
        let Ok(rd) = fs::read_dir(&parent) else { continue };
        // Another coldstart on the machine may be measuring: its runs keep the parent.
        let runs: Vec<_> = rd
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !runs.is_empty() && runs.iter().all(|r| r.starts_with("run-")),
            "{} left behind holding {runs:?}",
            parent.display()
        );
    }
    // A new executor makes the parents again.
    let mut exec = LinuxExecutor::new();
    let out = exec.run(&spec(&["true"], Ready::Exit, false)).unwrap();
    assert_eq!(out.outcome(), Outcome::Ready);
}

#[test]
fn a_failing_command_is_reported_with_its_exit_code() {
    root_and_serial!();
    let mut exec = LinuxExecutor::new();
    let out = exec.run(&spec(&["sh", "-c", "exit 7"], Ready::Exit, false)).unwrap();
    assert_eq!(out.outcome(), Outcome::Failed { code: Some(7), signal: None });
}

#[test]
fn stale_run_cgroups_of_a_dead_coldstart_are_removed_at_start() {
    root_and_serial!();
    // A pid that is not alive: a reaped child's.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let _exec = LinuxExecutor::new(); // creates the parent directories
    let mut made = Vec::new();
    for h in ["memory", "cpuacct", "blkio"] {
        let d = Path::new("/sys/fs/cgroup").join(h).join("coldstart").join(format!("run-{dead}-1"));
        if Path::new("/sys/fs/cgroup").join(h).join("coldstart").is_dir()
            && fs::create_dir(&d).is_ok()
        {
            made.push(d);
        }
    }
    if !require(!made.is_empty(), "a cgroup v1 hierarchy to plant a stale cgroup in") {
        return;
    }
    let _ = LinuxExecutor::new();
    for d in &made {
        let exists = d.exists();
        if exists {
            let _ = fs::remove_dir(d);
        }
        assert!(!exists, "{} survived", d.display());
    }
}
