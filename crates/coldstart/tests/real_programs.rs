//! `coldstart measure --cache cold,hot` on Debian programs nobody here wrote, on this machine as
//! it is (login shells running, other builds going): every run must count. A cold state that
//! only holds on an idle machine, or for the sample program, is not the product's promise.
//!
//! These are correctness tests, not benchmarks (two runs per state; the figures are in
//! BENCHMARKS.md, from `bench/real-programs.sh`). A program that fails to start, or a run that
//! is excluded, fails the test; one that is not installed is skipped (a failure under
//! `COLDSTART_TESTS_NO_SKIP`). `scripts/setup.sh` installs them all, `firefox-esr` too.

mod common;
use common::{cache_lock, measure_report, require, require_program, require_root};

use std::fs;
use std::path::Path;

use serde_json::Value;

/// `coldstart measure --cache cold,hot --runs 2` of `cmd`; asserts that it succeeded and that
/// every run counted, and returns the report.
fn measure_counts_every_run(cmd: &[&str], dir: &Path) -> Value {
    let json = dir.join("report.json");
    let args = ["--cache", "cold,hot", "--runs", "2", "--timeout", "120"];
    let (out, report) = measure_report(&args, &json, cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?}: {}\n{stdout}\n{stderr}", out.status);
    let commands = report["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 2, "{report}");
    for c in commands {
        let label = c["label"].as_str().unwrap();
        let runs = c["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{label}");
        for r in runs {
            assert_eq!(r["outcome"]["kind"], "ready", "{cmd:?} {label}: {r}\n{stdout}");
            assert!(r["excluded"].is_null(), "{cmd:?} {label}: {r}\n{stdout}");
        }
    }
    for r in commands[0]["runs"].as_array().unwrap() {
        // Cold for real: the program's own files were evicted and read back from storage, and
        // every page of them that stayed is one another process maps.
        let e = &r["eviction"];
        assert!(e["files"].as_u64().unwrap() >= 1, "{r}");
        assert_eq!(e["held_pages"], e["resident_pages_after"], "{r}");
        assert!(r["counters"]["read_bytes"].as_u64().unwrap() > 0, "{r}");
        if e["resident_pages_after"].as_u64().unwrap() > 0 {
            assert!(r["held_by_others"]["pages"].as_u64().unwrap() > 0, "{r}");
            assert!(stdout.contains("Stayed cached:"), "{stdout}");
        }
    }
    report
}

#[test]
fn debian_python3_imports_modules() {
    if !require_root("drop_caches, cgroups, fanotify") || !require_program("python3", "python3") {
        return;
    }
    let _lock = cache_lock();
    let dir = tempfile::tempdir().unwrap();
    measure_counts_every_run(
        &["/usr/bin/python3", "-c", "import json, email, http.client"],
        dir.path(),
    );
}

/// `python3` as found in `PATH`, as a user types it: on many machines a wrapper script (a
/// pyenv shim is a bash script that runs another bash script that runs Python), which keeps
/// `/usr/bin/bash` in the measured tree while every login shell maps it.
#[test]
fn python3_from_path_as_typed() {
    if !require_root("drop_caches, cgroups, fanotify") || !require_program("python3", "python3") {
        return;
    }
    let _lock = cache_lock();
    let dir = tempfile::tempdir().unwrap();
    measure_counts_every_run(&["python3", "-c", "pass"], dir.path());
}

#[test]
fn clang_compiles_a_small_file() {
    if !require_root("drop_caches, cgroups, fanotify") || !require_program("clang-19", "clang-19") {
        return;
    }
    let _lock = cache_lock();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("small.c");
    fs::write(&src, "#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n").unwrap();
    let obj = dir.path().join("small.o");
    measure_counts_every_run(
        &["clang-19", "-c", src.to_str().unwrap(), "-o", obj.to_str().unwrap()],
        dir.path(),
    );
    assert!(obj.exists());
}

#[test]
fn perl_loads_a_module() {
    if !require_root("drop_caches, cgroups, fanotify") || !require_program("perl", "perl") {
        return;
    }
    let _lock = cache_lock();
    let dir = tempfile::tempdir().unwrap();
    measure_counts_every_run(&["perl", "-MPOSIX", "-e", "print floor(2.5)"], dir.path());
}

#[test]
fn git_prints_its_version() {
    if !require_root("drop_caches, cgroups, fanotify") || !require_program("git", "git") {
        return;
    }
    let _lock = cache_lock();
    let dir = tempfile::tempdir().unwrap();
    measure_counts_every_run(&["git", "--version"], dir.path());
}

/// Firefox ESR takes a headless screenshot with a fresh profile of its own.
#[test]
fn firefox_takes_a_headless_screenshot() {
    let firefox = Path::new("/usr/bin/firefox-esr");
    if !require_root("drop_caches, cgroups, fanotify")
        || !require(
            firefox.exists(),
            "Debian's /usr/bin/firefox-esr (apt-get install firefox-esr, or run scripts/setup.sh)",
        )
    {
        return;
    }
    let _lock = cache_lock();
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile");
    fs::create_dir(&profile).unwrap();
    let shot = dir.path().join("shot.png");
    measure_counts_every_run(
        &[
            firefox.to_str().unwrap(),
            "--headless",
            "-no-remote",
            "-profile",
            profile.to_str().unwrap(),
            "--screenshot",
            shot.to_str().unwrap(),
            "data:text/html,<h1>coldstart</h1>",
        ],
        dir.path(),
    );
    let png = fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG screenshot");
}
