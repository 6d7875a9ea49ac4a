//! ELF reading on binaries built here with clang-19, and on bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

use coldstart_elf::{ElfError, ElfInfo, SymbolOptions, SymbolSource};
use coldstart_testkit::{patch_elf_section, SectionField};

const SOURCE: &str = r#"
__attribute__((noinline)) int alpha(int x) { return x * 3 + 1; }
__attribute__((noinline)) int beta(int x) { return alpha(x) ^ 7; }
int gamma_alias(int x) __attribute__((alias("beta")));
static int table[4] = {1, 2, 3, 4};
int main(int argc, char **argv) { (void)argv; return beta(argc) + table[argc & 3] - 100; }
"#;

fn compile(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, SOURCE).unwrap();
    let out = dir.join(name);
    let status = Command::new("clang-19")
        .args(["-O1", "-g", "-fuse-ld=lld", "-ffunction-sections"])
        .args(extra)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("clang-19 is installed (scripts/setup.sh)");
    assert!(status.success());
    out
}

/// Move the debug information of `bin` into the file `debug` (`objcopy --only-keep-debug`)
/// and strip `bin`, as a distribution does.
fn split_debug(bin: &Path, debug: &Path) {
    assert!(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(bin)
        .arg(debug)
        .status()
        .unwrap()
        .success());
    assert!(Command::new("strip").arg("--strip-all").arg(bin).status().unwrap().success());
}

#[test]
fn symtab_functions_aliases_build_id_and_segments() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "prog", &["-Wl,--build-id", "-Wl,--emit-relocs"]);
    let info = ElfInfo::open(&bin, &SymbolOptions::default()).unwrap();
    assert_eq!(info.symbol_source, SymbolSource::Symtab);
    assert_eq!(info.machine, coldstart_elf::Machine::X86_64);
    assert!(info.position_independent, "clang-19 on Debian builds PIE by default");
    assert!(info.build_id.as_ref().is_some_and(|id| id.len() >= 8));
    assert!(info.has_emitted_relocations);

    let beta = info.functions.iter().find(|f| f.names.iter().any(|n| n == "beta")).unwrap();
    assert!(beta.names.contains(&"gamma_alias".to_string()), "aliases grouped: {:?}", beta.names);
    assert!(beta.size > 0);
    assert_eq!(beta.section, ".text");
    assert!(!beta.own_section, "linked output merges .text.* sections");
    let main = info.functions.iter().find(|f| f.names == ["main"]).unwrap();

    // Address to file offset through PT_LOAD, and back to the section's file offset.
    let text = info.section(".text").unwrap();
    let off = info.vaddr_to_offset(main.address).unwrap();
    assert_eq!(off, main.address - text.address + text.offset.unwrap());
    assert_eq!(info.vaddr_to_page(main.address), Some(off / coldstart_elf::PAGE_SIZE));
    assert_eq!(info.function_at(main.address + 1).unwrap().address, main.address);
    assert!(info.segments.iter().any(|s| s.flags & coldstart_elf::PF_X != 0));

    // Bias: the executable segment mapped at some address.
    let seg = info.segments.iter().find(|s| s.flags & coldstart_elf::PF_X != 0).unwrap();
    let bias = 0x5555_0000_0000u64;
    let start = (seg.vaddr & !0xfff) + bias;
    assert_eq!(info.load_bias(start, seg.offset & !0xfff, seg.flags), Some(bias));
}

#[test]
fn object_files_show_own_sections() {
    let dir = tempfile::tempdir().unwrap();
    let obj = compile(dir.path(), "prog.o", &["-c"]);
    let info = ElfInfo::open(&obj, &SymbolOptions::default()).unwrap();
    let alpha = info.functions.iter().find(|f| f.names.contains(&"alpha".to_string())).unwrap();
    assert_eq!(alpha.section, ".text.alpha");
    assert!(alpha.own_section);
}

#[test]
fn stripped_binary_falls_back_to_debug_file_by_build_id_then_dynsym() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "prog", &["-Wl,--build-id", "-rdynamic"]);
    let info = ElfInfo::open(&bin, &SymbolOptions::default()).unwrap();
    let hex = info.build_id_hex().unwrap();
    let root = dir.path().join("debug");
    let debug = root.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..]));
    std::fs::create_dir_all(debug.parent().unwrap()).unwrap();
    split_debug(&bin, &debug);

    let with_root = SymbolOptions { debug_roots: vec![root], use_debug_files: true };
    let from_debug = ElfInfo::open(&bin, &with_root).unwrap();
    assert_eq!(from_debug.symbol_source, SymbolSource::DebugFile(debug));
    assert!(from_debug.functions.iter().any(|f| f.names.contains(&"alpha".to_string())));

    let no_debug = SymbolOptions { debug_roots: vec![], use_debug_files: false };
    let dynsym = ElfInfo::open(&bin, &no_debug).unwrap();
    assert_eq!(dynsym.symbol_source, SymbolSource::Dynsym);
    assert!(dynsym.functions.iter().any(|f| f.names.contains(&"main".to_string())));
}

