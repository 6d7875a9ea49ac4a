//! `coldstart measure --storage` against the real kernel: a small C program's files on an
//! emulated hard disk (loop device, ext4, mount namespace, blkio/io.max throttle). Needs root;
//! skips with a message without it. Every test checks that no loop device, mount, session
//! directory or run cgroup of its coldstart process is left.

#[macro_use]
mod common;
use common::{cache_lock, require_root};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use coldstart_storage::find_leftovers;
use serde_json::Value;

const MIB: u64 = 1 << 20;
/// Bytes `data.bin` holds and the program reads with read(2).
const DATA_BYTES: u64 = 4 * MIB;
/// Pages of `map.bin` the program touches through a mapping, 1 MiB apart.
const MAP_TOUCHES: u64 = 8;

/// Reads all of `data.bin` next to its executable (found through /proc/self/exe), then maps
/// `map.bin` from the working directory and touches one byte per MiB. Exit code 11/12 when a
/// file is not found: the relative lookups must work on the emulated copy.
const PROG_C: &str = concat!(
    open_beside_exe_c!(),
    r#"
#include <sys/mman.h>
int main(void) {
  int fd = open_beside_exe("data.bin");
  static char buf[65536]; long total = 0; ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) > 0) total += r;
  close(fd);
  int m = open("map.bin", O_RDONLY); if (m < 0) return 12;
  volatile char *p = mmap(0, 8L << 20, PROT_READ, MAP_PRIVATE, m, 0);
  if (p == MAP_FAILED) return 14;
  long sum = 0;
  for (long off = 0; off < (8L << 20); off += 1L << 20) sum += p[off];
  (void)sum;
  return total == 4L * 1024 * 1024 ? 0 : 13;
}
"#
);

/// The program with its data in a temporary directory, and a work directory for the
/// emulation's session (so leftovers can be looked for there).
struct App {
    dir: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl App {
    fn new() -> App {
        // Under /var/tmp: a disk file system, as the emulation copies from it.
        let dir =
            tempfile::Builder::new().prefix("cs-storage-app-").tempdir_in("/var/tmp").unwrap();
        let work =
            tempfile::Builder::new().prefix("cs-storage-work-").tempdir_in("/var/tmp").unwrap();
        let src = dir.path().join("prog.c");
        fs::write(&src, PROG_C).unwrap();
        let out = Command::new("clang-19")
            .args(["-O1", "-o"])
            .arg(dir.path().join("prog"))
            .arg(&src)
            .output()
            .expect("clang-19");
        assert!(out.status.success(), "clang-19: {}", String::from_utf8_lossy(&out.stderr));
        // Incompressible, distinct content, so nothing is shared with other files' pages.
        let mut x = 0x2545_F491_4F6C_DD1D_u64;
        let mut noise = |len: u64| -> Vec<u8> {
            (0..len / 8)
                .flat_map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x.to_le_bytes()
                })
                .collect()
        };
        fs::write(dir.path().join("data.bin"), noise(DATA_BYTES)).unwrap();
        fs::write(dir.path().join("map.bin"), noise(8 * MIB)).unwrap();
        App { dir, work }
    }

    fn json(&self) -> PathBuf {
        self.work.path().join("report.json")
    }

    /// `--storage PROFILE --storage-dir WORK` (the work directory of this app), then `rest`.
    fn storage_args<'a>(&'a self, profile: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
        let work = self.work.path().to_str().unwrap();
        let mut args = vec!["--storage", profile, "--storage-dir", work];
        args.extend(rest);
        args
    }

    /// `coldstart measure ARGS -- ./prog` in the program's directory.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::cargo_bin("coldstart").unwrap();
        cmd.current_dir(self.dir.path())
            .arg("measure")
            .args(args)
            .arg("--export-json")
            .arg(self.json())
            .args(["--", "./prog"]);
        cmd
    }

    fn measure(&self, args: &[&str]) -> (Output, Value) {
        let child =
            self.command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        assert_nothing_left(pid, self.work.path());
        let report = fs::read_to_string(self.json())
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap_or(Value::Null);
        (out, report)
    }
}

