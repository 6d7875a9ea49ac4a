//! [`ElfInfo`]: the facts coldstart needs from one ELF file, read once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader, SectionHeader, Sym};
use object::{Endianness, Object};
use serde::{Deserialize, Serialize};

use crate::debugfile::{find_debug_file, SymbolOptions};
use crate::{ElfError, Mmap};

/// The page size coldstart assumes for file pages (x86-64 and most aarch64 kernels).
pub const PAGE_SIZE: u64 = 4096;
/// Segment flag: executable.
pub const PF_X: u32 = elf::PF_X;
/// Segment flag: writable.
pub const PF_W: u32 = elf::PF_W;
/// Segment flag: readable.
pub const PF_R: u32 = elf::PF_R;

/// The processor an ELF file is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Machine {
    /// `EM_X86_64`.
    X86_64,
    /// `EM_AARCH64`.
    Aarch64,
    /// Any other `e_machine` value.
    Other(u16),
}

/// Where the function symbols came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SymbolSource {
    /// The file's own `.symtab` (not stripped).
    Symtab,
    /// Only the dynamic symbols (`.dynsym`): exported functions only.
    Dynsym,
    /// A separate debug file (found by build-id or `.gnu_debuglink`).
    DebugFile(PathBuf),
    /// No function symbols at all (stripped, no debug file found).
    None,
}

impl std::fmt::Display for SymbolSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SymbolSource::Symtab => f.write_str(".symtab"),
            SymbolSource::Dynsym => f.write_str(".dynsym"),
            SymbolSource::DebugFile(p) => write!(f, "debug file {}", p.display()),
            SymbolSource::None => f.write_str("no symbols"),
        }
    }
}

/// One function: every symbol at one entry address (aliases grouped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Function {
    /// Entry address as linked (before any load bias).
    pub address: u64,
    /// Size in bytes (the largest size among the aliases).
    pub size: u64,
    /// Raw (mangled) names of every symbol at this address, global symbols first.
    pub names: Vec<String>,
    /// Name of the section holding the function.
    pub section: String,
    /// Whether the function has a section of its own (`.text.NAME`, as
    /// `-ffunction-sections` makes in object files). Linked output merges them into `.text`,
    /// so this is only ever true for relocatable objects.
    pub own_section: bool,
}

/// A section header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// Its name (`.text`, `.text.hot`, ...).
    pub name: String,
    /// Virtual address (0 for sections that are not loaded).
    pub address: u64,
    /// File offset, `None` for sections without file data (`.bss`, stripped-out debug data).
    pub offset: Option<u64>,
    /// Size in bytes.
    pub size: u64,
    /// Whether the section holds instructions (`SHF_EXECINSTR`).
    pub executable: bool,
}

/// A loadable segment (`PT_LOAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Virtual address as linked (`p_vaddr`).
    pub vaddr: u64,
    /// Size in memory (`p_memsz`).
    pub memsz: u64,
    /// File offset (`p_offset`).
    pub offset: u64,
    /// Size in the file (`p_filesz`; less than `memsz` where `.bss` follows).
    pub filesz: u64,
    /// `PF_R | PF_W | PF_X` bits.
    pub flags: u32,
}

/// The facts coldstart reads from one ELF file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ElfInfo {
    /// The file read.
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    /// The processor it is built for.
    pub machine: Machine,
    /// `ET_DYN`: a shared library or a position-independent executable.
    pub position_independent: bool,
    /// Path of the program interpreter (`PT_INTERP`), absent for static executables and
    /// libraries.
    pub interpreter: Option<String>,
    /// Entry point as linked.
    pub entry: u64,
    /// GNU build-id note, raw bytes.
    pub build_id: Option<Vec<u8>>,
    /// `.gnu_debuglink` file name and CRC.
    pub debuglink: Option<(String, u32)>,
    /// Section headers, in file order.
    pub sections: Vec<Section>,
    /// Loadable segments, in file order.
    pub segments: Vec<Segment>,
    /// Functions sorted by address, aliases grouped.
    pub functions: Vec<Function>,
    /// Where the function symbols came from.
    pub symbol_source: SymbolSource,
    /// Whether `.rela.dyn` (or `.rel.dyn`) is present: dynamic relocations to apply at load.
    pub has_dynamic_relocations: bool,
    /// Whether static relocations were kept in the output (`--emit-relocs`), which BOLT needs.
    pub has_emitted_relocations: bool,
}

