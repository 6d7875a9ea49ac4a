//! `coldstart sample`: builds the sample program and prints a one-line summary.

use assert_cmd::Command;
use predicates::prelude::*;

#[test]
fn sample_builds_and_summarises() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    Command::cargo_bin("coldstart")
        .unwrap()
        .args(["sample", "--functions", "120", "--seed", "3", "--overlap", "0.75", "-o"])
        .arg(&out)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("sample: ")
                .and(predicate::str::contains("overlap a/b 7"))
                .and(predicate::str::contains("MiB code")),
        );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("sample.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], "coldstart-sample");
    assert_eq!(manifest["config"]["seed"], 3);
    assert_eq!(manifest["config"]["overlap"], 0.75);
    let ready = std::process::Command::new(out.join("sample")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&ready.stdout), "ready\n");
}

#[test]
fn sample_rejects_bad_values_with_usage_exit() {
    let dir = tempfile::tempdir().unwrap();
    Command::cargo_bin("coldstart")
        .unwrap()
        .args(["sample", "--overlap", "1.7", "-o"])
        .arg(dir.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("overlap"));
    Command::cargo_bin("coldstart")
        .unwrap()
        .args(["sample", "--size", "huge", "-o"])
        .arg(dir.path())
        .assert()
        .code(2);
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing written");
}
