//! Hot sets learned from the users' starts: the record a start writes of what it read
//! outside its bundle's hot set (`run --learn`, `mount --learn`), and the merge of many such
//! records into the next hot set (`pack --learn-from`).
//!
//! A record names pieces by content, not by path: the SHA-256 of the whole file (the
//! manifest's `sha256` of the entry) and its size, then each piece's offset and length in that
//! file. So a record carries over to the next pack of the same files, wherever they are, and a
//! file that changed no longer matches. It holds offsets, lengths and times only: never a
//! byte of a file, never a path.
//!
//! ```json
//! {"format": "coldstart-learn-record", "version": 1,
//!  "bundle": "<SHA-256 of the bundle's manifest.json>", "strategy": "stream",
//!  "completed": true,
//!  "files": [{"sha256": "<SHA-256 of the file>", "size": 1048576}],
//!  "pieces": [{"file": 0, "offset": 65536, "length": 65536, "stored": 65536, "ms": 12,
//!              "read": [73728, 81920]}]}
//! ```
//!
//! `pieces` are in the order the start first read them, each once, with the time of that
//! first read in milliseconds since the mount had its manifest; `stored` is the bytes the
//! piece took on the wire in the bundle started (its compressed size, if compressed); `read`
//! (optional) is the part of the piece the start read, from its first page read to the end
//! of its last (file offsets): a cold chunk is whole in the bundle when one page of it was
//! read, and only that page need join the hot set.
//!
//! A record is input from another machine, so [`Record::parse`] is strict and bounded: at
//! most [`MAX_RECORD_BYTES`] bytes, [`MAX_FILES`] files and [`MAX_PIECES`] pieces, every
//! piece inside its file, each piece once, times in order; unknown fields are refused. A
//! start that read more than [`MAX_PIECES`] pieces outside its hot set writes the first of
//! them and says `"truncated": true`.
//!
//! [`merge`] turns records into hot ranges: a piece read by at least a share of the starts
//! (`--learn-share`), and that pays on the link the model assumes (the paper's Eq. 3: with `p`
//! that share, `t` the piece's time on the link and `l` its latency, a piece in the hot set
//! costs every start `t` and saves the starts that read it `l + t`, so it goes in when
//! `p (l + t) > t`), in the order of the median time at which the starts first read it. A
//! record can only name ranges of files the packed directory has (by content); `pack` maps
//! them to its files (whole pages; to its chunk grid where they would cut a file into more
//! runs than it has chunks), so a record moves bytes of the program into the hot set and
//! never adds any.

use std::collections::{HashMap, HashSet};

use coldstart_error::Category;
use serde::{Deserialize, Serialize};

use crate::manifest::{shown, Manifest, Sha256Hex, MAX_CHUNK_SIZE};

pub mod store;

/// The `format` name every record carries.
pub const FORMAT: &str = "coldstart-learn-record";
/// The record version this build writes and reads.
pub const VERSION: u32 = 1;
/// The largest record read, in bytes (2 MiB): a record of [`MAX_PIECES`] pieces of
/// [`MAX_FILES`] files takes at most 1.9 MB whatever its numbers, a typical piece 60 bytes
/// (80 with the part read).
pub const MAX_RECORD_BYTES: usize = 2 << 20;
/// The most pieces a record holds (640 MiB of 64 KiB pieces).
pub const MAX_PIECES: usize = 10_000;
/// The most files a record names.
pub const MAX_FILES: usize = 4096;
/// The latest first-read time a record may give, in milliseconds (one day).
pub const MAX_MS: u64 = 86_400_000;

/// What one start read outside its bundle's hot set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// The SHA-256 of the started bundle's `manifest.json`: which bundle (and hot set) the
    /// start read outside of.
    pub bundle: Sha256Hex,
    /// The strategy the mount ran.
    pub strategy: String,
    /// Whether the start ran to its end: the command exited 0 (`run`) or the mount was
    /// unmounted (`mount`), and no read failed.
    pub completed: bool,
    /// Whether the start read more than [`MAX_PIECES`] pieces outside its hot set (the
    /// record holds the first of them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The files the pieces are of.
    pub files: Vec<RecordFile>,
    /// The pieces, in first-read order.
    pub pieces: Vec<RecordPiece>,
}

/// A file by content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordFile {
    /// The SHA-256 of the file's whole content.
    pub sha256: Sha256Hex,
    /// Its size in bytes.
    pub size: u64,
}

/// A first read of a piece outside the hot set, as [`Record::of_reads`] takes it: an entry
/// of [`Manifest::files`], a piece of its chunks, the milliseconds since the mount had its
/// manifest, and the part of the piece read (file offsets; `None`: the whole piece).
pub type PieceRead = (usize, usize, u64, Option<(u64, u64)>);

