//! The start object and the compressed manifest as a server sends them: the header parsed,
//! the stored manifest decoded (never to more than it says, never bytes that fail their
//! digest), and `manifest.json.zst` decoded and parsed.
#![no_main]

use coldstart_bundle::start::{parse_compressed_manifest, StartHeader, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(head) = data.get(..HEADER_LEN) {
        if let Ok(h) = StartHeader::parse(head.try_into().unwrap()) {
            let end = (HEADER_LEN as u64).saturating_add(h.manifest_stored);
            let stored = data.get(HEADER_LEN..(end.min(data.len() as u64)) as usize).unwrap_or(&[]);
            if let Ok(json) = h.decode_manifest(stored) {
                assert_eq!(json.len() as u64, h.manifest_len);
            }
            let _ = h.total_len();
        }
    }
    let _ = parse_compressed_manifest(data);
});
