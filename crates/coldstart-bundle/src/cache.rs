//! The local content-addressed chunk cache.
//!
//! Chunks are stored by their SHA-256 under `DIR/sha256/XX/HASH`, so the cache is shared by
//! every bundle and every mount on the host (the paper's warm-remote start). Writers put a
//! complete temporary file in `DIR/tmp` and rename it into place, so a reader sees either no
//! file or a whole one, and two mounts writing the same chunk at once both succeed with the
//! same content. Readers verify the digest anyway: a damaged entry is removed and reported as
//! a miss, never returned.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use coldstart_error::Category;

use crate::manifest::{Chunk, Sha256Hex};
use crate::verify_chunk;

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot use chunk cache {path}: {source}; choose another with --cache-dir")]
    Io { path: PathBuf, source: io::Error },
}

impl CacheError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            CacheError::Io { .. } => Category::Environment,
        }
    }
}

/// A content-addressed chunk cache in a directory.
#[derive(Debug, Clone)]
pub struct ChunkCache {
    root: PathBuf,
}

impl ChunkCache {
    /// Opens (creating if needed) the cache at `root`.
    pub fn open(root: &Path) -> Result<ChunkCache, CacheError> {
        for d in [root.join("sha256"), root.join("tmp")] {
            fs::create_dir_all(&d).map_err(|source| CacheError::Io { path: d.clone(), source })?;
        }
        Ok(ChunkCache { root: root.to_path_buf() })
    }

    /// The cache directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, hash: &Sha256Hex) -> PathBuf {
        self.root.join("sha256").join(&hash.as_str()[..2]).join(hash.as_str())
    }

    /// The chunk's bytes if the cache holds an intact copy. A damaged copy is removed.
    pub fn get(&self, chunk: &Chunk) -> Option<Vec<u8>> {
        let path = self.path(&chunk.sha256);
        let data = fs::read(&path).ok()?;
        if verify_chunk(chunk, &data) {
            Some(data)
        } else {
            let _ = fs::remove_file(&path);
            None
        }
    }

    /// The chunk's bytes, checked for their length only: for a chunk the caller has already
    /// read with [`ChunkCache::get`] (or verified and stored) in this process, so that a
    /// mount checks each cached chunk's SHA-256 once, not on every read.
    pub fn get_verified_before(&self, chunk: &Chunk) -> Option<Vec<u8>> {
        let data = fs::read(self.path(&chunk.sha256)).ok()?;
        (data.len() as u64 == chunk.length).then_some(data)
    }

    /// Whether a copy is present (not verified: use [`ChunkCache::get`] to read).
    pub fn contains(&self, hash: &Sha256Hex) -> bool {
        self.path(hash).exists()
    }

    /// Stores a chunk the caller has verified.
    pub fn put(&self, hash: &Sha256Hex, data: &[u8]) -> Result<(), CacheError> {
        let path = self.path(hash);
        if path.exists() {
            return Ok(());
        }
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CacheError::Io { path, source }
        };
        let dir = path.parent().expect("cache paths have a parent");
        fs::create_dir_all(dir).map_err(err(dir))?;
        let tmp = self.root.join("tmp").join(format!("{}.{}", hash, coldstart_fs::unique()));
        let result = (|| {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(data)?;
            fs::rename(&tmp, &path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(err(&path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sha256_hex;

    /// A chunk at offset 0 holding `data`.
    fn chunk_of(data: &[u8]) -> Chunk {
        Chunk {
            offset: 0,
            length: data.len() as u64,
            sha256: sha256_hex(data),
            stored: None,
            object: None,
            at: 0,
        }
    }

    #[test]
    fn a_damaged_entry_is_a_miss_and_is_removed() {
        let d = tempfile::tempdir().unwrap();
        let cache = ChunkCache::open(d.path()).unwrap();
        let data = b"hello chunk".to_vec();
        let chunk = chunk_of(&data);
        assert_eq!(cache.get(&chunk), None);
        cache.put(&chunk.sha256, &data).unwrap();
        assert_eq!(cache.get(&chunk), Some(data.clone()));
        fs::write(cache.path(&chunk.sha256), b"hello chunK").unwrap();
        assert_eq!(cache.get(&chunk), None);
        assert!(!cache.contains(&chunk.sha256));
    }

    #[test]
    fn concurrent_writers_of_the_same_chunk_agree() {
        let d = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let chunk = chunk_of(&data);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let cache = ChunkCache::open(d.path()).unwrap();
                    for _ in 0..20 {
                        cache.put(&chunk.sha256, &data).unwrap();
                        if let Some(got) = cache.get(&chunk) {
                            assert_eq!(got, data);
                        }
                    }
                });
            }
        });
        let cache = ChunkCache::open(d.path()).unwrap();
        assert_eq!(cache.get(&chunk), Some(data));
        assert_eq!(fs::read_dir(d.path().join("tmp")).unwrap().count(), 0);
    }
}
