//! Regression tests for a hostile server, signals and kills. Each test is named for
//! what broke; they run the real commands against the fault-injection server
//! (`common/faults.rs`) and look for anything left behind (`common/leftovers.rs`).
//!
//! Needs root (FUSE), as CI has.

mod common;
use common::faults::{bounded, scratch_with_tools, tools, Fault, FaultServer, Target, Tools};
use common::{leftovers, require_root};
use common::{signal, Scratch};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

impl Scratch {
    /// A fresh chunk cache.
    fn cache(&self) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        self.path().join(format!("cache-{}", N.fetch_add(1, Ordering::SeqCst)))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        leftovers::clean(self.path());
    }
}

/// `coldstart run URL --strategy S --cache-dir (fresh) EXTRA -- CMD`, its temporary mount
/// point under the scratch directory.
fn run(d: &Scratch, url: &str, strategy: &str, extra: &[&str], cmd: &[&str]) -> Command {
    let mut c = coldstart();
    c.env("TMPDIR", d.path().join("tmp"))
        .args(["run", url, "--strategy", strategy, "--cache-dir"])
        .arg(d.cache())
        .args(extra)
        .arg("--")
        .args(cmd);
    c
}

const SUM: [&str; 2] = ["{root}/bin/sum", "{root}/data.bin"];

/// The documented bound of one read (docs/network.md, "Bounds"): every attempt of a fetch of
/// `bytes`, each within `3 x timeout + bytes / min_rate`, and the back-off between them.
fn read_bound(timeout: f64, retries: u32, bytes: u64, min_rate: f64) -> Duration {
    let attempt = 3.0 * timeout + bytes as f64 / min_rate;
    let backoff: f64 = (0..retries).map(|i| (0.1 * 2f64.powi(i as i32)).min(5.0)).sum();
    Duration::from_secs_f64((retries + 1) as f64 * attempt + backoff)
}

