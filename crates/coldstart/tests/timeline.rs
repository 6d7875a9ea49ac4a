//! `coldstart timeline` on the small sample program, cold: the phases name at least 90% of
//! the wall time, in the loader's order; the program's own files are named with their page
//! events; the start waited on I/O; the module touches come from a function profile; nothing
//! of the tracing is left behind. Needs root (tracefs, uprobes, drop_caches).

mod common;
use common::{cache_lock, check, require, require_root};

use std::path::Path;
use std::process::Command;

use coldstart_results::{Document, Timeline};
use coldstart_sample::Config;

/// The small sample, built once for the tests that need it; `None` (the test skipped, or
/// failing where the suite must run whole) without root for `why` or the sample's tools.
fn small_sample(why: &str) -> Option<coldstart_sample::Sample> {
    if !require_root(why)
        || !require(
            coldstart_sample::check_tools().is_ok(),
            "the sample's tools (clang-19, lld-19)",
        )
    {
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("coldstart-measure-sample-small");
    Some(coldstart_sample::build_cached(&Config::default(), &dir).expect("build the small sample"))
}

#[test]
fn a_cold_start_of_the_sample_is_accounted_for_in_named_phases() {
    let Some(sample) = small_sample("tracefs, uprobes and drop_caches") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.json");
    let _lock = cache_lock();
    let w = sample.workload("a").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .args(["timeline", "-o"])
        .arg(&out)
        .arg("--")
        .arg(sample.exe())
        .args(&w.args)
        .output()
        .unwrap();
    let printed = check(&child);
    let t = Timeline::read(&out).unwrap();
    assert!(
        t.named_share() >= 0.9,
        "named phases cover {:.0}%: {printed}",
        t.named_share() * 100.0
    );
    let names: Vec<&str> = t.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["exec", "loader", "relocation", "constructors", "main"], "{printed}");
    for w in t.phases.windows(2) {
        assert!(w[0].end_s <= w[1].start_s + 1e-9, "phases in order: {:?}", t.phases);
    }
    for own in [sample.exe(), sample.dir.join("libcs_a.so"), sample.dir.join("data/table.bin")] {
        let own = own.canonicalize().unwrap().display().to_string();
        let i = t
            .files
            .iter()
            .position(|f| f.path == own)
            .unwrap_or_else(|| panic!("{own} not named: {printed}"));
        assert!(t.events.iter().any(|e| e.file == i), "no page event of {own}");
    }
    assert!(
        t.io_wait_wall_s > 0.0 && t.io_wait_wall_s <= t.wall_s,
        "a cold start waits: {printed}"
    );
    assert!(!t.block.is_empty(), "a cold start issues block requests");
    let exe = sample.exe().canonicalize().unwrap().display().to_string();
    let span = t.modules.iter().find(|m| m.path == exe).expect("the executable's function touches");
    let main = t.phases.iter().find(|p| p.name == "main").unwrap();
    assert!(
        span.first_s <= main.start_s + 0.25 * t.wall_s && span.last_s <= t.wall_s + 1e-9,
        "{span:?} {main:?}"
    );
    // Nothing of the tracing stays: instances, uprobes.
    let instances: Vec<String> = std::fs::read_dir("/sys/kernel/tracing/instances")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("coldstart-timeline-"))
        .collect();
    let uprobes = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
    let mine: Vec<&str> = uprobes.lines().filter(|l| l.contains("coldstart_tl_")).collect();
    // Another timeline may run at the same time: only a dead owner's would be left behind.
    let dead = |pid: &str| !Path::new("/proc").join(pid).exists();
    assert!(
        instances
            .iter()
            .all(|n| !dead(n.trim_start_matches("coldstart-timeline-").trim_end_matches("-block"))),
        "{instances:?}"
    );
    let owner = |l: &str| {
        l.split("coldstart_tl_").nth(1).and_then(|r| r.split('/').next()).unwrap_or("").to_owned()
    };
    assert!(mine.iter().all(|l| !dead(&owner(l))), "uprobes left: {mine:?}");
}

