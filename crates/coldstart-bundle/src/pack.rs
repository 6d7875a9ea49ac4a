//! Packing a directory into a bundle.
//!
//! Each piece's stored form is written once: a hot piece in the start object's hot part, any
//! other in the cold object of the first file (in path order) that has it.
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
use sha2::{Digest, Sha256};

use crate::hotlist::HotList;
use crate::manifest::{
    Chunk, ChunkRef, Compression, Entry, EntryKind, HotSet, Manifest, Object, Sha256Hex, FORMAT,
    VERSION,
};
use crate::{object_path, sha256_hex};
use output::Output;

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
    /// Threads that hash and compress pieces at once; 0: one per available core.
    pub workers: usize,
    /// Told of the bytes of files packed so far, and the total, as packing goes (at most a
    /// few times per file); never told anything else.
    pub progress: Option<Progress>,
    /// Ranges that join the hot set after those of the hot list (learned from users' starts:
    /// [`crate::learn`]). Their pieces are cut around the hot list's extents, never merged
    /// with them: the pieces the hot list's start reads are the same with or without them,
    /// and come as early in the hot set.
    pub learned: HotList,
}

/// A progress callback: `(bytes packed, bytes in all)` of the regular files' content.
#[derive(Clone)]
pub struct Progress(pub std::sync::Arc<dyn Fn(u64, u64) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

impl PackOptions {
    /// The threads [`PackOptions::workers`] asks for.
    pub fn worker_count(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// The zstd level `pack` uses unless told otherwise, chosen by measurement on clang-19
/// (BENCHMARKS.md, "Pack: zstd levels and the origin's size"): packed on every core, level 19
/// takes 24 s for 200 MB on 2 cores against 3 s at level 6, and stores 8% fewer bytes (5% of
/// the start object): the 21 s are paid once, the bytes on every start, and are won back after
/// 12 starts at 2 Mbit/s, 124 at 20 Mbit/s. Levels 6 to 12 are within 1.5% of each other.
/// `--compress-level 1` to 6 for a quick pack while iterating.
pub const DEFAULT_ZSTD_LEVEL: i32 = 19;

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            chunk_size: 64 * 1024,
            compression: Compression::None,
            level: DEFAULT_ZSTD_LEVEL,
            cancel: crate::remote::Cancel::default(),
            sign: None,
            workers: 0,
            progress: None,
            learned: HotList::default(),
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
    #[error(
        "another pack{} is writing {}: wait for it to end, or choose another output",
        pid.map_or(String::new(), |p| format!(" (pid {p})")),
        out.display()
    )]
    Busy { out: PathBuf, pid: Option<u32> },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "cannot write the bundle {}: {source} (writing {}); {}",
        out.display(),
        path.display(),
        match source.kind() {
            io::ErrorKind::PermissionDenied => "choose an output you may write",
            _ => "free space on its file system, or choose another output",
        }
    )]
    Write { out: PathBuf, path: PathBuf, source: io::Error },
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
            | PackError::Busy { .. }
            | PackError::Unsupported(_)
            | PackError::NotUtf8(_)
            | PackError::TargetNotUtf8(_) => Category::Usage,
            // An input or output this user may not read or write: a missing privilege.
            PackError::Io { source, .. } | PackError::Write { source, .. } => {
                Category::of_io(source, Category::Environment)
            }
            PackError::Compress { .. } | PackError::Cancelled => Category::Environment,
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
    let output = Output::claim(out)?;
    let result = pack_into(dir, hot, options, &output).and_then(|m| {
        if options.cancel.is_cancelled() {
            Err(PackError::Cancelled)
        } else {
            Ok(m)
        }
    });
    // Either way nothing is left but the bundle: `output`'s drop removes the temporary
    // directory and the lock.
    let manifest = result?;
    output.finish()?;
    Ok(manifest)
}

