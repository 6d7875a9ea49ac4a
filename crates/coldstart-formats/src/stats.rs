//! Robust statistics for start-up samples: the one home of the statistics every stage uses
//! (measure's summaries and comparisons, the gate's rules, an experiment's cells, the report).
//!
//! Start-up times are skewed (a slow run is far slower than a fast run is fast) and a few runs
//! are disturbed by the rest of the machine, so the headline figure is the **median** with a
//! **bootstrap confidence interval**, beside the paper's trimmed mean (highest and lowest
//! dropped). Outliers are flagged with the median absolute deviation, which a single wild run
//! cannot inflate. Two samples are compared with the ratio of medians (bootstrap interval) and
//! the Mann-Whitney U test, which assumes no distribution; the gate adds quantiles, the
//! one-sided Mann-Whitney p-value, the sign test and the normal quantile function.
//!
//! Everything here is pure and deterministic: the bootstrap draws from a fixed-seed
//! xoshiro256** generator, so the same samples always give the same interval.

use crate::measure::Summary;

/// Resamples drawn by the bootstrap unless told otherwise.
pub const DEFAULT_RESAMPLES: usize = 2000;
/// The seed of the bootstrap's generator.
pub const DEFAULT_SEED: u64 = 0x636f_6c64_7374_6172; // "coldstar"
/// Scale of the MAD that makes it estimate the standard deviation of a normal distribution.
pub const MAD_SCALE: f64 = 1.4826;
/// Samples farther than this many (scaled) MADs from the median are outliers.
pub const OUTLIER_MADS: f64 = 3.0;

impl Summary {
    /// Summarise `samples` with [`DEFAULT_RESAMPLES`] bootstrap resamples.
    ///
    /// - Non-finite samples (NaN, infinities) are ignored; `n` counts the finite ones and
    ///   outlier indices still refer to positions in `samples`.
    /// - No finite sample: every field is zero and there are no outliers (never NaN, so the
    ///   JSON form stays valid).
    /// - One sample: it is the mean, median, min, max and both ends of the interval;
    ///   standard deviation and MAD are 0.
    /// - `stddev` is the sample standard deviation (n - 1 in the denominator).
    /// - When MAD is 0 (more than half the samples are equal) every sample that differs from
    ///   the median is an outlier.
    pub fn from_samples(samples: &[f64]) -> Summary {
        Summary::from_samples_with(samples, DEFAULT_RESAMPLES, DEFAULT_SEED)
    }

