//! `analyze`: whether a binary's layout costs its start-up, in the form of the paper's
//! Tables 2 and 3 (code pages in total, pages start-up touches and their share, the
//! utilisation of touched pages, used against unused code bytes, and the pages and faults
//! an ideal layout would need), plus a per-section breakdown of the pages start-up reads
//! where the profile has page data. Without a profile: the static picture and what is
//! missing to optimise the binary.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::binary::{Binary, SectionClass};
use crate::input::Workload;
use crate::model::{simulate, Cost, PageModel, Placement};
use crate::LayoutError;

/// The static facts of a binary.
#[derive(Debug, Clone, Serialize)]
pub struct StaticPicture {
    /// The binary.
    pub path: String,
    /// File size in bytes.
    pub file_bytes: u64,
    /// Whether it is position independent (`ET_DYN`).
    pub position_independent: bool,
    /// Bytes of executable sections.
    pub code_bytes: u64,
    /// Pages those sections span.
    pub code_pages: u64,
    /// Functions the symbols define.
    pub functions: usize,
    /// Where the symbols came from (`.symtab`, `.dynsym`, a debug file, none).
    pub symbols: String,
    /// `yes`, `likely (...)` or `unknown (...)`.
    pub function_sections: String,
    /// Static relocations kept (`--emit-relocs`): BOLT can rewrite the binary.
    pub relocations_kept: bool,
    /// Size of `.rela.dyn` in bytes.
    pub rela_dyn_bytes: u64,
    /// Entries of `.rela.dyn`.
    pub rela_dyn_entries: u64,
    /// Of those entries, the relative ones (packable with DT_RELR).
    pub rela_dyn_relative: u64,
    /// `.relr.dyn` present (`-z pack-relative-relocs`).
    pub relr: bool,
    /// GNU build-id, hex.
    pub build_id: Option<String>,
    /// What is missing to optimise the layout, each with what to do.
    pub missing: Vec<String>,
}

/// Tables 2 and 3 of the paper for one binary and one start-up.
#[derive(Debug, Clone, Serialize)]
pub struct Utilization {
    /// The profile's workload.
    pub workload: String,
    /// Code pages of the binary.
    pub code_pages_total: u64,
    /// Of those, pages start-up touched.
    pub code_pages_touched: u64,
    /// Touched share of all code pages.
    pub touched_share: f64,
    /// Used bytes of touched pages over the bytes of those pages.
    pub utilization: f64,
    /// Bytes of the touched functions.
    pub used_code_bytes: u64,
    /// Bytes of touched pages that no touched function holds.
    pub unused_code_bytes: u64,
    /// Bytes of the file that are not code (data, relocations, symbols, headers): Table 2's
    /// "Data" column.
    pub non_code_bytes: u64,
    /// Functions start-up touched.
    pub touched_functions: usize,
    /// Touched functions the binary does not define (different build, or no symbols).
    pub unknown_functions: usize,
    /// Start-up as laid out now.
    pub current: Cost,
    /// Start-up with the touched functions packed in first-touch order.
    pub ideal: Cost,
}

/// One row of the per-section breakdown.
#[derive(Debug, Clone, Serialize)]
pub struct SectionRow {
    /// The kind of section.
    pub class: SectionClass,
    /// Pages its sections span in the file.
    pub pages_in_file: u64,
    /// Pages start-up faulted on.
    pub pages_faulted: u64,
    /// Pages in memory for start-up (faulted, mapped around a fault, or read ahead).
    pub pages_read: u64,
    /// Pages the remedy is predicted to save.
    pub predicted_saving: u64,
    /// What would save those pages.
    pub remedy: String,
}

/// The whole analysis.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// The page model the costs were computed under.
    pub model: PageModel,
    #[serde(rename = "static")]
    /// The binary's static facts.
    pub static_picture: StaticPicture,
    /// Tables 2 and 3, when the profile touched the binary.
    pub utilization: Option<Utilization>,
    /// Present when the profile has page data for the binary.
    pub sections: Vec<SectionRow>,
    /// The same pages split by what a linker order can move; with the page data.
    pub movable: Option<Movable>,
    /// Warnings that name a remedy.
    pub warnings: Vec<String>,
}

