//! Code a program copies as data, which no tracer puts a breakpoint in: the copy would carry
//! the `int3` to an address the tracer has no entry for, and the program would die of it.
//!
//! V8's embedded builtins are such code. V8 assembles its builtins into the program
//! (`embedded.S`, linked into `node` or `libnode.so`) as one blob that starts at
//! `v8_NAME_embedded_blob_code_` and whose size is the 32-bit word at
//! `v8_NAME_embedded_blob_code_size_`, and at start-up copies it into its code range, near the
//! code it generates, so that calls to builtins are short: by mapping the file again at the
//! blob's offset while the text is the file's, else with a copy of the text's bytes (which
//! Node.js makes with `--use-largepages=on`, having moved its text into anonymous huge
//! pages). The audit agent applies the same rule (`agent/symbols.c`).

use std::ops::Range;
use std::path::Path;

use coldstart_elf::{ElfInfo, Mmap, SymbolSource};
use object::{Object, ObjectSegment, ObjectSymbol};

/// The ELF addresses of the code of `info`'s module (the file at `path`) that its program
/// copies as data: an empty range when there is none.
pub(crate) fn copied_code(info: &ElfInfo, path: &Path) -> Range<u64> {
    // Every function of the blob is named `Builtins_NAME`: modules without one are not
    // searched again (their symbols were read once already, into `info`).
    if !info.functions.iter().any(|f| f.names.iter().any(|n| n.starts_with("Builtins_"))) {
        return 0..0;
    }
    let Ok(file) = Mmap::open(path) else { return 0..0 };
    // The blob's size is read from the module's file: a debug file has no contents for it.
    let debug_file = match &info.symbol_source {
        SymbolSource::DebugFile(debug) => Mmap::open(debug).ok(),
        _ => None,
    };
    let symbols = debug_file.as_ref().unwrap_or(&file).bytes();
    blob(symbols, file.bytes()).unwrap_or(0..0)
}

/// The blob named by the symbols of `symbols`, its size read from `file`.
fn blob(symbols: &[u8], file: &[u8]) -> Option<Range<u64>> {
    let table = object::File::parse(symbols).ok()?;
    let (mut start, mut size_at) = (None, None);
    for symbol in table.symbols().chain(table.dynamic_symbols()) {
        let Ok(name) = symbol.name() else { continue };
        if symbol.is_undefined() || !name.starts_with("v8_") {
            continue;
        }
        if name.ends_with("_embedded_blob_code_size_") {
            size_at = Some(symbol.address());
        } else if name.ends_with("_embedded_blob_code_") {
            start = Some(symbol.address());
        }
    }
    let (start, size_at) = (start?, size_at?);
    let module = object::File::parse(file).ok()?;
    let bytes = module.segments().find_map(|s| s.data_range(size_at, 4).ok().flatten())?;
    let size = u32::from_le_bytes(bytes.try_into().ok()?);
    (size > 0).then(|| start..start + u64::from(size))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two functions in a blob laid out as V8's, one outside it.
    const BLOB: &str = r#"
__asm__(".text\n.p2align 6\nv8_Test_embedded_blob_code_:\n"
        ".type Builtins_One,@function\nBuiltins_One:\nret\n.size Builtins_One,.-Builtins_One\n"
        ".p2align 5\n.type Builtins_Two,@function\nBuiltins_Two:\nret\n.size Builtins_Two,.-Builtins_Two\n"
        ".p2align 5\nblob_end:\n.section .rodata\n.p2align 2\nv8_Test_embedded_blob_code_size_:\n"
        ".long blob_end - v8_Test_embedded_blob_code_\n.text\n");
int main(void) { return 0; }
"#;

    #[test]
    fn the_v8_blob_is_found_from_its_symbols_and_size_and_nothing_elsewhere() {
        if !coldstart_testkit::require_program("clang-19", "clang-19") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let exe = coldstart_testkit::compile_c(dir.path(), "blob", BLOB, &["-g0"]);
        let options = coldstart_elf::SymbolOptions::default();
        let info = ElfInfo::open(&exe, &options).unwrap();
        let at = |name: &str| {
            info.functions.iter().find(|f| f.names.iter().any(|n| n == name)).unwrap().address
        };
        let range = copied_code(&info, &exe);
        assert_eq!(range, at("Builtins_One")..at("Builtins_Two") + 32);
        assert!(!range.contains(&at("main")));
        // The profile counts the functions that had a breakpoint: the blob's two are not.
        let total = info.functions.len();
        let mut touches = crate::modules::ModuleTouches::new(std::sync::Arc::new(info), &exe, 0);
        let module = crate::modules::profile_modules([&mut touches]).remove(0);
        assert_eq!(module.functions_total, total - 2);
        // Without the blob's functions in the symbols, nothing is searched for.
        let plain = coldstart_testkit::compile_c(
            dir.path(),
            "plain",
            "int main(void) { return 0; }",
            &["-g0"],
        );
        let info = ElfInfo::open(&plain, &options).unwrap();
        assert!(copied_code(&info, &plain).is_empty());
    }
}
