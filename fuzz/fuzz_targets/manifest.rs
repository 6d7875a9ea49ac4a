//! `manifest.json` as a server sends it: parsed and validated, or refused with a message that
//! prints no control character; a manifest that is accepted round-trips.
#![no_main]

use coldstart_bundle::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match Manifest::parse(data) {
        Ok(m) => {
            assert_eq!(Manifest::parse(&m.to_bytes()).expect("an accepted manifest re-reads"), m);
            // What a mount computes from it must not overflow or panic.
            let _ = (m.hot_chunks(), m.stored_bytes(), m.total_bytes());
        }
        Err(e) => assert!(!e.to_string().chars().any(|c| c.is_control()), "{e:?}"),
    }
});
