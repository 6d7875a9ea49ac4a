//! Grouped bar charts: the shape of the paper's Figures 3, 4 and 5 (groups along the x axis,
//! one bar per series in each, negative values below a zero line).

use crate::svg::{esc, nice_ticks, Linear, Svg};

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
    /// The chart as SVG.
    pub fn render(&self) -> String {
        let (left, right, top, bottom) = (58.0, 10.0, 26.0, 34.0);
        let mut s = Svg::new(self.width, self.height);
        s.text(left, 15.0, "start", "ttl", self.title);
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
        let y = Linear { d0, d1, r0: self.height - bottom, r1: top };
        let plot_w = self.width - left - right;
        for t in &ticks {
            let py = y.at(*t);
            s.line(
                left,
                py,
                self.width - right,
                py,
                if *t == 0.0 { "#555" } else { "#e6e6e6" },
                1.0,
            );
            s.text(left - 5.0, py + 4.0, "end", "tick", &(self.format)(*t));
        }
        s.vtext(13.0, (top + self.height - bottom) / 2.0, "lbl", self.y_label);
        let n = self.groups.len().max(1) as f64;
        let gw = plot_w / n;
        for (gi, g) in self.groups.iter().enumerate() {
            let gx = left + gi as f64 * gw;
            s.text(gx + gw / 2.0, self.height - bottom + 16.0, "middle", "tick", &g.label);
            let k = g.bars.len().max(1) as f64;
            let inner = gw * 0.8;
            let bw = (inner / k).min(46.0);
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
                    let ly = if b.value >= 0.0 { y1 - 4.0 } else { y1 + 11.0 };
                    s.text(bx + bw / 2.0, ly, "middle", "val", l);
                }
            }
        }
        s.finish(self.title)
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
}
