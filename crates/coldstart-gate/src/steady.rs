//! The rule for steady figures: bytes and requests read, major faults, pages touched,
//! instructions.
//!
//! These barely move from run to run, so a regression of a few pages must show. The rule
//! compares medians, which a rare odd run cannot move, against a limit that the larger of two
//! sets: the baseline's own spread, and the noise model's floor ([`crate::noise`]), what a busy
//! machine moves the figure by on an unchanged program:
//!
//! ```text
//! spread, more than 10 baseline values:
//!   sigma = IQR(baseline) / 1.349
//!   spread = Z x 1.2533 x sigma x sqrt(1/n_baseline + 1/n_now)
//! spread, 10 or fewer (page profiles):
//!   spread = max(baseline) + 2 x (max(baseline) - min(baseline)) - median(baseline)
//! a figure whose runs fall in clusters:
//!   spread = max(spread, quantile_0.9(baseline) - median(baseline))
//! floor = max(floor_share x median(baseline), allowance)
//! limit = median(baseline) + max(spread, floor) + slack
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
//! five.
//!
//! The spread alone is not enough: a baseline recorded on a quiet machine has a narrow one
//! (every cold run of Node.js read 609 requests, give or take one), and a gate under load moves
//! the figure by more than that without any change (610). A figure whose runs fall in two
//! clusters has a median that jumps from one to the other as the load shifts which cluster
//! most runs land in: its limit keeps the baseline's upper cluster. The floors are in
//! [`crate::noise`], with what they come from.

use serde::{Deserialize, Serialize};

use crate::figure::Verdict;
use crate::noise::FigureNoise;
use coldstart_formats::stats::{iqr, quantile_sorted, sorted};

/// Standard errors between the baseline's median and the limit.
pub const Z: f64 = 5.0;

/// Up to this many baseline values, the limit is set by their range.
pub const FEW: usize = 10;

/// The quantile of the baseline a figure whose runs fall in clusters keeps within its limit.
pub const UPPER: f64 = 0.9;

/// What the steady rule found for one figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteadyOutcome {
    /// Median of the baseline's runs.
    pub baseline: f64,
    /// Median of the runs now.
    pub now: f64,
    /// Above this, the figure is slower.
    pub limit: f64,
    /// How far above the baseline's median the baseline's own spread (or its upper cluster)
    /// puts the limit, slack apart.
    pub spread: f64,
    /// How far above the baseline's median the noise model's floor puts it (the larger of the
    /// two counts).
    #[serde(default)]
    pub floor: f64,
    /// The configured slack's share of the limit.
    pub slack: f64,
    pub n_baseline: usize,
    pub n_now: usize,
    pub verdict: Verdict,
}

