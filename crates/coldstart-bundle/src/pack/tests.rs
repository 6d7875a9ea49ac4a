//! The packer's unit tests.
use super::*;
use crate::hotlist::Touch;
use std::os::unix::fs::symlink;

fn tree() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    fs::create_dir(d.path().join("bin")).unwrap();
    fs::create_dir(d.path().join("lib")).unwrap();
    let app: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(d.path().join("bin/app"), &app).unwrap();
    fs::set_permissions(d.path().join("bin/app"), fs::Permissions::from_mode(0o755)).unwrap();
    // Two identical 4 KiB chunks and a copy of the whole file: stored once.
    fs::write(d.path().join("lib/zeros"), vec![0u8; 8192]).unwrap();
    fs::write(d.path().join("lib/copy"), &app).unwrap();
    fs::write(d.path().join("empty"), b"").unwrap();
    symlink("zeros", d.path().join("lib/link")).unwrap();
    d
}

fn hot() -> HotList {
    HotList {
        touches: vec![
            Touch { path: "bin/app".into(), offset: 9000, length: 10 },
            Touch { path: "lib/zeros".into(), offset: 0, length: 8192 },
            Touch { path: "/usr/lib/libc.so.6".into(), offset: 0, length: 4096 },
            Touch { path: "bin/app".into(), offset: 0, length: 1 },
        ],
        ..HotList::default()
    }
}

fn all_files(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                v.push((
                    p.strip_prefix(root).unwrap().display().to_string(),
                    fs::read(&p).unwrap(),
                ));
            }
        }
    }
    v.sort();
    v
}

#[test]
fn packing_is_deterministic_and_stores_each_byte_once() {
    let src = tree();
    let out = tempfile::tempdir().unwrap();
    let opts = PackOptions { chunk_size: 4096, ..PackOptions::default() };
    let m1 = pack(src.path(), &hot(), &opts, &out.path().join("a")).unwrap();
    let m2 = pack(src.path(), &hot(), &opts, &out.path().join("b")).unwrap();
    assert_eq!(m1, m2);
    assert_eq!(all_files(&out.path().join("a")), all_files(&out.path().join("b")));
    // bin/app: pages 0 and 2 hot, 1 cold; lib/zeros: hot, one distinct piece; lib/copy: the
    // same pieces as bin/app. One cold object, bin/app's middle piece, and nothing else.
    let objects = all_files(&out.path().join("a/blobs/cold"));
    assert_eq!(objects.len(), 1);
    let app_bytes = fs::read(src.path().join("bin/app")).unwrap();
    assert_eq!(objects[0].1, app_bytes[4096..8192]);
    assert_eq!(m1.objects.len(), 1);
    assert_eq!(objects[0].0, object_path(&m1.objects[0].sha256)["blobs/cold/".len()..]);
    assert_eq!(m1.objects[0].sha256, sha256_hex(&objects[0].1), "named by its bytes");
    // The origin holds the distinct pieces once: the hot part and the cold object.
    assert_eq!(m1.hot.size + m1.objects[0].size, m1.stored_bytes());
    assert_eq!(m1.stored_bytes(), 10_000 + 4096);
    let app = m1.entry("bin/app").unwrap();
    assert_eq!(app.sha256, m1.entry("lib/copy").unwrap().sha256);
    assert_eq!(app.chunks, m1.entry("lib/copy").unwrap().chunks, "the same locations");
    // Every piece reads back from where the manifest puts it.
    let start = fs::read(out.path().join("a").join(crate::start::START_OBJECT)).unwrap();
    for e in &m1.files {
        let data = fs::read(src.path().join(&e.path)).unwrap_or_default();
        for c in &e.chunks {
            let (object, at) = m1.locate(c);
            let bytes = if object == crate::start::START_OBJECT {
                start.clone()
            } else {
                fs::read(out.path().join("a").join(&object)).unwrap()
            };
            let stored = &bytes[at as usize..(at + c.stored_len()) as usize];
            assert_eq!(stored, &data[c.offset as usize..(c.offset + c.length) as usize]);
        }
    }
    let parsed = Manifest::parse(&fs::read(out.path().join("a/manifest.json")).unwrap()).unwrap();
    assert_eq!(parsed, m1);
    let link = m1.entry("lib/link").unwrap();
    assert_eq!((link.kind, link.target.as_deref()), (EntryKind::Symlink, Some("zeros")));
    assert_eq!(m1.entry("bin/app").unwrap().mode, 0o755);
    assert_eq!(m1.entry("empty").unwrap().size, 0);
}

