//! Start-up by cache state, before and after (the paper's Figure 5), from `measure` results;
//! and the layouts `order --evaluate` scored.

use crate::bars::{legend, Bar, BarChart, Group, LegendItem};
use crate::input::{Inputs, Measure, MeasureCommand};
use crate::svg::{esc, seconds, SERIES};
use crate::table::Table;
use crate::Section;

/// The states in the paper's order, coldest first; others (an emulated device) follow in
/// the order met.
const STATES: [&str; 4] = ["cold", "selective", "warm", "hot"];

/// One measured (command, state): a bar.
struct Point<'a> {
    file: String,
    series: usize,
    state: String,
    command: &'a MeasureCommand,
}

/// Short, distinct labels for commands: the program's file name and arguments, with as many
/// parent directories as it takes to tell two apart.
pub(crate) fn short_labels(commands: &[Vec<String>]) -> Vec<String> {
    let label = |c: &Vec<String>, depth: usize| {
        let Some(exe) = c.first() else { return String::new() };
        let parts: Vec<&str> = exe.split('/').filter(|p| !p.is_empty()).collect();
        let from = parts.len().saturating_sub(depth + 1);
        let mut s = parts[from..].join("/");
        if s.is_empty() {
            s = exe.clone();
        }
        for a in &c[1..] {
            s.push(' ');
            s.push_str(a);
        }
        s
    };
    let mut depth = 0;
    loop {
        let labels: Vec<String> = commands.iter().map(|c| label(c, depth)).collect();
        let distinct = labels.iter().collect::<std::collections::HashSet<_>>().len();
        if distinct == labels.len() || depth > 8 {
            return labels;
        }
        depth += 1;
    }
}

fn state_rank(state: &str) -> usize {
    STATES.iter().position(|s| *s == state).unwrap_or(STATES.len())
}

