//! A small SVG writer: shapes, text, axes with readable ticks, and the palette every chart
//! shares, so that one strategy or one cache state has one colour throughout the report.
//!
//! Every shape that stands for a figure carries a `<title>`: the browser shows it on hover,
//! without a script.

use std::fmt::Write;

use crate::text::{Font, TITLE};

/// Escape text for XML (element content and attribute values).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A text's box in an SVG's coordinates (its advance width by the line's height).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub x0: f64,
    pub y0: f64,
    pub x1: f64,
    pub y1: f64,
}

impl Rect {
    /// Whether the two boxes share more than a hair.
    pub fn overlaps(&self, o: &Rect) -> bool {
        const HAIR: f64 = 0.5;
        self.x0 < o.x1 - HAIR
            && o.x0 < self.x1 - HAIR
            && self.y0 < o.y1 - HAIR
            && o.y0 < self.y1 - HAIR
    }

    fn inside(&self, width: f64, height: f64) -> bool {
        self.x0 >= 0.0 && self.y0 >= 0.0 && self.x1 <= width && self.y1 <= height
    }
}

/// The box of `s` written at (x, y) (`y` its baseline) with `anchor` (`start`, `middle`,
/// `end`).
pub fn text_box(x: f64, y: f64, anchor: &str, font: &Font, s: &str) -> Rect {
    let w = font.width(s);
    let x0 = match anchor {
        "middle" => x - w / 2.0,
        "end" => x - w,
        _ => x,
    };
    // DejaVu Sans: ascent 0.93 em, descent 0.24 em.
    Rect { x0, y0: y - font.size * 0.93, x1: x0 + w, y1: y + font.size * 0.24 }
}

/// An SVG document being written. It keeps the box of every text it holds, so that a chart
/// can place an optional label only where it is inside the picture and clear of the others.
pub struct Svg {
    pub width: f64,
    pub height: f64,
    body: String,
    texts: Vec<(Rect, String)>,
}

impl Svg {
    pub fn new(width: f64, height: f64) -> Svg {
        Svg { width, height, body: String::new(), texts: Vec::new() }
    }

    /// Panics unless every text is inside the picture and clear of every other (tests).
    #[cfg(test)]
    pub fn assert_laid_out(&self) {
        for (i, (a, s)) in self.texts.iter().enumerate() {
            assert!(
                a.inside(self.width, self.height),
                "{s:?} {a:?} is outside {}x{}",
                self.width,
                self.height
            );
            for (b, t) in &self.texts[..i] {
                assert!(!a.overlaps(b), "{s:?} {a:?} overlaps {t:?} {b:?}");
            }
        }
    }

    /// Whether a text with this box would be inside the picture and clear of every other.
    pub fn is_free(&self, b: &Rect) -> bool {
        b.inside(self.width, self.height) && !self.texts.iter().any(|(t, _)| t.overlaps(b))
    }

