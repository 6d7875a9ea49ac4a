//! Grouped bar charts: the shape of the paper's Figures 3, 4 and 5 (groups along the x axis,
//! one bar per series in each, negative values below a zero line).

use crate::svg::{esc, nice_ticks, Linear, Svg};
use crate::text::{LABEL, TICK, VALUE};

/// One bar.
#[derive(Debug, Clone)]
pub struct Bar {
    /// The series (a strategy, a command): bars of one series share a colour and a key.
    pub key: String,
    pub value: f64,
    pub colour: String,
    /// Shown on hover.
    pub title: String,
    /// Written above the bar (a request count, a value).
    pub label: Option<String>,
    /// An interval drawn as a whisker (a confidence interval), in the value's unit.
    pub whisker: Option<(f64, f64)>,
}

/// A group of bars along the x axis.
#[derive(Debug, Clone)]
pub struct Group {
    pub label: String,
    pub bars: Vec<Bar>,
}

/// A chart of groups.
pub struct BarChart<'a> {
    pub title: &'a str,
    pub y_label: &'a str,
    pub groups: Vec<Group>,
    pub width: f64,
    pub height: f64,
    /// Tick labels.
    pub format: &'a dyn Fn(f64) -> String,
}

/// One entry of a legend.
pub struct LegendItem {
    pub key: String,
    pub colour: String,
    pub label: String,
}

/// An HTML legend whose entries highlight their series on hover (the page's script).
pub fn legend(items: &[LegendItem]) -> String {
    let mut out = String::from(r#"<div class="legend">"#);
    for i in items {
        out.push_str(&format!(
            r#"<span class="key" data-key="{}"><i style="background:{}"></i>{}</span>"#,
            esc(&i.key),
            esc(&i.colour),
            esc(&i.label)
        ));
    }
    out.push_str("</div>");
    out
}

impl BarChart<'_> {
    /// The chart as SVG: room on the left for the widest tick label and the axis title, the
    /// title wrapped to the width, each group's name shortened to its group, and a bar's value
    /// above its whisker, lifted clear of a neighbour's (or left out where no room is left:
    /// it is in the bar's hover title and in the table).
    pub fn render(&self) -> String {
        self.draw().finish(self.title)
    }

    /// The widest a bar is drawn: 46 pixels, or its value's label and a little more.
    fn bar_width(&self) -> f64 {
        let label = |b: &Bar| b.label.as_ref().map_or(0.0, |l| VALUE.width(l) + 4.0);
        self.groups.iter().flat_map(|g| &g.bars).map(label).fold(46.0, f64::max)
    }

    /// A width at which every bar is drawn at its widest, with a value's label over it.
    pub fn natural_width(&self) -> f64 {
        let bar = self.bar_width();
        // Every group is as wide as the widest.
        let group = self
            .groups
            .iter()
            .map(|g| (g.bars.len() as f64 * bar / 0.8).max(TICK.width(&g.label) + 8.0))
            .fold(0.0, f64::max);
        // The axis: its title and tick labels (as wide as `800.0 ms`), then the right margin.
        90.0 + group * self.groups.len() as f64 + 10.0
    }

    fn draw(&self) -> Svg {
        let mut lo: f64 = 0.0;
        let mut hi: f64 = 0.0;
        for b in self.groups.iter().flat_map(|g| &g.bars) {
            lo = lo.min(b.value);
            hi = hi.max(b.value);
            if let Some((a, z)) = b.whisker {
                lo = lo.min(a);
                hi = hi.max(z);
            }
        }
        if hi == lo {
            hi = lo + 1.0;
        }
        // Room above the tallest bar for its label.
        let pad = (hi - lo) * 0.08;
        let (ticks, d0, d1) = nice_ticks(
            if lo < 0.0 { lo - pad } else { 0.0 },
            if hi > 0.0 { hi + pad } else { 0.0 },
            5,
        );
        let tick_labels: Vec<String> = ticks.iter().map(|t| (self.format)(*t)).collect();
        let tick_w = tick_labels.iter().map(|l| TICK.width(l)).fold(0.0, f64::max);
        // From the left edge: the axis title, a gap, the tick labels, a gap, the plot.
        let axis_x = 3.0 + LABEL.size * 0.93;
        let left = 3.0 + LABEL.line() + 6.0 + tick_w + 5.0;
        let (right, bottom) = (10.0, 34.0);
        let mut s = Svg::new(self.width, self.height);
        let top = s.title(left, self.width - left - 4.0, self.title) + 10.0;
        let y = Linear { d0, d1, r0: self.height - bottom, r1: top };
        let plot_w = self.width - left - right;
        for (t, label) in ticks.iter().zip(&tick_labels) {
            let py = y.at(*t);
            s.line(
                left,
                py,
                self.width - right,
                py,
                if *t == 0.0 { "#555" } else { "#e6e6e6" },
                1.0,
            );
            s.optional_text(left - 5.0, py + 4.0, "end", &TICK, label);
        }
        let plot_h = self.height - bottom - top;
        s.vtext(axis_x, top + plot_h / 2.0, &LABEL, self.y_label, plot_h);
        let n = self.groups.len().max(1) as f64;
        let gw = plot_w / n;
        for (gi, g) in self.groups.iter().enumerate() {
            let gx = left + gi as f64 * gw;
            let name = TICK.fit_end(&g.label, gw - 4.0);
            s.titled_text(
                gx + gw / 2.0,
                self.height - bottom + 16.0,
                "middle",
                &TICK,
                &name,
                &g.label,
            );
        }
        for (gi, g) in self.groups.iter().enumerate() {
            let gx = left + gi as f64 * gw;
            let k = g.bars.len().max(1) as f64;
            let inner = gw * 0.8;
            let bw = (inner / k).min(self.bar_width());
            let x0 = gx + (gw - bw * k) / 2.0;
            for (bi, b) in g.bars.iter().enumerate() {
                let bx = x0 + bi as f64 * bw;
                let (y0, y1) = (y.at(0.0), y.at(b.value));
                s.keyed_rect(
                    bx + 1.0,
                    y1.min(y0),
                    bw - 2.0,
                    (y0 - y1).abs().max(0.5),
                    &b.colour,
                    &b.key,
                    &b.title,
                );
                if let Some((a, z)) = b.whisker {
                    let cx = bx + bw / 2.0;
                    s.line(cx, y.at(a), cx, y.at(z), "#333", 1.0);
                    s.line(cx - 3.0, y.at(a), cx + 3.0, y.at(a), "#333", 1.0);
                    s.line(cx - 3.0, y.at(z), cx + 3.0, y.at(z), "#333", 1.0);
                }
                if let Some(l) = &b.label {
                    value_label(&mut s, b, bx + bw / 2.0, &y, left, l);
                }
            }
        }
        s
    }
}