/// One piece read outside the hot set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordPiece {
    /// An index into [`Record::files`].
    pub file: usize,
    pub offset: u64,
    pub length: u64,
    /// Its bytes on the wire in the bundle started.
    pub stored: u64,
    /// When the start first read it, in milliseconds since the mount had its manifest.
    pub ms: u64,
    /// The part of it the start read, `[start, end)` offsets in the file within the piece:
    /// from the first page read to the end of the last. Absent: the whole piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<[u64; 2]>,
}

/// Why a record was refused.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("could not be fetched: {0}")]
    Fetch(String),
    #[error("{bytes} bytes, over the {MAX_RECORD_BYTES} a record may have")]
    TooLarge { bytes: usize },
    #[error("not a coldstart learn record: {}", shown(&.0.to_string()))]
    Json(#[from] serde_json::Error),
    #[error("its format is `{}`, not `{FORMAT}`", shown(.0))]
    Format(String),
    #[error(
        "it is version {0}; this build reads version {VERSION}: use a coldstart that reads it"
    )]
    Version(u32),
    #[error("{count} {what}, over the {max} a record may have")]
    TooMany { what: &'static str, count: usize, max: usize },
    #[error("file {index} appears twice ({sha256})")]
    DuplicateFile { index: usize, sha256: Sha256Hex },
    #[error("piece {index} names file {file}, but the record has {files} files")]
    UnknownFile { index: usize, file: usize, files: usize },
    #[error("piece {index} ({offset}+{length}) lies beyond its file's {size} bytes")]
    BeyondFile { index: usize, offset: u64, length: u64, size: u64 },
    #[error("piece {index} has length {length}: a piece has 1 byte to {MAX_CHUNK_SIZE}")]
    Length { index: usize, length: u64 },
    #[error(
        "piece {index} has stored length {stored}: not 1 to zstd's bound for its {length} bytes"
    )]
    Stored { index: usize, stored: u64, length: u64 },
    #[error("piece {index} says it read {start}..{end}, not a part of its {offset}+{length}")]
    Read { index: usize, start: u64, end: u64, offset: u64, length: u64 },
    #[error("piece {index} appears twice (file {file} at {offset})")]
    DuplicatePiece { index: usize, file: usize, offset: u64 },
    #[error("piece {index} was first read at {ms} ms, before the piece listed before it, or past {MAX_MS} ms: pieces are in first-read order")]
    Order { index: usize, ms: u64 },
}

impl RecordError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        Category::Usage
    }
}

