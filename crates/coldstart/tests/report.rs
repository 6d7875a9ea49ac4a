//! `coldstart report`: the page opened in real browsers: Debian's Firefox ESR, headless, for a
//! screenshot checked for the charts' colours and its console for script errors; Chromium,
//! headless, for the layout: a checker script measures every chart text where the browser
//! laid it out (nothing cut off, nothing overlapping) and `--dump-dom` prints its verdict.
//!
//! The inputs are one real profile (`coldstart profile` of a small C program whose hot
//! functions are scattered over its code) and measure, order --evaluate, timeline and
//! experiment files written here in their documented formats, with the figures of Debian's
//! python3 measured on this machine's disk and on an emulated hard disk.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use coldstart_formats::{
    BlockRequest, Cell, CellRun, Document, Experiment, FileCost, HotSet, LinkSpec, ModuleSpan,
    PageEvent, Phase, Timeline, TimelineFile, Wait,
};
use common::{check, require_program};

const CS: &str = env!("CARGO_BIN_EXE_coldstart");

/// A program of 48 functions of 1.5 KiB each; start-up calls every sixth one.
fn scattered_program(dir: &Path) -> PathBuf {
    let mut src = String::from("#include <stdio.h>\n");
    for i in 0..48 {
        src.push_str(&format!(
            "__attribute__((noinline)) int f{i}(int x) {{ __asm__ volatile(\".skip 1500, 0x90\"); return x + {i}; }}\n"
        ));
    }
    src.push_str("int main(void) { int s = 0;\n");
    for i in (0..48).step_by(6) {
        src.push_str(&format!("  s += f{i}(s);\n"));
    }
    src.push_str("  printf(\"%d\\n\", s); return 0; }\n");
    coldstart_testkit::compile_c(dir, "scattered", &src, &[])
}

fn measure_json(dir: &Path, name: &str, exe: &str, scale: f64) -> PathBuf {
    let summary = |median: f64| {
        serde_json::json!({"n": 5, "mean": median, "median": median, "trimmed_mean": median,
            "stddev": median * 0.05, "min": median * 0.9, "max": median * 1.1,
            "ci95": [median * 0.95, median * 1.05], "mad": median * 0.03, "outliers": []})
    };
    let commands: Vec<serde_json::Value> = [("cold", 0.080), ("selective", 0.060), ("warm", 0.050), ("hot", 0.004)]
        .iter()
        .map(|(state, wall)| {
            serde_json::json!({"label": state, "command": [exe, "--workload", "b"], "runs": [],
                "summaries": [["wall_s", summary(wall * scale)], ["major_faults", summary((wall * 400.0 * scale).round())]]})
        })
        .collect();
    let m = serde_json::json!({"format": "coldstart-measure", "version": 2, "cache": "cold,selective,warm,hot",
        "ready": "exit", "warmup": 1, "environment": {"kernel": "6.18", "cpus": 2, "cgroup": "v1", "cpu_governor": null, "is_root": true},
        "commands": commands, "comparison": null, "warnings": [],
        "io_share": [{"label": exe, "cache": "cold", "cold_median_s": 0.08 * scale, "hot_median_s": 0.004 * scale,
            "io_s": 0.076 * scale, "fraction": 0.95}]});
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    p
}

/// One entry of a measure file: its label (a cache state, or A/B), command, median wall time
/// and major faults.
struct Entry<'a> {
    label: &'a str,
    command: Vec<String>,
    wall_s: f64,
    faults: f64,
}

