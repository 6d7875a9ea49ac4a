//! Start-up by cache state, before and after (the paper's Figure 5), from `measure` results.
//!
//! Each command of each file is a series of its own (`series`), named by its file; the runs
//! of each storage (this machine's disk, each emulated device) get their own pair of charts,
//! since an emulated hard disk's seconds are not comparable with the host disk's
//! milliseconds.

use crate::bars::{legend, Bar, BarChart, Group, LegendItem};
use crate::input::Inputs;
use crate::series::{by_file, cache_of, series, share_what, shell_words, storage_phrase, Series};
use crate::svg::{bytes, esc, seconds, SERIES};
use crate::table::Table;
use crate::Section;
use coldstart_formats::measure::CommandResult;

/// The states in the paper's order, coldest first; others follow in the order met.
const STATES: [&str; 4] = ["cold", "selective", "warm", "hot"];

fn state_rank(state: &str) -> usize {
    STATES.iter().position(|s| *s == state).unwrap_or(STATES.len())
}

/// One measured (series, cache state): a bar.
struct Point<'a> {
    series: usize,
    cache: &'a str,
    entry: &'a CommandResult,
}

fn colour(series: usize) -> &'static str {
    SERIES[series % SERIES.len()]
}

/// The heading of a storage's charts.
fn storage_heading(s: &Series) -> String {
    match &s.measure.storage {
        None => "On this machine's disk".into(),
        Some(d) => {
            let mut facts = Vec::new();
            if let Some(iops) = d.read_iops {
                facts.push(format!("{iops} reads/s"));
            }
            if let Some(bps) = d.read_bps {
                facts.push(format!("{}/s", bytes(bps as f64)));
            }
            facts.push(format!("read-ahead {} KiB", d.readahead_kb));
            let facts =
                if facts.is_empty() { String::new() } else { format!(": {}", facts.join(", ")) };
            format!(
                "On an emulated {} <small>(the program's files on a throttled loop device{facts})</small>",
                esc(&d.profile)
            )
        }
    }
}

/// One chart of one storage: a group per cache state, a bar per series measured in it.
fn chart(
    series: &[Series],
    points: &[&Point],
    metric: &str,
    title: &str,
    y_label: &str,
    fmt: &dyn Fn(f64) -> String,
) -> String {
    let mut states: Vec<&str> = Vec::new();
    for p in points {
        if !states.contains(&p.cache) {
            states.push(p.cache);
        }
    }
    states.sort_by_key(|s| state_rank(s));
    let groups: Vec<Group> = states
        .iter()
        .map(|state| Group {
            label: (*state).to_owned(),
            bars: points
                .iter()
                .filter(|p| p.cache == *state)
                .filter_map(|p| {
                    let s = p.entry.summary(metric)?;
                    let se = &series[p.series];
                    Some(Bar {
                        key: format!("series{}", p.series),
                        value: s.median,
                        colour: colour(p.series).into(),
                        title: format!(
                            "{}, {state} on {}: median {} (95% CI {} to {}), {} runs",
                            se.name(),
                            storage_phrase(se.measure),
                            fmt(s.median),
                            fmt(s.ci95.0),
                            fmt(s.ci95.1),
                            s.n
                        ),
                        label: Some(fmt(s.median)),
                        whisker: (metric == "wall_s").then_some(s.ci95),
                    })
                })
                .collect(),
        })
        .collect();
    let mut chart = BarChart { title, y_label, groups, width: 0.0, height: 280.0, format: fmt };
    chart.width = chart.natural_width().clamp(340.0, 1150.0);
    chart.render()
}

/// Figure 5: every measured series in every cache state, wall time and major faults, a pair
/// of charts per storage.
pub fn section(inputs: &Inputs) -> Option<Section> {
    let series = series(inputs);
    if series.is_empty() {
        return None;
    }
    let points: Vec<Point> = series
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            s.entries.iter().map(move |e| Point {
                series: i,
                cache: cache_of(s.measure, e),
                entry: e,
            })
        })
        .collect();
    let mut storages: Vec<String> = Vec::new();
    for s in &series {
        if !storages.contains(&s.storage_key()) {
            storages.push(s.storage_key());
        }
    }
    let mut html = String::from(
        "<p>Each command of each file in each cache state it was measured in: <b>cold</b> (the \
         page cache dropped), <b>selective</b> (every file start-up reads evicted), <b>warm</b> \
         (the program's own files evicted, shared libraries kept: the paper's warm-local), \
         <b>hot</b>. Reordering or prefetching should shorten the cold and warm bars and leave \
         hot alone. Bars are medians; whiskers the 95% confidence interval. Each file's \
         commands are series of their own, and each storage has its own charts.</p>",
    );
    let ms = |v: f64| seconds(v);
    let count = |v: f64| format!("{v:.0}");
    for storage in &storages {
        let on: Vec<usize> =
            (0..series.len()).filter(|i| series[*i].storage_key() == *storage).collect();
        let pts: Vec<&Point> = points.iter().filter(|p| on.contains(&p.series)).collect();
        let items: Vec<LegendItem> = on
            .iter()
            .map(|i| LegendItem {
                key: format!("series{i}"),
                colour: colour(*i).into(),
                label: series[*i].name(),
            })
            .collect();
        html.push_str(&format!("<h3>{}</h3>", storage_heading(&series[on[0]])));
        html.push_str(&legend(&items));
        let wall = chart(&series, &pts, "wall_s", "(a) start-up: median, 95% CI", "start-up", &ms);
        let faults =
            chart(&series, &pts, "major_faults", "(b) major page faults: median", "faults", &count);
        html.push_str(&format!(r#"<div class="row">{wall}{faults}</div>"#));
    }
    let (table, io, notes) = tables(&series, &points);
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

/// The figures: a row per bar, and the I/O shares with a line each under the charts.
fn tables(series: &[Series], points: &[Point]) -> (Table, Table, Vec<String>) {
    let mut table = Table::new(
        "startup",
        &[
            "file",
            "series",
            "storage",
            "cache",
            "label",
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
    sorted.sort_by_key(|p| (p.series, state_rank(p.cache)));
    for p in sorted {
        let s = &series[p.series];
        let med = |m: &str| p.entry.summary(m).map(|s| format!("{}", s.median)).unwrap_or_default();
        let w = p.entry.summary("wall_s");
        table.push(vec![
            s.file.clone(),
            s.what.clone(),
            s.storage_key(),
            p.cache.to_owned(),
            p.entry.label.clone(),
            shell_words(&p.entry.command),
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
        &[
            "file",
            "command",
            "storage",
            "cache",
            "cold_median_s",
            "hot_median_s",
            "io_s",
            "fraction",
        ],
    );
    let mut notes = Vec::new();
    for of_file in by_file(series) {
        let s = of_file[0];
        for share in &s.measure.io_share {
            io.push(vec![
                s.file.clone(),
                share.label.clone(),
                s.storage_key(),
                share.cache.clone(),
                share.cold_median_s.to_string(),
                share.hot_median_s.to_string(),
                share.io_s.to_string(),
                format!("{:.3}", share.fraction),
            ]);
            notes.push(format!(
                "<li><b>{}</b> ({}, on {}) waits {} of its {} {} start-up for storage ({:.0}%: {} minus {} hot)</li>",
                esc(&share_what(&of_file, share)),
                esc(&s.file),
                esc(&storage_phrase(s.measure)),
                seconds(share.io_s),
                seconds(share.cold_median_s),
                esc(&share.cache),
                share.fraction * 100.0,
                seconds(share.cold_median_s),
                seconds(share.hot_median_s)
            ));
        }
    }
    (table, io, notes)
}