/// Asserts that the output is not a checksum of wrong bytes: `sum` printed the right one or
/// nothing.
fn no_wrong_byte(out: &Output, t: &Tools, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in stdout.lines() {
        assert!(
            line.starts_with(&t.data_sha256),
            "{what}: wrong bytes reached the program: {line}"
        );
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn nothing_left(d: &Scratch, pids: &[u32], what: &str) {
    let left = leftovers::after(d.path(), pids, Duration::from_secs(5));
    assert!(left.is_empty(), "{what}: left behind: {left:#?}");
}

/// Waits until something is mounted under the scratch directory's `tmp` (a `run`'s mount).
fn wait_mounted(d: &Scratch, child: &mut std::process::Child) {
    let tmp = d.path().join("tmp").canonicalize().unwrap().display().to_string();
    let t = Instant::now();
    loop {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        if info.lines().filter_map(|l| l.split(' ').nth(4)).any(|m| m.starts_with(&tmp)) {
            return;
        }
        assert!(child.try_wait().unwrap().is_none(), "the command ended before mounting");
        assert!(t.elapsed() < Duration::from_secs(20), "nothing was mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` at most `limit`; `None` if it is still running (it is then killed).
fn wait_bounded(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Regression: `kill -9` of `run` while its command is still starting (its exec waiting on a read
/// from the mount) left the mount, the command (in state D), the watchdog and the temporary
/// directory behind.
#[test]
fn a_killed_run_leaves_no_mount_no_process_and_no_temporary_directory() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::Drip, Target::Data);
    let mut child = run(&d, &server.url(), "paged", &[], &SUM)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_mounted(&d, &mut child);
    // The command is being started: its exec reads `sum` one byte every 100 ms.
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    nothing_left(&d, &[pid], "kill -9 of run");
}

/// `kill -9` of `mount` while another process holds its FUSE connection (as a command `run`
/// forked does while its `exec` reads from the mount): a read on the mount waits for an answer
/// nobody gives until the watchdog aborts the connection through the FUSE control file system.
/// Where that file system was not mounted (a freshly booted machine) the abort failed and the
/// read waited for ever; the watchdog now mounts it for the abort.
#[test]
fn a_killed_mounts_connection_is_aborted_where_the_fuse_control_fs_is_not_mounted() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::fs::FileExt;
    let Some((d, t)) = scratch_with_tools("FUSE, a mount namespace and pidfd_getfd") else {
        return;
    };
    let server = FaultServer::start(&t.bundle, Fault::None, Target::All);
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    // In a mount namespace of its own without the FUSE control file system (the host's mounts
    // are untouched); `unshare` and `sh` exec, so the child's pid is the mount's.
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(
            "while mountpoint -q /sys/fs/fuse/connections; do umount -l /sys/fs/fuse/connections; done; exec \"$0\" \"$@\"",
        )
        .arg(env!("CARGO_BIN_EXE_coldstart"))
        .args(["mount", &server.url()])
        .arg(&mnt)
        .args(["--strategy", "paged", "--cache-dir"])
        .arg(d.cache())
        .env("TMPDIR", d.path().join("tmp"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let data = root.join(mnt.strip_prefix("/").unwrap()).join("data.bin");
    let t0 = Instant::now();
    while !data.exists() {
        assert!(child.try_wait().unwrap().is_none(), "mount ended before mounting");
        assert!(t0.elapsed() < Duration::from_secs(20), "nothing was mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let file = std::fs::File::open(&data).unwrap();
    // A copy of the mount's /dev/fuse descriptor keeps the connection alive after the mount
    // process dies, as a command still in `exec` does.
    let fuse_fd = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == Path::new("/dev/fuse")))
        .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .expect("the mount holds /dev/fuse");
    // SAFETY: pidfd_open and pidfd_getfd return new descriptors we own, or -1.
    let held = unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        assert!(pidfd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
        let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fuse_fd, 0) as i32;
        libc::close(pidfd);
        assert!(fd >= 0, "pidfd_getfd: {}", std::io::Error::last_os_error());
        OwnedFd::from_raw_fd(fd)
    };
    child.kill().unwrap();
    child.wait().unwrap();
    // A read past the hot set: only the (dead) mount could answer it.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let _ = tx.send(file.read_at(&mut [0u8; 4096], 150_000));
    });
    let read = rx.recv_timeout(Duration::from_secs(10));
    // Our copy was the connection's last holder: closing it ends a read still waiting.
    drop(held);
    reader.join().unwrap();
    let err = read
        .expect("the read waited for an answer nobody gives: the connection was not aborted")
        .expect_err("no byte can come from a mount that is gone");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
}

/// Regression, before the mount: `kill -9` of `run` while it still fetched the manifest left its
/// temporary directory behind (the watchdog started only once mounted).
#[test]
fn a_run_killed_while_fetching_the_manifest_leaves_no_temporary_directory() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::Hang, Target::Manifest);
    let mut child = run(&d, &server.url(), "paged", &[], &SUM)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while server.requests.load(Ordering::SeqCst) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no request came");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    nothing_left(&d, &[child.id()], "kill -9 of run while fetching the manifest");
}

/// Regression: a manifest's sizes were trusted: a chunk size of 2^50 made the client try to
/// allocate that much and abort, and `serve` accepted such a bundle.
#[test]
fn a_manifest_with_a_huge_chunk_size_is_refused_before_anything_is_allocated() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let path = t.bundle.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let huge = 1u64 << 50;
    m["chunk_size"] = huge.into();
    let files = m["files"].as_array_mut().unwrap();
    let data = files.iter_mut().find(|f| f["path"] == "data.bin").unwrap();
    let first = data["chunks"][0].clone();
    data["size"] = huge.into();
    data["chunks"] =
        serde_json::json!([{"offset": 0, "length": huge, "sha256": first["sha256"], "at": 0}]);
    m["hot"] = serde_json::json!({"offset": 0, "size": 0, "chunks": []});
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    // Only manifest.json is left: a client reads it after the other copies' 404.
    std::fs::remove_file(t.bundle.join("start")).unwrap();
    std::fs::remove_file(t.bundle.join("manifest.json.zst")).unwrap();
    let server = FaultServer::start(&t.bundle, Fault::None, Target::All);
    for s in ["paged", "stream"] {
        let (out, _) = bounded(&mut run(&d, &server.url(), s, &[], &SUM), Duration::from_secs(30));
        let out = out.expect("run ended");
        assert_eq!(out.status.code(), Some(2), "{s}: {}", stderr(&out));
        assert!(stderr(&out).contains("chunk size"), "{s}: {}", stderr(&out));
        no_wrong_byte(&out, &t, s);
    }
    let (out, _) = bounded(coldstart().arg("serve").arg(&t.bundle), Duration::from_secs(10));
    let out = out.expect("serve refuses the bundle instead of serving it");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    nothing_left(&d, &[], "a huge chunk size");
}

