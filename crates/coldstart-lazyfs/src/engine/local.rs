//! Verified local copies of whole files, for FUSE passthrough: once every chunk of a file is
//! in the chunk cache, the mount can hand the kernel a local file with the same bytes, and
//! reads and page faults of it then go to that file as to any local one, at local speed,
//! without a request to this process.
//!
//! A copy is `CACHE/files/XX/HASH`, named by the file's SHA-256 like its whole blob, written
//! read-only and only from chunks this mount has checked against their SHA-256, into a
//! temporary file renamed into place. Whoever can write to the cache can only make reads fail:
//! a mount hands the kernel a copy only once its content is known to be the manifest's, read
//! through the very descriptor it hands over (so that nothing renamed over the copy meanwhile
//! is used), in one of two ways:
//!
//! - checked now: every chunk-sized piece against the manifest's SHA-256 of that chunk (the
//!   digests every other read is checked against), on several threads at once; a copy that
//!   differs is removed and written again from the chunk cache;
//! - checked before, unchanged since: a check (or the writing of the copy) leaves a record
//!   beside the copy, `HASH.check`, whose `trusted.coldstart.check` extended attribute names
//!   the copy's device, inode, length and change time (`st_ctime`). Only a process with
//!   `CAP_SYS_ADMIN` (what passthrough itself needs) can write a `trusted.` attribute, and no
//!   process can set a change time back: any write to the copy, by anyone, changes it, so a
//!   record that still matches proves the content is the one checked. This is what the
//!   kernel's fs-verity would give (its digests checked as pages are read), which the kernels
//!   and file systems coldstart runs on may lack; unlike fs-verity it does not catch a disk
//!   that flips bits under an unchanged inode.
//!
//! The modification time, which the file's owner can set back, proves nothing and is not
//! looked at. Where the record cannot be written (a file system without `trusted.`
//! attributes), every mount checks the copy at its first open. Passthrough reads bypass this
//! process, so the check cannot wait for each piece's first read, as the chunk cache's can:
//! its cost is measured in BENCHMARKS.md ("The chunk cache's copies, checked").

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use coldstart_bundle::manifest::Entry;

use super::Engine;

/// The most threads a copy is checked on.
const CHECK_THREADS: usize = 4;

