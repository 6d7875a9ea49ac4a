//! The bundle manifest (`manifest.json`) and its validation.
//!
//! The manifest is the only thing a client trusts before it has verified any byte, so
//! [`Manifest::parse`] checks everything a file system built from it relies on: relative paths
//! without `..`, parents that exist, chunks that tile each file exactly, a hot set that refers
//! to real chunks and adds up. A manifest that fails any check is rejected before any mount.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Component, Path};

use coldstart_error::Category;
use serde::{Deserialize, Serialize};

/// The `format` name every manifest carries.
pub const FORMAT: &str = "coldstart-bundle";
/// The manifest version this build writes and reads.
pub const VERSION: u32 = 4;
/// The oldest manifest version this build reads: version 4 stores each byte once at the
/// origin (each piece has one location), which no reader of version 3 or before can read, nor
/// this build theirs.
pub const OLDEST_VERSION: u32 = 4;
/// The largest chunk size a manifest may give: a reader holds one chunk of a fetch in memory,
/// so this bounds the memory of every fetch (`pack --chunk-size` takes no more).
pub const MAX_CHUNK_SIZE: u64 = 64 << 20;
/// The longest path a manifest may hold, in bytes (Linux's `PATH_MAX` less its NUL); also the
/// longest symbolic-link target.
pub const MAX_PATH: usize = 4095;
/// The longest name of one path component, in bytes (Linux's `NAME_MAX`).
pub const MAX_NAME: usize = 255;

/// `s` as it may be printed in a message: control characters escaped (`\n`, `\u{1b}`), so
/// that a hostile manifest cannot write to the terminal, and at most 300 characters.
pub fn shown(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(310));
    for (i, c) in s.chars().enumerate() {
        if i == 300 {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// A SHA-256 digest as 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Sha256Hex(String);

impl Sha256Hex {
    /// Checks that `s` is 64 lowercase hex digits.
    pub fn new(s: String) -> Result<Self, String> {
        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            Ok(Sha256Hex(s))
        } else {
            Err(format!("`{}` is not a SHA-256 (64 lowercase hex digits)", shown(&s)))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Sha256Hex {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Sha256Hex::new(s)
    }
}

impl From<Sha256Hex> for String {
    fn from(h: Sha256Hex) -> String {
        h.0
    }
}

impl fmt::Display for Sha256Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A bundle's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`] for this build.
    pub version: u32,
    /// The chunk size the bundle was packed with (the last chunk of a file may be shorter).
    pub chunk_size: u64,
    /// How every blob stores its chunks.
    #[serde(default)]
    pub compression: Compression,
    /// Every directory, regular file and symbolic link, sorted by path. The root is implied.
    pub files: Vec<Entry>,
    /// The cold objects: each a file's pieces that are neither hot nor stored before it, their
    /// stored forms back to back ([`crate::object_path`]). A piece names one by its index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<Object>,
    /// The hot set.
    pub hot: HotSet,
}

/// One cold object: named by the SHA-256 of its bytes, so a re-publish of the same bundle
/// uploads nothing and a new build never overwrites an object a reader of the old one uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Object {
    /// SHA-256 of the object's bytes.
    pub sha256: Sha256Hex,
    /// Its length in bytes.
    pub size: u64,
}

/// How a bundle's blobs store chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// A chunk's blob is its bytes.
    #[default]
    None,
    /// A chunk's blob is one zstd frame of its bytes; `stored` is the frame's length.
    Zstd,
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
}

/// One directory, file or symbolic link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Relative path with `/` separators, no `.` or `..` components.
    pub path: String,
    pub kind: EntryKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Bytes: the file's length, the link target's length, 0 for a directory.
    pub size: u64,
    /// The target of a symbolic link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// A file's chunks in offset order; they tile the file exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<Chunk>,
    /// A regular file's whole-content SHA-256: it names the file's copy assembled from its
    /// pieces in the local cache (FUSE passthrough).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<Sha256Hex>,
    /// The last modification, seconds since the epoch (`st_mtime`; version 3): programs that
    /// cache what they derive from a file (Python's `.pyc`) compare it.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub mtime: i64,
    /// Nanoseconds of [`Entry::mtime`], below 10^9.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub mtime_nsec: u32,
}