/// The file pages start-up had in memory, split by what a linker's order can move: code, and
/// data objects with a symbol (`-fdata-sections` gives each its section, which lld orders by
/// name). Unnamed constants (Rust's anonymous constants and `include_bytes!` blobs, string
/// literals merged into `.rodata.str*`), relocations, unwind tables, headers and symbol tables
/// stay where they are whatever the order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Movable {
    /// Pages of executable sections.
    pub code: u64,
    /// Other pages holding at least one byte of a named data object (`.rodata*`,
    /// `.data.rel.ro*`, `.data*`).
    pub named_data: u64,
    /// The rest.
    pub fixed: u64,
}

impl Movable {
    /// Pages an order can move: code and named data.
    pub fn movable(&self) -> u64 {
        self.code + self.named_data
    }
}

/// Analyse `binary`, with the start-up of `workload` if given.
pub fn analyze(
    binary: &Binary,
    workload: Option<&Workload>,
    module: Option<&str>,
    model: PageModel,
) -> Result<Analysis, LayoutError> {
    let static_picture = static_picture(binary, model);
    let mut warnings = Vec::new();
    let mut utilization = None;
    let mut sections = Vec::new();
    let mut movable = None;
    if let Some(w) = workload {
        let m = w.module(Some(&binary.info.path), module)?;
        if let (Some(want), Some(have)) = (&m.build_id, &static_picture.build_id) {
            if want != have {
                warnings.push(format!(
                    "the profile was recorded for build-id {want}, {} has {have}: figures use symbol names and may be off; re-run `coldstart profile` on this build",
                    binary.info.path.display()
                ));
            }
        }
        let u = table3(
            binary,
            w,
            &m.functions.iter().map(|t| t.names.clone()).collect::<Vec<_>>(),
            model,
        );
        if u.unknown_functions > 0 {
            warnings.push(format!(
                "{} touched functions are not in {} (another build, or stripped symbols)",
                u.unknown_functions,
                binary.info.path.display()
            ));
        }
        if let Some(pages) = w.pages_of(&binary.info.path) {
            sections = breakdown(binary, pages, &u, &static_picture, model);
            movable = Some(movable_split(binary, &pages.pages)?);
            if !matches!(binary.info.symbol_source, coldstart_elf::SymbolSource::Symtab) {
                warnings.push(format!(
                    "named data objects are counted from {}'s .symtab, which it does not have (symbols from {}): what an order can move is a lower bound; a relink from source names every object",
                    binary.info.path.display(),
                    binary.info.symbol_source
                ));
            }
        }
        utilization = Some(u);
    }
    Ok(Analysis { model, static_picture, utilization, sections, movable, warnings })
}

/// Split `pages` (4 KiB file pages) into code, named data and the rest.
fn movable_split(binary: &Binary, pages: &[u64]) -> Result<Movable, LayoutError> {
    const FILE_PAGE: u64 = 4096;
    let code: Vec<(u64, u64)> = binary
        .loaded_sections()
        .into_iter()
        .filter(|(_, class, _, _)| *class == SectionClass::Code)
        .map(|(_, _, off, size)| (off, off + size))
        .collect();
    let mut named: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for d in crate::data::data_symbols(&binary.info.path)? {
        named.extend(d.offset / FILE_PAGE..(d.offset + d.size).div_ceil(FILE_PAGE));
    }
    let mut m = Movable::default();
    for &p in pages {
        let (a, b) = (p * FILE_PAGE, (p + 1) * FILE_PAGE);
        if code.iter().any(|&(lo, hi)| lo < b && a < hi) {
            m.code += 1;
        } else if named.contains(&p) {
            m.named_data += 1;
        } else {
            m.fixed += 1;
        }
    }
    Ok(m)
}

