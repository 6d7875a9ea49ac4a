//! How wide a chart's text will be, decided before the browser lays it out: a chart leaves
//! room for its tick labels, wraps its title, and shortens a track label to its margin, so
//! that nothing is cut off or drawn over anything else.
//!
//! The page names no font, so the width is an estimate: the advance widths of DejaVu Sans
//! (the fallback sans-serif of Debian and most Linux desktops, and wider than the system
//! fonts of macOS and Windows), plus a margin. Any character outside ASCII counts a full em.

/// A text style of the charts: its class in the stylesheet, size in pixels, weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Font {
    pub class: &'static str,
    pub size: f64,
    pub bold: bool,
    /// The CSS of the class beyond size and weight.
    pub fill: &'static str,
}

/// Chart titles.
pub const TITLE: Font = Font { class: "ttl", size: 13.0, bold: true, fill: "#1d2430" };
/// Axis titles and track labels.
pub const LABEL: Font = Font { class: "lbl", size: 11.5, bold: false, fill: "#374151" };
/// Tick labels and group names along an axis.
pub const TICK: Font = Font { class: "tick", size: 10.5, bold: false, fill: "#6b7480" };
/// Values written above bars.
pub const VALUE: Font = Font { class: "val", size: 10.0, bold: false, fill: "#1d2430" };
/// Names written inside a bar.
pub const INBAR: Font = Font { class: "inbar", size: 10.5, bold: true, fill: "#fff" };

/// Every chart font, for the stylesheet.
pub const FONTS: [Font; 5] = [TITLE, LABEL, TICK, VALUE, INBAR];

/// The margin on the estimate: another font's widths, hinting, rounding.
const MARGIN: f64 = 1.06;

/// Advance widths of DejaVu Sans, ASCII 32 to 126, in thousandths of an em.
const REGULAR: [u16; 95] = widths(include_str!("fonts/dejavu-sans.txt"));

/// Advance widths of DejaVu Sans Bold, ASCII 32 to 126, in thousandths of an em.
const BOLD: [u16; 95] = widths(include_str!("fonts/dejavu-sans-bold.txt"));

/// The 95 numbers of a width table (`fonts/*.txt`: lines starting with `#` are comments),
/// read when the crate compiles: a table with more or fewer numbers does not compile.
const fn widths(text: &str) -> [u16; 95] {
    let b = text.as_bytes();
    let mut out = [0u16; 95];
    let (mut i, mut n, mut value, mut in_number, mut in_comment) = (0, 0, 0u16, false, false);
    while i <= b.len() {
        let c = if i < b.len() { b[i] } else { b'\n' };
        if c == b'#' {
            in_comment = true;
        } else if c == b'\n' {
            in_comment = false;
        }
        if !in_comment && c.is_ascii_digit() {
            value = value * 10 + (c - b'0') as u16;
            in_number = true;
        } else if in_number {
            assert!(n < 95, "a width table has more than 95 numbers");
            out[n] = value;
            n += 1;
            value = 0;
            in_number = false;
        }
        i += 1;
    }
    assert!(n == 95, "a width table has fewer than 95 numbers");
    out
}

/// The ellipsis a shortened text ends (or starts) with.
pub const ELLIPSIS: char = '\u{2026}';

impl Font {
    /// The width of `s` in pixels, never less than a browser draws it with DejaVu Sans.
    pub fn width(&self, s: &str) -> f64 {
        let table = if self.bold { &BOLD } else { &REGULAR };
        let em: u32 = s
            .chars()
            .map(|c| match c as u32 {
                32..=126 => u32::from(table[c as usize - 32]),
                _ => 1000,
            })
            .sum();
        em as f64 / 1000.0 * self.size * MARGIN
    }

    /// The height of a line of it (the font's ascent plus descent).
    pub fn line(&self) -> f64 {
        self.size * 1.17
    }

