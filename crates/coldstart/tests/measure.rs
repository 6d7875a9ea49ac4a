//! `coldstart measure` against the real kernel: cgroups, the page cache, readiness signals,
//! Xvfb. Most tests need root (cgroups, drop_caches, fanotify) and skip with a message
//! without it. Tests that touch the page cache hold a lock file so they do not drop each
//! other's caches mid-run.

mod common;
use common::{
    assert_hot, cache_lock, measure_report, require_program, require_root, CacheLock, KillOnDrop,
};

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

/// Compile a C program with clang-19 into `dir`.
fn compile(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    let out = Command::new("clang-19")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("clang-19");
    assert!(out.status.success(), "clang-19 failed: {}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// A program that maps the file in argv[1] and reads one byte of every page. With a second
/// argument `child` it does that in a forked child, signals readiness through
/// COLDSTART_READY_FD from the child, and both then sleep (the tree stays alive at readiness).
const TOUCH_C: &str = r#"
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
static unsigned long touch(const char *path) {
  int fd = open(path, O_RDONLY); struct stat st; fstat(fd, &st);
  volatile unsigned char *p = mmap(0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  unsigned long sum = 0;
  for (off_t i = 0; i < st.st_size; i += 4096) sum += p[i];
  return sum;
}
int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[2], "child") == 0) {
    if (fork() == 0) {
      touch(argv[1]);
      const char *fd = getenv("COLDSTART_READY_FD");
      if (fd) write(atoi(fd), "r", 1);
      for (;;) pause();
    }
    for (;;) pause();
  }
  if (argc > 2 && strcmp(argv[2], "hold") == 0) {
    touch(argv[1]);
    write(1, "held\n", 5);
    for (;;) pause();
  }
  if (argc > 2 && strcmp(argv[2], "linger") == 0) {
    touch(argv[1]);
    usleep(20000);
    return 0;
  }
  return touch(argv[1]) == 12345 ? 1 : 0;
}
"#;

/// Stops an Xvfb on drop: SIGTERM so it removes its socket and lock file, and removes them
/// itself if the server had to be killed.
struct Xvfb(u32, Child);

impl Drop for Xvfb {
    fn drop(&mut self) {
        // Never a panic in a drop: the server is killed below if this did not end it.
        let _ = common::try_signal(self.1.id(), libc::SIGTERM);
        let start = Instant::now();
        while self.1.try_wait().ok().flatten().is_none() {
            if start.elapsed() > Duration::from_secs(3) {
                let _ = self.1.kill();
                let _ = self.1.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = fs::remove_file(format!("/tmp/.X11-unix/X{}", self.0));
        let _ = fs::remove_file(format!("/tmp/.X{}-lock", self.0));
    }
}

/// `coldstart ARGS` as user and group 65534 (nobody); needs root to start.
fn as_nobody<const N: usize>(args: [&str; N]) -> Command {
    let mut cmd = Command::cargo_bin("coldstart").unwrap();
    cmd.args(args).uid(65534).gid(65534);
    cmd
}

struct Measured {
    code: i32,
    /// The table, which ends with the warnings.
    stdout: String,
    stderr: String,
    json: Value,
}

fn measure(args: &[&str], cmd: &[&str], dir: &Path) -> Measured {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let (out, json) = measure_report(args, &dir.join(format!("report-{n}.json")), cmd);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    Measured { code: out.status.code().unwrap_or(-1), stdout, stderr, json }
}

/// What the tests here need root for.
const ROOT_FOR: &str = "cgroups, drop_caches, fanotify";

/// The ground of a test that measures `touch` (TOUCH_C) reading a data file: the page-cache
/// lock, and the program and a data file in a temporary directory.
struct Touch {
    dir: tempfile::TempDir,
    exe: PathBuf,
    data: PathBuf,
    _lock: CacheLock,
}

impl Touch {
    /// With a data file of `mib` MiB; `None` (the test skips) without root.
    fn new(mib: usize) -> Option<Touch> {
        if !require_root(ROOT_FOR) {
            return None;
        }
        let _lock = cache_lock();
        let dir = tempfile::tempdir().unwrap();
        let exe = compile(dir.path(), "touch", TOUCH_C);
        let data = data_file(dir.path(), mib);
        Some(Touch { dir, exe, data, _lock })
    }

    /// `touch DATA EXTRA`.
    fn argv<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut argv = vec![self.exe.to_str().unwrap(), self.data.to_str().unwrap()];
        argv.extend(extra);
        argv
    }

    /// `coldstart measure ARGS -- touch DATA EXTRA`, its report in the directory.
    fn measure(&self, args: &[&str], extra: &[&str]) -> Measured {
        measure(args, &self.argv(extra), self.dir.path())
    }
}

fn runs(m: &Measured, command: usize) -> Vec<Value> {
    m.json["commands"][command]["runs"].as_array().cloned().unwrap_or_default()
}

fn counter(run: &Value, name: &str) -> u64 {
    run["counters"][name].as_u64().unwrap_or_else(|| panic!("no {name} in {run}"))
}

fn data_file(dir: &Path, mib: usize) -> PathBuf {
    let p = dir.join("data.bin");
    let mut bytes = vec![0u8; mib << 20];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i * 7 % 251) as u8;
    }
    fs::write(&p, bytes).unwrap();
    let f = fs::File::open(&p).unwrap();
    f.sync_all().unwrap();
    p
}