impl Engine {
    /// A local file with the bytes of manifest file `file`, if every one of its chunks is in
    /// the chunk cache: the copy already made (its content checked first), or one made now
    /// from the cached chunks (each checked against its SHA-256 first, once per mount).
    /// `None` when a chunk is missing or the copy cannot be made.
    pub fn local_copy(&self, file: usize) -> Option<fs::File> {
        let entry = self.manifest.files.get(file)?;
        let hash = entry.sha256.as_ref()?;
        let path = self.copy_path(hash.as_str());
        if let Ok(copy) = fs::File::open(&path) {
            let before = copy.metadata().ok()?;
            if recorded(&path).is_some_and(|r| r == identity(&before)) {
                return Some(copy);
            }
            let t = std::time::Instant::now();
            let matches = copy_matches(entry, &copy);
            let took = t.elapsed().as_nanos() as u64;
            self.counters.passthrough_check_ns.fetch_add(took, Ordering::Relaxed);
            if matches {
                // Recorded only if nothing changed it while it was read.
                if copy.metadata().is_ok_and(|m| identity(&m) == identity(&before)) {
                    record(&path, &identity(&before));
                }
                return Some(copy);
            }
            // Changed since it was written (or never whole): written again below.
            let _ = fs::remove_file(&path);
        }
        if !entry.chunks.iter().all(|c| self.cache.contains(&c.sha256)) {
            return None;
        }
        let dir = path.parent()?;
        fs::create_dir_all(dir).ok()?;
        let tmp = dir.join(format!(".{}.tmp-{}", hash, std::process::id()));
        let written = (|| -> Option<fs::File> {
            let mut out = std::io::BufWriter::new(fs::File::create(&tmp).ok()?);
            for (i, c) in entry.chunks.iter().enumerate() {
                let verified = &self.verified[self.first_chunk[file] + i];
                let data = if verified.load(Ordering::Relaxed) {
                    self.cache.get_verified_before(c)?
                } else {
                    let data = self.cache.get(c)?;
                    verified.store(true, Ordering::Relaxed);
                    data
                };
                out.write_all(&data).ok()?;
            }
            let out = out.into_inner().ok()?;
            out.sync_all().ok()?;
            // Read-only, and opened before the rename: what is handed over is what was
            // written here, whatever is renamed over the path afterwards.
            out.set_permissions(fs::Permissions::from_mode(0o444)).ok()?;
            let copy = fs::File::open(&tmp).ok()?;
            fs::rename(&tmp, &path).ok()?;
            record(&path, &identity(&copy.metadata().ok()?));
            Some(copy)
        })();
        if written.is_none() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    fn copy_path(&self, hash: &str) -> PathBuf {
        self.cache.root().join("files").join(&hash[..2]).join(hash)
    }
}

/// The name of the attribute that records a copy's check, on `HASH.check` beside it.
const RECORD: &str = "trusted.coldstart.check";

/// What a check of a copy records of it: its device, inode, length and change time, and
/// whether it is read-only and this process's (a copy anyone else may write is checked every
/// time).
fn identity(m: &fs::Metadata) -> String {
    // SAFETY: geteuid cannot fail.
    let mine = m.uid() == unsafe { libc::geteuid() } && m.mode() & 0o222 == 0;
    format!(
        "1 {} {} {} {}.{:09} {}",
        m.dev(),
        m.ino(),
        m.len(),
        m.ctime(),
        m.ctime_nsec(),
        if mine { "own" } else { "other" }
    )
}

/// The record beside `copy` of its last check, if there is one this process can trust (read
/// from a `trusted.` attribute: written with `CAP_SYS_ADMIN` only).
fn recorded(copy: &Path) -> Option<String> {
    let beside = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(copy.with_extension("check"))
        .ok()?;
    let name = CString::new(RECORD).ok()?;
    let mut buf = [0u8; 256];
    // SAFETY: fgetxattr writes at most `buf.len()` bytes into the buffer we own.
    let n = unsafe {
        libc::fgetxattr(beside.as_raw_fd(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
    };
    let n = usize::try_from(n).ok()?;
    let said = String::from_utf8(buf[..n].to_vec()).ok()?;
    said.ends_with(" own").then_some(said)
}

/// Records `identity` beside `copy` as checked; nothing where the file system or the
/// privileges do not allow it (every mount then checks the copy again).
fn record(copy: &Path, identity: &str) {
    let path = copy.with_extension("check");
    let _ = fs::remove_file(&path);
    let Ok(beside) = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    else {
        return;
    };
    let Ok(name) = CString::new(RECORD) else { return };
    // SAFETY: fsetxattr reads `identity.len()` bytes of the string we own.
    let set = unsafe {
        libc::fsetxattr(
            beside.as_raw_fd(),
            name.as_ptr(),
            identity.as_ptr().cast(),
            identity.len(),
            0,
        )
    };
    if set != 0 {
        let _ = fs::remove_file(&path);
    }
}

/// Whether `copy` holds exactly `entry`'s bytes: its length, then each chunk-sized piece
/// against its chunk's SHA-256, on up to [`CHECK_THREADS`] threads; the first piece that
/// differs ends the check.
fn copy_matches(entry: &Entry, copy: &fs::File) -> bool {
    if !copy.metadata().is_ok_and(|m| m.is_file() && m.len() == entry.size) {
        return false;
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = threads.clamp(1, CHECK_THREADS).min(entry.chunks.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut buf = Vec::new();
                while !failed.load(Ordering::Relaxed) {
                    let Some(c) = entry.chunks.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        return;
                    };
                    buf.resize(c.length as usize, 0);
                    let same = copy.read_exact_at(&mut buf, c.offset).is_ok()
                        && coldstart_bundle::verify_chunk(c, &buf);
                    if !same {
                        failed.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    !failed.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use crate::testing::{engine, fixture, read_all};
    use crate::Strategy;

    fn read_copy(e: &crate::engine::Engine, file: usize) -> Vec<u8> {
        let mut copy = e.local_copy(file).expect("every chunk cached");
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut copy, &mut got).unwrap();
        got
    }

    #[test]
    fn a_file_whose_chunks_are_all_cached_gets_a_local_copy_that_a_change_invalidates() {
        let f = fixture();
        let e = engine(&f, Strategy::Paged);
        assert!(e.local_copy(0).is_none(), "nothing cached yet");
        read_all(&e, "app").unwrap();
        assert_eq!(read_copy(&e, 0), f.files[0].1);
        // Replaced behind the mount's back: not used as it is, written again.
        let hash = e.manifest().files[0].sha256.clone().unwrap();
        let path = f.cache.join("files").join(&hash.as_str()[..2]).join(hash.as_str());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 1;
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read_copy(&engine(&f, Strategy::Paged), 0), f.files[0].1);
    }

    /// The copy was trusted by a stamp of its length, inode and modification time: one byte
    /// changed in place, the time set back, and the next mount handed the kernel the wrong
    /// bytes.
    #[test]
    fn a_copy_changed_in_place_with_its_time_kept_is_not_handed_over() {
        let f = fixture();
        let e = engine(&f, Strategy::Paged);
        read_all(&e, "app").unwrap();
        assert_eq!(read_copy(&e, 0), f.files[0].1);
        let hash = e.manifest().files[0].sha256.clone().unwrap();
        let path = f.cache.join("files").join(&hash.as_str()[..2]).join(hash.as_str());
        let before = std::fs::metadata(&path).unwrap().modified().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let copy = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let last = f.files[0].1.len() as u64 - 1;
        copy.write_all_at(&[f.files[0].1[last as usize] ^ 0x40], last).unwrap();
        copy.set_modified(before).unwrap();
        drop(copy);
        assert_eq!(read_copy(&engine(&f, Strategy::Paged), 0), f.files[0].1);
    }

    /// A copy checked once (or written by a mount) is not read whole again by the next mounts
    /// while it is unchanged; changed in place (its change time moves on), it is.
    #[test]
    fn an_unchanged_copy_is_checked_once_and_a_changed_one_again() {
        if !coldstart_testkit::require_root("trusted.* attributes") {
            return;
        }
        let f = fixture();
        read_all(&engine(&f, Strategy::Paged), "app").unwrap();
        let first = engine(&f, Strategy::Paged);
        assert_eq!(read_copy(&first, 0), f.files[0].1);
        assert_eq!(first.report().passthrough_check_ms, 0.0, "written by a mount: recorded");
        let hash = first.manifest().files[0].sha256.clone().unwrap();
        let path = f.cache.join("files").join(&hash.as_str()[..2]).join(hash.as_str());
        // The same bytes written again in place: the content is the manifest's, but changed
        // since its record, so checked once more, and recorded again.
        let copy = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        copy.write_all_at(&f.files[0].1[..1], 0).unwrap();
        drop(copy);
        let again = engine(&f, Strategy::Paged);
        assert_eq!(read_copy(&again, 0), f.files[0].1);
        assert!(again.report().passthrough_check_ms > 0.0, "checked after the change");
        let later = engine(&f, Strategy::Paged);
        assert_eq!(read_copy(&later, 0), f.files[0].1);
        assert_eq!(later.report().passthrough_check_ms, 0.0, "recorded after the check");
    }
}