/// A manifest whose `mode` held a file type (`0o170755`) was accepted and every read then
/// failed with EIO; one whose `hot.offset` was near 2^64 was accepted too. Both are refused at
/// load now, before anything is mounted, under every strategy.
#[test]
fn a_manifest_with_a_file_type_in_a_mode_or_a_hot_offset_near_2_64_is_refused_at_load() {
    if !require_root("FUSE") {
        return;
    }
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit, &str); 2] = [
        (
            "mode",
            |m| {
                let files = m["files"].as_array_mut().unwrap();
                let data = files.iter_mut().find(|f| f["path"] == "data.bin").unwrap();
                data["mode"] = 0o170755.into();
            },
            "mode 0o170755",
        ),
        ("hot.offset", |m| m["hot"]["offset"] = (u64::MAX - 4096).into(), "hot.offset"),
    ];
    for (what, edit, said) in edits {
        let d = Scratch::new();
        let t = tools(d.path());
        let path = t.bundle.join("manifest.json");
        let mut m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut m);
        std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
        // Only manifest.json is left: a client reads it after the other copies' 404.
        std::fs::remove_file(t.bundle.join("start")).unwrap();
        std::fs::remove_file(t.bundle.join("manifest.json.zst")).unwrap();
        let server = FaultServer::start(&t.bundle, Fault::None, Target::All);
        for s in ["original", "paged", "reordered", "stream"] {
            let mut cmd = run(&d, &server.url(), s, &[], &SUM);
            let (out, _) = bounded(&mut cmd, Duration::from_secs(30));
            let out = out.expect("run ended");
            assert_eq!(out.status.code(), Some(2), "{what}, {s}: {}", stderr(&out));
            assert!(stderr(&out).contains(said), "{what}, {s}: {}", stderr(&out));
            no_wrong_byte(&out, &t, s);
        }
        nothing_left(&d, &[], what);
    }
}

