//! Packing a directory into a bundle.
//!
//! Deterministic: entries are walked in byte order of their names, chunk boundaries depend
//! only on the chunk size, and nothing time- or host-dependent is written, so the same input
//! gives the same bytes. The bundle is written into a temporary directory beside the output
//! and renamed into place, so a failed pack leaves nothing half-written.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use coldstart_error::Category;

use crate::hotlist::HotList;
use crate::manifest::{
    Chunk, ChunkRef, Compression, Entry, EntryKind, HotSet, Manifest, Sha256Hex, FORMAT, VERSION,
};
use crate::{blob_path, file_blob_path, sha256_hex};

/// The path of the hot blob inside a bundle.
pub const HOT_BLOB: &str = "blobs/hot";

/// The granularity of hot extents: the page, what the kernel reads and maps. A hot list's
/// ranges are widened to whole pages, and each run of touched pages becomes one piece.
pub const PAGE: u64 = 4096;

/// How to pack.
#[derive(Debug, Clone)]
pub struct PackOptions {
    /// Bytes per chunk (the last chunk of a file may be shorter).
    pub chunk_size: u64,
    /// How blobs store chunks.
    pub compression: Compression,
    /// The zstd level (1 to 22) when compressing.
    pub level: i32,
    /// Stops the pack between two chunks ([`PackError::Cancelled`]; nothing is left).
    pub cancel: crate::remote::Cancel,
    /// Sign the bundle with this key ([`crate::sign`]: `signature.json`).
    pub sign: Option<crate::sign::SigningKey>,
}

/// The zstd level `pack` uses unless told otherwise: packing is done once, fetching often.
pub const DEFAULT_ZSTD_LEVEL: i32 = 19;

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            chunk_size: 64 * 1024,
            compression: Compression::None,
            level: DEFAULT_ZSTD_LEVEL,
            cancel: crate::remote::Cancel::default(),
            sign: None,
        }
    }
}

/// Why packing failed.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("the chunk size must be 1 byte to 64 MiB, not {0}")]
    ChunkSize(u64),
    #[error("zstd level {0} is out of range: use 1 to 22")]
    Level(i32),
    #[error("{path}: zstd could not compress a chunk: {source}")]
    Compress { path: PathBuf, source: io::Error },
    #[error("{0} already exists: remove it or choose another output")]
    Exists(PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "{0} is not a regular file, directory or symbolic link: coldstart bundles cannot hold it"
    )]
    Unsupported(PathBuf),
    #[error("{0}: the file name is not UTF-8")]
    NotUtf8(PathBuf),
    #[error("{0}: the symbolic link's target is not UTF-8")]
    TargetNotUtf8(PathBuf),
    #[error("interrupted: nothing was written")]
    Cancelled,
}

impl PackError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            PackError::ChunkSize(_)
            | PackError::Level(_)
            | PackError::Exists(_)
            | PackError::Unsupported(_)
            | PackError::NotUtf8(_)
            | PackError::TargetNotUtf8(_) => Category::Usage,
            PackError::Compress { .. } | PackError::Io { .. } | PackError::Cancelled => {
                Category::Environment
            }
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PackError + '_ {
    move |source| PackError::Io { path: path.to_path_buf(), source }
}