/// Figure 5: every measured command in every cache state, wall time and major faults.
pub fn section(inputs: &Inputs) -> Option<Section> {
    let measures: Vec<(String, &Measure)> = inputs.measures().map(|(s, m)| (s.name(), m)).collect();
    if measures.is_empty() {
        return None;
    }
    // Series: distinct commands, in the order met.
    let mut commands: Vec<Vec<String>> = Vec::new();
    let mut points: Vec<Point> = Vec::new();
    let mut states: Vec<String> = Vec::new();
    for (file, m) in &measures {
        for c in &m.commands {
            let series = match commands.iter().position(|k| *k == c.command) {
                Some(i) => i,
                None => {
                    commands.push(c.command.clone());
                    commands.len() - 1
                }
            };
            let state = m.state_of(c);
            // A second measurement of one command in one state is kept apart by its file.
            if points.iter().any(|p| p.series == series && p.state == state) {
                continue;
            }
            if !states.contains(&state) {
                states.push(state.clone());
            }
            points.push(Point { file: file.clone(), series, state, command: c });
        }
    }
    states.sort_by_key(|s| state_rank(s));
    let labels = short_labels(&commands);
    let colour = |i: usize| SERIES[i % SERIES.len()];
    // Runs on an emulated device are not comparable with the host disk's: a pair of charts
    // for each device.
    let device =
        |state: &str| state.split_once(" (").map(|(_, d)| d.trim_end_matches(')').to_owned());
    let mut devices: Vec<Option<String>> = Vec::new();
    for st in &states {
        if !devices.contains(&device(st)) {
            devices.push(device(st));
        }
    }
    let chart =
        |dev: &Option<String>, metric: &str, title: &str, y: &str, fmt: &dyn Fn(f64) -> String| {
            let groups: Vec<Group> = states
                .iter()
                .filter(|st| device(st) == *dev)
                .map(|state| Group {
                    label: state.clone(),
                    bars: points
                        .iter()
                        .filter(|p| &p.state == state)
                        .filter_map(|p| {
                            let s = p.command.summary(metric)?;
                            Some(Bar {
                                key: format!("cmd{}", p.series),
                                value: s.median,
                                colour: colour(p.series).into(),
                                title: format!(
                                    "{} in {}: median {} (95% CI {} to {}), {} runs; {}",
                                    labels[p.series],
                                    state,
                                    fmt(s.median),
                                    fmt(s.ci95.0),
                                    fmt(s.ci95.1),
                                    s.n,
                                    p.file
                                ),
                                label: Some(fmt(s.median)),
                                whisker: (metric == "wall_s").then_some(s.ci95),
                            })
                        })
                        .collect(),
                })
                .collect();
            let width = (150.0 * groups.len() as f64).clamp(360.0, 900.0);
            BarChart { title, y_label: y, groups, width, height: 280.0, format: fmt }.render()
        };
    let ms = |v: f64| seconds(v);
    let count = |v: f64| format!("{v:.0}");
    let mut charts = String::new();
    for dev in &devices {
        let on = match dev {
            None => String::new(),
            Some(d) => format!(", the program's files on an emulated {d}"),
        };
        let wall =
            chart(dev, "wall_s", &format!("(a) start-up, median and 95% CI{on}"), "start-up", &ms);
        let faults = chart(
            dev,
            "major_faults",
            &format!("(b) major page faults, median{on}"),
            "faults",
            &count,
        );
        charts.push_str(&format!(r#"<div class="row">{wall}{faults}</div>"#));
    }
    let items: Vec<LegendItem> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| LegendItem {
            key: format!("cmd{i}"),
            colour: colour(i).into(),
            label: l.clone(),
        })
        .collect();

    let mut table = Table::new(
        "startup",
        &[
            "file",
            "state",
            "command",
            "runs",
            "median_s",
            "ci95_low_s",
            "ci95_high_s",
            "major_faults",
            "read_bytes",
            "read_requests",
        ],
    );
    let mut sorted: Vec<&Point> = points.iter().collect();
    sorted.sort_by_key(|p| (p.series, state_rank(&p.state)));
    for p in sorted {
        let med =
            |m: &str| p.command.summary(m).map(|s| format!("{}", s.median)).unwrap_or_default();
        let w = p.command.summary("wall_s");
        table.push(vec![
            p.file.clone(),
            p.state.clone(),
            p.command.command.join(" "),
            w.map(|s| s.n.to_string()).unwrap_or_default(),
            med("wall_s"),
            w.map(|s| s.ci95.0.to_string()).unwrap_or_default(),
            w.map(|s| s.ci95.1.to_string()).unwrap_or_default(),
            med("major_faults"),
            med("read_bytes"),
            med("read_requests"),
        ]);
    }
    let mut io = Table::new(
        "io-share",
        &["file", "command", "state", "cold_median_s", "hot_median_s", "io_s", "fraction"],
    );
    let mut notes = Vec::new();
    for (file, m) in &measures {
        for s in &m.io_share {
            io.push(vec![
                file.clone(),
                s.label.clone(),
                s.cache.clone(),
                s.cold_median_s.to_string(),
                s.hot_median_s.to_string(),
                s.io_s.to_string(),
                format!("{:.3}", s.fraction),
            ]);
            notes.push(format!(
                "<li><b>{}</b> waits {} of its {} {} start-up for storage ({:.0}%: {} minus {} hot)</li>",
                esc(&s.label),
                seconds(s.io_s),
                seconds(s.cold_median_s),
                esc(&s.cache),
                s.fraction * 100.0,
                seconds(s.cold_median_s),
                seconds(s.hot_median_s)
            ));
        }
    }
    let mut html = String::from(
        "<p>Each command in each cache state it was measured in: <b>cold</b> (the page cache \
         dropped), <b>selective</b> (every file start-up reads evicted), <b>warm</b> (the \
         program's own files evicted, shared libraries kept: the paper's warm-local), \
         <b>hot</b>. Reordering or prefetching should shorten the cold and warm bars and leave \
         hot alone. Bars are medians; whiskers the 95% confidence interval.</p>",
    );
    html.push_str(&legend(&items));
    html.push_str(&charts);
    if !notes.is_empty() {
        html.push_str(&format!("<ul>{}</ul>", notes.join("")));
    }
    html.push_str(&table.html("The figures (CSV beside the report)", false));
    let mut tables = vec![table];
    if !io.rows.is_empty() {
        tables.push(io);
    }
    Some(Section {
        id: "startup".into(),
        title: "Start-up in each cache state (the paper's Figure 5)".into(),
        html,
        tables,
    })
}

/// The layouts `order --evaluate` scored for a held-out start-up: page faults and pages read.
pub fn evaluation_section(inputs: &Inputs) -> Option<Section> {
    let evals: Vec<_> = inputs.evaluations().collect();
    if evals.is_empty() {
        return None;
    }
    let mut html = String::from(
        "<p>Each layout scored before linking on a start-up nobody profiled (the held-out \
         profile): page faults and pages read under the page model. <b>default</b> is the \
         binary as linked, <b>ideal</b> the held-out start-up's own order, which no order can \
         beat.</p>",
    );
    let mut table = Table::new(
        "layouts",
        &["file", "holdout", "layout", "pages_touched", "faults", "pages_read", "best"],
    );
    for (src, e) in &evals {
        let colour = |l: &str| match l {
            "default" => "#7a7a7a",
            "ideal" => "#009e73",
            _ => "#0072b2",
        };
        let group = |metric: &dyn Fn(&crate::input::Cost) -> u64, name: &str| Group {
            label: name.into(),
            bars: e
                .rows
                .iter()
                .map(|r| Bar {
                    key: r.layout.clone(),
                    value: metric(&r.cost) as f64,
                    colour: colour(&r.layout).into(),
                    title: format!("{}: {} {}", r.layout, metric(&r.cost), name),
                    label: Some(metric(&r.cost).to_string()),
                    whisker: None,
                })
                .collect(),
        };
        let faults = BarChart {
            title: &format!("page faults, held-out {} ({})", e.holdout, src.name()),
            y_label: "faults",
            groups: vec![group(&|c| c.faults, "faults")],
            width: (60.0 * e.rows.len() as f64 + 120.0).clamp(320.0, 900.0),
            height: 240.0,
            format: &|v| format!("{v:.0}"),
        }
        .render();
        let read = BarChart {
            title: "pages read",
            y_label: "pages",
            groups: vec![group(&|c| c.pages_read, "pages read")],
            width: (60.0 * e.rows.len() as f64 + 120.0).clamp(320.0, 900.0),
            height: 240.0,
            format: &|v| format!("{v:.0}"),
        }
        .render();
        let rows: Vec<String> =
            e.rows.iter().map(|r| format!("<li><b>{}</b></li>", esc(&r.layout))).collect();
        html.push_str(&format!(
            r#"<div class="row">{faults}{read}</div><details><summary>layouts, left to right</summary><ol>{}</ol></details>"#,
            rows.join("")
        ));
        for r in &e.rows {
            table.push(vec![
                src.name(),
                e.holdout.clone(),
                r.layout.clone(),
                r.cost.pages_touched.to_string(),
                r.cost.faults.to_string(),
                r.cost.pages_read.to_string(),
                e.best.clone(),
            ]);
        }
    }
    html.push_str(&table.html("The figures", false));
    Some(Section {
        id: "layouts".into(),
        title: "Layouts scored before linking (order --evaluate)".into(),
        html,
        tables: vec![table],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_grow_until_they_differ() {
        let c = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let l = short_labels(&[
            c("/d/s-medium/sample --workload b"),
            c("/d/s-medium-ordered/sample --workload b"),
        ]);
        assert_eq!(l, vec!["s-medium/sample --workload b", "s-medium-ordered/sample --workload b"]);
        assert_eq!(short_labels(&[c("/usr/bin/python3 -c pass")]), vec!["python3 -c pass"]);
    }
}