/// Live processes whose argv is exactly `argv`.
fn processes(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want) {
            out.push(pid);
        }
    }
    out
}

/// Run cgroups left behind by a coldstart that is no longer alive.
fn stale_run_cgroups() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for h in ["memory", "cpuacct", "blkio", "freezer", "pids", "unified"] {
        let Ok(rd) = fs::read_dir(format!("/sys/fs/cgroup/{h}/coldstart")) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("run-").and_then(|r| r.split('-').next()) {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    out.push(e.path());
                }
            }
        }
    }
    out
}

#[test]
fn cold_run_faults_and_reads_at_least_the_touched_file() {
    let Some(t) = Touch::new(4) else { return };
    let m = t.measure(&["--cache", "cold", "--runs", "2", "--warmup", "0"], &[]);
    assert_eq!(m.code, 0, "{}", m.stderr);
    let runs = runs(&m, 0);
    assert_eq!(runs.len(), 2);
    for r in &runs {
        assert!(r["excluded"].is_null(), "{r}");
        assert!(counter(r, "major_faults") > 0, "{r}");
        assert!(counter(r, "read_bytes") >= 4 << 20, "{r}");
        assert!(r["eviction"]["held"].as_bool().unwrap(), "{r}");
    }
}

#[test]
fn hot_run_has_no_major_faults_and_reads_nothing() {
    let Some(t) = Touch::new(4) else { return };
    let m = t.measure(&["--cache", "hot", "--runs", "3"], &[]);
    assert_eq!(m.code, 0, "{}", m.stderr);
    for r in &runs(&m, 0) {
        assert_hot(&m.json, r);
        assert!(counter(r, "minor_faults") > 0, "{r}");
        assert!(r["eviction"].is_null());
    }
}

/// The hot series holds what its warm-up cached: a reclaimer (here the program itself, which
/// asks the kernel to drop its data file's pages before reading it) cannot take those pages
/// between or during the runs, so no hot run reads (without the hold, every run read 4 MiB).
#[test]
fn a_hot_series_stays_hot_when_something_evicts_its_pages() {
    if !require_root("cgroups, drop_caches, fanotify, mlock") {
        return;
    }
    let _lock = cache_lock();
    let dir = tempfile::tempdir().unwrap();
    let data = data_file(dir.path(), 4);
    let script =
        format!("dd if={0} iflag=nocache count=0 status=none; cat {0} > /dev/null", data.display());
    let m = measure(&["--cache", "hot", "--runs", "3"], &["/bin/sh", "-c", &script], dir.path());
    assert_eq!(m.code, 0, "{}", m.stderr);
    let holds = m.json["resident_holds"].as_array().unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    assert_eq!(holds[0]["cache"], "hot");
    assert!(holds[0]["incomplete"].is_null(), "{holds:?}");
    assert!(holds[0]["bytes"].as_u64().unwrap() >= 4 << 20, "the data file is held: {holds:?}");
    for r in &runs(&m, 0) {
        assert_eq!(counter(r, "read_bytes"), 0, "{r}");
    }
}