impl Entry {
    /// A directory at `path` with permission bits `mode`, modified at the epoch.
    pub fn dir(path: impl Into<String>, mode: u32) -> Entry {
        Entry {
            path: path.into(),
            kind: EntryKind::Dir,
            mode,
            size: 0,
            target: None,
            chunks: vec![],
            sha256: None,
            mtime: 0,
            mtime_nsec: 0,
        }
    }

    /// A symbolic link at `path` to `target` (mode 0777, as Linux reports links), modified at
    /// the epoch.
    pub fn symlink(path: impl Into<String>, target: String) -> Entry {
        Entry {
            kind: EntryKind::Symlink,
            mode: 0o777,
            size: target.len() as u64,
            target: Some(target),
            ..Entry::dir(path, 0o777)
        }
    }
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// One chunk of a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    pub offset: u64,
    pub length: u64,
    /// SHA-256 of the chunk's bytes (uncompressed): names its blob, checks it after decoding.
    pub sha256: Sha256Hex,
    /// Bytes in the blob when the bundle is compressed (the zstd frame's length).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<u64>,
    /// Where the piece's stored form is: an index into [`Manifest::objects`], or, when absent,
    /// the start object's hot part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<usize>,
    /// The stored form's offset in that object (in the hot part, from the hot part's start).
    pub at: u64,
}

impl Chunk {
    /// Bytes the chunk takes in a blob (and on the wire).
    pub fn stored_len(&self) -> u64 {
        self.stored.unwrap_or(self.length)
    }
}

/// A reference to one chunk: the file's path and the chunk's index in its list.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChunkRef {
    pub path: String,
    pub index: usize,
}

/// The chunks start-up needs, in first-touch order, stored contiguously in the start object's
/// hot part (and nowhere else).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HotSet {
    /// Where the hot part starts in the start object ([`crate::start`]).
    pub offset: u64,
    /// Bytes in the hot part: the sum of the referenced chunks' stored lengths.
    pub size: u64,
    /// The chunks, in order; chunk `i` starts in the hot part where chunk `i - 1` ended.
    pub chunks: Vec<ChunkRef>,
}

/// Why a manifest was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    // serde_json quotes what it did not expect (an unknown `kind`) as it is: escaped too.
    #[error("the manifest is not valid JSON for a coldstart bundle: {}", shown(&.0.to_string()))]
    Json(#[from] serde_json::Error),
    #[error("the manifest's format is `{}`, not `{FORMAT}`: is this a coldstart bundle?", shown(.0))]
    Format(String),
    #[error("the manifest is version {0}, this build reads version {VERSION} only (each byte stored once at the origin): re-pack the program with this coldstart (`coldstart pack`), or use a coldstart that reads version {0}")]
    Version(u32),
    #[error("the manifest's chunk size is {0}, not 1 byte to {MAX_CHUNK_SIZE} (64 MiB): re-pack the bundle with a smaller --chunk-size")]
    ChunkSize(u64),
    #[error("unsafe path `{}` in the manifest: paths must be relative, without `.` or `..`", shown(.0))]
    UnsafePath(String),
    #[error("path `{}` in the manifest is too long: at most {MAX_PATH} bytes, {MAX_NAME} per name", shown(.0))]
    LongPath(String),
    #[error("`{}` appears twice in the manifest", shown(.0))]
    Duplicate(String),
    #[error("`{}` has no parent directory in the manifest", shown(.0))]
    NoParent(String),
    #[error("`{}`: chunk {index} at offset {offset} overlaps the chunk before it", shown(path))]
    Overlap { path: String, index: usize, offset: u64 },
    #[error("`{}`: {detail}", shown(path))]
    Size { path: String, detail: String },
    #[error("`{}` is a symbolic link without a target", shown(.0))]
    NoTarget(String),
    #[error("the hot set refers to `{}` chunk {index}, which does not exist", shown(path))]
    HotRef { path: String, index: usize },
    #[error("the hot set lists `{}` chunk {index} twice", shown(path))]
    HotDuplicate { path: String, index: usize },
    #[error("`{}` is a regular file without the SHA-256 of its whole content", shown(.0))]
    NoFileDigest(String),
    #[error("`{}`: chunk {index}: {detail}", shown(path))]
    Stored { path: String, index: usize, detail: String },
    #[error("the hot set's size is {stated} but its chunks add up to {actual}")]
    HotSize { stated: u64, actual: u64 },
    #[error(
        "`{}` has mode {mode:#o}: a mode holds permission bits only (at most 0o7777)",
        shown(path)
    )]
    Mode { path: String, mode: u32 },
    #[error("hot.offset is {0}, past where a start object's hot part can begin (at most {max}: its header and the largest manifest)", max = crate::start::header::HEADER_LEN as u64 + crate::start::header::MAX_MANIFEST)]
    HotOffset(u64),
}

