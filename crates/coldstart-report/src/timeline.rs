//! Where one start-up's time went (`coldstart timeline`), on one time axis: its phases, the
//! time it waited on I/O, the block requests, the page events of the files that cost most,
//! and each module's first and last function touch.

use coldstart_results::Timeline;

use crate::bars::{legend, LegendItem};
use crate::input::Inputs;
use crate::svg::{
    esc, nice_ticks, phase_colour, seconds, Linear, Svg, PAGE_MAPPED, PAGE_READ, PAGE_TOUCHED,
};
use crate::table::Table;
use crate::Section;

/// Time blocked on I/O.
const IO_WAIT: &str = "#3d3d3d";
/// Files drawn as lanes of their own.
const FILE_LANES: usize = 8;
/// Module lanes.
const MODULE_LANES: usize = 8;

/// The name of a file for a lane: its last two path components.
fn short(path: &str) -> String {
    let parts: Vec<&str> = path.rsplit('/').take(2).collect();
    let s: Vec<&str> = parts.into_iter().rev().collect();
    let s = s.join("/");
    if s.len() > 34 {
        format!("...{}", &s[s.len() - 31..])
    } else {
        s
    }
}

fn file_name(t: &Timeline, i: usize) -> String {
    t.files.get(i).map_or_else(String::new, |f| {
        if f.path.is_empty() {
            format!("dev {} inode {}", f.dev, f.ino)
        } else {
            f.path.clone()
        }
    })
}

/// The chart of one timeline.
pub fn chart(t: &Timeline) -> String {
    let width = 960.0;
    let (left, right, top) = (170.0, 12.0, 30.0);
    let end = t.wall_s.max(t.phases.iter().map(|p| p.end_s).fold(0.0, f64::max)).max(1e-6);
    let (ticks, d0, d1) = nice_ticks(0.0, end, 8);
    let x = Linear { d0, d1, r0: left, r1: width - right };
    let lane = 18.0;
    let block_rows = pack(
        &t.block.iter().map(|b| (b.issue_s, b.complete_s.unwrap_or(end))).collect::<Vec<_>>(),
        6,
    );
    let files: Vec<usize> = t.costs.iter().take(FILE_LANES).map(|c| c.file).collect();
    let mut modules: Vec<&coldstart_results::ModuleSpan> = t.modules.iter().collect();
    modules.sort_by_key(|m| std::cmp::Reverse(m.functions));
    modules.truncate(MODULE_LANES);
    modules.sort_by(|a, b| a.first_s.total_cmp(&b.first_s));
    let n_lanes = 2 + block_rows.1.max(1) + files.len() + modules.len();
    let height = top + n_lanes as f64 * lane + 40.0;
    let mut s = Svg::new(width, height);
    s.text(left, 16.0, "start", "ttl", &format!("{} start-up of {}", t.cache, t.command.join(" ")));
    let plot_bottom = top + n_lanes as f64 * lane;
    for tk in &ticks {
        s.line(x.at(*tk), top - 4.0, x.at(*tk), plot_bottom, "#eee", 1.0);
        s.text(x.at(*tk), plot_bottom + 14.0, "middle", "tick", &seconds(*tk));
    }
    s.text((left + width) / 2.0, plot_bottom + 32.0, "middle", "lbl", "time from exec");
    let mut y = top;
    // Phases.
    s.text(left - 6.0, y + 13.0, "end", "lbl", "phases");
    for p in &t.phases {
        let (a, b) = (x.at(p.start_s), x.at(p.end_s));
        s.keyed_rect(
            a,
            y + 1.0,
            (b - a).max(1.0),
            lane - 2.0,
            phase_colour(&p.name),
            &p.name,
            &format!(
                "{}: {} to {} ({})",
                p.name,
                seconds(p.start_s),
                seconds(p.end_s),
                seconds(p.end_s - p.start_s)
            ),
        );
        if b - a > 46.0 {
            s.text((a + b) / 2.0, y + 13.0, "middle", "inbar", &p.name);
        }
    }
    y += lane;
    // I/O wait.
    s.text(
        left - 6.0,
        y + 13.0,
        "end",
        "lbl",
        &format!("waiting on I/O ({})", seconds(t.io_wait_wall_s)),
    );
    for w in &t.waits {
        let (a, b) = (x.at(w.start_s), x.at(w.end_s));
        let what =
            w.file.map(|f| format!(", after a page of {}", file_name(t, f))).unwrap_or_default();
        s.keyed_rect(
            a,
            y + 2.0,
            (b - a).max(1.0),
            lane - 4.0,
            IO_WAIT,
            "iowait",
            &format!(
                "pid {} blocked {} at {}{what}",
                w.pid,
                seconds(w.end_s - w.start_s),
                seconds(w.start_s)
            ),
        );
    }
    y += lane;
    // Block requests, packed into rows.
    s.text(left - 6.0, y + 13.0, "end", "lbl", &format!("block requests ({})", t.block.len()));
    for (b, row) in t.block.iter().zip(&block_rows.0) {
        let Some(row) = row else { continue };
        let c = b.complete_s.unwrap_or(end);
        let (a, z) = (x.at(b.issue_s), x.at(c));
        let ry = y + *row as f64 * lane;
        s.keyed_rect(
            a,
            ry + 4.0,
            (z - a).max(1.0),
            lane - 8.0,
            if b.write { "#7a7a7a" } else { "#0072b2" },
            "block",
            &format!(
                "{} {} at sector {} on {}: issued {}, {} later",
                if b.write { "write" } else { "read" },
                crate::svg::bytes(b.bytes as f64),
                b.sector,
                b.dev,
                seconds(b.issue_s),
                b.complete_s.map_or("not completed".into(), |c| seconds(c - b.issue_s))
            ),
        );
    }
    y += block_rows.1.max(1) as f64 * lane;
    // Page events of the costliest files.
    for f in &files {
        let name = file_name(t, *f);
        s.text(left - 6.0, y + 13.0, "end", "lbl", &short(&name));
        for e in t.events.iter().filter(|e| e.file == *f) {
            let (colour, h) = match e.kind.as_str() {
                "fault" => (PAGE_TOUCHED, lane - 4.0),
                "map" => (PAGE_MAPPED, lane - 8.0),
                _ => (PAGE_READ, lane - 8.0),
            };
            let px = x.at(e.t_s);
            s.keyed_rect(
                px - 0.75,
                y + (lane - h) / 2.0,
                1.5,
                h,
                colour,
                &e.kind,
                &format!(
                    "{} of {} page(s) at {} of {name}, {}",
                    e.kind,
                    e.count,
                    e.page,
                    seconds(e.t_s)
                ),
            );
        }
        y += lane;
    }
    // Modules.
    for m in &modules {
        s.text(left - 6.0, y + 13.0, "end", "lbl", &short(&m.path));
        let (a, b) = (x.at(m.first_s), x.at(m.last_s));
        s.keyed_rect(
            a,
            y + 5.0,
            (b - a).max(2.0),
            lane - 10.0,
            "#4e79a7",
            "module",
            &format!(
                "{}: {} functions, first touched {}, last first touch {}",
                m.path,
                m.functions,
                seconds(m.first_s),
                seconds(m.last_s)
            ),
        );
        y += lane;
    }
    s.finish("timeline")
}

