//! Property tests of the parsers of untrusted bytes that live in crates of other stages, through
//! their public APIs: a profile (`coldstart-profile-format`), an order file (`verify`'s reader in
//! `coldstart-layout`) and an ELF file (`coldstart-elf`). Arbitrary and mutated inputs are read
//! or refused, never a panic. Few cases, so the suite stays fast; `fuzz/` runs the same parsers
//! for millions of inputs. (The page tracer's tracefs lines are parsed by a private function of
//! `coldstart-profile`, property-tested next to it.)

use coldstart_testkit::mutation::{edits, mutate};
use proptest::prelude::*;

const PROFILE: &str = include_str!("../../../fuzz/seeds/profile/example.json");
const ORDER: &str = include_str!("../../../fuzz/seeds/order_file/gnu-ld.txt");

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_profile_is_read_or_refused(edits in edits()) {
        let bytes = mutate(PROFILE.as_bytes(), &edits);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            if let Ok(p) = coldstart_profile_format::Profile::from_json("p.json".as_ref(), text) {
                let _ = p.first_touch_order();
            }
        }
    }

    #[test]
    fn an_order_file_gives_only_names_it_holds(edits in edits(), text in ".{0,200}") {
        let mutated = String::from_utf8_lossy(&mutate(ORDER.as_bytes(), &edits)).into_owned();
        for t in [mutated, text] {
            for name in coldstart_layout::verify::parse_order_file(&t) {
                prop_assert!(t.contains(name.as_str()), "{:?}", name);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn an_elf_file_is_read_or_refused(edits in edits(), cut in 0.0..1.0f64) {
        let real = std::fs::read("/usr/bin/true").unwrap();
        let mut bytes = mutate(&real, &edits);
        if cut < 0.2 {
            bytes.truncate((bytes.len() as f64 * cut * 5.0) as usize);
        }
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), &bytes).unwrap();
        let options = coldstart_elf::SymbolOptions { use_debug_files: false, ..Default::default() };
        if let Ok(info) = coldstart_elf::ElfInfo::open(f.path(), &options) {
            let _ = info.build_id_hex();
            for v in [0, 0x1000, u64::MAX] {
                let _ = (info.vaddr_to_offset(v), info.function_at(v), info.section_at(v));
            }
        }
    }
}