/// The chunk cache's whole-file copy (what FUSE passthrough hands the kernel) was trusted by
/// a stamp of its length, inode and modification time: one byte of it changed in place, the
/// time set back, and the next run's program read the wrong digest with `"errors": 0`, under
/// `--trust` too. Whoever can write to the cache can only make reads fail: the copy is
/// checked against the manifest's digests before it is handed over.
#[test]
fn a_cached_copy_changed_with_its_time_kept_never_reaches_the_program() {
    let Some((d, t)) = scratch_with_tools("FUSE, passthrough") else { return };
    let key = d.path().join("release.key");
    let out = coldstart().args(["key", "new", "-o"]).arg(&key).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let signed = d.path().join("signed");
    let mut pack = coldstart();
    let out = pack.arg("pack").arg(&t.app).arg("--sign").arg(&key).arg("-o").arg(&signed);
    let out = out.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let trust = format!("{}.pub", key.display());
    for (bundle, extra) in [(&t.bundle, vec![]), (&signed, vec!["--trust", &trust])] {
        let cache = d.cache();
        let report = d.path().join("report.json");
        let go = |what: &str| {
            let mut c = coldstart();
            c.env("TMPDIR", d.path().join("tmp"))
                .arg("run")
                .arg(bundle)
                .args(["--strategy", "original", "--cache-dir"])
                .arg(&cache)
                .args(&extra)
                .arg("--export-json")
                .arg(&report)
                .arg("--")
                .args(SUM);
            let (out, _) = bounded(&mut c, Duration::from_secs(60));
            let out = out.unwrap_or_else(|| panic!("{what}: still running"));
            let r: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
            (out, r)
        };
        let (out, r) = go("the first run");
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(r["report"]["passthrough"].as_u64() >= Some(1), "no passthrough: {r}");
        // One byte of data.bin's copy changed in place, its modification time set back.
        let copies = cache.join("files");
        let copy = walk_files(&copies)
            .into_iter()
            .find(|p| std::fs::metadata(p).unwrap().len() == 200_000)
            .expect("data.bin's copy");
        let before = std::fs::metadata(&copy).unwrap().modified().unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&copy).unwrap();
        let mut b = [0u8; 1];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, 150_000).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[b[0] ^ 0x20], 150_000).unwrap();
        f.set_modified(before).unwrap();
        drop(f);
        let (out, r) = go("the run after the change");
        no_wrong_byte(&out, &t, "a changed copy");
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(String::from_utf8_lossy(&out.stdout).starts_with(&t.data_sha256));
        assert_eq!(r["report"]["errors"], 0, "{r}");
        assert!(r["report"]["passthrough"].as_u64() >= Some(1), "no passthrough: {r}");
    }
    nothing_left(&d, &[], "a changed copy");
}

/// Every regular file under `dir`.
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Runs `cmd` with at most 4 GiB of address space, so that a client whose memory grows
/// without bound fails instead of taking the machine's.
fn limit_memory(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 4 << 30, rlim_max: 4 << 30 };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        })
    }
}

/// Regression: a server that sends an endless body for one chunk made the client's memory grow
/// until it aborted.
#[test]
fn an_endless_body_for_one_chunk_fails_the_read_and_memory_stays_bounded() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::Flood, Target::Data);
    let mut cmd = run(&d, &server.url(), "paged", &["--timeout", "2", "--retries", "1"], &SUM);
    let bound = 3 * read_bound(2.0, 1, 16 * 1024, 1024.0) + Duration::from_secs(10);
    let (out, took) = bounded(limit_memory(&mut cmd), bound);
    let out = out.unwrap_or_else(|| panic!("still running after {bound:?}"));
    assert!(out.status.code().is_some(), "killed by a signal: {:?}: {}", out.status, stderr(&out));
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("Input/output error"), "{}", stderr(&out));
    no_wrong_byte(&out, &t, "flood");
    assert!(took < bound);
    nothing_left(&d, &[], "flood");
}

/// Regression: `--timeout` bounded each socket read only, so a server sending one byte at a time
/// held a read (and the program, in exec) for hours; and `--retries` had no upper bound.
#[test]
fn a_server_that_drips_fails_the_read_within_the_bound() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::Drip, Target::Data);
    let mut cmd = run(&d, &server.url(), "paged", &["--timeout", "1", "--retries", "1"], &SUM);
    // The manifest comes at once; then the first read of `sum`, one chunk.
    let bound = read_bound(1.0, 1, 16 * 1024, 1024.0) + Duration::from_secs(10);
    let (out, _) = bounded(&mut cmd, bound);
    let out = out.unwrap_or_else(|| panic!("still running after {bound:?}"));
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("Input/output error"), "{}", stderr(&out));
    no_wrong_byte(&out, &t, "drip");
    nothing_left(&d, &[], "drip");

    let (out, _) = bounded(
        &mut run(&d, &server.url(), "paged", &["--retries", "1000"], &SUM),
        Duration::from_secs(10),
    );
    let out = out.expect("refused at once");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--retries"), "{}", stderr(&out));
}