fn static_picture(binary: &Binary, model: PageModel) -> StaticPicture {
    let info = &binary.info;
    let rust = info.functions.iter().any(|f| f.names.iter().any(|n| is_rust_symbol(n)));
    let function_sections = if info.functions.iter().any(|f| f.own_section) {
        "yes".to_owned()
    } else if let Some(n) =
        crate::binary::cross_section_code_relocations(&info.path).filter(|n| *n >= 8)
    {
        format!("likely ({n} relocations from code to code sections kept by --emit-relocs: calls between sections)")
    } else if rust {
        "likely (Rust code: rustc puts each function in its own section by default)".to_owned()
    } else {
        "unknown (a linked binary merges .text.* sections; build with -ffunction-sections to be sure)".to_owned()
    };
    let (entries, relative) = binary.rela_dyn_counts().unwrap_or((0, 0));
    let rela_dyn_bytes = info.section(".rela.dyn").map_or(0, |s| s.size);
    let relr = info.section(".relr.dyn").is_some();
    let mut missing = Vec::new();
    match info.symbol_source {
        coldstart_elf::SymbolSource::None => missing.push(
            "no function symbols: the profiler cannot name functions; rebuild without stripping or install the debug file"
                .to_owned(),
        ),
        coldstart_elf::SymbolSource::Dynsym => missing.push(
            "only exported symbols (.dynsym): static functions cannot be profiled or ordered; keep .symtab or install the debug file"
                .to_owned(),
        ),
        _ => {}
    }
    if function_sections.starts_with("unknown") {
        missing.push("function sections unknown: relink from source with `coldstart link` (it adds -ffunction-sections)".to_owned());
    }
    if !info.has_emitted_relocations {
        missing.push("no static relocations kept: `coldstart bolt` cannot rewrite this binary; link with -Wl,--emit-relocs or relink with `coldstart link`".to_owned());
    }
    if relative > 0 && !relr && rela_dyn_bytes >= 4096 {
        missing.push(format!(
            "{relative} relative relocations in .rela.dyn ({} KiB) are read whole at every start: link with -z pack-relative-relocs (DT_RELR)",
            rela_dyn_bytes / 1024
        ));
    }
    StaticPicture {
        path: info.path.display().to_string(),
        file_bytes: info.size,
        position_independent: info.position_independent,
        code_bytes: binary.code_bytes(),
        code_pages: static_code_pages(binary, model),
        functions: info.functions.len(),
        symbols: info.symbol_source.to_string(),
        function_sections,
        relocations_kept: info.has_emitted_relocations,
        rela_dyn_bytes,
        rela_dyn_entries: entries,
        rela_dyn_relative: relative,
        relr,
        build_id: info.build_id_hex(),
        missing,
    }
}

/// Table 3 (and 2) for one start-up: `sequence` is the touched functions (their names) in
/// first-touch order.
pub fn table3(
    binary: &Binary,
    w: &Workload,
    sequence: &[Vec<String>],
    model: PageModel,
) -> Utilization {
    let actual = Placement::actual(&binary.functions, model);
    let known: Vec<Vec<String>> =
        sequence.iter().filter(|n| actual.get(n).is_some()).cloned().collect();
    let unknown_functions = sequence.len() - known.len();
    let used = actual.used_bytes_per_page(&known, model);
    let used_code_bytes: u64 = used.values().sum();
    let touched = used.len() as u64;
    let code_pages_total = static_code_pages(binary, model).max(touched);
    let (touches, _) = actual.touches(&known, model);
    let current = simulate(&touches, actual.lo, actual.hi, model);
    let order: Vec<String> = known.iter().map(|n| n[0].clone()).collect();
    let ideal_place = Placement::ordered(&binary.functions, &order, 1, model);
    let (ideal_touches, _) = ideal_place.touches(&known, model);
    let ideal = simulate(&ideal_touches, ideal_place.lo, ideal_place.hi, model);
    let code_bytes = binary.code_bytes().max(used_code_bytes);
    Utilization {
        workload: w.name.clone(),
        code_pages_total,
        code_pages_touched: touched,
        touched_share: ratio(touched, code_pages_total),
        utilization: ratio(used_code_bytes, touched * model.page_size),
        used_code_bytes,
        unused_code_bytes: code_bytes - used_code_bytes,
        non_code_bytes: binary.info.size.saturating_sub(code_bytes),
        touched_functions: sequence.len(),
        unknown_functions,
        current,
        ideal,
    }
}

/// Whether a symbol is a Rust one: v0 (`_RN...`, `_RI...`, `_RC...`) or legacy, which ends
/// in `17h` + 16 hex digits + `E`.
pub fn is_rust_symbol(n: &str) -> bool {
    if n.starts_with("_RN") || n.starts_with("_RI") || n.starts_with("_RC") {
        return true;
    }
    let b = n.as_bytes();
    n.starts_with("_ZN")
        && b.len() > 23
        && b[b.len() - 1] == b'E'
        && &b[b.len() - 20..b.len() - 17] == b"17h"
        && b[b.len() - 17..b.len() - 1].iter().all(u8::is_ascii_hexdigit)
}

