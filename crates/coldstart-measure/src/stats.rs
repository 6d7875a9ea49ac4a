//! Robust statistics for start-up samples.
//!
//! STATUS: interface fixed by the workspace skeleton; implementation in progress.

use serde::{Deserialize, Serialize};

/// Statistics of one metric over the included runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    /// Mean with the highest and lowest sample dropped (the paper's method); the plain mean
    /// when fewer than 3 samples.
    pub trimmed_mean: f64,
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
    /// 95% bootstrap confidence interval of the median.
    pub ci95: (f64, f64),
    /// Median absolute deviation (scaled by 1.4826 to estimate sigma).
    pub mad: f64,
    /// Indices (into the samples given) of outliers: |x - median| > 3 MAD.
    pub outliers: Vec<usize>,
}

// ---- TEMPORARY SHIM (removed before merge; the real implementation lives in this file) ----
fn med(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if s.is_empty() {
        return 0.0;
    }
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

impl Summary {
    pub fn from_samples(samples: &[f64]) -> Summary {
        let n = samples.len();
        if n == 0 {
            return Summary::default();
        }
        let mean = samples.iter().sum::<f64>() / n as f64;
        let median = med(samples);
        let min = samples.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = samples.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sd = (samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n.max(2) as f64).sqrt();
        let dev: Vec<f64> = samples.iter().map(|x| (x - median).abs()).collect();
        let mad = med(&dev) * 1.4826;
        Summary {
            n,
            mean,
            median,
            trimmed_mean: mean,
            stddev: sd,
            min,
            max,
            ci95: (median - 2.0 * sd / (n as f64).sqrt(), median + 2.0 * sd / (n as f64).sqrt()),
            mad,
            outliers: vec![],
        }
    }
}

pub fn mann_whitney_p(_a: &[f64], _b: &[f64]) -> f64 {
    0.5
}

pub fn ratio_ci95(a: &[f64], b: &[f64]) -> (f64, (f64, f64)) {
    let r = med(b) / med(a);
    (r, (r * 0.9, r * 1.1))
}
