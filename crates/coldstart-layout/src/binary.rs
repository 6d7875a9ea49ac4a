//! The facts about one binary that layout needs, read through `coldstart-elf`: functions at
//! file offsets, the code region, section classes, and relocation sizes.

use std::path::Path;

use coldstart_elf::{ElfInfo, SymbolOptions};
use serde::Serialize;

use crate::model::Placed;
use crate::LayoutError;

/// What a section holds, for the per-section breakdown of start-up reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SectionClass {
    /// Instructions (`SHF_EXECINSTR`).
    Code,
    /// Read-only data: `.rodata*`, `.eh_frame*`, `.gcc_except_table`.
    Rodata,
    /// Dynamic relocations the loader reads whole: `.rela.dyn`, `.relr.dyn`, `.rela.plt`.
    Relocations,
    /// Data the loader relocates and then protects: `.data.rel.ro*`, `.got`, `.dynamic`,
    /// `.init_array`, `.fini_array`.
    RelroData,
    /// Everything else: headers, dynamic symbols and strings, `.data`, notes.
    Other,
}

impl SectionClass {
    /// Every class, in the order of the analysis tables.
    pub const ALL: [SectionClass; 5] = [
        SectionClass::Code,
        SectionClass::Rodata,
        SectionClass::Relocations,
        SectionClass::RelroData,
        SectionClass::Other,
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            SectionClass::Code => "code",
            SectionClass::Rodata => "rodata",
            SectionClass::Relocations => "relocations",
            SectionClass::RelroData => "relro data",
            SectionClass::Other => "other",
        }
    }

    /// The class of a section by name and flags.
    pub fn of(name: &str, executable: bool) -> SectionClass {
        if executable {
            return SectionClass::Code;
        }
        if name.starts_with(".rodata")
            || name.starts_with(".eh_frame")
            || name.starts_with(".gcc_except_table")
        {
            return SectionClass::Rodata;
        }
        if matches!(name, ".rela.dyn" | ".rel.dyn" | ".relr.dyn" | ".rela.plt" | ".rel.plt") {
            return SectionClass::Relocations;
        }
        if name.starts_with(".data.rel.ro")
            || matches!(
                name,
                ".got" | ".dynamic" | ".init_array" | ".fini_array" | ".preinit_array"
            )
        {
            return SectionClass::RelroData;
        }
        SectionClass::Other
    }
}

/// One binary, read for layout.
#[derive(Debug, Clone)]
pub struct Binary {
    /// What `coldstart-elf` read of it.
    pub info: ElfInfo,
    /// Functions with their file offsets, in address order.
    pub functions: Vec<Placed>,
}

impl Binary {
    /// Read `path` (symbols from `.symtab`, a debug file, or `.dynsym`).
    pub fn open(path: &Path) -> Result<Binary, LayoutError> {
        let info = ElfInfo::open(path, &SymbolOptions::default())?;
        let functions = info
            .functions
            .iter()
            .filter_map(|f| {
                let offset = info.vaddr_to_offset(f.address)?;
                // In the file, whatever its symbols (those of a debug file too) say.
                let size = f.size.min(info.size.saturating_sub(offset));
                Some(Placed { names: f.names.clone(), offset, size })
            })
            .collect();
        Ok(Binary { info, functions })
    }

    /// Sections with file bytes in a loadable segment, with their class and file range.
    pub fn loaded_sections(&self) -> Vec<(String, SectionClass, u64, u64)> {
        self.info
            .sections
            .iter()
            .filter(|s| s.address != 0 && s.size > 0)
            .filter_map(|s| {
                let off = s.offset?;
                Some((s.name.clone(), SectionClass::of(&s.name, s.executable), off, s.size))
            })
            .collect()
    }

    /// Bytes of code (executable sections).
    pub fn code_bytes(&self) -> u64 {
        self.loaded_sections().iter().filter(|s| s.1 == SectionClass::Code).map(|s| s.3).sum()
    }