/// Regression: SIGINT and SIGTERM did nothing while the command was stuck in exec on a read from
/// a dripping server.
#[test]
fn sigterm_ends_a_run_stuck_on_a_dripping_server() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::Drip, Target::Data);
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let mut child = run(&d, &server.url(), "paged", &[], &SUM)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_mounted(&d, &mut child);
        std::thread::sleep(Duration::from_millis(500));
        signal(child.id(), sig);
        let status = wait_bounded(&mut child, Duration::from_secs(5));
        let status = status.unwrap_or_else(|| panic!("signal {sig}: run still running 5 s later"));
        assert_eq!(status.code(), Some(128 + sig), "{status}");
        nothing_left(&d, &[child.id()], &format!("signal {sig}"));
    }
}

/// Regression: `mount` against a server that never answers ignored SIGTERM while it fetched the
/// manifest, then exited with 2 and "Resource temporarily unavailable".
#[test]
fn mount_honours_sigterm_while_the_manifest_is_fetched() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::Hang, Target::Manifest);
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut child = coldstart()
        .arg("mount")
        .arg(server.url())
        .arg(&mnt)
        .arg("--cache-dir")
        .arg(d.cache())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    signal(child.id(), libc::SIGTERM);
    let status = wait_bounded(&mut child, Duration::from_secs(5)).expect("ended after SIGTERM");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status}");
    nothing_left(&d, &[child.id()], "SIGTERM while mounting");
}

/// Regression: a server that never answers is a timeout (and the environment's fault), not
/// "Resource temporarily unavailable" and bad input.
#[test]
fn a_server_that_never_answers_is_a_timeout() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::Hang, Target::Manifest);
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut cmd = coldstart();
    cmd.arg("mount").arg(server.url()).arg(&mnt).arg("--cache-dir").arg(d.cache());
    cmd.args(["--timeout", "1", "--retries", "0"]);
    let (out, _) = bounded(&mut cmd, Duration::from_secs(20));
    let out = out.expect("mount ended");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(70), "{err}");
    assert!(err.contains("no answer within 1 s"), "{err}");
    assert!(!err.contains("temporarily unavailable"), "{err}");
    nothing_left(&d, &[], "hang");
}

