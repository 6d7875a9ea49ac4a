//! A table of the figures a chart draws: rendered as HTML under the chart and written as CSV
//! beside the report, so the same numbers can be read, sorted and taken elsewhere.

use crate::svg::esc;

/// Rows of strings under a header.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Part of the CSV file's name (`REPORT-NAME.csv`): lower case, `-` between words.
    pub name: String,
    /// The column names.
    pub header: Vec<String>,
    /// The rows, each as long as the header.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table named `name` with these columns.
    pub fn new(name: &str, header: &[&str]) -> Table {
        Table {
            name: name.into(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Add a row (as long as the header).
    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.header.len(), "a row of {}", self.name);
        self.rows.push(row);
    }

    /// RFC 4180 CSV: fields with a comma, quote or line break are quoted.
    pub fn csv(&self) -> String {
        let field = |f: &str| {
            if f.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", f.replace('"', "\"\""))
            } else {
                f.to_owned()
            }
        };
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let fields: Vec<String> = row.iter().map(|f| field(f)).collect();
            out.push_str(&fields.join(","));
            out.push_str("\r\n");
        }
        out
    }

    /// A sortable HTML table (the page's script sorts on a header click), inside a
    /// `<details>` so long tables stay folded until asked for.
    pub fn html(&self, summary: &str, open: bool) -> String {
        let mut out = format!(
            r#"<details{}><summary>{}</summary><div class="scroll"><table class="sortable"><thead><tr>"#,
            if open { " open" } else { "" },
            esc(summary)
        );
        for h in &self.header {
            out.push_str(&format!("<th>{}</th>", esc(h)));
        }
        out.push_str("</tr></thead><tbody>");
        for row in &self.rows {
            out.push_str("<tr>");
            for f in row {
                out.push_str(&format!("<td>{}</td>", esc(f)));
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table></div></details>");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_only_what_needs_it() {
        let mut t = Table::new("x", &["a", "b"]);
        t.push(vec!["plain".into(), "with, comma".into()]);
        t.push(vec!["say \"hi\"".into(), "".into()]);
        assert_eq!(t.csv(), "a,b\r\nplain,\"with, comma\"\r\n\"say \"\"hi\"\"\",\r\n");
    }
}
