//! The rule for steady figures: bytes and requests read, major faults, pages touched,
//! instructions.
//!
//! These barely move from run to run, so a regression of one read request or one page must
//! show. The rule compares medians, which a rare odd run cannot move, against a limit that the
//! baseline's own spread sets:
//!
//! ```text
//! more than 10 baseline values:
//!   sigma = IQR(baseline) / 1.349
//!   limit = median(baseline) + Z x 1.2533 x sigma x sqrt(1/n_baseline + 1/n_now) + slack
//! 10 or fewer (page profiles):
//!   limit = max(baseline) + 2 x (max(baseline) - min(baseline)) + slack
//! slower  <=>  median(now) > limit
//! ```
//!
//! `sigma` is the spread of one run, estimated from the interquartile range as for a normal
//! distribution (a rare odd run does not move it), and `1.2533 sigma sqrt(1/n_b + 1/n_c)` the
//! standard error of the difference of two medians. `Z` = 5 rather than 4 because `sigma` is
//! itself estimated: simulated under no change (normal values, 100,000 draws), the median now
//! exceeds the limit in 0.05% of comparisons with 20 baseline runs against 10, and less with
//! 30. Ten values or fewer cannot estimate a spread that well (with three, the limit above
//! fails 2% of the time), hence the range rule: under no change 0.04% with five against
//! five. A figure that did not move in the baseline (every run read 12 requests) has its limit
//! at its median either way: one request more is caught unless a slack is configured.

use serde::{Deserialize, Serialize};

use crate::figure::Verdict;
use crate::stats::{iqr, sorted};

/// Standard errors between the baseline's median and the limit.
pub const Z: f64 = 5.0;

/// Up to this many baseline values, the limit is set by their range.
pub const FEW: usize = 10;

/// What the steady rule found for one figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteadyOutcome {
    /// Median of the baseline's runs.
    pub baseline: f64,
    /// Median of the runs now.
    pub now: f64,
    /// Above this, the figure is slower.
    pub limit: f64,
    /// The spread's share of the limit: how far above the baseline's median it lies, slack
    /// apart.
    pub spread: f64,
    /// The configured slack's share of the limit.
    pub slack: f64,
    pub n_baseline: usize,
    pub n_now: usize,
    pub verdict: Verdict,
}

/// Judge a steady figure: `base` and `now` are the values of each run, `slack` the
/// allowance in the figure's unit. Either side empty: not compared.
pub fn judge(base: &[f64], now: &[f64], slack: f64) -> SteadyOutcome {
    let (b, c) = (sorted(base), sorted(now));
    let median = coldstart_measure::stats::median;
    let (mb, mc) = (median(&b), median(&c));
    let (nb, nc) = (b.len(), c.len());
    let spread = if nb == 0 || nc == 0 {
        0.0
    } else if nb <= FEW {
        let (min, max) = (b[0], b[nb - 1]);
        max + 2.0 * (max - min) - mb
    } else {
        Z * 1.2533 * iqr(&b) / 1.349 * (1.0 / nb as f64 + 1.0 / nc as f64).sqrt()
    };
    let limit = mb + spread + slack;
    let verdict = if nb == 0 || nc == 0 {
        Verdict::NotCompared
    } else if mc > limit {
        Verdict::Slower
    } else {
        Verdict::NotSlower
    };
    SteadyOutcome {
        baseline: mb,
        now: mc,
        limit,
        spread,
        slack,
        n_baseline: nb,
        n_now: nc,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_more_request_over_a_figure_that_never_moved_is_slower() {
        let base = [12.0; 20];
        let now = [13.0; 10];
        let o = judge(&base, &now, 0.0);
        assert_eq!(o.verdict, Verdict::Slower);
        assert_eq!(o.limit, 12.0);
        assert_eq!(judge(&base, &[12.0; 10], 0.0).verdict, Verdict::NotSlower);
        // A slack of one request absorbs it.
        assert_eq!(judge(&base, &now, 1.0).verdict, Verdict::NotSlower);
    }

    #[test]
    fn a_rare_odd_run_moves_neither_side() {
        let mut base = vec![12.0; 20];
        base[3] = 30.0; // one run read back a page another process evicted
        let mut now = vec![12.0; 10];
        now[7] = 40.0;
        now[8] = 11.0;
        assert_eq!(judge(&base, &now, 0.0).verdict, Verdict::NotSlower);
        // But the median moving by one is seen.
        let now = [13.0, 13.0, 13.0, 12.0, 13.0, 13.0, 13.0, 13.0, 12.0, 13.0];
        assert_eq!(judge(&base, &now, 0.0).verdict, Verdict::Slower);
    }

    #[test]
    fn a_noisy_figure_gets_a_limit_its_noise_sets() {
        // Pages touched counted from today's page profiles move by tens of pages.
        let base = [383.0, 409.0, 430.0];
        let o = judge(&base, &[399.0, 429.0, 408.0], 0.0);
        assert_eq!(o.verdict, Verdict::NotSlower);
        assert!(o.limit > 430.0, "{o:?}");
        // Few values: the limit is the largest plus twice the range.
        assert_eq!(o.limit, 430.0 + 2.0 * 47.0);
        assert_eq!(judge(&base, &[600.0, 610.0, 590.0], 0.0).verdict, Verdict::Slower);
    }

    #[test]
    fn false_alarms_over_many_draws_of_the_same_noise_are_rare() {
        // 10,000 comparisons of 20 baseline values with 10 drawn from the same distribution
        // (a fixed generator): about 0.05% should exceed the limit (see the module docs);
        // a limit at 3 standard errors would give about 1%.
        let mut rng = coldstart_measure::stats::Xoshiro256::new(7);
        let mut draw = |n: usize| -> Vec<f64> {
            (0..n)
                .map(|_| {
                    let s: f64 = (0..12).map(|_| rng.below(1_000_000) as f64 / 1e6).sum();
                    1000.0 + 10.0 * (s - 6.0)
                })
                .collect()
        };
        let mut alarms = 0;
        for _ in 0..10_000 {
            let (b, c) = (draw(20), draw(10));
            if judge(&b, &c, 0.0).verdict == Verdict::Slower {
                alarms += 1;
            }
        }
        assert!(alarms <= 10, "{alarms} false alarms in 10,000");
        // Five page profiles against five: the range rule.
        let mut alarms = 0;
        for _ in 0..10_000 {
            let (b, c) = (draw(5), draw(5));
            if judge(&b, &c, 0.0).verdict == Verdict::Slower {
                alarms += 1;
            }
        }
        assert!(alarms <= 10, "{alarms} false alarms in 10,000 with five values");
    }

    #[test]
    fn a_missing_side_is_not_compared() {
        assert_eq!(judge(&[], &[1.0], 0.0).verdict, Verdict::NotCompared);
        assert_eq!(judge(&[1.0], &[], 0.0).verdict, Verdict::NotCompared);
    }
}