/// Regression: `run` forwarded a signal to its direct child only: with `sh -c 'APP; true'`, APP
/// kept running on a mount already detached.
#[test]
fn sigterm_to_run_reaches_every_process_of_the_command() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::None, Target::All);
    let mut child = run(&d, &server.url(), "stream", &[], &["sh", "-c", "{root}/bin/nap 60; true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_mounted(&d, &mut child);
    let t0 = Instant::now();
    while !leftovers::leftovers(d.path(), &[]).iter().any(|l| l.contains("bin/nap 60")) {
        assert!(t0.elapsed() < Duration::from_secs(10), "nap did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(child.id(), libc::SIGTERM);
    let status = wait_bounded(&mut child, Duration::from_secs(5)).expect("run ended");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status}");
    nothing_left(&d, &[child.id()], "SIGTERM to run");
}

/// Regression: with its start object's hot part damaged, `--strategy reordered` failed the mount
/// (exit 70) instead of going on as the other strategies do. Since bundle version 4 the hot
/// pieces are stored in the start object alone: the damaged piece cannot be had (its reads
/// fail with EIO, never with wrong bytes), and every other piece still reads.
#[test]
fn a_damaged_hot_part_fails_only_its_own_reads_under_every_strategy() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let start = t.bundle.join("start");
    let mut object = std::fs::read(&start).unwrap();
    let at = object.len() - 100;
    object[at] ^= 0x5a;
    std::fs::write(&start, object).unwrap();
    let server = FaultServer::start(&t.bundle, Fault::None, Target::All);
    for s in ["reordered", "reordered-paged", "stream"] {
        let (out, _) = bounded(
            &mut run(&d, &server.url(), s, &["--retries", "1", "--json"], &SUM),
            Duration::from_secs(30),
        );
        let out = out.expect("run ended");
        no_wrong_byte(&out, &t, s);
        let err = stderr(&out);
        assert!(err.contains("\"background_error\""), "{s}: the mount went on: {err}");
        // The damaged piece is data.bin's (the program read it and failed) or another
        // file's (the sum is right).
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.code() == Some(0) {
            assert!(stdout.starts_with(&t.data_sha256), "{s}: {stdout}");
        } else {
            assert!(
                err.contains("Input/output error") || err.contains("reads failed"),
                "{s}: {err}"
            );
        }
    }
    nothing_left(&d, &[], "a damaged hot part");
}

/// Regression: a network fault was bad input (2) when it happened while the manifest was read
/// and the environment's (70) later; a URL that names no bundle is bad input.
#[test]
fn a_network_fault_is_the_environments_whenever_it_happens() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    // Nothing listens there.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/", l.local_addr().unwrap())
    };
    let quick = ["--timeout", "1", "--retries", "0"];
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mount = |url: &str| {
        let mut c = coldstart();
        c.arg("mount").arg(url).arg(&mnt).arg("--cache-dir").arg(d.cache()).args(quick);
        bounded(&mut c, Duration::from_secs(20)).0.expect("mount ended")
    };
    let out = mount(&dead);
    assert_eq!(out.status.code(), Some(70), "refused: {}", stderr(&out));
    let server = FaultServer::start(&t.bundle, Fault::Reset, Target::Manifest);
    let out = mount(&server.url());
    assert_eq!(out.status.code(), Some(70), "reset: {}", stderr(&out));
    let mut predict = coldstart();
    predict.args(["predict", &dead, "--cache-dir"]).arg(d.cache()).args(quick);
    let out = bounded(&mut predict, Duration::from_secs(20)).0.expect("predict ended");
    assert_eq!(out.status.code(), Some(70), "predict: {}", stderr(&out));
    // A server without a bundle there: the URL is wrong.
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let server = FaultServer::start(&empty, Fault::None, Target::All);
    let out = mount(&server.url());
    assert_eq!(out.status.code(), Some(2), "404: {}", stderr(&out));
    assert!(stderr(&out).contains("404"), "{}", stderr(&out));
    nothing_left(&d, &[], "network faults");
}

/// Regression: `run --record /nodir/h.json` ran the command, then lost its report to the error.
#[test]
fn run_refuses_a_record_file_it_cannot_write_before_running() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::None, Target::All);
    let record = d.path().join("nodir/h.json");
    let extra = ["--record", record.to_str().unwrap()];
    let out = bounded(
        &mut run(&d, &server.url(), "paged", &extra, &["sh", "-c", "echo ran"]),
        Duration::from_secs(20),
    )
    .0
    .expect("run ended");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--record"), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "the command did not run");
    nothing_left(&d, &[], "--record");
}

/// Regression: an EIO while the command was being started (its executable could not be read
/// from the bundle) was reported as a bad path.
#[test]
fn an_eio_while_starting_the_command_is_reported_as_a_failed_read() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::Corrupt, Target::Data);
    let out = bounded(
        &mut run(&d, &server.url(), "paged", &["--retries", "0"], &SUM),
        Duration::from_secs(30),
    )
    .0
    .expect("run ended");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(70), "{err}");
    assert!(!err.contains("check the path"), "{err}");
    assert!(err.contains("Input/output error") && err.contains("SHA-256"), "{err}");
    nothing_left(&d, &[], "EIO at exec");
}

/// Regression: under `ulimit -n 64`, `serve` stopped answering after about 56 connections: it
/// kept every connection open.
#[test]
fn serve_within_64_descriptors_answers_every_connection() {
    use std::io::{BufRead, Read, Write};
    use std::os::unix::process::CommandExt;
    let d = Scratch::new();
    let t = tools(d.path());
    let mut cmd = coldstart();
    cmd.arg("serve").arg(&t.bundle).stdout(Stdio::piped()).stderr(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 64, rlim_max: 64 };
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            Ok(())
        });
    }
    let mut child = common::KillOnDrop(cmd.spawn().unwrap());
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().trim_start_matches("http://").trim_end_matches('/').to_owned();
    for i in 0..200 {
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET /manifest.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut all = Vec::new();
        let read = c.read_to_end(&mut all);
        assert!(read.is_ok() && all.starts_with(b"HTTP/1.1 200 OK"), "connection {i}: {read:?}");
    }
}

