//! An order file in any of the formats `coldstart order` writes (`bolt --order`, `verify`):
//! every name it gives is in the text.
#![no_main]

use coldstart_layout::verify::parse_order_file;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for name in parse_order_file(text) {
        assert!(text.contains(name.as_str()), "{name:?}");
    }
});