impl ElfInfo {
    /// Read `path`. Symbols come from `.symtab`, else from a separate debug file (found as
    /// `options` says), else `.dynsym`.
    pub fn open(path: impl AsRef<Path>, options: &SymbolOptions) -> Result<ElfInfo, ElfError> {
        let path = path.as_ref();
        let map = Mmap::open(path)?;
        let data = map.bytes();
        let file = parse64(path, data)?;
        let mut info = read_headers(path, &file, data.len() as u64)?;

        let own = read_functions(path, &file, Table::Symtab)?;
        if !own.is_empty() {
            info.functions = own;
            info.symbol_source = SymbolSource::Symtab;
            return Ok(info);
        }
        if let Some(debug) = find_debug_file(&info, options) {
            if let Ok(dmap) = Mmap::open(&debug) {
                if let Ok(dfile) = parse64(&debug, dmap.bytes()) {
                    let funcs = read_functions(&debug, &dfile, Table::Symtab)?;
                    if !funcs.is_empty() {
                        info.functions = funcs;
                        info.symbol_source = SymbolSource::DebugFile(debug);
                        return Ok(info);
                    }
                }
            }
        }
        let dyn_funcs = read_functions(path, &file, Table::Dynsym)?;
        if !dyn_funcs.is_empty() {
            info.functions = dyn_funcs;
            info.symbol_source = SymbolSource::Dynsym;
        }
        Ok(info)
    }

    /// The build-id in hex, if the file has one.
    pub fn build_id_hex(&self) -> Option<String> {
        self.build_id.as_deref().map(crate::hex)
    }

    /// The file offset of a linked virtual address, through the `PT_LOAD` segments.
    pub fn vaddr_to_offset(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr < s.vaddr + s.filesz)
            .map(|s| vaddr - s.vaddr + s.offset)
    }

    /// The file page (offset / [`PAGE_SIZE`]) of a linked virtual address.
    pub fn vaddr_to_page(&self, vaddr: u64) -> Option<u64> {
        self.vaddr_to_offset(vaddr).map(|o| o / PAGE_SIZE)
    }

    /// The load bias of a mapping: `map_start` is where the kernel (or the loader) mapped
    /// file offset `map_offset` with permissions `flags` (`PF_*`, as `/proc/PID/maps` shows
    /// them; several segments can start in one file page, the flags tell them apart).
    /// Returns `None` if no `PT_LOAD` matches.
    pub fn load_bias(&self, map_start: u64, map_offset: u64, flags: u32) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| s.offset & !(PAGE_SIZE - 1) == map_offset && s.flags & 7 == flags & 7)
            .map(|s| map_start.wrapping_sub(s.vaddr & !(PAGE_SIZE - 1)))
    }

    /// The section containing a linked virtual address.
    pub fn section_at(&self, vaddr: u64) -> Option<&Section> {
        self.sections
            .iter()
            .find(|s| s.address != 0 && vaddr >= s.address && vaddr < s.address + s.size)
    }

    /// The function whose body contains `vaddr`, if any.
    pub fn function_at(&self, vaddr: u64) -> Option<&Function> {
        let i = self.functions.partition_point(|f| f.address <= vaddr);
        let f = self.functions.get(i.checked_sub(1)?)?;
        (vaddr < f.address + f.size.max(1)).then_some(f)
    }

    /// A section by name.
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }
}

type File64<'a> = ElfFile64<'a, Endianness, &'a [u8]>;

