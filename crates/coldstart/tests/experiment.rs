//! `coldstart experiment` on the small sample program, for real: the bundle served over emulated
//! links (as `serve --link`), mounted with FUSE, the held-out workload started from it. A small
//! grid keeps every cell with its figures; an interrupted experiment keeps the cells it
//! measured and, run again, measures only the others.

mod common;
use common::{check, require, require_root};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use coldstart_formats::{Document, Experiment};
use coldstart_sample::Config;

/// The small sample's files a user would ship (its sources left out), in a fresh directory.
fn program(tmp: &Path) -> Option<PathBuf> {
    if !require_root("FUSE mounts") {
        return None;
    }
    if !require(coldstart_sample::check_tools().is_ok(), "the sample's tools (clang-19, lld-19)") {
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("coldstart-measure-sample-small");
    let sample =
        coldstart_sample::build_cached(&Config::default(), &dir).expect("build the small sample");
    let prog = tmp.join("prog");
    sample.install(&prog).expect("install the sample's files");
    Some(prog)
}

fn experiment(prog: &Path, out: &Path, grid: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_coldstart"));
    c.arg("experiment").arg(prog).arg("-o").arg(out).args(grid).args([
        "--profiled",
        "sample --workload a",
        "--",
        "sample",
        "--workload",
        "b",
    ]);
    c
}

/// Mounts under `dir` still in the mount table.
fn mounts_under(dir: &Path) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let dir = dir.to_string_lossy();
    table.lines().filter(|l| l.contains(dir.as_ref())).map(str::to_owned).collect()
}

#[test]
fn a_small_grid_on_the_sample_measures_every_cell_over_the_emulated_links() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(prog) = program(tmp.path()) else { return };
    let out = tmp.path().join("exp.json");
    let printed = check(
        &experiment(
            &prog,
            &out,
            &[
                "--link",
                "4mbit/20ms,40mbit/5ms",
                "--strategy",
                "original,paged,stream,auto",
                "--cache",
                "cold",
                "--runs",
                "1",
            ],
        )
        .output()
        .unwrap(),
    );
    let e = Experiment::read(&out).unwrap();
    assert_eq!(e.cells.len(), 2 * 4, "every cell of the grid: {printed}");
    assert!(e.program.bytes > 100_000 && e.program.files >= 5, "{:?}", e.program);
    assert!(e.hot_set.as_ref().is_some_and(|h| h.bytes > 0), "the profiled workload's reads");
    for c in &e.cells {
        let what = format!("{} {} {}", c.link.label, c.cache, c.strategy);
        assert_eq!(c.runs.len(), 1, "{what}");
        assert_eq!(c.runs[0].exit_code, Some(0), "{what}: the program ran from the mount");
        assert!(c.predicted_s.is_some_and(|p| p > 0.0), "{what}: predict's figure");
        assert!(c.runs[0].requests > 0, "{what}");
        assert!(printed.contains(&c.link.label), "{what} printed");
        let bound = c.runs[0].bytes_fetched as f64 * 8.0 / c.link.bits_per_second;
        assert!(
            c.runs[0].wall_s >= 0.9 * bound,
            "{what}: {} bytes cannot arrive in {:.3} s over the link",
            c.runs[0].bytes_fetched,
            c.runs[0].wall_s
        );
    }
    for link in ["4mbit/20ms", "40mbit/5ms"] {
        let original = e.cell(link, "original", "cold").unwrap();
        assert!(
            original.runs[0].bytes_fetched >= e.program.bytes,
            "original downloads every file: {} of {}",
            original.runs[0].bytes_fetched,
            e.program.bytes
        );
        // The manifest, then whole objects (the hot part, each file's cold pieces): a
        // request per object, never one per piece.
        assert!(original.runs[0].requests >= 2, "the manifest and the objects");
        assert!(
            original.runs[0].requests <= e.program.files + 2,
            "at most one request per file, the hot part and the manifest: {}",
            original.runs[0].requests
        );
        let paged = e.cell(link, "paged", "cold").unwrap();
        assert!(
            paged.runs[0].bytes_fetched < original.runs[0].bytes_fetched,
            "paged fetches only what the held-out workload reads"
        );
        let auto = e.cell(link, "auto", "cold").unwrap();
        assert!(auto.chosen().is_some(), "auto names its choice");
        // ... and the link it measured, which its choice was made on.
        let measured = auto.runs[0].auto_link.expect("auto records its link");
        assert!(measured.bits_per_second > 0.0 && measured.latency_s >= 0.0, "{measured:?}");
        assert!(e.cell(link, "paged", "cold").unwrap().runs[0].auto_link.is_none());
    }
    let slow = e.cell("4mbit/20ms", "original", "cold").unwrap().runs[0].wall_s;
    let fast = e.cell("40mbit/5ms", "original", "cold").unwrap().runs[0].wall_s;
    assert!(slow > fast, "the slower link takes longer: {slow:.3} s against {fast:.3} s");
    assert!(mounts_under(tmp.path()).is_empty(), "no mount left");
}

