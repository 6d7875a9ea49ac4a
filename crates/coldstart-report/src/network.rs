//! Network start, from `coldstart experiment` results: improvement over `original` across
//! the bandwidth x latency grid (the paper's Figure 3), bytes and requests per strategy (its
//! Figure 4), the model's prediction against the measurement, and `--strategy auto`'s choice
//! against the measured best.

use coldstart_formats::stats::checked_median;
use coldstart_formats::{Cell, Experiment};

use crate::bars::{legend, Bar, BarChart, Group, LegendItem};
use crate::html::notes;
use crate::input::Inputs;
use crate::svg::{bytes, esc, gain, seconds, strategy_colour, Log, Svg};
use crate::table::Table;
use crate::text::{LABEL, TICK};
use crate::Section;

/// How far a prediction may be from the measurement and still count as right.
pub const MODEL_TOLERANCE: f64 = 0.15;
/// How far `auto`'s choice may be from the measured best and still count as right.
pub const AUTO_TOLERANCE: f64 = 0.05;

/// Strategies that fetch the hot set in the start object's request.
const HOT_SET: [&str; 3] = ["reordered", "reordered-paged", "stream"];

fn bandwidth(bps: f64) -> String {
    coldstart_units::bit_rate(bps.round() as u64)
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn latency(s: f64) -> String {
    format!("{} ms", trim(s * 1e3))
}

/// Distinct values, ascending.
fn distinct(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v.dedup_by(|a, b| (*a - *b).abs() <= 1e-9 * b.abs().max(1.0));
    v
}

/// Eq. 1 on what a cell measured: bytes / bandwidth + requests x latency + local start-up.
pub fn eq1_measured(e: &Experiment, c: &Cell) -> Option<f64> {
    let (b, r) = (c.bytes_fetched()?, c.requests()?);
    Some(b * 8.0 / c.link.bits_per_second + r * c.link.latency_s + e.local_s.unwrap_or(0.0))
}

/// Why a prediction is off, in the terms of Eq. 1: what the run did that the model did not
/// count.
pub fn why(e: &Experiment, c: &Cell) -> String {
    let (Some(m), Some(p)) = (c.startup_s(), c.predicted_s) else { return String::new() };
    let (bytes_m, req) = (c.bytes_fetched().unwrap_or(0.0), c.requests().unwrap_or(0.0));
    let lat = c.link.latency_s;
    let mut out = Vec::new();
    let strategy = if c.strategy == "auto" { c.chosen().unwrap_or("auto") } else { &c.strategy };
    if HOT_SET.contains(&strategy) {
        // One request (the start object) is what the model counts; every other one is a miss.
        let extra = (req - 1.0).max(0.0);
        let held: Vec<f64> =
            c.runs.iter().filter_map(|r| r.held_out_misses).map(|m| m as f64).collect();
        if extra > 0.0 {
            let of = checked_median(&held)
                .map_or(String::new(), |m| format!(" ({m:.0} of them misses outside it)"));
            out.push(format!(
                "{extra:.0} request(s) beyond the start object{of}: reads outside the hot set \
                 (the measured workload is not the profiled one), at least {} each, which the \
                 model counts only from the miss history of earlier starts (none before the \
                 grid's first cells)",
                seconds(lat)
            ));
        }
        if let Some(h) = &e.hot_set {
            if bytes_m > h.bytes as f64 * 1.02 {
                out.push(format!(
                    "{} fetched beyond the hot set's {}",
                    bytes(bytes_m - h.bytes as f64),
                    bytes(h.bytes as f64)
                ));
            }
        }
    } else if strategy == "paged" {
        if let Some(h) = &e.hot_set {
            out.push(format!(
                "the model charges a miss for each of the hot set's {} chunks (the profiled \
                 workload's reads); the measured run made {req:.0} requests for {}",
                h.chunks,
                bytes(bytes_m)
            ));
        }
    } else if strategy == "original" && m > p {
        out.push(format!(
            "{} more than the download the model counts: mounting and the server's pacing",
            seconds(m - p)
        ));
    }
    if let Some(e1) = eq1_measured(e, c) {
        let err = (e1 - m) / m;
        if err.abs() <= MODEL_TOLERANCE {
            out.push(format!(
                "Eq. 1 on the bytes and requests measured gives {} ({:+.0}%): the form holds, the \
                 bytes or requests predicted were not those of this run",
                seconds(e1),
                err * 100.0
            ));
        } else {
            out.push(format!(
                "Eq. 1 on the bytes and requests measured gives {} ({:+.0}%): {}",
                seconds(e1),
                err * 100.0,
                if e1 > m {
                    "requests overlapped (several misses in flight at once)"
                } else {
                    "time outside the network's terms (mounting, the program's own work between misses)"
                }
            ));
        }
    }
    out.join("; ")
}

/// One row of the `auto` check: a link and cache state.
pub struct AutoCheck {
    /// The link's label.
    pub link: String,
    /// The cache state.
    pub cache: String,
    /// The fixed strategy that measured fastest.
    pub best: String,
    /// Its start-up, seconds.
    pub best_s: f64,
    /// The strategy `auto` chose.
    pub chosen: String,
    /// The measured time of the strategy auto chose (its own cell), and of auto itself.
    pub chosen_s: Option<f64>,
    /// The measured start-up of `auto` itself, seconds.
    pub auto_s: Option<f64>,
    /// The strategy `predict` would choose on the given link.
    pub predicted_choice: Option<String>,
}

impl AutoCheck {
    /// The chosen strategy's time over the best's, 1 when it is the best.
    pub fn ratio(&self) -> Option<f64> {
        self.chosen_s.map(|c| c / self.best_s)
    }
    /// Whether `auto`'s choice is within the tolerance of the best.
    pub fn ok(&self) -> bool {
        self.ratio().is_some_and(|r| r <= 1.0 + AUTO_TOLERANCE)
    }
}

/// The `auto` check of every link and cache state that measured `auto` and another strategy.
pub fn auto_checks(e: &Experiment) -> Vec<AutoCheck> {
    let mut out = Vec::new();
    for c in e.cells.iter().filter(|c| c.strategy == "auto") {
        let others: Vec<(&Cell, f64)> = e
            .cells
            .iter()
            .filter(|o| o.link.label == c.link.label && o.cache == c.cache && o.strategy != "auto")
            .filter_map(|o| Some((o, o.startup_s()?)))
            .collect();
        let Some((best, best_s)) = others.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
            continue;
        };
        let Some(chosen) = c.chosen() else { continue };
        out.push(AutoCheck {
            link: c.link.label.clone(),
            cache: c.cache.clone(),
            best: best.strategy.clone(),
            best_s: *best_s,
            chosen: chosen.into(),
            chosen_s: others.iter().find(|(o, _)| o.strategy == chosen).map(|(_, s)| *s),
            auto_s: c.startup_s(),
            predicted_choice: c.predicted_choice.clone(),
        });
    }
    out
}