#[test]
fn hot_pages_become_pieces_of_their_own_and_cold_data_stays_in_chunks() {
    let src = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..70_000u32).map(|i| (i * 13 % 253) as u8).collect();
    fs::write(src.path().join("f"), &data).unwrap();
    let hot = HotList {
        touches: vec![
            // Page 9 (clipped at the end of the file), then pages 1 and 2 (one run).
            Touch { path: "f".into(), offset: 39_000, length: 100 },
            Touch { path: "f".into(), offset: 5000, length: 100 },
            Touch { path: "f".into(), offset: 8192, length: 4096 },
            // Pages 10 to 15: longer than a chunk, cut at 16 KiB from its start.
            Touch { path: "f".into(), offset: 40_960, length: 6 * 4096 },
        ],
        ..HotList::default()
    };
    let out = tempfile::tempdir().unwrap();
    let opts = PackOptions { chunk_size: 16384, ..PackOptions::default() };
    let m = pack(src.path(), &hot, &opts, &out.path().join("b")).unwrap();
    let f = m.entry("f").unwrap();
    let pieces: Vec<(u64, u64)> = f.chunks.iter().map(|c| (c.offset, c.length)).collect();
    assert_eq!(
        pieces,
        vec![
            (0, 4096),              // cold, up to the first extent
            (4096, 8192),           // pages 1-2
            (12288, 4096),          // cold, up to the 16 KiB boundary
            (16384, 16384),         // cold
            (32768, 4096),          // cold, up to page 9
            (36864, 16384),         // pages 9-12: an extent longer than a chunk is cut
            (53248, 12288),         // pages 13-15
            (65536, 70000 - 65536), // cold, to the end
        ]
    );
    // Pages 9-15 are one run (pieces 5 and 6), first touched at page 9; then pages 1-2.
    let refs: Vec<usize> = m.hot.chunks.iter().map(|r| r.index).collect();
    assert_eq!(refs, vec![5, 1, 6]);
    assert_eq!(m.hot.size, 16384 + 8192 + 12288);
    for c in &f.chunks {
        let range = c.offset as usize..(c.offset + c.length) as usize;
        assert!(crate::verify_chunk(c, &data[range]));
    }
}

#[test]
fn times_modes_and_links_are_recorded() {
    let src = tree();
    let when = std::time::UNIX_EPOCH + std::time::Duration::new(1_600_000_000, 123_456_789);
    fs::File::options()
        .write(true)
        .open(src.path().join("bin/app"))
        .unwrap()
        .set_modified(when)
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let m = pack(src.path(), &hot(), &PackOptions::default(), &out.path().join("b")).unwrap();
    let app = m.entry("bin/app").unwrap();
    assert_eq!((app.mtime, app.mtime_nsec, app.mode), (1_600_000_000, 123_456_789, 0o755));
    let dir = fs::symlink_metadata(src.path().join("lib")).unwrap();
    assert_eq!(m.entry("lib").unwrap().mtime, dir.mtime());
    let link = fs::symlink_metadata(src.path().join("lib/link")).unwrap();
    assert_eq!(m.entry("lib/link").unwrap().mtime, link.mtime());
    let json = String::from_utf8(fs::read(out.path().join("b/manifest.json")).unwrap()).unwrap();
    assert!(json.contains("\"mtime\": 1600000000"), "{json}");
}

