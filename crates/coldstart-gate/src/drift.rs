//! Slow drift: many changes, each too small to fail the gate, that add up.
//!
//! A gate compares with the last baseline; when the baseline is updated after every merge, a
//! start-up that grows 1% a week never fails it. The history (one entry per gated run, see
//! [`crate::history`]) holds each run's median of each figure, so the level now can be
//! compared with the levels before. Two detectors, both pure functions of that series:
//!
//! - [`Method::ChangePoint`]: binary segmentation with Pettitt's rank test (a change point is
//!   kept at p < [`CHANGE_POINT_ALPHA`], segments of at least [`MIN_SEGMENT`] entries); the
//!   level of the last segment (its median) is compared with the lowest level of the segments
//!   before it.
//! - [`Method::HistoricalChanges`]: rustc-perf's rule made to see drift. rustc-perf flags a
//!   change between two consecutive runs above `Q3 + 3 x IQR` of the history's changes; here
//!   the current value is compared with each of the last [`WINDOW`] entries, against the
//!   same fence of the history's consecutive changes.
//!
//! Either reports drift only when the rise is also larger than the figure's own threshold
//! (what a single comparison with the baseline would have failed for). Which is the default
//! was chosen by measurement on recorded histories (BENCHMARKS.md, "The gate's drift
//! detectors"): [`DEFAULT_METHOD`].

use serde::{Deserialize, Serialize};

use coldstart_formats::stats::{median, quantile_sorted, sorted};

/// A change point is kept when Pettitt's test gives a p-value below this.
pub const CHANGE_POINT_ALPHA: f64 = 0.01;
/// The shortest segment between change points.
pub const MIN_SEGMENT: usize = 3;
/// The historical-changes rule compares the current value with this many entries back.
pub const WINDOW: usize = 20;
/// The longest series looked at (the most recent entries).
pub const MAX_SERIES: usize = 60;
/// The detector the gate uses.
pub const DEFAULT_METHOD: Method = Method::ChangePoint;

/// A drift detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    ChangePoint,
    HistoricalChanges,
}

impl Method {
    /// The name `--drift-method` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Method::ChangePoint => "change-point",
            Method::HistoricalChanges => "historical-changes",
        }
    }
}

impl std::str::FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Method, String> {
        match s {
            "change-point" => Ok(Method::ChangePoint),
            "historical-changes" => Ok(Method::HistoricalChanges),
            _ => Err(format!("unknown drift method `{s}`: use change-point or historical-changes")),
        }
    }
}

/// A rise of the level found in a series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    /// Index in the series of the first entry of the level compared with.
    pub since: usize,
    /// That level.
    pub then: f64,
    /// The level now.
    pub now: f64,
}

impl Drift {
    pub fn rise(&self) -> f64 {
        self.now - self.then
    }
}

/// Look for a rise larger than `threshold` (in the series' unit) at the end of `series`
/// (oldest first, the current run last).
pub fn detect(series: &[f64], threshold: f64, method: Method) -> Option<Drift> {
    let start = series.len().saturating_sub(MAX_SERIES);
    let xs: Vec<f64> = series[start..].to_vec();
    if xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let found = match method {
        Method::ChangePoint => change_point(&xs),
        Method::HistoricalChanges => historical_changes(&xs),
    }?;
    (found.rise() > threshold).then(|| Drift { since: found.since + start, ..found })
}

/// Pettitt's statistic over `xs`: the split `k` (the first `k` values against the rest) with
/// the largest |U_k|, and its approximate two-sided p-value `2 exp(-6 K^2 / (n^3 + n^2))`.
pub fn pettitt(xs: &[f64]) -> (usize, f64) {
    let n = xs.len();
    if n < 2 {
        return (0, 1.0);
    }
    // U_k = sum over i < k <= j of sign(x_j - x_i), updated one split at a time:
    // U_k = U_{k-1} + sum_j sign(x_j - x_{k-1}) over all j.
    let sign = |a: f64, b: f64| (b > a) as i64 - (b < a) as i64;
    let mut u: i64 = 0;
    let (mut best_k, mut best) = (0, 0i64);
    for k in 1..n {
        let v = xs[k - 1];
        u += xs.iter().map(|&x| sign(v, x)).sum::<i64>();
        if u.abs() > best {
            best = u.abs();
            best_k = k;
        }
    }
    let (k2, nf) = ((best as f64).powi(2), n as f64);
    let p = (2.0 * (-6.0 * k2 / (nf.powi(3) + nf.powi(2))).exp()).min(1.0);
    (best_k, p)
}

/// Change points of `xs` by binary segmentation: the start of each segment, 0 first.
pub fn segments(xs: &[f64]) -> Vec<usize> {
    let mut starts = vec![0];
    split(xs, 0, &mut starts);
    starts.sort_unstable();
    starts
}

