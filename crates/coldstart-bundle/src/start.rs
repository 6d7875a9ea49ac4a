//! The start object and the compressed manifest: what a client needs before a program can
//! start, in as few round trips as possible.
//!
//! A mount must read the manifest before anything else, and a hot-set strategy then asks for
//! the hot set: two round trips before the program's first byte. The *start object*
//! (`BUNDLE/start`) is both in one static file, so one `GET` brings them:
//!
//! ```text
//! offset  size  field
//!      0     8  magic  "CSSTART\0"
//!      8     4  start-object version, u32 little-endian (2)
//!     12     4  manifest encoding, u32 LE: 0 = manifest.json as is, 1 = one zstd frame of it
//!     16     8  stored manifest length (bytes that follow the header), u64 LE
//!     24     8  manifest length (decoded: manifest.json's length), u64 LE
//!     32    32  SHA-256 of the decoded manifest (manifest.json byte for byte)
//!     64     8  hot part length (the manifest's `hot.size`), u64 LE
//!     72     8  hot part offset (the manifest's `hot.offset`), u64 LE
//!     80     .  the stored manifest, zeros up to the hot part offset, then the hot part
//! ```
//!
//! The hot part is where the hot pieces are stored, and nowhere else: a reader that has the
//! manifest from elsewhere reads a hot piece with a `Range` of this object at `hot.offset`
//! plus the piece's `at`. The manifest says where its own copy ends (zeros pad the gap), so
//! no reader needs the header to find a piece.
//!
//! A reader parses the manifest as soon as its bytes have arrived and keeps receiving the hot
//! chunks while the program runs. The manifest is checked against its digest before it is
//! parsed; every hot chunk, as everywhere, against its own SHA-256.
//!
//! `BUNDLE/manifest.json.zst` is `manifest.json` as one zstd frame (with zstd's content
//! checksum), for the strategies that need the manifest only. Both are copies: a reader that
//! finds neither (a bundle packed before them) reads `manifest.json`.

use std::path::{Path, PathBuf};

use coldstart_error::Category;

use crate::manifest::{Manifest, ManifestError};

pub(crate) mod header;
pub use header::{
    HEADER_LEN, MAGIC, MANIFEST_JSON, MANIFEST_ZST, MAX_MANIFEST, START_OBJECT, START_VERSION,
};

/// The zstd level of the compressed manifest (packing is done once, fetching often).
const LEVEL: i32 = 19;

/// How the start object stores the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestEncoding {
    /// `manifest.json` as is.
    Json,
    /// One zstd frame of `manifest.json`.
    Zstd,
}

/// The start object's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartHeader {
    pub encoding: ManifestEncoding,
    /// Bytes of the stored manifest after the header.
    pub manifest_stored: u64,
    /// Bytes of the decoded manifest.
    pub manifest_len: u64,
    /// SHA-256 of the decoded manifest.
    pub manifest_sha256: [u8; 32],
    /// Bytes of the hot part.
    pub hot_len: u64,
    /// Where the hot part starts in the object (at or after the manifest's end).
    pub hot_at: u64,
}

/// Why a start object or a compressed manifest was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    #[error("not a start object (bad magic)")]
    Magic,
    #[error("start object version {0}, this build reads version {START_VERSION}")]
    Version(u32),
    #[error("unknown manifest encoding {0}")]
    Encoding(u32),
    #[error("the manifest is {0} bytes, more than the {MAX_MANIFEST} a reader accepts")]
    TooLarge(u64),
    #[error("the manifest does not decode or does not match its SHA-256")]
    Corrupt,
    #[error("the hot part is {got} bytes, the manifest's hot set {want}")]
    HotLength { got: u64, want: u64 },
    #[error(
        "its hot part does not hold `{0}` chunk {1} where the manifest says (its SHA-256 differs)"
    )]
    HotDiffers(String, usize),
    #[error("the hot part starts at byte {got}, the manifest says {want}")]
    HotOffset { got: u64, want: u64 },
    #[error("the object is {got} bytes, its header says {want}")]
    Length { got: u64, want: u64 },
    #[error("its manifest is not manifest.json")]
    Differs,
}

impl StartError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            StartError::Magic
            | StartError::Version(_)
            | StartError::Encoding(_)
            | StartError::TooLarge(_)
            | StartError::Corrupt
            | StartError::HotLength { .. }
            | StartError::HotDiffers(..)
            | StartError::HotOffset { .. }
            | StartError::Length { .. }
            | StartError::Differs => Category::Usage,
        }
    }
}