/// Packs `dir` into a new bundle directory `out`, with the hot set from `hot`.
///
/// Touches of paths that are not regular files under `dir` (a profile also names system
/// libraries) are skipped; touches past the end of a file are clipped.
pub fn pack(
    dir: &Path,
    hot: &HotList,
    options: &PackOptions,
    out: &Path,
) -> Result<Manifest, PackError> {
    if !(1..=crate::manifest::MAX_CHUNK_SIZE).contains(&options.chunk_size) {
        return Err(PackError::ChunkSize(options.chunk_size));
    }
    if options.compression == Compression::Zstd && !(1..=22).contains(&options.level) {
        return Err(PackError::Level(options.level));
    }
    if out.symlink_metadata().is_ok() {
        return Err(PackError::Exists(out.to_path_buf()));
    }
    let name = out.file_name().ok_or_else(|| PackError::Exists(out.to_path_buf()))?;
    let tmp = out.with_file_name(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    let result = pack_into(dir, hot, options, &tmp).and_then(|m| {
        if options.cancel.is_cancelled() {
            Err(PackError::Cancelled)
        } else {
            Ok(m)
        }
    });
    match result {
        Ok(manifest) => {
            fs::rename(&tmp, out).map_err(io_err(out))?;
            Ok(manifest)
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

fn pack_into(
    dir: &Path,
    hot: &HotList,
    options: &PackOptions,
    tmp: &Path,
) -> Result<Manifest, PackError> {
    let mut entries = Vec::new();
    walk(dir, "", &mut entries)?;
    let extents = hot_extents(hot);
    let mut stored = HashSet::new();
    let mut files = Vec::with_capacity(entries.len());
    for (rel, abs, meta) in entries {
        let mode = meta.permissions().mode() & 0o7777;
        let ft = meta.file_type();
        let (mtime, mtime_nsec) = (meta.mtime(), meta.mtime_nsec().clamp(0, 999_999_999) as u32);
        if ft.is_dir() {
            files.push(Entry {
                path: rel,
                kind: EntryKind::Dir,
                mode,
                size: 0,
                target: None,
                chunks: vec![],
                sha256: None,
                mtime,
                mtime_nsec,
            });
        } else if ft.is_symlink() {
            let target = fs::read_link(&abs).map_err(io_err(&abs))?;
            let target = target
                .into_os_string()
                .into_string()
                .map_err(|_| PackError::TargetNotUtf8(abs.clone()))?;
            files.push(Entry {
                path: rel,
                kind: EntryKind::Symlink,
                mode: 0o777,
                size: target.len() as u64,
                target: Some(target),
                chunks: vec![],
                sha256: None,
                mtime,
                mtime_nsec,
            });
        } else if ft.is_file() {
            let hot = extents.get(rel.as_str()).map_or(&[][..], Vec::as_slice);
            let (chunks, sha256) = chunk_file(&abs, options, tmp, &mut stored, hot)?;
            let size = chunks.last().map_or(0, |c| c.offset + c.length);
            files.push(Entry {
                path: rel,
                kind: EntryKind::File,
                mode,
                size,
                target: None,
                chunks,
                sha256: Some(sha256),
                mtime,
                mtime_nsec,
            });
        } else {
            return Err(PackError::Unsupported(abs));
        }
    }
    let mut manifest = Manifest {
        format: FORMAT.into(),
        version: VERSION,
        chunk_size: options.chunk_size,
        compression: options.compression,
        files,
        hot: HotSet::default(),
    };
    manifest.hot = hot_set(&manifest, hot, tmp)?;
    let json = manifest.to_bytes();
    let path = tmp.join(crate::start::MANIFEST_JSON);
    fs::write(&path, &json).map_err(io_err(&path))?;
    let path = tmp.join(crate::start::MANIFEST_ZST);
    fs::write(&path, crate::start::compress_manifest(&json)).map_err(io_err(&path))?;
    let hot_blob = if manifest.hot.blob.is_empty() {
        Vec::new()
    } else {
        let p = tmp.join(&manifest.hot.blob);
        fs::read(&p).map_err(io_err(&p))?
    };
    let path = tmp.join(crate::start::START_OBJECT);
    let start = crate::start::encode(&json, &hot_blob);
    fs::write(&path, &start).map_err(io_err(&path))?;
    if let Some(key) = &options.sign {
        let path = tmp.join(crate::sign::SIGNATURE);
        fs::write(&path, crate::sign::sign(key, &json, &start)).map_err(io_err(&path))?;
    }
    Ok(manifest)
}

/// Collects (relative path, absolute path, metadata) in byte order of names, parents first.
fn walk(
    dir: &Path,
    prefix: &str,
    out: &mut Vec<(String, PathBuf, fs::Metadata)>,
) -> Result<(), PackError> {
    let mut names = Vec::new();
    for item in fs::read_dir(dir).map_err(io_err(dir))? {
        let item = item.map_err(io_err(dir))?;
        names.push(item.file_name());
    }
    names.sort();
    for name in names {
        let abs = dir.join(&name);
        let name = name.into_string().map_err(|_| PackError::NotUtf8(abs.clone()))?;
        let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let meta = fs::symlink_metadata(&abs).map_err(io_err(&abs))?;
        let is_dir = meta.file_type().is_dir();
        out.push((rel.clone(), abs.clone(), meta));
        if is_dir {
            walk(&abs, &rel, out)?;
        }
    }
    Ok(())
}

/// The hot list's ranges of each file, widened to whole pages ([`PAGE`]), sorted and merged
/// into runs of touched pages: the file's hot extents.
pub fn hot_extents(hot: &HotList) -> HashMap<&str, Vec<(u64, u64)>> {
    let mut by_path: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    for t in &hot.touches {
        let start = t.offset / PAGE * PAGE;
        let end = t.offset.saturating_add(t.length.max(1)).div_ceil(PAGE).saturating_mul(PAGE);
        by_path.entry(t.path.trim_start_matches("./")).or_default().push((start, end));
    }
    for runs in by_path.values_mut() {
        runs.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
        for &(s, e) in runs.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *runs = merged;
    }
    by_path
}

/// Where the piece that starts at `offset` ends: inside a hot extent, at the extent's end (at
/// most `chunk_size` on); elsewhere at the next multiple of `chunk_size` or the next extent's
/// start, whichever comes first. So each run of touched pages is one piece, hashed and
/// fetched alone, and cold data stays in large chunks at fixed boundaries (a new hot list
/// moves only the pieces around the extents).
fn piece_end(offset: u64, chunk_size: u64, extents: &[(u64, u64)]) -> u64 {
    let i = extents.partition_point(|&(_, e)| e <= offset);
    match extents.get(i) {
        Some(&(s, e)) if s <= offset => e.min(offset.saturating_add(chunk_size)),
        next => {
            let aligned = (offset / chunk_size).saturating_add(1).saturating_mul(chunk_size);
            next.map_or(aligned, |&(s, _)| aligned.min(s))
        }
    }
}

/// Cuts one file into pieces (hot extents and cold chunks: [`piece_end`]), writes the blobs
/// of pieces not yet stored and the file's whole blob (the stored form of its pieces back to
/// back), and returns the pieces and the digest of the whole content.
fn chunk_file(
    path: &Path,
    options: &PackOptions,
    bundle: &Path,
    stored: &mut HashSet<String>,
    extents: &[(u64, u64)],
) -> Result<(Vec<Chunk>, Sha256Hex), PackError> {
    use sha2::{Digest, Sha256};
    let mut file = fs::File::open(path).map_err(io_err(path))?;
    let files_dir = bundle.join("blobs/files");
    fs::create_dir_all(&files_dir).map_err(io_err(&files_dir))?;
    let whole_tmp = files_dir.join(format!(".whole.tmp-{}", unique()));
    let mut whole = io::BufWriter::new(fs::File::create(&whole_tmp).map_err(io_err(&whole_tmp))?);
    let mut hasher = Sha256::new();
    let mut chunks = Vec::new();
    let mut buf = vec![0u8; options.chunk_size as usize];
    let mut compressor = match options.compression {
        Compression::None => None,
        Compression::Zstd => Some(
            zstd::bulk::Compressor::new(options.level)
                .map_err(|source| PackError::Compress { path: path.to_path_buf(), source })?,
        ),
    };
    let mut offset = 0u64;
    loop {
        if options.cancel.is_cancelled() {
            return Err(PackError::Cancelled);
        }
        let want = (piece_end(offset, options.chunk_size, extents) - offset) as usize;
        let n = read_full(&mut file, &mut buf[..want]).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        let data = &buf[..n];
        hasher.update(data);
        let sha256 = sha256_hex(data);
        let packed;
        let (stored_bytes, stored_len) = match compressor.as_mut() {
            None => (data, None),
            Some(z) => {
                packed = z
                    .compress(data)
                    .map_err(|source| PackError::Compress { path: path.to_path_buf(), source })?;
                (&packed[..], Some(packed.len() as u64))
            }
        };
        whole.write_all(stored_bytes).map_err(io_err(&whole_tmp))?;
        if stored.insert(sha256.as_str().to_owned()) {
            let blob = bundle.join(blob_path(&sha256));
            let parent = blob.parent().expect("blob paths have a parent");
            fs::create_dir_all(parent).map_err(io_err(parent))?;
            fs::write(&blob, stored_bytes).map_err(io_err(&blob))?;
        }
        chunks.push(Chunk { offset, length: n as u64, sha256, stored: stored_len });
        offset += n as u64;
        if n < want {
            break;
        }
    }
    whole.flush().map_err(io_err(&whole_tmp))?;
    drop(whole);
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let file_sha = Sha256Hex::new(hex).expect("a digest is 64 hex digits");
    let dest = bundle.join(file_blob_path(&file_sha));
    if dest.exists() {
        fs::remove_file(&whole_tmp).map_err(io_err(&whole_tmp))?;
    } else {
        let parent = dest.parent().expect("blob paths have a parent");
        fs::create_dir_all(parent).map_err(io_err(parent))?;
        fs::rename(&whole_tmp, &dest).map_err(io_err(&dest))?;
    }
    Ok((chunks, file_sha))
}

fn read_full(file: &mut fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Maps the hot list's touches to chunks (first touch wins; a chunk whose content is already
/// in the hot set is not repeated) and writes the hot blob.
fn hot_set(manifest: &Manifest, hot: &HotList, bundle: &Path) -> Result<HotSet, PackError> {
    let by_path: std::collections::HashMap<&str, &Entry> =
        manifest.files.iter().map(|e| (e.path.as_str(), e)).collect();
    let mut seen_refs = HashSet::new();
    let mut seen_hashes = HashSet::new();
    let mut refs = Vec::new();
    for t in &hot.touches {
        let path = t.path.trim_start_matches("./");
        let Some(entry) = by_path.get(path).filter(|e| e.kind == EntryKind::File) else {
            continue;
        };
        // Whole pages, as the extents were cut.
        let start = t.offset / PAGE * PAGE;
        let end = t.offset.saturating_add(t.length.max(1)).div_ceil(PAGE).saturating_mul(PAGE);
        let end = end.min(entry.size);
        let first = entry.chunks.partition_point(|c| c.offset + c.length <= start);
        for (index, c) in entry.chunks.iter().enumerate().skip(first) {
            if c.offset >= end {
                break;
            }
            let r = ChunkRef { path: entry.path.clone(), index };
            if seen_refs.insert(r.clone()) && seen_hashes.insert(c.sha256.clone()) {
                refs.push(r);
            }
        }
    }
    if refs.is_empty() {
        return Ok(HotSet::default());
    }
    let blob_file = bundle.join(HOT_BLOB);
    let mut data = Vec::new();
    for r in &refs {
        let c = &by_path[r.path.as_str()].chunks[r.index];
        let src = bundle.join(blob_path(&c.sha256));
        data.extend_from_slice(&fs::read(&src).map_err(io_err(&src))?);
    }
    fs::write(&blob_file, &data).map_err(io_err(&blob_file))?;
    Ok(HotSet {
        blob: HOT_BLOB.into(),
        size: data.len() as u64,
        sha256: Some(sha256_hex(&data)),
        chunks: refs,
    })
}

/// A name part unique within this host for the life of the process.
pub(crate) fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
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
    fn packing_is_deterministic_and_stores_identical_chunks_once() {
        let src = tree();
        let out = tempfile::tempdir().unwrap();
        let opts = PackOptions { chunk_size: 4096, ..PackOptions::default() };
        let m1 = pack(src.path(), &hot(), &opts, &out.path().join("a")).unwrap();
        let m2 = pack(src.path(), &hot(), &opts, &out.path().join("b")).unwrap();
        assert_eq!(m1, m2);
        assert_eq!(all_files(&out.path().join("a")), all_files(&out.path().join("b")));
        // bin/app: 3 chunks; lib/zeros: 1 distinct; lib/copy: same as bin/app.
        let blobs = all_files(&out.path().join("a/blobs/sha256"));
        assert_eq!(blobs.len(), 4);
        // Whole files: bin/app and lib/copy are one blob; lib/zeros, empty.
        let whole = all_files(&out.path().join("a/blobs/files"));
        assert_eq!(whole.len(), 3);
        let app = m1.entry("bin/app").unwrap();
        assert_eq!(app.sha256, m1.entry("lib/copy").unwrap().sha256);
        let blob = out.path().join("a").join(file_blob_path(app.sha256.as_ref().unwrap()));
        assert_eq!(fs::read(blob).unwrap(), fs::read(src.path().join("bin/app")).unwrap());
        let parsed =
            Manifest::parse(&fs::read(out.path().join("a/manifest.json")).unwrap()).unwrap();
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
        let json =
            String::from_utf8(fs::read(out.path().join("b/manifest.json")).unwrap()).unwrap();
        assert!(json.contains("\"mtime\": 1600000000"), "{json}");
    }

    #[test]
    fn hot_set_is_in_first_touch_order_and_the_blob_holds_it() {
        let src = tree();
        let out = tempfile::tempdir().unwrap();
        let b = out.path().join("b");
        let m = pack(
            src.path(),
            &hot(),
            &PackOptions { chunk_size: 4096, ..PackOptions::default() },
            &b,
        )
        .unwrap();
        let refs: Vec<(&str, usize)> =
            m.hot.chunks.iter().map(|r| (r.path.as_str(), r.index)).collect();
        // The second zeros chunk has the same content as the first: not repeated.
        assert_eq!(refs, vec![("bin/app", 2), ("lib/zeros", 0), ("bin/app", 0)]);
        let blob = fs::read(b.join(HOT_BLOB)).unwrap();
        assert_eq!(blob.len() as u64, m.hot.size);
        let app = fs::read(src.path().join("bin/app")).unwrap();
        let mut expect = app[8192..].to_vec();
        expect.extend(vec![0u8; 4096]);
        expect.extend(&app[..4096]);
        assert_eq!(blob, expect);
        // The start object: the manifest and this hot blob; the compressed manifest.
        let json = fs::read(b.join("manifest.json")).unwrap();
        let start = fs::read(b.join(crate::start::START_OBJECT)).unwrap();
        crate::start::check(&start, &json, &blob, "blobs/hot").unwrap();
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
        let mut whole = Vec::new();
        for c in &entry.chunks {
            let stored = fs::read(b.join(blob_path(&c.sha256))).unwrap();
            assert_eq!(stored.len() as u64, c.stored_len());
            let data = crate::decode_chunk(m.compression, c, &stored).unwrap();
            assert_eq!(data, app[c.offset as usize..(c.offset + c.length) as usize]);
            whole.extend(stored);
        }
        // The file blob is the frames back to back: one zstd stream of the whole file.
        let file_blob = fs::read(b.join(file_blob_path(entry.sha256.as_ref().unwrap()))).unwrap();
        assert_eq!(file_blob, whole);
        assert_eq!(zstd::decode_all(&file_blob[..]).unwrap(), app);
        let hot_blob = fs::read(b.join(HOT_BLOB)).unwrap();
        assert_eq!(hot_blob.len() as u64, m.hot.size);
        // A damaged frame does not decode to the chunk.
        let c = &entry.chunks[0];
        let mut bad = fs::read(b.join(blob_path(&c.sha256))).unwrap();
        let mid = bad.len() / 2;
        bad[mid] ^= 0x40;
        assert_eq!(crate::decode_chunk(m.compression, c, &bad), None);
        assert!(matches!(
            pack(src.path(), &hot(), &PackOptions { level: 0, ..opts }, &out.path().join("y")),
            Err(PackError::Level(0))
        ));
    }

    #[test]
    fn an_existing_output_is_refused_and_a_failed_pack_leaves_nothing() {
        let src = tree();
        let out = tempfile::tempdir().unwrap();
        let err = pack(src.path(), &hot(), &PackOptions::default(), out.path()).unwrap_err();
        assert!(matches!(err, PackError::Exists(_)));
        let missing = out.path().join("nope");
        let err =
            pack(&missing, &hot(), &PackOptions::default(), &out.path().join("b")).unwrap_err();
        assert!(matches!(err, PackError::Io { .. }));
        assert_eq!(fs::read_dir(out.path()).unwrap().count(), 0, "no temporary left behind");
    }
}
