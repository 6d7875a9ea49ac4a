//! The coldstart bundle: a program's files as static, content-addressed pieces that any HTTP
//! server can serve, so a program can start over a network before all its bytes have arrived.
//!
//! A bundle is a directory:
//!
//! ```text
//! BUNDLE/manifest.json            format, version, every file, its pieces and where each is
//! BUNDLE/start                    a header, the manifest (zstd) and the hot pieces: one GET to start
//! BUNDLE/blobs/cold/ab/abcd...    a file's cold pieces back to back, named by the SHA-256 of its bytes
//! BUNDLE/manifest.json.zst        the manifest, zstd-compressed
//! ```
//!
//! Each piece's stored form is at the origin once (version 4): a hot piece in the start
//! object's hot part, any other in the cold object of the first file that has it. A reader
//! gets a piece with a `Range` of its object ([`Manifest::locate`]), a whole file by reading
//! its objects. With `compression: zstd` each piece is one zstd frame; pieces are still named
//! and checked by the SHA-256 of their uncompressed bytes, so the local cache and
//! deduplication do not depend on compression.
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
//! - [`cache`]: the local content-addressed chunk cache shared by mounts;
//! - [`learn`]: records of what users' starts read outside the hot set, where they are
//!   written and read ([`learn::store`]), and their merge into the next hot set.
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
pub mod learn;
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
    Chunk, ChunkRef, Compression, Entry, EntryKind, HotSet, Manifest, ManifestError, Object,
    Sha256Hex, FORMAT, OLDEST_VERSION, VERSION,
};
pub use pack::{
    origin_size, pack, OriginSize, PackError, PackOptions, Progress, DEFAULT_ZSTD_LEVEL,
};
pub use profile::{
    hot_list_from_profiles, read_profiles, ProfileHotList, ProfileHotListError, ProfileMapping,
    RealFiles,
};
pub use remote::{
    Cancel, DirRemote, FetchError, FetchOptions, FetchStats, HttpRemote, Remote, Sink, Span,
};

use sha2::{Digest, Sha256};

/// The SHA-256 of `data` as lowercase hex.
pub fn sha256_hex(data: &[u8]) -> Sha256Hex {
    hex_digest(Sha256::digest(data))
}

/// A finished SHA-256 as lowercase hex (for a digest fed in parts).
pub(crate) fn hex_digest(digest: impl IntoIterator<Item = u8>) -> Sha256Hex {
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push(char::from_digit((b >> 4) as u32, 16).unwrap());
        s.push(char::from_digit((b & 15) as u32, 16).unwrap());
    }
    Sha256Hex::new(s).expect("a digest is 64 hex digits")
}

/// The chunk's bytes from its stored form (its bytes in its object):
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

/// The path of a cold object inside a bundle: `blobs/cold/XX/HASH`, named by the SHA-256 of
/// its bytes.
pub fn object_path(hash: &Sha256Hex) -> String {
    format!("blobs/cold/{}/{}", &hash.as_str()[..2], hash.as_str())
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::CacheError, crate::HotListError, crate::ManifestError, crate::PackError, crate::FetchError, crate::s3::S3Error, crate::publish::PublishError, crate::profile::ProfileHotListError, crate::start::StartError, crate::start::CompressedManifestError, crate::start::ServeCheckError, crate::sign::KeyError, crate::sign::SignatureError)
}