impl StartHeader {
    /// Reads a header (the first [`HEADER_LEN`] bytes of a start object).
    pub fn parse(b: &[u8; HEADER_LEN]) -> Result<StartHeader, StartError> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        if &b[..8] != MAGIC {
            return Err(StartError::Magic);
        }
        if u32_at(8) != START_VERSION {
            return Err(StartError::Version(u32_at(8)));
        }
        let encoding = match u32_at(12) {
            0 => ManifestEncoding::Json,
            1 => ManifestEncoding::Zstd,
            e => return Err(StartError::Encoding(e)),
        };
        let (manifest_stored, manifest_len) = (u64_at(16), u64_at(24));
        for n in [manifest_stored, manifest_len] {
            if n > MAX_MANIFEST {
                return Err(StartError::TooLarge(n));
            }
        }
        if encoding == ManifestEncoding::Json && manifest_stored != manifest_len {
            return Err(StartError::Corrupt);
        }
        let hot_at = u64_at(72);
        if hot_at < HEADER_LEN as u64 + manifest_stored || hot_at > HEADER_LEN as u64 + MAX_MANIFEST
        {
            return Err(StartError::Corrupt);
        }
        // The object, hot part included, no longer than a file's offsets reach (2^63 - 1).
        let hot_len = u64_at(64);
        if hot_at.checked_add(hot_len).is_none_or(|end| end > i64::MAX as u64) {
            return Err(StartError::Corrupt);
        }
        Ok(StartHeader {
            encoding,
            manifest_stored,
            manifest_len,
            manifest_sha256: b[32..64].try_into().unwrap(),
            hot_len,
            hot_at,
        })
    }

    /// The header's bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&START_VERSION.to_le_bytes());
        let e: u32 = match self.encoding {
            ManifestEncoding::Json => 0,
            ManifestEncoding::Zstd => 1,
        };
        b[12..16].copy_from_slice(&e.to_le_bytes());
        b[16..24].copy_from_slice(&self.manifest_stored.to_le_bytes());
        b[24..32].copy_from_slice(&self.manifest_len.to_le_bytes());
        b[32..64].copy_from_slice(&self.manifest_sha256);
        b[64..72].copy_from_slice(&self.hot_len.to_le_bytes());
        b[72..80].copy_from_slice(&self.hot_at.to_le_bytes());
        b
    }

    /// Where the stored manifest ends in the object.
    pub fn manifest_end(&self) -> u64 {
        HEADER_LEN as u64 + self.manifest_stored
    }

    /// Where the hot part starts in the object.
    pub fn hot_offset(&self) -> u64 {
        self.hot_at
    }

    /// The object's whole length.
    pub fn total_len(&self) -> u64 {
        self.hot_offset() + self.hot_len
    }

    /// The manifest's bytes from its stored form (the `manifest_stored` bytes after the
    /// header): decoded if compressed (never to more than `manifest_len`), then checked
    /// against its length and digest.
    pub fn decode_manifest(&self, stored: &[u8]) -> Result<Vec<u8>, StartError> {
        if stored.len() as u64 != self.manifest_stored {
            return Err(StartError::Corrupt);
        }
        let json = match self.encoding {
            ManifestEncoding::Json => stored.to_vec(),
            ManifestEncoding::Zstd => zstd::bulk::decompress(stored, self.manifest_len as usize)
                .map_err(|_| StartError::Corrupt)?,
        };
        if json.len() as u64 != self.manifest_len || digest(&json) != self.manifest_sha256 {
            return Err(StartError::Corrupt);
        }
        Ok(json)
    }
}

fn digest(data: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(data).into()
}

/// `manifest.json`'s bytes as one zstd frame with zstd's content checksum (deterministic: the
/// same input gives the same bytes).
pub fn compress_manifest(json: &[u8]) -> Vec<u8> {
    let mut z = zstd::bulk::Compressor::new(LEVEL).expect("zstd level 19 is valid");
    z.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
        .expect("the checksum flag is a valid parameter");
    z.compress(json).expect("compressing into a growing buffer does not fail")
}

