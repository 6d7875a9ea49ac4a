//! Judge the drift detectors on recorded gate histories (`coldstart gate --history FILE`).
//!
//! ```text
//! cargo run --release -p coldstart-gate --example drift-eval -- HISTORY.jsonl... [--threshold 0.05]
//! ```
//!
//! For every figure and cache state with a series of at least 20 comparable entries, and for
//! each detector ([`Method`]):
//!
//! - **false drift**: the recorded series (an unchanged program) is gated entry by entry, each
//!   time with the history before it, as `coldstart gate --history` does, and every flag is
//!   counted; then again over 200 shuffles of the same values (the recorded noise in other
//!   orders);
//! - **slow drift**: the same shuffles with a rise of 0.5% of the level per entry added from
//!   entry 10 on (ten times below the threshold at each step), and how many entries of drift
//!   it took to be flagged (median), and how often it never was.
//!
//! The threshold is the rise a single gate would fail for, as a share of the level (default
//! 0.05, the time rule's minimum effect).

use std::collections::BTreeMap;
use std::path::Path;

use coldstart_formats::stats::{median, Xoshiro256};
use coldstart_gate::drift::{detect, Method};
use coldstart_gate::history;

const SHUFFLES: usize = 200;
const DRIFT_START: usize = 10;
const DRIFT_PER_ENTRY: f64 = 0.005;
const MIN_SERIES: usize = 20;

fn main() {
    let mut threshold = 0.05;
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--threshold" {
            threshold = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("drift-eval: --threshold needs a share, e.g. 0.05");
                std::process::exit(2)
            });
        } else {
            files.push(a);
        }
    }
    if files.is_empty() {
        eprintln!("usage: drift-eval HISTORY.jsonl... [--threshold 0.05]");
        std::process::exit(2);
    }
    // (file, environment, settings, figure, state) -> medians, oldest first.
    let mut series: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
    for f in &files {
        let entries = history::read(Path::new(f)).unwrap_or_else(|e| {
            eprintln!("drift-eval: {f}: {e}");
            std::process::exit(2)
        });
        for e in entries.iter().filter(|e| e.verdict != "baseline") {
            for l in &e.figures {
                let key = (f.clone(), format!("{}|{}", e.environment, e.settings), String::new());
                let name = format!("{}, {}", l.figure.title(), l.state);
                series.entry((key.0, key.1, name)).or_default().push(l.median);
            }
        }
    }
    println!(
        "| history | figure | entries | spread (IQR/median) | detector | false drift, as recorded | false drift, {SHUFFLES} shuffles | slow drift found | entries to find it (median) |"
    );
    println!("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |");
    for ((file, _, figure), xs) in &series {
        if xs.len() < MIN_SERIES {
            continue;
        }
        let level = median(xs);
        if level <= 0.0 {
            continue;
        }
        let mut s = xs.clone();
        s.sort_by(f64::total_cmp);
        let spread = (s[s.len() * 3 / 4] - s[s.len() / 4]) / level;
        let limit = threshold * level;
        for method in [Method::ChangePoint, Method::HistoricalChanges] {
            let recorded = false_flags(xs, limit, method);
            let mut rng = Xoshiro256::new(17);
            let (mut false_total, mut gates) = (0, 0);
            let (mut found, mut delays) = (0, Vec::new());
            for _ in 0..SHUFFLES {
                let mut ys = xs.clone();
                shuffle(&mut ys, &mut rng);
                false_total += false_flags(&ys, limit, method);
                gates += ys.len() - DRIFT_START;
                let drifted: Vec<f64> = ys
                    .iter()
                    .enumerate()
                    .map(|(i, y)| {
                        y + level * DRIFT_PER_ENTRY * i.saturating_sub(DRIFT_START - 1) as f64
                    })
                    .collect();
                if let Some(t) = (DRIFT_START + 1..=drifted.len())
                    .find(|&t| detect(&drifted[..t], limit, method).is_some())
                {
                    found += 1;
                    delays.push((t - DRIFT_START) as f64);
                }
            }
            println!(
                "| {} | {figure} | {} | {:.1}% | {} | {recorded} of {} | {:.2}% | {:.0}% | {} |",
                Path::new(file).file_name().map_or(file.clone(), |n| n.to_string_lossy().into()),
                xs.len(),
                spread * 100.0,
                method.name(),
                xs.len() - DRIFT_START,
                false_total as f64 / gates as f64 * 100.0,
                found as f64 / SHUFFLES as f64 * 100.0,
                if delays.is_empty() { "-".to_string() } else { format!("{:.0}", median(&delays)) },
            );
        }
    }
}

/// Gate each entry from [`DRIFT_START`] on with the history before it: how many are flagged.
fn false_flags(xs: &[f64], limit: f64, method: Method) -> usize {
    (DRIFT_START + 1..=xs.len()).filter(|&t| detect(&xs[..t], limit, method).is_some()).count()
}

fn shuffle(xs: &mut [f64], rng: &mut Xoshiro256) {
    for i in (1..xs.len()).rev() {
        xs.swap(i, rng.below(i + 1));
    }
}