#[test]
fn an_interrupted_experiment_resumes_without_measuring_its_finished_cells_again() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(prog) = program(tmp.path()) else { return };
    let out = tmp.path().join("exp.json");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("keep"), "a file of the user's").unwrap();
    // About 1.9 s per start of `original` at 2 Mbit/s: time to stop it after the first cell.
    let grid = [
        "--link",
        "2mbit/20ms",
        "--strategy",
        "original,paged,stream",
        "--cache",
        "cold",
        "--runs",
        "2",
        "--work-dir",
        work.to_str().unwrap(),
    ];
    let mut child = experiment(&prog, &out, &grid)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while Experiment::read(&out).map_or(true, |e| e.cells.is_empty()) {
        assert!(t0.elapsed() < Duration::from_secs(120), "no cell written in 2 minutes");
        assert!(child.try_wait().unwrap().is_none(), "it ended before a cell was written");
        std::thread::sleep(Duration::from_millis(20));
    }
    common::signal(child.id(), libc::SIGINT);
    let stopped = child.wait_with_output().unwrap();
    assert_eq!(stopped.status.code(), Some(130), "{}", String::from_utf8_lossy(&stopped.stderr));
    assert!(
        String::from_utf8_lossy(&stopped.stderr).contains("run the same command again"),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    let kept = Experiment::read(&out).unwrap();
    assert!(!kept.cells.is_empty() && kept.cells.len() < 3, "{} cells kept", kept.cells.len());
    assert!(mounts_under(tmp.path()).is_empty(), "no mount left");
    let left: Vec<_> = std::fs::read_dir(&work).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, ["keep"], "the experiment's own directory removed, nothing else");

    check(&experiment(&prog, &out, &grid).output().unwrap());
    let done = Experiment::read(&out).unwrap();
    assert_eq!(done.cells.len(), 3, "the missing cells measured");
    for k in &kept.cells {
        let now = done.cell(&k.link.label, &k.strategy, &k.cache).unwrap();
        let runs = |c: &coldstart_formats::Cell| serde_json::to_string(&c.runs).unwrap();
        assert_eq!(runs(now), runs(k), "{} kept as measured, not measured again", k.strategy);
    }
}

#[test]
fn an_output_holding_another_experiment_is_refused_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("prog");
    std::fs::create_dir(&prog).unwrap();
    std::fs::write(prog.join("app"), "#!/bin/sh\n").unwrap();
    let out = tmp.path().join("exp.json");
    let mut other = Experiment::new();
    other.program.dir = PathBuf::from("/elsewhere");
    other.write(&out).unwrap();
    let before = std::fs::read(&out).unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .arg("experiment")
        .arg(&prog)
        .arg("-o")
        .arg(&out)
        .args(["--", "app"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stderr).contains("another experiment"));
    assert_eq!(std::fs::read(&out).unwrap(), before, "the other experiment is kept");
}