#[test]
fn debuglink_is_followed_when_crc_matches() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "prog", &["-Wl,--build-id=none"]);
    let debug = dir.path().join("prog.debug");
    split_debug(&bin, &debug);
    assert!(Command::new("objcopy")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(&bin)
        .status()
        .unwrap()
        .success());
    let info =
        ElfInfo::open(&bin, &SymbolOptions { debug_roots: vec![], use_debug_files: true }).unwrap();
    assert_eq!(info.symbol_source, SymbolSource::DebugFile(debug));
}

#[test]
fn not_elf_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let err = ElfInfo::open(&script, &SymbolOptions::default()).unwrap_err();
    assert!(matches!(err, ElfError::NotElf { .. }));
    assert!(err.to_string().contains("script.sh is not an ELF file"), "{err}");
    assert!(!coldstart_elf::is_elf(&script));
}

#[test]
fn thirty_two_bit_elf_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("elf32");
    // A minimal ELF32 header: magic, ELFCLASS32, little-endian, version 1, ET_EXEC, EM_386.
    let mut header = vec![0u8; 52];
    header[..7].copy_from_slice(b"\x7fELF\x01\x01\x01");
    header[16] = 2;
    header[18] = 3;
    header[20] = 1;
    std::fs::write(&path, header).unwrap();
    let err = ElfInfo::open(&path, &SymbolOptions::default()).unwrap_err();
    assert!(matches!(err, ElfError::Unsupported32Bit { .. }), "{err}");
    assert!(err.to_string().contains("32-bit"));
}

#[test]
fn missing_file_names_the_path() {
    let err = ElfInfo::open("/nonexistent/coldstart-test", &SymbolOptions::default()).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/coldstart-test"));
}

#[test]
fn debian_python3_has_py_initialize_in_dynsym() {
    let python = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let info = ElfInfo::open(&python, &SymbolOptions::default()).unwrap();
    assert!(info.functions.iter().any(|f| f.names.iter().any(|n| n.starts_with("Py_Initialize"))));
}

/// A `.text` whose `sh_size` was 0xc7000000000020 made `analyze` allocate 109 TB and abort:
/// every section (and segment) is checked against the file when it is read, and a function's
/// size is clipped to its section.
#[test]
fn sections_past_the_end_of_the_file_are_malformed_not_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let good = compile(dir.path(), "prog", &[]);
    for (name, field, value) in [
        (".text", SectionField::Size, 0xc7000000000020u64),
        (".text", SectionField::Offset, u64::MAX - 8),
        (".rela.dyn", SectionField::Size, 1 << 40),
        (".text", SectionField::Address, u64::MAX - 4),
    ] {
        let mut bytes = std::fs::read(&good).unwrap();
        patch_elf_section(&mut bytes, name, field, value);
        let bad = dir.path().join("bad");
        std::fs::write(&bad, &bytes).unwrap();
        match ElfInfo::open(&bad, &SymbolOptions::default()) {
            Err(ElfError::Malformed { message, .. }) => {
                assert!(message.contains(name) && message.contains("past the end"), "{message}")
            }
            other => panic!("{name} {field:?} = {value:#x}: {other:?}"),
        }
    }
}

#[test]
fn a_function_larger_than_its_section_is_clipped_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "prog", &[]);
    let mut bytes = std::fs::read(&bin).unwrap();
    let info = ElfInfo::open(&bin, &SymbolOptions::default()).unwrap();
    let symtab = info.section(".symtab").unwrap();
    let strtab = info.section(".strtab").unwrap().offset.unwrap() as usize;
    let (at, n) = (symtab.offset.unwrap() as usize, symtab.size as usize / 24);
    let alpha = (0..n)
        .map(|i| at + i * 24)
        .find(|&s| {
            let name = strtab + u32::from_le_bytes(bytes[s..s + 4].try_into().unwrap()) as usize;
            bytes[name..].starts_with(b"alpha\0")
        })
        .unwrap();
    bytes[alpha + 16..alpha + 24].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let patched = dir.path().join("patched");
    std::fs::write(&patched, &bytes).unwrap();
    let info = ElfInfo::open(&patched, &SymbolOptions::default()).unwrap();
    let f = info.functions.iter().find(|f| f.names.iter().any(|n| n == "alpha")).unwrap();
    let sec = info.section(&f.section).unwrap();
    assert!(f.address + f.size <= sec.address + sec.size, "{f:?} past {sec:?}");
}
