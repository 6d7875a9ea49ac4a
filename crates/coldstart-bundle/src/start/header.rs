//! The start object's fixed facts: its path and the manifest's paths in a bundle, its header's
//! magic, version and length, and the largest manifest it may carry. The manifest checks a hot
//! part's offset against them, so they stand apart from the start object's reading and writing.

/// The start object's path inside a bundle.
pub const START_OBJECT: &str = "start";
/// The zstd-compressed manifest's path inside a bundle.
pub const MANIFEST_ZST: &str = "manifest.json.zst";
/// The uncompressed manifest's path inside a bundle.
pub const MANIFEST_JSON: &str = "manifest.json";
/// The first bytes of a start object.
pub const MAGIC: &[u8; 8] = b"CSSTART\0";
/// The start-object version this build writes and reads.
pub const START_VERSION: u32 = 2;
/// The header's length in bytes.
pub const HEADER_LEN: usize = 80;
/// The largest manifest a reader accepts (a bound on what a header may make it allocate).
pub const MAX_MANIFEST: u64 = 256 << 20;
