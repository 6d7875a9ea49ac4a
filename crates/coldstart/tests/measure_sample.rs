//! `coldstart measure` on the generated sample program (small size): its cold start reads at
//! least the data pages the manifest says start-up touches and faults from storage; hot reads
//! nothing; its own readiness signals (`ready` on stdout, `COLDSTART_READY_FD`) end the runs.
//! Needs root (drop_caches, cgroups) and clang-19/lld-19; skips with a message otherwise.

mod common;
use common::{assert_hot, cache_lock, measure_report, require, require_root};

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::OnceLock;

use coldstart_sample::{Config, Sample};
use serde_json::Value;

/// The small sample, built once per test process (reused across processes when unchanged).
fn sample() -> Option<&'static Sample> {
    static SAMPLE: OnceLock<Option<Sample>> = OnceLock::new();
    SAMPLE
        .get_or_init(|| {
            if !require(
                coldstart_sample::check_tools().is_ok(),
                "the sample's tools (clang-19, lld-19)",
            ) {
                return None;
            }
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("coldstart-measure-sample-small");
            Some(
                coldstart_sample::build_cached(&Config::default(), &dir)
                    .expect("build the small sample"),
            )
        })
        .as_ref()
}

fn measure(sample: &Sample, args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let w = sample.workload("a").unwrap();
    let exe = sample.exe();
    let cmd = std::iter::once(exe.as_os_str()).chain(w.args.iter().map(OsStr::new));
    let (out, report) = measure_report(args, &json, cmd);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    report
}

fn runs(report: &Value, i: usize) -> Vec<Value> {
    report["commands"][i]["runs"].as_array().unwrap().clone()
}

fn counter(run: &Value, name: &str) -> u64 {
    run["counters"][name].as_u64().unwrap_or_else(|| panic!("no {name} in {run}"))
}

#[test]
fn sample_cold_reads_the_pages_it_touches_and_hot_reads_nothing() {
    if !require_root("drop_caches, cgroups") {
        return;
    }
    let Some(sample) = sample() else { return };
    let _lock = cache_lock();
    // Distinct data pages workload a touches at start-up, from the manifest.
    let pages: BTreeSet<(String, u64)> = sample
        .workload("a")
        .unwrap()
        .data
        .iter()
        .flat_map(|d| d.pages.iter().map(move |p| (d.path.clone(), *p)))
        .collect();
    let touched = pages.len() as u64 * sample.page_size;
    assert!(touched > 0);
    let report = measure(sample, &["--cache", "cold,hot", "--runs", "2"]);
    for r in runs(&report, 0) {
        assert!(r["excluded"].is_null(), "{r}");
        assert!(counter(&r, "major_faults") > 0, "{r}");
        // Data pages alone; code pages and read-ahead come on top.
        assert!(
            counter(&r, "read_bytes") >= touched,
            "{} < {touched}: {r}",
            counter(&r, "read_bytes")
        );
    }
    for r in runs(&report, 1) {
        assert_hot(&report, &r);
    }
    assert_eq!(report["io_share"][0]["cache"], "cold");
}

#[test]
fn sample_warm_and_selective_evict_its_own_files() {
    if !require_root("cgroups, fanotify") {
        return;
    }
    let Some(sample) = sample() else { return };
    let _lock = cache_lock();
    let report =
        measure(sample, &["--cache", "warm,selective", "--runs", "2", "--ready", "stdout:^ready$"]);
    for i in 0..2 {
        for r in runs(&report, i) {
            assert!(r["excluded"].is_null(), "{r}");
            assert_eq!(r["outcome"]["kind"], "ready");
            // The executable, its two libraries, the plugin and the data files.
            assert!(r["eviction"]["files"].as_u64().unwrap() >= 4, "{r}");
            assert!(counter(&r, "read_bytes") > 0, "{r}");
        }
    }
}

#[test]
fn sample_signals_readiness_through_the_fd() {
    if !require_root("cgroups") {
        return;
    }
    let Some(sample) = sample() else { return };
    let report = measure(sample, &["--ready", "fd", "--runs", "2", "--timeout", "20"]);
    for r in runs(&report, 0) {
        assert_eq!(r["outcome"]["kind"], "ready", "{r}");
    }
}