/// A `coldstart measure --export-json` file (docs/formats/measure.md) of these entries; with
/// `storage`, run on that emulated device; the I/O share of each command measured cold and hot.
fn measure_file(
    dir: &Path,
    name: &str,
    cache: &str,
    storage: Option<&str>,
    entries: &[Entry],
) -> PathBuf {
    let summary = |median: f64| {
        serde_json::json!({"n": 5, "mean": median, "median": median, "trimmed_mean": median,
            "stddev": median * 0.05, "min": median * 0.9, "max": median * 1.1,
            "ci95": [median * 0.95, median * 1.05], "mad": median * 0.03, "outliers": []})
    };
    let commands: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            serde_json::json!({"label": e.label, "command": e.command, "runs": [],
                "summaries": [["wall_s", summary(e.wall_s)], ["major_faults", summary(e.faults)]]})
        })
        .collect();
    let at = |label: &str| entries.iter().find(|e| e.label == label);
    let io_share: Vec<serde_json::Value> = match (at("cold"), at("hot")) {
        (Some(c), Some(h)) => vec![serde_json::json!({"label": c.command.join(" "),
            "cache": "cold", "cold_median_s": c.wall_s, "hot_median_s": h.wall_s,
            "io_s": c.wall_s - h.wall_s, "fraction": (c.wall_s - h.wall_s) / c.wall_s})],
        _ => Vec::new(),
    };
    let comparison = match (at("A"), at("B")) {
        (Some(a), Some(b)) => serde_json::json!({"metric": "wall_s", "ratio": b.wall_s / a.wall_s,
            "ratio_ci95": [b.wall_s / a.wall_s * 0.9, b.wall_s / a.wall_s * 1.1], "p_value": 0.008}),
        _ => serde_json::Value::Null,
    };
    let storage = storage.map(|p| {
        serde_json::json!({"profile": p, "read_iops": 100, "read_bps": 120_000_000u64,
            "readahead_kb": 128, "paths": [], "host_read_iops": 3581.4, "fidelity_warning": null})
    });
    let m = serde_json::json!({"format": "coldstart-measure", "version": 2, "cache": cache,
        "ready": "exit", "warmup": 1, "environment": {"kernel": "6.18", "cpus": 2, "cgroup": "v1",
        "cpu_governor": null, "is_root": true},
        "commands": commands, "comparison": comparison, "warnings": [], "io_share": io_share,
        "storage": storage});
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    p
}

const PYTHON: [&str; 3] = ["/usr/bin/python3", "-c", "import json, email"];

/// Debian's python3 importing json and email, as measured on this project's test machine:
/// cold and hot on an emulated hard disk, cold and hot on this machine's disk, and on the hard
/// disk with a prefetch (A) against without (B).
fn python_measurements(dir: &Path) -> [PathBuf; 3] {
    let python = || PYTHON.map(String::from).to_vec();
    let launch = [
        "/usr/local/bin/coldstart",
        "launch",
        "--prefetch",
        "/var/tmp/py.prefetch",
        "--",
        PYTHON[0],
        PYTHON[1],
        PYTHON[2],
    ]
    .map(String::from)
    .to_vec();
    let e = |label, command, wall_s, faults| Entry { label, command, wall_s, faults };
    [
        measure_file(
            dir,
            "measure-hdd.json",
            "cold,hot",
            Some("hdd"),
            &[e("cold", python(), 6.99, 45.0), e("hot", python(), 0.21, 0.0)],
        ),
        measure_file(
            dir,
            "measure-local.json",
            "cold,hot",
            None,
            &[e("cold", python(), 0.0537, 9.0), e("hot", python(), 0.0263, 0.0)],
        ),
        measure_file(
            dir,
            "measure-prefetch.json",
            "cold",
            Some("hdd"),
            &[e("A", launch, 0.787, 39.0), e("B", python(), 6.06, 45.0)],
        ),
    ]
}

/// `coldstart report INPUTS -o DIR/report.html`: the page, and what the command printed.
fn report_of(dir: &Path, inputs: &[PathBuf]) -> (PathBuf, String) {
    let page = dir.join("report.html");
    let out =
        check(&Command::new(CS).arg("report").args(inputs).arg("-o").arg(&page).output().unwrap());
    (page, out)
}

