//! `verify`: where the profiled functions ended up in a linked (or rewritten) binary.
//!
//! The order took effect when the placed functions sit in a span of pages close to the
//! ideal one (their bytes packed) and mostly in the order asked for. Functions the binary
//! no longer has by any name are reported as missing (inlined, renamed, removed), and
//! names that share one address as folded (identical code folding).
//!
//! The names expected come from an order file or from a profile ([`expected_names`]); one
//! order file may serve every link of a build, so a binary is checked against the names it
//! defines ([`split_defined`]).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Serialize;

use crate::binary::Binary;
use crate::input::Workload;
use crate::model::PageModel;
use crate::LayoutError;

/// Where the expected order of functions comes from.
#[derive(Debug, Clone, Copy)]
pub enum Expected<'a> {
    /// An order file in any format coldstart writes.
    OrderFile(&'a Path),
    /// The first-touch order of a profile's module: `module` (a path or a file name), else
    /// the one named like the binary.
    Profile {
        /// The profile.
        path: &'a Path,
        /// The module (a path or a file name).
        module: Option<&'a str>,
    },
}

/// The function names expected in `binary`, in order.
pub fn expected_names(from: Expected<'_>, binary: &Path) -> Result<Vec<String>, LayoutError> {
    match from {
        Expected::OrderFile(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| LayoutError::io("read order file", path, e))?;
            if text.is_empty() {
                return Err(LayoutError::io(
                    "read order file",
                    path,
                    std::io::Error::other("empty"),
                ));
            }
            Ok(parse_order_file_for(&text, binary))
        }
        Expected::Profile { path, module } => {
            let workloads = Workload::read_profile(path)?;
            let w = workloads.first().ok_or_else(|| {
                LayoutError::Invalid(format!("{} has no workload", path.display()))
            })?;
            let m = w.module(Some(binary), module)?;
            Ok(m.functions.iter().map(|t| t.name().to_owned()).collect())
        }
    }
}

/// Split `names` into those `binary` defines (by any of a function's names) and the others
/// (other modules of the build, or inlined), each in the given order.
pub fn split_defined(binary: &Binary, names: Vec<String>) -> (Vec<String>, Vec<String>) {
    let defined: HashSet<&str> =
        binary.functions.iter().flat_map(|f| f.names.iter().map(String::as_str)).collect();
    names.into_iter().partition(|n| defined.contains(n.as_str()))
}

/// What verification found.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    /// Names expected.
    pub expected: usize,
    /// Of those, names the binary defines.
    pub placed: usize,
    /// Names the binary does not define.
    pub missing: Vec<String>,
    /// Groups of expected names placed at one address (folded together).
    pub folded: Vec<Vec<String>>,
    /// Pages from the first to the last page holding a placed function.
    pub span_pages: u64,
    /// Pages the placed functions would need packed together.
    pub ideal_pages: u64,
    /// Adjacent pairs of placed functions (in the expected order) at rising addresses.
    pub in_order_pairs: usize,
    /// Adjacent pairs of placed functions.
    pub pairs: usize,
    /// Whether the order took effect.
    pub took_effect: bool,
    /// Why not, when it did not.
    pub reason: Option<String>,
}

/// Check `expected` (function names in the order asked for) against `binary`.
pub fn verify(binary: &Binary, expected: &[String], model: PageModel) -> Verification {
    let mut by_name: HashMap<&str, (u64, u64)> = HashMap::new();
    for f in &binary.functions {
        for n in &f.names {
            by_name.insert(n.as_str(), (f.offset, f.size));
        }
    }
    let mut missing = Vec::new();
    let mut placed: Vec<(u64, u64)> = Vec::new();
    let mut at: HashMap<u64, Vec<String>> = HashMap::new();
    for name in expected {
        match by_name.get(name.as_str()) {
            Some(&(off, size)) => {
                let names = at.entry(off).or_default();
                if names.is_empty() {
                    placed.push((off, size));
                }
                names.push(name.clone());
            }
            None => missing.push(name.clone()),
        }
    }
    let mut folded: Vec<Vec<String>> = at.into_values().filter(|v| v.len() > 1).collect();
    folded.sort();
    let bytes: u64 = placed.iter().map(|p| p.1).sum();
    let ideal_pages = bytes.div_ceil(model.page_size).max(u64::from(!placed.is_empty()));
    let span_pages =
        match (placed.iter().map(|p| p.0).min(), placed.iter().map(|p| p.0 + p.1.max(1)).max()) {
            (Some(lo), Some(hi)) => (hi - 1) / model.page_size - lo / model.page_size + 1,
            _ => 0,
        };
    let pairs = placed.len().saturating_sub(1);
    let in_order_pairs = placed.windows(2).filter(|w| w[0].0 < w[1].0).count();
    // Slack: alignment padding and a page boundary at each end.
    let allowed = ideal_pages + ideal_pages / 4 + 1;
    let ordered_share = if pairs == 0 { 1.0 } else { in_order_pairs as f64 / pairs as f64 };
    let reason = if placed.is_empty() {
        Some(
            "none of the expected functions is in the binary: wrong binary, or stripped".to_owned(),
        )
    } else if span_pages > allowed {
        Some(format!(
            "the {} placed functions span {span_pages} pages where {ideal_pages} would hold them: the order was not applied (was the order file passed to lld, and the code built with -ffunction-sections?)",
            placed.len()
        ))
    } else if ordered_share < 0.9 {
        Some(format!(
            "only {in_order_pairs} of {pairs} neighbouring functions are in the order asked for"
        ))
    } else {
        None
    };
    Verification {
        expected: expected.len(),
        placed: placed.len(),
        missing,
        folded,
        span_pages,
        ideal_pages,
        in_order_pairs,
        pairs,
        took_effect: reason.is_none(),
        reason,
    }
}

