//! The rule for start-up time, and how many runs it may take.
//!
//! Time moves from run to run and from hour to hour, so it is judged by rank tests with a
//! minimum effect, in three outcomes. With `t` the threshold and `[lo, hi]` the 95% interval of
//! how much slower the machine itself is now than when the baseline was recorded (the
//! calibration loop's ratio): a start-up's time moves with the machine by a factor between 1
//! (waiting on storage) and that ratio (computing), so `k_hi = max(1, hi)` bounds what the
//! machine alone can add to it, and `k_lo = min(1, hi)` what it surely takes off:
//!
//! - **slower**: the runs now, divided by `(1 + t) k_hi`, still rank above the baseline's: the
//!   one-sided Mann-Whitney U test of "slower by more than the threshold" has p <
//!   [`TimeRule::alpha`] (a regression no larger than the machine's own slowdown is not called
//!   one), and so does the sign test of their median against the baseline's median (a change
//!   that only widens the spread moves some runs above the baseline, not the median);
//! - **not slower**: the runs now, divided by `(1 + t) k_lo`, rank below the baseline's: the
//!   one-sided test of "slower by less than the threshold" has p < [`NOT_SLOWER_ALPHA`] (a
//!   baseline recorded while the machine was busier does not let a regression through; the
//!   low end of the interval would make most gates on an unchanged machine unclear: 32 of 34
//!   gate runs of the unchanged sample);
//! - **unclear**: neither, yet. More runs are added while it is unclear, up to a bound.
//!
//! Each also needs the ratio of the medians on its side of the threshold, so a verdict never
//! contradicts the change shown beside it (a start-up of two modes, most runs fast and some
//! slow, can rank "not slower" with its median above the threshold: then it is unclear).
//!
//! Both are the rank test with the minimum effect built in (a shift of the whole sample by
//! the threshold, on a ratio scale), so a change that only widens the spread at the same
//! median is not slower, and one exactly at the threshold stays unclear instead of being
//! decided by a coin flip.
//!
//! The threshold is the minimum effect ([`TimeRule::min_effect`], 5% by default) or the
//! measured noise when that is larger: the relative half-width of the 95% interval of the
//! baseline's median, and of the median now. A difference the noise alone could make is never
//! called slower.
//!
//! **How many runs.** As Pinpoint does, the bound comes from the effect to detect in units of
//! the baseline's interquartile range: `m = threshold x median / IQR`. By Noether's formula
//! for the Mann-Whitney test, detecting a shift of `m` IQRs (a normal distribution's IQR is
//! 1.349 sigma, so the chance that a run now is slower than a baseline run is
//! `P = Phi(1.349 m / sqrt 2)`) at level alpha with the rule's power needs
//! `n_b n_c / (n_b + n_c) >= K = (z_alpha + z_power)^2 / (12 (P - 1/2)^2)`. With `n_b` baseline
//! runs that gives `n_c = K n_b / (n_b - K)` runs now, or none at all when `n_b <= K` (then only a
//! baseline with more runs helps, and the bound is [`TimeRule::max_runs`]). For equal sides this
//! is 13 runs at 1.9 IQR and 208 at 0.3 IQR (Pinpoint: about 10 and 360).

use coldstart_formats::{measure::Summary, stats::ratio_ci95};
use serde::{Deserialize, Serialize};

use crate::figure::Verdict;
use coldstart_formats::stats::{
    iqr, mann_whitney_greater, normal_cdf, normal_quantile, sign_test_above,
};

/// The knobs of the time rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeRule {
    /// The smallest slowdown worth failing for, as a share (0.05 = 5%).
    pub min_effect: f64,
    /// Significance level of the one-sided rank test of "slower by more than the threshold",
    /// at each look: 0.01, Pinpoint's. Under no change the runs sit a whole threshold below
    /// what that test asks, so a wrong "slower" is far rarer than this.
    pub alpha: f64,
    /// Power the run bound aims for at the threshold.
    pub power: f64,
    /// Runs per state never exceed this.
    pub max_runs: usize,
}

