//! `coldstart gate` against the real kernel, on small C programs compiled here: one more page
//! read far from the rest is caught on the steady figures, 20% more start-up time on time; a
//! change that only adds noise is not flagged in 20 gate runs; a baseline from elsewhere is
//! flagged. Needs root (cold runs, the storage emulation); fails instead of skipping in CI.

mod common;
use common::{cache_lock, require_root};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use coldstart_testkit::compile_c;
use serde_json::Value;

/// Reads the first page of `data.bin` next to the executable, and with `-DFAR` one more page
/// 3 MiB into it.
const FAR_C: &str = r#"
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
  char exe[4096]; ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 10;
  exe[n] = 0;
  char path[4200]; snprintf(path, sizeof path, "%s/data.bin", dirname(exe));
  int fd = open(path, O_RDONLY); if (fd < 0) return 11;
  char buf[4096];
  if (pread(fd, buf, sizeof buf, 0) != sizeof buf) return 12;
#ifdef FAR
  if (pread(fd, buf, sizeof buf, 3L << 20) != sizeof buf) return 13;
#endif
  return 0;
}
"#;

/// Sleeps MS milliseconds, plus with `-DJITTER=J` a uniform draw in [-J, +J] tenths of a
/// millisecond: the same median, more spread.
const SLEEP_C: &str = r#"
#include <stdlib.h>
#include <time.h>
int main(void) {
  long ns = MS * 1000000L;
#ifdef JITTER
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  srand((unsigned)(t.tv_nsec ^ t.tv_sec));
  ns += (rand() % (2 * JITTER + 1) - JITTER) * 100000L;
#endif
  struct timespec d = { ns / 1000000000L, ns % 1000000000L };
  nanosleep(&d, 0);
  return 0;
}
"#;

/// Works MS milliseconds of CPU time, as a start-up that computes does: on a machine whose
/// other work slows it, the gate's calibration loop slows alike.
const WORK_C: &str = r#"
#include <time.h>
int main(void) {
  struct timespec t;
  volatile unsigned long x = 0;
  do {
    for (int i = 0; i < 10000; i++) x += i;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  } while (t.tv_sec * 1000L + t.tv_nsec / 1000000L < MS);
  return 0;
}
"#;

struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Dir {
        Dir(tempfile::Builder::new().prefix("coldstart-gate-test-").tempdir_in("/var/tmp").unwrap())
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
    /// Build `prog` from `source` with `args`, replacing the one before.
    fn build(&self, source: &str, args: &[&str]) -> PathBuf {
        compile_c(self.0.path(), "prog", source, args)
    }
}

fn coldstart(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_coldstart")).args(args).current_dir(dir).output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `coldstart gate --baseline b.json ARGS -- ./prog`, with the JSON report.
fn gate(dir: &Dir, args: &[&str]) -> (Output, Option<Value>) {
    let report = dir.path("report.json");
    let _ = fs::remove_file(&report);
    let mut all = vec!["gate", "--baseline", "b.json", "--export-json", "report.json"];
    all.extend(args);
    all.extend(["--", "./prog"]);
    let out = coldstart(&all, dir.0.path());
    let json = fs::read_to_string(&report).ok().map(|t| serde_json::from_str(&t).unwrap());
    (out, json)
}

fn record(dir: &Dir, args: &[&str]) {
    let mut all = vec!["gate", "--baseline", "b.json", "--update"];
    all.extend(args);
    all.extend(["--", "./prog"]);
    let out = coldstart(&all, dir.0.path());
    assert!(out.status.success(), "{}", text(&out));
}

fn row<'a>(report: &'a Value, figure: &str, state: &str) -> &'a Value {
    report["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["figure"] == figure && r["state"] == state)
        .unwrap_or_else(|| panic!("no {figure} {state} in {report:#}"))
}

#[test]
fn one_more_page_read_far_from_the_rest_is_caught_on_the_steady_figures() {
    if !require_root("cold runs and the storage emulation") {
        return;
    }
    let _lock = cache_lock();
    let dir = Dir::new();
    fs::write(dir.path("data.bin"), vec![7u8; 4 << 20]).unwrap();
    dir.build(FAR_C, &[]);
    let small = ["--page-profiles", "0", "--batch", "5", "--max-runs", "10"];
    record(&dir, &[&["--runs", "10"][..], &small[..]].concat());
    let baseline: Value =
        serde_json::from_str(&fs::read_to_string(dir.path("b.json")).unwrap()).unwrap();
    // This machine's disk reads ahead 8 MiB: the gate emulated a disk with the usual 128 KiB,
    // on which the far page is a read of its own.
    assert!(!baseline["settings"]["storage"].is_null(), "{baseline:#}");

    // The same program: the steady figures are where they were.
    let (out, report) = gate(&dir, &small);
    let report = report.unwrap_or_else(|| panic!("{}", text(&out)));
    for figure in ["device_read_requests", "device_read_bytes"] {
        assert_eq!(row(&report, figure, "cold")["verdict"], "not_slower", "{}", text(&out));
    }

    // One more page, 3 MiB from the first.
    dir.build(FAR_C, &["-DFAR"]);
    let (out, report) = gate(&dir, &small);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = report.unwrap();
    assert_eq!(report["verdict"], "slower");
    let requests = row(&report, "device_read_requests", "cold");
    assert_eq!(requests["verdict"], "slower", "{}", text(&out));
    assert_eq!(requests["now"].as_f64().unwrap(), requests["baseline"].as_f64().unwrap() + 1.0);
    assert_eq!(row(&report, "device_read_bytes", "cold")["verdict"], "slower");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("coldstart gate: SLOWER"), "{stdout}");
    assert!(stdout.contains("reads of the device, cold"), "{stdout}");
}

