//! A hot list (`pack --hot-list`, `mount --record`): read or refused.
#![no_main]

use coldstart_bundle::HotList;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = HotList::parse("fuzz.json", data) {
        assert!(!e.to_string().chars().any(|c| c.is_control()), "{e:?}");
    }
});