/// No mount, loop device, session directory or scratch cgroup of the emulation, and no run
/// cgroup, of coldstart process `pid`.
fn assert_nothing_left(pid: u32, work: &Path) {
    let left: Vec<String> = find_leftovers(Some(work))
        .into_iter()
        .filter(|l| l.owner_pid == pid)
        .map(|l| l.to_string())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let prefix = format!("run-{pid}-");
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(PathBuf::from)
        .chain(fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten().map(|e| e.path()))
    {
        for e in fs::read_dir(root.join("coldstart")).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(!name.starts_with(&prefix), "run cgroup left: {}", e.path().display());
        }
    }
}

fn runs(report: &Value) -> Vec<&Value> {
    report["commands"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["runs"].as_array().unwrap())
        .collect()
}

fn median_wall(report: &Value) -> f64 {
    let mut w: Vec<f64> =
        runs(report).iter().map(|r| r["counters"]["wall_s"].as_f64().unwrap()).collect();
    w.sort_by(f64::total_cmp);
    w[w.len() / 2]
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "coldstart measure failed ({:?}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cold_start_on_an_emulated_hdd_is_throttled_with_the_profiles_read_ahead() {
    if !require_root("loop devices, mounts, cgroups") {
        return;
    }
    let _lock = cache_lock();
    let app = App::new();
    let (out, emulated) =
        app.measure(&app.storage_args("hdd", &["--cache", "cold", "--runs", "2", "--warmup", "0"]));
    ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Storage: emulated hdd"), "{stdout}");
    let st = &emulated["storage"];
    assert_eq!(st["profile"], "hdd");
    assert_eq!(st["read_iops"], 100);
    assert_eq!(st["readahead_kb"], 128);
    let copied: Vec<&str> =
        st["paths"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert!(copied.iter().any(|p| p.ends_with("/data.bin")), "{copied:?}");
    assert!(copied.iter().any(|p| p.ends_with("/prog")), "{copied:?}");

    // Every run counted: the program found data.bin next to its executable and map.bin in
    // its working directory, on the copy.
    let all = runs(&emulated);
    assert_eq!(all.len(), 2);
    for r in &all {
        assert!(r["excluded"].is_null(), "run excluded: {r}");
    }

    // Reads of at most 128 KiB (the profile's read-ahead) at 100 per second: data.bin takes
    // at least 32 of them, each touch of map.bin one more.
    let requests = DATA_BYTES / (128 * 1024) + MAP_TOUCHES;
    let lower_bound = requests as f64 / 100.0;
    for r in &all {
        let c = &r["counters"];
        let wall = c["wall_s"].as_f64().unwrap();
        assert!(
            wall >= 0.8 * lower_bound,
            "run took {wall} s, the throttle allows no less than {lower_bound} s"
        );
        // One major fault per touch of the mapping, each reading one read-ahead window around
        // the page: 128 KiB, not the host disk's (often several MiB).
        let faults = c["major_faults"].as_u64().unwrap();
        assert!(faults >= MAP_TOUCHES, "{faults} major faults for {MAP_TOUCHES} touches");
        let read = c["read_bytes"].as_u64().unwrap();
        // On top, the system libraries from the host's disk: few pages, unless the machine's
        // own page reclaim (DAMON) took some of them back; the host's read-ahead would read
        // 8 MiB windows, 64 MiB for the touches.
        let extra = read.saturating_sub(DATA_BYTES);
        assert!(
            (MAP_TOUCHES * 64 * 1024..=MAP_TOUCHES * 128 * 1024 + 4 * MIB).contains(&extra),
            "read {read} bytes: {extra} beyond data.bin for {MAP_TOUCHES} touches of 128 KiB windows"
        );
        // The emulated device's own count: at least one request per touch of the mapping
        // (each faults a window of its own); data.bin's `read`s may go in larger requests
        // than read-ahead windows, so at most the windows plus the other files' few reads.
        let on_device = c["storage_read_requests"].as_u64().unwrap();
        assert!(
            (MAP_TOUCHES..=requests + 64).contains(&on_device),
            "{on_device} requests to the device, expected {MAP_TOUCHES} to {requests} and a few"
        );
        // And its bytes: all of data.bin (read whole) and a window per touch of the mapping,
        // at most what the whole tree read.
        let device_bytes = c["storage_read_bytes"].as_u64().unwrap();
        assert!(
            (DATA_BYTES..=read).contains(&device_bytes),
            "{device_bytes} bytes read from the device, expected {DATA_BYTES} to {read}"
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("on the device (median):"), "{stdout}");

    // The same measurement on the host's disk is much faster.
    let (out, host) = app.measure(&["--cache", "cold", "--runs", "2", "--warmup", "0"]);
    ok(&out);
    assert!(host["storage"].is_null());
    assert!(runs(&host).iter().all(|r| r["counters"]["storage_read_requests"].is_null()));
    assert!(runs(&host).iter().all(|r| r["counters"]["storage_read_bytes"].is_null()));
    let (slow, fast) = (median_wall(&emulated), median_wall(&host));
    assert!(fast * 3.0 < slow, "host {fast} s vs emulated hdd {slow} s");
}

#[test]
fn custom_profile_is_parsed_and_exported_and_its_read_ahead_applies() {
    if !require_root("loop devices, mounts, cgroups") {
        return;
    }
    let _lock = cache_lock();
    let app = App::new();
    let (out, report) = app.measure(&app.storage_args(
        "custom:iops=500,bps=20m,readahead=512k",
        &[
            "--app-dir",
            app.dir.path().to_str().unwrap(),
            "--cache",
            "cold",
            "--runs",
            "1",
            "--warmup",
            "0",
        ],
    ));
    ok(&out);
    let st = &report["storage"];
    assert_eq!(st["profile"], "custom");
    assert_eq!(st["read_iops"], 500);
    assert_eq!(st["read_bps"], 20 * 1024 * 1024);
    assert_eq!(st["readahead_kb"], 512);
    assert_eq!(
        st["paths"][0].as_str().unwrap(),
        fs::canonicalize(app.dir.path()).unwrap().to_str().unwrap()
    );
    // Each touch of the mapping now reads a 512 KiB window.
    let read = runs(&report)[0]["counters"]["read_bytes"].as_u64().unwrap();
    assert!(
        read >= DATA_BYTES + MAP_TOUCHES * 384 * 1024,
        "read {read} bytes with 512 KiB read-ahead"
    );
}

#[test]
fn a_timed_out_run_and_an_interrupt_leave_nothing_behind() {
    if !require_root("loop devices, mounts, cgroups") {
        return;
    }
    let _lock = cache_lock();
    let app = App::new();
    // Every run needs ~0.4 s on the hdd profile: a 0.1 s timeout excludes them all.
    let (out, report) = app.measure(&app.storage_args(
        "hdd",
        &["--cache", "cold", "--runs", "1", "--warmup", "0", "--timeout", "0.1"],
    ));
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(runs(&report)[0]["excluded"].as_str().unwrap().contains("timeout"));

    // Ctrl-C while the runs go on.
    ctrl_c_mid_runs_leaves_nothing_behind(&app, "hdd");
}

/// `hdd-seek`: the reads are timed by the disk model (no cgroup limit), the report says which
/// model, and Ctrl-C in the middle of the runs takes down the disk's FUSE server with the rest.
#[test]
fn on_hdd_seek_the_disk_model_times_the_runs_and_ctrl_c_leaves_nothing_behind() {
    if !require_root("loop devices, mounts, FUSE, cgroups") {
        return;
    }
    let _lock = cache_lock();
    let app = App::new();
    let (out, report) = app.measure(
        &app.storage_args("hdd-seek", &["--cache", "cold", "--runs", "2", "--warmup", "0"]),
    );
    ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "Storage: emulated hdd-seek (8.5 ms average seek, 7200 rpm, 114.4 MiB/s, read-ahead 128 KiB)"
        ),
        "{stdout}"
    );
    let st = &report["storage"];
    assert_eq!(st["profile"], "hdd-seek");
    assert!(st["read_iops"].is_null() && st["host_read_iops"].is_null(), "{st}");
    assert_eq!(st["seek"]["average_seek_us"], 8500);
    // data.bin in line (35 ms at 120 MB/s) and each of the mapping's touches, 1 MiB apart, a
    // track away at least: 5 ms or more each. Unmodelled, the loop device reads this in a few ms.
    let least = 0.8 * (DATA_BYTES as f64 / 120e6 + MAP_TOUCHES as f64 * 0.005);
    for r in runs(&report) {
        assert!(r["excluded"].is_null(), "run excluded: {r}");
        let wall = r["counters"]["wall_s"].as_f64().unwrap();
        assert!(wall >= least, "run took {wall} s, the disk model allows no less than {least} s");
    }

    ctrl_c_mid_runs_leaves_nothing_behind(&app, "hdd-seek");
}

