//! Snapshot-style tests of the exporters on a small hand-built report.

use super::*;
use coldstart_formats::measure::{
    from_json, Environment, EvictionReport, ReadError, FORMAT_NAME, FORMAT_VERSION,
};

fn summary(median: f64, trimmed: f64, ci: (f64, f64), n: usize, outliers: Vec<usize>) -> Summary {
    Summary { n, median, trimmed_mean: trimmed, ci95: ci, outliers, ..Summary::default() }
}

fn run(index: usize, wall_s: f64, major: Option<u64>, excluded: Option<&str>) -> RunRecord {
    RunRecord {
        index,
        outcome: Outcome::Ready,
        counters: Counters {
            wall_s,
            user_s: Some(0.004),
            sys_s: None,
            major_faults: major,
            minor_faults: Some(812),
            read_bytes: major.map(|m| m * 4096),
            read_requests: major.map(|m| m / 4),
            peak_memory_bytes: Some(3 * 1024 * 1024),
            instructions: None,
            storage_read_requests: None,
            storage_read_bytes: None,
        },
        eviction: Some(EvictionReport {
            files: 3,
            held: excluded.is_none(),
            resident_pages_after: if excluded.is_some() { 12 } else { 0 },
            total_pages: 300,
            method: "cachestat".into(),
            ..EvictionReport::default()
        }),
        held_by_others: None,
        excluded: excluded.map(str::to_string),
        stderr_tail: Vec::new(),
    }
}

/// Two commands, one excluded run, a comparison and a warning.
fn report() -> MeasureReport {
    let a = CommandResult {
        label: "A".into(),
        command: vec!["./sample".into(), "--mode".into(), "a".into()],
        runs: vec![
            run(0, 0.0123, Some(150), None),
            run(
                1,
                0.0051,
                Some(3),
                Some("eviction did not hold: /opt/app/lib.so held by pid 42 (editor)"),
            ),
            run(2, 0.0119, Some(152), None),
            run(3, 0.0131, Some(149), None),
        ],
        summaries: vec![
            ("wall_s".into(), summary(0.0123, 0.0123, (0.0119, 0.0131), 3, vec![])),
            ("major_faults".into(), summary(150.0, 150.0, (149.0, 152.0), 3, vec![])),
            ("read_bytes".into(), summary(614400.0, 614400.0, (610304.0, 622592.0), 3, vec![])),
            ("read_requests".into(), summary(37.0, 37.0, (37.0, 38.0), 3, vec![])),
        ],
    };
    let b = CommandResult {
        label: "B".into(),
        command: vec!["./sample".into(), "--mode".into(), "b|c".into()],
        runs: vec![
            run(0, 0.0152, Some(201), None),
            run(1, 0.0149, Some(199), None),
            run(2, 0.0161, Some(200), None),
        ],
        summaries: vec![
            ("wall_s".into(), summary(0.0152, 0.0152, (0.0149, 0.0161), 3, vec![2])),
            ("major_faults".into(), summary(200.0, 200.0, (199.0, 201.0), 3, vec![])),
            ("read_bytes".into(), summary(819200.0, 819200.0, (815104.0, 823296.0), 3, vec![])),
            ("read_requests".into(), summary(50.0, 50.0, (49.0, 50.0), 3, vec![])),
        ],
    };
    MeasureReport {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        cache: "selective".into(),
        ready: "exit".into(),
        warmup: 1,
        environment: Environment {
            kernel: "6.18.0".into(),
            cpus: 2,
            cgroup: "v1".into(),
            cpu_governor: None,
            is_root: true,
            page_reclaim: None,
        },
        commands: vec![a, b],
        comparison: Some(Comparison {
            metric: "wall_s".into(),
            ratio: 1.2357,
            ratio_ci95: (1.1, 1.35),
            p_value: 0.0021,
            change: None,
        }),
        io_share: Vec::new(),
        warnings: vec!["1 run excluded: eviction did not hold; stop pid 42 (editor)".into()],
        storage: None,
        resident_holds: Vec::new(),
    }
}

