//! `coldstart demo`: the main job runs end to end on the small sample program.

mod common;
use common::{cache_lock, require, require_root};

use assert_cmd::Command;
use coldstart_formats::Document;
use predicates::prelude::*;

#[test]
fn demo_builds_the_sample_and_measures_every_cache_state() {
    if !require_root("the demo's cgroups and cold cache") {
        return;
    }
    // Its hot runs must not fault: no other test may evict pages meanwhile.
    let _cache = cache_lock();
    // On the disk, not tmpfs: the demo refuses a directory whose pages cannot be evicted.
    let dir =
        tempfile::Builder::new().prefix("coldstart-demo-test").tempdir_in("/var/tmp").unwrap();
    let out = Command::cargo_bin("coldstart")
        .unwrap()
        .args(["demo", "--size", "small", "--runs", "3", "--dir"])
        .arg(dir.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("I/O share"))
        .get_output()
        .stdout
        .clone();
    let stdout = String::from_utf8_lossy(&out);
    for state in ["cold:", "selective:", "warm:", "hot:"] {
        assert!(stdout.contains(state), "no `{state}` section in:\n{stdout}");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("measure.json")).unwrap())
            .unwrap();
    assert_eq!(report["format"], "coldstart-measure");
    let commands = report["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 4, "one result per cache state");
    let hot = commands.iter().find(|c| c["label"] == "hot").unwrap();
    let cold = commands.iter().find(|c| c["label"] == "cold").unwrap();
    let faults = |c: &serde_json::Value| -> Vec<u64> {
        c["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["excluded"].is_null())
            .map(|r| r["counters"]["major_faults"].as_u64().unwrap())
            .collect()
    };
    for r in hot["runs"].as_array().unwrap().iter().filter(|r| r["excluded"].is_null()) {
        common::assert_hot(&report, r);
    }
    assert!(faults(cold).iter().all(|&f| f > 0), "cold runs do not fault: {:?}", faults(cold));

    // The layout half: profiles, an order, a relinked copy that verifies, a comparison.
    assert!(stdout.contains("the order took effect"), "no verified relink in:\n{stdout}");
    for f in ["profile-a.json", "profile-b.json", "order.txt", "compare-b.json"] {
        assert!(dir.path().join(f).is_file(), "the demo did not write {f}");
    }
    let compare: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("compare-b.json")).unwrap())
            .unwrap();
    assert_eq!(compare["storage"]["profile"], "hdd", "{}", compare["storage"]);
    assert!(compare["comparison"]["ratio"].as_f64().is_some());

    // The end: a network experiment on two links, a timeline, and the report of it all.
    let experiment = coldstart_formats::Experiment::read(&dir.path().join("experiment.json"))
        .expect("the demo wrote its experiment");
    assert_eq!(experiment.settings.links.len(), 2, "two links");
    let strategies = coldstart_lazyfs::Strategy::ALL.len() + 1;
    assert_eq!(experiment.cells.len(), 2 * strategies, "every strategy and auto on each link");
    assert!(
        experiment.cells.iter().all(|c| c.runs.iter().all(|r| r.exit_code == Some(0))),
        "the sample ran from every mount: {:?}",
        experiment.warnings
    );
    assert!(dir.path().join("timeline.json").is_file(), "the demo did not write its timeline");
    let html = std::fs::read_to_string(dir.path().join("report.html")).expect("the report");
    for section in ["Starting over a network", "<svg"] {
        assert!(html.contains(section), "no `{section}` in the report");
    }
    assert!(stdout.contains("report.html"), "the demo names its report:\n{stdout}");
}

#[test]
fn demo_refuses_a_tmpfs_directory() {
    if !require(std::path::Path::new("/dev/shm").is_dir(), "a tmpfs at /dev/shm") {
        return;
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    Command::cargo_bin("coldstart")
        .unwrap()
        .args(["demo", "--size", "small", "--dir"])
        .arg(dir.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("tmpfs"));
}
