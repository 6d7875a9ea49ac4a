//! The fault-injection suite: every network-facing command (`run` with every strategy,
//! `mount`, `predict`) against a server that misbehaves in each way of
//! `common::faults::Fault`, on the manifest's requests and on the data's. For each it checks
//! the three things the network stage promises (docs/network.md, "Bounds"):
//!
//! - the command ends within its bound, computed from the flags as the docs state it;
//! - no wrong byte reaches a program: `sha256sum` run from the mount prints the right digest
//!   or fails;
//! - nothing is left: no mount, process, temporary directory, cgroup, tracefs instance or
//!   loop device.
//!
//! Short deadlines (`--timeout 0.5 --retries 1 --min-rate 64k`) keep the suite to seconds.
//! Needs root (FUSE), as CI has.

mod common;
use common::faults::{bounded, scratch_with_tools, Fault, FaultServer, Target, Tools};
use common::leftovers;
use common::Scratch;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const STRATEGIES: [&str; 5] = ["original", "paged", "reordered-paged", "reordered", "stream"];

/// The flags of every command here, and what the bounds are computed from.
const TIMEOUT: f64 = 0.5;
const RETRIES: u32 = 1;
const MIN_RATE: f64 = 65536.0;
const FLAGS: [&str; 6] = ["--timeout", "0.5", "--retries", "1", "--min-rate", "64k"];

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// The documented bound of a fetch of `bytes` with every retry (docs/network.md, "Bounds").
fn fetch_bound(bytes: u64) -> Duration {
    let attempt = 3.0 * TIMEOUT + bytes as f64 / MIN_RATE;
    let backoff: f64 = (0..RETRIES).map(|i| (0.1 * 2f64.powi(i as i32)).min(5.0)).sum();
    Duration::from_secs_f64((RETRIES + 1) as f64 * attempt + backoff)
}

/// What a command may take here: the manifest (the start object, then the compressed
/// manifest, each a fetch of at most the start object's size), `original`'s files, a few
/// reads of the program (each a fetch of one chunk), and 10 s for starting processes and
/// mounting on a busy machine.
fn command_bound(t: &Tools) -> Duration {
    let start = std::fs::metadata(t.bundle.join("start")).unwrap().len();
    let files = std::fs::metadata(t.app.join("bin/sum")).unwrap().len() + 200_000;
    fetch_bound(start) * 2
        + fetch_bound(files)
        + fetch_bound(16 * 1024) * 4
        + Duration::from_secs(10)
}

impl Scratch {
    fn fresh(&self, what: &str) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        self.path().join(format!("{what}-{}", N.fetch_add(1, Ordering::SeqCst)))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        leftovers::clean(self.path());
    }
}

