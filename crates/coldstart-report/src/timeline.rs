//! Where one start-up's time went (`coldstart timeline`), on one time axis: its phases, the
//! time it waited on I/O, the block requests, the page events of the files that cost most,
//! and each module's first and last function touch.

use coldstart_formats::Timeline;

use crate::bars::{legend, LegendItem};
use crate::html::notes;
use crate::input::Inputs;
use crate::svg::{
    esc, nice_ticks, phase_colour, seconds, Linear, Svg, PAGE_MAPPED, PAGE_READ, PAGE_TOUCHED,
};
use crate::table::Table;
use crate::text::{INBAR, LABEL, TICK};
use crate::Section;

/// Time blocked on I/O.
const IO_WAIT: &str = "#3d3d3d";
/// Files drawn as lanes of their own.
const FILE_LANES: usize = 8;
/// Module lanes.
const MODULE_LANES: usize = 8;

/// The widest a lane's label may be; a longer one (a path) keeps its end, the file name.
const LABEL_MAX: f64 = 280.0;

fn file_name(t: &Timeline, i: usize) -> String {
    t.files.get(i).map_or_else(String::new, |f| {
        if f.path.is_empty() {
            format!("dev {} inode {}", f.dev, f.ino)
        } else {
            f.path.clone()
        }
    })
}

/// What the chart's title says the run was: the cache state, the command, the storage.
fn what_ran(t: &Timeline) -> String {
    let on = t.storage.as_ref().map_or(String::new(), |d| format!(" on an emulated {d}"));
    format!("{} start-up of {}{on}", t.cache, crate::series::shell_words(&t.command))
}

/// The chart's frame: the x scale, the lanes' labels column and the y of the first lane.
struct Frame {
    x: Linear,
    left: f64,
    label_w: f64,
    lane: f64,
}

impl Frame {
    /// A lane's label, right-aligned against the plot; shortened from the start to the
    /// label column, with the whole of it on hover.
    fn label(&self, s: &mut Svg, y: f64, text: &str) {
        let shown = LABEL.fit_start(text, self.label_w);
        s.titled_text(self.left - 6.0, y + 13.0, "end", &LABEL, &shown, text);
    }
}

/// The chart of one timeline: a lane for the phases, one for the time blocked on I/O, rows
/// of block requests, a lane per costly file and per module.
pub fn chart(t: &Timeline) -> String {
    draw(t).finish(&what_ran(t))
}

