//! A run that fails says why: the last lines the program wrote to standard error, in every
//! command that reports a measured or traced program's failure. Capturing them must not change
//! the run: the program writes into a memory file, never a pipe that could fill.

mod common;

use std::process::Command;

/// Exit code and all the command printed (the table and its warnings go to stdout, errors
/// to stderr).
fn coldstart(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_coldstart")).args(args).output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// `coldstart measure --runs 1 --warmup 0 ARGS`: one run, nothing before it.
fn measure_once(args: &[&str]) -> (Option<i32>, String) {
    coldstart(&[&["measure", "--runs", "1", "--warmup", "0"], args].concat())
}

/// A program that fails after a lot of output on standard error (more than a pipe holds,
/// 64 KiB), its reason last.
const FAILING: &str =
    "i=0; while [ $i -lt 4000 ]; do echo \"noise line $i of a chatty start-up\" >&2; \
                       i=$((i+1)); done; echo 'fatal: cannot open /etc/myprog.conf' >&2; exit 3";

#[test]
fn measure_shows_a_failed_runs_last_lines_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    let json = json.to_str().unwrap();
    let (code, out) =
        coldstart(&["measure", "--runs", "2", "--export-json", json, "--", "sh", "-c", FAILING]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("2 of 2 runs failed: the program exited with its own error (exit code 3)"),
        "{out}"
    );
    let tail = out.split("its last lines on standard error:").nth(1).expect(&out);
    let lines: Vec<&str> = tail.lines().skip(1).take_while(|l| l.starts_with("    ")).collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert_eq!(lines[4].trim(), "fatal: cannot open /etc/myprog.conf", "{out}");
    assert!(!out.contains("check --ready and --timeout"), "a failure is not a timeout: {out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let run = &report["commands"][0]["runs"][0];
    assert_eq!(run["stderr_tail"][4], "fatal: cannot open /etc/myprog.conf", "{run}");
}

#[test]
fn a_run_that_becomes_ready_keeps_no_stderr_and_a_timeout_points_at_ready() {
    let (code, out) = coldstart(&["measure", "--runs", "2", "--", "sh", "-c", "echo all fine >&2"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("standard error"), "{out}");
    let (_, out) = measure_once(&["--timeout", "0.3", "--ready", "tcp:1", "--", "sleep", "5"]);
    assert!(
        out.contains("1 of 1 run did not become ready within the timeout; check --ready"),
        "{out}"
    );
}

#[test]
fn measure_with_a_stderr_signal_shows_what_the_program_said_before_it_exited() {
    let (_, out) = measure_once(&["--ready", "stderr:^listening", "--", "sh", "-c", FAILING]);
    assert!(out.contains("exited before the readiness signal"), "{out}");
    assert!(out.contains("    fatal: cannot open /etc/myprog.conf"), "{out}");
}

#[test]
fn launch_options_launch_does_not_take_are_refused_before_any_run() {
    // The options are checked before the database is read: none is needed here.
    let (code, out) = coldstart(&[
        "measure",
        "--prefetch",
        "/nonexistent.prefetch",
        "--launch-options",
        "--wait --order physical",
        "--",
        "true",
    ]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("--launch-options '--wait --order physical': unexpected argument '--wait'"),
        "{out}"
    );
}

#[test]
fn timeline_shows_what_a_program_that_exits_before_it_is_ready_said() {
    if !common::require_root("tracefs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("t.json");
    let (code, out) = coldstart(&[
        "timeline",
        "--ready",
        "tcp:1",
        "-o",
        json.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        FAILING,
    ]);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("the program exited before it was ready"), "{out}");
    assert!(out.contains("    fatal: cannot open /etc/myprog.conf"), "{out}");
}