    /// [`Summary::from_samples`] with a chosen number of resamples and seed.
    pub fn from_samples_with(samples: &[f64], resamples: usize, seed: u64) -> Summary {
        let finite: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        let n = finite.len();
        if n == 0 {
            return Summary::default();
        }
        let mut sorted = finite.clone();
        sorted.sort_by(f64::total_cmp);
        let median = median_sorted(&sorted);
        let mean = mean(&sorted);
        let trimmed_mean = if n < 3 { mean } else { self::mean(&sorted[1..n - 1]) };
        let stddev = if n < 2 {
            0.0
        } else {
            (sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        };
        let mut deviations: Vec<f64> = sorted.iter().map(|x| (x - median).abs()).collect();
        deviations.sort_by(f64::total_cmp);
        let mad = MAD_SCALE * median_sorted(&deviations);
        let outliers = samples
            .iter()
            .enumerate()
            .filter(|(_, x)| x.is_finite() && (*x - median).abs() > OUTLIER_MADS * mad)
            .map(|(i, _)| i)
            .collect();
        let mut rng = Xoshiro256::new(seed);
        let ci95 = bootstrap_ci(&mut rng, resamples, |rng, buf| resample_median(rng, &sorted, buf));
        Summary {
            n,
            mean,
            median,
            trimmed_mean,
            stddev,
            min: sorted[0],
            max: sorted[n - 1],
            ci95: ci95.unwrap_or((median, median)),
            mad,
            outliers,
        }
    }
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Median of sorted, non-empty samples (the mean of the middle two for an even count).
fn median_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// The median of `samples` (NaN-free input expected; 0 for none).
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    median_sorted(&sorted)
}

/// The median (mean of the middle two for an even count); `None` for no value. An
/// experiment's cell figures are the medians of its runs, and a report's summaries of cells
/// use the same.
pub fn checked_median(samples: &[f64]) -> Option<f64> {
    (!samples.is_empty()).then(|| median(samples))
}

/// The finite values of `xs`, sorted.
pub fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The `q` quantile (0..=1, clamped) of sorted, non-empty samples, linearly interpolated
/// between order statistics (type 7, the default of R and NumPy).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// Interquartile range of `xs` (0 for fewer than two finite values).
pub fn iqr(xs: &[f64]) -> f64 {
    let s = sorted(xs);
    if s.len() < 2 {
        return 0.0;
    }
    quantile_sorted(&s, 0.75) - quantile_sorted(&s, 0.25)
}

/// The median of a resample (with replacement) of `sorted`, using `buf` as scratch.
fn resample_median(rng: &mut Xoshiro256, sorted: &[f64], buf: &mut Vec<f64>) -> f64 {
    buf.clear();
    buf.extend((0..sorted.len()).map(|_| sorted[rng.below(sorted.len())]));
    buf.sort_by(f64::total_cmp);
    median_sorted(buf)
}

/// Percentile-method 95% interval of a bootstrapped statistic; `None` with no resamples.
fn bootstrap_ci(
    rng: &mut Xoshiro256,
    resamples: usize,
    mut statistic: impl FnMut(&mut Xoshiro256, &mut Vec<f64>) -> f64,
) -> Option<(f64, f64)> {
    if resamples == 0 {
        return None;
    }
    let mut buf = Vec::new();
    let mut stats: Vec<f64> = (0..resamples).map(|_| statistic(rng, &mut buf)).collect();
    stats.sort_by(f64::total_cmp);
    Some((quantile_sorted(&stats, 0.025), quantile_sorted(&stats, 0.975)))
}

/// `median(b) / median(a)` with a 95% bootstrap interval (percentile method; `a` and `b` are
/// resampled independently, [`DEFAULT_RESAMPLES`] times). A ratio above 1 means B is slower.
/// Non-finite samples are ignored. When either side is empty or `median(a)` is not positive
/// the ratio is undefined and all three numbers are NaN.
pub fn ratio_ci95(a: &[f64], b: &[f64]) -> (f64, (f64, f64)) {
    ratio_ci95_with(a, b, DEFAULT_RESAMPLES, DEFAULT_SEED)
}

/// [`ratio_ci95`] with a chosen number of resamples and seed.
pub fn ratio_ci95_with(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> (f64, (f64, f64)) {
    let (a, b) = (sorted(a), sorted(b));
    if a.is_empty() || b.is_empty() || median_sorted(&a) <= 0.0 {
        return (f64::NAN, (f64::NAN, f64::NAN));
    }
    let ratio = median_sorted(&b) / median_sorted(&a);
    let mut rng = Xoshiro256::new(seed);
    let mut buf_b = Vec::new();
    let ci = bootstrap_ci(&mut rng, resamples, |rng, buf_a| {
        let ma = resample_median(rng, &a, buf_a);
        let mb = resample_median(rng, &b, &mut buf_b);
        mb / ma
    });
    (ratio, ci.unwrap_or((ratio, ratio)))
}

/// Two-sided p-value of the Mann-Whitney U test that `a` and `b` come from the same
/// distribution.
///
/// - Exact null distribution of U when both samples have at most [`EXACT_MAX`] values and
///   there are no ties (as `scipy.stats.mannwhitneyu(method="auto")`).
/// - Otherwise the normal approximation with the tie correction of the variance and a
///   continuity correction of 0.5.
///
/// Non-finite samples are ignored. With an empty side, or when every value is tied, there is
/// no evidence of a difference and the result is 1.
pub fn mann_whitney_p(a: &[f64], b: &[f64]) -> f64 {
    let a: Vec<f64> = a.iter().copied().filter(|x| x.is_finite()).collect();
    let b: Vec<f64> = b.iter().copied().filter(|x| x.is_finite()).collect();
    let (n1, n2) = (a.len(), b.len());
    if n1 == 0 || n2 == 0 {
        return 1.0;
    }
    // Rank the pooled samples, ties getting their average rank.
    let mut pooled: Vec<(f64, bool)> =
        a.iter().map(|&x| (x, true)).chain(b.iter().map(|&x| (x, false))).collect();
    pooled.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = pooled.len();
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0; // sum of t^3 - t over groups of ties
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_a += rank * pooled[i..=j].iter().filter(|p| p.1).count() as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let u1 = rank_sum_a - (n1 * (n1 + 1)) as f64 / 2.0;
    let (n1f, n2f) = (n1 as f64, n2 as f64);
    let u = u1.max(n1f * n2f - u1);
    if n1 <= EXACT_MAX && n2 <= EXACT_MAX && tie_term == 0.0 {
        return (2.0 * exact_u_sf(n1, n2, u.round() as usize)).min(1.0);
    }
    let mu = n1f * n2f / 2.0;
    let nf = n as f64;
    let var = n1f * n2f / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    if var <= 0.0 {
        return 1.0;
    }
    let z = (u - mu - 0.5) / var.sqrt();
    (2.0 * normal_sf(z)).min(1.0)
}

/// The largest sample size for which [`mann_whitney_p`] uses the exact distribution.
pub const EXACT_MAX: usize = 20;

/// P(U >= u) under the null hypothesis for sample sizes `n1`, `n2`, by counting the
/// arrangements with each U: f(i, j, k) = f(i - 1, j, k - j) + f(i, j - 1, k).
fn exact_u_sf(n1: usize, n2: usize, u: usize) -> f64 {
    let max_u = n1 * n2;
    // counts[j] holds f(i, j, .) for the current i.
    let mut counts: Vec<Vec<f64>> = (0..=n2).map(|_| vec![1.0]).collect(); // i = 0
    for i in 1..=n1 {
        let mut next: Vec<Vec<f64>> = Vec::with_capacity(n2 + 1);
        next.push(vec![1.0]); // j = 0
        for j in 1..=n2 {
            let mut f = vec![0.0; i * j + 1];
            for (k, c) in counts[j].iter().enumerate() {
                f[k + j] += c; // the largest value belongs to the first sample
            }
            for (k, c) in next[j - 1].iter().enumerate() {
                f[k] += c; // it belongs to the second
            }
            next.push(f);
        }
        counts = next;
    }
    let dist = &counts[n2];
    let total: f64 = dist.iter().sum();
    dist[u.min(max_u)..].iter().sum::<f64>() / total
}

/// Upper tail of the standard normal distribution, P(Z > z).
pub fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The complementary error function, to about 1e-13 relative: the Taylor series of erf for
/// |x| < 2, the continued fraction of erfc (Laplace) beyond.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 2.0 {
        // erf(x) = 2/sqrt(pi) * sum_k (-1)^k x^(2k+1) / (k! (2k+1))
        let mut term = x; // (-1)^k x^(2k+1) / k!
        let mut sum = x;
        for k in 1..200 {
            term *= -x * x / k as f64;
            let add = term / (2 * k + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        return 1.0 - 2.0 / std::f64::consts::PI.sqrt() * sum;
    }
    if x > 27.0 {
        return 0.0;
    }
    // erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...))))),
    // evaluated from the tail.
    let mut t = x;
    for k in (1..=120).rev() {
        t = x + (k as f64 / 2.0) / t;
    }
    (-x * x).exp() / (std::f64::consts::PI.sqrt() * t)
}

/// One-sided p-value of the Mann-Whitney U test that `now` tends to be larger than `base`
/// (its values rank above). Half the two-sided p-value of
/// [`mann_whitney_p`] when `now` ranks above `base` on average,
/// else one minus that half: the null distribution of U is symmetric, exact and approximate.
pub fn mann_whitney_greater(base: &[f64], now: &[f64]) -> f64 {
    let (b, c) = (sorted(base), sorted(now));
    if b.is_empty() || c.is_empty() {
        return 1.0;
    }
    let two_sided = mann_whitney_p(&b, &c);
    // U of `now`: pairs where now > base, ties counting half.
    let mut u = 0.0;
    for x in &c {
        let below = b.partition_point(|y| y < x);
        let equal = b[below..].partition_point(|y| y == x);
        u += below as f64 + equal as f64 / 2.0;
    }
    let mid = (b.len() * c.len()) as f64 / 2.0;
    if u > mid {
        two_sided / 2.0
    } else {
        1.0 - two_sided / 2.0
    }
}

/// One-sided p-value of the sign test that the median of `xs` lies above `level`: the chance
/// of at least as many values above it among those not equal to it, were each as likely above
/// as below (the binomial tail, exact). 1 when no value differs from `level`.
pub fn sign_test_above(level: f64, xs: &[f64]) -> f64 {
    let above = xs.iter().filter(|x| x.is_finite() && **x > level).count();
    let n = xs.iter().filter(|x| x.is_finite() && **x != level).count();
    if n == 0 {
        return 1.0;
    }
    // ln P(X = i) for X ~ Bin(n, 1/2), term by term from i = 0: exact for any n.
    let mut ln_p = -(n as f64) * std::f64::consts::LN_2;
    let mut tail = 0.0;
    for i in 0..=n {
        if i >= above {
            tail += ln_p.exp();
        }
        ln_p += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    tail.min(1.0)
}

/// The standard normal distribution function, P(Z <= z).
pub fn normal_cdf(z: f64) -> f64 {
    1.0 - normal_sf(z)
}

/// The `p` quantile of the standard normal distribution (0 < p < 1), by bisection on
/// [`normal_cdf`] (to 1e-12: the sizing it serves needs two digits).
pub fn normal_quantile(p: f64) -> f64 {
    let (mut lo, mut hi) = (-40.0_f64, 40.0_f64);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if normal_cdf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-12 {
            break;
        }
    }
    (lo + hi) / 2.0
}

/// xoshiro256** (Blackman and Vigna), seeded through SplitMix64: small, fast and good enough
/// for resampling indices.
#[derive(Debug, Clone)]
pub struct Xoshiro256 {
    s: [u64; 4],
}

impl Xoshiro256 {
    /// A generator whose state is drawn from `seed` (the same seed, the same sequence).
    pub fn new(seed: u64) -> Xoshiro256 {
        let mut sm = seed;
        let mut splitmix = || {
            sm = sm.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = sm;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Xoshiro256 { s: [splitmix(), splitmix(), splitmix(), splitmix()] }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform integer in `0..n` (`n > 0`), by multiply-shift (bias below 2^-50 for the
    /// sample counts used here).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    /// The Mann-Whitney p-value of `a` and `b` is `want`, to a relative `tol`.
    fn assert_p(a: &[f64], b: &[f64], want: f64, tol: f64) {
        let p = mann_whitney_p(a, b);
        assert!(close(p, want, tol), "{p} != {want}");
    }

    #[test]
    fn summary_of_known_values() {
        let s = Summary::from_samples(&[5.0, 1.0, 4.0, 2.0, 3.0, 100.0]);
        assert_eq!(s.n, 6);
        assert_eq!(s.median, 3.5);
        assert_eq!(s.mean, 115.0 / 6.0);
        assert_eq!(s.trimmed_mean, (2.0 + 3.0 + 4.0 + 5.0) / 4.0);
        assert_eq!((s.min, s.max), (1.0, 100.0));
        // numpy.std([5,1,4,2,3,100], ddof=1) = 39.62532860010963
        assert!(close(s.stddev, 39.62532860010963, 1e-12), "{}", s.stddev);
        // |x - 3.5| = 1.5 2.5 .5 1.5 .5 96.5 -> median 1.5, scaled 2.2239
        assert!(close(s.mad, 1.5 * 1.4826, 1e-12));
        assert_eq!(s.outliers, vec![5]);
        assert!(s.ci95.0 <= s.median && s.median <= s.ci95.1, "{:?}", s.ci95);
        assert!(s.ci95.0 >= 1.0 && s.ci95.1 <= 100.0);
    }

    #[test]
    fn empty_samples_give_zeros_not_nan() {
        let s = Summary::from_samples(&[]);
        assert_eq!(s, Summary::default());
        let s = Summary::from_samples(&[f64::NAN]);
        assert_eq!(s, Summary::default());
    }

    #[test]
    fn one_and_two_samples() {
        let s = Summary::from_samples(&[2.5]);
        assert_eq!((s.n, s.median, s.trimmed_mean, s.stddev, s.mad), (1, 2.5, 2.5, 0.0, 0.0));
        assert_eq!(s.ci95, (2.5, 2.5));
        assert!(s.outliers.is_empty());
        let s = Summary::from_samples(&[1.0, 3.0]);
        assert_eq!((s.median, s.trimmed_mean), (2.0, 2.0));
        assert!(close(s.stddev, 2f64.sqrt(), 1e-12));
    }

    #[test]
    fn zero_mad_flags_every_differing_sample() {
        let s = Summary::from_samples(&[0.0, 0.0, 0.0, 0.0, 7.0]);
        assert_eq!(s.mad, 0.0);
        assert_eq!(s.outliers, vec![4]);
        assert_eq!(s.ci95.0, 0.0);
    }

    #[test]
    fn outlier_indices_refer_to_the_given_samples() {
        let s = Summary::from_samples(&[f64::NAN, 10.0, 10.1, 9.9, 10.0, 50.0]);
        assert_eq!(s.n, 5);
        assert_eq!(s.outliers, vec![5]);
    }

    #[test]
    fn bootstrap_is_deterministic_and_covers_the_median() {
        let xs: Vec<f64> = (0..30).map(|i| 10.0 + ((i * 7919) % 13) as f64 * 0.1).collect();
        let a = Summary::from_samples(&xs);
        let b = Summary::from_samples(&xs);
        assert_eq!(a.ci95, b.ci95);
        assert!(a.ci95.0 < a.median && a.median < a.ci95.1, "{:?} {}", a.ci95, a.median);
        let other_seed = Summary::from_samples_with(&xs, DEFAULT_RESAMPLES, 1);
        assert!(other_seed.ci95.0 <= a.median && a.median <= other_seed.ci95.1);
    }

    #[test]
    fn quantiles_interpolate_like_numpy() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        // numpy.quantile([1,2,3,4], [0.025, 0.5, 0.975]) = [1.075, 2.5, 3.925]
        assert!(close(quantile_sorted(&xs, 0.025), 1.075, 1e-12));
        assert_eq!(quantile_sorted(&xs, 0.5), 2.5);
        assert!(close(quantile_sorted(&xs, 0.975), 3.925, 1e-12));
    }

    #[test]
    fn xoshiro_matches_the_reference_sequence() {
        // Reference: a line-by-line Python port of xoshiro256starstar.c, state {1, 2, 3, 4},
        // gives 11520, 0, 1509978240, 1215971899390074240.
        let mut rng = Xoshiro256 { s: [1, 2, 3, 4] };
        let got: Vec<u64> = (0..4).map(|_| rng.next_u64()).collect();
        assert_eq!(got, vec![11520, 0, 1509978240, 1215971899390074240]);
        let mut rng = Xoshiro256::new(7);
        assert!((0..1000).all(|_| rng.below(3) < 3));
    }

    #[test]
    fn erfc_known_values() {
        // math.erfc in Python (correctly rounded libm).
        for (x, want) in [
            (0.0, 1.0),
            (0.5, 0.4795001221869535),
            (1.0, 0.15729920705028513),
            (1.9, 0.0072095707647425325),
            (2.0, 0.004677734981047265),
            (3.0, 2.2090496998585438e-05),
            (5.0, 1.5374597944280351e-12),
            (-1.0, 1.842700792949715),
        ] {
            assert!(close(erfc(x), want, 1e-11), "erfc({x}) = {} != {want}", erfc(x));
        }
    }

    // Reference p-values below: scipy 1.17.1, scipy.stats.mannwhitneyu(a, b,
    // alternative="two-sided"), with method="exact" for the tie-free cases of at most 20
    // values (scipy's "auto" switches to the normal approximation earlier than we do) and
    // method="asymptotic", use_continuity=True for the others.

    #[test]
    fn mann_whitney_exact_small_samples() {
        let a = [1.1, 2.2, 3.3, 4.4, 5.5];
        let b = [6.6, 7.7, 8.8, 9.9, 10.0];
        // Complete separation of 5 and 5: 2 / C(10, 5) = 2/252.
        assert!(close(mann_whitney_p(&a, &b), 2.0 / 252.0, 1e-12));
        assert!(close(mann_whitney_p(&b, &a), 2.0 / 252.0, 1e-12));
        let a = [19.0, 22.0, 16.0, 29.0, 24.0];
        let b = [20.0, 11.0, 17.0, 12.0];
        // scipy, method="exact": 0.1111111111111111
        assert!(close(mann_whitney_p(&a, &b), 0.1111111111111111, 1e-12));
    }

    #[test]
    fn mann_whitney_exact_up_to_twenty() {
        let a: Vec<f64> = (0..12).map(|i| 10.0 + i as f64 * 0.37).collect();
        let b: Vec<f64> = (0..15).map(|i| 11.1 + i as f64 * 0.41 + 0.001).collect();
        // scipy, method="exact": 0.008709688182026316
        assert_p(&a, &b, 0.008709688182026316, 1e-9);
    }

    #[test]
    fn mann_whitney_normal_with_ties() {
        let a = [1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0];
        let b = [3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 6.0, 7.0];
        // scipy, method="asymptotic", use_continuity=True: 0.010515245935858907
        assert_p(&a, &b, 0.010515245935858907, 1e-9);
    }

    #[test]
    fn mann_whitney_normal_large_samples() {
        let a: Vec<f64> = (0..30).map(|i| ((i * 37) % 101) as f64).collect();
        let b: Vec<f64> = (0..25).map(|i| ((i * 53) % 103) as f64 + 20.5).collect();
        // scipy, method="asymptotic", use_continuity=True: 0.07183244767003341
        assert_p(&a, &b, 0.07183244767003341, 1e-9);
    }

    #[test]
    fn mann_whitney_degenerate_cases() {
        assert_eq!(mann_whitney_p(&[], &[1.0]), 1.0);
        assert_eq!(mann_whitney_p(&[2.0; 5], &[2.0; 30]), 1.0);
        // U = 3 of 4 for 2 and 2 values: p = 2 * P(U >= 3) = 2 * 2/6 (scipy: 0.6666666666666666).
        assert!(close(mann_whitney_p(&[1.0, 2.0], &[1.5, 2.5]), 2.0 / 3.0, 1e-12));
    }

    #[test]
    fn ratio_of_medians_with_interval() {
        let a = [10.0, 11.0, 9.0, 10.5, 9.5];
        let b = [20.0, 22.0, 18.0, 21.0, 19.0];
        let (ratio, (lo, hi)) = ratio_ci95(&a, &b);
        assert_eq!(ratio, 2.0);
        assert!(lo <= ratio && ratio <= hi, "{lo} {hi}");
        // The interval's ends are ratios of resampled medians: within max(b)/min(a), min(b)/max(a).
        assert!(lo >= 18.0 / 11.0 && hi <= 22.0 / 9.0, "{lo} {hi}");
        assert_eq!(ratio_ci95(&a, &b), ratio_ci95(&a, &b));
        assert!(ratio_ci95(&[], &b).0.is_nan());
        assert!(ratio_ci95(&[0.0, 0.0], &b).0.is_nan());
    }

    #[test]
    fn quantiles_match_numpy() {
        let s = sorted(&[4.0, 1.0, 3.0, 2.0, f64::NAN]);
        assert_eq!(s, [1.0, 2.0, 3.0, 4.0]);
        // numpy.quantile([1, 2, 3, 4], [0.25, 0.75]) = [1.75, 3.25]
        assert!((quantile_sorted(&s, 0.25) - 1.75).abs() < 1e-12);
        assert!((quantile_sorted(&s, 0.75) - 3.25).abs() < 1e-12);
        assert!((iqr(&[1.0, 2.0, 3.0, 4.0]) - 1.5).abs() < 1e-12);
        assert_eq!(iqr(&[5.0]), 0.0);
    }

    #[test]
    fn the_one_sided_test_points_the_right_way() {
        let base = [1.0, 2.0, 3.0, 4.0, 5.0];
        let higher = [6.0, 7.0, 8.0, 9.0, 10.0];
        // Exact: P(U >= 25) = 1 / C(10, 5) = 1/252.
        assert!((mann_whitney_greater(&base, &higher) - 1.0 / 252.0).abs() < 1e-12);
        assert!((mann_whitney_greater(&higher, &base) - (1.0 - 1.0 / 252.0)).abs() < 1e-12);
        assert_eq!(mann_whitney_greater(&[], &higher), 1.0);
    }

    #[test]
    fn normal_quantiles_invert_the_distribution() {
        assert!((normal_quantile(0.975) - 1.959964).abs() < 1e-5);
        assert!((normal_quantile(0.999) - 3.090232).abs() < 1e-5);
        assert!((normal_quantile(0.5)).abs() < 1e-9);
        assert!((normal_cdf(1.0) - 0.841345).abs() < 1e-6);
    }

    #[test]
    fn sign_test_is_the_binomial_tail() {
        let xs: Vec<f64> = (1..=10).map(f64::from).collect();
        // All 10 above 0: 1/1024; 9 of 10 above 1.5: 11/1024; ties with the level dropped.
        assert!((sign_test_above(0.0, &xs) - 1.0 / 1024.0).abs() < 1e-12);
        assert!((sign_test_above(1.5, &xs) - 11.0 / 1024.0).abs() < 1e-12);
        assert!((sign_test_above(1.0, &xs) - 1.0 / 512.0).abs() < 1e-12);
        assert_eq!(sign_test_above(20.0, &xs), 1.0);
        assert_eq!(sign_test_above(1.0, &[1.0, 1.0]), 1.0);
        // Large n stays exact where 2^-n underflows: half above is about one half.
        let many: Vec<f64> = (0..2000).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 }).collect();
        let p = sign_test_above(0.0, &many);
        assert!(p > 0.5 && p < 0.52, "{p}");
    }
}
