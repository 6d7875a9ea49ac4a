//! An HTTP response as a server sends it, read the way the fetcher reads it: the body is at
//! most what was asked for, and exactly a range's length when a range is returned.
#![no_main]

use coldstart_bundle::remote::{parse_response, Span};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first bytes choose what was asked for.
    let Some((&[kind, a, b], response)) = data.split_first_chunk::<3>() else { return };
    let span = match kind % 3 {
        0 => Span::Whole { max: 1 + (a as u64) * 256 + b as u64 },
        1 => Span::Range(a as u64, a as u64 + b as u64 + 1),
        _ => Span::Range(u64::MAX - 10, u64::MAX),
    };
    if let Ok(body) = parse_response(response, span) {
        assert!(body.len() as u64 <= span.max_len());
        if let Span::Range(s, e) = span {
            assert_eq!(body.len() as u64, e - s);
        }
    }
});