/// Pages of the file holding code (each counted once, whatever the sections sharing it).
fn static_code_pages(binary: &Binary, model: PageModel) -> u64 {
    let pages: std::collections::BTreeSet<u64> = binary
        .loaded_sections()
        .iter()
        .filter(|s| s.1 == SectionClass::Code)
        .flat_map(|s| model.pages_of(s.2, s.3))
        .collect();
    pages.len() as u64
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Pages start-up read (from the profile's page data, 4 KiB file pages) by section class.
fn breakdown(
    binary: &Binary,
    file_pages: &crate::input::FilePages,
    u: &Utilization,
    s: &StaticPicture,
    model: PageModel,
) -> Vec<SectionRow> {
    const FILE_PAGE: u64 = 4096;
    let sections = binary.loaded_sections();
    // Class of each file page: the class with most bytes in it; header pages are "other".
    let class_of = |page: u64| -> SectionClass {
        let (a, b) = (page * FILE_PAGE, (page + 1) * FILE_PAGE);
        let mut best: HashMap<SectionClass, u64> = HashMap::new();
        for (_, class, off, size) in &sections {
            let overlap = (off + size).min(b).saturating_sub((*off).max(a));
            if overlap > 0 {
                *best.entry(*class).or_default() += overlap;
            }
        }
        best.into_iter()
            .max_by_key(|(c, n)| (*n, std::cmp::Reverse(*c)))
            .map_or(SectionClass::Other, |(c, _)| c)
    };
    let mut in_file: BTreeMap<SectionClass, u64> = BTreeMap::new();
    for page in 0..binary.info.size.div_ceil(FILE_PAGE) {
        *in_file.entry(class_of(page)).or_default() += 1;
    }
    let mut read: BTreeMap<SectionClass, u64> = BTreeMap::new();
    for &p in &file_pages.pages {
        *read.entry(class_of(p)).or_default() += 1;
    }
    let mut faulted: BTreeMap<SectionClass, u64> = BTreeMap::new();
    for &p in &file_pages.faulted {
        *faulted.entry(class_of(p)).or_default() += 1;
    }
    let scale = model.page_size / FILE_PAGE.min(model.page_size);
    SectionClass::ALL
        .into_iter()
        .map(|class| {
            let pages_read = read.get(&class).copied().unwrap_or(0);
            let (saving, remedy) = match class {
                SectionClass::Code => (
                    pages_read.saturating_sub(u.ideal.pages_read * scale),
                    "order functions by first touch: `coldstart order` then `coldstart link` (lld) or `coldstart bolt`".to_owned(),
                ),
                SectionClass::Rodata => (
                    0,
                    "build with -fdata-sections and list hot data symbols in the lld order file (lld orders .rodata.* by it); measure after".to_owned(),
                ),
                SectionClass::Relocations if s.rela_dyn_relative > 0 && !s.relr => {
                    let relr_bytes = s.rela_dyn_relative.div_ceil(7) + 8;
                    let after = (s.rela_dyn_bytes - s.rela_dyn_relative * 24 + relr_bytes).div_ceil(FILE_PAGE);
                    (
                        pages_read.saturating_sub(after),
                        format!("link with -z pack-relative-relocs (DT_RELR): {} relative relocations shrink to ~{} bytes; or build non-PIE where acceptable", s.rela_dyn_relative, relr_bytes),
                    )
                }
                SectionClass::Relocations => (0, "already packed (DT_RELR) or no relative relocations; non-PIE removes the rest".to_owned()),
                SectionClass::RelroData => (
                    0,
                    "fewer relocated pointers (tables of plain offsets instead of pointers); order .data.rel.ro.* with -fdata-sections".to_owned(),
                ),
                SectionClass::Other => (0, "-".to_owned()),
            };
            SectionRow {
                class,
                pages_in_file: in_file.get(&class).copied().unwrap_or(0),
                pages_faulted: faulted.get(&class).copied().unwrap_or(0),
                pages_read,
                predicted_saving: saving,
                remedy,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::is_rust_symbol;

    #[test]
    fn rust_symbols_are_told_from_cpp_ones() {
        assert!(is_rust_symbol("_ZN4core3fmt5write17h0123456789abcdefE"));
        assert!(is_rust_symbol("_RNvCs1234_7mycrate4main"));
        assert!(!is_rust_symbol("_ZN4llvm17hashing_functionEv"));
        assert!(!is_rust_symbol("_ZN3foo3barEv"));
    }
}
