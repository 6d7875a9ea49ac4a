//! The page: one HTML file with its style and script inline and no external resource, so it
//! opens anywhere (a CI artifact, an e-mail attachment, a machine without a network) and
//! shows the same thing.
//!
//! The charts are SVG in the page and need no script; the script only adds what a reader
//! may want on top: hovering a legend entry picks out its series in every chart of the
//! section, a table's header sorts it, and a script error shows as a red line at the top
//! instead of failing silently.

use crate::svg::esc;
use crate::text::FONTS;
use crate::{Options, Section};

const STYLE: &str = r#"
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; margin: 0; color: #1d2430; background: #fafbfc; font-size: 14px; line-height: 1.45; }
header { background: #1d2430; color: #fff; padding: 18px 28px 12px; }
header h1 { margin: 0 0 4px; font-size: 22px; font-weight: 600; }
header p { margin: 0; color: #c8d0dc; }
header nav a { color: #9ecbff; margin-right: 16px; text-decoration: none; }
main { padding: 8px 28px 28px; max-width: 1240px; }
section { background: #fff; border: 1px solid #e3e7ed; border-radius: 6px; padding: 6px 18px 14px; margin: 16px 0; }
h2 { font-size: 18px; margin: 12px 0 6px; }
h3 { font-size: 15px; margin: 16px 0 4px; }
h3 small { color: #6b7480; font-weight: normal; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; background: #f1f3f6; padding: 0 3px; border-radius: 3px; }
.highlights { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0 0; }
.card { background: #fff; border: 1px solid #e3e7ed; border-left: 4px solid #0072b2; border-radius: 6px; padding: 8px 14px; min-width: 180px; max-width: 280px; }
.card b { display: block; font-size: 24px; font-weight: 600; }
.card span { color: #4b5563; font-size: 12.5px; overflow-wrap: anywhere; }
.row { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; margin: 6px 0; }
svg.chart { background: #fff; overflow: visible; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 16px; margin: 6px 0; }
.legend .key { cursor: default; font-size: 12.5px; overflow-wrap: anywhere; }
.legend i, i.sw { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 5px; vertical-align: -1px; }
section.focus [data-key]:not(.on) { opacity: 0.15; }
.maps { display: flex; flex-wrap: wrap; gap: 10px 20px; }
figure.map { margin: 4px 0; }
figcaption { font-size: 12.5px; color: #374151; max-width: 480px; }
.path { color: #6b7480; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 11.5px; word-break: break-all; }
details { margin: 8px 0; }
summary { cursor: pointer; color: #0b5cab; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12.5px; margin: 6px 0; }
th, td { border-bottom: 1px solid #e8ebf0; padding: 3px 9px; text-align: left; vertical-align: top; }
th { background: #f4f6f9; font-weight: 600; }
table.sortable th { cursor: pointer; }
table.compact td:not(:first-child) { text-align: right; }
.notes { color: #6b4e00; }
.note { color: #4b5563; font-size: 12.5px; }
#script-errors { background: #b00020; color: #fff; padding: 8px 28px; font-weight: 600; }
footer { color: #6b7480; font-size: 12px; padding: 0 28px 24px; }
"#;

/// Installed first, so that an error in any later script is shown.
const ERRORS: &str = r#"
window.addEventListener('error', function (e) {
  var b = document.getElementById('script-errors');
  if (!b) { b = document.createElement('div'); b.id = 'script-errors'; document.body.insertBefore(b, document.body.firstChild); }
  b.textContent = 'A script of this report failed: ' + e.message + ' (line ' + e.lineno + ')';
});
"#;

const SCRIPT: &str = r#"
(function () {
  document.querySelectorAll('.legend .key').forEach(function (k) {
    var section = k.closest('section');
    k.addEventListener('mouseenter', function () {
      section.classList.add('focus');
      section.querySelectorAll('[data-key]').forEach(function (el) {
        if (el.getAttribute('data-key') === k.getAttribute('data-key')) el.classList.add('on');
      });
    });
    k.addEventListener('mouseleave', function () {
      section.classList.remove('focus');
      section.querySelectorAll('.on').forEach(function (el) { el.classList.remove('on'); });
    });
  });
  document.querySelectorAll('table.sortable').forEach(function (t) {
    t.querySelectorAll('th').forEach(function (th, col) {
      th.addEventListener('click', function () {
        var body = t.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var up = th.getAttribute('data-up') !== '1';
        th.setAttribute('data-up', up ? '1' : '0');
        rows.sort(function (a, b) {
          var x = a.cells[col].textContent, y = b.cells[col].textContent;
          var nx = parseFloat(x), ny = parseFloat(y);
          var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
          return up ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.documentElement.setAttribute('data-ready', '1');
})();
"#;

/// The style of the charts' text, from the fonts the charts measure their text with.
fn chart_fonts() -> String {
    FONTS
        .iter()
        .map(|f| {
            format!(
                "svg .{} {{ font-size: {}px; font-weight: {}; fill: {}; }}\n",
                f.class,
                f.size,
                if f.bold { 700 } else { 400 },
                f.fill
            )
        })
        .collect()
}

/// Notes under a section's figures (warnings, what could not be drawn), as a list.
pub fn notes(items: &[String]) -> String {
    format!(
        r#"<ul class="notes">{}</ul>"#,
        items.iter().map(|n| format!("<li>{}</li>", esc(n))).collect::<String>()
    )
}

/// A Unix time as an ISO 8601 date and time in UTC: `2026-11-27T14:31:06Z`.
pub fn iso8601(secs: u64) -> String {
    let (y, m, d, h, min, s) = coldstart_units::utc_from_unix(secs);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}Z")
}

/// The whole page.
pub fn page(
    options: &Options,
    highlights: &[(String, String)],
    sections: &[Section],
    footer: &str,
) -> String {
    let title = &options.title;
    let mut out = String::with_capacity(1 << 16);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    out.push_str(&format!(
        "<title>{}</title><style>{STYLE}{}</style></head><body>",
        esc(title),
        chart_fonts()
    ));
    out.push_str(&format!("<script>{ERRORS}</script>"));
    let mut sub = esc(&options.subtitle);
    if let Some(t) = options.made_unix {
        let date = iso8601(t);
        if !sub.is_empty() {
            sub.push_str("; ");
        }
        sub.push_str(&format!(r#"made <time datetime="{date}">{date}</time>"#));
    }
    out.push_str(&format!("<header><h1>{}</h1><p>{sub}</p><nav>", esc(title)));
    for s in sections {
        out.push_str(&format!(r##"<a href="#{}">{}</a>"##, esc(&s.id), esc(nav_name(&s.title))));
    }
    out.push_str("</nav></header><main>");
    if !highlights.is_empty() {
        out.push_str(r#"<div class="highlights">"#);
        for (value, caption) in highlights {
            out.push_str(&format!(
                r#"<div class="card"><b>{}</b><span>{}</span></div>"#,
                esc(value),
                esc(caption)
            ));
        }
        out.push_str("</div>");
    }
    for s in sections {
        out.push_str(&format!(
            r#"<section id="{}"><h2>{}</h2>{}</section>"#,
            esc(&s.id),
            esc(&s.title),
            s.html
        ));
    }
    out.push_str(&format!(
        "</main><footer>{footer}</footer><script>{SCRIPT}</script></body></html>\n"
    ));
    out
}

/// A section's name for the navigation bar: its title up to the first parenthesis or colon.
fn nav_name(title: &str) -> &str {
    title.split([':', '(']).next().unwrap_or(title).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_fetches_nothing() {
        let s = Section {
            id: "x".into(),
            title: "X (y)".into(),
            html: "<p>hi</p>".into(),
            tables: Vec::new(),
        };
        let options =
            Options { title: "t".into(), subtitle: "sub".into(), made_unix: Some(1_795_836_666) };
        let p = page(&options, &[("1".into(), "one".into())], &[s], "");
        for external in ["http://", "https://", " src=", "@import", "url("] {
            let found = p.replace("http://www.w3.org/2000/svg", "");
            assert!(!found.contains(external), "the page refers to {external}");
        }
        assert!(p.contains(r##"<a href="#x">X</a>"##));
        assert!(p.contains(r#"sub; made <time datetime="2026-11-28T03:31:06Z">"#), "{p}");
    }
}