/// The rows of a CSV file the report wrote, each a map from the header's names.
fn csv_rows(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // RFC 4180 as the report writes it: a field with a comma is quoted.
    let split = |line: &str| {
        let mut out = vec![String::new()];
        let mut quoted = false;
        for c in line.chars() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => out.push(String::new()),
                c => out.last_mut().unwrap().push(c),
            }
        }
        out
    };
    let mut lines = text.lines();
    let header = split(lines.next().unwrap());
    lines.map(|l| header.iter().cloned().zip(split(l)).collect()).collect()
}

/// Two files of one program (its hard-disk and its local measurement) and a comparison: each
/// file's commands stay series of their own, named by file, command and storage, in the CSV
/// and in the charts; the comparison's B row is in the CSV. Before, the B row (the same
/// command as the hard-disk file's, in the same state) was dropped, and the hard-disk file's
/// 6.99 s stood in one series beside the other file's prefetched 787 ms.
#[test]
fn each_measure_files_series_stay_apart_and_a_comparisons_b_row_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (page, _) = report_of(dir, &python_measurements(dir));
    let rows = csv_rows(&dir.join("report-startup.csv"));
    let row = |file: &str, label: &str| {
        let found: Vec<_> =
            rows.iter().filter(|r| r["file"] == file && r["label"] == label).collect();
        assert_eq!(found.len(), 1, "one row of {file} {label}: {rows:#?}");
        found[0].clone()
    };
    assert_eq!(rows.len(), 6, "a row per file, command and state: {rows:#?}");
    let b = row("measure-prefetch.json", "B");
    assert_eq!(b["median_s"], "6.06");
    assert_eq!((b["storage"].as_str(), b["cache"].as_str()), ("hdd", "cold"));
    assert_eq!(b["series"], "B: python3 -c 'import json, email' without prefetch");
    let a = row("measure-prefetch.json", "A");
    assert_eq!(a["series"], "A: python3 -c 'import json, email' with prefetch (py.prefetch)");
    assert_eq!(row("measure-hdd.json", "cold")["median_s"], "6.99");
    assert_eq!(row("measure-hdd.json", "cold")["storage"], "hdd");
    assert_eq!(row("measure-local.json", "cold")["storage"], "local");
    let series: std::collections::HashSet<(String, String)> =
        rows.iter().map(|r| (r["file"].clone(), r["series"].clone())).collect();
    assert_eq!(series.len(), 4, "four series: {series:?}");

    // The charts: a legend entry per series, named by its command and file, and in the hard
    // disk's chart of start-up three bars of three series in the cold group.
    let html = std::fs::read_to_string(&page).unwrap();
    for name in [
        "python3 -c &#39;import json, email&#39; (measure-hdd.json)",
        "python3 -c &#39;import json, email&#39; (measure-local.json)",
        "A: python3 -c &#39;import json, email&#39; with prefetch (py.prefetch) (measure-prefetch.json)",
        "B: python3 -c &#39;import json, email&#39; without prefetch (measure-prefetch.json)",
    ] {
        assert!(html.contains(&format!("</i>{name}</span>")), "no legend entry {name}");
    }
    let hdd = html.split("On an emulated hdd").nth(1).expect("a heading for the hard disk");
    let wall = hdd.split("</svg>").next().unwrap();
    let keys: std::collections::HashSet<&str> =
        wall.split("data-key=\"").skip(1).filter_map(|k| k.split('"').next()).collect();
    assert_eq!(keys.len(), 3, "three series in the hard disk's chart: {keys:?}");
    let titles: Vec<&str> =
        wall.split("<title>").skip(1).filter_map(|t| t.split("</title>").next()).collect();
    for (value, file) in [
        ("6.99 s", "measure-hdd.json"),
        ("787.0 ms", "measure-prefetch.json"),
        ("6.06 s", "measure-prefetch.json"),
    ] {
        let bar = titles.iter().find(|t| t.contains(&format!("median {value}")));
        assert!(
            bar.is_some_and(|t| t.contains(&format!("({file})")) && t.contains("emulated hdd")),
            "no bar of {value} from {file} on the hard disk: {titles:#?}"
        );
    }
}