/// Signals: `pack` killed by SIGTERM left its half-written temporary bundle beside the
/// output; now it stops between two chunks, removes it and exits 128 + 15.
#[test]
fn sigterm_stops_pack_and_leaves_nothing_half_written() {
    let d = Scratch::new();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // Incompressible data, packed with zstd at its slowest: seconds of work.
    let mut x = 0x2545f4914f6cdd1du64;
    for f in 0..4 {
        let data: Vec<u8> = (0..8 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(src.join(format!("f{f}")), data).unwrap();
    }
    let out = d.path().join("bundle");
    let mut child = coldstart()
        .arg("pack")
        .arg(&src)
        .args(["--compress", "zstd", "--compress-level", "22", "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    signal(child.id(), libc::SIGTERM);
    let status = wait_bounded(&mut child, Duration::from_secs(5)).expect("pack ended");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status}");
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("bundle"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Signals: `predict` against a server that never answers ends at once on SIGINT.
#[test]
fn sigint_stops_predict_waiting_on_a_server() {
    let d = Scratch::new();
    let t = tools(d.path());
    let server = FaultServer::start(&t.bundle, Fault::Hang, Target::Manifest);
    let mut child = coldstart()
        .args(["predict", &server.url(), "--cache-dir"])
        .arg(d.cache())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    signal(child.id(), libc::SIGINT);
    let status = wait_bounded(&mut child, Duration::from_secs(5)).expect("predict ended");
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{status}");
    nothing_left(&d, &[child.id()], "SIGINT to predict");
}

/// A profile of `/usr/bin/true` as if recorded from another build of it (another build-id).
fn profile_of_another_build(dir: &Path) -> PathBuf {
    let example = include_str!("../../../fuzz/seeds/profile/example.json");
    let mut p: serde_json::Value = serde_json::from_str(example).unwrap();
    let m = &mut p["modules"][0];
    m["path"] = "/usr/bin/true".into();
    m["build_id"] = "0123456789abcdef0123456789abcdef01234567".into();
    let path = dir.join("other-build.json");
    std::fs::write(&path, serde_json::to_vec(&p).unwrap()).unwrap();
    path
}

/// Regression: `order` of a profile recorded from another build said nothing and exited 0.
#[test]
fn order_warns_when_the_profile_is_of_another_build() {
    let d = Scratch::new();
    let profile = profile_of_another_build(d.path());
    for extra in [&[][..], &["--binary", "/usr/bin/true"][..]] {
        let out = coldstart().arg("order").arg(&profile).args(extra).output().unwrap();
        let err = stderr(&out);
        assert!(err.contains("0123456789abcdef0123456789abcdef01234567"), "{extra:?}: {err}");
        assert!(err.contains("another build"), "{extra:?}: {err}");
    }
}

/// Regression: `bolt` with an empty order ran llvm-bolt, wrote its output, then exited 1.
#[test]
fn bolt_refuses_an_empty_order_before_writing_anything() {
    let d = Scratch::new();
    std::fs::write(d.path().join("m.c"), "int main(void) { return 0; }\n").unwrap();
    let bin = d.path().join("m");
    let built = Command::new("clang-19")
        .arg(d.path().join("m.c"))
        .args(["-Wl,--emit-relocs", "-o"])
        .arg(&bin)
        .status()
        .expect("clang-19 is installed");
    assert!(built.success());
    let order = d.path().join("empty.txt");
    std::fs::write(&order, "# nothing\n").unwrap();
    let out_bin = d.path().join("m.bolt");
    let out = coldstart()
        .arg("bolt")
        .arg(&bin)
        .arg("--order")
        .arg(&order)
        .arg("-o")
        .arg(&out_bin)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no function names"), "{}", stderr(&out));
    assert!(!out_bin.exists(), "nothing written");
}