impl Record {
    /// Parses and checks a record (see the module documentation for every rule).
    pub fn parse(bytes: &[u8]) -> Result<Record, RecordError> {
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge { bytes: bytes.len() });
        }
        #[derive(Deserialize)]
        struct Head {
            format: String,
            version: u32,
        }
        let record: Record = match serde_json::from_slice(bytes) {
            Ok(r) => r,
            // Another format or a later version is named as such, not as bad JSON.
            Err(e) => {
                let head: Head = serde_json::from_slice(bytes).map_err(|_| e)?;
                if head.format != FORMAT {
                    return Err(RecordError::Format(head.format));
                }
                if head.version != VERSION {
                    return Err(RecordError::Version(head.version));
                }
                return Err(RecordError::Json(
                    serde_json::from_slice::<Record>(bytes).unwrap_err(),
                ));
            }
        };
        record.validate()?;
        Ok(record)
    }

    /// Checks every rule but the size of the bytes.
    pub fn validate(&self) -> Result<(), RecordError> {
        if self.format != FORMAT {
            return Err(RecordError::Format(self.format.clone()));
        }
        if self.version != VERSION {
            return Err(RecordError::Version(self.version));
        }
        if self.files.len() > MAX_FILES {
            let count = self.files.len();
            return Err(RecordError::TooMany { what: "files", count, max: MAX_FILES });
        }
        if self.pieces.len() > MAX_PIECES {
            let count = self.pieces.len();
            return Err(RecordError::TooMany { what: "pieces", count, max: MAX_PIECES });
        }
        let mut digests = HashSet::new();
        for (index, f) in self.files.iter().enumerate() {
            if !digests.insert(&f.sha256) {
                return Err(RecordError::DuplicateFile { index, sha256: f.sha256.clone() });
            }
        }
        let mut seen = HashSet::new();
        let mut last = 0;
        for (index, p) in self.pieces.iter().enumerate() {
            let Some(f) = self.files.get(p.file) else {
                return Err(RecordError::UnknownFile {
                    index,
                    file: p.file,
                    files: self.files.len(),
                });
            };
            if p.length == 0 || p.length > MAX_CHUNK_SIZE {
                return Err(RecordError::Length { index, length: p.length });
            }
            if p.offset.checked_add(p.length).is_none_or(|end| end > f.size) {
                return Err(RecordError::BeyondFile {
                    index,
                    offset: p.offset,
                    length: p.length,
                    size: f.size,
                });
            }
            let bound = zstd::zstd_safe::compress_bound(p.length as usize) as u64;
            if p.stored == 0 || p.stored > bound.max(p.length) {
                return Err(RecordError::Stored { index, stored: p.stored, length: p.length });
            }
            if let Some([start, end]) = p.read {
                if start < p.offset || start >= end || end > p.offset + p.length {
                    let (offset, length) = (p.offset, p.length);
                    return Err(RecordError::Read { index, start, end, offset, length });
                }
            }
            if !seen.insert((p.file, p.offset)) {
                return Err(RecordError::DuplicatePiece { index, file: p.file, offset: p.offset });
            }
            if p.ms < last || p.ms > MAX_MS {
                return Err(RecordError::Order { index, ms: p.ms });
            }
            last = p.ms;
        }
        Ok(())
    }

    /// The record of a start of the bundle `manifest` (whose `manifest.json` has SHA-256
    /// `bundle`) that first read the pieces `reads` outside its hot set, in that order: each
    /// `(file, piece, ms, read)`, an entry of [`Manifest::files`], a piece of its chunks and
    /// the part of the piece read (file offsets, clipped to the piece; `None` or nothing
    /// inside it: the whole piece). Reads of entries or pieces the manifest does not have are
    /// left out; past [`MAX_PIECES`] the record is truncated.
    pub fn of_reads(
        manifest: &Manifest,
        bundle: Sha256Hex,
        strategy: &str,
        completed: bool,
        reads: &[PieceRead],
    ) -> Record {
        let mut files = Vec::new();
        let mut index: HashMap<usize, usize> = HashMap::new();
        let mut pieces = Vec::new();
        let mut seen = HashSet::new();
        let mut last = 0;
        let mut truncated = false;
        for &(file, piece, ms, read) in reads {
            let Some(entry) = manifest.files.get(file) else { continue };
            let (Some(sha256), Some(c)) = (&entry.sha256, entry.chunks.get(piece)) else {
                continue;
            };
            if !seen.insert((file, piece)) {
                continue;
            }
            if pieces.len() == MAX_PIECES {
                truncated = true;
                break;
            }
            let next = files.len();
            let at = *index.entry(file).or_insert(next);
            if at == next {
                if files.len() == MAX_FILES {
                    truncated = true;
                    break;
                }
                files.push(RecordFile { sha256: sha256.clone(), size: entry.size });
            }
            last = ms.clamp(last, MAX_MS);
            let end = c.offset + c.length;
            let read = read
                .map(|(a, b)| (a.max(c.offset), b.min(end)))
                .filter(|&(a, b)| a < b && (a, b) != (c.offset, end))
                .map(|(a, b)| [a, b]);
            pieces.push(RecordPiece {
                file: at,
                offset: c.offset,
                length: c.length,
                stored: c.stored_len(),
                ms: last,
                read,
            });
        }
        Record {
            format: FORMAT.into(),
            version: VERSION,
            bundle,
            strategy: strategy.into(),
            completed,
            truncated,
            files,
            pieces,
        }
    }

    /// The record as the bytes written: compact JSON with a final newline (within
    /// [`MAX_RECORD_BYTES`]: [`MAX_PIECES`] pieces of the longest fields take less).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).expect("a record serialises");
        v.push(b'\n');
        v
    }

    /// A name for the record that no other start's takes: the bundle's first 16 hex digits,
    /// the time, the process and 64 random bits.
    pub fn unique_name(&self) -> String {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let mut random = [0u8; 8];
        let _ = getrandom::getrandom(&mut random);
        let random: String = random.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}{:03}-{}-{random}.json",
            &self.bundle.as_str()[..16],
            now.as_secs(),
            now.subsec_millis(),
            std::process::id()
        )
    }
}

