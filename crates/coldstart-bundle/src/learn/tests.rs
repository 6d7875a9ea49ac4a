use super::*;

fn sha(c: char) -> Sha256Hex {
    Sha256Hex::new(c.to_string().repeat(64)).unwrap()
}

fn record(pieces: &[(usize, u64, u64, u64)]) -> Record {
    Record {
        format: FORMAT.into(),
        version: VERSION,
        bundle: sha('b'),
        strategy: "stream".into(),
        completed: true,
        truncated: false,
        files: vec![
            RecordFile { sha256: sha('1'), size: 1 << 20 },
            RecordFile { sha256: sha('2'), size: 100_000 },
        ],
        pieces: pieces
            .iter()
            .map(|&(file, offset, length, ms)| RecordPiece {
                file,
                offset,
                length,
                stored: length,
                ms,
                read: None,
            })
            .collect(),
    }
}

#[test]
fn a_record_round_trips() {
    let r = record(&[(0, 65536, 65536, 3), (1, 0, 4096, 9)]);
    let bytes = r.to_bytes();
    assert_eq!(Record::parse(&bytes).unwrap(), r);
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.starts_with(r#"{"format":"coldstart-learn-record","version":1,"#), "{text}");
    assert!(!text.contains("truncated"), "false is not written");
}

#[test]
fn a_hostile_record_is_refused_with_the_rule_it_broke() {
    let refused = |r: &Record| Record::parse(&r.to_bytes()).unwrap_err().to_string();
    let e = refused(&record(&[(0, (1 << 20) - 4096, 8192, 0)]));
    assert!(e.contains("piece 0") && e.contains("beyond its file's 1048576 bytes"), "{e}");
    let e = refused(&record(&[(0, u64::MAX - 10, 100, 0)]));
    assert!(e.contains("beyond"), "{e}");
    let e = refused(&record(&[(2, 0, 4096, 0)]));
    assert!(e.contains("names file 2, but the record has 2 files"), "{e}");
    let e = refused(&record(&[(0, 0, 4096, 5), (0, 0, 4096, 6)]));
    assert!(e.contains("appears twice"), "{e}");
    let e = refused(&record(&[(0, 0, 4096, 5), (0, 4096, 4096, 4)]));
    assert!(e.contains("first-read order"), "{e}");
    let e = refused(&record(&[(0, 0, 0, 5)]));
    assert!(e.contains("has length 0"), "{e}");
    let mut r = record(&[(0, 0, 4096, 0)]);
    r.pieces[0].stored = 1 << 30;
    assert!(refused(&r).contains("stored length"));
    let mut r = record(&[]);
    r.files[1].sha256 = sha('1');
    assert!(refused(&r).contains("appears twice"));
    // Too many pieces: each is checked against the bound before anything else.
    let many: Vec<_> = (0..MAX_PIECES as u64 + 1).map(|i| (0, i * 64, 64, 0)).collect();
    let e = refused(&record(&many));
    assert!(e.contains("10001 pieces, over the 10000"), "{e}");
    // Too large, before it is parsed at all.
    let big = vec![b' '; MAX_RECORD_BYTES + 1];
    let e = Record::parse(&big).unwrap_err().to_string();
    assert!(e.contains("over the 2097152"), "{e}");
    // Fields it does not know, another format or version.
    let text = String::from_utf8(record(&[]).to_bytes()).unwrap();
    let e =
        Record::parse(text.replace("\"completed\"", "\"content\":\"x\",\"completed\"").as_bytes());
    assert!(e.unwrap_err().to_string().contains("unknown field"));
    let e = Record::parse(text.replace("\"version\":1", "\"version\":9").as_bytes());
    assert!(e.unwrap_err().to_string().contains("version 9"));
    let e = Record::parse(b"{\"format\":\"coldstart-hot-list\",\"version\":1}");
    assert!(e.unwrap_err().to_string().contains("coldstart-hot-list"));
}

#[test]
fn the_largest_record_written_is_read_back() {
    let mut r = record(&[]);
    r.files = (0..MAX_FILES)
        .map(|i| RecordFile {
            sha256: Sha256Hex::new(format!("{i:064x}")).unwrap(),
            size: u64::MAX,
        })
        .collect();
    r.pieces = (0..MAX_PIECES)
        .map(|i| RecordPiece {
            file: MAX_FILES - 1,
            offset: u64::MAX - MAX_CHUNK_SIZE * (i as u64 + 1),
            length: MAX_CHUNK_SIZE,
            stored: MAX_CHUNK_SIZE,
            ms: MAX_MS,
            read: Some([
                u64::MAX - MAX_CHUNK_SIZE * (i as u64 + 1),
                u64::MAX - MAX_CHUNK_SIZE * i as u64,
            ]),
        })
        .collect();
    let bytes = r.to_bytes();
    assert!(bytes.len() < MAX_RECORD_BYTES, "{} bytes", bytes.len());
    assert_eq!(Record::parse(&bytes).unwrap(), r);
}

#[test]
fn merge_keeps_what_enough_starts_read_and_what_pays_by_median_time() {
    let opts = MergeOptions::default();
    let a = record(&[(0, 0, 65536, 10), (0, 65536, 65536, 40), (1, 0, 4096, 50)]);
    let b = record(&[(0, 65536, 65536, 20), (0, 0, 65536, 30)]);
    let c = record(&[(0, 0, 65536, 5), (1, 0, 4096, 90)]);
    let mut failed = record(&[(0, 131072, 65536, 1)]);
    failed.completed = false;
    let m = merge(&[a, b, c, failed], &opts);
    assert_eq!((m.starts, m.incomplete, m.distinct), (3, 1, 3));
    let got: Vec<(char, u64, u64)> = m
        .pieces
        .iter()
        .map(|p| (p.sha256.as_str().chars().next().unwrap(), p.offset, p.median_ms))
        .collect();
    // Piece (1, 0): two of three starts, median of 50 and 90 is the lower, 50.
    assert_eq!(got, [('1', 0, 10), ('1', 65536, 20), ('2', 0, 50)]);
    // At a share of 3/4, only the piece all three read.
    let m = merge(&m_records(), &MergeOptions { share: 0.75, ..opts });
    assert_eq!(m.pieces.len(), 1);
    assert_eq!(m.below_share, 2);
}

fn m_records() -> Vec<Record> {
    vec![
        record(&[(0, 0, 65536, 10), (0, 65536, 65536, 40), (1, 0, 4096, 50)]),
        record(&[(0, 65536, 65536, 20), (0, 0, 65536, 30)]),
        record(&[(0, 0, 65536, 5), (1, 0, 4096, 90)]),
    ]
}

#[test]
fn eq3_keeps_a_piece_out_where_it_does_not_pay() {
    // 20 Mbit/s, 40 ms: 64 KiB take 26 ms, so a piece pays when read by 40% of the starts.
    let opts = MergeOptions { share: 0.0, ..MergeOptions::default() };
    assert!(pays(0.41, 65536, &opts));
    assert!(!pays(0.39, 65536, &opts));
    // A 64 MiB piece read by 9 of 10 starts does not pay on that link: 27 s against 40 ms.
    assert!(!pays(0.9, 64 << 20, &opts));
    let records: Vec<Record> =
        (0..5).map(|i| if i < 2 { record(&[(0, 0, 65536, 1)]) } else { record(&[]) }).collect();
    let m = merge(&records, &opts);
    assert_eq!((m.pieces.len(), m.not_paying), (1, 0), "2 of 5 is 40%: just pays");
    let records: Vec<Record> =
        (0..3).map(|i| if i < 1 { record(&[(0, 0, 65536, 1)]) } else { record(&[]) }).collect();
    let m = merge(&records, &opts);
    assert_eq!((m.pieces.len(), m.not_paying), (0, 1), "1 of 3 does not");
}

#[test]
fn a_record_of_reads_names_files_by_content_and_is_valid() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("lib")).unwrap();
    std::fs::write(src.join("app"), vec![7u8; 200_000]).unwrap();
    std::fs::write(src.join("lib/x"), vec![9u8; 50_000]).unwrap();
    let opts = crate::PackOptions { chunk_size: 65536, ..Default::default() };
    let m = crate::pack(&src, &crate::HotList::default(), &opts, &d.path().join("b")).unwrap();
    let app = m.files.iter().position(|e| e.path == "app").unwrap();
    let lib = m.files.iter().position(|e| e.path == "lib/x").unwrap();
    let reads = [
        (app, 2, 5, Some((135_168, 143_360))),
        (lib, 0, 7, None),
        (app, 2, 8, None),
        (app, 0, 3, Some((0, 65536))),
        (1, 0, 9, None),
        (app, 99, 9, None),
    ];
    let r = Record::of_reads(&m, sha('b'), "paged", true, &reads);
    // The repeat, the directory and the piece past the end are left out; times never go back;
    // the part read is kept where it is less than the piece.
    let got: Vec<_> = r.pieces.iter().map(|p| (p.file, p.offset, p.length, p.ms, p.read)).collect();
    let want = [
        (0, 131072, 65536, 5, Some([135_168, 143_360])),
        (1, 0, 50_000, 7, None),
        (0, 0, 65536, 7, None),
    ];
    assert_eq!(got, want);
    assert_eq!(r.files[0].sha256, *m.files[app].sha256.as_ref().unwrap());
    assert_eq!(r.files[0].size, 200_000);
    assert_eq!(Record::parse(&r.to_bytes()).unwrap(), r);
    assert!(!String::from_utf8(r.to_bytes()).unwrap().contains("lib/x"), "no path");
}