#[test]
fn hot_set_is_in_first_touch_order_and_the_start_object_holds_it() {
    let src = tree();
    let out = tempfile::tempdir().unwrap();
    let b = out.path().join("b");
    let m =
        pack(src.path(), &hot(), &PackOptions { chunk_size: 4096, ..PackOptions::default() }, &b)
            .unwrap();
    let refs: Vec<(&str, usize)> =
        m.hot.chunks.iter().map(|r| (r.path.as_str(), r.index)).collect();
    // The second zeros chunk has the same content as the first: not repeated.
    assert_eq!(refs, vec![("bin/app", 2), ("lib/zeros", 0), ("bin/app", 0)]);
    let json = fs::read(b.join("manifest.json")).unwrap();
    let start = fs::read(b.join(crate::start::START_OBJECT)).unwrap();
    let blob = &start[m.hot.offset as usize..];
    assert_eq!(blob.len() as u64, m.hot.size);
    let app = fs::read(src.path().join("bin/app")).unwrap();
    let mut expect = app[8192..].to_vec();
    expect.extend(vec![0u8; 4096]);
    expect.extend(&app[..4096]);
    assert_eq!(blob, expect);
    // The start object: the manifest, then this hot part where the manifest says; the
    // compressed manifest.
    crate::start::check(&start, &json, &m).unwrap();
    let zst = fs::read(b.join(crate::start::MANIFEST_ZST)).unwrap();
    crate::start::check_compressed(&zst, &json).unwrap();
    assert_eq!(crate::start::parse_compressed_manifest(&zst).unwrap(), m);
}

#[test]
fn a_compressed_bundle_stores_zstd_frames_that_decode_to_the_chunks() {
    let src = tree();
    let out = tempfile::tempdir().unwrap();
    let b = out.path().join("z");
    let opts = PackOptions {
        chunk_size: 4096,
        compression: Compression::Zstd,
        level: 3,
        ..PackOptions::default()
    };
    let m = pack(src.path(), &hot(), &opts, &b).unwrap();
    assert_eq!(m.compression, Compression::Zstd);
    let zeros = &m.entry("lib/zeros").unwrap().chunks[0];
    assert!(zeros.stored_len() < 100, "4 KiB of zeros compress: {zeros:?}");
    let app = fs::read(src.path().join("bin/app")).unwrap();
    let entry = m.entry("bin/app").unwrap();
    let stored_at = |c: &Chunk| {
        let (object, at) = m.locate(c);
        let bytes = fs::read(b.join(object)).unwrap();
        bytes[at as usize..(at + c.stored_len()) as usize].to_vec()
    };
    for c in &entry.chunks {
        let stored = stored_at(c);
        let data = crate::decode_chunk(m.compression, c, &stored).unwrap();
        assert_eq!(data, app[c.offset as usize..(c.offset + c.length) as usize]);
    }
    // The cold object is the cold frames back to back: one zstd stream of those pieces.
    let cold = &entry.chunks[1];
    let object = fs::read(b.join(object_path(&m.objects[cold.object.unwrap()].sha256))).unwrap();
    assert_eq!(zstd::decode_all(&object[..]).unwrap(), app[4096..8192]);
    let start = fs::read(b.join(crate::start::START_OBJECT)).unwrap();
    assert_eq!(start.len() as u64 - m.hot.offset, m.hot.size);
    // A damaged frame does not decode to the chunk.
    let c = &entry.chunks[0];
    let mut bad = stored_at(c);
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    assert_eq!(crate::decode_chunk(m.compression, c, &bad), None);
    assert!(matches!(
        pack(src.path(), &hot(), &PackOptions { level: 0, ..opts }, &out.path().join("y")),
        Err(PackError::Level(0))
    ));
}

