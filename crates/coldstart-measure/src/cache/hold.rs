//! Holding cached pages resident through a series of warm or hot runs.
//!
//! A warm or hot state is "what the warm-up left in the cache". Memory pressure, or a
//! proactive reclaimer such as a DAMON `pageout` scheme (which takes pages idle for about a
//! second), can take those pages back between runs: the next "hot" run then reads from the
//! device, and the series turns bimodal. [`ResidentHold`] maps each file and locks
//! (`mlock(2)`) exactly the pages that are cached when it is taken, so the state the runs
//! start from is the state that was prepared, no more (no page is read in) and no less (none
//! can leave). Dropping it unlocks and unmaps everything.
//!
//! Locking needs the privilege to lock memory (`CAP_IPC_LOCK`, root) or a large enough
//! `RLIMIT_MEMLOCK`; without it, or past the byte budget, the hold is partial and says why.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::mapping::Mapping;
use super::residency::open_read;
use coldstart_sys::page_size;

/// The cached pages of a set of files, locked in memory until dropped.
#[derive(Debug, Default)]
pub struct ResidentHold {
    mappings: Vec<Mapping>,
    /// Files with at least one page held.
    pub files: usize,
    /// Bytes locked.
    pub bytes: u64,
    /// Why part of what was cached is not held (no privilege to lock memory, the budget), if
    /// anything.
    pub incomplete: Option<String>,
}

impl ResidentHold {
    /// Lock the pages of `paths` that are cached now, at most `budget` bytes in all. Files that
    /// cannot be opened or mapped (gone, not regular, empty) are skipped.
    pub fn take(paths: &[PathBuf], budget: u64) -> ResidentHold {
        let mut hold = ResidentHold::default();
        let mut seen = std::collections::HashSet::new();
        for path in paths {
            if !seen.insert(path) {
                continue;
            }
            match hold.take_file(path, budget) {
                Ok(()) => {}
                Err(Stop(why)) => {
                    hold.incomplete = Some(why);
                    break;
                }
            }
        }
        hold
    }

    fn take_file(&mut self, path: &Path, budget: u64) -> Result<(), Stop> {
        let Ok(file) = open_read(path) else { return Ok(()) };
        let Some(mapping) = map_whole(&file) else { return Ok(()) };
        let Ok(vec) = mapping.mincore() else { return Ok(()) };
        let page = page_size() as usize;
        let pages = vec.len();
        let mut locked = 0u64;
        let mut i = 0;
        while i < pages {
            if vec[i] & 1 == 0 {
                i += 1;
                continue;
            }
            let start = i;
            while i < pages && vec[i] & 1 != 0 {
                i += 1;
            }
            let len = ((i - start) * page).min(mapping.len - start * page);
            if self.bytes + locked + len as u64 > budget {
                self.keep(mapping, locked);
                return Err(Stop(format!(
                    "the cached pages exceed the budget of {} MiB (half of the available memory)",
                    budget >> 20
                )));
            }
            // SAFETY: a sub-range of the live mapping; locking a cached page reads nothing.
            let r = unsafe { libc::mlock(mapping.addr.cast::<u8>().add(start * page).cast(), len) };
            if r != 0 {
                let e = io::Error::last_os_error();
                self.keep(mapping, locked);
                return Err(Stop(format!(
                    "locking {} in memory failed ({e}): run as root, or raise the memlock limit \
                     (ulimit -l)",
                    path.display()
                )));
            }
            locked += len as u64;
        }
        self.keep(mapping, locked);
        Ok(())
    }

    fn keep(&mut self, mapping: Mapping, locked: u64) {
        if locked > 0 {
            self.files += 1;
            self.bytes += locked;
            self.mappings.push(mapping);
        }
    }
}

/// Why taking a hold stopped early.
struct Stop(String);

/// A mapping of the whole of `file`, if it is a non-empty regular file.
fn map_whole(file: &File) -> Option<Mapping> {
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() == 0 {
        return None;
    }
    Mapping::new(file, usize::try_from(meta.len()).ok()?).ok()
}

/// Half of `MemAvailable` from `/proc/meminfo` (256 MiB when it cannot be read): what a hold
/// may lock at most.
pub fn default_budget() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(256 << 20, |kib| kib * 1024 / 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::residency;
    use std::os::fd::AsRawFd;

    #[test]
    fn holds_exactly_the_cached_pages_and_reads_none_in() {
        if !coldstart_testkit::require_root("evicting a file and locking memory") {
            return;
        }
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("f");
        let page = page_size() as usize;
        std::fs::write(&path, vec![7u8; 16 * page]).unwrap();
        let file = File::open(&path).unwrap();
        // SAFETY: advice on our own file.
        unsafe { libc::fdatasync(file.as_raw_fd()) };
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        // Cache pages 2..5 only.
        let mut buf = vec![0u8; 3 * page];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, 2 * page as u64).unwrap();
        let before = residency::residency(&path).unwrap().cached_pages;
        assert!(before <= 4, "the read cached about its three pages ({before})");

        let hold = ResidentHold::take(std::slice::from_ref(&path), u64::MAX);
        assert_eq!(hold.incomplete, None);
        assert_eq!(hold.files, 1);
        assert_eq!(hold.bytes, before * page as u64, "every cached page, no other");
        // Locked pages survive an eviction request.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(residency::residency(&path).unwrap().cached_pages, before);
        drop(hold);
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(residency::residency(&path).unwrap().cached_pages, 0, "released");
    }

    #[test]
    fn a_budget_too_small_holds_part_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 8 * page_size() as usize]).unwrap();
        std::fs::read(&path).unwrap();
        let hold = ResidentHold::take(&[path.clone(), dir.path().join("missing")], 4096);
        assert_eq!(hold.bytes, 0);
        assert!(hold.incomplete.unwrap().contains("budget"));
    }
}
