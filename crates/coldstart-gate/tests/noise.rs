//! The gate's rules and order of steps on recorded runs of real programs (`tests/noise/`,
//! recorded by `bench/gate-noise.sh`): unchanged programs under every recorded disturbance are
//! never slower, the device's reads of an unchanged Node.js under one busy job raise no false
//! alarm, a far function is caught through the exact pages, and a gate spends few runs where
//! they settle nothing. Nothing runs: the runs are replayed ([`coldstart_gate::replay`]).

use std::path::{Path, PathBuf};

use coldstart_gate::figure::Verdict;
use coldstart_gate::replay::{Recording, Replay};
use coldstart_gate::run::{gate, record};
use coldstart_gate::{Baseline, Figure, GateOptions, Outcome};
use coldstart_measure::CacheState;
use coldstart_storage::StorageProfile;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/noise")
}

fn recording(name: &str) -> Recording {
    Recording::read(&dir().join(format!("{name}.json"))).unwrap()
}

/// Every recording of `program`, by disturbance.
fn recordings(program: &str) -> Vec<Recording> {
    let mut all: Vec<Recording> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| Recording::read(&p).unwrap())
        .filter(|r| r.program == program)
        .collect();
    all.sort_by(|a, b| a.disturbance.cmp(&b.disturbance));
    assert!(all.len() >= 2, "{program}: {} recordings", all.len());
    all
}

/// The options a gate of a recording takes: its defaults, on the storage it was recorded on.
/// The command is one this machine has (the recordings' programs need not be installed where
/// the tests run): what is compared is the runs.
fn options(r: &Recording) -> GateOptions {
    let mut o = GateOptions::new(vec!["/bin/true".into()]);
    o.states = Some(vec![CacheState::Cold, CacheState::Hot]);
    o.storage = coldstart_gate::StorageChoice::Profile(
        r.storage.clone().unwrap_or_else(StorageProfile::hdd),
    );
    o.commit = Some("recorded".into());
    o
}

fn baseline(r: &Recording) -> Baseline {
    record(&options(r), &mut Replay::new(r), &mut |_| {}).unwrap()
}

fn row(report: &coldstart_gate::GateReport, figure: Figure, state: &str) -> Verdict {
    report.figures.iter().find(|r| r.figure == figure && r.state == state).unwrap().verdict
}

/// Gates of `now` against `base`, starting at several places of its recording.
fn gates(base: &Baseline, now: &Recording) -> Vec<(coldstart_gate::GateReport, Replay)> {
    (0..4)
        .map(|k| {
            let mut replay = Replay::new(now).skip(k * 5);
            let (report, _) =
                gate(&options(now), base, Path::new("b.json"), None, &mut replay, &mut |_| {})
                    .unwrap();
            (report, replay)
        })
        .collect()
}

#[test]
fn unchanged_programs_are_never_slower_under_any_disturbance() {
    for program in ["node", "sample-bench"] {
        let all = recordings(program);
        for base_rec in &all {
            let base = baseline(base_rec);
            for now in &all {
                for (report, _) in gates(&base, now) {
                    assert_ne!(
                        report.verdict,
                        Outcome::Slower,
                        "{program}: baseline {}, gate {}:\n{}",
                        base_rec.disturbance,
                        now.disturbance,
                        report.to_text()
                    );
                }
            }
        }
    }
}

#[test]
fn the_devices_reads_of_an_unchanged_node_under_one_busy_job_raise_no_false_alarm() {
    // A baseline of 30 quiet cold runs reads 608 to 610 requests (an interquartile range of
    // 0); under one busy job the same program reads 608 to 611, a median of 610.
    let base = baseline(&recording("node-quiet-30"));
    for (report, _) in gates(&base, &recording("node-busy1")) {
        let text = report.to_text();
        assert_ne!(row(&report, Figure::DeviceReadRequests, "cold"), Verdict::Slower, "{text}");
        assert_ne!(row(&report, Figure::DeviceReadBytes, "cold"), Verdict::Slower, "{text}");
        assert_ne!(report.verdict, Outcome::Slower, "{text}");
    }
}

#[test]
fn a_far_function_is_caught_through_the_exact_pages() {
    // The sample at its benchmark size (40 MiB of code), its recorded runs with 5 pages more
    // touched, as one more function of 5 pages called at start-up and placed after all other
    // code touches: the device's figures of such a build move by less than their noise (a
    // read or two of 65 MiB), the exact pages see it.
    let all = recordings("sample-bench");
    for base_rec in &all {
        let base = baseline(base_rec);
        for now in &all {
            for k in 0..4 {
                let mut replay = Replay::new(now).skip(k * 5);
                replay.extra_pages = 5.0;
                let (report, _) =
                    gate(&options(now), &base, Path::new("b.json"), None, &mut replay, &mut |_| {})
                        .unwrap();
                let text = report.to_text();
                assert_eq!(
                    report.verdict,
                    Outcome::Slower,
                    "{} against {}:\n{text}",
                    now.disturbance,
                    base_rec.disturbance
                );
                assert_eq!(row(&report, Figure::PagesTouched, "hot"), Verdict::Slower, "{text}");
            }
        }
    }
}

#[test]
fn a_gate_of_node_spends_no_more_cold_runs_than_its_first_batch_when_the_device_explains_them() {
    let all = recordings("node");
    let base = baseline(&all.iter().find(|r| r.disturbance == "quiet").unwrap().clone());
    for now in &all {
        for (report, replay) in gates(&base, now) {
            let cold: usize =
                replay.calls.iter().filter(|c| c.0 == [CacheState::Cold]).map(|c| c.1).sum();
            assert_eq!(cold, 5, "{}: {:?}\n{}", now.disturbance, replay.calls, report.to_text());
            assert!(replay.profile_calls.iter().sum::<usize>() <= 3, "{:?}", replay.profile_calls);
        }
    }
}