/// Start `touch DATA hold` outside any measured tree: it maps the data file, reads every page
/// and keeps it mapped.
fn hold_in_background(exe: &Path, data: &Path) -> KillOnDrop {
    let mut holder =
        Command::new(exe).arg(data).arg("hold").stdout(Stdio::piped()).spawn().unwrap();
    let mut line = [0u8; 5];
    std::io::Read::read_exact(holder.stdout.as_mut().unwrap(), &mut line).unwrap();
    KillOnDrop(holder)
}

#[test]
fn eviction_verification_names_the_process_that_keeps_a_file_mapped() {
    let Some(t) = Touch::new(1) else { return };
    let holder = hold_in_background(&t.exe, &t.data);
    let m = t.measure(&["--cache", "selective", "--strict", "--runs", "2", "--warmup", "0"], &[]);
    // --strict: every run excluded, nothing counted, exit code 1.
    assert_eq!(m.code, 1, "{}", m.stderr);
    let pid = holder.0.id().to_string();
    for r in &runs(&m, 0) {
        let why = r["excluded"].as_str().expect("run excluded");
        assert!(
            why.contains("eviction did not hold") && why.contains(&format!("pid {pid}")),
            "{why}"
        );
        assert!(!r["eviction"]["held"].as_bool().unwrap());
    }
    assert!(
        m.stdout.contains(&format!("pid {pid} (touch)")) && m.stdout.contains("--strict"),
        "{}",
        m.stdout
    );
}

/// The issue's failure, reproduced: a process outside the measured tree (every shell maps the
/// gconv cache and the locale archive) maps a data file that the program also reads. Those
/// pages cannot leave the cache while it lives; cold runs must still be counted, with the held
/// pages reported beside the figures.
#[test]
fn cold_runs_count_when_another_process_maps_a_file_the_program_reads() {
    let Some(t) = Touch::new(1) else { return };
    let holder = hold_in_background(&t.exe, &t.data);
    let pid = holder.0.id();
    // `linger`: the program keeps the file mapped a moment after reading it, so that the
    // discovery run's samples see which pages it uses.
    let m = t.measure(&["--cache", "cold,hot", "--runs", "2", "--warmup", "0"], &["linger"]);
    assert_eq!(m.code, 0, "{}\n{}", m.stdout, m.stderr);
    assert_eq!(m.json["version"], 2);
    let data_pages = (1u64 << 20) / 4096;
    for r in &runs(&m, 0) {
        assert!(r["excluded"].is_null(), "{r}");
        // The data file's pages stayed, held by the background process, and are reported.
        let held = &r["held_by_others"];
        let file = held["by_file"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == t.data.to_str().unwrap())
            .unwrap_or_else(|| panic!("the data file is not among the held files: {held}"));
        assert_eq!(file["pages"], data_pages, "{held}");
        assert_eq!(file["own"], true, "{held}");
        // The program reads every page of it: all of them would have been read.
        assert_eq!(file["touched_pages"], data_pages, "{held}");
        assert!(held["pages"].as_u64().unwrap() >= data_pages, "{held}");
        assert!(held["holders"].as_array().unwrap().iter().any(|h| h["pid"] == pid), "{held}");
        assert_eq!(r["eviction"]["held_pages"], r["eviction"]["resident_pages_after"], "{r}");
        // The executable was evicted all the same: the run read it from storage.
        assert!(counter(r, "major_faults") > 0, "{r}");
    }
    assert!(m.stdout.contains("Stayed cached:"), "{}", m.stdout);
    assert!(m.stdout.contains(&format!("pid {pid} (touch)")), "{}", m.stdout);
    // --strict keeps the old rule.
    let strict =
        t.measure(&["--cache", "cold", "--strict", "--runs", "1", "--warmup", "0"], &["linger"]);
    assert_eq!(strict.code, 1, "{}", strict.stdout);
    assert!(runs(&strict, 0)[0]["excluded"].as_str().unwrap().contains("--strict"));
    drop(holder);
}