impl ManifestError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ManifestError::Json(_)
            | ManifestError::Format(_)
            | ManifestError::Version(_)
            | ManifestError::ChunkSize(_)
            | ManifestError::UnsafePath(_)
            | ManifestError::LongPath(_)
            | ManifestError::Duplicate(_)
            | ManifestError::NoParent(_)
            | ManifestError::Overlap { .. }
            | ManifestError::Size { .. }
            | ManifestError::NoTarget(_)
            | ManifestError::HotRef { .. }
            | ManifestError::HotDuplicate { .. }
            | ManifestError::NoFileDigest(_)
            | ManifestError::Stored { .. }
            | ManifestError::HotSize { .. }
            | ManifestError::Mode { .. }
            | ManifestError::HotOffset(_) => Category::Usage,
        }
    }
}

/// Whether `p` is a safe relative path: non-empty, only normal components.
pub fn is_safe_path(p: &str) -> bool {
    !p.is_empty()
        && !p.contains('\0')
        && !p.contains('\\')
        && !p.ends_with('/')
        && !p.contains("//")
        && Path::new(p).components().all(|c| matches!(c, Component::Normal(_)))
        && !p.split('/').any(|c| c == "." || c == "..")
}

impl Manifest {
    /// Parses and validates a manifest.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        // Read format and version first so a future version is named as such, not as bad JSON.
        #[derive(Deserialize)]
        struct Head {
            format: String,
            version: u32,
        }
        let head: Head = serde_json::from_slice(bytes)?;
        if head.format != FORMAT {
            return Err(ManifestError::Format(head.format));
        }
        if !(OLDEST_VERSION..=VERSION).contains(&head.version) {
            return Err(ManifestError::Version(head.version));
        }
        let manifest: Manifest = serde_json::from_slice(bytes)?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// The manifest as the bytes `pack` writes: pretty JSON with a final newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("a manifest serialises");
        v.push(b'\n');
        v
    }

    /// Checks every rule of the format (see the module documentation).
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.format != FORMAT {
            return Err(ManifestError::Format(self.format.clone()));
        }
        if !(OLDEST_VERSION..=VERSION).contains(&self.version) {
            return Err(ManifestError::Version(self.version));
        }
        if !(1..=MAX_CHUNK_SIZE).contains(&self.chunk_size) {
            return Err(ManifestError::ChunkSize(self.chunk_size));
        }
        // A hot part starts right after the start object's header and manifest.
        if self.hot.offset
            > crate::start::header::HEADER_LEN as u64 + crate::start::header::MAX_MANIFEST
        {
            return Err(ManifestError::HotOffset(self.hot.offset));
        }
        let mut kinds: HashMap<&str, EntryKind> = HashMap::new();
        for e in &self.files {
            if !is_safe_path(&e.path) {
                return Err(ManifestError::UnsafePath(e.path.clone()));
            }
            let long = |p: &str| p.len() > MAX_PATH || p.split('/').any(|n| n.len() > MAX_NAME);
            if long(&e.path) || e.target.as_ref().is_some_and(|t| t.len() > MAX_PATH) {
                return Err(ManifestError::LongPath(e.path.clone()));
            }
            if kinds.insert(&e.path, e.kind).is_some() {
                return Err(ManifestError::Duplicate(e.path.clone()));
            }
            if e.mode & !0o7777 != 0 {
                return Err(ManifestError::Mode { path: e.path.clone(), mode: e.mode });
            }
            if e.mtime_nsec >= 1_000_000_000 {
                return Err(ManifestError::Size {
                    path: e.path.clone(),
                    detail: format!("mtime_nsec is {}, not below 10^9", e.mtime_nsec),
                });
            }
        }
        for e in &self.files {
            if let Some((parent, _)) = e.path.rsplit_once('/') {
                if kinds.get(parent) != Some(&EntryKind::Dir) {
                    return Err(ManifestError::NoParent(e.path.clone()));
                }
            }
            let size_err = |detail: String| ManifestError::Size { path: e.path.clone(), detail };
            match e.kind {
                EntryKind::Dir => {
                    if e.size != 0
                        || !e.chunks.is_empty()
                        || e.target.is_some()
                        || e.sha256.is_some()
                    {
                        return Err(size_err("a directory has size 0 and no chunks".into()));
                    }
                }
                EntryKind::Symlink => {
                    let target = e.target.as_deref().unwrap_or("");
                    if target.is_empty() {
                        return Err(ManifestError::NoTarget(e.path.clone()));
                    }
                    if e.size != target.len() as u64 || !e.chunks.is_empty() {
                        return Err(size_err(format!(
                            "a symbolic link's size is its target's length ({}) and it has no chunks",
                            target.len()
                        )));
                    }
                }
                EntryKind::File => {
                    if e.sha256.is_none() {
                        return Err(ManifestError::NoFileDigest(e.path.clone()));
                    }
                    let mut end = 0u64;
                    for (index, c) in e.chunks.iter().enumerate() {
                        if c.offset < end {
                            return Err(ManifestError::Overlap {
                                path: e.path.clone(),
                                index,
                                offset: c.offset,
                            });
                        }
                        if c.offset > end {
                            return Err(size_err(format!(
                                "gap before chunk {index}: it starts at {} but the chunks before end at {end}",
                                c.offset
                            )));
                        }
                        let stored_err = |detail: &str| ManifestError::Stored {
                            path: e.path.clone(),
                            index,
                            detail: detail.into(),
                        };
                        match (self.compression, c.stored) {
                            (Compression::None, Some(_)) => {
                                return Err(stored_err(
                                    "a stored length in an uncompressed bundle",
                                ))
                            }
                            (Compression::Zstd, None) => {
                                return Err(stored_err(
                                    "no stored length in a compressed bundle",
                                ))
                            }
                            (Compression::Zstd, Some(n))
                                if n == 0 || n > zstd::zstd_safe::compress_bound(c.length as usize) as u64 =>
                            {
                                return Err(stored_err(
                                    "the stored length is 0 or larger than zstd's bound for the chunk",
                                ))
                            }
                            _ => {}
                        }
                        let room = match c.object {
                            None => Some(self.hot.size),
                            Some(i) => self.objects.get(i).map(|o| o.size),
                        };
                        match room {
                            None => return Err(stored_err("its object is not in the manifest")),
                            Some(room)
                                if c.at
                                    .checked_add(c.stored_len())
                                    .is_none_or(|end| end > room) =>
                            {
                                return Err(stored_err(
                                    "its stored form lies past its object's end",
                                ))
                            }
                            Some(_) => {}
                        }
                        if c.length == 0 || c.length > self.chunk_size {
                            return Err(size_err(format!(
                                "chunk {index} has length {}, not 1..={}",
                                c.length, self.chunk_size
                            )));
                        }
                        end = c
                            .offset
                            .checked_add(c.length)
                            .ok_or_else(|| size_err(format!("chunk {index} ends beyond 2^64")))?;
                    }
                    if end != e.size {
                        return Err(size_err(format!(
                            "size is {} but the chunks add up to {end}",
                            e.size
                        )));
                    }
                }
            }
        }
        let files = self.file_index();
        let mut seen = HashSet::new();
        let mut total = 0u64;
        for r in &self.hot.chunks {
            let chunk = files
                .get(r.path.as_str())
                .and_then(|e| e.chunks.get(r.index))
                .ok_or_else(|| ManifestError::HotRef { path: r.path.clone(), index: r.index })?;
            if !seen.insert(r) {
                return Err(ManifestError::HotDuplicate { path: r.path.clone(), index: r.index });
            }
            if chunk.object.is_some() || chunk.at != total {
                return Err(ManifestError::Stored {
                    path: r.path.clone(),
                    index: r.index,
                    detail: format!(
                        "a hot chunk is not in the hot part at {total}, where the hot set puts it"
                    ),
                });
            }
            total = total.saturating_add(chunk.stored_len());
        }
        if total != self.hot.size {
            return Err(ManifestError::HotSize { stated: self.hot.size, actual: total });
        }
        Ok(())
    }

    /// The entry at `path`.
    pub fn entry(&self, path: &str) -> Option<&Entry> {
        self.files.iter().find(|e| e.path == path)
    }

    /// Regular files by path.
    fn file_index(&self) -> HashMap<&str, &Entry> {
        self.files
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| (e.path.as_str(), e))
            .collect()
    }

    /// Where chunk `c`'s stored form is at the origin: the object's path in the bundle and the
    /// offset there (a hot piece's in the start object, past the manifest).
    pub fn locate(&self, c: &Chunk) -> (String, u64) {
        match c.object.and_then(|i| self.objects.get(i)) {
            Some(o) => (crate::object_path(&o.sha256), c.at),
            None => (crate::start::header::START_OBJECT.to_owned(), self.hot.offset + c.at),
        }
    }

    /// The distinct pieces of each object, each list by offset (one after the other, they are
    /// the object's bytes): first the start object's hot part (`None`), then
    /// [`Manifest::objects`] in order.
    pub fn pieces_by_object(&self) -> Vec<(Option<usize>, Vec<&Chunk>)> {
        let mut out: Vec<(Option<usize>, Vec<&Chunk>)> = std::iter::once(None)
            .chain((0..self.objects.len()).map(Some))
            .map(|o| (o, Vec::new()))
            .collect();
        let mut seen = HashSet::new();
        for c in self.files.iter().flat_map(|e| &e.chunks) {
            let slot = c.object.map_or(0, |i| i + 1);
            if slot < out.len() && seen.insert((c.object, c.at)) {
                out[slot].1.push(c);
            }
        }
        for (_, pieces) in &mut out {
            pieces.sort_by_key(|c| c.at);
        }
        out
    }

    /// The chunks of the hot set with their offsets in the hot part (stored bytes), in order.
    pub fn hot_chunks(&self) -> Vec<(u64, &Chunk)> {
        let files = self.file_index();
        let mut offset = 0;
        let mut out = Vec::with_capacity(self.hot.chunks.len());
        for r in &self.hot.chunks {
            if let Some(c) = files.get(r.path.as_str()).and_then(|e| e.chunks.get(r.index)) {
                out.push((offset, c));
                offset += c.stored_len();
            }
        }
        out
    }

    /// The chunk `r` refers to (a linear search: use [`Manifest::hot_chunks`] for many).
    pub fn chunk(&self, r: &ChunkRef) -> Option<&Chunk> {
        self.files
            .iter()
            .find(|e| e.path == r.path && e.kind == EntryKind::File)
            .and_then(|e| e.chunks.get(r.index))
    }

    /// Stored bytes of the distinct chunks (what fetching every chunk puts on the wire).
    pub fn stored_bytes(&self) -> u64 {
        let mut distinct = HashSet::new();
        self.files
            .iter()
            .flat_map(|e| &e.chunks)
            .filter(|c| distinct.insert(&c.sha256))
            .map(Chunk::stored_len)
            .fold(0, u64::saturating_add)
    }

    /// Total bytes of all files and of the distinct chunks (uncompressed).
    pub fn total_bytes(&self) -> (u64, u64) {
        let mut distinct = HashSet::new();
        let mut files = 0;
        let mut unique = 0;
        for e in self.files.iter().filter(|e| e.kind == EntryKind::File) {
            files = e.size.saturating_add(files);
            for c in &e.chunks {
                if distinct.insert(&c.sha256) {
                    unique = c.length.saturating_add(unique);
                }
            }
        }
        (files, unique)
    }
}

#[cfg(test)]
mod tests;