/// The page's top: when it was made as a date, each comparison as a gain ("7.7x faster", not
/// "+674%"), and every card naming what it is of (storage, cache state, file), where two
/// cards said "51%" and "97%" without saying which was the hard disk.
#[test]
fn the_cards_say_what_each_figure_is_of_and_a_gain_as_times_faster() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (page, out) = report_of(dir, &python_measurements(dir));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("seconds since the epoch"), "the date is a number of seconds");
    let made = html.split("made <time datetime=\"").nth(1).expect("a <time> in the header");
    let date = &made[..20];
    assert!(
        date.len() == 20
            && date.as_bytes()[10] == b'T'
            && date.ends_with('Z')
            && date.starts_with("20"),
        "an ISO 8601 date in UTC: {made:.60}"
    );
    let cards: Vec<&str> =
        out.lines().filter(|l| l.starts_with("  ") && l.contains(": ")).collect();
    let card = |value: &str| {
        cards
            .iter()
            .find(|c| c.trim_start().starts_with(&format!("{value}: ")))
            .unwrap_or_else(|| panic!("no card {value}: {cards:#?}"))
            .to_string()
    };
    let gain = card("7.7x faster");
    for part in [
        "cold start-up",
        "emulated hdd",
        "with prefetch (py.prefetch) against without",
        "787.0 ms against 6.06 s",
        "(measure-prefetch.json)",
    ] {
        assert!(gain.contains(part), "{gain:?} does not say {part:?}");
    }
    assert!(!html.contains("+670%"), "a gain written as a percent");
    let hdd = card("97%");
    let local = card("51%");
    for (c, storage, file) in [
        (&hdd, "on an emulated hdd", "measure-hdd.json"),
        (&local, "on this machine's disk", "measure-local.json"),
    ] {
        for part in ["cold start-up", storage, file] {
            assert!(c.contains(part), "{c:?} does not say {part:?}");
        }
    }
}

fn evaluation_json(dir: &Path) -> PathBuf {
    let row = |layout: &str, faults: u64| serde_json::json!({"layout": layout, "cost": {"pages_touched": faults * 2, "faults": faults, "pages_read": faults * 8, "curve": []}});
    let e = serde_json::json!({"holdout": "b", "model": {"page_size": 4096, "readahead": 131072, "read_around": "kernel"},
        "rows": [row("default", 40), row("first-touch + callees", 12), row("ideal", 9)],
        "best": "first-touch", "best_unprofiled": "callees", "unknown_functions": 0});
    let p = dir.join("evaluate.json");
    std::fs::write(&p, serde_json::to_string_pretty(&e).unwrap()).unwrap();
    p
}