    /// A filled rectangle with a hover title (none when `title` is empty).
    #[allow(clippy::too_many_arguments)]
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, title: &str) {
        let (x, w) = if w < 0.0 { (x + w, -w) } else { (x, w) };
        let (y, h) = if h < 0.0 { (y + h, -h) } else { (y, h) };
        let _ = write!(
            self.body,
            r#"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{h:.2}" fill="{fill}""#
        );
        if title.is_empty() {
            self.body.push_str("/>");
        } else {
            let _ = write!(self.body, "><title>{}</title></rect>", esc(title));
        }
    }

    /// A rectangle with a class (its colour from the stylesheet) and a data key, for shapes
    /// the page's script highlights together.
    #[allow(clippy::too_many_arguments)]
    pub fn keyed_rect(
        &mut self,
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        fill: &str,
        key: &str,
        title: &str,
    ) {
        let (y, h) = if h < 0.0 { (y + h, -h) } else { (y, h) };
        let _ = write!(
            self.body,
            r#"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{h:.2}" fill="{fill}" data-key="{}"><title>{}</title></rect>"#,
            esc(key),
            esc(title)
        );
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, width: f64) {
        let _ = write!(
            self.body,
            r#"<line x1="{x1:.2}" y1="{y1:.2}" x2="{x2:.2}" y2="{y2:.2}" stroke="{stroke}" stroke-width="{width}"/>"#
        );
    }

    pub fn dashed(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str) {
        let _ = write!(
            self.body,
            r#"<line x1="{x1:.2}" y1="{y1:.2}" x2="{x2:.2}" y2="{y2:.2}" stroke="{stroke}" stroke-width="1" stroke-dasharray="4 3"/>"#
        );
    }

    pub fn circle(&mut self, cx: f64, cy: f64, r: f64, fill: &str, key: &str, title: &str) {
        let _ = write!(
            self.body,
            r##"<circle cx="{cx:.2}" cy="{cy:.2}" r="{r}" fill="{fill}" stroke="#fff" stroke-width="0.8" data-key="{}"><title>{}</title></circle>"##,
            esc(key),
            esc(title)
        );
    }

    /// A closed polygon.
    pub fn polygon(&mut self, points: &[(f64, f64)], fill: &str, opacity: f64) {
        let pts: Vec<String> = points.iter().map(|(x, y)| format!("{x:.2},{y:.2}")).collect();
        let _ = write!(
            self.body,
            r#"<polygon points="{}" fill="{fill}" fill-opacity="{opacity}"/>"#,
            pts.join(" ")
        );
    }

    /// Text; `anchor` is `start`, `middle` or `end`, `y` the baseline. The caller has made
    /// it fit (`Font::fit_end`, `Font::wrap`).
    pub fn text(&mut self, x: f64, y: f64, anchor: &str, font: &Font, s: &str) {
        self.titled_text(x, y, anchor, font, s, "");
    }

    /// Text shortened to fit, with the whole of it (`full`) shown on hover when that is
    /// longer.
    pub fn titled_text(&mut self, x: f64, y: f64, anchor: &str, font: &Font, s: &str, full: &str) {
        self.texts.push((text_box(x, y, anchor, font, s), s.to_owned()));
        let _ = write!(
            self.body,
            r#"<text x="{x:.2}" y="{y:.2}" text-anchor="{anchor}" class="{}">{}"#,
            font.class,
            esc(s)
        );
        if !full.is_empty() && full != s {
            let _ = write!(self.body, "<title>{}</title>", esc(full));
        }
        self.body.push_str("</text>");
    }

    /// Text that may be left out (a bar's value, a tick label where ticks are dense): written
    /// only when it is inside the picture and clear of every text already written. Returns
    /// whether it was.
    pub fn optional_text(&mut self, x: f64, y: f64, anchor: &str, font: &Font, s: &str) -> bool {
        // Clear of its neighbours by a space, so that two labels never read as one.
        let b = text_box(x, y, anchor, font, s);
        let gap = font.size * 0.3;
        let free = self.is_free(&b)
            && self.is_free(&Rect {
                x0: (b.x0 - gap).max(0.0),
                x1: (b.x1 + gap).min(self.width),
                ..b
            });
        if free {
            self.text(x, y, anchor, font, s);
        }
        free
    }

    /// A title of one or two lines from `x`, at most `max` wide, the whole of it on hover
    /// when shortened. Returns the y of the bottom of its last line.
    pub fn title(&mut self, x: f64, max: f64, title: &str) -> f64 {
        let lines = TITLE.wrap(title, max, 2);
        let mut y = 4.0;
        for line in &lines {
            y += TITLE.line();
            self.titled_text(x, y - TITLE.size * 0.24, "start", &TITLE, line, title);
        }
        y
    }

    /// Text turned 90 degrees counter-clockwise around (x, y) (a y-axis title), centred on y:
    /// shortened to `max` pixels, the whole of it on hover.
    pub fn vtext(&mut self, x: f64, y: f64, font: &Font, s: &str, max: f64) {
        let shown = font.fit_end(s, max);
        let w = font.width(&shown);
        // Turned, the glyphs' ascent lies left of x and the descent right of it.
        let b = Rect {
            x0: x - font.size * 0.93,
            y0: y - w / 2.0,
            x1: x + font.size * 0.24,
            y1: y + w / 2.0,
        };
        self.texts.push((b, shown.clone()));
        let _ = write!(
            self.body,
            r#"<text transform="translate({x:.2},{y:.2}) rotate(-90)" text-anchor="middle" class="{}">{}"#,
            font.class,
            esc(&shown)
        );
        if shown != s {
            let _ = write!(self.body, "<title>{}</title>", esc(s));
        }
        self.body.push_str("</text>");
    }

    /// The document, with an accessible label.
    pub fn finish(self, label: &str) -> String {
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{l}">{b}</svg>"#,
            w = self.width,
            h = self.height,
            l = esc(label),
            b = self.body
        )
    }
}

/// A linear scale from a domain to pixels.
#[derive(Debug, Clone, Copy)]
pub struct Linear {
    pub d0: f64,
    pub d1: f64,
    pub r0: f64,
    pub r1: f64,
}

impl Linear {
    pub fn at(&self, v: f64) -> f64 {
        if self.d1 == self.d0 {
            return self.r0;
        }
        self.r0 + (v - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)
    }
}

/// A logarithmic scale (base 10) from a positive domain to pixels.
#[derive(Debug, Clone, Copy)]
pub struct Log {
    pub d0: f64,
    pub d1: f64,
    pub r0: f64,
    pub r1: f64,
}

impl Log {
    pub fn at(&self, v: f64) -> f64 {
        let (a, b) = (self.d0.log10(), self.d1.log10());
        if a == b {
            return self.r0;
        }
        self.r0 + (v.max(self.d0).log10() - a) / (b - a) * (self.r1 - self.r0)
    }

