use super::*;

fn h(c: char) -> Sha256Hex {
    Sha256Hex::new(std::iter::repeat_n(c, 64).collect()).unwrap()
}

fn good() -> Manifest {
    Manifest {
        format: FORMAT.into(),
        version: VERSION,
        chunk_size: 4,
        compression: Compression::None,
        files: vec![
            Entry::dir("bin", 0o755),
            Entry {
                path: "bin/app".into(),
                kind: EntryKind::File,
                mode: 0o755,
                size: 6,
                target: None,
                chunks: vec![
                    Chunk {
                        offset: 0,
                        length: 4,
                        sha256: h('a'),
                        stored: None,
                        object: Some(0),
                        at: 0,
                    },
                    Chunk {
                        offset: 4,
                        length: 2,
                        sha256: h('b'),
                        stored: None,
                        object: None,
                        at: 0,
                    },
                ],
                sha256: Some(h('c')),
                mtime: 1_700_000_000,
                mtime_nsec: 5,
            },
            Entry::symlink("bin/link", "app".into()),
        ],
        objects: vec![Object { sha256: h('d'), size: 4 }],
        hot: HotSet {
            offset: 200,
            size: 2,
            chunks: vec![ChunkRef { path: "bin/app".into(), index: 1 }],
        },
    }
}

fn reject(m: Manifest) -> ManifestError {
    let bytes = serde_json::to_vec(&m).unwrap();
    Manifest::parse(&bytes).expect_err("must be rejected")
}

#[test]
fn a_good_manifest_round_trips() {
    let m = good();
    assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m);
}

#[test]
fn dot_dot_and_absolute_paths_are_rejected() {
    for bad in ["../etc/passwd", "/etc/passwd", "bin/../../x", "bin/./app", "", "bin//app"] {
        let mut m = good();
        m.files[1].path = bad.into();
        assert!(
            matches!(reject(m), ManifestError::UnsafePath(_)),
            "{bad:?} must be an unsafe path"
        );
    }
}

#[test]
fn overlapping_chunks_are_rejected() {
    let mut m = good();
    m.files[1].chunks[1].offset = 3;
    assert!(matches!(reject(m), ManifestError::Overlap { index: 1, offset: 3, .. }));
}

#[test]
fn sizes_that_do_not_add_up_are_rejected() {
    let mut m = good();
    m.files[1].size = 7;
    assert!(matches!(reject(m), ManifestError::Size { .. }));
    let mut m = good();
    m.files[1].chunks[1].offset = 5;
    assert!(matches!(reject(m), ManifestError::Size { .. }));
    let mut m = good();
    m.hot.size = 3;
    assert!(matches!(reject(m), ManifestError::HotSize { stated: 3, actual: 2 }));
}

#[test]
fn a_mode_with_more_than_permission_bits_is_rejected() {
    let mut m = good();
    m.files[1].mode = 0o170755;
    let err = reject(m);
    assert!(matches!(err, ManifestError::Mode { mode: 0o170755, .. }), "{err}");
    assert!(err.to_string().contains("0o170755"), "{err}");
    let mut m = good();
    m.files[1].mode = 0o7777;
    Manifest::parse(&m.to_bytes()).unwrap();
}

#[test]
fn a_hot_offset_past_any_start_object_header_is_rejected() {
    for offset in [
        u64::MAX - 1,
        u64::MAX / 2,
        crate::start::header::HEADER_LEN as u64 + crate::start::header::MAX_MANIFEST + 1,
    ] {
        let mut m = good();
        m.hot.offset = offset;
        assert!(matches!(reject(m), ManifestError::HotOffset(o) if o == offset), "{offset}");
    }
}

#[test]
fn a_version_3_manifest_is_refused_with_what_to_do() {
    for v in [1, 2, 3] {
        let mut m = good();
        m.version = v;
        let err = reject(m);
        assert!(matches!(err, ManifestError::Version(x) if x == v));
        let text = err.to_string();
        assert!(text.contains(&format!("version {v}")), "{text}");
        assert!(text.contains("re-pack"), "{text}");
        assert_eq!(err.category(), Category::Usage);
    }
}

#[test]
fn pieces_outside_their_object_are_rejected() {
    let mut m = good();
    m.files[1].chunks[0].object = Some(1);
    assert!(reject(m).to_string().contains("object is not in the manifest"));
    let mut m = good();
    m.files[1].chunks[0].at = 1;
    assert!(reject(m).to_string().contains("past its object's end"));
    let mut m = good();
    m.files[1].chunks[1].object = Some(0);
    assert!(reject(m).to_string().contains("not in the hot part"));
    let mut m = good();
    m.files[1].chunks[0].at = u64::MAX;
    assert!(matches!(reject(m), ManifestError::Stored { index: 0, .. }));
}

#[test]
fn a_piece_is_located_in_its_object_or_the_start_objects_hot_part() {
    let m = good();
    let app = &m.files[1];
    assert_eq!(m.locate(&app.chunks[0]), (crate::object_path(&h('d')), 0));
    assert_eq!(m.locate(&app.chunks[1]), ("start".to_owned(), 200));
    let by_object = m.pieces_by_object();
    assert_eq!(by_object.len(), 2);
    assert_eq!((by_object[0].0, by_object[0].1.len()), (None, 1));
    assert_eq!((by_object[1].0, by_object[1].1.len()), (Some(0), 1));
}

#[test]
fn times_are_kept_and_bad_nanoseconds_refused() {
    let m = good();
    let read = Manifest::parse(&m.to_bytes()).unwrap();
    assert_eq!((read.files[1].mtime, read.files[1].mtime_nsec), (1_700_000_000, 5));
    let mut m = good();
    m.files[1].mtime_nsec = 1_000_000_000;
    assert!(reject(m).to_string().contains("mtime_nsec"));
}

