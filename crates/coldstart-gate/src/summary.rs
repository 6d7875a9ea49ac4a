//! What a baseline says a gate will judge: each figure's median and range, the runs behind
//! it, and the limit above which a gate of the default size fails. `gate --update` prints it,
//! so what was recorded is seen as the gate will use it.

use crate::baseline::Baseline;
use crate::compare::Rules;
use crate::figure::Figure;
use crate::noise::FigureNoise;
use crate::plan::{
    DEFAULT_COLD_FIRST_RUNS, DEFAULT_FIRST_RUNS, FIRST_FUNCTION_PROFILES, FIRST_PAGE_PROFILES,
};
use crate::report::fmt_value;
use crate::{steady, time};
use coldstart_formats::stats::sorted;

/// The table of `base`'s figures, one line each, with a header: figure, median, range, runs,
/// and what a gate fails above.
pub fn baseline_table(base: &Baseline, rules: &Rules) -> String {
    let mut rows = vec![["figure", "median", "range", "runs", "a gate fails above"]
        .map(String::from)
        .to_vec()];
    for figure in Figure::ALL {
        for s in base.figures.iter().filter(|s| s.figure == figure) {
            let v = sorted(&s.values);
            if v.is_empty() {
                continue;
            }
            let unit = figure.unit();
            let median = coldstart_formats::stats::median(&v);
            let range = format!("{} - {}", fmt_value(v[0], unit), fmt_value(v[v.len() - 1], unit));
            let limit = if figure.is_time() {
                let (t, _) = time::threshold(&v, &[], &rules.time_rule(figure));
                format!("+{:.1}%", t * 100.0)
            } else if judged_where_measured(figure, base) {
                // A gate's first batch: its runs now, as many as it makes first.
                let n_now = match (figure, s.state.as_str()) {
                    (Figure::PagesTouched, _) => FIRST_PAGE_PROFILES,
                    (Figure::NewFunctionBytes, _) => FIRST_FUNCTION_PROFILES,
                    // Counts under valgrind: the gate's first.
                    (Figure::Instructions | Figure::MissCycles, _) if s.source.is_some() => {
                        crate::instructions::FIRST_COUNTS
                    }
                    (_, "hot") => DEFAULT_FIRST_RUNS,
                    _ => DEFAULT_COLD_FIRST_RUNS,
                };
                let slack = rules.slack(figure).at(median);
                let o = steady::judge(&v, &vec![median; n_now], FigureNoise::of(figure), slack);
                fmt_value(o.limit, unit)
            } else {
                "not judged".to_string()
            };
            rows.push(vec![
                format!("{}, {}", figure.title(), s.state),
                fmt_value(median, unit),
                range,
                v.len().to_string(),
                limit,
            ]);
        }
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                let pad = " ".repeat(widths[c] - cell.chars().count());
                if c == 0 {
                    format!("{cell}{pad}")
                } else {
                    format!("{pad}{cell}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
            out.push('\n');
        }
    }
    out
}

/// Whether a gate judges `figure` the way `base` was measured (the whole-tree figures are
/// shown, not judged, under the storage emulation; read requests only on cgroup v2).
fn judged_where_measured(figure: Figure, base: &Baseline) -> bool {
    crate::compare::not_judged(figure, base).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::{tests::example, Samples};
    use crate::plan::GateOptions;

    #[test]
    fn each_figure_shows_the_limit_its_own_rule_sets() {
        let mut base = example();
        let times: Vec<f64> = (0..30).map(|i| 0.090 + (i % 3) as f64 * 1e-4).collect();
        for figure in [Figure::Time, Figure::CpuTime] {
            base.figures.push(Samples {
                figure,
                state: "hot".into(),
                values: times.clone(),
                source: None,
            });
        }
        let rules = Rules::of(&GateOptions::new(vec!["/bin/true".into()]));
        let table = baseline_table(&base, &rules);
        let line = |start: &str| table.lines().find(|l| l.starts_with(start)).unwrap().to_string();
        // Hot time at the default 5% minimum effect; CPU time at its own floor of 15%.
        assert!(line("time, hot").ends_with("+5.0%"), "{table}");
        assert!(line("CPU time, hot").ends_with("+15.0%"), "{table}");
        // 12 reads in every run: 20% more, the noise model's floor, fails.
        assert!(line("reads of the device, cold").ends_with("14.4"), "{table}");
    }
}
