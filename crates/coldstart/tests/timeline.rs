//! `coldstart timeline` on the small sample program, cold: the phases name at least 90% of
//! the wall time, in the loader's order; the program's own files are named with their page
//! events; the start waited on I/O; the module touches come from a function profile; nothing
//! of the tracing is left behind, and tracefs is mounted for it where it is missing and
//! unmounted after. Needs root (tracefs, uprobes, drop_caches).

mod common;
use common::{cache_lock, check, require, require_root};

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use coldstart_formats::{Document, Timeline};
use coldstart_sample::{Config, Sample};
use coldstart_sys::tracefs::{Mount, Tracefs};

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

/// `coldstart timeline FLAGS -o T.json -- PROGRAM ARGS`, with the arguments of the sample's
/// workload `a` and `env` set; asserts it succeeded and returns what it printed and the
/// timeline.
fn timeline(
    sample: &Sample,
    flags: &[&str],
    program: impl AsRef<OsStr>,
    env: &[(&str, String)],
) -> (String, Timeline) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.json");
    let printed = check(
        &Command::new(env!("CARGO_BIN_EXE_coldstart"))
            .arg("timeline")
            .args(flags)
            .arg("-o")
            .arg(&out)
            .arg("--")
            .arg(program)
            .args(&sample.workload("a").unwrap().args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap(),
    );
    (printed, Timeline::read(&out).unwrap())
}

/// Whether the block device `dev` (`MAJOR:MINOR`) is a loop device.
fn is_loop_device(dev: &str) -> bool {
    let loop_major = std::fs::read_to_string("/proc/devices")
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_suffix(" loop").and_then(|m| m.trim().parse::<u32>().ok()))
        .expect("loop devices");
    dev.split(':').next().and_then(|m| m.parse().ok()) == Some(loop_major)
}

/// Asserts that nothing of an emulated storage (device, mount, cgroup) of a coldstart no
/// longer alive is left behind.
fn assert_no_storage_left() {
    let left: Vec<_> = coldstart_storage::find_leftovers(Some(Path::new("/var/tmp")))
        .into_iter()
        .filter(|l| l.stale)
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_cold_start_of_the_sample_is_accounted_for_in_named_phases() {
    let Some(sample) = small_sample("tracefs, uprobes and drop_caches") else { return };
    let _lock = cache_lock();
    let (printed, t) = timeline(&sample, &[], sample.exe(), &[]);
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
    // Nothing of the tracing stays: instances, uprobes (seen where tracefs is mounted).
    let tracefs = Tracefs::hold(Mount::IfMissing).unwrap();
    let instances: Vec<String> = std::fs::read_dir(tracefs.path("instances"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("coldstart-timeline-"))
        .collect();
    let uprobes = std::fs::read_to_string(tracefs.path("uprobe_events")).unwrap_or_default();
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
    let _lock = cache_lock();
    let flags = ["--no-functions", "--storage", "hdd"];
    let (printed, t) = timeline(&sample, &flags, sample.exe(), &[]);
    assert_eq!(t.storage.as_deref(), Some("hdd"), "the result names its emulated storage");
    assert!(
        t.block.iter().any(|b| !b.write && is_loop_device(&b.dev)),
        "no read of a loop device: {:?}\n{printed}",
        t.block.iter().map(|b| &b.dev).collect::<std::collections::BTreeSet<_>>()
    );
    assert!(t.io_wait_wall_s > 0.0, "{printed}");
    assert_no_storage_left();
}

/// A program found in PATH under `--storage` without `--app-dir`: its own files, found as
/// `measure --storage` finds them, go onto the device (its directory would be all of
/// /usr/bin). This was refused with a hint to name `--app-dir`.
#[test]
fn a_timeline_on_emulated_storage_of_a_program_in_path_copies_its_own_files() {
    let Some(sample) = small_sample("tracefs, uprobes, loop devices and cgroups") else { return };
    let _lock = cache_lock();
    let exe = sample.exe();
    let path = format!(
        "{}:{}",
        exe.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let flags = ["--no-functions", "--storage", "nvme"];
    let (printed, t) = timeline(&sample, &flags, exe.file_name().unwrap(), &[("PATH", path)]);
    let exe = std::fs::canonicalize(exe).unwrap().display().to_string();
    assert!(
        t.files.iter().any(|f| f.path == exe && is_loop_device(&f.dev)),
        "the executable was not read from the device: {:?}\n{printed}",
        t.files.iter().map(|f| (&f.path, &f.dev)).collect::<Vec<_>>()
    );
    assert!(t.io_wait_wall_s > 0.0, "{printed}");
    assert_no_storage_left();
}

/// A program started through a wrapper (a shell script that `exec`s it, as pyenv's shims and
/// many launchers do): the probes go on the program it executes, so `main` is found. They
/// were placed on the first file of the command, the script, and the phases after the loader
/// were one.
#[test]
fn a_timeline_through_a_wrapper_script_finds_the_executed_programs_main() {
    let Some(sample) = small_sample("tracefs, uprobes and drop_caches") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = tmp.path().join("launch");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec '{}' \"$@\"\n", sample.exe().display()))
        .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    let _lock = cache_lock();
    let (printed, t) = timeline(&sample, &["--no-functions"], &wrapper, &[]);
    let names: Vec<&str> = t.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["wrapper", "exec", "loader", "relocation", "constructors", "main"],
        "{printed}\n{:?}",
        t.warnings
    );
}