#[test]
fn table_snapshot() {
    let expected = "\
A: ./sample --mode a
  Time (median):               12.3 ms   95% CI [11.9 ms, 13.1 ms]   trimmed mean 12.3 ms
  Major faults (median):       150
  Read from storage (median):  600.0 KiB
  Read requests (median):      37
  Runs:                        3 included, 1 excluded (eviction did not hold: 1)

B: ./sample --mode b|c
  Time (median):               15.2 ms   95% CI [14.9 ms, 16.1 ms]   trimmed mean 15.2 ms
  Major faults (median):       200
  Read from storage (median):  800.0 KiB
  Read requests (median):      50
  Runs:                        3 included, 0 excluded
  Outliers:                    1 of wall time

B (./sample --mode b|c) is 1.24x slower than A (./sample --mode a) [1.10, 1.35], p = 0.002

Warning: 1 run excluded: eviction did not hold; stop pid 42 (editor)
";
    assert_eq!(to_table(&report()), expected);
}

#[test]
fn markdown_snapshot() {
    let expected = "\
# Start-up measurement

Cache state `selective`, readiness `exit`, 1 warm-up run. Linux 6.18.0, 2 CPUs, cgroup v1.

## A: `./sample --mode a`

Runs: 3 included, 1 excluded (eviction did not hold: 1).

| metric | median | trimmed mean | 95% CI of the median | n | outliers |
| --- | ---: | ---: | ---: | ---: | ---: |
| wall time | 12.3 ms | 12.3 ms | 11.9 ms – 13.1 ms | 3 | 0 |
| major faults | 150 | 150 | 149 – 152 | 3 | 0 |
| read from storage | 600.0 KiB | 600.0 KiB | 596.0 KiB – 608.0 KiB | 3 | 0 |
| read requests | 37 | 37 | 37 – 38 | 3 | 0 |

Excluded runs:

- run 1: eviction did not hold: /opt/app/lib.so held by pid 42 (editor)

## B: `./sample --mode b\\|c`

Runs: 3 included, 0 excluded.

| metric | median | trimmed mean | 95% CI of the median | n | outliers |
| --- | ---: | ---: | ---: | ---: | ---: |
| wall time | 15.2 ms | 15.2 ms | 14.9 ms – 16.1 ms | 3 | 1 |
| major faults | 200 | 200 | 199 – 201 | 3 | 0 |
| read from storage | 800.0 KiB | 800.0 KiB | 796.0 KiB – 804.0 KiB | 3 | 0 |
| read requests | 50 | 50 | 49 – 50 | 3 | 0 |

## Comparison

B (./sample --mode b|c) is 1.24x slower than A (./sample --mode a) [1.10, 1.35], p = 0.002 (ratio of median wall time, 95% bootstrap \
interval, two-sided Mann-Whitney U).

## Warnings

- 1 run excluded: eviction did not hold; stop pid 42 (editor)
";
    assert_eq!(to_markdown(&report()), expected);
}

#[test]
fn csv_has_a_header_and_one_row_per_run_with_empty_cells_for_none() {
    let csv = to_csv(&report());
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "label,index,outcome,exit_code,signal,excluded,wall_s,user_s,sys_s,major_faults,\
         minor_faults,read_bytes,read_requests,peak_memory_bytes,instructions,\
         storage_read_requests,eviction_held,resident_pages_after,held_pages,held_bytes,\
         held_touched_bytes"
    );
    assert_eq!(lines.len(), 1 + 7);
    assert_eq!(lines[1], "A,0,ready,,,,0.0123,0.004,,150,812,614400,37,3145728,,,true,0,0,0,0");
    assert_eq!(
        lines[2],
        "A,1,ready,,,eviction did not hold: /opt/app/lib.so held by pid 42 (editor),0.0051,\
         0.004,,3,812,12288,0,3145728,,,false,12,0,0,0"
    );
    assert!(lines[7].starts_with("B,2,ready,"));
}