/// The manifest from `manifest.json.zst`'s bytes: decoded (at most [`MAX_MANIFEST`] bytes, the
/// frame's checksum checked by zstd), then parsed and validated.
pub fn parse_compressed_manifest(bytes: &[u8]) -> Result<Manifest, CompressedManifestError> {
    Ok(Manifest::parse(&decode_compressed_manifest(bytes)?)?)
}

/// `manifest.json`'s bytes from `manifest.json.zst` (never more than [`MAX_MANIFEST`]).
pub fn decode_compressed_manifest(bytes: &[u8]) -> Result<Vec<u8>, StartError> {
    let mut out = Vec::new();
    let mut dec = zstd::stream::read::Decoder::new(bytes).map_err(|_| StartError::Corrupt)?;
    use std::io::Read;
    (&mut dec).take(MAX_MANIFEST + 1).read_to_end(&mut out).map_err(|_| StartError::Corrupt)?;
    if out.len() as u64 > MAX_MANIFEST {
        return Err(StartError::TooLarge(out.len() as u64));
    }
    Ok(out)
}

/// Why `manifest.json.zst` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CompressedManifestError {
    /// It does not decode: a reader falls back to `manifest.json`.
    #[error("{0}")]
    Start(#[from] StartError),
    /// It decodes to a manifest that is not valid: the bundle is rejected.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

impl CompressedManifestError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            CompressedManifestError::Start(e) => e.category(),
            CompressedManifestError::Manifest(e) => e.category(),
        }
    }
}

/// The manifest as the start object stores it, given its zstd frame `z`
/// ([`compress_manifest`]): compressed when that is smaller.
fn stored_manifest<'a>(json: &'a [u8], z: &'a [u8]) -> (ManifestEncoding, &'a [u8]) {
    if z.len() < json.len() {
        (ManifestEncoding::Zstd, z)
    } else {
        (ManifestEncoding::Json, json)
    }
}

/// Where the manifest `json` ends in a start object: the least hot part offset it allows.
pub fn manifest_end(json: &[u8]) -> u64 {
    (HEADER_LEN + stored_manifest(json, &compress_manifest(json)).1.len()) as u64
}

/// The start object of a bundle whose manifest is `json` and hot part `hot`, starting at
/// `hot_at` (at least [`manifest_end`]; zeros before it).
pub fn encode(json: &[u8], hot: &[u8], hot_at: u64) -> Vec<u8> {
    encode_with(json, &compress_manifest(json), hot, hot_at)
}

/// A manifest laid out with its hot part.
pub struct LaidOut {
    /// `manifest.json`'s bytes, with the hot part's offset in them.
    pub json: Vec<u8>,
    /// `manifest.json.zst`'s bytes ([`compress_manifest`] of `json`).
    pub compressed: Vec<u8>,
    /// The start object: header, stored manifest, zeros, `hot`.
    pub start: Vec<u8>,
}

/// The manifest `json_at(offset)` says the hot part starts at `offset`; its stored form decides
/// where it can start. Tries offsets from 0 until the manifest fits before the one it names
/// (16 bytes of slack each time, so one more try almost always settles it), compressing each
/// manifest once, and builds the start object with `hot`.
pub fn lay_out<E>(
    mut json_at: impl FnMut(u64) -> Result<Vec<u8>, E>,
    hot: &[u8],
) -> Result<LaidOut, E> {
    let mut offset = 0u64;
    loop {
        let json = json_at(offset)?;
        let compressed = compress_manifest(&json);
        let end = (HEADER_LEN + stored_manifest(&json, &compressed).1.len()) as u64;
        if end <= offset {
            let start = encode_with(&json, &compressed, hot, offset);
            return Ok(LaidOut { json, compressed, start });
        }
        offset = end + 16;
    }
}

/// [`encode`] with the manifest's zstd frame `z` made already.
fn encode_with(json: &[u8], z: &[u8], hot: &[u8], hot_at: u64) -> Vec<u8> {
    let (encoding, stored) = stored_manifest(json, z);
    let header = StartHeader {
        encoding,
        manifest_stored: stored.len() as u64,
        manifest_len: json.len() as u64,
        manifest_sha256: digest(json),
        hot_len: hot.len() as u64,
        hot_at,
    };
    assert!(hot_at >= header.manifest_end(), "the hot part starts after the manifest");
    let mut out = Vec::with_capacity(hot_at as usize + hot.len());
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(stored);
    out.resize(hot_at as usize, 0);
    out.extend_from_slice(hot);
    out
}