/// Runs `script` (sh, with `$CS` the coldstart binary and `$1`... `args`) in a private mount
/// namespace where tracefs is not mounted, as on a machine nobody prepared (the host's mounts
/// are untouched); after it, says what is mounted on /sys/kernel/tracing (`mounted: LINE`),
/// then mounts tracefs to list what the coldstart of pid `$pid` left in it (`left: WHAT`):
/// instances and uprobes outlive an unmount.
fn in_fresh_namespace(script: &str, args: &[&std::ffi::OsStr]) -> String {
    let script = format!(
        r#"while mountpoint -q /sys/kernel/tracing; do umount -l /sys/kernel/tracing || exit 99; done
{script}
grep ' /sys/kernel/tracing ' /proc/self/mountinfo | sed 's/^/mounted: /'
mount -t tracefs nodev /sys/kernel/tracing || exit 98
ls /sys/kernel/tracing/instances | grep "^coldstart-timeline-$pid" | sed 's/^/left: instance /'
grep "coldstart_tl_$pid/" /sys/kernel/tracing/uprobe_events | sed 's/^/left: uprobe /'
exit 0"#
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c", &script, "sh"])
        .args(args)
        .env("CS", env!("CARGO_BIN_EXE_coldstart"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    text
}

/// On a machine where tracefs is not mounted the timeline mounts it (`profile --pages` did;
/// the timeline failed: "tracefs is not mounted"), and unmounts it when done, after its two
/// instances and its uprobes are removed.
#[test]
fn a_timeline_where_tracefs_is_not_mounted_mounts_it_and_unmounts_it_after() {
    let Some(sample) = small_sample("a mount namespace, tracefs, uprobes, drop_caches") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.json");
    let _lock = cache_lock();
    let w = sample.workload("a").unwrap();
    let exe = sample.exe();
    let mut args = vec![out.as_os_str(), exe.as_os_str()];
    args.extend(w.args.iter().map(std::ffi::OsStr::new));
    let text = in_fresh_namespace(
        r#"out=$1; shift; "$CS" timeline -o "$out" -- "$@" & pid=$!; wait $pid; echo "rc=$?""#,
        &args,
    );
    assert!(text.contains("rc=0"), "{text}");
    let t = Timeline::read(&out).unwrap();
    let names: Vec<&str> = t.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["exec", "loader", "relocation", "constructors", "main"], "{text}");
    assert!(!text.contains("mounted: "), "tracefs left mounted:\n{text}");
    assert!(!text.contains("left: "), "{text}");
}

/// SIGINT or SIGTERM while the timeline traces: the program is killed, the instances and
/// uprobes are removed, tracefs (mounted by the timeline) is unmounted, and the exit status
/// says the signal. The timeline died of the signal with the program and the instances left.
#[test]
fn an_interrupted_timeline_leaves_no_tracing_no_mount_and_no_program() {
    if !require_root("a mount namespace, tracefs and uprobes") {
        return;
    }
    for (signal, number) in [("INT", libc::SIGINT), ("TERM", libc::SIGTERM)] {
        let text = in_fresh_namespace(
            r#""$CS" timeline --no-functions -- sh -c 'sleep 29.75' & pid=$!
i=0
until [ -d /sys/kernel/tracing/instances/coldstart-timeline-$pid ] || [ $i -gt 400 ]; do
  sleep 0.05; i=$((i + 1))
done
sleep 0.5
kill -s "$1" $pid; wait $pid; echo "rc=$?"
pgrep -f 'sleep 29[.]75' | grep -vx "$$" | sed 's/^/left: program /'"#,
            &[std::ffi::OsStr::new(signal)],
        );
        assert!(text.contains(&format!("rc={}", 128 + number)), "SIG{signal}: {text}");
        assert!(text.contains(&format!("interrupted by SIG{signal}")), "SIG{signal}: {text}");
        assert!(!text.contains("mounted: "), "SIG{signal}: tracefs left mounted:\n{text}");
        assert!(!text.contains("left: "), "SIG{signal}: {text}");
    }
}