fn timeline_json(dir: &Path) -> PathBuf {
    let mut t = Timeline::new(vec!["/opt/app/bin/app".into(), "b".into()]);
    t.wall_s = 0.120;
    for (i, name) in ["exec", "loader", "relocation", "constructors", "main"].iter().enumerate() {
        let b = [0.0, 0.004, 0.040, 0.070, 0.080, 0.118];
        t.phases.push(Phase { name: (*name).into(), start_s: b[i], end_s: b[i + 1] });
    }
    t.files = vec![
        TimelineFile { path: "/opt/app/bin/app".into(), dev: "254:1".into(), ino: 12 },
        TimelineFile { path: "/opt/app/lib/libbig.so".into(), dev: "254:1".into(), ino: 13 },
    ];
    for k in 0..60 {
        let t_s = 0.002 + k as f64 * 0.0019;
        t.events.push(PageEvent {
            t_s,
            file: k % 2,
            page: k as u64,
            count: 1,
            kind: "fault".into(),
            pid: 7,
        });
        t.events.push(PageEvent {
            t_s: t_s + 0.0005,
            file: k % 2,
            page: k as u64 + 1,
            count: 4,
            kind: "read".into(),
            pid: 7,
        });
        t.block.push(BlockRequest {
            dev: "254:0".into(),
            sector: k as u64 * 64,
            bytes: 16384,
            write: false,
            issue_s: t_s,
            complete_s: Some(t_s + 0.0012),
        });
        t.waits.push(Wait { pid: 7, start_s: t_s, end_s: t_s + 0.0013, file: Some(k % 2) });
    }
    t.io_wait_s = 0.078;
    t.io_wait_wall_s = 0.078;
    t.costs = vec![
        FileCost { file: 1, pages_read: 120, faults: 30, wait_s: 0.04 },
        FileCost { file: 0, pages_read: 90, faults: 30, wait_s: 0.038 },
    ];
    t.modules = vec![ModuleSpan {
        path: "/opt/app/bin/app".into(),
        first_s: 0.08,
        last_s: 0.11,
        functions: 300,
    }];
    let p = dir.join("timeline.json");
    t.write(&p).unwrap();
    p
}

/// A timeline of Debian's python3 on an emulated hard disk, as `timeline --storage hdd`
/// wrote it on this project's test machine: long library paths, a command with spaces.
fn python_timeline(dir: &Path) -> PathBuf {
    let mut t = Timeline::new(PYTHON.map(String::from).to_vec());
    t.wall_s = 0.8827;
    let ends = [0.0, 0.0774, 0.8737, 0.8739, 0.8827];
    for (i, name) in ["exec", "loader", "relocation", "program"].iter().enumerate() {
        t.phases.push(Phase { name: (*name).into(), start_s: ends[i], end_s: ends[i + 1] });
    }
    let paths = [
        "/usr/bin/python3.11",
        "/dev/vda (file system metadata)",
        "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so",
        "/usr/lib/python3.11/email/__pycache__/_header_value_parser.cpython-311.pyc",
        "",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
    ];
    for (i, p) in paths.iter().enumerate() {
        t.files.push(TimelineFile { path: (*p).into(), dev: "7:0".into(), ino: 20 + i as u64 });
        t.costs.push(FileCost {
            file: i,
            pages_read: 100,
            faults: 10,
            wait_s: 0.1 / (i + 1) as f64,
        });
        for k in 0..20 {
            let t_s = 0.01 + k as f64 * 0.04 + i as f64 * 0.002;
            t.events.push(PageEvent {
                t_s,
                file: i,
                page: k,
                count: 4,
                kind: "read".into(),
                pid: 7,
            });
        }
    }
    for k in 0..40 {
        let t_s = 0.005 + k as f64 * 0.02;
        t.block.push(BlockRequest {
            dev: "7:0".into(),
            sector: k * 256,
            bytes: 131072,
            write: false,
            issue_s: t_s,
            complete_s: Some(t_s + 0.011),
        });
        t.waits.push(Wait { pid: 7, start_s: t_s, end_s: t_s + 0.012, file: Some(0) });
    }
    t.io_wait_s = 1.53;
    t.io_wait_wall_s = 0.867;
    for (path, first_s, last_s) in [
        (paths[0], 0.19, 0.84),
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", 0.19, 0.84),
        (paths[2], 0.72, 0.73),
    ] {
        t.modules.push(ModuleSpan { path: path.into(), first_s, last_s, functions: 300 });
    }
    let p = dir.join("timeline.json");
    t.write(&p).unwrap();
    // Run on the emulated hard disk (the field `timeline --storage` writes).
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["storage"] = "hdd".into();
    std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
    p
}