/// A manifest that was edited as JSON (`json`, valid or not) made consistent with a start
/// object again: its `hot.offset` set to where the hot part `hot` can start after it, and the
/// start object that holds both. Returns (the manifest's new bytes, the start object). For
/// tools and tests that edit a bundle's manifest by hand.
pub fn rebuild(json: &[u8], hot: &[u8]) -> Result<(Vec<u8>, Vec<u8>), serde_json::Error> {
    let mut v: serde_json::Value = serde_json::from_slice(json)?;
    let laid = lay_out(
        |offset| {
            v["hot"]["offset"] = offset.into();
            let mut j = serde_json::to_vec_pretty(&v)?;
            j.push(b'\n');
            Ok(j)
        },
        hot,
    )?;
    Ok((laid.json, laid.start))
}

/// Checks a whole start object against the bundle's `manifest.json` (`json`, parsed as
/// `manifest`): the same manifest, the hot part where it says, and each hot piece's bytes
/// (part of [`check_bundle`]).
pub fn check(object: &[u8], json: &[u8], manifest: &Manifest) -> Result<(), StartError> {
    let head: &[u8; HEADER_LEN] = object
        .get(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(StartError::Length { got: object.len() as u64, want: HEADER_LEN as u64 })?;
    let h = StartHeader::parse(head)?;
    if object.len() as u64 != h.total_len() {
        return Err(StartError::Length { got: object.len() as u64, want: h.total_len() });
    }
    let stored = &object[HEADER_LEN..h.manifest_end() as usize];
    if h.decode_manifest(stored)? != json {
        return Err(StartError::Differs);
    }
    if h.hot_at != manifest.hot.offset {
        return Err(StartError::HotOffset { got: h.hot_at, want: manifest.hot.offset });
    }
    let part = &object[h.hot_offset() as usize..];
    if part.len() as u64 != manifest.hot.size {
        return Err(StartError::HotLength { got: part.len() as u64, want: manifest.hot.size });
    }
    for (r, (at, c)) in manifest.hot.chunks.iter().zip(manifest.hot_chunks()) {
        let stored = &part[at as usize..(at + c.stored_len()) as usize];
        if crate::decode_chunk(manifest.compression, c, stored).is_none() {
            return Err(StartError::HotDiffers(crate::manifest::shown(&r.path), r.index));
        }
    }
    Ok(())
}

/// Checks `manifest.json.zst` against `manifest.json`.
pub fn check_compressed(zst: &[u8], json: &[u8]) -> Result<(), StartError> {
    let out = zstd::bulk::decompress(zst, json.len()).map_err(|_| StartError::Corrupt)?;
    if out != json {
        return Err(StartError::Differs);
    }
    Ok(())
}

/// Why a bundle directory cannot be served as it is: its manifest is missing or invalid, or a
/// copy a client prefers to it does not match it.
#[derive(Debug, thiserror::Error)]
pub enum ServeCheckError {
    #[error("{}: {error}: is {} a bundle written by `coldstart pack`?", manifest.display(), bundle.display())]
    NoManifest { bundle: PathBuf, manifest: PathBuf, error: std::io::Error },
    #[error("{}: {error}", manifest.display())]
    Invalid { manifest: PathBuf, error: ManifestError },
    #[error("{}: {error}: it does not match manifest.json: re-pack the bundle", path.display())]
    Copy { path: PathBuf, error: String },
}

impl ServeCheckError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ServeCheckError::NoManifest { .. }
            | ServeCheckError::Invalid { .. }
            | ServeCheckError::Copy { .. } => Category::Usage,
        }
    }
}