#[test]
fn csv_quotes_fields_and_spells_out_outcomes() {
    let mut r = report();
    r.commands[0].label = "A, \"fast\"".into();
    r.commands[0].runs[0].outcome = Outcome::Failed { code: Some(3), signal: None };
    r.commands[0].runs[2].outcome = Outcome::ExitedBeforeReady { code: None, signal: Some(9) };
    r.commands[0].runs[3].outcome = Outcome::Timeout;
    r.commands[0].runs[3].eviction = None;
    let csv = to_csv(&r);
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[1].starts_with("\"A, \"\"fast\"\"\",0,failed,3,,,"), "{}", lines[1]);
    assert!(lines[3].starts_with("\"A, \"\"fast\"\"\",2,exited_before_ready,,9,,"));
    assert!(lines[4].contains(",timeout,") && lines[4].ends_with(",,,,,"), "{}", lines[4]);
}

#[test]
fn json_round_trips() {
    let r = report();
    let json = to_json(&r);
    assert!(json.contains("\n  \"format\": \"coldstart-measure\""), "pretty-printed: {json}");
    assert_eq!(from_json(&json).unwrap(), r);
}

#[test]
fn json_of_another_format_is_rejected_by_name() {
    let mut v: serde_json::Value = serde_json::from_str(&to_json(&report())).unwrap();
    v["format"] = "hyperfine".into();
    let err = from_json(&v.to_string()).unwrap_err().to_string();
    assert!(err.contains("\"hyperfine\""), "{err}");
    assert!(err.contains("coldstart-measure"), "{err}");
    assert!(err.contains("versions 1 to 2"), "{err}");

    let err = from_json(r#"{"results": []}"#).unwrap_err().to_string();
    assert!(err.contains("format is missing"), "{err}");
}

#[test]
fn json_of_an_unknown_version_is_rejected_by_name() {
    let mut v: serde_json::Value = serde_json::from_str(&to_json(&report())).unwrap();
    v["version"] = 99.into();
    let err = from_json(&v.to_string()).unwrap_err().to_string();
    assert!(err.contains("version 99"), "{err}");
    assert!(err.contains("coldstart-measure\" versions 1 to 2"), "{err}");
    assert!(matches!(from_json("{not json"), Err(ReadError::Json(_))));
}

#[test]
fn json_of_version_1_reads_without_held_pages() {
    let mut v: serde_json::Value = serde_json::from_str(&to_json(&report())).unwrap();
    v["version"] = 1.into();
    for cmd in v["commands"].as_array_mut().unwrap() {
        for run in cmd["runs"].as_array_mut().unwrap() {
            run.as_object_mut().unwrap().remove("held_by_others");
            if let Some(e) = run["eviction"].as_object_mut() {
                e.remove("held_pages");
            }
        }
    }
    let read = from_json(&v.to_string()).unwrap();
    assert_eq!(read.version, FORMAT_VERSION);
    assert_eq!(read, report());
}

#[test]
fn held_pages_are_shown_with_the_figures() {
    let mut r = report();
    let held = coldstart_formats::measure::HeldByOthers {
        files: 2,
        pages: 12,
        bytes: 12 * 4096,
        touched_pages: 4,
        touched_bytes: 4 * 4096,
        by_file: vec![
            coldstart_formats::measure::HeldFile {
                path: "/usr/bin/bash".into(),
                pages: 10,
                touched_pages: Some(3),
                own: true,
            },
            coldstart_formats::measure::HeldFile {
                path: "/usr/lib/locale/locale-archive".into(),
                pages: 2,
                touched_pages: None,
                own: false,
            },
        ],
        holders: vec![coldstart_formats::measure::Holder {
            pid: 832,
            comm: "bash".into(),
            path: "/usr/bin/bash".into(),
            mapped: true,
        }],
        holders_omitted: 0,
    };
    for run in &mut r.commands[0].runs {
        run.held_by_others = Some(held.clone());
    }
    let table = to_table(&r);
    assert!(
        table.contains(
            "  Stayed cached:               12 pages (48.0 KiB) of 2 files that other processes map; \
             start-up uses 16.0 KiB of them\n"
        ),
        "{table}"
    );
    assert!(
        table.contains(
            "/usr/bin/bash (10), /usr/lib/locale/locale-archive (2); mapped by pid 832 (bash)"
        ),
        "{table}"
    );
    let md = to_markdown(&r);
    assert!(md.contains("Stayed cached: 12 pages (48.0 KiB) of 2 files"), "{md}");
    let csv = to_csv(&r);
    assert!(csv.lines().nth(1).unwrap().ends_with(",12,49152,16384"), "{csv}");
    assert_eq!(from_json(&to_json(&r)).unwrap(), r);
    // The other command held nothing: no line.
    let b = table.split("B: ").nth(1).unwrap();
    assert!(!b.contains("Stayed cached"), "{table}");
}

#[test]
fn faster_comparison_inverts_the_interval() {
    let mut r = report();
    let c = Comparison {
        metric: "wall_s".into(),
        ratio: 0.8,
        ratio_ci95: (0.5, 1.0),
        p_value: 0.0001,
        change: None,
    };
    assert_eq!(
        comparison_sentence(&r, &c),
        "B (./sample --mode b|c) is 1.25x faster than A (./sample --mode a) [1.00, 2.00], p < 0.001"
    );
    let c = Comparison {
        metric: "major_faults".into(),
        ratio: 1.5,
        ratio_ci95: (1.25, 2.0),
        p_value: 0.5,
        change: None,
    };
    assert_eq!(
        comparison_sentence(&r, &c),
        "B (./sample --mode b|c) has 1.50x the major faults of A (./sample --mode a) [1.25, 2.00], p = 0.500"
    );
    r.comparison = Some(Comparison { ratio: f64::NAN, ..c });
    assert!(to_table(&r).contains(
        "B (./sample --mode b|c) and A (./sample --mode a) cannot be compared on major faults"
    ));
}

/// `measure --prefetch DB --compare`: A is the change (the prefetch), B the base; a prefetch
/// that made start-up 8x faster reads as a gain, not as B being slower.
#[test]
fn a_prefetch_comparison_is_said_of_the_prefetch_against_without() {
    let r = report();
    let c = Comparison {
        metric: "wall_s".into(),
        ratio: 8.01,
        ratio_ci95: (7.5, 8.5),
        p_value: 0.0001,
        change: Some("the prefetch".into()),
    };
    assert_eq!(
        comparison_sentence(&r, &c),
        "With the prefetch (A): 8.01x faster than without (B) [7.50, 8.50], p < 0.001"
    );
    let c = Comparison { ratio: 0.5, ratio_ci95: (0.4, 0.6), ..c };
    assert_eq!(
        comparison_sentence(&r, &c),
        "With the prefetch (A): 2.00x slower than without (B) [1.67, 2.50], p < 0.001"
    );
}

#[test]
fn human_units() {
    assert_eq!(human("wall_s", 0.000_25), "250.0 µs");
    assert_eq!(human("wall_s", 0.0123), "12.3 ms");
    assert_eq!(human("wall_s", 2.5), "2.500 s");
    assert_eq!(human("read_bytes", 512.0), "512 B");
    assert_eq!(human("read_bytes", 5.0 * 1024.0 * 1024.0), "5.0 MiB");
    assert_eq!(human("peak_memory_bytes", 3.0 * 1024.0 * 1024.0 * 1024.0), "3.00 GiB");
    assert_eq!(human("major_faults", 150.0), "150");
    assert_eq!(human("major_faults", 150.5), "150.5");
}

#[test]
fn table_says_when_a_metric_is_missing_or_every_run_excluded() {
    let mut r = report();
    r.commands[0].summaries.retain(|(m, _)| m != "read_requests");
    r.commands[0].summaries[0].1 = Summary::default();
    let t = to_table(&r);
    assert!(t.contains("  Time (median):               n/a (no included run)\n"), "{t}");
    assert!(t.contains("  Read requests (median):      n/a\n"), "{t}");
}

#[test]
fn metric_values_follow_the_counters() {
    let c = report().commands[0].runs[0].counters.clone();
    let values: Vec<Option<f64>> = METRICS.iter().map(|m| metric_value(&c, m)).collect();
    assert_eq!(
        values,
        vec![
            Some(0.0123),
            Some(0.004),
            None,
            Some(150.0),
            Some(812.0),
            Some(614400.0),
            Some(37.0),
            Some(3145728.0),
            None,
            None
        ]
    );
    assert_eq!(metric_value(&c, "nonsense"), None);
}