/// Judge a steady figure: `base` and `now` are the values of each run, `noise` what moves the
/// figure of an unchanged program ([`crate::noise`]), `slack` the user's allowance in the
/// figure's unit. Either side empty: not compared.
pub fn judge(base: &[f64], now: &[f64], noise: FigureNoise, slack: f64) -> SteadyOutcome {
    let (b, c) = (sorted(base), sorted(now));
    let median = coldstart_formats::stats::median;
    let (mb, mc) = (median(&b), median(&c));
    let (nb, nc) = (b.len(), c.len());
    let mut spread = if nb == 0 || nc == 0 {
        0.0
    } else if nb <= FEW {
        let (min, max) = (b[0], b[nb - 1]);
        max + 2.0 * (max - min) - mb
    } else {
        Z * 1.2533 * iqr(&b) / 1.349 * (1.0 / nb as f64 + 1.0 / nc as f64).sqrt()
    };
    if noise.clusters && nb > 0 {
        spread = spread.max(quantile_sorted(&b, UPPER) - mb);
    }
    let floor = if nb == 0 { 0.0 } else { (noise.floor * mb.abs()).max(noise.allowance) };
    let limit = mb + spread.max(floor) + slack;
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
        floor,
        slack,
        n_baseline: nb,
        n_now: nc,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No floor, no clusters: the baseline's own spread alone.
    const EXACT: FigureNoise = FigureNoise::NONE;

    #[test]
    fn one_more_request_over_a_figure_that_never_moved_is_slower() {
        let base = [12.0; 20];
        let now = [13.0; 10];
        let o = judge(&base, &now, EXACT, 0.0);
        assert_eq!(o.verdict, Verdict::Slower);
        assert_eq!(o.limit, 12.0);
        assert_eq!(judge(&base, &[12.0; 10], EXACT, 0.0).verdict, Verdict::NotSlower);
        // A slack of one request absorbs it.
        assert_eq!(judge(&base, &now, EXACT, 1.0).verdict, Verdict::NotSlower);
    }

    #[test]
    fn a_rare_odd_run_moves_neither_side() {
        let mut base = vec![12.0; 20];
        base[3] = 30.0; // one run read back a page another process evicted
        let mut now = vec![12.0; 10];
        now[7] = 40.0;
        now[8] = 11.0;
        assert_eq!(judge(&base, &now, EXACT, 0.0).verdict, Verdict::NotSlower);
        // But the median moving by one is seen.
        let now = [13.0, 13.0, 13.0, 12.0, 13.0, 13.0, 13.0, 13.0, 12.0, 13.0];
        assert_eq!(judge(&base, &now, EXACT, 0.0).verdict, Verdict::Slower);
    }

    #[test]
    fn a_noisy_figure_gets_a_limit_its_noise_sets() {
        // Pages touched counted from today's page profiles move by tens of pages.
        let base = [383.0, 409.0, 430.0];
        let o = judge(&base, &[399.0, 429.0, 408.0], EXACT, 0.0);
        assert_eq!(o.verdict, Verdict::NotSlower);
        assert!(o.limit > 430.0, "{o:?}");
        // Few values: the limit is the largest plus twice the range.
        assert_eq!(o.limit, 430.0 + 2.0 * 47.0);
        assert_eq!(judge(&base, &[600.0, 610.0, 590.0], EXACT, 0.0).verdict, Verdict::Slower);
    }

    #[test]
    fn false_alarms_over_many_draws_of_the_same_noise_are_rare() {
        // 10,000 comparisons of 20 baseline values with 10 drawn from the same distribution
        // (a fixed generator): about 0.05% should exceed the limit (see the module docs);
        // a limit at 3 standard errors would give about 1%.
        let mut rng = coldstart_formats::stats::Xoshiro256::new(7);
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
            if judge(&b, &c, EXACT, 0.0).verdict == Verdict::Slower {
                alarms += 1;
            }
        }
        assert!(alarms <= 10, "{alarms} false alarms in 10,000");
        // Five page profiles against five: the range rule.
        let mut alarms = 0;
        for _ in 0..10_000 {
            let (b, c) = (draw(5), draw(5));
            if judge(&b, &c, EXACT, 0.0).verdict == Verdict::Slower {
                alarms += 1;
            }
        }
        assert!(alarms <= 10, "{alarms} false alarms in 10,000 with five values");
    }

    /// Reads of the emulated device (hdd, 128 KiB read-ahead) by the cold runs of Node.js 20
    /// running a script that requires http, zlib and crypto and uses Intl
    /// (bench/gate-programs.sh), recorded with the gate's runner on the project's 2-core
    /// machine (bench/gate-noise.sh's noise-record): 30 runs while nothing else was added, as
    /// a baseline records them, then two batches of 5 under `newcomer.sh --busy 1`.
    const NODE_QUIET: [f64; 30] = [
        609.0, 609.0, 608.0, 608.0, 608.0, 609.0, 609.0, 610.0, 609.0, 609.0, 609.0, 608.0, 609.0,
        609.0, 609.0, 608.0, 608.0, 609.0, 609.0, 609.0, 609.0, 609.0, 609.0, 609.0, 609.0, 609.0,
        609.0, 609.0, 609.0, 609.0,
    ];
    const NODE_BUSY: [[f64; 5]; 2] =
        [[609.0, 611.0, 610.0, 609.0, 610.0], [610.0, 608.0, 609.0, 611.0, 611.0]];

    #[test]
    fn recorded_device_reads_of_an_unchanged_node_under_one_busy_job_are_not_slower() {
        let model = FigureNoise::of(crate::figure::Figure::DeviceReadRequests);
        let all: Vec<f64> = NODE_BUSY.concat();
        for now in [&NODE_BUSY[0][..], &NODE_BUSY[1][..], &all[..]] {
            // The baseline's own spread alone (the rule before the noise model): its
            // interquartile range is 0, its limit 609, and one read more is a false alarm.
            let alone = judge(&NODE_QUIET, now, EXACT, 0.0);
            assert_eq!((alone.limit, alone.verdict), (609.0, Verdict::Slower), "{now:?}");
            let o = judge(&NODE_QUIET, now, model, 0.0);
            assert_eq!(o.verdict, Verdict::NotSlower, "{now:?}: {o:?}");
        }
    }

    #[test]
    fn a_figure_whose_runs_fall_in_two_clusters_keeps_the_upper_one_within_its_limit() {
        // Shaped as Node.js's reads of the emulated device were seen: most runs at 608 to 610,
        // some at 660 to 724; a gate whose runs land in the upper cluster more often has its
        // median there (667 against 609).
        let mut base = vec![609.0; 24];
        base.extend([664.0, 667.0, 671.0, 690.0, 712.0, 724.0]);
        let now = [609.0, 610.0, 664.0, 667.0, 668.0, 670.0, 712.0];
        let model = FigureNoise { floor: 0.0, allowance: 0.0, clusters: true };
        assert_eq!(judge(&base, &now, EXACT, 0.0).verdict, Verdict::Slower);
        let o = judge(&base, &now, model, 0.0);
        assert_eq!(o.verdict, Verdict::NotSlower, "{o:?}");
        // Every run above the upper cluster is still slower.
        assert_eq!(judge(&base, &[730.0; 7], model, 0.0).verdict, Verdict::Slower);
    }

    #[test]
    fn the_floor_is_a_share_of_the_median_or_an_allowance_whichever_is_larger() {
        let base = [4690.0; 6];
        let pages = FigureNoise { floor: 0.0005, allowance: 2.0, clusters: false };
        // 0.05% of 4,690 is 2.3 pages: two more are not slower, five are.
        assert_eq!(judge(&base, &[4692.0; 2], pages, 0.0).verdict, Verdict::NotSlower);
        assert_eq!(judge(&base, &[4695.0; 2], pages, 0.0).verdict, Verdict::Slower);
        let small = [300.0; 6];
        assert_eq!(judge(&small, &[302.0; 2], pages, 0.0).limit, 302.0);
        assert_eq!(judge(&small, &[303.0; 2], pages, 0.0).verdict, Verdict::Slower);
    }

    #[test]
    fn a_missing_side_is_not_compared() {
        assert_eq!(judge(&[], &[1.0], EXACT, 0.0).verdict, Verdict::NotCompared);
        assert_eq!(judge(&[1.0], &[], EXACT, 0.0).verdict, Verdict::NotCompared);
    }
}