/// A script (`#!`) that runs the real program, by `exec` or as its child: the whole tree is
/// measured as typed, and the files of the program it runs are evicted and read back.
#[test]
fn a_wrapper_script_is_measured_with_the_program_it_runs() {
    let Some(t) = Touch::new(2) else { return };
    for (name, body) in [("exec-wrapper", "exec"), ("child-wrapper", "")] {
        let wrapper = t.dir.path().join(name);
        fs::write(&wrapper, format!("#!/bin/sh\n{body} \"$(dirname \"$0\")/touch\" \"$@\"\n"))
            .unwrap();
        fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let m = measure(
            &["--cache", "cold", "--runs", "2", "--warmup", "0"],
            &[wrapper.to_str().unwrap(), t.data.to_str().unwrap()],
            t.dir.path(),
        );
        assert_eq!(m.code, 0, "{name}: {}\n{}", m.stdout, m.stderr);
        for r in &runs(&m, 0) {
            assert!(r["excluded"].is_null(), "{name}: {r}");
            assert_eq!(r["outcome"]["kind"], "ready", "{name}: {r}");
            // The program behind the wrapper read its data from storage.
            assert!(counter(r, "read_bytes") >= 2 << 20, "{name}: {r}");
            assert!(counter(r, "major_faults") > 0, "{name}: {r}");
            // The wrapper, the program and its data are among the files evicted.
            assert!(r["eviction"]["files"].as_u64().unwrap() >= 3, "{name}: {r}");
        }
        assert!(processes(&t.argv(&[])).is_empty());
    }
}

#[test]
fn a_child_process_faults_are_counted_and_the_tree_is_killed() {
    let Some(t) = Touch::new(2) else { return };
    let m = t.measure(
        &["--cache", "cold", "--runs", "1", "--warmup", "0", "--ready", "fd", "--timeout", "20"],
        &["child"],
    );
    assert_eq!(m.code, 0, "{}", m.stderr);
    let r = &runs(&m, 0)[0];
    assert_eq!(r["outcome"]["kind"], "ready", "{r}");
    // The root only forks and sleeps: every major fault and byte read is the child's.
    assert!(counter(r, "major_faults") > 0, "{r}");
    assert!(counter(r, "read_bytes") >= 2 << 20, "{r}");
    assert!(processes(&t.argv(&["child"])).is_empty(), "the tree survived");
}

fn ready_run(ready: &str, cmd: &[&str], timeout: &str) -> (Measured, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let m = measure(
        &["--ready", ready, "--runs", "1", "--warmup", "0", "--timeout", timeout],
        cmd,
        dir.path(),
    );
    (m, dir)
}

fn assert_ready_quickly(m: &Measured, at_least_s: f64) {
    assert_eq!(m.code, 0, "{}", m.stderr);
    let r = &runs(m, 0)[0];
    assert_eq!(r["outcome"]["kind"], "ready", "{r}");
    let wall = r["counters"]["wall_s"].as_f64().unwrap();
    // The programs sleep for minutes after the signal: readiness, not exit, ended the run.
    assert!(wall >= at_least_s && wall < 10.0, "wall {wall}");
}