#[test]
fn twenty_percent_more_start_up_time_is_caught_on_time() {
    if !require_root("cold runs and the storage emulation") {
        return;
    }
    let _lock = cache_lock();
    let dir = Dir::new();
    // 100 ms and 120 ms of work: a start-up long enough that the machine's other work (the
    // rest of the suite) cannot hide 20 ms of it. (A program that sleeps is slowed less by that
    // work than the calibration loop: on a loaded machine its 20% stayed unclear.)
    dir.build(WORK_C, &["-DMS=100"]);
    let small = ["--page-profiles", "0", "--max-runs", "40"];
    record(&dir, &small);
    dir.build(WORK_C, &["-DMS=120"]);
    // It is never "not slower". When the machine's own load rose since the baseline by about as
    // much as the regression, the gate says unclear (and why), as a CI job re-run would see:
    // caught within three gates.
    let mut attempts = Vec::new();
    let (out, report) = loop {
        let (out, report) =
            gate(&dir, &[&small[..], &["--export-markdown", "summary.md"][..]].concat());
        let report = report.unwrap_or_else(|| panic!("{}", text(&out)));
        for state in ["cold", "hot"] {
            assert_ne!(row(&report, "time", state)["verdict"], "not_slower", "{}", text(&out));
        }
        if out.status.code() == Some(1) || attempts.len() == 2 {
            break (out, report);
        }
        attempts.push(text(&out));
    };
    assert_eq!(out.status.code(), Some(1), "{}\nbefore:\n{}", text(&out), attempts.join("\n"));
    let slower: Vec<&Value> = ["cold", "hot"]
        .iter()
        .map(|s| row(&report, "time", s))
        .filter(|r| r["verdict"] == "slower")
        .collect();
    assert!(!slower.is_empty(), "{}", text(&out));
    for r in slower {
        let ratio = r["time"]["ratio"].as_f64().unwrap();
        assert!(ratio > 1.1, "{ratio}");
    }
    // Nothing but time changed.
    for r in report["figures"].as_array().unwrap() {
        if r["figure"] != "time" {
            assert_ne!(r["verdict"], "slower", "{r:#}");
        }
    }
    let md = fs::read_to_string(dir.path("summary.md")).unwrap();
    assert!(md.starts_with("### ❌ Start-up: slower"), "{md}");
    assert!(md.contains("| time, ") && md.contains("**slower"), "{md}");
}

#[test]
fn a_change_that_only_adds_noise_is_not_flagged_in_20_gate_runs() {
    if !require_root("cold runs and the storage emulation") {
        return;
    }
    let _lock = cache_lock();
    let dir = Dir::new();
    dir.build(SLEEP_C, &["-DMS=20"]);
    let small = ["--page-profiles", "0", "--max-runs", "20"];
    record(&dir, &small);
    // The same median, three times the spread: +-6 ms around 20.
    dir.build(SLEEP_C, &["-DMS=20", "-DJITTER=60"]);
    // How many runs a plain threshold rule (a median ratio above 1.05) would have failed:
    // printed, to show the noise the gate faced.
    let (mut alarms, mut unclear, mut naive, mut verdicts) = (0, 0, 0, Vec::new());
    for _ in 0..20 {
        let (out, report) = gate(&dir, &small);
        let report = report.unwrap_or_else(|| panic!("{}", text(&out)));
        match out.status.code() {
            Some(0) => {}
            Some(1) => alarms += 1,
            _ => panic!("could not measure: {}", text(&out)),
        }
        if report["verdict"] == "unclear" {
            unclear += 1;
        }
        let times: Vec<String> = ["cold", "hot"]
            .iter()
            .map(|s| {
                let r = row(&report, "time", s);
                format!(
                    "{s} {} ({:.3})",
                    r["verdict"],
                    r["time"]["ratio"].as_f64().unwrap_or(f64::NAN)
                )
            })
            .collect();
        if ["cold", "hot"]
            .iter()
            .any(|s| row(&report, "time", s)["time"]["ratio"].as_f64().unwrap_or(0.0) > 1.05)
        {
            naive += 1;
        }
        verdicts.push(format!("{}: {}", report["verdict"], times.join(", ")));
    }
    eprintln!(
        "20 gate runs: {alarms} false alarms, {unclear} unclear; a median ratio above 1.05 would have failed {naive}\n{}",
        verdicts.join("\n")
    );
    assert_eq!(
        alarms,
        0,
        "{alarms} false alarms in 20 gate runs ({unclear} unclear):\n{}",
        verdicts.join("\n")
    );
}