impl Default for TimeRule {
    fn default() -> Self {
        TimeRule { min_effect: 0.05, alpha: 0.01, power: 0.95, max_runs: 60 }
    }
}

/// Fewer runs than this on either side cannot be judged.
pub const MIN_RUNS: usize = 3;

/// Significance level of the test that says "not slower" (a wrong "not slower" lets a
/// regression at the threshold through; a wrong "slower" fails a job, hence the stricter
/// [`TimeRule::alpha`]).
pub const NOT_SLOWER_ALPHA: f64 = 0.05;

/// What the time rule found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeOutcome {
    /// Median of the baseline's runs, seconds.
    pub baseline: f64,
    /// Median of the runs now, seconds.
    pub now: f64,
    /// `now / baseline`.
    pub ratio: f64,
    /// 95% bootstrap interval of the ratio.
    pub ratio_ci95: (f64, f64),
    /// One-sided p-value of "slower by more than the threshold": the larger of the
    /// Mann-Whitney test's and the sign test's of the runs now against the baseline's median.
    pub p_value: f64,
    /// One-sided Mann-Whitney p-value of "slower by less than the threshold".
    pub p_not_slower: f64,
    /// The threshold, as a share: max(minimum effect, noise).
    pub threshold: f64,
    /// The measured noise, as a share (see the module docs).
    pub noise: f64,
    /// The 95% interval of how much slower the machine is now than when the baseline was
    /// recorded (the calibration ratio), when known.
    pub machine: Option<(f64, f64)>,
    pub n_baseline: usize,
    pub n_now: usize,
    pub verdict: Verdict,
}

/// The relative half-width of the 95% bootstrap interval of the median of `xs` (0 when the
/// median is not positive).
pub fn noise(xs: &[f64]) -> f64 {
    let s = Summary::from_samples(xs);
    if s.median <= 0.0 {
        return 0.0;
    }
    (s.ci95.1 - s.ci95.0) / 2.0 / s.median
}

/// The threshold of the rule for these samples: max(minimum effect, noise of either side),
/// with the noise ([`noise`]) of each side.
pub fn threshold(base: &[f64], now: &[f64], rule: &TimeRule) -> (f64, f64) {
    let mut n = noise(base);
    if finite(now) >= MIN_RUNS {
        n = n.max(noise(now));
    }
    (rule.min_effect.max(n), n)
}

/// Judge start-up time. `machine` is the 95% interval of how much slower the machine is now
/// (see [`crate::report::MachineSpeed`]) when known.
pub fn judge(
    base: &[f64],
    now: &[f64],
    rule: &TimeRule,
    machine: Option<(f64, f64)>,
) -> TimeOutcome {
    let (t, noise) = threshold(base, now, rule);
    let (ratio, ci) = ratio_ci95(base, now);
    let (_, hi) =
        machine.filter(|(l, h)| l.is_finite() && h.is_finite() && *l > 0.0).unwrap_or((1.0, 1.0));
    let (k_lo, k_hi) = (hi.min(1.0), hi.max(1.0));
    let scaled = |by: f64| -> Vec<f64> { now.iter().map(|x| x / by).collect() };
    // "Slower" must hold for the median as well as for the ranks (an intersection-union
    // test: each at alpha, the larger p-value is the test's). The rank test alone also
    // answers a change that only widens the spread: against a tight baseline it counts how
    // many runs lie above it, and 8 of 10 runs in the upper half of a spread three times as
    // wide passed it at p = 0.0026. That is 0.2% of such gates called slower (simulated:
    // `cargo run --release -p coldstart-gate --example time-rule`), which the gate's test of
    // 20 runs of a spread-only change met once in eight CI runs. The sign test asks that the
    // runs' median be above the threshold: 10 of 10 at 10 runs.
    let up = scaled((1.0 + t) * k_hi);
    let p = mann_whitney_greater(base, &up)
        .max(sign_test_above(coldstart_formats::stats::median(base), &up));
    let p_not_slower = mann_whitney_greater(&scaled((1.0 + t) * k_lo), base);
    let (nb, nc) = (finite(base), finite(now));
    let verdict = if nb < MIN_RUNS || nc < MIN_RUNS || !ratio.is_finite() {
        Verdict::Unclear
    } else if p < rule.alpha && ratio > (1.0 + t) * k_hi {
        Verdict::Slower
    } else if p_not_slower < NOT_SLOWER_ALPHA && ratio <= (1.0 + t) * k_lo {
        Verdict::NotSlower
    } else {
        Verdict::Unclear
    };
    TimeOutcome {
        baseline: coldstart_formats::stats::median(base),
        now: coldstart_formats::stats::median(now),
        ratio,
        ratio_ci95: ci,
        p_value: p,
        p_not_slower,
        threshold: t,
        noise,
        machine,
        n_baseline: nb,
        n_now: nc,
        verdict,
    }
}