fn parse64<'a>(path: &Path, data: &'a [u8]) -> Result<File64<'a>, ElfError> {
    if data.len() < 5 || &data[..4] != b"\x7fELF" {
        return Err(ElfError::not_elf(path, data));
    }
    match data[4] {
        elf::ELFCLASS64 => {}
        elf::ELFCLASS32 => return Err(ElfError::Unsupported32Bit { path: path.to_owned() }),
        other => return Err(ElfError::malformed(path, format!("unknown ELF class {other}"))),
    }
    ElfFile64::parse(data).map_err(|e| ElfError::malformed(path, e))
}

fn read_headers(path: &Path, file: &File64<'_>, size: u64) -> Result<ElfInfo, ElfError> {
    let endian = file.endian();
    let header = file.elf_header();
    let data = file.data();
    let machine = match header.e_machine(endian) {
        elf::EM_X86_64 => Machine::X86_64,
        elf::EM_AARCH64 => Machine::Aarch64,
        m => Machine::Other(m),
    };
    let mut segments = Vec::new();
    let mut interpreter = None;
    for ph in file.elf_program_headers() {
        match ph.p_type(endian) {
            elf::PT_LOAD => {
                let s = Segment {
                    vaddr: ph.p_vaddr(endian),
                    memsz: ph.p_memsz(endian),
                    offset: ph.p_offset(endian),
                    filesz: ph.p_filesz(endian),
                    flags: ph.p_flags(endian),
                };
                let span =
                    Span { offset: Some(s.offset), len: s.filesz, address: s.vaddr, mem: s.memsz };
                span.check(path, "a PT_LOAD segment", size)?;
                segments.push(s);
            }
            elf::PT_INTERP => {
                if let Ok(bytes) = ph.data(endian, data) {
                    let bytes = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
                    interpreter = Some(String::from_utf8_lossy(bytes).into_owned());
                }
            }
            _ => {}
        }
    }
    let table = file.elf_section_table();
    let mut sections = Vec::new();
    for sh in table.iter() {
        let name = table.section_name(endian, sh).map_err(|e| ElfError::malformed(path, e))?;
        let nobits = sh.sh_type(endian) == elf::SHT_NOBITS;
        let section = Section {
            name: String::from_utf8_lossy(name).into_owned(),
            address: sh.sh_addr(endian),
            offset: (!nobits && sh.sh_type(endian) != elf::SHT_NULL).then(|| sh.sh_offset(endian)),
            size: sh.sh_size(endian),
            executable: sh.sh_flags(endian) & u64::from(elf::SHF_EXECINSTR) != 0,
        };
        // Every size read from the file is checked against the file before anything is sized
        // by it (a `.text` of 2^56 bytes made `analyze` allocate that much and abort).
        let (len, mem) = (section.size, section.size);
        let span = Span { offset: section.offset, len, address: section.address, mem };
        span.check(path, format_args!("section {}", section.name), size)?;
        sections.push(section);
    }
    let has_dynamic_relocations = sections
        .iter()
        .any(|s| s.name == ".rela.dyn" || s.name == ".rel.dyn" || s.name == ".relr.dyn");
    let linked = header.e_type(endian) != elf::ET_REL;
    let has_emitted_relocations = linked
        && sections
            .iter()
            .any(|s| s.name.starts_with(".rela.text") || s.name.starts_with(".rel.text"));
    let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
    let debuglink = file
        .gnu_debuglink()
        .ok()
        .flatten()
        .map(|(name, crc)| (String::from_utf8_lossy(name).into_owned(), crc));
    Ok(ElfInfo {
        path: path.to_owned(),
        size,
        machine,
        position_independent: header.e_type(endian) == elf::ET_DYN,
        interpreter,
        entry: header.e_entry(endian),
        build_id,
        debuglink,
        sections,
        segments,
        functions: Vec::new(),
        symbol_source: SymbolSource::None,
        has_dynamic_relocations,
        has_emitted_relocations,
    })
}