/// Whether an order file marks each module's names (`# module PATH`, coldstart's lld files).
pub fn has_module_sections(text: &str) -> bool {
    text.lines().any(|l| l.starts_with(crate::writers::MODULE_MARKER))
}

/// The names of an order file for `binary`: the names of the module sections named like it
/// (by file name) when the file has module sections, else every name.
pub fn parse_order_file_for(text: &str, binary: &Path) -> Vec<String> {
    if !has_module_sections(text) {
        return parse_order_file(text);
    }
    let wanted = binary.file_name();
    let mut mine = String::new();
    let mut keep = false;
    for line in text.lines() {
        if line.trim() == crate::writers::DATA_MARKER {
            keep = true;
        } else if let Some(rest) = line.strip_prefix(crate::writers::MODULE_MARKER) {
            let path = rest.rsplit_once(" (").map_or(rest, |(p, _)| p);
            keep = Path::new(path).file_name() == wanted;
            continue;
        }
        if keep {
            mine.push_str(line);
            mine.push('\n');
        }
    }
    parse_order_file(&mine)
}

/// Read the names of an order file in any of coldstart's formats (lld/BOLT lines, gold
/// `.text.NAME` lines, GNU ld `*(.text.NAME ...)` lines, ld64 `_NAME`).
pub fn parse_order_file(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut in_text_block = false;
    for line in text.lines() {
        let line = line.trim();
        if line == crate::writers::DATA_MARKER {
            break;
        }
        if line.ends_with('{') {
            in_text_block = line.starts_with(".text");
            continue;
        }
        if line.starts_with("*(") && !in_text_block {
            continue;
        }
        if line.starts_with('.') && !line.starts_with(".text.") {
            continue;
        }
        if line.is_empty()
            || line.starts_with('#')
            || line.starts_with("/*")
            || line.ends_with('{')
            || line == "}"
        {
            continue;
        }
        let name = if let Some(rest) = line.strip_prefix("*(") {
            rest.split_whitespace()
                .next()
                .unwrap_or("")
                .trim_end_matches(')')
                .trim_start_matches(".text.")
                .to_owned()
        } else if let Some(rest) = line.strip_prefix(".text.") {
            if rest.starts_with("*.") {
                continue;
            }
            rest.to_owned()
        } else {
            line.to_owned()
        };
        if !name.is_empty() && seen.insert(name.clone()) {
            out.push(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_names_come_from_an_order_file_and_a_binary_keeps_the_names_it_defines() {
        let dir = tempfile::tempdir().unwrap();
        let order = dir.path().join("order.txt");
        std::fs::write(&order, "# c\nmain\nsurely_not_a_function_of_this_test\n").unwrap();
        let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
        let names = expected_names(Expected::OrderFile(&order), &exe).unwrap();
        assert_eq!(names, ["main", "surely_not_a_function_of_this_test"]);
        let binary = Binary::open(&exe).unwrap();
        let (mine, other) = split_defined(&binary, names);
        assert_eq!(mine, ["main"]);
        assert_eq!(other, ["surely_not_a_function_of_this_test"]);
        let err = expected_names(Expected::OrderFile(&dir.path().join("absent")), &exe)
            .unwrap_err()
            .to_string();
        assert!(err.contains("order file") && err.contains("absent does not exist"), "{err}");
        let err = expected_names(Expected::OrderFile(dir.path()), &exe).unwrap_err().to_string();
        assert!(err.contains("is a directory: give the file `coldstart order"), "{err}");
    }

    #[test]
    fn order_files_of_every_writer_parse_back_to_names() {
        assert_eq!(parse_order_file("# c\nmain\nfoo\n"), ["main", "foo"]);
        assert_eq!(parse_order_file(".text.main\n.text.*.main\n.text.foo\n"), ["main", "foo"]);
        assert_eq!(
            parse_order_file("/* c */\n.text : {\n  *(.text.main .text.*.main)\n}\n"),
            ["main"]
        );
    }
}