#[test]
fn without_root_storage_is_refused_with_exit_code_3_naming_the_privilege() {
    if !require_root("loop devices, mounts, cgroups") {
        return;
    }
    // Drop to `nobody` for the one command (setpriv is part of util-linux).
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(assert_cmd::cargo::cargo_bin("coldstart"))
        .args(["measure", "--storage", "hdd", "--", "/bin/true"])
        .current_dir("/")
        .output()
        .expect("setpriv");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("needs root") && err.contains("sudo") && err.contains("--storage"),
        "{err}"
    );
}

#[test]
fn a_bad_profile_is_a_usage_error() {
    let out = Command::cargo_bin("coldstart")
        .unwrap()
        .args(["measure", "--storage", "floppy", "--", "/bin/true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--storage") && err.contains("floppy") && err.contains("custom:"),
        "{err}"
    );
}

#[test]
fn warm_evicts_the_copy_so_the_run_reads_the_emulated_device_again() {
    if !require_root("loop devices, mounts, cgroups") {
        return;
    }
    let _lock = cache_lock();
    let app = App::new();
    // The warm-up run brings the copy into the cache; warm must evict the copy's pages (not
    // only the originals') for the measured run to wait for the throttled device again.
    let (out, report) =
        app.measure(&app.storage_args("hdd", &["--cache", "warm", "--runs", "1", "--warmup", "1"]));
    ok(&out);
    let run = runs(&report)[0];
    assert!(run["excluded"].is_null(), "{run}");
    assert_eq!(run["eviction"]["held"], true, "{run}");
    let lower_bound = (DATA_BYTES / (128 * 1024) + MAP_TOUCHES) as f64 / 100.0;
    let wall = run["counters"]["wall_s"].as_f64().unwrap();
    assert!(wall >= 0.8 * lower_bound, "warm run took {wall} s: the copy stayed cached");
}

/// Start `measure --storage PROFILE` for 100 cold runs, press Ctrl-C once the emulation is up
/// and a run or two more have gone, and check that it exits 130 leaving nothing behind.
fn ctrl_c_mid_runs_leaves_nothing_behind(app: &App, profile: &str) {
    let child = app
        .command(&app.storage_args(profile, &["--cache", "cold", "--runs", "100", "--warmup", "0"]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    // Wait until the emulation is up (its session directory exists), and a run or two more.
    while !fs::read_dir(app.work.path())
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("coldstart-storage-"))
    {
        assert!(start.elapsed() < Duration::from_secs(30), "no emulation started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(800));
    common::signal(pid, libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert_nothing_left(pid, app.work.path());
}