/// Where a section or segment says it lies: `len` bytes of the file at `offset` (`None`: no
/// bytes in the file), `mem` bytes of memory at `address`.
struct Span {
    offset: Option<u64>,
    len: u64,
    address: u64,
    mem: u64,
}

impl Span {
    /// Its bytes in a file of `size` bytes, its addresses below 2^64; else the file is
    /// malformed, and `what` is named.
    fn check(&self, path: &Path, what: impl std::fmt::Display, size: u64) -> Result<(), ElfError> {
        let past_file =
            self.offset.is_some_and(|o| o.checked_add(self.len).is_none_or(|e| e > size));
        if past_file || self.address.checked_add(self.mem).is_none() {
            return Err(ElfError::malformed(
                path,
                format_args!(
                    "{what} (offset {:?}, {} bytes in the file, {} in memory at {:#x}) lies past the end of the file ({size} bytes) or of the address space",
                    self.offset, self.len, self.mem, self.address
                ),
            ));
        }
        Ok(())
    }
}

/// Size, names (with whether each is global) and section index of the symbols at one address.
type Aliases = (u64, Vec<(bool, String)>, usize);

#[derive(Clone, Copy)]
enum Table {
    Symtab,
    Dynsym,
}

fn read_functions(path: &Path, file: &File64<'_>, which: Table) -> Result<Vec<Function>, ElfError> {
    let endian = file.endian();
    let symbols = match which {
        Table::Symtab => file.elf_symbol_table(),
        Table::Dynsym => file.elf_dynamic_symbol_table(),
    };
    let sections = file.elf_section_table();
    // address -> (size, names with a global-first key, section index)
    let mut by_address: BTreeMap<u64, Aliases> = BTreeMap::new();
    for sym in symbols.iter() {
        let kind = sym.st_type();
        if kind != elf::STT_FUNC && kind != elf::STT_GNU_IFUNC {
            continue;
        }
        let size = sym.st_size(endian);
        let shndx = usize::from(sym.st_shndx(endian));
        if size == 0
            || shndx == usize::from(elf::SHN_UNDEF)
            || shndx >= usize::from(elf::SHN_LORESERVE)
        {
            continue;
        }
        let Ok(sh) = sections.section(object::SectionIndex(shndx)) else { continue };
        if sh.sh_flags(endian) & u64::from(elf::SHF_EXECINSTR) == 0 {
            continue;
        }
        // A function lies in its section: its size is clipped to the section's end, and one
        // outside its section is no function of it.
        let value = sym.st_value(endian);
        let (start, len) = (sh.sh_addr(endian), sh.sh_size(endian));
        let Some(room) = start.checked_add(len).and_then(|end| end.checked_sub(value)) else {
            continue;
        };
        if value < start || room == 0 {
            continue;
        }
        let size = size.min(room);
        let name = symbols.symbol_name(endian, sym).map_err(|e| ElfError::malformed(path, e))?;
        if name.is_empty() {
            continue;
        }
        let name = String::from_utf8_lossy(name).into_owned();
        let global = sym.st_bind() != elf::STB_LOCAL;
        let entry = by_address.entry(sym.st_value(endian)).or_insert((0, Vec::new(), shndx));
        entry.0 = entry.0.max(size);
        if !entry.1.iter().any(|(_, n)| *n == name) {
            entry.1.push((global, name));
        }
    }
    let mut functions = Vec::with_capacity(by_address.len());
    for (address, (size, mut names, shndx)) in by_address {
        names.sort_by_key(|(global, _)| !*global);
        let section = sections
            .section(object::SectionIndex(shndx))
            .ok()
            .and_then(|sh| sections.section_name(endian, sh).ok())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let names: Vec<String> = names.into_iter().map(|(_, n)| n).collect();
        let own_section = names.iter().any(|n| {
            section
                .strip_prefix(".text.")
                .is_some_and(|rest| rest == n || rest.ends_with(&format!(".{n}")))
        });
        functions.push(Function { address, size, names, section, own_section });
    }
    Ok(functions)
}
