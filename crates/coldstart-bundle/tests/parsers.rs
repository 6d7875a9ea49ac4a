//! Property tests of the parsers of what a server sends (the manifest, the start object, the
//! compressed manifest, the hot list, an HTTP response): arbitrary and mutated inputs are
//! read or refused, never a panic, and what is accepted keeps its promises. Few cases, so
//! the suite stays fast; `fuzz/` runs the same parsers for millions of inputs.

use coldstart_bundle::remote::{parse_response, Span};
use coldstart_bundle::start::{encode, parse_compressed_manifest, StartHeader, HEADER_LEN};
use coldstart_bundle::{HotList, Manifest};
use coldstart_testkit::mutation::{edits, mutate};
use proptest::prelude::*;

/// A valid manifest: two files, a directory, a symbolic link and a hot set.
const MANIFEST: &str = include_str!("../../../fuzz/seeds/manifest/plain.json");

fn no_control(text: &str) -> bool {
    !text.chars().any(char::is_control)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_manifest_is_read_and_round_trips_or_is_refused_in_printable_words(
        edits in edits(),
        junk in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        for bytes in [mutate(MANIFEST.as_bytes(), &edits), junk] {
            match Manifest::parse(&bytes) {
                Ok(m) => {
                    prop_assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m.clone());
                    let _ = (m.hot_chunks(), m.stored_bytes(), m.total_bytes());
                }
                Err(e) => prop_assert!(no_control(&e.to_string()), "{:?}", e.to_string()),
            }
        }
    }

    #[test]
    fn a_start_object_round_trips_and_damage_is_never_taken_for_its_manifest(
        json in prop::collection::vec(any::<u8>(), 0..2000),
        hot in prop::collection::vec(any::<u8>(), 0..500),
        edits in edits(),
    ) {
        let at = coldstart_bundle::start::manifest_end(&json) + 7;
        let object = encode(&json, &hot, at);
        let h = StartHeader::parse(object[..HEADER_LEN].try_into().unwrap()).unwrap();
        prop_assert_eq!(h.total_len(), object.len() as u64);
        prop_assert_eq!(h.hot_offset(), at);
        prop_assert_eq!(&object[at as usize..], &hot[..]);
        let stored = &object[HEADER_LEN..h.manifest_end() as usize];
        prop_assert_eq!(&h.decode_manifest(stored).unwrap(), &json);
        // Damaged: refused, or (when the edits undo each other or miss the manifest) exactly
        // the manifest.
        let bad = mutate(&object, &edits);
        if let Some(head) = bad.get(..HEADER_LEN) {
            if let Ok(h2) = StartHeader::parse(head.try_into().unwrap()) {
                let end = (HEADER_LEN as u64 + h2.manifest_stored).min(bad.len() as u64);
                if let Ok(got) = h2.decode_manifest(&bad[HEADER_LEN..end as usize]) {
                    prop_assert_eq!(got, json.clone());
                }
            }
        }
        let _ = parse_compressed_manifest(&bad);
    }

    #[test]
    fn a_hot_list_is_read_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Err(e) = HotList::parse("h.json", &bytes) {
            prop_assert!(no_control(&e.to_string()));
        }
    }

    #[test]
    fn a_response_gives_exactly_the_range_asked_for_or_fails(
        body in prop::collection::vec(any::<u8>(), 1..3000),
        from in 0.0..1.0f64,
        to in 0.0..1.0f64,
        partial in any::<bool>(),
        lf in any::<bool>(),
    ) {
        let n = body.len() as u64;
        let (a, b) = ((n as f64 * from) as u64, (n as f64 * to) as u64);
        let (s, e) = (a.min(b), a.max(b) + 1);
        let e = e.min(n);
        prop_assume!(s < e);
        let eol = if lf { "\n" } else { "\r\n" };
        let mut response = if partial {
            format!("HTTP/1.1 206 Partial{eol}Content-Range: bytes {s}-{}/{n}{eol}Content-Length: {}{eol}{eol}", e - 1, e - s)
                .into_bytes()
        } else {
            format!("HTTP/1.1 200 OK{eol}Content-Length: {n}{eol}{eol}").into_bytes()
        };
        let head = response.len();
        response.extend_from_slice(if partial { &body[s as usize..e as usize] } else { &body });
        prop_assert_eq!(parse_response(&response, Span::Range(s, e)).unwrap(), body[s as usize..e as usize].to_vec());
        // Cut before the range's last byte: an error, never a short body.
        let cut = &response[..head + if partial { e - s } else { e } as usize - 1];
        prop_assert!(parse_response(cut, Span::Range(s, e)).is_err());
        // A whole body longer than allowed is refused.
        if !partial {
            let (short, enough) = (Span::Whole { max: n - 1 }, Span::Whole { max: n });
            prop_assert!(parse_response(&response, short).is_err());
            prop_assert_eq!(parse_response(&response, enough).unwrap(), body.clone());
        }
    }

    #[test]
    fn arbitrary_responses_never_bring_more_than_asked(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
        max in 0..100u64,
    ) {
        let mut r = b"HTTP/1.1 200 OK\r\n".to_vec();
        r.extend_from_slice(&bytes);
        for span in [Span::Whole { max }, Span::Range(3, 3 + max)] {
            for resp in [&bytes[..], &r[..]] {
                if let Ok(body) = parse_response(resp, span) {
                    prop_assert!(body.len() as u64 <= span.max_len());
                }
            }
        }
    }
}