    /// Ticks at 1, 2 and 5 times the powers of ten within the domain.
    pub fn ticks(&self) -> Vec<f64> {
        let mut out = Vec::new();
        let mut p = 10f64.powf(self.d0.log10().floor());
        while p <= self.d1 * 1.0001 {
            for m in [1.0, 2.0, 5.0] {
                let v = p * m;
                if v >= self.d0 * 0.9999 && v <= self.d1 * 1.0001 {
                    out.push(v);
                }
            }
            p *= 10.0;
        }
        out
    }
}

/// About `n` round tick values covering `[lo, hi]` (steps of 1, 2 or 5 times a power of
/// ten), and the domain they span.
pub fn nice_ticks(lo: f64, hi: f64, n: usize) -> (Vec<f64>, f64, f64) {
    let (lo, hi) = if hi <= lo { (lo, lo + 1.0) } else { (lo, hi) };
    let raw = (hi - lo) / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * mag).find(|s| *s >= raw).unwrap();
    let start = (lo / step).floor() * step;
    let end = (hi / step).ceil() * step;
    let mut ticks = Vec::new();
    let mut v = start;
    while v <= end + step * 1e-9 {
        ticks.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        v += step;
    }
    (ticks, start, end)
}

/// Seconds for people: `0.8 ms`, `12.3 ms`, `1.25 s`, `2 min 5 s`.
pub fn seconds(s: f64) -> String {
    if !s.is_finite() {
        return "-".into();
    }
    let a = s.abs();
    if a >= 120.0 {
        format!("{} min {:.0} s", (s / 60.0).trunc(), s % 60.0)
    } else if a >= 10.0 {
        format!("{s:.1} s")
    } else if a >= 1.0 {
        format!("{s:.2} s")
    } else if a >= 0.01 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

/// How much faster one time is than another, as people say it: `7.7x faster`,
/// `1.25x slower`, `as fast`; `subject_s` is the time the phrase is about.
pub fn gain(subject_s: f64, other_s: f64) -> String {
    if !(subject_s > 0.0 && other_s > 0.0) {
        return "-".into();
    }
    let (r, word) = if other_s >= subject_s {
        (other_s / subject_s, "faster")
    } else {
        (subject_s / other_s, "slower")
    };
    let r = if r >= 10.0 {
        format!("{r:.0}")
    } else if r >= 2.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    };
    if r == "1.00" {
        "as fast".into()
    } else {
        format!("{r}x {word}")
    }
}

/// Bytes for people, as every command shows them: `512 B`, `12.0 KiB`, `3.4 MiB`.
pub fn bytes(b: f64) -> String {
    coldstart_units::bytes_f(b)
}

/// The colour of a network strategy (the Okabe-Ito palette, readable with colour-blindness).
pub fn strategy_colour(s: &str) -> &'static str {
    match s {
        "original" => "#7a7a7a",
        "paged" => "#e69f00",
        "reordered-paged" => "#56b4e9",
        "reordered" => "#009e73",
        "stream" => "#cc79a7",
        "auto" => "#d55e00",
        _ => "#0072b2",
    }
}

/// Colours of the series of a chart whose series are not strategies (commands, files).
pub const SERIES: [&str; 6] = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00"];

/// Page map colours.
pub const PAGE_TOUCHED: &str = "#c0392b";
pub const PAGE_MAPPED: &str = "#f39c6b";
pub const PAGE_READ: &str = "#f6d58e";
pub const PAGE_UNTOUCHED: &str = "#dfe3e8";

/// The colour of a start-up phase.
pub fn phase_colour(name: &str) -> &'static str {
    match name {
        "exec" => "#8e6c8a",
        "loader" => "#4e79a7",
        "relocation" => "#f28e2b",
        "constructors" => "#59a14f",
        "main" => "#edc948",
        "ready" => "#76b7b2",
        _ => "#bab0ac",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let (t, lo, hi) = nice_ticks(0.0, 0.87, 5);
        assert_eq!(t, vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]);
        assert_eq!((lo, hi), (0.0, 1.0));
        let (t, lo, _) = nice_ticks(-43.0, 72.0, 5);
        assert!(lo <= -43.0 && t.contains(&0.0), "{t:?}");
        let l = Log { d0: 0.1, d1: 30.0, r0: 0.0, r1: 100.0 };
        assert_eq!(l.ticks(), vec![0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0]);
    }

    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(esc(r#"<a & "b">"#), "&lt;a &amp; &quot;b&quot;&gt;");
        let mut s = Svg::new(10.0, 10.0);
        s.text(0.0, 0.0, "start", &crate::text::LABEL, "</svg><script>");
        assert!(!s.finish("x").contains("<script>"));
    }

    #[test]
    fn units_read_as_people_write_them() {
        assert_eq!(seconds(0.0123), "12.3 ms");
        assert_eq!(seconds(1.234), "1.23 s");
        assert_eq!(seconds(154.9), "2 min 35 s");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(gain(0.1022, 0.787), "7.7x faster");
        assert_eq!(gain(0.1007, 0.0564), "1.79x slower");
        assert_eq!(gain(0.05, 0.0501), "as fast");
        assert_eq!(gain(0.01, 1.3), "130x faster");
    }
}