#[test]
fn a_baseline_from_another_kernel_or_disk_or_storage_profile_is_flagged() {
    if !require_root("cold runs and the storage emulation") {
        return;
    }
    let _lock = cache_lock();
    let dir = Dir::new();
    dir.build(SLEEP_C, &["-DMS=5"]);
    let small = ["--page-profiles", "0", "--runs", "5", "--batch", "5", "--max-runs", "5"];
    record(&dir, &small);
    let original = fs::read_to_string(dir.path("b.json")).unwrap();
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut b: Value = serde_json::from_str(&original).unwrap();
        f(&mut b);
        fs::write(dir.path("b.json"), serde_json::to_string(&b).unwrap()).unwrap();
    };
    for (what, change) in [
        (
            "kernel",
            &(|b: &mut Value| b["environment"]["kernel"] = "5.10.0-elsewhere".into())
                as &dyn Fn(&mut Value),
        ),
        ("disk read-ahead", &|b: &mut Value| b["environment"]["disk"]["readahead_kb"] = 128.into()),
    ] {
        edit(change);
        let (out, report) = gate(&dir, &small);
        // Flagged, not compared: unclear, which passes by default and fails on request.
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let report = report.unwrap();
        assert_eq!(report["verdict"], "unclear");
        assert_eq!(report["environment_differences"][0]["what"], what);
        assert!(report["figures"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["verdict"] == "not_compared"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(&format!("the baseline was recorded with {what}")), "{stdout}");
        let (out, _) = gate(&dir, &[&small[..], &["--unclear", "fail"][..]].concat());
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    }
    // A storage profile other than the baseline's is refused before anything runs.
    fs::write(dir.path("b.json"), &original).unwrap();
    let (out, _) = gate(&dir, &[&small[..], &["--storage", "emmc"][..]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--storage") && stderr.contains("hdd") && stderr.contains("emmc"),
        "{stderr}"
    );
}

/// Prints a line, as programs do at start-up.
const CHATTY_C: &str = r#"
#include <stdio.h>
int main(void) { puts("chatty program says hello"); fprintf(stderr, "chatty stderr\n"); return 0; }
"#;

#[test]
fn the_programs_own_output_stays_out_of_the_gates_report() {
    if !require_root("cold runs and page profiles") {
        return;
    }
    let _lock = cache_lock();
    let dir = Dir::new();
    dir.build(CHATTY_C, &[]);
    let small = ["--page-profiles", "2", "--runs", "3", "--batch", "3", "--max-runs", "3"];
    let mut all = vec!["gate", "--baseline", "b.json", "--update"];
    all.extend(small);
    all.extend(["--", "./prog"]);
    let out = coldstart(&all, dir.0.path());
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("chatty"), "{}", text(&out));
    let (out, _) = gate(&dir, &small);
    assert!(!text(&out).contains("chatty"), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("coldstart gate: "), "{}", text(&out));
}

#[test]
fn a_gate_that_cannot_measure_exits_2_and_names_what_to_do() {
    let dir = Dir::new();
    dir.build(SLEEP_C, &["-DMS=1"]);
    let (out, _) = gate(&dir, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no baseline at b.json") && stderr.contains("--update"), "{stderr}");
    fs::write(dir.path("b.json"), "{\"format\": \"coldstart-gate-baseline\", \"version\": 7}")
        .unwrap();
    let (out, _) = gate(&dir, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let (out, _) = gate(&dir, &["--slack", "nonsense=1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown figure"), "{}", text(&out));
}

/// `gate --update` with the baseline on a full disk exited 2 ("could not measure", what a
/// gate says); recording gives no verdict, and a full disk is the machine's failure: 70,
/// naming the baseline, and nothing written.
#[test]
fn gate_update_on_a_full_disk_exits_70_naming_the_baseline() {
    if !require_root("cold runs, mounting a small tmpfs") {
        return;
    }
    let _lock = cache_lock();
    let dir = Dir::new();
    dir.build(SLEEP_C, &["-DMS=1"]);
    let small = common::SmallFs::mount(&dir.path("full"), 256);
    small.fill();
    let baseline = dir.path("full/b.json");
    let args = ["--page-profiles", "0", "--storage", "none", "--runs", "3", "--", "./prog"];
    let mut all = vec!["gate", "--baseline", baseline.to_str().unwrap(), "--update"];
    all.extend(args);
    let out = coldstart(&all, dir.0.path());
    assert_eq!(out.status.code(), Some(70), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("cannot write {}", baseline.display())), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert_eq!(small.contents(), Vec::<String>::new(), "left on the full file system");
}