    /// Relocation counts of `.rela.dyn`: (total entries, relative entries). Relative ones
    /// are what DT_RELR packs.
    pub fn rela_dyn_counts(&self) -> Option<(u64, u64)> {
        let sec = self.info.section(".rela.dyn")?;
        let off = sec.offset? as usize;
        let map = coldstart_elf::Mmap::open(&self.info.path).ok()?;
        let bytes = map.bytes().get(off..off + sec.size as usize)?;
        let relative = match self.info.machine {
            coldstart_elf::Machine::X86_64 => 8u32,
            coldstart_elf::Machine::Aarch64 => 1027,
            coldstart_elf::Machine::Other(_) => return Some((sec.size / 24, 0)),
        };
        let mut rel = 0;
        for entry in bytes.chunks_exact(24) {
            let info = u64::from_le_bytes(entry[8..16].try_into().ok()?);
            if (info & 0xffff_ffff) as u32 == relative {
                rel += 1;
            }
        }
        Some((sec.size / 24, rel))
    }
}

impl Binary {
    /// Fill in the sizes the profiles lack (0) for this binary's module from its symbols,
    /// so orders and cluster caps count real bytes.
    pub fn fill_sizes(&self, workloads: &mut [crate::input::Workload]) {
        let sizes: std::collections::HashMap<&str, u64> = self
            .functions
            .iter()
            .flat_map(|f| f.names.iter().map(move |n| (n.as_str(), f.size)))
            .collect();
        let file = self.info.path.file_name();
        for w in workloads {
            for m in w.modules.iter_mut().filter(|m| m.path.file_name() == file) {
                for t in m.functions.iter_mut().filter(|t| t.size == 0) {
                    if let Some(s) = t.names.iter().find_map(|n| sizes.get(n.as_str())) {
                        t.size = *s;
                    }
                }
            }
        }
    }
}

/// Evidence of `-ffunction-sections` in a binary linked with `--emit-relocs`: relocations in
/// code against the section symbol of a code section. Without function sections the assembler
/// resolves a call to a `static` function of the same section itself and leaves no
/// relocation; with them every such call crosses sections and keeps one (lld keeps it,
/// against the output section, with `--emit-relocs`). GCC's `.text.unlikely` splits can
/// leave a few such relocations too, so a handful is not enough: `None` when the binary has
/// no static relocations, else the count found.
pub fn cross_section_code_relocations(path: &Path) -> Option<usize> {
    with_object(path, code_relocations_between_sections).ok().flatten()
}

fn code_relocations_between_sections(file: &object::File<'_>) -> Option<usize> {
    use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SectionKind, SymbolKind};
    let mut found = None;
    for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
        for (_, reloc) in section.relocations() {
            let count = found.get_or_insert(0usize);
            let RelocationTarget::Symbol(index) = reloc.target() else { continue };
            let Ok(sym) = file.symbol_by_index(index) else { continue };
            if sym.kind() != SymbolKind::Section {
                continue;
            }
            let target = sym.section_index().and_then(|i| file.section_by_index(i).ok());
            if target.is_some_and(|t| t.kind() == SectionKind::Text) {
                *count += 1;
            }
        }
    }
    found
}

/// Parse `path` with `object` for what `coldstart-elf` does not keep (symbol binding, data
/// objects, static relocations) and hand the parsed file to `read`.
pub(crate) fn with_object<T>(
    path: &Path,
    read: impl FnOnce(&object::File<'_>) -> T,
) -> Result<T, LayoutError> {
    let map = coldstart_elf::Mmap::open(path)?;
    let file = object::File::parse(map.bytes()).map_err(|e| {
        LayoutError::Elf(coldstart_elf::ElfError::Malformed {
            path: path.to_owned(),
            message: e.to_string(),
        })
    })?;
    Ok(read(&file))
}