/// `--storage hdd`: the traced run reads the program's files from the emulated device (its
/// block requests go to a loop device), and the device, its mount and its cgroup are gone
/// afterwards.
#[test]
fn a_timeline_on_emulated_storage_reads_from_the_device_and_leaves_nothing() {
    let Some(sample) = small_sample("tracefs, uprobes, loop devices and cgroups") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.json");
    let _lock = cache_lock();
    let w = sample.workload("a").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .args(["timeline", "--no-functions", "--storage", "hdd", "-o"])
        .arg(&out)
        .arg("--")
        .arg(sample.exe())
        .args(&w.args)
        .output()
        .unwrap();
    let printed = check(&child);
    let t = Timeline::read(&out).unwrap();
    assert_eq!(t.storage.as_deref(), Some("hdd"), "the result names its emulated storage");
    let loop_major = std::fs::read_to_string("/proc/devices")
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_suffix(" loop").and_then(|m| m.trim().parse::<u32>().ok()))
        .expect("loop devices");
    let on_loop =
        |dev: &str| dev.split(':').next().and_then(|m| m.parse().ok()) == Some(loop_major);
    assert!(
        t.block.iter().any(|b| !b.write && on_loop(&b.dev)),
        "no read of a loop device: {:?}\n{printed}",
        t.block.iter().map(|b| &b.dev).collect::<std::collections::BTreeSet<_>>()
    );
    assert!(t.io_wait_wall_s > 0.0, "{printed}");
    let left: Vec<_> = coldstart_storage::find_leftovers(Some(Path::new("/var/tmp")))
        .into_iter()
        .filter(|l| l.stale)
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A program found in PATH under `--storage` without `--app-dir`: its own files, found as
/// `measure --storage` finds them, go onto the device (its directory would be all of
/// /usr/bin). This was refused with a hint to name `--app-dir`.
#[test]
fn a_timeline_on_emulated_storage_of_a_program_in_path_copies_its_own_files() {
    let Some(sample) = small_sample("tracefs, uprobes, loop devices and cgroups") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.json");
    let _lock = cache_lock();
    let w = sample.workload("a").unwrap();
    let exe = sample.exe();
    let path = format!(
        "{}:{}",
        exe.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .args(["timeline", "--no-functions", "--storage", "nvme", "-o"])
        .arg(&out)
        .arg("--")
        .arg(exe.file_name().unwrap())
        .args(&w.args)
        .env("PATH", path)
        .output()
        .unwrap();
    let printed = check(&child);
    let t = Timeline::read(&out).unwrap();
    let loop_major = std::fs::read_to_string("/proc/devices")
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_suffix(" loop").and_then(|m| m.trim().parse::<u32>().ok()))
        .expect("loop devices");
    let on_loop =
        |dev: &str| dev.split(':').next().and_then(|m| m.parse().ok()) == Some(loop_major);
    let exe = std::fs::canonicalize(exe).unwrap().display().to_string();
    assert!(
        t.files.iter().any(|f| f.path == exe && on_loop(&f.dev)),
        "the executable was not read from the device: {:?}\n{printed}",
        t.files.iter().map(|f| (&f.path, &f.dev)).collect::<Vec<_>>()
    );
    assert!(t.io_wait_wall_s > 0.0, "{printed}");
    let left: Vec<_> = coldstart_storage::find_leftovers(Some(Path::new("/var/tmp")))
        .into_iter()
        .filter(|l| l.stale)
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A program started through a wrapper (a shell script that `exec`s it, as pyenv's shims and
/// many launchers do): the probes go on the program it executes, so `main` is found. They
/// were placed on the first file of the command, the script, and the phases after the loader
/// were one.
#[test]
fn a_timeline_through_a_wrapper_script_finds_the_executed_programs_main() {
    if !require_root("tracefs, uprobes and drop_caches")
        || !require(
            coldstart_sample::check_tools().is_ok(),
            "the sample's tools (clang-19, lld-19)",
        )
    {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("coldstart-measure-sample-small");
    let sample =
        coldstart_sample::build_cached(&Config::default(), &dir).expect("build the small sample");
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = tmp.path().join("launch");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec '{}' \"$@\"\n", sample.exe().display()))
        .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    let out = tmp.path().join("t.json");
    let _lock = cache_lock();
    let printed = check(
        &Command::new(env!("CARGO_BIN_EXE_coldstart"))
            .args(["timeline", "--no-functions", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&wrapper)
            .args(&sample.workload("a").unwrap().args)
            .output()
            .unwrap(),
    );
    let t = Timeline::read(&out).unwrap();
    let names: Vec<&str> = t.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["wrapper", "exec", "loader", "relocation", "constructors", "main"],
        "{printed}\n{:?}",
        t.warnings
    );
}
