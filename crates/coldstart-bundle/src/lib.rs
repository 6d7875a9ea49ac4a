//! The coldstart bundle: a program's files as static, content-addressed pieces that any HTTP
//! server can serve, so a program can start over a network before all its bytes have arrived.
//!
//! A bundle is a directory:
//!
//! ```text
//! BUNDLE/manifest.json            format, version, every file, its chunks, the hot set
//! BUNDLE/blobs/sha256/ab/abcd...  one blob per distinct chunk, named by its SHA-256
//! BUNDLE/blobs/files/ab/abcd...   one blob per distinct regular file, whole (for `original`)
//! ```
//!
//! With `compression: zstd` each chunk is stored as one zstd frame (the hot and file blobs hold
//! the frames back to back); chunks are still named and checked by the SHA-256 of their
//! uncompressed bytes, so the local cache and deduplication do not depend on compression.
//!
//! ```text
//! BUNDLE/blobs/hot                the hot set: the chunks start-up needs, contiguous, in first-touch order
//! BUNDLE/start                    a header, the manifest (zstd) and the hot set: one GET to start
//! BUNDLE/manifest.json.zst        the manifest, zstd-compressed
//! ```
//!
//! The pieces of this crate:
//!
//! - [`manifest`]: the format and its validation (done before anything is mounted);
//! - [`pack()`]: building a bundle from a directory and a [`HotList`];
//! - [`profile`]: page profiles of `coldstart profile --pages` converted to that hot list;
//! - [`remote`]: getting bytes of a bundle: [`HttpRemote`] (HTTP/1.1 Range requests over a
//!   keep-alive pool) and [`DirRemote`] (a bundle on local disk, the fake used by unit
//!   tests), every wait, length and retry bounded and every fetch cancellable;
//! - [`start`]: the start object (manifest and hot set in one object) and the compressed
//!   manifest;
//! - [`s3`]: `s3://` URLs, their settings and credentials, SigV4; [`publish`]: uploading a
//!   bundle to a bucket, only what it lacks, the objects readers start from last;
//! - [`sign`]: signed bundles (`signature.json`, ed25519), key files, and the check a reader
//!   that trusts some keys makes before mounting;
//! - [`cache`]: the local content-addressed chunk cache shared by mounts.
//!
//! Every chunk is checked against its SHA-256 before it is used ([`verify_chunk`]); a chunk that
//! cannot be had is an error, never zeros.
//!
//! ```no_run
//! use coldstart_bundle::{pack, HotList, PackOptions};
//! let hot = HotList::default();
//! let manifest = pack("app/".as_ref(), &hot, &PackOptions::default(), "app.bundle".as_ref())?;
//! println!("{} files, hot set {} bytes", manifest.files.len(), manifest.hot.size);
//! # Ok::<(), coldstart_bundle::PackError>(())
//! ```

pub mod cache;
pub mod hotlist;
pub mod manifest;
pub mod pack;
pub mod profile;
pub mod publish;
pub mod remote;
pub mod s3;
pub mod sign;
pub mod start;

pub use cache::{CacheError, ChunkCache};
pub use hotlist::{HotList, HotListError, Touch};
pub use manifest::{
    Chunk, ChunkRef, Compression, Entry, EntryKind, HotSet, Manifest, ManifestError, Sha256Hex,
    FORMAT, OLDEST_VERSION, VERSION,
};
pub use pack::{
    origin_size, pack, OriginSize, PackError, PackOptions, Progress, DEFAULT_ZSTD_LEVEL,
};
pub use profile::{
    hot_list_from_profiles, read_profiles, ProfileHotList, ProfileHotListError, ProfileMapping,
    RealFiles,
};
pub use remote::{
    Cancel, DirRemote, FetchError, FetchOptions, FetchStats, HttpRemote, Remote, Span,
};

use sha2::{Digest, Sha256};

/// The SHA-256 of `data` as lowercase hex.
pub fn sha256_hex(data: &[u8]) -> Sha256Hex {
    let digest = Sha256::digest(data);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push(char::from_digit((b >> 4) as u32, 16).unwrap());
        s.push(char::from_digit((b & 15) as u32, 16).unwrap());
    }
    Sha256Hex::new(s).expect("a digest is 64 hex digits")
}

/// The chunk's bytes from its stored form (a blob, or its piece of the hot or a file blob):
/// decoded if the bundle is compressed (never to more than the chunk's length), then checked
/// against its length and SHA-256. `None` if anything is wrong.
pub fn decode_chunk(compression: Compression, chunk: &Chunk, stored: &[u8]) -> Option<Vec<u8>> {
    if stored.len() as u64 != chunk.stored_len() {
        return None;
    }
    let data = match compression {
        Compression::None => stored.to_vec(),
        Compression::Zstd => zstd::bulk::decompress(stored, chunk.length as usize).ok()?,
    };
    verify_chunk(chunk, &data).then_some(data)
}

/// Whether `data` is exactly the chunk `chunk` (length and SHA-256).
pub fn verify_chunk(chunk: &Chunk, data: &[u8]) -> bool {
    data.len() as u64 == chunk.length && sha256_hex(data) == chunk.sha256
}

/// The path of a regular file's whole blob inside a bundle: `blobs/files/XX/HASH`, named by
/// the SHA-256 of the file's content.
pub fn file_blob_path(hash: &Sha256Hex) -> String {
    format!("blobs/files/{}/{}", &hash.as_str()[..2], hash.as_str())
}

/// The path of a chunk's blob inside a bundle: `blobs/sha256/XX/HASH`.
pub fn blob_path(hash: &Sha256Hex) -> String {
    format!("blobs/sha256/{}/{}", &hash.as_str()[..2], hash.as_str())
}