#[test]
fn unknown_version_and_format_are_rejected_by_name() {
    for v in [1, 5] {
        let mut m = good();
        m.version = v;
        let err = reject(m);
        assert!(matches!(err, ManifestError::Version(x) if x == v));
        assert!(err.to_string().contains(&format!("version {v}")), "{err}");
    }
    let mut m = good();
    m.files[1].sha256 = None;
    assert!(matches!(reject(m), ManifestError::NoFileDigest(_)));
    let mut m = good();
    m.format = "tar".into();
    assert!(matches!(reject(m), ManifestError::Format(_)));
}

#[test]
fn missing_parents_duplicates_and_bad_hot_refs_are_rejected() {
    let mut m = good();
    m.files.remove(0);
    assert!(matches!(reject(m), ManifestError::NoParent(_)));
    let mut m = good();
    m.files.push(m.files[2].clone());
    assert!(matches!(reject(m), ManifestError::Duplicate(_)));
    let mut m = good();
    m.hot.chunks[0].index = 2;
    assert!(matches!(reject(m), ManifestError::HotRef { .. }));
    let mut m = good();
    m.hot.chunks.push(m.hot.chunks[0].clone());
    m.hot.size = 4;
    assert!(matches!(reject(m), ManifestError::HotDuplicate { .. }));
}

#[test]
fn stored_lengths_must_match_the_compression() {
    let mut m = good();
    m.files[1].chunks[0].stored = Some(3);
    assert!(matches!(reject(m), ManifestError::Stored { index: 0, .. }));
    let mut m = good();
    m.compression = Compression::Zstd;
    assert!(matches!(reject(m), ManifestError::Stored { index: 0, .. }));
    let mut m = good();
    m.compression = Compression::Zstd;
    m.objects[0].size = 9;
    m.files[1].chunks[0].stored = Some(9);
    m.files[1].chunks[1].stored = Some(1000);
    m.hot.size = 1000;
    assert!(matches!(reject(m), ManifestError::Stored { index: 1, .. }));
    // The hot set's size counts stored bytes.
    let mut m = good();
    m.compression = Compression::Zstd;
    m.objects[0].size = 9;
    m.files[1].chunks[0].stored = Some(9);
    m.files[1].chunks[1].stored = Some(11);
    assert!(matches!(reject(m.clone()), ManifestError::Stored { index: 1, .. }));
    m.hot.size = 11;
    assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m);
}

#[test]
fn a_chunk_size_no_reader_can_hold_is_rejected() {
    for size in [0, MAX_CHUNK_SIZE + 1, 1 << 50] {
        let mut m = good();
        m.chunk_size = size;
        let err = reject(m);
        assert!(matches!(err, ManifestError::ChunkSize(s) if s == size), "{err}");
        assert!(err.to_string().contains("64 MiB"), "{err}");
    }
    let mut m = good();
    m.chunk_size = MAX_CHUNK_SIZE;
    assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m);
}

#[test]
fn control_characters_in_manifest_paths_are_escaped_in_messages() {
    let mut m = good();
    m.files[1].path = "\u{1b}[31mred\nline/app".into();
    m.hot.chunks[0].path = m.files[1].path.clone();
    let err = reject(m);
    let text = err.to_string();
    assert!(matches!(err, ManifestError::NoParent(_)), "{text}");
    assert!(!text.chars().any(char::is_control), "{text:?}");
    assert!(text.contains("\\u{1b}[31mred\\nline"), "{text}");
    let long = "x".repeat(10_000);
    assert!(shown(&long).len() < 400);
}

/// Found by the `manifest` fuzz target: serde_json's message for an unknown variant quoted
/// it raw, control characters included; so did the message for an unknown format.
#[test]
fn control_characters_in_what_json_did_not_expect_are_escaped() {
    let text = String::from_utf8(good().to_bytes()).unwrap().replacen(
        "\"kind\": \"file\"",
        "\"kind\": \"\\u007f\\u001b[2Jfile\"",
        1,
    );
    let err = Manifest::parse(text.as_bytes()).unwrap_err();
    assert!(matches!(err, ManifestError::Json(_)));
    let shown = err.to_string();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert!(shown.contains("\\u{1b}[2Jfile"), "{shown}");
    // And the format name, found next.
    let text = String::from_utf8(good().to_bytes()).unwrap().replacen(
        "coldstart-bundle",
        "c\\u007fldstart-bundle",
        1,
    );
    let err = Manifest::parse(text.as_bytes()).unwrap_err();
    assert!(matches!(err, ManifestError::Format(_)));
    assert!(!err.to_string().chars().any(char::is_control), "{err}");
}

#[test]
fn paths_longer_than_linux_takes_are_rejected() {
    let mut m = good();
    m.files[2].path = format!("bin/{}", "n".repeat(MAX_NAME + 1));
    assert!(matches!(reject(m), ManifestError::LongPath(_)));
    let mut m = good();
    let target = "t".repeat(MAX_PATH + 1);
    m.files[2].size = target.len() as u64;
    m.files[2].target = Some(target);
    assert!(matches!(reject(m), ManifestError::LongPath(_)));
}

#[test]
fn bad_digest_is_rejected() {
    let text = String::from_utf8(good().to_bytes()).unwrap().replace(&"a".repeat(64), "xyz");
    assert!(matches!(Manifest::parse(text.as_bytes()), Err(ManifestError::Json(_))));
}
