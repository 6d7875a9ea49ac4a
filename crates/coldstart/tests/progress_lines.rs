//! Long commands say what they are doing when standard error is not a terminal (a CI log, a
//! pipe): one plain line per step, never a progress bar's redraws.

use std::process::Command;

fn stderr_of(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_coldstart")).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {err}");
    assert!(!err.contains('\r') && !err.contains('\x1b'), "a bar was drawn into a pipe: {err:?}");
    err
}

#[test]
fn measure_says_each_state_and_each_run_in_a_line() {
    let err = stderr_of(&["measure", "--runs", "3", "--", "true"]);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("coldstart measure: ")).collect();
    assert_eq!(lines.first(), Some(&"coldstart measure: hot: 4 runs"), "{err}");
    assert!(lines[1].starts_with("coldstart measure: hot: run 1 of 4: true (warm-up) "), "{err}");
    assert!(lines[4].starts_with("coldstart measure: hot: run 4 of 4: true "), "{err}");
    assert_eq!(lines.len(), 5, "one line per run, not per tick: {err}");
    let err = stderr_of(&["measure", "--runs", "1", "--compare", "--", "true", ":::", "true"]);
    assert!(err.contains("coldstart measure: hot: run 4 of 4: B "), "{err}");
}

#[test]
fn profile_says_what_it_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.json");
    let err = stderr_of(&["profile", "-o", p.to_str().unwrap(), "--", "/bin/true"]);
    assert!(err.contains("coldstart profile: recording the start-up of /bin/true"), "{err}");
}

/// On emulated storage the steps before the first state are said too: the run that finds the
/// program's files, and copying them onto the device (a minute for a large program).
#[test]
fn measure_on_emulated_storage_says_the_steps_before_the_runs() {
    if !coldstart_testkit::require_root("loop devices and cgroups") {
        return;
    }
    let _lock = coldstart_testkit::cache_lock();
    let err = stderr_of(&["measure", "--storage", "hdd", "--runs", "1", "--", "/bin/true"]);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("coldstart measure: ")).collect();
    assert!(
        lines[0].starts_with("coldstart measure: finding the program's files: /bin/true "),
        "{err}"
    );
    assert!(
        lines[1]
            .starts_with("coldstart measure: copying the program's files onto the emulated hdd"),
        "{err}"
    );
    assert_eq!(lines[2], "coldstart measure: hot: 2 runs", "{err}");
}
