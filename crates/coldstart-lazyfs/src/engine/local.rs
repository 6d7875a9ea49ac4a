//! Verified local copies of whole files, for FUSE passthrough: once every chunk of a file is
//! in the chunk cache, the mount can hand the kernel a local file with the same bytes, and
//! reads and page faults of it then go to that file as to any local one, at local speed,
//! without a request to this process.
//!
//! A copy is `CACHE/files/XX/HASH`, named by the file's SHA-256 like its whole blob. It is
//! written only from chunks this mount has checked against their SHA-256, into a temporary
//! file renamed into place, with a stamp beside it (`HASH.stamp`: its length, inode and
//! modification time once written). A later mount uses the copy only while the stamp still
//! matches it, so a copy that anything but this code wrote or changed is not used (it is
//! written again); like the chunk cache, it trusts what it wrote itself.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use super::Engine;

impl Engine {
    /// A local file with the bytes of manifest file `file`, if every one of its chunks is in
    /// the chunk cache: the copy already made (its stamp matching), or one made now from the
    /// cached chunks (each checked against its SHA-256 first, once per mount). `None` when a
    /// chunk is missing or the copy cannot be made.
    pub fn local_copy(&self, file: usize) -> Option<fs::File> {
        let entry = self.manifest.files.get(file)?;
        let hash = entry.sha256.as_ref()?;
        let path = self.copy_path(hash.as_str());
        let stamp = path.with_extension("stamp");
        if let (Ok(meta), Ok(said)) = (fs::metadata(&path), fs::read_to_string(&stamp)) {
            if meta.len() == entry.size && said == stamp_of(&meta) {
                return fs::File::open(&path).ok();
            }
        }
        if !entry.chunks.iter().all(|c| self.cache.contains(&c.sha256)) {
            return None;
        }
        let dir = path.parent()?;
        fs::create_dir_all(dir).ok()?;
        let tmp = dir.join(format!(".{}.tmp-{}", hash, std::process::id()));
        let written = (|| -> Option<()> {
            let mut out = std::io::BufWriter::new(fs::File::create(&tmp).ok()?);
            for (i, c) in entry.chunks.iter().enumerate() {
                let verified = &self.verified[self.first_chunk[file] + i];
                let data = if verified.load(std::sync::atomic::Ordering::Relaxed) {
                    self.cache.get_verified_before(c)?
                } else {
                    let data = self.cache.get(c)?;
                    verified.store(true, std::sync::atomic::Ordering::Relaxed);
                    data
                };
                out.write_all(&data).ok()?;
            }
            out.into_inner().ok()?.sync_all().ok()?;
            fs::rename(&tmp, &path).ok()?;
            let meta = fs::metadata(&path).ok()?;
            fs::write(&stamp, stamp_of(&meta)).ok()
        })();
        if written.is_none() {
            let _ = fs::remove_file(&tmp);
            return None;
        }
        fs::File::open(&path).ok()
    }

    fn copy_path(&self, hash: &str) -> PathBuf {
        self.cache.root().join("files").join(&hash[..2]).join(hash)
    }
}

/// What a copy's stamp says of it: length, inode and modification time.
fn stamp_of(meta: &fs::Metadata) -> String {
    format!("{} {} {}.{:09}\n", meta.len(), meta.ino(), meta.mtime(), meta.mtime_nsec())
}

#[cfg(test)]
mod tests {
    use crate::testing::{engine, fixture, read_all};
    use crate::Strategy;

    #[test]
    fn a_file_whose_chunks_are_all_cached_gets_a_local_copy_that_a_change_invalidates() {
        let f = fixture();
        let e = engine(&f, Strategy::Paged);
        assert!(e.local_copy(0).is_none(), "nothing cached yet");
        read_all(&e, "app").unwrap();
        let mut copy = e.local_copy(0).expect("every chunk cached");
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut copy, &mut got).unwrap();
        assert_eq!(got, f.files[0].1);
        // Changed behind the mount's back: not used as it is, written again.
        let hash = e.manifest().files[0].sha256.clone().unwrap();
        let path = f.cache.join("files").join(&hash.as_str()[..2]).join(hash.as_str());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 1;
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let fresh = engine(&f, Strategy::Paged);
        let mut again = fresh.local_copy(0).unwrap();
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut again, &mut got).unwrap();
        assert_eq!(got, f.files[0].1);
    }
}
