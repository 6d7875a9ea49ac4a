//! Reading ELF files for start-up work: function symbols, sections, segments, build-ids,
//! separate debug files, and the mapping from virtual addresses to file offsets and pages.
//!
//! Every later step of coldstart names code by ELF facts: the profiler puts a breakpoint at
//! each function's entry, the layout step needs to know whether functions live in their own
//! sections, and the page tools turn addresses into file pages. This crate reads those facts
//! once into plain owned values ([`ElfInfo`]), so callers never hold a borrow of a mapped file.
//!
//! Parsing uses the `object` crate over a read-only memory map of the file (nothing is copied
//! but the facts kept). Only 64-bit ELF is accepted: coldstart targets today's 64-bit Linux,
//! and a 32-bit file gets a clear [`ElfError::Unsupported32Bit`] instead of wrong answers.
//!
//! ```no_run
//! use coldstart_elf::{ElfInfo, SymbolOptions};
//!
//! let info = ElfInfo::open("/usr/bin/python3", &SymbolOptions::default())?;
//! println!("build-id {:?}, {} functions from {}", info.build_id_hex(), info.functions.len(), info.symbol_source);
//! for f in info.functions.iter().take(3) {
//!     println!("{:#x} {} {}", f.address, f.size, coldstart_elf::demangle(&f.names[0]));
//! }
//! # Ok::<(), coldstart_elf::ElfError>(())
//! ```

mod debugfile;
mod demangle;
mod error;
mod info;
mod map;

pub use debugfile::{find_debug_file, SymbolOptions};
pub use demangle::demangle;
pub use error::ElfError;
pub use info::{
    ElfInfo, Function, Machine, Section, Segment, SymbolSource, PAGE_SIZE, PF_R, PF_W, PF_X,
};
pub use map::Mmap;

/// Whether a file starts with the ELF magic (cheap check before a full parse).
pub fn is_elf(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map(|()| &magic == b"\x7fELF")
        .unwrap_or(false)
}

/// Hex form of a build-id (lower case, as `file(1)` and debuginfod print it).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The linked address of the first symbol (any kind) named `name`, from `.symtab` or
/// `.dynsym`. The profiler uses it for the loader's `_r_debug` and `_dl_debug_state`.
pub fn find_symbol(path: &std::path::Path, name: &str) -> Result<Option<u64>, ElfError> {
    use object::{Object, ObjectSymbol};
    let map = Mmap::open(path)?;
    let data = map.bytes();
    if data.len() < 5 || &data[..4] != b"\x7fELF" {
        return Err(ElfError::not_elf(path, data));
    }
    let file = object::File::parse(data).map_err(|e| ElfError::malformed(path, e))?;
    let found = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name_bytes().is_ok_and(|n| n == name.as_bytes()) && !s.is_undefined())
        .map(|s| s.address());
    Ok(found)
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::ElfError)
}
