//! Ordering data by first touch: the data symbols (`STT_OBJECT`) that lie in the file
//! pages start-up touched, in the order those pages were first touched.
//!
//! Code is often less than half of what a cold start reads: `.rodata` tables, strings and
//! `.data.rel.ro` come in page by page too. With `-fdata-sections` (Rust's default) each
//! object has its own input section (`.rodata.NAME`, `.data.rel.ro.NAME`, `.data.NAME`),
//! which lld orders by the same `--symbol-ordering-file` and gold and GNU ld by section
//! name, so the hot data can be packed like the hot code.

use std::collections::HashSet;
use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use serde::{Deserialize, Serialize};

use crate::LayoutError;

/// The kind of data section a symbol lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataKind {
    /// `.rodata*`: read-only data.
    Rodata,
    /// `.data.rel.ro*`: data relocated at load, then read-only.
    RelRo,
    /// `.data*`: writable data.
    Data,
}

impl DataKind {
    /// Input-section prefixes `-fdata-sections` gives objects of this kind.
    pub fn section_prefixes(self) -> &'static [&'static str] {
        match self {
            DataKind::Rodata => &[".rodata."],
            DataKind::RelRo => &[".data.rel.ro.", ".data.rel.ro.local."],
            DataKind::Data => &[".data."],
        }
    }

    /// The output section that collects them.
    pub fn output_section(self) -> &'static str {
        match self {
            DataKind::Rodata => ".rodata",
            DataKind::RelRo => ".data.rel.ro",
            DataKind::Data => ".data",
        }
    }

    fn of(section: &str) -> Option<DataKind> {
        if section.starts_with(".rodata") {
            Some(DataKind::Rodata)
        } else if section.starts_with(".data.rel.ro") {
            Some(DataKind::RelRo)
        } else if section.starts_with(".data") {
            Some(DataKind::Data)
        } else {
            None
        }
    }
}

/// One data object of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataSymbol {
    /// The symbol's name.
    pub name: String,
    /// Which kind of data it is.
    pub kind: DataKind,
    /// Size in bytes.
    pub size: u64,
    /// File offset in the binary the order was made from.
    pub offset: u64,
}

/// The data objects of `binary` (with file bytes) in data sections, by file offset.
pub fn data_symbols(binary: &Path) -> Result<Vec<DataSymbol>, LayoutError> {
    crate::binary::with_object(binary, read_data_symbols)
}

fn read_data_symbols(file: &object::File<'_>) -> Vec<DataSymbol> {
    let mut out = Vec::new();
    for sym in file.symbols() {
        if sym.kind() != SymbolKind::Data || sym.size() == 0 || sym.is_undefined() {
            continue;
        }
        let Some(index) = sym.section_index() else { continue };
        let Ok(section) = file.section_by_index(index) else { continue };
        let Ok(sname) = section.name() else { continue };
        let Some(kind) = DataKind::of(sname) else { continue };
        let Some((sec_off, _)) = section.file_range() else { continue };
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() {
            continue;
        }
        let offset = sec_off + (sym.address() - section.address());
        out.push(DataSymbol { name: name.to_owned(), kind, size: sym.size(), offset });
    }
    out.sort_by_key(|d| d.offset);
    out
}

/// The data objects lying in `pages` (4 KiB file pages in first-touch order), in that
/// order; objects in one page by address.
pub fn order_data(symbols: &[DataSymbol], pages: &[u64]) -> Vec<DataSymbol> {
    const PAGE: u64 = 4096;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for &page in pages {
        let (a, b) = (page * PAGE, (page + 1) * PAGE);
        let start = symbols.partition_point(|d| d.offset + d.size <= a);
        for d in symbols[start..].iter().take_while(|d| d.offset < b) {
            if seen.insert(d.name.clone()) {
                out.push(d.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str, offset: u64, size: u64) -> DataSymbol {
        DataSymbol { name: name.into(), kind: DataKind::Rodata, size, offset }
    }

    #[test]
    fn objects_come_in_page_touch_order() {
        let syms = [sym("a", 0x1000, 0x100), sym("b", 0x1100, 0x2000), sym("c", 0x5000, 0x10)];
        let names: Vec<String> =
            order_data(&syms, &[5, 2, 1]).into_iter().map(|d| d.name).collect();
        // Page 5 holds c; page 2 holds the tail of b; page 1 holds a and b's head.
        assert_eq!(names, ["c", "b", "a"]);
    }
}