fn experiment_json(dir: &Path) -> PathBuf {
    let mut e = Experiment::new();
    e.program.command = vec!["bin/app".into(), "b".into()];
    e.program.profiled = vec!["bin/app".into(), "a".into()];
    e.program.bytes = 1_079_840;
    e.program.files = 2;
    e.settings.runs = 1;
    e.settings.chunk_size = 16384;
    e.settings.readahead = 16384;
    e.settings.caches = vec!["cold".into()];
    e.local_s = Some(0.004);
    e.hot_set = Some(HotSet { bytes: 293_408, chunks: 18 });
    let strategies = ["original", "paged", "reordered-paged", "reordered", "stream", "auto"];
    e.settings.strategies = strategies.iter().map(|s| s.to_string()).collect();
    for (bw, bw_label) in [(256e3, "256kbit"), (1e6, "1mbit"), (3e6, "3mbit")] {
        for lat in [0.01, 0.1] {
            let label = format!("{bw_label}/{}ms", lat * 1e3);
            let link = LinkSpec { label, bits_per_second: bw, latency_s: lat };
            e.settings.links.push(link.clone());
            for s in strategies {
                // Eq. 1 with each strategy's bytes and requests, as a stand-in for a measurement.
                let (bytes, requests): (u64, u64) = match s {
                    "original" => (1_082_865, 3),
                    "paged" => (296_433, 19),
                    _ => (345_657, 4),
                };
                let wall = bytes as f64 * 8.0 / bw + requests as f64 * lat + 0.004;
                e.cells.push(Cell {
                    link: link.clone(),
                    strategy: s.into(),
                    cache: "cold".into(),
                    runs: vec![CellRun {
                        wall_s: wall * 1.1,
                        bytes_fetched: bytes,
                        requests,
                        stall_s: requests as f64 * lat,
                        exit_code: Some(0),
                        chosen: (s == "auto").then(|| "reordered-paged".into()),
                        teardown_s: None,
                        held_out_misses: None,
                        held_out_bytes: None,
                        other_bytes: None,
                        auto_link: None,
                    }],
                    predicted_s: Some(wall),
                    predicted_choice: Some("reordered-paged".into()),
                    predicted_measured_s: None,
                });
            }
        }
    }
    let p = dir.join("experiment.json");
    e.write(&p).unwrap();
    p
}

/// A screenshot of `page` by headless Firefox, and what it wrote on stderr.
fn screenshot(
    dir: &Path,
    page: &Path,
    height: u32,
) -> (png::Decoder<std::io::BufReader<std::fs::File>>, String) {
    let profile = tempfile::tempdir_in(dir).unwrap();
    // Firefox prints the page's uncaught errors on stderr (`JavaScript error: URL, line N:
    // ...`) when dump() output is enabled.
    std::fs::write(
        profile.path().join("user.js"),
        "user_pref(\"browser.dom.window.dump.enabled\", true);\n",
    )
    .unwrap();
    let shot = dir.join(format!("shot-{}.png", page.file_stem().unwrap().to_string_lossy()));
    let out = Command::new("firefox-esr")
        .args(["--headless", "--no-remote", "--profile"])
        .arg(profile.path())
        .arg("--screenshot")
        .arg(&shot)
        .arg(format!("--window-size=1300,{height}"))
        .arg(format!("file://{}", page.display()))
        .env("HOME", profile.path())
        .output()
        .expect("firefox-esr runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(shot.is_file(), "Firefox wrote no screenshot ({}): {stderr}", out.status);
    (png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap())), stderr)
}

