//! The noise model from the recordings: what moves each figure of an unchanged program, by how
//! much, and what the gate's rules say when the recorded runs are replayed through them.
//!
//! ```text
//! cargo run --release -p coldstart-gate --example noise-eval -- [DIR]   (default crates/coldstart-gate/tests/noise)
//! ```
//!
//! Part 1, per program and figure: the median and the range of each disturbance's runs, as a
//! change against the quiet recording's median (docs/gate.md, "The noise model").
//!
//! Part 2, per program: every recording as the baseline (`gate --update`, replayed) against
//! every recording gated from four places in it (`gate`, replayed): the verdicts, which figures
//! were slower or unclear, and the steps' time as recorded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use coldstart_formats::stats::median;
use coldstart_gate::figure::Verdict;
use coldstart_gate::replay::{Recording, Replay, Run};
use coldstart_gate::run::{gate, record};
use coldstart_gate::{GateOptions, Outcome, StorageChoice};
use coldstart_measure::CacheState;

type Get = fn(&Run) -> Option<f64>;
/// The values of one figure in a recording.
type Values = Box<dyn Fn(&Recording) -> Vec<f64>>;

fn figures() -> Vec<(&'static str, CacheState, Get)> {
    vec![
        ("reads of the device", CacheState::Cold, |r| r.device_read_requests.map(|v| v as f64)),
        ("read from the device", CacheState::Cold, |r| r.device_read_bytes.map(|v| v as f64)),
        ("time, cold", CacheState::Cold, |r| Some(r.wall_s)),
        ("read from storage (whole tree)", CacheState::Cold, |r| r.read_bytes.map(|v| v as f64)),
        ("major faults (whole tree)", CacheState::Cold, |r| r.major_faults.map(|v| v as f64)),
        ("time, hot", CacheState::Hot, |r| Some(r.wall_s)),
        ("CPU time, hot", CacheState::Hot, |r| Some(r.user_s? + r.sys_s?)),
    ]
}

fn pct(x: f64, level: f64) -> String {
    format!("{:+.1}%", (x / level - 1.0) * 100.0)
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("crates/coldstart-gate/tests/noise"));
    let mut by_program: BTreeMap<String, Vec<Recording>> = BTreeMap::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for p in paths {
        let r = Recording::read(&p).unwrap_or_else(|e| panic!("{e}"));
        by_program.entry(r.program.clone()).or_default().push(r);
    }
    println!("| program | figure | quiet median | quiet range | busy1 | busy2 | direct-io | reclaim | readahead |");
    println!("| --- | --- | ---: | --- | --- | --- | --- | --- | --- |");
    for (program, recs) in &by_program {
        let quiet = recs.iter().find(|r| r.disturbance == "quiet");
        let Some(quiet) = quiet else { continue };
        let mut rows: Vec<(String, Values)> = figures()
            .into_iter()
            .map(|(name, state, get)| {
                let f: Values = Box::new(move |r: &Recording| {
                    r.runs(state).iter().filter_map(|x| get(x)).collect()
                });
                (name.to_string(), f)
            })
            .collect();
        rows.push(("pages touched (exact)".into(), Box::new(|r: &Recording| r.pages.clone())));
        rows.push(("calibration loop".into(), Box::new(|r: &Recording| r.calibration())));
        for (name, values) in &rows {
            let q = values(quiet);
            if q.is_empty() {
                continue;
            }
            let level = median(&q);
            let range = |v: &[f64]| {
                let (lo, hi) =
                    v.iter().fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
                format!("{} to {}", pct(lo, level), pct(hi, level))
            };
            let mut cells = vec![format!("{level:.4}"), range(&q)];
            for d in ["busy1", "busy2", "direct-io", "reclaim", "readahead"] {
                cells.push(match recs.iter().find(|r| r.disturbance == d) {
                    Some(r) => {
                        let v = values(r);
                        format!("{} ({})", pct(median(&v), level), range(&v))
                    }
                    None => "-".into(),
                });
            }
            println!("| {program} | {name} | {} |", cells.join(" | "));
        }
    }
    println!();
    println!("| program | baseline | gates | slower | not slower | unclear | figures slower or unclear | runs cold / hot, profiles | seconds, median (worst) |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: |");
    for (program, recs) in &by_program {
        for base_rec in recs {
            let o = options(base_rec);
            let base = record(&o, &mut Replay::new(base_rec), &mut |_| {}).unwrap();
            let (mut counts, mut why, mut seconds, mut steps) =
                ([0usize; 3], BTreeMap::<String, usize>::new(), Vec::new(), Vec::new());
            for now in recs {
                for k in 0..4 {
                    let mut replay = Replay::new(now).skip(k * 5);
                    let (report, _) = gate(
                        &options(now),
                        &base,
                        Path::new("b.json"),
                        None,
                        &mut replay,
                        &mut |_| {},
                    )
                    .unwrap();
                    counts[match report.verdict {
                        Outcome::Slower => 0,
                        Outcome::NotSlower => 1,
                        Outcome::Unclear => 2,
                    }] += 1;
                    for r in report
                        .figures
                        .iter()
                        .filter(|r| matches!(r.verdict, Verdict::Slower | Verdict::Unclear))
                    {
                        *why.entry(format!("{}, {} {}", r.figure.title(), r.state, r.verdict))
                            .or_default() += 1;
                    }
                    seconds.push(report.elapsed_s.unwrap_or(0.0));
                    let runs = |s: CacheState| -> usize {
                        replay.calls.iter().filter(|c| c.0 == [s]).map(|c| c.1).sum()
                    };
                    steps.push(format!(
                        "{}/{}, {}",
                        runs(CacheState::Cold),
                        runs(CacheState::Hot),
                        replay.profile_calls.iter().sum::<usize>()
                    ));
                }
            }
            steps.sort();
            steps.dedup();
            let worst = seconds.iter().cloned().fold(0.0, f64::max);
            let why: Vec<String> = why.into_iter().map(|(k, v)| format!("{k} ({v})")).collect();
            println!(
                "| {program} | {} | {} | {} | {} | {} | {} | {} | {:.0} ({:.0}) |",
                base_rec.disturbance,
                counts.iter().sum::<usize>(),
                counts[0],
                counts[1],
                counts[2],
                if why.is_empty() { "-".into() } else { why.join("; ") },
                steps.join("; "),
                median(&seconds),
                worst
            );
        }
    }
}

fn options(r: &Recording) -> GateOptions {
    let mut o = GateOptions::new(vec!["/bin/true".into()]);
    o.states = Some(vec![CacheState::Cold, CacheState::Hot]);
    if let Some(p) = &r.storage {
        o.storage = StorageChoice::Profile(p.clone());
    }
    o.commit = Some("recorded".into());
    o
}