fn draw(t: &Timeline) -> Svg {
    let width = 960.0;
    let end = t.wall_s.max(t.phases.iter().map(|p| p.end_s).fold(0.0, f64::max)).max(1e-6);
    let (ticks, d0, d1) = nice_ticks(0.0, end, 8);
    let block_rows = pack(
        &t.block.iter().map(|b| (b.issue_s, b.complete_s.unwrap_or(end))).collect::<Vec<_>>(),
        6,
    );
    let files: Vec<usize> = t.costs.iter().take(FILE_LANES).map(|c| c.file).collect();
    let mut modules: Vec<&coldstart_formats::ModuleSpan> = t.modules.iter().collect();
    modules.sort_by_key(|m| std::cmp::Reverse(m.functions));
    modules.truncate(MODULE_LANES);
    modules.sort_by(|a, b| a.first_s.total_cmp(&b.first_s));
    let io_label = format!("waiting on I/O ({})", seconds(t.io_wait_wall_s));
    let block_label = format!("block requests ({})", t.block.len());
    let labels = ["phases".to_owned(), io_label.clone(), block_label.clone()]
        .into_iter()
        .chain(files.iter().map(|f| file_name(t, *f)))
        .chain(modules.iter().map(|m| m.path.clone()));
    let label_w = labels.map(|l| LABEL.width(&l)).fold(0.0, f64::max).min(LABEL_MAX);
    let left = 6.0 + label_w + 6.0;
    let tick_w = ticks.iter().map(|t| TICK.width(&seconds(*t))).fold(0.0, f64::max);
    let right = (tick_w / 2.0 + 2.0).max(12.0);
    let f = Frame { x: Linear { d0, d1, r0: left, r1: width - right }, left, label_w, lane: 18.0 };
    let n_lanes = 2 + block_rows.1.max(1) + files.len() + modules.len();
    let mut s = Svg::new(width, 0.0);
    let top = s.title(left, width - left - 4.0, &what_ran(t)) + 10.0;
    let plot_bottom = top + n_lanes as f64 * f.lane;
    s.height = plot_bottom + 40.0;
    for tk in &ticks {
        s.line(f.x.at(*tk), top - 4.0, f.x.at(*tk), plot_bottom, "#eee", 1.0);
        s.optional_text(f.x.at(*tk), plot_bottom + 14.0, "middle", &TICK, &seconds(*tk));
    }
    s.text((left + width - right) / 2.0, plot_bottom + 32.0, "middle", &LABEL, "time from exec");
    let mut y = top;
    f.label(&mut s, y, "phases");
    phases(&mut s, &f, t, y);
    y += f.lane;
    f.label(&mut s, y, &io_label);
    waits(&mut s, &f, t, y);
    y += f.lane;
    f.label(&mut s, y, &block_label);
    block_requests(&mut s, &f, t, y, &block_rows.0, end);
    y += block_rows.1.max(1) as f64 * f.lane;
    for file in &files {
        let name = file_name(t, *file);
        f.label(&mut s, y, &name);
        page_events(&mut s, &f, t, y, *file, &name);
        y += f.lane;
    }
    for m in &modules {
        f.label(&mut s, y, &m.path);
        let (a, b) = (f.x.at(m.first_s), f.x.at(m.last_s));
        s.keyed_rect(
            a,
            y + 5.0,
            (b - a).max(2.0),
            f.lane - 10.0,
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
        y += f.lane;
    }
    s
}

/// The phases, each named inside its bar where the name fits.
fn phases(s: &mut Svg, f: &Frame, t: &Timeline, y: f64) {
    for p in &t.phases {
        let (a, b) = (f.x.at(p.start_s), f.x.at(p.end_s));
        s.keyed_rect(
            a,
            y + 1.0,
            (b - a).max(1.0),
            f.lane - 2.0,
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
        if b - a > INBAR.width(&p.name) + 6.0 {
            s.text((a + b) / 2.0, y + 13.0, "middle", &INBAR, &p.name);
        }
    }
}

/// The intervals in which a thread was blocked on I/O.
fn waits(s: &mut Svg, f: &Frame, t: &Timeline, y: f64) {
    for w in &t.waits {
        let (a, b) = (f.x.at(w.start_s), f.x.at(w.end_s));
        let what =
            w.file.map(|i| format!(", after a page of {}", file_name(t, i))).unwrap_or_default();
        s.keyed_rect(
            a,
            y + 2.0,
            (b - a).max(1.0),
            f.lane - 4.0,
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
}

/// Block requests, packed into rows (`rows`: each request's row, or none when it did not fit).
fn block_requests(s: &mut Svg, f: &Frame, t: &Timeline, y: f64, rows: &[Option<usize>], end: f64) {
    for (b, row) in t.block.iter().zip(rows) {
        let Some(row) = row else { continue };
        let c = b.complete_s.unwrap_or(end);
        let (a, z) = (f.x.at(b.issue_s), f.x.at(c));
        let ry = y + *row as f64 * f.lane;
        s.keyed_rect(
            a,
            ry + 4.0,
            (z - a).max(1.0),
            f.lane - 8.0,
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
}

/// The page events of one file.
fn page_events(s: &mut Svg, f: &Frame, t: &Timeline, y: f64, file: usize, name: &str) {
    for e in t.events.iter().filter(|e| e.file == file) {
        let (colour, h) = match e.kind.as_str() {
            "fault" => (PAGE_TOUCHED, f.lane - 4.0),
            "map" => (PAGE_MAPPED, f.lane - 8.0),
            _ => (PAGE_READ, f.lane - 8.0),
        };
        let px = f.x.at(e.t_s);
        s.keyed_rect(
            px - 0.75,
            y + (f.lane - h) / 2.0,
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
        html.push_str(&summary(&src.name(), t));
        html.push_str(&timeline_legend(t));
        html.push_str(&format!(r#"<div class="row">{}</div>"#, chart(t)));
        if let Some(note) = &t.modules_note {
            html.push_str(&format!(r#"<p class="note">{}</p>"#, esc(note)));
        }
        let rows = phase_rows(&src.name(), t, &mut phases);
        let costly = costly_files(&src.name(), t, &mut files);
        html.push_str(&format!(
            r#"<div class="row"><table class="compact"><thead><tr><th>phase</th><th>starts</th><th>takes</th><th>share</th></tr></thead><tbody>{rows}</tbody></table>
            <table class="compact"><thead><tr><th>file (costliest first)</th><th>pages read</th><th>faults</th><th>waited</th></tr></thead><tbody>{costly}</tbody></table></div>"#
        ));
        if !t.warnings.is_empty() {
            html.push_str(&notes(&t.warnings));
        }
    }
    Some(Section {
        id: "timeline".into(),
        title: "Where start-up time goes (timeline)".into(),
        html,
        tables: vec![phases, files],
    })
}

/// The paragraph that says what timeline `t` (from the file `name`) recorded: the start, its
/// time to readiness, the named phases' share, the I/O wait and the events.
fn summary(name: &str, t: &Timeline) -> String {
    format!(
        "<p><b>{}</b>: a {} start of <code>{}</code>{}, {} to readiness ({}); the named \
         phases cover {:.0}% of it. Its threads waited on I/O for {} ({:.0}% of the wall \
         time{}); {} block requests, {} page events in {} files.</p>",
        esc(name),
        esc(&t.cache),
        esc(&crate::series::shell_words(&t.command)),
        t.storage.as_ref().map_or(String::new(), |d| format!(
            " on an emulated {} (the program's files on a throttled loop device)",
            esc(d)
        )),
        seconds(t.wall_s),
        esc(&t.ready),
        t.named_share() * 100.0,
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
    )
}

/// The legend of the chart of `t`: its phases, then the kinds of event drawn.
fn timeline_legend(t: &Timeline) -> String {
    let mut items: Vec<LegendItem> = t
        .phases
        .iter()
        .map(|p| LegendItem {
            key: p.name.clone(),
            colour: phase_colour(&p.name).into(),
            label: p.name.clone(),
        })
        .collect();
    for (key, colour, label) in [
        ("iowait", IO_WAIT, "blocked on I/O"),
        ("block", "#0072b2", "block read request"),
        ("fault", PAGE_TOUCHED, "page fault"),
        ("read", PAGE_READ, "page read into the cache"),
        ("module", "#4e79a7", "module: first to last function touch"),
    ] {
        items.push(LegendItem { key: key.into(), colour: colour.into(), label: label.into() });
    }
    legend(&items)
}

/// The rows of the phase table of `t` (from the file `name`), each phase also added to
/// `table`.
fn phase_rows(name: &str, t: &Timeline, table: &mut Table) -> String {
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
        table.push(vec![
            name.to_owned(),
            p.name.clone(),
            p.start_s.to_string(),
            p.end_s.to_string(),
            d.to_string(),
            format!("{:.4}", if t.wall_s > 0.0 { d / t.wall_s } else { 0.0 }),
        ]);
    }
    rows
}

/// The rows of the ten files whose reads cost `t` (from the file `name`) the most; every
/// file's cost is added to `table`.
fn costly_files(name: &str, t: &Timeline, table: &mut Table) -> String {
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
        table.push(vec![
            name.to_owned(),
            file_name(t, c.file),
            c.pages_read.to_string(),
            c.faults.to_string(),
            c.wait_s.to_string(),
        ]);
    }
    costly
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
            t.phases.push(coldstart_formats::Phase {
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

    /// The lanes of Debian's python3 on an emulated hard disk: long paths, a long command.
    #[test]
    fn long_track_labels_and_titles_stay_inside_the_chart() {
        let mut t = Timeline::new(
            ["/usr/bin/python3", "-c", "import json, email, urllib.request, http.client, asyncio"]
                .map(String::from)
                .to_vec(),
        );
        t.storage = Some("hdd".into());
        t.wall_s = 0.8827;
        t.phases.push(coldstart_formats::Phase { name: "exec".into(), start_s: 0.0, end_s: 0.08 });
        let paths = [
            "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so",
            "/dev/vda (file system metadata)",
            "/usr/lib/x86_64-linux-gnu/libm.so.6",
        ];
        for (i, p) in paths.iter().enumerate() {
            t.files.push(coldstart_formats::TimelineFile {
                path: (*p).into(),
                dev: "7:0".into(),
                ino: i as u64,
            });
            t.costs.push(coldstart_formats::FileCost {
                file: i,
                pages_read: 1,
                faults: 1,
                wait_s: 0.1,
            });
        }
        t.modules.push(coldstart_formats::ModuleSpan {
            path: paths[0].into(),
            first_s: 0.7,
            last_s: 0.71,
            functions: 3,
        });
        let svg = draw(&t);
        svg.assert_laid_out();
        let text = svg.finish("x");
        assert!(text.contains(&format!("<title>{}</title>", paths[0])), "the whole path on hover");
        assert!(text.contains("x86_64-linux-gnu.so<title>"), "the file name kept: {text}");
    }
}