fn finite(xs: &[f64]) -> usize {
    xs.iter().filter(|x| x.is_finite()).count()
}

/// Runs needed now, with `n_base` baseline runs, for the one-sided rank test at `alpha` to
/// detect a shift of `m` interquartile ranges with probability `power` (Noether's formula;
/// see the module docs), and for the sign test of the median beside it. `None` when no number
/// of runs now is enough with this baseline.
pub fn runs_needed(m: f64, n_base: usize, alpha: f64, power: f64) -> Option<usize> {
    if m.is_nan() || m <= 0.0 {
        return None;
    }
    // The sign test can say "slower" only once 1/2^n < alpha: 7 runs at 0.01.
    let least = ((1.0 / alpha).log2().ceil() as usize).max(MIN_RUNS);
    if m.is_infinite() {
        return Some(least);
    }
    let (z_alpha, z_power) = (normal_quantile(1.0 - alpha), normal_quantile(power));
    let p = normal_cdf(1.349 * m / std::f64::consts::SQRT_2);
    let k = (z_alpha + z_power).powi(2) / (12.0 * (p - 0.5).powi(2));
    let nb = n_base as f64;
    if nb <= k {
        return None;
    }
    let rank = (k * nb / (nb - k)).ceil() as usize;
    // The sign test against the baseline's median: a run now is above it with chance
    // q = Phi(1.349 m); the normal approximation of the binomial gives its runs.
    let q = normal_cdf(1.349 * m);
    let sign = ((z_alpha * 0.5 + z_power * (q * (1.0 - q)).sqrt()) / (q - 0.5)).powi(2);
    Some(rank.max(sign.ceil() as usize).max(least))
}

/// How far the runs of one state may go.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunBound {
    /// The threshold in units of the baseline's interquartile range.
    pub effect_iqr: f64,
    /// Runs the rank test needs for it ([`runs_needed`]), `None`: more than this baseline
    /// allows.
    pub needed: Option<usize>,
    /// The bound used: `needed` kept between the first batch and [`TimeRule::max_runs`].
    pub runs: usize,
}