/// A command's outcome, checked: ended within `bound`, not killed by a signal, and (for `run`,
/// whose output is `sha256sum`'s) no wrong digest printed.
fn checked(out: Option<Output>, took: Duration, bound: Duration, t: &Tools, what: &str) -> Output {
    let out = out.unwrap_or_else(|| panic!("{what}: still running after {bound:?}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some(), "{what}: ended by a signal: {:?}: {stderr}", out.status);
    let digests = if what.starts_with("run") { out.stdout.as_slice() } else { b"" };
    for line in String::from_utf8_lossy(digests).lines() {
        assert!(
            line.starts_with(&t.data_sha256),
            "{what}: wrong bytes reached the program: {line}"
        );
    }
    assert!(took <= bound, "{what}: took {took:?}, bound {bound:?}");
    out
}

/// `run` with every strategy, against `fault` on `target`.
fn runs(d: &Scratch, t: &Tools, url: &str, fault: Fault, target: Target) {
    let bound = command_bound(t);
    std::thread::scope(|s| {
        for strategy in STRATEGIES {
            let cache = d.fresh("cache");
            s.spawn(move || {
                let what = format!("run --strategy {strategy}, {fault:?} on {target:?}");
                let mut cmd = coldstart();
                cmd.env("TMPDIR", d.path().join("tmp"))
                    .args(["run", url, "--strategy", strategy, "--cache-dir"])
                    .arg(&cache)
                    .args(FLAGS)
                    .args(["--", "{root}/bin/sum", "{root}/data.bin"]);
                let (out, took) = bounded(&mut cmd, bound);
                let out = checked(out, took, bound, t, &what);
                let stderr = String::from_utf8_lossy(&out.stderr);
                // It ran and printed the digest, or said why not: an exit code of the
                // program, or coldstart's 2 (a URL that names no bundle) or 70 (the server).
                let code = out.status.code().unwrap();
                assert!([0, 1, 2, 70].contains(&code), "{what}: exit {code}: {stderr}");
                if code != 0 {
                    assert!(stderr.contains("coldstart"), "{what}: nothing said: {stderr}");
                }
            });
        }
    });
}

/// `mount` against `fault` on `target`: refused within its bound, or mounted and every read
/// of `data.bin` the right bytes or EIO within its bound; then SIGINT unmounts.
fn mount(d: &Scratch, t: &Tools, url: &str, fault: Fault, target: Target) -> u32 {
    let what = format!("mount, {fault:?} on {target:?}");
    let mnt = d.fresh("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut child = coldstart()
        .args(["mount", url])
        .arg(&mnt)
        .arg("--cache-dir")
        .arg(d.fresh("cache"))
        .args(FLAGS)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let bound = command_bound(t);
    let t0 = Instant::now();
    let mounted = loop {
        if coldstart_lazyfs::is_mount_point(&mnt) {
            break true;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let code = status.code();
            assert!(matches!(code, Some(2 | 70)), "{what}: {status}");
            break false;
        }
        assert!(t0.elapsed() < bound, "{what}: neither mounted nor refused after {bound:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    if mounted {
        let t1 = Instant::now();
        match std::fs::read(mnt.join("data.bin")) {
            Ok(data) => {
                let want = std::fs::read(t.app.join("data.bin")).unwrap();
                assert!(data == want, "{what}: wrong bytes read from the mount");
            }
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}"),
        }
        assert!(t1.elapsed() < bound, "{what}: reading took {:?}", t1.elapsed());
        common::signal(pid, libc::SIGINT);
        let t2 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(t2.elapsed() < Duration::from_secs(5), "{what}: still mounted after SIGINT");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(128 + libc::SIGINT), "{what}: {status}");
    }
    pid
}

/// `predict` against `fault` on `target`: a prediction, or an error, within its bound.
fn predict(d: &Scratch, t: &Tools, url: &str, fault: Fault, target: Target) {
    let what = format!("predict, {fault:?} on {target:?}");
    let mut cmd = coldstart();
    cmd.args(["predict", url, "--cache-dir"]).arg(d.fresh("cache")).args(FLAGS);
    let bound = command_bound(t);
    let (out, took) = bounded(&mut cmd, bound);
    let out = checked(out, took, bound, t, &what);
    let code = out.status.code().unwrap();
    assert!([0, 2, 70].contains(&code), "{what}: exit {code}");
}

/// Every command against `fault`, on the manifest's requests and on the data's.
fn suite(fault: Fault) {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    for target in [Target::Manifest, Target::Data] {
        let server = FaultServer::start(&t.bundle, fault, target);
        let url = server.url();
        let mut pids = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| runs(&d, &t, &url, fault, target));
            s.spawn(|| predict(&d, &t, &url, fault, target));
            pids.push(mount(&d, &t, &url, fault, target));
        });
        let left = leftovers::after(d.path(), &pids, Duration::from_secs(5));
        assert!(left.is_empty(), "{fault:?} on {target:?}: left behind: {left:#?}");
    }
}

#[test]
fn a_server_that_hangs() {
    suite(Fault::Hang);
}

#[test]
fn a_server_that_drips() {
    suite(Fault::Drip);
}

#[test]
fn a_server_that_floods() {
    suite(Fault::Flood);
}

#[test]
fn a_server_that_cuts_responses() {
    suite(Fault::Cut);
}

#[test]
fn a_server_that_corrupts_bytes() {
    suite(Fault::Corrupt);
}

#[test]
fn a_server_that_resets_connections() {
    suite(Fault::Reset);
}

#[test]
fn a_server_that_redirects() {
    suite(Fault::Redirect);
}

#[test]
fn a_server_that_says_a_body_is_longer_than_it_is() {
    suite(Fault::LieLonger);
}

#[test]
fn a_server_that_says_a_body_is_shorter_than_it_is() {
    suite(Fault::LieShorter);
}

/// The suite's own check: with a server that behaves, every command delivers the program's
/// bytes, so the checks above are not passing for want of a working mount.
#[test]
fn a_server_that_behaves() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let server = FaultServer::start(&t.bundle, Fault::None, Target::All);
    for strategy in STRATEGIES {
        let mut cmd = coldstart();
        cmd.env("TMPDIR", d.path().join("tmp"))
            .args(["run", &server.url(), "--strategy", strategy, "--cache-dir"])
            .arg(d.fresh("cache"))
            .args(FLAGS)
            .args(["--", "{root}/bin/sum", "{root}/data.bin"]);
        let (out, took) = bounded(&mut cmd, command_bound(&t));
        let out = checked(out, took, command_bound(&t), &t, &format!("run --strategy {strategy}"));
        assert!(out.status.success(), "{strategy}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).starts_with(&t.data_sha256));
    }
    mount(&d, &t, &server.url(), Fault::None, Target::All);
    predict(&d, &t, &server.url(), Fault::None, Target::All);
    let left = leftovers::after(d.path(), &[], Duration::from_secs(5));
    assert!(left.is_empty(), "left behind: {left:#?}");
}

