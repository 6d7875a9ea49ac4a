//! A profile (`coldstart profile -o P.json`), through the format crate's public reader: read
//! or refused; one that is read gives its first-touch order.
#![no_main]

use coldstart_profile_format::Profile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(p) = Profile::from_json("fuzz.json".as_ref(), text) {
        let _ = p.first_touch_order();
    }
});