/// The headline figures of one experiment: the largest gain of a strategy over downloading
/// first, how many cells the model predicted, and how often `auto` chose well.
pub fn highlights(e: &Experiment, file: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    // Per original cell, the fastest other strategy on its link and cache state.
    let mut best: Option<(f64, &Cell, f64, &Cell)> = None;
    let mut n = 0;
    for c in e.cells.iter().filter(|c| c.strategy == "original") {
        let Some(o) = c.startup_s() else { continue };
        let fastest = e
            .cells
            .iter()
            .filter(|x| {
                x.link.label == c.link.label && x.cache == c.cache && x.strategy != "original"
            })
            .filter_map(|x| Some((x.startup_s()?, x)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((w, x)) = fastest {
            n += 1;
            if best.is_none_or(|(bo, _, bw, _)| o / w > bo / bw) {
                best = Some((o, c, w, x));
            }
        }
    }
    if let Some((o, c, w, x)) = best {
        out.push((
            gain(w, o),
            format!(
                "{} against downloading first (original) on {}, cache {}: {} against {}; the \
                 largest gain of {n} link(s) and cache state(s) ({file})",
                x.chosen().map_or(x.strategy.clone(), |ch| format!("{} ({ch})", x.strategy)),
                c.link.label,
                c.cache,
                seconds(w),
                seconds(o)
            ),
        ));
    }
    let (mut n, mut ok) = (0, 0);
    for c in &e.cells {
        if let (Some(m), Some(p)) = (c.startup_s(), c.predicted_s) {
            n += 1;
            if ((p - m) / m).abs() <= MODEL_TOLERANCE {
                ok += 1;
            }
        }
    }
    if n > 0 {
        out.push((
            format!("{ok} of {n}"),
            format!("cells the model predicted within 15% of the measured start-up ({file})"),
        ));
    }
    let checks = auto_checks(e);
    if !checks.is_empty() {
        out.push((
            format!("{} of {}", checks.iter().filter(|c| c.ok()).count(), checks.len()),
            format!(
                "links and cache states where --strategy auto's choice is within 5% of the \
                 measured best ({file})"
            ),
        ));
    }
    out
}

/// The strategies of an experiment, as listed in its settings, then any others its cells have.
fn strategies(e: &Experiment) -> Vec<String> {
    let mut s = e.settings.strategies.clone();
    for c in &e.cells {
        if !s.contains(&c.strategy) {
            s.push(c.strategy.clone());
        }
    }
    s
}

fn caches(e: &Experiment) -> Vec<String> {
    let mut s: Vec<String> = e.settings.caches.clone();
    for c in &e.cells {
        if !s.contains(&c.cache) {
            s.push(c.cache.clone());
        }
    }
    s.retain(|k| e.cells.iter().any(|c| &c.cache == k));
    s
}

/// Figure 3 for one cache state: a panel per bandwidth, latencies along x, a bar per strategy.
fn figure3(e: &Experiment, cache: &str) -> Option<String> {
    let cells: Vec<&Cell> = e.cells.iter().filter(|c| c.cache == cache).collect();
    let bws = distinct(cells.iter().map(|c| c.link.bits_per_second).collect());
    let lats = distinct(cells.iter().map(|c| c.link.latency_s).collect());
    let others: Vec<String> = strategies(e).into_iter().filter(|s| s != "original").collect();
    let mut panels = String::new();
    let mut any = false;
    for bw in &bws {
        let groups: Vec<Group> = lats
            .iter()
            .filter_map(|lat| {
                let at = |s: &str| {
                    cells.iter().find(|c| {
                        c.strategy == s
                            && (c.link.bits_per_second - bw).abs() <= 1e-9 * bw
                            && (c.link.latency_s - lat).abs() <= 1e-12
                    })
                };
                let orig = at("original")?.startup_s()?;
                let bars: Vec<Bar> = others
                    .iter()
                    .filter_map(|s| {
                        let c = at(s)?;
                        let w = c.startup_s()?;
                        let imp = (orig - w) / orig * 100.0;
                        Some(Bar {
                            key: s.clone(),
                            value: imp,
                            colour: strategy_colour(s).into(),
                            title: format!(
                                "{s} on {}: {} against original's {} ({imp:+.0}%), {} run(s)",
                                c.link.label,
                                seconds(w),
                                seconds(orig),
                                c.runs.len()
                            ),
                            label: None,
                            whisker: None,
                        })
                    })
                    .collect();
                (!bars.is_empty()).then(|| Group { label: latency(*lat), bars })
            })
            .collect();
        if groups.is_empty() {
            continue;
        }
        any = true;
        let width = (70.0 * groups.len() as f64 + 80.0).clamp(300.0, 560.0);
        panels.push_str(
            &BarChart {
                title: &bandwidth(*bw),
                y_label: "improvement over original (%)",
                groups,
                width,
                height: 260.0,
                format: &|v| format!("{v:.0}%"),
            }
            .render(),
        );
    }
    any.then(|| format!(r#"<div class="row">{panels}</div>"#))
}

/// Figure 4: bytes fetched per strategy (median over the links), requests on top.
fn figure4(e: &Experiment) -> Option<String> {
    let groups: Vec<Group> = caches(e)
        .iter()
        .map(|cache| Group {
            label: cache.clone(),
            bars: strategies(e)
                .iter()
                .filter_map(|s| {
                    let cells: Vec<&Cell> =
                        e.cells.iter().filter(|c| &c.cache == cache && &c.strategy == s).collect();
                    let b = checked_median(
                        &cells.iter().filter_map(|c| c.bytes_fetched()).collect::<Vec<_>>(),
                    )?;
                    let r = checked_median(
                        &cells.iter().filter_map(|c| c.requests()).collect::<Vec<_>>(),
                    )?;
                    Some(Bar {
                        key: s.clone(),
                        value: b,
                        colour: strategy_colour(s).into(),
                        title: format!(
                            "{s} ({cache}): {} in {r:.0} requests (medians over {} links)",
                            bytes(b),
                            cells.len()
                        ),
                        label: Some(format!("{r:.0}")),
                        whisker: None,
                    })
                })
                .collect(),
        })
        .filter(|g| !g.bars.is_empty())
        .collect();
    if groups.is_empty() {
        return None;
    }
    let width = (90.0 * groups.iter().map(|g| g.bars.len()).sum::<usize>() as f64 + 100.0)
        .clamp(360.0, 900.0);
    Some(
        BarChart {
            title: "bytes fetched (bars) and requests (numbers), medians over the links",
            y_label: "bytes fetched",
            groups,
            width,
            height: 280.0,
            format: &|v| bytes(v),
        }
        .render(),
    )
}

/// Measured against predicted, log-log, with the tolerance band around the diagonal.
fn model_chart(e: &Experiment) -> Option<String> {
    model_svg(e).map(|s| s.finish("predicted against measured start-up"))
}

fn model_svg(e: &Experiment) -> Option<Svg> {
    let pts: Vec<(&Cell, f64, f64)> = e
        .cells
        .iter()
        .filter_map(|c| Some((c, c.startup_s()?, c.predicted_s?)))
        .filter(|p| p.1 > 0.0 && p.2 > 0.0)
        .collect();
    if pts.is_empty() {
        return None;
    }
    let lo = pts.iter().map(|p| p.1.min(p.2)).fold(f64::MAX, f64::min) / 1.3;
    let hi = pts.iter().map(|p| p.1.max(p.2)).fold(0.0, f64::max) * 1.3;
    let size = 420.0;
    let ticks = Log { d0: lo, d1: hi, r0: 0.0, r1: 1.0 }.ticks();
    let tick_w = ticks.iter().map(|t| TICK.width(&seconds(*t))).fold(0.0, f64::max);
    // From the left edge: the axis title, a gap, the tick labels, a gap, the plot; on the
    // right, room for half the last tick label.
    let left = 3.0 + LABEL.line() + 6.0 + tick_w + 4.0;
    let (bottom, right) = (40.0, (tick_w / 2.0 + 2.0).max(12.0));
    let title = "predicted against measured start-up";
    let mut s = Svg::new(size, size);
    let top = s.title(left, size - left - 4.0, title) + 10.0;
    let x = Log { d0: lo, d1: hi, r0: left, r1: size - right };
    let y = Log { d0: lo, d1: hi, r0: size - bottom, r1: top };
    // The band: predictions within the tolerance of the measurement.
    let band = [
        (x.at(lo), y.at(lo * (1.0 + MODEL_TOLERANCE))),
        (x.at(hi / (1.0 + MODEL_TOLERANCE)), y.at(hi)),
        (x.at(hi), y.at(hi)),
        (x.at(hi), y.at(hi * (1.0 - MODEL_TOLERANCE))),
        (x.at(lo), y.at(lo * (1.0 - MODEL_TOLERANCE).max(1e-9))),
    ];
    s.polygon(&band, "#009e73", 0.12);
    s.text((left + size - right) / 2.0, size - 6.0, "middle", &LABEL, "measured start-up");
    s.vtext(
        3.0 + LABEL.size * 0.93,
        (top + size - bottom) / 2.0,
        &LABEL,
        "predicted start-up",
        size - bottom - top,
    );
    // Ticks 1, 2 and 5 of each decade; a label that would run into its neighbour is left out.
    for t in ticks {
        s.line(x.at(t), top, x.at(t), size - bottom, "#eee", 1.0);
        s.optional_text(x.at(t), size - bottom + 14.0, "middle", &TICK, &seconds(t));
        s.line(left, y.at(t), size - right, y.at(t), "#eee", 1.0);
        s.optional_text(left - 4.0, y.at(t) + 4.0, "end", &TICK, &seconds(t));
    }
    s.dashed(x.at(lo), y.at(lo), x.at(hi), y.at(hi), "#555");
    for (c, m, p) in &pts {
        let err = (p - m) / m * 100.0;
        s.circle(
            x.at(*m),
            y.at(*p),
            4.0,
            strategy_colour(&c.strategy),
            &c.strategy,
            &format!(
                "{} on {} ({}): measured {}, predicted {} ({err:+.0}%)",
                c.strategy,
                c.link.label,
                c.cache,
                seconds(*m),
                seconds(*p)
            ),
        );
    }
    Some(s)
}

/// The network section of one experiment.
fn experiment_html(name: &str, e: &Experiment, tables: &mut Vec<Table>) -> String {
    let mut html = summary(name, e);
    html.push_str(&figures(e));
    let (cells, off, within, predicted) = cell_tables(e);
    if let Some(chart) = model_chart(e) {
        html.push_str(&format!(
            "<h3>The model against the measurement</h3><p><code>coldstart predict</code>'s \
             start-up (the paper's Eq. 1 applied to what each strategy sends, the link given) \
             against the measured median, every cell. The shaded band is within {:.0}% of the \
             measurement: {within} of {predicted} cells are inside it.</p>\
             <div class=\"row\">{chart}</div>",
            MODEL_TOLERANCE * 100.0
        ));
        if !off.rows.is_empty() {
            html.push_str(
                &off.html(&format!("The {} cells outside the band, and why", off.rows.len()), true),
            );
        }
    }
    html.push_str(&auto_html(e, tables));
    html.push_str(&cells.html("Every cell (CSV beside the report)", false));
    tables.push(cells);
    if !off.rows.is_empty() {
        tables.push(off);
    }
    if !e.warnings.is_empty() {
        html.push_str(&notes(&e.warnings));
    }
    html
}

/// The paragraph that says what an experiment measured: the commands, the program's size,
/// the chunk size, read-ahead and runs, and the local start-up.
fn summary(name: &str, e: &Experiment) -> String {
    let p = &e.program;
    format!(
        "<p><b>{}</b>: <code>{}</code> measured (held out), hot set recorded from <code>{}</code>; \
         {} in {} files{}; chunks of {}, read-ahead {}; {} run(s) per cell{}.</p>",
        esc(name),
        esc(&p.command.join(" ")),
        esc(&p.profiled.join(" ")),
        bytes(p.bytes as f64),
        p.files,
        e.used_bytes.map_or(String::new(), |u| format!(
            ", of which the measured start-up reads {} ({:.0}%)",
            bytes(u as f64),
            u as f64 * 100.0 / p.bytes.max(1) as f64
        )),
        bytes(e.settings.chunk_size as f64),
        bytes(e.settings.readahead as f64),
        e.settings.runs,
        e.local_s.map_or(String::new(), |l| format!("; local start-up {}", seconds(l)))
    )
}

/// The strategies' legend, then the paper's Figure 3 for each cache state and Figure 4.
fn figures(e: &Experiment) -> String {
    let items: Vec<LegendItem> = strategies(e)
        .iter()
        .map(|s| LegendItem { key: s.clone(), colour: strategy_colour(s).into(), label: s.clone() })
        .collect();
    let mut html = legend(&items);
    for cache in caches(e) {
        if let Some(f3) = figure3(e, &cache) {
            html.push_str(&format!(
                "<h3>Improvement over <code>original</code>, cache {} (Figure 3)</h3>\
                 <p>Each panel is one bandwidth, latencies along the axis; a bar above zero is \
                 faster than downloading the program first.</p>{f3}",
                esc(&cache)
            ));
        }
    }
    if let Some(f4) = figure4(e) {
        html.push_str(&format!("<h3>Bytes and requests (Figure 4)</h3>{f4}"));
    }
    html
}

/// The table of every cell, the table of the cells the model missed by more than
/// [`MODEL_TOLERANCE`] (and why), and how many cells were predicted within it, of how many.
fn cell_tables(e: &Experiment) -> (Table, Table, usize, usize) {
    let mut cells = Table::new(
        "network",
        &[
            "link",
            "bits_per_second",
            "latency_s",
            "strategy",
            "cache",
            "runs",
            "median_s",
            "bytes_fetched",
            "requests",
            "stall_s",
            "predicted_s",
            "error",
            "eq1_measured_s",
            "auto_chose",
            "improvement_over_original",
        ],
    );
    let mut off = Table::new(
        "model-misses",
        &["link", "strategy", "cache", "measured_s", "predicted_s", "error", "why"],
    );
    let mut within = 0;
    let mut predicted = 0;
    for c in &e.cells {
        let m = c.startup_s();
        let orig = e.cell(&c.link.label, "original", &c.cache).and_then(Cell::startup_s);
        let err = match (m, c.predicted_s) {
            (Some(m), Some(p)) if m > 0.0 => Some((p - m) / m),
            _ => None,
        };
        if let Some(err) = err {
            predicted += 1;
            if err.abs() <= MODEL_TOLERANCE {
                within += 1;
            } else {
                off.push(vec![
                    c.link.label.clone(),
                    c.strategy.clone(),
                    c.cache.clone(),
                    seconds(m.unwrap_or(0.0)),
                    seconds(c.predicted_s.unwrap_or(0.0)),
                    format!("{:+.0}%", err * 100.0),
                    why(e, c),
                ]);
            }
        }
        let opt = |v: Option<f64>| v.map(|v| format!("{v}")).unwrap_or_default();
        cells.push(vec![
            c.link.label.clone(),
            c.link.bits_per_second.to_string(),
            c.link.latency_s.to_string(),
            c.strategy.clone(),
            c.cache.clone(),
            c.runs.len().to_string(),
            opt(m),
            opt(c.bytes_fetched()),
            opt(c.requests()),
            opt(c.stall_s()),
            opt(c.predicted_s),
            err.map(|e| format!("{:.3}", e)).unwrap_or_default(),
            opt(eq1_measured(e, c)),
            c.chosen().unwrap_or_default().into(),
            match (m, orig) {
                (Some(m), Some(o)) if o > 0.0 => format!("{:.3}", (o - m) / o),
                _ => String::new(),
            },
        ]);
    }
    (cells, off, within, predicted)
}

/// How `--strategy auto` chose against the measured best strategy of each cell, its table
/// added to `tables`; empty when no cell ran `auto`.
fn auto_html(e: &Experiment, tables: &mut Vec<Table>) -> String {
    let checks = auto_checks(e);
    if checks.is_empty() {
        return String::new();
    }
    let ok = checks.iter().filter(|c| c.ok()).count();
    let mut t = Table::new(
        "auto",
        &[
            "link",
            "cache",
            "measured_best",
            "best_s",
            "auto_chose",
            "chosen_s",
            "chosen_over_best",
            "auto_s",
            "predict_chose",
            "within_5pct",
        ],
    );
    for c in &checks {
        t.push(vec![
            c.link.clone(),
            c.cache.clone(),
            c.best.clone(),
            seconds(c.best_s),
            c.chosen.clone(),
            c.chosen_s.map(seconds).unwrap_or_default(),
            c.ratio().map(|r| format!("{r:.3}")).unwrap_or_default(),
            c.auto_s.map(seconds).unwrap_or_default(),
            c.predicted_choice.clone().unwrap_or_default(),
            if c.ok() { "yes".into() } else { "no".into() },
        ]);
    }
    let mut html = format!(
        "<h3><code>--strategy auto</code> against the measured best</h3><p>In {ok} of {} \
         cells the strategy <code>auto</code> chose measured within {:.0}% of the best \
         strategy of its cell (its time is that strategy's own cell; <code>auto</code>'s \
         own run, which also measures the link, is beside it).</p>",
        checks.len(),
        AUTO_TOLERANCE * 100.0
    );
    html.push_str(&t.html("Every cell", ok < checks.len()));
    tables.push(t);
    html
}

/// The network section: every experiment given.
pub fn section(inputs: &Inputs) -> Option<Section> {
    let exps: Vec<_> = inputs.experiments().collect();
    if exps.is_empty() {
        return None;
    }
    let mut tables = Vec::new();
    let mut html = String::new();
    for (src, e) in exps {
        html.push_str(&experiment_html(&src.name(), e, &mut tables));
    }
    Some(Section {
        id: "network".into(),
        title: "Starting over a network (the paper's Figures 3 and 4, and its model)".into(),
        html,
        tables,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_formats::{CellRun, LinkSpec};

    fn cell(strategy: &str, link: &str, wall_s: f64, predicted_s: f64) -> Cell {
        Cell {
            link: LinkSpec { label: link.into(), bits_per_second: 1e6, latency_s: 0.05 },
            strategy: strategy.into(),
            cache: "cold".into(),
            runs: vec![CellRun {
                wall_s,
                bytes_fetched: 1000,
                requests: 3,
                stall_s: 0.0,
                exit_code: Some(0),
                chosen: None,
                teardown_s: None,
                held_out_misses: None,
                held_out_bytes: None,
                other_bytes: None,
                auto_link: None,
            }],
            predicted_s: Some(predicted_s),
            predicted_choice: None,
            predicted_measured_s: None,
        }
    }

    /// Cells from 0.1 s to 10 s: the ticks of three decades, whose labels (`100.0 ms`,
    /// `200.0 ms`) are wider than the space between them.
    #[test]
    fn the_model_chart_leaves_out_tick_labels_that_would_collide() {
        let mut e = Experiment::new();
        e.cells = vec![
            cell("original", "1mbit/50ms", 9.47, 9.28),
            cell("stream", "20mbit/10ms", 0.131, 0.109),
            cell("paged", "20mbit/10ms", 0.324, 0.25),
        ];
        let svg = model_svg(&e).unwrap();
        svg.assert_laid_out();
    }

    #[test]
    fn the_best_gain_is_written_as_how_many_times_faster() {
        let mut e = Experiment::new();
        e.cells = vec![
            cell("original", "1mbit/50ms", 9.47, 9.28),
            cell("stream", "1mbit/50ms", 2.06, 1.68),
            cell("original", "20mbit/10ms", 0.867, 0.75),
            cell("stream", "20mbit/10ms", 0.131, 0.109),
        ];
        let h = highlights(&e, "experiment.json");
        assert_eq!(h[0].0, "6.6x faster");
        assert!(
            h[0].1.contains("stream against downloading first (original) on 20mbit/10ms"),
            "{:?}",
            h[0]
        );
        assert!(h.iter().all(|(_, c)| c.ends_with("(experiment.json)")), "{h:?}");
    }

    /// A start whose unmount took 5 s started in 0.75 s: the model is judged on that.
    #[test]
    fn a_slow_unmount_is_no_part_of_the_start_up_the_model_is_judged_on() {
        let mut e = Experiment::new();
        let mut slow = cell("reordered-paged", "32mbit/10ms", 5.75, 0.74);
        slow.runs[0].teardown_s = Some(5.0);
        e.cells = vec![slow, cell("original", "32mbit/10ms", 1.5, 1.45)];
        let h = highlights(&e, "experiment.json");
        let model = h.iter().find(|(_, c)| c.contains("predicted within 15%")).unwrap();
        assert_eq!(model.0, "2 of 2", "{h:?}");
    }
}