/// How long each command takes to end after a signal (or, for `kill -9` of `run`, until
/// nothing of it is left), median and longest of five: the 1 s target of docs/network.md.
/// Prints a Markdown table; run by `bench/signals.sh`.
#[test]
#[ignore = "benchmark: bench/signals.sh"]
fn signal_benchmark() {
    let Some((d, t)) = scratch_with_tools("FUSE") else { return };
    let hang = FaultServer::start(&t.bundle, Fault::Hang, Target::Manifest);
    let drip = FaultServer::start(&t.bundle, Fault::Drip, Target::Data);
    let good = FaultServer::start(&t.bundle, Fault::None, Target::All);
    let mounted = |d: &Scratch| {
        let tmp = d.path().join("tmp").canonicalize().unwrap().display().to_string();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        info.lines().filter_map(|l| l.split(' ').nth(4)).any(|m| m.starts_with(&tmp))
    };
    let run = |url: &str, cmd: &[&str]| {
        let mut c = coldstart();
        c.env("TMPDIR", d.path().join("tmp"))
            .args(["run", url, "--strategy", "paged", "--cache-dir"])
            .arg(d.fresh("cache"))
            .arg("--")
            .args(cmd)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    };
    // (what, command, when to signal it, the signal)
    type Make<'a> = Box<dyn Fn() -> Command + 'a>;
    type Ready = Box<dyn Fn(&Scratch) -> bool>;
    type Case<'a> = (&'static str, Make<'a>, Ready, i32);
    let cases: Vec<Case> = vec![
        (
            "mount, SIGTERM while the manifest is fetched (server never answers)",
            Box::new(|| {
                let mnt = d.fresh("mnt");
                std::fs::create_dir(&mnt).unwrap();
                let mut c = coldstart();
                c.args(["mount", &hang.url()]).arg(&mnt).arg("--cache-dir").arg(d.fresh("cache"));
                c.stderr(Stdio::null());
                c
            }),
            Box::new(|_| true),
            libc::SIGTERM,
        ),
        (
            "run, SIGTERM while its command's exec waits on a dripping read",
            Box::new(|| run(&drip.url(), &["{root}/bin/sum", "{root}/data.bin"])),
            Box::new(mounted),
            libc::SIGTERM,
        ),
        (
            "run, SIGINT while its command runs (sh -c 'nap 60; true')",
            Box::new(|| run(&good.url(), &["sh", "-c", "{root}/bin/nap 60; true"])),
            Box::new(mounted),
            libc::SIGINT,
        ),
        (
            "predict, SIGHUP while the manifest is fetched (server never answers)",
            Box::new(|| {
                let mut c = coldstart();
                c.args(["predict", &hang.url(), "--cache-dir"]).arg(d.fresh("cache"));
                c.stdout(Stdio::null()).stderr(Stdio::null());
                c
            }),
            Box::new(|_| true),
            libc::SIGHUP,
        ),
        (
            "run killed (SIGKILL) while its command's exec waits: until nothing is left",
            Box::new(|| run(&drip.url(), &["{root}/bin/sum", "{root}/data.bin"])),
            Box::new(mounted),
            libc::SIGKILL,
        ),
    ];
    println!("\n| command and signal | median | longest |");
    println!("| --- | --- | --- |");
    for (what, make, ready, sig) in &cases {
        let mut times = Vec::new();
        for _ in 0..5 {
            let mut child = make().spawn().unwrap();
            let t0 = Instant::now();
            while !ready(&d) {
                assert!(t0.elapsed() < Duration::from_secs(20), "{what}: never ready");
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(500));
            common::signal(child.id(), *sig);
            let t1 = Instant::now();
            let pid = child.id();
            while child.try_wait().unwrap().is_none() {
                assert!(t1.elapsed() < Duration::from_secs(20), "{what}: did not end");
                std::thread::sleep(Duration::from_millis(1));
            }
            let ended = t1.elapsed();
            let left = leftovers::after(d.path(), &[pid], Duration::from_secs(10));
            assert!(left.is_empty(), "{what}: {left:#?}");
            times.push(if *sig == libc::SIGKILL { t1.elapsed() } else { ended });
            // Let the kill -9 case's cleanup finish before the next.
            std::thread::sleep(Duration::from_millis(100));
        }
        times.sort();
        let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
        println!("| {what} | {} | {} |", ms(times[2]), ms(times[4]));
    }
}