/// The bound on the runs of one state, from the baseline's samples, the threshold now and
/// the size of the first batch.
pub fn run_bound(base: &[f64], threshold: f64, rule: &TimeRule, first: usize) -> RunBound {
    let median = coldstart_formats::stats::median(base);
    let spread = iqr(base);
    let effect_iqr = if spread > 0.0 { threshold * median / spread } else { f64::INFINITY };
    let needed = runs_needed(effect_iqr, finite(base), rule.alpha, rule.power);
    let runs = needed.unwrap_or(rule.max_runs).clamp(first, rule.max_runs.max(first));
    RunBound { effect_iqr, needed, runs }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_formats::stats::Xoshiro256;

    /// `n` draws of about `mean` with a standard deviation of `sd`, from a fixed generator.
    fn normal(rng: &mut Xoshiro256, n: usize, mean: f64, sd: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let s: f64 = (0..12).map(|_| rng.below(1 << 30) as f64 / (1u64 << 30) as f64).sum();
                mean + sd * (s - 6.0)
            })
            .collect()
    }

    /// A gate run of the gate test's spread-only change (a 20 ms sleep, then the same sleep
    /// with +-6 ms of jitter) that the rank test alone called slower (ratio 1.17, p = 0.0026):
    /// 8 of its 10 runs happened to lie above a tight baseline, its median did not move.
    #[test]
    fn runs_that_only_spread_wider_are_not_slower_though_most_rank_above() {
        let base: Vec<f64> = (0..30).map(|i| 0.0206 + (i % 5) as f64 * 2e-5).collect();
        let now: Vec<f64> = [17.9, 22.1, 22.9, 23.3, 23.5, 25.0, 25.0, 25.4, 25.6, 26.5]
            .iter()
            .map(|ms| ms * 1e-3)
            .collect();
        let o = judge(&base, &now, &TimeRule::default(), Some((0.97, 1.03)));
        assert_ne!(o.verdict, Verdict::Slower, "{o:?}");
        // The ranks alone would have said it: most runs are above the baseline's top.
        let up: Vec<f64> = now.iter().map(|x| x / ((1.0 + o.threshold) * 1.03)).collect();
        assert!(mann_whitney_greater(&base, &up) < 0.01, "{o:?}");
    }

    #[test]
    fn twenty_percent_slower_is_slower() {
        let mut rng = Xoshiro256::new(1);
        let base = normal(&mut rng, 30, 0.040, 0.002);
        let now = normal(&mut rng, 10, 0.048, 0.002);
        let o = judge(&base, &now, &TimeRule::default(), None);
        assert_eq!(o.verdict, Verdict::Slower, "{o:?}");
        assert!((o.ratio - 1.2).abs() < 0.03);
    }

    #[test]
    fn the_verdict_never_contradicts_the_median_change_shown_beside_it() {
        // Hot start-ups of a few milliseconds come in two modes (most runs fast, some slow):
        // the rank test said "not slower" for a median 173% higher with a 122% threshold.
        let mut rng = Xoshiro256::new(9);
        let rule = TimeRule::default();
        let bimodal = |rng: &mut Xoshiro256, n: usize, fast: f64, slow: f64, share: usize| {
            (0..n)
                .map(|_| {
                    let x = if rng.below(100) < share { slow } else { fast };
                    x * (1.0 + rng.below(1000) as f64 / 5000.0)
                })
                .collect::<Vec<f64>>()
        };
        for _ in 0..300 {
            let (share_b, n, share_c) =
                (10 + rng.below(40), 10 + rng.below(50), 10 + rng.below(80));
            let base = bimodal(&mut rng, 30, 0.001, 0.004, share_b);
            let now = bimodal(&mut rng, n, 0.001, 0.004, share_c);
            let o = judge(&base, &now, &rule, None);
            match o.verdict {
                Verdict::NotSlower => assert!(o.ratio <= 1.0 + o.threshold, "{o:?}"),
                Verdict::Slower => assert!(o.ratio > 1.0 + o.threshold, "{o:?}"),
                _ => {}
            }
        }
    }

    #[test]
    fn the_same_program_is_not_slower() {
        let mut rng = Xoshiro256::new(2);
        let base = normal(&mut rng, 30, 0.040, 0.001);
        let now = normal(&mut rng, 20, 0.040, 0.001);
        let o = judge(&base, &now, &TimeRule::default(), None);
        assert_eq!(o.verdict, Verdict::NotSlower, "{o:?}");
    }

    #[test]
    fn a_slowdown_below_the_noise_is_never_slower() {
        // 8% slower, with noise of 30%: the threshold rises to the noise.
        let mut rng = Xoshiro256::new(3);
        let base = normal(&mut rng, 30, 0.010, 0.006);
        let now = normal(&mut rng, 60, 0.0108, 0.006);
        let o = judge(&base, &now, &TimeRule::default(), None);
        assert!(o.threshold > 0.08, "{o:?}");
        assert_ne!(o.verdict, Verdict::Slower, "{o:?}");
    }

    #[test]
    fn a_machine_slower_by_as_much_as_the_program_is_not_a_regression() {
        let mut rng = Xoshiro256::new(4);
        let base = normal(&mut rng, 30, 0.040, 0.001);
        let now = normal(&mut rng, 20, 0.050, 0.001);
        let rule = TimeRule::default();
        assert_eq!(judge(&base, &now, &rule, Some((1.0, 1.0))).verdict, Verdict::Slower);
        assert_eq!(judge(&base, &now, &rule, Some((1.2, 1.25))).verdict, Verdict::Unclear);
        // A faster machine does not make a program slower.
        assert_eq!(judge(&base, &now, &rule, Some((0.5, 0.5))).verdict, Verdict::Slower);
    }

    #[test]
    fn a_baseline_recorded_on_a_busier_machine_does_not_let_a_regression_through() {
        // The baseline's runs and calibration 25% slower than now (a test suite ran beside it):
        // 20% more work now measures about as the baseline did, and was called not slower.
        let mut rng = Xoshiro256::new(6);
        let rule = TimeRule::default();
        let base = normal(&mut rng, 30, 0.135, 0.002);
        let now = normal(&mut rng, 20, 0.125, 0.002);
        assert_eq!(judge(&base, &now, &rule, None).verdict, Verdict::NotSlower);
        assert_eq!(judge(&base, &now, &rule, Some((0.76, 0.82))).verdict, Verdict::Unclear);
        // The same program on a machine that got faster is still not slower.
        let same = normal(&mut rng, 20, 0.135 * 0.79, 0.002);
        assert_eq!(judge(&base, &same, &rule, Some((0.76, 0.82))).verdict, Verdict::NotSlower);
    }

    #[test]
    fn more_spread_at_the_same_median_is_never_slower() {
        // A change that only adds noise: the same median, three times the spread. Over many
        // draws the rule says unclear or not slower, never slower.
        let mut rng = Xoshiro256::new(5);
        let rule = TimeRule::default();
        for _ in 0..400 {
            let base = normal(&mut rng, 30, 0.020, 0.0007);
            let now = normal(&mut rng, 10, 0.020, 0.002);
            let o = judge(&base, &now, &rule, None);
            assert_ne!(o.verdict, Verdict::Slower, "{o:?} {base:?} {now:?}");
        }
    }

    #[test]
    fn few_runs_are_unclear() {
        assert_eq!(
            judge(&[1.0, 1.0], &[2.0, 2.0, 2.0], &TimeRule::default(), None).verdict,
            Verdict::Unclear
        );
    }

    #[test]
    fn the_run_bound_follows_the_effect_in_iqr_units() {
        // Equal sides, alpha 0.01 one-sided, power 0.95: large effects need few runs, small
        // ones many (Pinpoint's table: about 10 at 1.9 IQR, 360 at 0.3).
        let equal = |m: f64| {
            // n_b = n_c = n satisfies n/2 >= K.
            (3..5000).find(|&n| runs_needed(m, n, 0.01, 0.95).is_some_and(|c| c <= n)).unwrap()
        };
        assert_eq!(equal(1.9), 13);
        assert_eq!(equal(0.3), 208);
        // A baseline too small for the effect: no number of runs now is enough.
        assert_eq!(runs_needed(0.3, 30, 0.01, 0.95), None);
        let rule = TimeRule::default();
        let base: Vec<f64> = (0..30).map(|i| 1.0 + (i % 10) as f64 * 0.01).collect();
        let b = run_bound(&base, 0.05, &rule, 10);
        assert!(b.runs >= 10 && b.runs <= rule.max_runs, "{b:?}");
        // No spread at all: the first batch decides.
        assert_eq!(run_bound(&[1.0; 30], 0.05, &rule, 10).runs, 10);
    }
}
