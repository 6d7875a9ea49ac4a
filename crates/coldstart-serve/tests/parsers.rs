//! Property tests of what `coldstart serve` parses from a client (the request head, ranges):
//! arbitrary and mutated heads get a status, never a panic. `fuzz/` runs the same parser for
//! millions of inputs.

use coldstart_serve::request_status;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_head_gets_a_status(bytes in prop::collection::vec(any::<u8>(), 0..500)) {
        let status = request_status(&bytes);
        prop_assert!((200..600).contains(&status));
    }

    #[test]
    fn a_well_formed_range_is_served_or_unsatisfiable(
        a in 0..2000u64,
        len in 0..2000u64,
        lf in any::<bool>(),
        suffix in any::<bool>(),
    ) {
        let eol = if lf { "\n" } else { "\r\n" };
        let range = if suffix { format!("-{len}") } else { format!("{a}-{}", a + len) };
        let head = format!("GET /f HTTP/1.1{eol}Host: x{eol}Range: bytes={range}");
        // The file is 1000 bytes.
        let want = match (suffix, len) {
            (true, 0) => 416,
            (true, _) => 206,
            (false, _) if a < 1000 => 206,
            _ => 416,
        };
        prop_assert_eq!(request_status(head.as_bytes()), want);
    }
}