fn pack_into(
    dir: &Path,
    hot: &HotList,
    options: &PackOptions,
    output: &Output,
) -> Result<Manifest, PackError> {
    let tmp = output.tmp();
    let mut entries = Vec::new();
    walk(dir, "", output, &mut entries)?;
    let extents = with_learned(hot_extents(hot), hot_extents(&options.learned));
    // Every distinct piece's stored form, once, until each is placed in its object.
    let pieces_path = tmp.join(".pieces");
    let werr = |path: &Path| output.write_err(path);
    let mut pieces = Pieces {
        file: io::BufWriter::new(fs::File::create(&pieces_path).map_err(werr(&pieces_path))?),
        len: 0,
        at: HashMap::new(),
        output,
        path: pieces_path.clone(),
    };
    let mut files = Vec::with_capacity(entries.len());
    let total: u64 = entries.iter().filter(|e| e.2.file_type().is_file()).map(|e| e.2.len()).sum();
    let mut done = 0u64;
    let mut compressors = Vec::new();
    for (rel, abs, meta) in entries {
        let mode = meta.permissions().mode() & 0o7777;
        let ft = meta.file_type();
        let (mtime, mtime_nsec) = (meta.mtime(), meta.mtime_nsec().clamp(0, 999_999_999) as u32);
        if ft.is_dir() {
            files.push(Entry { mtime, mtime_nsec, ..Entry::dir(rel, mode) });
        } else if ft.is_symlink() {
            let target = fs::read_link(&abs).map_err(io_err(&abs))?;
            let target = target
                .into_os_string()
                .into_string()
                .map_err(|_| PackError::TargetNotUtf8(abs.clone()))?;
            files.push(Entry { mtime, mtime_nsec, ..Entry::symlink(rel, target) });
        } else if ft.is_file() {
            let hot = extents.get(rel.as_str()).map_or(&[][..], Vec::as_slice);
            let (chunks, sha256) =
                chunk_file(&abs, options, &mut pieces, hot, &mut compressors, &mut |n| {
                    done += n;
                    if let Some(p) = &options.progress {
                        (p.0)(done, total.max(done));
                    }
                })?;
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
    pieces.file.flush().map_err(werr(&pieces_path))?;
    let stored_at = std::mem::take(&mut pieces.at);
    drop(pieces);
    let source = fs::File::open(&pieces_path).map_err(werr(&pieces_path))?;
    // A piece's stored bytes into `buf` (one buffer, reused).
    let read_piece = |sha: &Sha256Hex, buf: &mut Vec<u8>| -> Result<(), PackError> {
        use std::os::unix::fs::FileExt;
        let (at, len) = stored_at[sha.as_str()];
        buf.resize(len as usize, 0);
        source.read_exact_at(buf, at).map_err(werr(&pieces_path))
    };
    let mut piece = Vec::new();
    let mut manifest = Manifest {
        format: FORMAT.into(),
        version: VERSION,
        chunk_size: options.chunk_size,
        compression: options.compression,
        files,
        objects: Vec::new(),
        hot: HotSet::default(),
    };
    // The hot pieces, once each, in first-touch order (the learned ones after): the start
    // object's hot part.
    let mut refs = hot_refs(&manifest, hot);
    if !options.learned.touches.is_empty() {
        let all = HotList {
            touches: hot.touches.iter().chain(&options.learned.touches).cloned().collect(),
            ..HotList::default()
        };
        refs = hot_refs(&manifest, &all);
    }
    let mut placed: HashMap<Sha256Hex, (Option<usize>, u64)> = HashMap::new();
    let mut hot_part = Vec::new();
    for r in &refs {
        let c = manifest.chunk(r).expect("a hot reference names a chunk");
        placed.insert(c.sha256.clone(), (None, hot_part.len() as u64));
        read_piece(&c.sha256, &mut piece)?;
        hot_part.extend_from_slice(&piece);
    }
    // Every other piece in the cold object of the first file that has it.
    let cold_dir = tmp.join("blobs/cold");
    fs::create_dir_all(&cold_dir).map_err(werr(&cold_dir))?;
    let mut by_digest: HashMap<Sha256Hex, usize> = HashMap::new();
    for e in &manifest.files {
        let index = manifest.objects.len();
        if e.chunks.iter().all(|c| placed.contains_key(&c.sha256)) {
            continue;
        }
        // Streamed to a temporary file and hashed on the way: a file's cold object can be
        // most of a large library, never held in memory whole. Named by its digest after.
        let object_tmp = cold_dir.join(format!(".object.tmp-{}", coldstart_fs::unique()));
        let file = fs::File::create(&object_tmp).map_err(werr(&object_tmp))?;
        let mut out = io::BufWriter::new(file);
        let mut digest = Sha256::new();
        let mut size = 0u64;
        let mut order = Vec::new();
        for c in &e.chunks {
            if placed.contains_key(&c.sha256) {
                continue;
            }
            placed.insert(c.sha256.clone(), (Some(index), size));
            order.push(c.sha256.clone());
            read_piece(&c.sha256, &mut piece)?;
            digest.update(&piece);
            out.write_all(&piece).map_err(werr(&object_tmp))?;
            size += piece.len() as u64;
        }
        out.flush().map_err(werr(&object_tmp))?;
        drop(out);
        let sha256 = crate::hex_digest(digest.finalize());
        if let Some(&same) = by_digest.get(&sha256) {
            // The same bytes (so the same offsets) as an object already written.
            fs::remove_file(&object_tmp).map_err(werr(&object_tmp))?;
            for sha in order {
                placed.get_mut(&sha).expect("placed above").0 = Some(same);
            }
            continue;
        }
        let dest = tmp.join(object_path(&sha256));
        let parent = dest.parent().expect("object paths have a parent");
        fs::create_dir_all(parent).map_err(werr(parent))?;
        fs::rename(&object_tmp, &dest).map_err(werr(&dest))?;
        by_digest.insert(sha256.clone(), index);
        manifest.objects.push(Object { sha256, size });
    }
    drop(source);
    fs::remove_file(&pieces_path).map_err(werr(&pieces_path))?;
    for e in &mut manifest.files {
        for c in &mut e.chunks {
            (c.object, c.at) = placed[&c.sha256];
        }
    }
    manifest.hot = HotSet { offset: 0, size: hot_part.len() as u64, chunks: refs };
    // The hot part starts where the manifest (which says where) ends in the start object.
    let laid = crate::start::lay_out(
        |offset| {
            manifest.hot.offset = offset;
            Ok::<_, std::convert::Infallible>(manifest.to_bytes())
        },
        &hot_part,
    )
    .unwrap_or_else(|never| match never {});
    let (json, start) = (laid.json, laid.start);
    let path = tmp.join(crate::start::MANIFEST_JSON);
    fs::write(&path, &json).map_err(werr(&path))?;
    let path = tmp.join(crate::start::MANIFEST_ZST);
    fs::write(&path, &laid.compressed).map_err(werr(&path))?;
    let path = tmp.join(crate::start::START_OBJECT);
    fs::write(&path, &start).map_err(werr(&path))?;
    if let Some(key) = &options.sign {
        let path = tmp.join(crate::sign::SIGNATURE);
        fs::write(&path, crate::sign::sign(key, &json, &start)).map_err(werr(&path))?;
    }
    Ok(manifest)
}

/// The stored form of every distinct piece packed so far, back to back in one temporary file,
/// and where each is there.
struct Pieces<'a> {
    file: io::BufWriter<fs::File>,
    len: u64,
    at: HashMap<String, (u64, u64)>,
    /// The output being written, and this file's path in it: what a failed write names.
    output: &'a Output,
    path: PathBuf,
}

/// Collects (relative path, absolute path, metadata) in byte order of names, parents first;
/// `output` and what is beside it are left out, if they are in `dir`.
fn walk(
    dir: &Path,
    prefix: &str,
    output: &Output,
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
        if output.is_own(&abs, &name) {
            continue;
        }
        let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let meta = fs::symlink_metadata(&abs).map_err(io_err(&abs))?;
        let is_dir = meta.file_type().is_dir();
        out.push((rel.clone(), abs.clone(), meta));
        if is_dir {
            walk(&abs, &rel, output, out)?;
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

/// The hot list's extents with the learned ones', each file's learned extents less the hot
/// list's: sorted, disjoint, and where a learned extent meets one of the hot list's, apart
/// (so that each is cut into pieces of its own).
fn with_learned<'a>(
    mut extents: HashMap<&'a str, Vec<(u64, u64)>>,
    learned: HashMap<&'a str, Vec<(u64, u64)>>,
) -> HashMap<&'a str, Vec<(u64, u64)>> {
    for (path, runs) in learned {
        let base = extents.entry(path).or_default();
        let mut added = Vec::new();
        for (mut s, e) in runs {
            // `base` is sorted and disjoint: walk the parts of [s, e) it does not cover.
            for &(bs, be) in base.iter() {
                if be <= s || bs >= e {
                    continue;
                }
                if bs > s {
                    added.push((s, bs));
                }
                s = s.max(be);
            }
            if s < e {
                added.push((s, e));
            }
        }
        base.extend(added);
        base.sort_unstable();
    }
    extents
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

/// Cuts one file into pieces (hot extents and cold chunks: [`piece_end`]), keeps the stored
/// form of each piece not yet kept in `pieces`, and returns the pieces (not yet placed in an
/// object) and the digest of the whole content.
fn chunk_file(
    path: &Path,
    options: &PackOptions,
    pieces: &mut Pieces<'_>,
    extents: &[(u64, u64)],
    compressors: &mut Vec<zstd::bulk::Compressor<'static>>,
    progress: &mut dyn FnMut(u64),
) -> Result<(Vec<Chunk>, Sha256Hex), PackError> {
    use sha2::{Digest, Sha256};
    let mut file = fs::File::open(path).map_err(io_err(path))?;
    let mut hasher = Sha256::new();
    let mut chunks = Vec::new();
    let workers = options.worker_count();
    if options.compression == Compression::Zstd {
        while compressors.len() < workers {
            let z = zstd::bulk::Compressor::new(options.level)
                .map_err(|source| PackError::Compress { path: path.to_path_buf(), source })?;
            compressors.push(z);
        }
    }
    // Pieces are read a batch at a time, hashed and compressed by `workers` threads at once
    // (each piece is its own frame, so they are independent), then written in order.
    let batch_bytes = (workers as u64 * BATCH_PER_WORKER).max(options.chunk_size);
    let mut offset = 0u64;
    let mut at_end = false;
    while !at_end {
        if options.cancel.is_cancelled() {
            return Err(PackError::Cancelled);
        }
        let mut batch: Vec<Piece> = Vec::new();
        let mut batch_len = 0u64;
        while batch_len < batch_bytes {
            let want = (piece_end(offset, options.chunk_size, extents) - offset) as usize;
            let mut data = vec![0u8; want];
            let n = read_full(&mut file, &mut data).map_err(io_err(path))?;
            data.truncate(n);
            if n > 0 {
                hasher.update(&data);
                batch.push(Piece { offset, data, sha256: None, packed: None });
                offset += n as u64;
                batch_len += n as u64;
            }
            if n < want {
                at_end = true;
                break;
            }
        }
        digest_and_compress(&mut batch, compressors, workers)
            .map_err(|source| PackError::Compress { path: path.to_path_buf(), source })?;
        for p in batch {
            let sha256 = p.sha256.expect("every piece is hashed");
            let (stored_bytes, stored_len) = match &p.packed {
                None => (&p.data[..], None),
                Some(z) => (&z[..], Some(z.len() as u64)),
            };
            if !pieces.at.contains_key(sha256.as_str()) {
                pieces
                    .file
                    .write_all(stored_bytes)
                    .map_err(pieces.output.write_err(&pieces.path))?;
                let n = stored_bytes.len() as u64;
                pieces.at.insert(sha256.as_str().to_owned(), (pieces.len, n));
                pieces.len += n;
            }
            let length = p.data.len() as u64;
            chunks.push(Chunk {
                offset: p.offset,
                length,
                sha256,
                stored: stored_len,
                object: None,
                at: 0,
            });
        }
        progress(batch_len);
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let file_sha = Sha256Hex::new(hex).expect("a digest is 64 hex digits");
    Ok((chunks, file_sha))
}

/// Bytes of file content each worker hashes and compresses per batch.
const BATCH_PER_WORKER: u64 = 4 << 20;

/// One piece of a file on its way into the bundle.
struct Piece {
    offset: u64,
    data: Vec<u8>,
    sha256: Option<Sha256Hex>,
    /// Its zstd frame, when compressing.
    packed: Option<Vec<u8>>,
}

/// Hashes every piece of `batch` and, with `compressors` (one per worker), compresses it:
/// the batch is cut into `workers` runs of about equal bytes, each run done by one thread.
fn digest_and_compress(
    batch: &mut [Piece],
    compressors: &mut [zstd::bulk::Compressor<'static>],
    workers: usize,
) -> io::Result<()> {
    let work = |run: &mut [Piece], z: Option<&mut zstd::bulk::Compressor<'static>>| {
        let mut z = z;
        for p in run.iter_mut() {
            p.sha256 = Some(sha256_hex(&p.data));
            if let Some(z) = z.as_deref_mut() {
                p.packed = Some(z.compress(&p.data)?);
            }
        }
        Ok::<(), io::Error>(())
    };
    let total: u64 = batch.iter().map(|p| p.data.len() as u64).sum();
    if workers <= 1 || batch.len() <= 1 {
        return work(batch, compressors.first_mut());
    }
    // Runs of about total / workers bytes each.
    let share = total.div_ceil(workers as u64).max(1);
    let mut runs: Vec<&mut [Piece]> = Vec::with_capacity(workers);
    let mut rest = batch;
    while !rest.is_empty() {
        let mut bytes = 0u64;
        let mut k = 0;
        while k < rest.len() && (bytes < share || k == 0) {
            bytes += rest[k].data.len() as u64;
            k += 1;
        }
        let (run, tail) = rest.split_at_mut(k);
        runs.push(run);
        rest = tail;
    }
    std::thread::scope(|s| {
        let mut zs = compressors.iter_mut();
        let handles: Vec<_> = runs
            .into_iter()
            .map(|run| {
                let z = zs.next();
                s.spawn(move || work(run, z))
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().expect("a packing thread does not panic"))
    })
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

/// Maps the hot list's touches to chunks: first touch wins, and a chunk whose content is
/// already in the hot set is not repeated.
fn hot_refs(manifest: &Manifest, hot: &HotList) -> Vec<ChunkRef> {
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
    refs
}

/// What a bundle occupies at its origin: every object a server stores, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OriginSize {
    /// Objects (files) in all.
    pub objects: u64,
    /// Bytes in all.
    pub bytes: u64,
    /// Bytes of the cold objects (`blobs/cold/`: every piece that is not hot, once).
    pub cold: u64,
    /// Bytes of the start object (the manifest and the hot pieces).
    pub start: u64,
    /// Bytes of the rest: the manifest, its zstd copy, the signature.
    pub other: u64,
}

/// Measures the bundle directory `bundle` as an origin stores it ([`OriginSize`]).
pub fn origin_size(bundle: &Path) -> io::Result<OriginSize> {
    let mut size = OriginSize::default();
    let mut stack = vec![bundle.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for item in fs::read_dir(&dir)? {
            let item = item?;
            let meta = item.metadata()?;
            if meta.is_dir() {
                stack.push(item.path());
                continue;
            }
            let rel = item.path();
            let rel = rel.strip_prefix(bundle).unwrap_or(&rel).to_string_lossy().into_owned();
            let n = meta.len();
            size.objects += 1;
            size.bytes += n;
            let kind = if rel.starts_with("blobs/cold/") {
                &mut size.cold
            } else if rel == crate::start::START_OBJECT {
                &mut size.start
            } else {
                &mut size.other
            };
            *kind += n;
        }
    }
    Ok(size)
}

mod output;

#[cfg(test)]
mod tests;