#[test]
fn a_record_says_which_part_of_a_piece_was_read_and_only_a_part_of_it() {
    let mut r = record(&[(0, 65536, 65536, 3)]);
    r.pieces[0].read = Some([69_632, 73_728]);
    let text = String::from_utf8(r.to_bytes()).unwrap();
    assert!(text.contains(r#""read":[69632,73728]"#), "{text}");
    assert_eq!(Record::parse(text.as_bytes()).unwrap(), r);
    for bad in [[0, 4096], [69_632, 69_632], [73_728, 69_632], [126_976, 135_168]] {
        r.pieces[0].read = Some(bad);
        let e = Record::parse(&r.to_bytes()).unwrap_err().to_string();
        assert!(e.contains("not a part of its 65536+65536"), "{bad:?}: {e}");
    }
}

#[test]
fn the_part_read_of_a_piece_is_what_joins_the_hot_set_across_the_starts() {
    // Three starts read pages of one 64 KiB piece: 2, then 2 and 5, then none but page 9 (in a
    // record of an older coldstart, without `read`: the whole piece).
    let page = |p: u64| [65536 + p * 4096, 65536 + (p + 1) * 4096];
    let mut one = record(&[(0, 65536, 65536, 3)]);
    one.pieces[0].read = Some(page(2));
    let mut two = record(&[(0, 65536, 65536, 4)]);
    two.pieces[0].read = Some([page(2)[0], page(5)[1]]);
    let m = merge(&[one.clone(), two.clone()], &MergeOptions::default());
    let got: Vec<(u64, u64)> = m.pieces.iter().map(|p| (p.offset, p.length)).collect();
    assert_eq!(got, [(page(2)[0], 4 * 4096)], "the union of the parts read");
    let whole = record(&[(0, 65536, 65536, 5)]);
    let m = merge(&[one, two, whole], &MergeOptions::default());
    let got: Vec<(u64, u64)> = m.pieces.iter().map(|p| (p.offset, p.length)).collect();
    assert_eq!(got, [(65536, 65536)], "a record without a part read names the whole piece");
    // Eq. 3 weighs the part: one page read by a third of the starts pays where the whole
    // piece would not (4 KiB at 20 Mbit/s is 1.6 ms against a 40 ms round trip).
    let mut rare = record(&[(0, 65536, 65536, 3)]);
    rare.pieces[0].read = Some(page(7));
    let empty = record(&[]);
    let opts = MergeOptions { share: 0.3, ..MergeOptions::default() };
    let m = merge(&[rare.clone(), empty.clone(), empty.clone()], &opts);
    assert_eq!(m.pieces.len(), 1, "{m:?}");
    rare.pieces[0].read = None;
    let m = merge(&[rare, empty.clone(), empty], &opts);
    assert_eq!((m.pieces.len(), m.not_paying), (0, 1), "{m:?}");
}