/// Whether a start writes its record at `rate` (`--learn-rate`, 0 to 1): drawn at random,
/// so that a fleet sends about `rate` of its starts' records.
pub fn sampled(rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    let mut b = [0u8; 8];
    // A uniform number in [0, 1) from 53 random bits.
    getrandom::getrandom(&mut b).is_ok()
        && ((u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64) < rate
}

/// How [`merge`] decides.
#[derive(Debug, Clone, Copy)]
pub struct MergeOptions {
    /// The least share of the starts that read a piece for it to go in (0 to 1).
    pub share: f64,
    /// The link the model assumes: bits per second and seconds of latency per request.
    pub bits_per_second: f64,
    pub latency: f64,
}

/// One learned range: a piece of a file named by content.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedPiece {
    pub sha256: Sha256Hex,
    pub size: u64,
    pub offset: u64,
    pub length: u64,
    /// The share of the starts that read it.
    pub share: f64,
    /// The median time of its first read, in milliseconds.
    pub median_ms: u64,
}

/// What [`merge`] made of the records.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    /// The pieces to add to the hot set, by median first-read time.
    pub pieces: Vec<LearnedPiece>,
    /// Starts counted (completed records).
    pub starts: usize,
    /// Records left out because their start did not complete.
    pub incomplete: usize,
    /// Distinct pieces the records name.
    pub distinct: usize,
    /// Of those, read by fewer than the share of the starts.
    pub below_share: usize,
    /// Of those read often enough, pieces whose Eq. 3 test failed on the link.
    pub not_paying: usize,
}

/// Whether a piece of `stored` bytes read by a share `p` of the starts pays in the hot set on
/// the link of `opts`: Eq. 3, `p (l + t) > t`.
pub fn pays(p: f64, stored: u64, opts: &MergeOptions) -> bool {
    let t = stored as f64 * 8.0 / opts.bits_per_second.max(1.0);
    p * (opts.latency + t) > t
}

/// Merges records (each already checked by [`Record::parse`]) into the pieces to add to the
/// hot set (see the module documentation). Only completed starts count.
pub fn merge(records: &[Record], opts: &MergeOptions) -> Merged {
    let mut m = Merger::new(*opts);
    for r in records {
        m.add(r);
    }
    m.finish()
}

/// A piece by its file's number in a [`Merger`], its offset and its length.
type PieceKey = (u32, u64, u64);

/// Each start's first-read time of a piece and its stored length, and the part of it any
/// start read (the union of their `read`s).
#[derive(Debug, Default)]
struct Seen {
    times: Vec<u32>,
    stored: Vec<u32>,
    read: Option<(u64, u64)>,
}

/// [`merge`] one record at a time, so that a fleet's records need not be in memory at once:
/// what it keeps is one first-read time and one stored length (4 bytes each) per piece of
/// each completed start, and the part read of each distinct piece.
#[derive(Debug, Default)]
pub struct Merger {
    opts: MergeOptions,
    /// Files by content: (SHA-256, size) to a number of their own.
    files: HashMap<(Sha256Hex, u64), u32>,
    /// (file number, offset, length) to the first-read times and stored lengths.
    seen: HashMap<PieceKey, Seen>,
    starts: usize,
    incomplete: usize,
}

impl Default for MergeOptions {
    /// A share of one half, on 20 Mbit/s with 40 ms (the link of BENCHMARKS.md's network
    /// figures).
    fn default() -> Self {
        MergeOptions { share: 0.5, bits_per_second: 20e6, latency: 0.040 }
    }
}

impl Merger {
    pub fn new(opts: MergeOptions) -> Merger {
        Merger { opts, ..Merger::default() }
    }