    /// `s`, or as much of its start as fits in `max` pixels followed by an ellipsis.
    pub fn fit_end(&self, s: &str, max: f64) -> String {
        if self.width(s) <= max {
            return s.to_owned();
        }
        let chars: Vec<char> = s.chars().collect();
        let mut n = chars.len();
        while n > 0 {
            let t: String = chars[..n].iter().collect::<String>().trim_end().to_owned();
            let t = format!("{t}{ELLIPSIS}");
            if self.width(&t) <= max {
                return t;
            }
            n -= 1;
        }
        String::new()
    }

    /// `s`, or an ellipsis followed by as much of its end as fits in `max` pixels (a path,
    /// whose file name is at its end).
    pub fn fit_start(&self, s: &str, max: f64) -> String {
        if self.width(s) <= max {
            return s.to_owned();
        }
        let chars: Vec<char> = s.chars().collect();
        let mut from = 0;
        while from < chars.len() {
            let t = format!("{ELLIPSIS}{}", chars[from..].iter().collect::<String>());
            if self.width(&t) <= max {
                return t;
            }
            from += 1;
        }
        String::new()
    }

    /// `s` broken at spaces into at most `lines` lines of at most `max` pixels each; the
    /// last line ends with an ellipsis when the rest does not fit.
    pub fn wrap(&self, s: &str, max: f64, lines: usize) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut current = String::new();
        let words: Vec<&str> = s.split(' ').collect();
        for (i, w) in words.iter().enumerate() {
            let candidate =
                if current.is_empty() { w.to_string() } else { format!("{current} {w}") };
            if self.width(&candidate) <= max || current.is_empty() {
                current = candidate;
                continue;
            }
            if out.len() + 1 == lines {
                let rest = format!("{current} {}", words[i..].join(" "));
                out.push(self.fit_end(&rest, max));
                return out;
            }
            out.push(std::mem::replace(&mut current, w.to_string()));
        }
        if !current.is_empty() {
            out.push(current);
        }
        if let Some(last) = out.last_mut() {
            *last = self.fit_end(last, max);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_width_tables_read_from_their_files_line_up_with_ascii() {
        assert_eq!((REGULAR[0], REGULAR[usize::from(b'W' - 32)], REGULAR[94]), (318, 989, 838));
        assert_eq!((BOLD[0], BOLD[usize::from(b'W' - 32)], BOLD[94]), (348, 1103, 838));
    }

    /// Widths Chromium gave these texts on this machine (getBoundingClientRect): the estimate
    /// is never below them, and not far above.
    #[test]
    fn widths_are_never_below_what_a_browser_draws() {
        for (font, s, drawn) in [
            (TITLE, "bytes fetched (bars) and requests (numbers), medians over the links", 508.0),
            (TICK, "400.0 ms", 49.0),
            (LABEL, "dev/vda (file system metadata)", 181.0),
            (LABEL, "...cpython-311-x86_64-linux-gnu.so", 204.0),
        ] {
            let w = font.width(s);
            assert!(w >= drawn && w <= drawn * 1.12, "{s}: estimated {w}, drawn {drawn}");
        }
    }

    #[test]
    fn text_is_shortened_to_fit_and_wrapped_at_spaces() {
        let s = "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so";
        let short = LABEL.fit_start(s, 150.0);
        assert!(short.starts_with(ELLIPSIS) && short.ends_with("linux-gnu.so"), "{short}");
        assert!(LABEL.width(&short) <= 150.0);
        let short = LABEL.fit_end(s, 150.0);
        assert!(short.starts_with("/usr/lib") && short.ends_with(ELLIPSIS), "{short}");
        assert_eq!(LABEL.fit_end("short", 150.0), "short");

        let title = "(a) start-up, median and 95% CI, the program's files on an emulated hdd";
        let lines = TITLE.wrap(title, 300.0, 2);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines.iter().all(|l| TITLE.width(l) <= 300.0), "{lines:?}");
        assert_eq!(lines.join(" "), title, "nothing lost when two lines hold it");
        let lines = TITLE.wrap(title, 150.0, 2);
        assert!(lines[1].ends_with(ELLIPSIS), "{lines:?}");
        assert_eq!(TITLE.wrap("1 Mbit/s", 300.0, 2), vec!["1 Mbit/s"]);
    }
}