/// What the layout checker (tests/report_layout.js) found in a copy of `page` laid out by
/// headless Chromium in a window 1300 pixels wide: `checked N labels at 1300 px: ok`, or the
/// problems, one a line. The report itself stays as it is: the checker goes into the copy.
fn layout_verdict(dir: &Path, page: &Path) -> String {
    let html = std::fs::read_to_string(page).unwrap();
    let copy = dir.join(format!("layout-{}.html", page.file_stem().unwrap().to_string_lossy()));
    let checker = include_str!("report_layout.js");
    std::fs::write(&copy, html.replace("</body>", &format!("<script>{checker}</script></body>")))
        .unwrap();
    let profile = tempfile::tempdir_in(dir).unwrap();
    // Root needs --no-sandbox; the rest keeps Chromium off the network (there is none here)
    // and out of any profile but a fresh one.
    let out = Command::new("timeout")
        .args(["--kill-after=5", "120", "chromium", "--headless", "--no-sandbox", "--disable-gpu"])
        .args(["--no-first-run", "--disable-background-networking", "--disable-component-update"])
        .args(["--disable-sync", "--window-size=1300,1000", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", copy.display()))
        .env("HOME", profile.path())
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    let tag = "<pre id=\"layout-verdict\">";
    let Some(at) = dom.rfind(tag) else {
        panic!(
            "Chromium printed no verdict ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let verdict = dom[at + tag.len()..].split("</pre>").next().unwrap_or_default();
    verdict
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// Nothing on the page is cut off or drawn over anything else at 1300 pixels: chart titles,
/// tick labels, axis titles, bar values and a timeline's track labels, measured where the
/// browser put them. Before, a chart's title ran past its chart, the y axis's title overlapped
/// its tick labels, and the timeline's track labels were cut and spilled past their panel.
#[test]
fn the_report_has_nothing_cut_off_or_overlapping_at_1300_px() {
    if !require_program("chromium", "chromium") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut inputs = python_measurements(dir).to_vec();
    inputs.extend([evaluation_json(dir), python_timeline(dir), experiment_json(dir)]);
    let (page, _) = report_of(dir, &inputs);
    let verdict = layout_verdict(dir, &page);
    assert!(verdict.ends_with(": ok"), "{verdict}");
    let checked: usize = verdict
        .strip_prefix("checked ")
        .and_then(|v| v.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(checked >= 150, "the checker saw only {checked} labels: {verdict}");

    // The check can fail: the same page with a title running past its chart and two labels
    // on one spot.
    let html = std::fs::read_to_string(&page).unwrap();
    let broken = dir.join("broken.html");
    let long = "a title far too long for the chart it is on, running past its right edge";
    std::fs::write(
        &broken,
        html.replacen(
            "</svg>",
            &format!(
                r#"<text x="5" y="30" class="ttl">{long} {long}</text><text x="5" y="60" class="lbl">one</text><text x="8" y="62" class="lbl">two</text></svg>"#
            ),
            1,
        ),
    )
    .unwrap();
    let verdict = layout_verdict(dir, &broken);
    assert!(!verdict.ends_with(": ok"), "{verdict}");
    assert!(
        verdict.contains("cut off: #startup") && verdict.contains("a title far too long"),
        "{verdict}"
    );
    assert!(
        verdict.contains(r#"overlap: #startup svg "(a) start-up"#)
            && verdict.contains(r#"text "two""#),
        "{verdict}"
    );
}

/// How many pixels of each colour (RGB) the screenshot has.
fn colours(
    decoder: png::Decoder<std::io::BufReader<std::fs::File>>,
) -> std::collections::HashMap<[u8; 3], usize> {
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    assert!(step >= 3, "an RGB(A) screenshot: {:?}", info.color_type);
    let mut counts = std::collections::HashMap::new();
    for px in buf[..info.buffer_size()].chunks(step) {
        *counts.entry([px[0], px[1], px[2]]).or_insert(0) += 1;
    }
    counts
}

fn rgb(hex: &str) -> [u8; 3] {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap();
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

/// Pixels within 3 of `hex` on every channel.
fn pixels(counts: &std::collections::HashMap<[u8; 3], usize>, hex: &str) -> usize {
    let want = rgb(hex);
    counts
        .iter()
        .filter(|(c, _)| c.iter().zip(want).all(|(a, b)| a.abs_diff(b) <= 3))
        .map(|(_, n)| n)
        .sum()
}

/// JavaScript errors Firefox reported from the page itself (its own internals report some
/// of their own at shutdown, under `resource://`).
fn page_errors(stderr: &str, page: &Path) -> Vec<String> {
    let me = format!("JavaScript error: file://{}", page.display());
    stderr.lines().filter(|l| l.starts_with(&me)).map(str::to_owned).collect()
}

#[test]
fn the_report_renders_its_charts_in_a_real_browser_without_script_errors() {
    if !require_program("firefox-esr", "firefox-esr") || !require_program("clang-19", "clang-19") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let prog = scattered_program(dir);
    let profile = dir.join("profile.json");
    check(
        &Command::new(CS)
            .args(["profile", "--workload", "b", "-o"])
            .arg(&profile)
            .arg("--")
            .arg(&prog)
            .output()
            .unwrap(),
    );
    let prog_s = prog.display().to_string();
    let inputs = [
        measure_json(dir, "measure.json", &prog_s, 1.0),
        measure_json(dir, "measure-ordered.json", "/opt/ordered/scattered", 0.6),
        profile,
        evaluation_json(dir),
        timeline_json(dir),
        experiment_json(dir),
    ];
    let page = dir.join("report.html");
    let out =
        check(&Command::new(CS).arg("report").args(&inputs).arg("-o").arg(&page).output().unwrap());
    for section in ["Figure 5", "Page maps", "order --evaluate", "timeline", "Figures 3 and 4"] {
        assert!(out.contains(section), "the report has no section on {section}: {out}");
    }
    for csv in ["startup", "pages", "layouts", "phases", "network", "auto"] {
        let p = dir.join(format!("report-{csv}.csv"));
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(text.lines().count() > 1, "{} has no rows", p.display());
    }
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains(" src="), "the page loads nothing from elsewhere");
    if require_program("chromium", "chromium") {
        let verdict = layout_verdict(dir, &page);
        assert!(verdict.ends_with(": ok"), "{verdict}");
    }

    let (shot, stderr) = screenshot(dir, &page, 9000);
    assert_eq!(page_errors(&stderr, &page), Vec::<String>::new(), "script errors");
    let counts = colours(shot);
    // Each chart's own colours, in areas larger than a legend's swatches (121 pixels each):
    // the bars of Figures 3 to 5, the page map, the timeline's phases.
    for (what, hex) in [
        ("Figure 5, the first command", "#0072b2"),
        ("Figure 5, the second command", "#e69f00"),
        ("Figures 3 and 4, reordered-paged", "#56b4e9"),
        ("Figures 3 and 4, reordered", "#009e73"),
        ("Figures 3 and 4, stream", "#cc79a7"),
        ("Figures 3 and 4, auto", "#d55e00"),
        ("the page map, touched pages", "#c0392b"),
        ("the page map, untouched pages", "#dfe3e8"),
        ("the timeline, the loader", "#4e79a7"),
        ("the timeline, relocation", "#f28e2b"),
        ("the timeline, constructors", "#59a14f"),
        ("the timeline, main", "#edc948"),
    ] {
        let n = pixels(&counts, hex);
        assert!(n >= 800, "{what} ({hex}): {n} pixels in the screenshot; did the chart render?");
    }
    assert_eq!(pixels(&counts, "#b00020"), 0, "the page shows a script error");

    // The check of script errors can fail: the same page with a script that throws.
    let broken = dir.join("broken.html");
    std::fs::write(
        &broken,
        html.replace("</footer>", "</footer><script>noSuchFunction();</script>"),
    )
    .unwrap();
    let (shot, stderr) = screenshot(dir, &broken, 1200);
    assert_eq!(page_errors(&stderr, &broken).len(), 1, "{stderr}");
    assert!(pixels(&colours(shot), "#b00020") > 1000, "the page shows its script error");
}