#[test]
fn ready_on_stdout_and_stderr_regex() {
    if !require_root(ROOT_FOR) {
        return;
    }
    // Durations unique to this test process, so that the same test running elsewhere on the
    // machine (another checkout, another CI job) cannot look like a survivor of this one.
    let (first, second) =
        (format!("300.{}", std::process::id()), format!("301.{}", std::process::id()));
    let (m, _d) = ready_run(
        "stdout:^listening on [0-9]+$",
        &["sh", "-c", &format!("sleep 0.05; echo listening on 80; exec sleep {first}")],
        "20",
    );
    assert_ready_quickly(&m, 0.05);
    let (m, _d) = ready_run(
        "stderr:ready",
        &["sh", "-c", &format!("echo noise; echo ready >&2; exec sleep {second}")],
        "20",
    );
    assert_ready_quickly(&m, 0.0);
    assert!(processes(&["sleep", &first]).is_empty() && processes(&["sleep", &second]).is_empty());
}

#[test]
fn output_is_drained_so_a_chatty_program_does_not_block() {
    if !require_root(ROOT_FOR) {
        return;
    }
    // 4 MiB of output before the marker: far more than a pipe buffer.
    let (m, _d) = ready_run(
        "stdout:^MARK$",
        &["sh", "-c", "head -c 4194304 /dev/zero | tr '\\0' 'x'; echo; echo MARK; exec sleep 302"],
        "20",
    );
    assert_ready_quickly(&m, 0.0);
}

#[test]
fn a_program_that_exits_before_its_signal_is_reported() {
    if !require_root(ROOT_FOR) {
        return;
    }
    let (m, _d) = ready_run("stdout:never", &["sh", "-c", "echo something else"], "20");
    assert_eq!(m.code, 1, "{}", m.stderr);
    let r = &runs(&m, 0)[0];
    assert_eq!(r["outcome"]["kind"], "exited_before_ready", "{r}");
    assert!(r["excluded"].as_str().unwrap().contains("exited before"));
}

#[test]
fn ready_on_file_and_fd() {
    if !require_root(ROOT_FOR) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("ready-flag");
    let script = format!("sleep 0.1; touch {}; exec sleep 303", flag.display());
    let (m, _d) = ready_run(&format!("file:{}", flag.display()), &["sh", "-c", &script], "20");
    assert_ready_quickly(&m, 0.1);
    let (m, _d) = ready_run(
        "fd",
        &["sh", "-c", "sleep 0.05; echo x >&$COLDSTART_READY_FD; exec sleep 304"],
        "20",
    );
    assert_ready_quickly(&m, 0.05);
}

const LISTEN_C: &str = r#"
#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char **argv) {
  usleep(100000);
  int s = socket(AF_INET, SOCK_STREAM, 0); int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {0}; a.sin_family = AF_INET; a.sin_port = htons(atoi(argv[1]));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 8)) return 1;
  for (;;) pause();
}
"#;

#[test]
fn ready_on_tcp_port() {
    if !require_root(ROOT_FOR) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path(), "listen", LISTEN_C);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let (m, _d) = ready_run(&format!("tcp:{port}"), &[exe.to_str().unwrap(), &port], "20");
    assert_ready_quickly(&m, 0.1);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).is_err(),
        "server survived"
    );
}

