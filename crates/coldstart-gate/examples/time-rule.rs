//! How often the gate's time rule says slower, not slower or unclear, on simulated runs.
//!
//! ```text
//! cargo run --release -p coldstart-gate --example time-rule -- BASE_RUNS BASE_JITTER_MS NOW_JITTER_MS SHIFT [TRIALS]
//! ```
//!
//! The baseline: BASE_RUNS runs of 20.6 ms plus a uniform draw in +-BASE_JITTER_MS. Now: SHIFT
//! times 20.6 ms plus a uniform draw in +-NOW_JITTER_MS, judged as `coldstart gate` judges
//! them: a batch of 10 runs, then batches of 10 more while time is unclear and the runs are
//! below the rule's bound ([`run_bound`], at most 60). The machine's interval is taken as
//! [0.97, 1.03]. Each line: the share of gates per verdict, and the mean runs taken.
//!
//! `20 0.05 6 1.0` is the gate test's spread-only change (a 20 ms sleep, then the same sleep
//! with +-6 ms of jitter): every "slower" there is a false alarm.

use coldstart_formats::stats::Xoshiro256;
use coldstart_gate::figure::Verdict;
use coldstart_gate::time::{judge, run_bound, TimeRule};

const BATCH: usize = 10;
const LEVEL: f64 = 0.0206;

fn main() {
    let a: Vec<f64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: BASE_RUNS BASE_JITTER_MS NOW_JITTER_MS SHIFT [TRIALS]"))
        .collect();
    let [n_base, base_j, now_j, shift, ..] = a[..] else {
        eprintln!("usage: time-rule BASE_RUNS BASE_JITTER_MS NOW_JITTER_MS SHIFT [TRIALS]");
        std::process::exit(2);
    };
    let trials = a.get(4).copied().unwrap_or(10_000.0) as usize;
    let rule = TimeRule::default();
    let mut rng = Xoshiro256::new(7);
    let u = |rng: &mut Xoshiro256| rng.below(1 << 30) as f64 / (1u64 << 30) as f64;
    let (mut slower, mut unclear, mut not, mut runs) = (0, 0, 0, 0);
    for _ in 0..trials {
        let base: Vec<f64> = (0..n_base as usize)
            .map(|_| LEVEL + base_j * 1e-3 * (2.0 * u(&mut rng) - 1.0))
            .collect();
        let mut now = Vec::new();
        let verdict = loop {
            now.extend(
                (0..BATCH).map(|_| LEVEL * shift + now_j * 1e-3 * (2.0 * u(&mut rng) - 1.0)),
            );
            let o = judge(&base, &now, &rule, Some((0.97, 1.03)));
            let bound = run_bound(&base, o.threshold, &rule, 0).runs;
            if o.verdict != Verdict::Unclear || now.len() >= bound.min(rule.max_runs) {
                break o.verdict;
            }
        };
        runs += now.len();
        match verdict {
            Verdict::Slower => slower += 1,
            Verdict::Unclear => unclear += 1,
            _ => not += 1,
        }
    }
    let pc = |x: usize| 100.0 * x as f64 / trials as f64;
    println!(
        "base +-{base_j} ms x{n_base}, now x{shift} +-{now_j} ms: slower {:.2}%, unclear {:.2}%, \
         not slower {:.2}%, {:.1} runs",
        pc(slower),
        pc(unclear),
        pc(not),
        runs as f64 / trials as f64
    );
}