    /// Counts one start's record.
    pub fn add(&mut self, r: &Record) {
        if !r.completed {
            self.incomplete += 1;
            return;
        }
        self.starts += 1;
        let ids: Vec<u32> = r
            .files
            .iter()
            .map(|f| {
                let next = self.files.len() as u32;
                *self.files.entry((f.sha256.clone(), f.size)).or_insert(next)
            })
            .collect();
        for p in &r.pieces {
            let slot = self.seen.entry((ids[p.file], p.offset, p.length)).or_default();
            slot.times.push(p.ms.min(MAX_MS) as u32);
            slot.stored.push(p.stored.min(p.length) as u32);
            let [a, b] = p.read.unwrap_or([p.offset, p.offset + p.length]);
            slot.read = Some(slot.read.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
        }
    }

    /// The pieces to add, by median first-read time.
    pub fn finish(self) -> Merged {
        let opts = self.opts;
        let mut merged = Merged {
            starts: self.starts,
            incomplete: self.incomplete,
            distinct: self.seen.len(),
            ..Merged::default()
        };
        let mut names: Vec<Option<&(Sha256Hex, u64)>> = vec![None; self.files.len()];
        for (k, &i) in &self.files {
            names[i as usize] = Some(k);
        }
        let starts = merged.starts.max(1) as f64;
        let median = |v: &mut Vec<u32>| {
            v.sort_unstable();
            v[(v.len() - 1) / 2]
        };
        for ((file, offset, length), mut seen) in self.seen {
            let share = seen.times.len() as f64 / starts;
            if share + 1e-9 < opts.share {
                merged.below_share += 1;
                continue;
            }
            // What joins is the part read: its share of the piece's stored bytes.
            let (start, end) = seen.read.unwrap_or((offset, offset + length));
            let part = u64::from(median(&mut seen.stored)) * (end - start);
            if !pays(share, part.div_ceil(length.max(1)), &opts) {
                merged.not_paying += 1;
                continue;
            }
            let (sha256, size) = names[file as usize].expect("every file has a number").clone();
            let median_ms = u64::from(median(&mut seen.times));
            let (offset, length) = (start, end - start);
            merged.pieces.push(LearnedPiece { sha256, size, offset, length, share, median_ms });
        }
        merged.pieces.sort_by(|a, b| {
            (a.median_ms, &a.sha256, a.offset).cmp(&(b.median_ms, &b.sha256, b.offset))
        });
        merged
    }
}

/// The learned pieces as ranges of the files of `dir` (the directory being packed):
/// each piece goes to every regular file under `dir` with its content (SHA-256 and size),
/// widened to whole pages, in the order of `merged`. A file whose learned ranges would be more
/// runs than it has chunks of `chunk_size` has them widened to that chunk grid instead, so
/// that records cannot cut a file into more pieces than its chunks and the hot extents do.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    /// The ranges to add to the hot list, in order.
    pub touches: Vec<crate::Touch>,
    /// Learned pieces of files that `dir` does not have (another build of them).
    pub unknown: usize,
    /// Files hashed to find them.
    pub hashed: usize,
}

/// Maps `merged`'s pieces to the files of `dir` ([`Resolved`]).
pub fn resolve(
    dir: &std::path::Path,
    merged: &Merged,
    chunk_size: u64,
) -> std::io::Result<Resolved> {
    let sizes: HashSet<u64> = merged.pieces.iter().map(|p| p.size).collect();
    let mut by_digest: HashMap<(Sha256Hex, u64), Vec<String>> = HashMap::new();
    let mut resolved = Resolved::default();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((abs, rel)) = stack.pop() {
        for item in std::fs::read_dir(&abs)? {
            let item = item?;
            let Ok(name) = item.file_name().into_string() else { continue };
            let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let ft = item.file_type()?;
            if ft.is_dir() {
                stack.push((item.path(), path));
            } else if ft.is_file() {
                let size = item.metadata()?.len();
                if sizes.contains(&size) {
                    resolved.hashed += 1;
                    let digest = file_sha256(&item.path())?;
                    by_digest.entry((digest, size)).or_default().push(path);
                }
            }
        }
    }
    for paths in by_digest.values_mut() {
        paths.sort();
    }
    // Runs of whole pages each file's pieces make, to bound them by its chunks.
    let page = crate::pack::PAGE;
    let widen = |p: &LearnedPiece, grid: u64| {
        let start = p.offset / grid * grid;
        (start, p.offset.saturating_add(p.length).div_ceil(grid).saturating_mul(grid).min(p.size))
    };
    let mut runs: HashMap<(&Sha256Hex, u64), Vec<(u64, u64)>> = HashMap::new();
    for p in &merged.pieces {
        runs.entry((&p.sha256, p.size)).or_default().push(widen(p, page));
    }
    let grid = chunk_size.max(1);
    let coarse: HashSet<(&Sha256Hex, u64)> = runs
        .into_iter()
        .filter(|((_, size), ranges)| {
            let mut ranges = ranges.clone();
            ranges.sort_unstable();
            let mut count = 0u64;
            let mut end = None;
            for (s, e) in ranges {
                if end.is_none_or(|x| s > x) {
                    count += 1;
                }
                end = Some(end.map_or(e, |x: u64| x.max(e)));
            }
            count > size.div_ceil(grid)
        })
        .map(|(k, _)| k)
        .collect();
    for p in &merged.pieces {
        let Some(paths) = by_digest.get(&(p.sha256.clone(), p.size)) else {
            resolved.unknown += 1;
            continue;
        };
        let coarse = coarse.contains(&(&p.sha256, p.size));
        let (start, end) = widen(p, if coarse { grid } else { page });
        for path in paths {
            resolved.touches.push(crate::Touch {
                path: path.clone(),
                offset: start,
                length: end - start,
            });
        }
    }
    Ok(resolved)
}

/// The SHA-256 of a file's content, read in pieces.
fn file_sha256(path: &std::path::Path) -> std::io::Result<Sha256Hex> {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(crate::hex_digest(h.finalize()));
        }
        h.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests;