/// Put intervals into at most `max` rows so that none overlaps another in its row; an
/// interval that fits nowhere is left out (`None`). Returns each interval's row and the rows
/// used.
fn pack(intervals: &[(f64, f64)], max: usize) -> (Vec<Option<usize>>, usize) {
    let mut ends: Vec<f64> = Vec::new();
    let mut out = Vec::with_capacity(intervals.len());
    for (a, b) in intervals {
        match ends.iter().position(|e| *e <= *a) {
            Some(r) => {
                ends[r] = *b;
                out.push(Some(r));
            }
            None if ends.len() < max => {
                ends.push(*b);
                out.push(Some(ends.len() - 1));
            }
            None => out.push(None),
        }
    }
    (out, ends.len())
}

/// The timeline section: every timeline given.
pub fn section(inputs: &Inputs) -> Option<Section> {
    let timelines: Vec<_> = inputs.timelines().collect();
    if timelines.is_empty() {
        return None;
    }
    let mut phases =
        Table::new("phases", &["file", "phase", "start_s", "end_s", "duration_s", "share"]);
    let mut files = Table::new("io-files", &["file", "path", "pages_read", "faults", "wait_s"]);
    let mut html = String::new();
    for (src, t) in timelines {
        let named = t.named_share();
        html.push_str(&format!(
            "<p><b>{}</b>: a {} start of <code>{}</code>{}, {} to readiness ({}); the named \
             phases cover {:.0}% of it. Its threads waited on I/O for {} ({:.0}% of the wall \
             time{}); {} block requests, {} page events in {} files.</p>",
            esc(&src.name()),
            esc(&t.cache),
            esc(&crate::series::shell_words(&t.command)),
            t.storage.as_ref().map_or(String::new(), |d| format!(
                " on an emulated {} (the program's files on a throttled loop device)",
                esc(d)
            )),
            seconds(t.wall_s),
            esc(&t.ready),
            named * 100.0,
            seconds(t.io_wait_wall_s),
            if t.wall_s > 0.0 { t.io_wait_wall_s / t.wall_s * 100.0 } else { 0.0 },
            if (t.io_wait_s - t.io_wait_wall_s).abs() > 1e-4 {
                format!("; {} summed over threads", seconds(t.io_wait_s))
            } else {
                String::new()
            },
            t.block.len(),
            t.events.len(),
            t.files.len()
        ));
        let mut items: Vec<LegendItem> = t
            .phases
            .iter()
            .map(|p| LegendItem {
                key: p.name.clone(),
                colour: phase_colour(&p.name).into(),
                label: p.name.clone(),
            })
            .collect();
        items.push(LegendItem {
            key: "iowait".into(),
            colour: IO_WAIT.into(),
            label: "blocked on I/O".into(),
        });
        items.push(LegendItem {
            key: "block".into(),
            colour: "#0072b2".into(),
            label: "block read request".into(),
        });
        items.push(LegendItem {
            key: "fault".into(),
            colour: PAGE_TOUCHED.into(),
            label: "page fault".into(),
        });
        items.push(LegendItem {
            key: "read".into(),
            colour: PAGE_READ.into(),
            label: "page read into the cache".into(),
        });
        items.push(LegendItem {
            key: "module".into(),
            colour: "#4e79a7".into(),
            label: "module: first to last function touch".into(),
        });
        html.push_str(&legend(&items));
        html.push_str(&format!(r#"<div class="row">{}</div>"#, chart(t)));
        if let Some(note) = &t.modules_note {
            html.push_str(&format!(r#"<p class="note">{}</p>"#, esc(note)));
        }
        let mut rows = String::new();
        for p in &t.phases {
            let d = p.end_s - p.start_s;
            rows.push_str(&format!(
                "<tr><td><i class=\"sw\" style=\"background:{}\"></i>{}</td><td>{}</td><td>{}</td><td>{:.0}%</td></tr>",
                phase_colour(&p.name),
                esc(&p.name),
                seconds(p.start_s),
                seconds(d),
                if t.wall_s > 0.0 { d / t.wall_s * 100.0 } else { 0.0 }
            ));
            phases.push(vec![
                src.name(),
                p.name.clone(),
                p.start_s.to_string(),
                p.end_s.to_string(),
                d.to_string(),
                format!("{:.4}", if t.wall_s > 0.0 { d / t.wall_s } else { 0.0 }),
            ]);
        }
        let mut costly = String::new();
        for c in t.costs.iter().take(10) {
            costly.push_str(&format!(
                "<tr><td class=\"path\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&file_name(t, c.file)),
                c.pages_read,
                c.faults,
                seconds(c.wait_s)
            ));
        }
        for c in &t.costs {
            files.push(vec![
                src.name(),
                file_name(t, c.file),
                c.pages_read.to_string(),
                c.faults.to_string(),
                c.wait_s.to_string(),
            ]);
        }
        html.push_str(&format!(
            r#"<div class="row"><table class="compact"><thead><tr><th>phase</th><th>starts</th><th>takes</th><th>share</th></tr></thead><tbody>{rows}</tbody></table>
            <table class="compact"><thead><tr><th>file (costliest first)</th><th>pages read</th><th>faults</th><th>waited</th></tr></thead><tbody>{costly}</tbody></table></div>"#
        ));
        if !t.warnings.is_empty() {
            html.push_str(&format!(
                r#"<ul class="notes">{}</ul>"#,
                t.warnings.iter().map(|w| format!("<li>{}</li>", esc(w))).collect::<String>()
            ));
        }
    }
    Some(Section {
        id: "timeline".into(),
        title: "Where start-up time goes (timeline)".into(),
        html,
        tables: vec![phases, files],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_requests_go_to_separate_rows_and_overflow_is_dropped() {
        let (rows, used) = pack(&[(0.0, 2.0), (1.0, 3.0), (2.5, 4.0), (1.5, 5.0)], 2);
        assert_eq!(rows, vec![Some(0), Some(1), Some(0), None]);
        assert_eq!(used, 2);
    }

    #[test]
    fn every_phase_is_drawn() {
        let mut t = Timeline::new(vec!["prog".into()]);
        t.wall_s = 0.1;
        for (i, n) in ["exec", "loader", "main"].iter().enumerate() {
            t.phases.push(coldstart_results::Phase {
                name: (*n).into(),
                start_s: i as f64 * 0.03,
                end_s: (i + 1) as f64 * 0.03,
            });
        }
        let svg = chart(&t);
        for n in ["exec", "loader", "main"] {
            assert!(svg.contains(&format!("data-key=\"{n}\"")), "{n}");
        }
    }
}