fn split(xs: &[f64], offset: usize, starts: &mut Vec<usize>) {
    if xs.len() < 2 * MIN_SEGMENT {
        return;
    }
    let (k, p) = pettitt(xs);
    if p >= CHANGE_POINT_ALPHA || k < MIN_SEGMENT || xs.len() - k < MIN_SEGMENT {
        return;
    }
    starts.push(offset + k);
    split(&xs[..k], offset, starts);
    split(&xs[k..], offset + k, starts);
}

/// The last segment's level against the lowest level before it.
fn change_point(xs: &[f64]) -> Option<Drift> {
    let starts = segments(xs);
    if starts.len() < 2 {
        return None;
    }
    let bounds: Vec<(usize, usize)> = starts
        .iter()
        .zip(starts.iter().skip(1).chain([&xs.len()]))
        .map(|(&a, &b)| (a, b))
        .collect();
    let (last_start, last_end) = *bounds.last()?;
    let now = median(&xs[last_start..last_end]);
    let (since, then) = bounds[..bounds.len() - 1]
        .iter()
        .map(|&(a, b)| (a, median(&xs[a..b])))
        .min_by(|x, y| x.1.total_cmp(&y.1))?;
    Some(Drift { since, then, now })
}

/// The current value against each of the last [`WINDOW`] entries, with rustc-perf's fence
/// over the series' consecutive changes (the current one excluded).
fn historical_changes(xs: &[f64]) -> Option<Drift> {
    let n = xs.len();
    if n < 2 * MIN_SEGMENT {
        return None;
    }
    let changes: Vec<f64> = xs[..n - 1].windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    let s = sorted(&changes);
    let (q1, q3) = (quantile_sorted(&s, 0.25), quantile_sorted(&s, 0.75));
    let fence = q3 + 3.0 * (q3 - q1);
    let now = xs[n - 1];
    // The earliest entry within the window the current value rose above by more than the fence.
    (n.saturating_sub(WINDOW + 1)..n - 1)
        .filter(|&i| now - xs[i] > fence)
        .map(|i| Drift { since: i, then: xs[i], now })
        .max_by(|a, b| a.rise().total_cmp(&b.rise()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_formats::stats::Xoshiro256;

    fn noise(rng: &mut Xoshiro256, n: usize, level: f64, sd: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let s: f64 = (0..12).map(|_| rng.below(1 << 30) as f64 / (1u64 << 30) as f64).sum();
                level + sd * (s - 6.0)
            })
            .collect()
    }

    #[test]
    fn pettitt_finds_a_step() {
        let mut xs = vec![10.0; 15];
        xs.extend([12.0; 15]);
        let (k, p) = pettitt(&xs);
        assert_eq!(k, 15);
        assert!(p < 1e-4, "{p}");
        let (_, p) = pettitt(&[1.0, 3.0, 2.0, 1.0, 3.0, 2.0, 1.0, 3.0]);
        assert!(p > 0.5, "{p}");
    }

    #[test]
    fn both_detectors_see_a_slow_drift_and_ignore_noise() {
        for method in [Method::ChangePoint, Method::HistoricalChanges] {
            let mut rng = Xoshiro256::new(11);
            // 40 runs rising 1% each (0.4 ms of 40 ms) under 1% noise: 40% in the end.
            let drift: Vec<f64> = noise(&mut rng, 40, 0.0, 0.0004)
                .iter()
                .enumerate()
                .map(|(i, e)| 0.040 * (1.0 + 0.01 * i as f64) + e)
                .collect();
            let d = detect(&drift, 0.002, method).unwrap_or_else(|| panic!("{method:?}"));
            assert!(d.rise() > 0.004, "{method:?} {d:?}");
            // The same noise without the drift: nothing over 50 series.
            for _ in 0..50 {
                let flat = noise(&mut rng, 40, 0.040, 0.0004);
                assert_eq!(detect(&flat, 0.002, method), None, "{method:?}");
            }
        }
    }

    #[test]
    fn a_rise_within_the_threshold_is_not_drift() {
        let mut xs = vec![10.0; 20];
        xs.extend([10.5; 20]);
        assert!(detect(&xs, 0.4, Method::ChangePoint).is_some());
        assert_eq!(detect(&xs, 1.0, Method::ChangePoint), None);
    }

    #[test]
    fn a_fall_is_not_drift() {
        let mut xs = vec![12.0; 20];
        xs.extend([10.0; 20]);
        assert_eq!(detect(&xs, 0.1, Method::ChangePoint), None);
        assert_eq!(detect(&xs, 0.1, Method::HistoricalChanges), None);
    }

    #[test]
    fn method_names_are_the_flags_values() {
        for m in [Method::ChangePoint, Method::HistoricalChanges] {
            assert_eq!(m.name().parse::<Method>(), Ok(m));
        }
    }

    #[test]
    fn short_series_say_nothing() {
        assert_eq!(detect(&[1.0, 5.0], 0.1, Method::ChangePoint), None);
        assert_eq!(detect(&[1.0, 5.0], 0.1, Method::HistoricalChanges), None);
        assert_eq!(detect(&[], 0.1, Method::ChangePoint), None);
    }
}