/// Reads and validates `bundle`'s `manifest.json`, then checks the copies a client prefers
/// to it, where they exist (`manifest.json.zst` against it, the start object against it and
/// its hot pieces' digests): a client would mount what they say. What `coldstart serve` does before
/// serving a bundle.
pub fn check_bundle(bundle: &Path) -> Result<Manifest, ServeCheckError> {
    let path = bundle.join(MANIFEST_JSON);
    let json = std::fs::read(&path).map_err(|error| ServeCheckError::NoManifest {
        bundle: bundle.to_path_buf(),
        manifest: path.clone(),
        error,
    })?;
    let manifest = Manifest::parse(&json)
        .map_err(|error| ServeCheckError::Invalid { manifest: path.clone(), error })?;
    let refuse = |name: &str, error: &dyn std::fmt::Display| ServeCheckError::Copy {
        path: bundle.join(name),
        error: error.to_string(),
    };
    let read = |name: &str| match std::fs::read(bundle.join(name)) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(refuse(name, &e)),
    };
    if let Some(z) = read(MANIFEST_ZST)? {
        check_compressed(&z, &json).map_err(|e| refuse(MANIFEST_ZST, &e))?;
    }
    match read(START_OBJECT)? {
        Some(object) => check(&object, &json, &manifest).map_err(|e| refuse(START_OBJECT, &e))?,
        // The hot pieces are stored there alone.
        None if manifest.hot.size > 0 => {
            let e = "it is missing, and holds the hot pieces (nowhere else)";
            return Err(refuse(START_OBJECT, &e));
        }
        None => {}
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json() -> Vec<u8> {
        let mut s = String::from("{\"files\": [");
        for i in 0..200 {
            s.push_str(&format!("{{\"path\": \"lib/f{i}\", \"size\": {}}},", i * 4096));
        }
        s.push_str("]}");
        s.into_bytes()
    }

    #[test]
    fn an_object_round_trips_and_is_deterministic() {
        let (j, hot) = (json(), vec![7u8; 1000]);
        let at = manifest_end(&j) + 5;
        let o = encode(&j, &hot, at);
        assert_eq!(o, encode(&j, &hot, at), "deterministic");
        let h = StartHeader::parse(o[..HEADER_LEN].try_into().unwrap()).unwrap();
        assert_eq!(h.encoding, ManifestEncoding::Zstd, "a repetitive manifest compresses");
        assert!(h.manifest_stored < j.len() as u64 / 2);
        assert_eq!(h.total_len(), o.len() as u64);
        assert_eq!((h.manifest_end(), h.hot_offset()), (at - 5, at));
        let stored = &o[HEADER_LEN..h.manifest_end() as usize];
        assert_eq!(h.decode_manifest(stored).unwrap(), j);
        assert_eq!(&o[at as usize - 5..at as usize], &[0; 5], "zeros up to the hot part");
        assert_eq!(&o[h.hot_offset() as usize..], &hot[..]);
    }

    /// A header whose hot part's length reaches past 2^64 bytes: its object's length
    /// overflowed (a panic in a debug build; a wrapped, short length in a release one).
    #[test]
    fn a_hot_part_longer_than_any_object_is_refused() {
        let o = encode(b"{}", b"", manifest_end(b"{}"));
        let mut head: [u8; HEADER_LEN] = o[..HEADER_LEN].try_into().unwrap();
        for hot_len in [u64::MAX, u64::MAX - 100, 1 << 63] {
            head[64..72].copy_from_slice(&hot_len.to_le_bytes());
            assert!(matches!(StartHeader::parse(&head), Err(StartError::Corrupt)), "{hot_len}");
        }
        let big = i64::MAX as u64 - HEADER_LEN as u64 - 2;
        head[64..72].copy_from_slice(&big.to_le_bytes());
        let h = StartHeader::parse(&head).unwrap();
        assert_eq!(h.total_len(), i64::MAX as u64);
    }

    #[test]
    fn a_tiny_manifest_is_stored_as_is() {
        let o = encode(b"{}", b"", manifest_end(b"{}"));
        let h = StartHeader::parse(o[..HEADER_LEN].try_into().unwrap()).unwrap();
        assert_eq!(h.encoding, ManifestEncoding::Json);
        assert_eq!(h.decode_manifest(&o[HEADER_LEN..]).unwrap(), b"{}");
    }

    #[test]
    fn a_hot_part_before_the_manifest_ends_is_refused() {
        let (j, hot) = (json(), vec![7u8; 10]);
        let mut o = encode(&j, &hot, manifest_end(&j));
        let early = manifest_end(&j) - 1;
        o[72..80].copy_from_slice(&early.to_le_bytes());
        let h = StartHeader::parse(o[..HEADER_LEN].try_into().unwrap());
        assert_eq!(h, Err(StartError::Corrupt));
    }

    #[test]
    fn damage_is_refused() {
        let (j, hot) = (json(), vec![7u8; 10]);
        let o = encode(&j, &hot, manifest_end(&j));
        let head = |o: &[u8]| StartHeader::parse(o[..HEADER_LEN].try_into().unwrap());
        let mut bad = o.clone();
        bad[0] = b'X';
        assert_eq!(head(&bad), Err(StartError::Magic));
        let mut bad = o.clone();
        bad[8] = 9;
        assert_eq!(head(&bad), Err(StartError::Version(9)));
        let mut bad = o.clone();
        bad[12] = 5;
        assert_eq!(head(&bad), Err(StartError::Encoding(5)));
        let mut bad = o.clone();
        bad[23] = 0xff;
        assert!(matches!(head(&bad), Err(StartError::TooLarge(_))));
        // A flipped byte in the stored manifest: zstd or the digest refuses it.
        let h = head(&o).unwrap();
        for at in [HEADER_LEN, HEADER_LEN + 40, h.manifest_end() as usize - 1] {
            let mut bad = o.clone();
            bad[at] ^= 0x20;
            let stored = &bad[HEADER_LEN..h.manifest_end() as usize];
            assert_eq!(h.decode_manifest(stored), Err(StartError::Corrupt), "byte {at}");
        }
        // Truncated.
        assert_eq!(
            h.decode_manifest(&o[HEADER_LEN..h.manifest_end() as usize - 1]),
            Err(StartError::Corrupt)
        );
    }

    #[test]
    fn the_compressed_manifest_checks_its_content() {
        let j = json();
        let z = compress_manifest(&j);
        check_compressed(&z, &j).unwrap();
        let mut bad = z.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 1;
        assert!(check_compressed(&bad, &j).is_err());
        assert!(matches!(
            parse_compressed_manifest(&bad),
            Err(CompressedManifestError::Start(StartError::Corrupt))
        ));
        // It decodes, but is not a manifest: that is the bundle's fault, not the transfer's.
        assert!(matches!(parse_compressed_manifest(&z), Err(CompressedManifestError::Manifest(_))));
    }

    #[test]
    fn a_bundle_is_served_only_when_the_copies_match_its_manifest() {
        use crate::{pack, HotList, PackOptions, Touch};
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("f"), vec![7u8; 100_000]).unwrap();
        let touch = Touch { path: "f".into(), offset: 0, length: 10 };
        let hot = HotList { touches: vec![touch], ..HotList::default() };
        let b = d.path().join("b");
        pack(&src, &hot, &PackOptions::default(), &b).unwrap();
        assert_eq!(check_bundle(&b).unwrap().files.len(), 1);
        let mut object = std::fs::read(b.join(START_OBJECT)).unwrap();
        *object.last_mut().unwrap() ^= 1;
        std::fs::write(b.join(START_OBJECT), &object).unwrap();
        let e = check_bundle(&b).unwrap_err();
        assert!(matches!(e, ServeCheckError::Copy { .. }), "{e}");
        assert!(e.to_string().contains("re-pack the bundle"), "{e}");
        // The same length, other bytes: the hot piece named.
        let text = e.to_string();
        assert!(text.contains("does not hold `f` chunk 0"), "{text}");
        object.truncate(object.len() - 1);
        std::fs::write(b.join(START_OBJECT), &object).unwrap();
        assert!(check_bundle(&b).unwrap_err().to_string().contains("bytes"));
        // The start object holds the hot pieces: it cannot be left out.
        std::fs::remove_file(b.join(START_OBJECT)).unwrap();
        let e = check_bundle(&b).unwrap_err();
        assert!(e.to_string().contains("holds the hot pieces"), "{e}");
        // A bundle without a hot set needs none.
        let cold = d.path().join("cold");
        pack(&src, &HotList::default(), &PackOptions::default(), &cold).unwrap();
        std::fs::remove_file(cold.join(START_OBJECT)).unwrap();
        check_bundle(&cold).unwrap();
        std::fs::write(b.join(MANIFEST_ZST), b"not zstd").unwrap();
        assert!(matches!(check_bundle(&b), Err(ServeCheckError::Copy { .. })));
        std::fs::write(b.join(MANIFEST_JSON), b"{}").unwrap();
        assert!(matches!(check_bundle(&b), Err(ServeCheckError::Invalid { .. })));
        std::fs::remove_file(b.join(MANIFEST_JSON)).unwrap();
        let e = check_bundle(&b).unwrap_err();
        assert!(e.to_string().contains("a bundle written by `coldstart pack`"), "{e}");
    }
}