#[test]
fn the_bundle_is_the_same_whatever_the_number_of_workers() {
    let src = tree();
    // A file of many pieces, so that a batch is cut between threads.
    let big: Vec<u8> =
        (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    fs::write(src.path().join("big"), big).unwrap();
    let out = tempfile::tempdir().unwrap();
    let opts = |workers| PackOptions {
        chunk_size: 4096,
        compression: Compression::Zstd,
        level: 3,
        workers,
        ..PackOptions::default()
    };
    let m1 = pack(src.path(), &hot(), &opts(1), &out.path().join("one")).unwrap();
    let m3 = pack(src.path(), &hot(), &opts(3), &out.path().join("three")).unwrap();
    assert_eq!(m1, m3);
    assert_eq!(all_files(&out.path().join("one")), all_files(&out.path().join("three")));
}

#[test]
fn progress_counts_every_byte_of_the_files_once() {
    use std::sync::{Arc, Mutex};
    let src = tree();
    let out = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let opts = PackOptions {
        chunk_size: 4096,
        progress: Some(Progress(Arc::new(move |done, total| {
            s.lock().unwrap().push((done, total))
        }))),
        ..PackOptions::default()
    };
    pack(src.path(), &hot(), &opts, &out.path().join("b")).unwrap();
    let seen = seen.lock().unwrap();
    // bin/app, lib/copy (10,000 bytes each) and lib/zeros (8192); the empty file adds 0.
    assert_eq!(seen.last(), Some(&(28_192, 28_192)), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "{seen:?}");
}

#[test]
fn a_killed_packs_temporary_directory_is_removed_by_the_next_pack() {
    let src = tree();
    let out = tempfile::tempdir().unwrap();
    // A pack killed with SIGKILL left its temporary directory: its process is gone.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = out.path().join(format!(".b.tmp-{dead}"));
    fs::create_dir_all(stale.join("blobs")).unwrap();
    fs::write(stale.join("blobs/x"), b"half a bundle").unwrap();
    // One of a pack still running (pid 1 is alive) is left alone, as is another output's.
    let running = out.path().join(".b.tmp-1");
    fs::create_dir(&running).unwrap();
    let other = out.path().join(format!(".c.tmp-{dead}"));
    fs::create_dir(&other).unwrap();
    pack(src.path(), &hot(), &PackOptions::default(), &out.path().join("b")).unwrap();
    assert!(!stale.exists(), "the killed pack's directory is removed");
    assert!(running.exists() && other.exists());
}

#[test]
fn an_existing_output_is_refused_and_a_failed_pack_leaves_nothing() {
    let src = tree();
    let out = tempfile::tempdir().unwrap();
    let err = pack(src.path(), &hot(), &PackOptions::default(), out.path()).unwrap_err();
    assert!(matches!(err, PackError::Exists(_)));
    let missing = out.path().join("nope");
    let err = pack(&missing, &hot(), &PackOptions::default(), &out.path().join("b")).unwrap_err();
    assert!(matches!(err, PackError::Io { .. }));
    assert_eq!(fs::read_dir(out.path()).unwrap().count(), 0, "no temporary left behind");
}

#[test]
fn learned_ranges_are_cut_around_the_hot_lists_extents_and_come_after_them() {
    let base: HashMap<&str, Vec<(u64, u64)>> = [("a", vec![(4096, 8192), (20480, 24576)])].into();
    let learned: HashMap<&str, Vec<(u64, u64)>> =
        [("a", vec![(0, 65536)]), ("b", vec![(0, 4096)])].into();
    let got = with_learned(base, learned);
    assert_eq!(got["a"], [(0, 4096), (4096, 8192), (8192, 20480), (20480, 24576), (24576, 65536)]);
    assert_eq!(got["b"], [(0, 4096)]);

    // Packed: the hot list's pieces are as without the learned ranges, and first.
    let src = tempfile::tempdir().unwrap();
    let data: Vec<u8> =
        (0..65536u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    fs::write(src.path().join("f"), data).unwrap();
    let hot = HotList {
        touches: vec![Touch { path: "f".into(), offset: 8192, length: 4096 }],
        ..HotList::default()
    };
    let out = tempfile::tempdir().unwrap();
    let opts = PackOptions { chunk_size: 65536, ..PackOptions::default() };
    let plain = pack(src.path(), &hot, &opts, &out.path().join("plain")).unwrap();
    let learned = HotList {
        touches: vec![Touch { path: "f".into(), offset: 0, length: 65536 }],
        ..HotList::default()
    };
    let opts = PackOptions { learned, ..opts };
    let m = pack(src.path(), &hot, &opts, &out.path().join("learned")).unwrap();
    let first = |m: &Manifest| m.hot_chunks()[0].1.clone();
    assert_eq!((first(&m).offset, first(&m).length), (8192, 4096));
    assert_eq!(first(&m), first(&plain));
    assert_eq!(m.hot.size, 65536, "the rest of the file after it");
    assert_eq!(m.hot.chunks.len(), 3);
}
