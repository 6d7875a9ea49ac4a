//! An ELF file, through `coldstart-elf`'s public reader (which opens a path): read or refused,
//! never a crash. The bytes go to a file in /dev/shm first.
#![no_main]

use coldstart_elf::{ElfInfo, SymbolOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path =
        std::path::PathBuf::from(format!("/dev/shm/coldstart-fuzz-elf-{}", std::process::id()));
    std::fs::write(&path, data).unwrap();
    let options = SymbolOptions { use_debug_files: false, ..SymbolOptions::default() };
    if let Ok(info) = ElfInfo::open(&path, &options) {
        let _ = info.build_id_hex();
        for v in [0, 0x1000, 0x401000, u64::MAX] {
            let _ = (info.vaddr_to_offset(v), info.function_at(v), info.section_at(v));
        }
    }
});
