//! The few statistics the rules need beyond `coldstart_measure::stats` (median, bootstrap
//! intervals, the two-sided Mann-Whitney U test, which this module reuses): quantiles, the
//! one-sided Mann-Whitney p-value, the sign test, and the normal quantile function.

use coldstart_measure::stats::{mann_whitney_p, normal_sf};

/// The finite values of `xs`, sorted.
pub fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The `q` quantile (0..=1) of sorted, non-empty samples, interpolated between order
/// statistics (type 7, as R and NumPy by default).
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

/// One-sided p-value of the Mann-Whitney U test that `now` tends to be larger than `base`
/// (its values rank above). Half the two-sided p-value of
/// [`coldstart_measure::stats::mann_whitney_p`] when `now` ranks above `base` on average,
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

#[cfg(test)]
mod tests {
    use super::*;

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
