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