/// A bar's value: above the bar and its whisker (below, for a negative bar), centred on it
/// but inside the plot; lifted a line at a time while it would cover another text.
fn value_label(s: &mut Svg, b: &Bar, cx: f64, y: &Linear, left: f64, label: &str) {
    let w = VALUE.width(label);
    let cx = cx.max(left + w / 2.0).min(s.width - w / 2.0);
    let (mut ly, step) = if b.value >= 0.0 {
        let end = b.whisker.map_or(b.value, |(_, z)| z.max(b.value));
        (y.at(end) - 4.0, -VALUE.line())
    } else {
        let end = b.whisker.map_or(b.value, |(a, _)| a.min(b.value));
        (y.at(end) + VALUE.size + 1.0, VALUE.line())
    };
    for _ in 0..4 {
        if s.optional_text(cx, ly, "middle", &VALUE, label) {
            return;
        }
        ly += step;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(key: &str, value: f64) -> Bar {
        Bar {
            key: key.into(),
            value,
            colour: "#123456".into(),
            title: format!("{key} {value}"),
            label: Some(format!("{value}")),
            whisker: None,
        }
    }

    #[test]
    fn every_bar_is_drawn_with_its_title_and_negative_bars_below_zero() {
        let chart = BarChart {
            title: "t",
            y_label: "%",
            groups: vec![
                Group {
                    label: "10 ms".into(),
                    bars: vec![bar("paged", 30.0), bar("stream", -20.0)],
                },
                Group { label: "200 ms".into(), bars: vec![bar("paged", -5.0)] },
            ],
            width: 300.0,
            height: 200.0,
            format: &|v| format!("{v:.0}"),
        };
        let svg = chart.render();
        assert_eq!(svg.matches("data-key=").count(), 3, "{svg}");
        assert!(svg.contains("<title>stream -20</title>"));
        // The zero line is drawn darker than the grid.
        assert!(svg.contains(r##"stroke="#555""##));
    }

    /// Figure 5 of a program measured on an emulated hard disk, in two files: a long title,
    /// tick labels as wide as `800.0 ms`, and four values of one height side by side.
    #[test]
    fn no_text_is_cut_off_or_drawn_over_another() {
        let bars = |v: f64| -> Vec<Bar> {
            (0..4)
                .map(|i| Bar {
                    label: Some(crate::svg::seconds(v)),
                    whisker: Some((v * 0.9, v * 1.1)),
                    ..bar(&format!("s{i}"), v)
                })
                .collect()
        };
        let chart = BarChart {
            title: "(a) start-up, median and 95% CI, the program's files on an emulated hdd",
            y_label: "start-up of the program, median",
            groups: vec![
                Group { label: "cold".into(), bars: bars(0.7984) },
                Group { label: "a state with a long name".into(), bars: bars(0.0201) },
            ],
            width: 360.0,
            height: 280.0,
            format: &crate::svg::seconds,
        };
        let svg = chart.draw();
        svg.assert_laid_out();
        let text = svg.finish("x");
        assert!(text.contains("<title>(a) start-up, median and 95% CI, the program"), "{text}");
        assert!(
            text.contains("<title>a state with a long name</title>"),
            "shortened, whole on hover"
        );
    }
}
