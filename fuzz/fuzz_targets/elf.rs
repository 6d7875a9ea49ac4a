//! An ELF file, through `coldstart-elf`'s public reader (which opens a path) and on through what
//! `analyze` and `order` do with it (`coldstart-layout`: the static picture, the page model, the
//! relocation counts, the call graph): read or refused, never a crash, and never an allocation
//! sized by a number of the file rather than by the file (run it with `-malloc_limit_mb`, as
//! `bench/fuzz.sh` and `scripts/test.sh` do, so that one is a crash). The bytes go to a file
//! in /dev/shm first, removed when the input is done.
#![no_main]

use coldstart_elf::{ElfInfo, SymbolOptions};
use coldstart_layout::analyze::analyze;
use coldstart_layout::binary::{cross_section_code_relocations, Binary};
use coldstart_layout::callgraph::CallGraph;
use coldstart_layout::model::PageModel;
use libfuzzer_sys::fuzz_target;

/// The file an input is written to, removed when it goes out of scope.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fuzz_target!(|data: &[u8]| {
    let scratch =
        Scratch(format!("/dev/shm/coldstart-fuzz-elf-{}", std::process::id()).into());
    let path = &scratch.0;
    std::fs::write(path, data).unwrap();
    let options = SymbolOptions { use_debug_files: false, ..SymbolOptions::default() };
    if let Ok(info) = ElfInfo::open(path, &options) {
        let _ = info.build_id_hex();
        for v in [0, 0x1000, 0x401000, u64::MAX] {
            let _ = (info.vaddr_to_offset(v), info.function_at(v), info.section_at(v));
        }
        if let Ok(binary) = Binary::open(path) {
            let _ = binary.rela_dyn_counts();
            let _ = analyze(&binary, None, None, PageModel::default());
        }
        let _ = cross_section_code_relocations(path);
        let _ = CallGraph::read(path, true);
    }
});
