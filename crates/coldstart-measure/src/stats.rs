//! The statistics of a measurement's runs: every metric summarised over the runs that count,
//! and two commands compared. The statistics themselves (median, bootstrap intervals, MAD
//! outliers, Mann-Whitney U) are `coldstart_formats::stats`, shared with the gate, the
//! experiment and the report.

use coldstart_formats::measure::{CommandResult, Comparison, RunRecord, Summary};
use coldstart_formats::stats::{mann_whitney_p, ratio_ci95};

use crate::metric::Metric;

/// Summaries of every metric of [`Metric::ALL`] over the *included* runs (those without an
/// `excluded` reason), in that order, named by [`Metric::name`]. A metric no included run
/// measured is left out (it was not available, which is not the same as 0). The outlier indices
/// are mapped to the runs' own [`RunRecord::index`].
pub fn summarize_runs(runs: &[RunRecord]) -> Vec<(String, Summary)> {
    let included: Vec<&RunRecord> = runs.iter().filter(|r| r.excluded.is_none()).collect();
    let mut out = Vec::new();
    for metric in Metric::ALL {
        let values: Vec<(usize, f64)> = included
            .iter()
            .filter_map(|r| metric.value(&r.counters).map(|v| (r.index, v)))
            .collect();
        if values.is_empty() {
            continue;
        }
        let samples: Vec<f64> = values.iter().map(|&(_, v)| v).collect();
        let mut summary = Summary::from_samples(&samples);
        summary.outliers = summary.outliers.iter().map(|&i| values[i].0).collect();
        out.push((metric.name().to_string(), summary));
    }
    out
}

/// Compare `metric` of two commands over their included runs: ratio of medians (B over A)
/// with its bootstrap interval and the Mann-Whitney U p-value. `None` when either side has no
/// included run with the metric, or when the ratio is undefined (median of A is 0, as for the
/// major faults of hot runs); a report therefore never holds a NaN, which JSON cannot carry.
pub fn compare(a: &CommandResult, b: &CommandResult, metric: Metric) -> Option<Comparison> {
    let values = |c: &CommandResult| -> Vec<f64> {
        c.runs
            .iter()
            .filter(|r| r.excluded.is_none())
            .filter_map(|r| metric.value(&r.counters))
            .collect()
    };
    let (va, vb) = (values(a), values(b));
    if va.is_empty() || vb.is_empty() {
        return None;
    }
    let (ratio, ratio_ci95) = ratio_ci95(&va, &vb);
    if !ratio.is_finite() || !ratio_ci95.0.is_finite() || !ratio_ci95.1.is_finite() {
        return None;
    }
    Some(Comparison {
        metric: metric.name().to_string(),
        ratio,
        ratio_ci95,
        p_value: mann_whitney_p(&va, &vb),
        change: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_formats::measure::{Counters, Outcome};

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    fn run(index: usize, wall_s: f64, major: Option<u64>, excluded: bool) -> RunRecord {
        RunRecord {
            index,
            outcome: Outcome::Ready,
            counters: Counters { wall_s, major_faults: major, ..Counters::default() },
            eviction: None,
            held_by_others: None,
            excluded: excluded.then(|| "eviction did not hold".to_string()),
            stderr_tail: Vec::new(),
        }
    }

    #[test]
    fn summarize_runs_skips_excluded_runs_and_unmeasured_metrics() {
        let runs = vec![
            run(0, 1.0, Some(10), false),
            run(1, 100.0, Some(999), true),
            run(2, 1.2, None, false),
            run(3, 1.1, Some(12), false),
            run(4, 1.05, Some(11), false),
            run(5, 9.0, Some(11), false),
        ];
        let summaries = summarize_runs(&runs);
        let names: Vec<&str> = summaries.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(names, vec!["wall_s", "major_faults"]);
        let wall = &summaries[0].1;
        assert_eq!(wall.n, 5);
        assert_eq!(wall.median, 1.1);
        assert_eq!(wall.outliers, vec![5], "index of the run, not of the sample");
        let faults = &summaries[1].1;
        assert_eq!((faults.n, faults.median), (4, 11.0));
    }

    #[test]
    fn compare_uses_included_runs() {
        let a = CommandResult {
            label: "A".into(),
            command: vec!["a".into()],
            runs: (0..5).map(|i| run(i, 1.0 + i as f64 * 0.01, None, false)).collect(),
            summaries: vec![],
        };
        let mut b = a.clone();
        b.runs = (0..5).map(|i| run(i, 2.0 + i as f64 * 0.01, None, false)).collect();
        b.runs.push(run(5, 0.001, None, true));
        let c = compare(&a, &b, Metric::Wall).unwrap();
        assert!(close(c.ratio, 2.02 / 1.02, 1e-12));
        assert!(close(c.p_value, 2.0 / 252.0, 1e-12));
        assert!(c.ratio_ci95.0 <= c.ratio && c.ratio <= c.ratio_ci95.1);
        assert_eq!(compare(&a, &b, Metric::MajorFaults), None);
        let zero =
            CommandResult { runs: (0..3).map(|i| run(i, 0.0, None, false)).collect(), ..a.clone() };
        assert_eq!(compare(&zero, &b, Metric::Wall), None);
    }
}