#[test]
fn ready_on_an_x11_window_under_xvfb() {
    if !require_root(ROOT_FOR) {
        return;
    }
    if !require_program("Xvfb", "xvfb") || !require_program("xmessage", "x11-utils") {
        return;
    }
    let display = (90..190)
        .find(|n| {
            !Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()
                && !Path::new(&format!("/tmp/.X{n}-lock")).exists()
        })
        .expect("a free X display");
    let xvfb = Xvfb(
        display,
        Command::new("Xvfb")
            .arg(format!(":{display}"))
            // No server reset when the last client disconnects.
            .args(["-noreset", "-nolisten", "tcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let socket = format!("/tmp/.X11-unix/X{display}");
    let start = Instant::now();
    while !Path::new(&socket).exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "Xvfb did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = Command::cargo_bin("coldstart")
        .unwrap()
        .env("DISPLAY", format!(":{display}"))
        .args([
            "measure",
            "--ready",
            "window:^coldstart-test$",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--timeout",
            "20",
        ])
        .arg("--export-json")
        .arg(&json)
        .args(["--", "xmessage", "-title", "coldstart-test", "hello"])
        .output()
        .unwrap();
    drop(xvfb);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    for r in report["commands"][0]["runs"].as_array().unwrap() {
        assert_eq!(r["outcome"]["kind"], "ready", "{r}");
        assert!(r["counters"]["wall_s"].as_f64().unwrap() < 10.0);
    }
    assert!(
        processes(&["xmessage", "-title", "coldstart-test", "hello"]).is_empty(),
        "xmessage survived"
    );
}

#[test]
fn a_hanging_program_is_killed_on_timeout_and_nothing_remains() {
    if !require_root(ROOT_FOR) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A tree: a shell with a background child and a foreground sleep, never ready.
    let m = measure(
        &[
            "--ready",
            "file:/nonexistent/coldstart",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--timeout",
            "0.3",
        ],
        &["sh", "-c", "sleep 917 & sleep 918"],
        dir.path(),
    );
    assert_eq!(m.code, 1, "{}", m.stderr);
    for r in &runs(&m, 0) {
        assert_eq!(r["outcome"]["kind"], "timeout", "{r}");
        assert!(r["excluded"].as_str().unwrap().contains("timeout"));
        let wall = r["counters"]["wall_s"].as_f64().unwrap();
        assert!((0.3..5.0).contains(&wall), "{wall}");
    }
    assert!(
        processes(&["sleep", "917"]).is_empty() && processes(&["sleep", "918"]).is_empty(),
        "the tree survived"
    );
    assert!(stale_run_cgroups().is_empty(), "{:?}", stale_run_cgroups());
}

#[test]
fn interrupting_coldstart_kills_the_current_run() {
    if !require_root(ROOT_FOR) {
        return;
    }
    for (signal, code, marker) in [(libc::SIGINT, 130, "919"), (libc::SIGTERM, 143, "921")] {
        let script = format!("sleep {marker} & sleep 9{marker}");
        let mut child = Command::cargo_bin("coldstart")
            .unwrap()
            .args(["measure", "--ready", "file:/nonexistent/x", "--runs", "1", "--timeout", "60"])
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let inner = format!("9{marker}");
        let start = Instant::now();
        while processes(&["sleep", &inner]).is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "the run did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        common::signal(child.id(), signal);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code));
        assert!(
            processes(&["sleep", marker]).is_empty() && processes(&["sleep", &inner]).is_empty()
        );
        assert!(stale_run_cgroups().is_empty(), "{:?}", stale_run_cgroups());
    }
}

#[test]
fn bad_commands_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (cmd, reason) in [
        (vec!["coldstart-no-such-program"], "not found"),
        (vec![dir.path().to_str().unwrap()], "is a directory"),
        (vec![], "no command"),
        (vec!["true", ":::", "true"], "--compare"),
        (vec!["python3 -c pass"], "without a shell"),
    ] {
        let out = Command::cargo_bin("coldstart")
            .unwrap()
            .args(["measure", "--"])
            .args(&cmd)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(reason), "{err}");
    }
    let out = Command::cargo_bin("coldstart")
        .unwrap()
        .args(["measure", "--ready", "tcp:x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A window signal without a display says so, and what to start, before any run.
    let out = Command::cargo_bin("coldstart")
        .unwrap()
        .env_remove("DISPLAY")
        .args(["measure", "--ready", "window:x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("DISPLAY") && err.contains("Xvfb"), "{err}");
}

#[test]
fn cold_without_root_names_the_privilege_and_offers_selective() {
    if !require_root(ROOT_FOR) {
        return;
    } // to become another user
    let out = as_nobody(["measure", "--cache", "cold", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("CAP_SYS_ADMIN") && err.contains("--cache selective"), "{err}");
}

#[test]
fn hot_works_without_root_with_a_warning() {
    if !require_root(ROOT_FOR) {
        return;
    } // to become another user
    let out = as_nobody(["measure", "--runs", "2", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("Warning:") && table.contains("rusage"), "{table}");
}

#[test]
fn comparison_runs_both_commands() {
    if !require_root(ROOT_FOR) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let m = measure(
        &["--compare", "--runs", "3"],
        &["true", ":::", "sh", "-c", "sleep 0.02"],
        dir.path(),
    );
    assert_eq!(m.code, 0, "{}", m.stderr);
    assert_eq!(runs(&m, 0).len(), 3);
    assert_eq!(runs(&m, 1).len(), 3);
    let c = &m.json["comparison"];
    assert!(c["ratio"].as_f64().unwrap() > 1.0, "{c}");
}

#[test]
fn cold_and_hot_together_report_the_io_share_and_every_export() {
    let Some(t) = Touch::new(2) else { return };
    let (csv, md) = (t.dir.path().join("r.csv"), t.dir.path().join("r.md"));
    let m = t.measure(
        &[
            "--cache",
            "cold,hot",
            "--runs",
            "2",
            "--export-csv",
            csv.to_str().unwrap(),
            "--export-markdown",
            md.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(m.code, 0, "{}", m.stderr);
    assert_eq!(m.json["cache"], "cold,hot");
    let labels: Vec<&str> = m.json["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["cold", "hot"]);
    assert!(counter(&runs(&m, 0)[0], "read_bytes") >= 2 << 20);
    assert_hot(&m.json, &runs(&m, 1)[0]);
    let share = &m.json["io_share"][0];
    assert_eq!(share["cache"], "cold");
    let (cold, hot, io) = (
        share["cold_median_s"].as_f64().unwrap(),
        share["hot_median_s"].as_f64().unwrap(),
        share["io_s"].as_f64().unwrap(),
    );
    assert!((cold - hot - io).abs() < 1e-12);
    assert!(fs::metadata(&csv).unwrap().len() > 0 && fs::metadata(&md).unwrap().len() > 0);
    // Written atomically: no temporary file left beside them.
    assert_eq!(
        fs::read_dir(t.dir.path()).unwrap().count(),
        6,
        "{:?}",
        fs::read_dir(t.dir.path()).unwrap().collect::<Vec<_>>()
    );
}

#[test]
fn selective_without_root_discovers_and_evicts_the_program_files() {
    // Root, to become another user.
    let Some(t) = Touch::new(2) else { return };
    // Another user's files: theirs to evict and verify.
    for p in [t.dir.path(), t.exe.as_path(), t.data.as_path()] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    let json = t.dir.path().join("r.json");
    let out = as_nobody(["measure", "--cache", "selective", "--runs", "2", "--export-json"])
        .arg(&json)
        .arg("--")
        .args(t.argv(&["linger"]))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let report: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["environment"]["cgroup"], "rusage");
    for r in report["commands"][0]["runs"].as_array().unwrap() {
        assert!(r["excluded"].is_null(), "{r}");
        // The executable and the data file, found by sampling /proc.
        assert_eq!(r["eviction"]["files"], 2, "{r}");
        assert!(counter(r, "read_bytes") >= 2 << 20, "{r}");
    }
}

#[test]
fn an_export_to_dev_null_leaves_the_device_in_place() {
    use std::os::unix::fs::FileTypeExt;
    let out = Command::cargo_bin("coldstart")
        .unwrap()
        .args(["measure", "--runs", "1", "--warmup", "0", "--export-json", "/dev/null"])
        .args(["--export-csv", "/dev/stdout", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Written into, not renamed over: /dev/null is the machine's, /dev/stdout a symlink.
    assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    assert!(fs::symlink_metadata("/dev/stdout").unwrap().file_type().is_symlink());
    assert!(String::from_utf8_lossy(&out.stdout).contains("label,index,outcome"));
}
