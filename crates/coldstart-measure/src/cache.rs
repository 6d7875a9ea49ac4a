//! Page-cache states and their verification.
//!
//! | state | what is evicted before each run |
//! | --- | --- |
//! | `hot` | nothing (a warm-up run first) |
//! | `warm` | the program's own files: the executable and every file it read except shared objects in system library directories, which stay cached (the paper's warm-local; rule in [`warm_set`]) |
//! | `selective` | every file the program read during start-up, found by a discovery run (Firefox's "selectively cold") |
//! | `cold` | everything: `sync` and `drop_caches` (root only) |
//!
//! Eviction is `fdatasync` + `posix_fadvise(POSIX_FADV_DONTNEED)` per file, then *verified*
//! with `cachestat(2)` (falling back to `mincore(2)` on kernels without it), page by page.
//!
//! # Why verify
//!
//! `POSIX_FADV_DONTNEED` is advice: the kernel drops only clean, unmapped, unlocked pages. A page
//! that another live process maps (a shared library every process uses, the locale archive and
//! the gconv cache every shell maps, the shell binary itself, a data file a desktop keeps
//! mapped) stays resident, and a measurement that believes it is cold is then partly warm. So
//! every eviction is followed by a residency check, and the processes that map or hold the
//! still-resident files are named so that the user can act.
//!
//! # Held pages and failed evictions
//!
//! Every resident page after eviction is classified by *who* keeps it, not by the type of its
//! file. A page in a range that a live process outside the measured tree maps (`/proc/PID/maps`:
//! the mapping's file offset and length) is **held**
//! ([`Residency::held_pages`](coldstart_formats::measure::Residency::held_pages)): it cannot
//! leave the cache without stopping that process, which is inherent on a running system. Any
//! other resident page means eviction failed (a locked page, a dirty page that would not write
//! back, a page read back at once), after [`EVICTION_RETRIES`] more attempts on its file.
//! [`EvictionReport::held_except_mapped`] is `true` when only held pages stayed;
//! [`EvictionReport::held`] is the strict answer: *every* verified file has zero pages in the
//! page cache. The measurement decides which one a run must pass (`--strict` asks for the
//! second). A mapped range is held whether or not the holder has touched each of its pages:
//! `fadvise` drops the pages of a range that nobody has faulted in, so after eviction a resident
//! page inside a mapped range is, but for a read racing the check, one the holder maps.
//!
//! Two cases are treated specially:
//!
//! - A file that no longer exists ([`EvictionReport::vanished`]) counts as evicted: a run that
//!   opens the same path gets a new inode whose pages start uncached.
//! - A file that cannot be opened or is not a regular file ([`EvictionReport::unreadable`]) cannot
//!   be verified, so eviction does not hold; the reason is reported and nothing fails. The same
//!   goes for a file whose residency the kernel hides from this user: since Linux 6.x
//!   `cachestat` refuses (`EPERM`) files the caller neither owns nor may write, unless it has
//!   `CAP_SYS_ADMIN`, and `mincore` then reports every page resident. Without root, `warm`
//!   (the user's own program files) verifies; system files in `selective` do not. Without root
//!   the mappings of other users' processes are not visible either, so pages they hold count as
//!   an eviction that failed.

mod folios;
mod hold;
mod holders;
mod mapping;
pub mod pages;
mod residency;
mod sets;

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use coldstart_error::Category;
use coldstart_formats::measure::{EvictionReport, Unreadable, MAX_HOLDERS_PER_FILE};
use serde::{Deserialize, Serialize};

pub(crate) use coldstart_sys::page_size;
pub use hold::{default_budget as default_hold_budget, ResidentHold};
pub(crate) use holders::{file_id, file_pages};
pub use holders::{find_holders, find_holders_in};
use pages::{FileId, TouchedPages};
use residency::{open_read, residency_auto, RangeCounter};
pub use residency::{residency, residency_with, Method};
pub use sets::{is_system_library, selective_set, warm_set, warm_set_with, LibDirs};

/// A cache state to put the system in before each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheState {
    /// Nothing evicted (a warm-up run first).
    Hot,
    /// The program's own files evicted (not the system libraries).
    Warm,
    /// Every file start-up read evicted.
    Selective,
    /// Every cache dropped (root only).
    Cold,
}

impl CacheState {
    /// Every state, in the order of the command line's help.
    pub const ALL: [CacheState; 4] =
        [CacheState::Hot, CacheState::Warm, CacheState::Selective, CacheState::Cold];

    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheState::Hot => "hot",
            CacheState::Warm => "warm",
            CacheState::Selective => "selective",
            CacheState::Cold => "cold",
        }
    }
}

impl fmt::Display for CacheState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `--cache` value that is not one of the states.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cache state `{0}`: expected one of hot, warm, selective, cold")]
pub struct ParseCacheStateError(pub String);

impl FromStr for CacheState {
    type Err = ParseCacheStateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CacheState::ALL
            .into_iter()
            .find(|state| state.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParseCacheStateError(s.to_string()))
    }
}

/// Errors of the cache operations that cannot be reported per file.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Dropping every cache needs privilege.
    #[error(
        "dropping the page cache needs root (CAP_SYS_ADMIN) to write /proc/sys/vm/drop_caches; \
         run as root, or use `--cache selective` to evict only the program's files"
    )]
    NotRoot,
    /// Any other I/O failure, with the file involved.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
}

impl CacheError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            CacheError::NotRoot => Category::Privilege,
            CacheError::Io { .. } => Category::Environment,
        }
    }
}

/// Open `path` for verification or eviction; `Err` says how to classify a failure.
fn open_regular(path: &Path) -> Result<File, Skip> {
    match open_read(path) {
        Ok(file) => match file.metadata() {
            Ok(m) if m.is_file() => Ok(file),
            Ok(_) => Err(Skip::Unreadable("not a regular file".to_string())),
            Err(e) => Err(Skip::Unreadable(e.to_string())),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Skip::Vanished),
        Err(e) => Err(Skip::Unreadable(e.to_string())),
    }
}

enum Skip {
    Vanished,
    Unreadable(String),
}

/// `fdatasync` (dirty pages cannot be dropped) and `posix_fadvise(POSIX_FADV_DONTNEED)` on each
/// file. Failures are not recorded: the verification that follows is the judge, and it sees
/// every page that stayed, dirty or not.
fn advise_out(paths: &[PathBuf]) {
    for path in paths {
        let Ok(file) = open_regular(path) else {
            continue; // classified by the verification
        };
        let fd = file.as_raw_fd();
        // SAFETY: fd is a valid descriptor owned by `file` for the duration of both calls.
        unsafe { libc::fdatasync(fd) };
        // SAFETY: as above; offset 0 with length 0 means the whole file.
        unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// Eviction is tried this many more times on the files whose resident pages no other process
/// maps, before such pages count as an eviction that failed. A process that exits between
/// eviction and verification leaves the pages it mapped resident but unmapped; evicting them
/// again makes the state cold for real, while a page that cannot leave the cache (locked,
/// dirty and failing to write back, read back at once) stays and fails.
pub const EVICTION_RETRIES: usize = 2;

/// What a verification needs besides the files: the processes of the measured tree (not
/// holders: their mappings are what is being measured) and the pages start-up uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Verify<'a> {
    /// Processes whose mappings do not hold pages (the measured tree).
    pub exclude_pids: &'a [u32],
    /// The pages start-up uses of the files other processes map, to count how many of the held
    /// pages it would have read
    /// ([`Residency::touched_held_pages`](coldstart_formats::measure::Residency::touched_held_pages));
    /// `None`: not counted.
    pub touched: Option<&'a TouchedPages>,
}

/// Evict `paths` from the page cache and verify it: per file `fdatasync` (dirty pages cannot
/// be dropped) and `posix_fadvise(POSIX_FADV_DONTNEED)`, then, once every file is advised, the
/// residency of each, page by page: resident pages in ranges that live processes other than
/// `exclude_pids` map are held by them (named in [`EvictionReport::holders`]); files with other
/// resident pages are evicted again, up to [`EVICTION_RETRIES`] times. Files that cannot be
/// opened are reported in the result, not returned as an error.
pub fn evict(paths: &[PathBuf], exclude_pids: &[u32]) -> io::Result<EvictionReport> {
    evict_with(paths, Verify { exclude_pids, touched: None })
}

/// [`evict`] with the pages start-up uses, to count the held ones it would read.
pub fn evict_with(paths: &[PathBuf], verify: Verify<'_>) -> io::Result<EvictionReport> {
    advise_out(paths);
    let mut report = verify_with_proc(paths, verify, Path::new("/proc"))?;
    for _ in 0..EVICTION_RETRIES {
        let again: Vec<PathBuf> = report
            .still_resident
            .iter()
            .filter(|r| r.unheld_pages() > 0)
            .map(|r| r.path.clone())
            .collect();
        if again.is_empty() {
            break;
        }
        advise_out(&again);
        report = verify_with_proc(paths, verify, Path::new("/proc"))?;
    }
    Ok(report)
}

/// Verify that `paths` are not in the page cache (after [`evict`] or [`drop_all_caches`]) and
/// name the processes that keep the still-resident ones, page by page as [`evict`] does.
/// Nothing is evicted.
pub fn verify_evicted(paths: &[PathBuf], exclude_pids: &[u32]) -> io::Result<EvictionReport> {
    verify_with_proc(paths, Verify { exclude_pids, touched: None }, Path::new("/proc"))
}

/// A still-resident file during verification: kept open to count its held pages.
struct Resident {
    index: usize,
    file: File,
    method: Method,
}

fn verify_with_proc(
    paths: &[PathBuf],
    verify: Verify<'_>,
    proc_root: &Path,
) -> io::Result<EvictionReport> {
    let mut report = EvictionReport { files: paths.len(), ..EvictionReport::default() };
    let mut used_cachestat = false;
    let mut used_mincore = false;
    let mut open: Vec<Resident> = Vec::new();
    for path in paths {
        let file = match open_regular(path) {
            Ok(file) => file,
            Err(Skip::Vanished) => {
                report.vanished.push(path.clone());
                continue;
            }
            Err(Skip::Unreadable(reason)) => {
                report.unreadable.push(Unreadable { path: path.clone(), reason });
                continue;
            }
        };
        let (res, method) = match residency_auto(path, &file) {
            Ok(r) => r,
            Err(e) => {
                report.unreadable.push(Unreadable { path: path.clone(), reason: e.to_string() });
                continue;
            }
        };
        match method {
            Method::Cachestat => used_cachestat = true,
            Method::Mincore => used_mincore = true,
        }
        report.total_pages += res.total_pages;
        report.resident_pages_after += res.cached_pages;
        if !res.is_evicted() {
            open.push(Resident { index: report.still_resident.len(), file, method });
            report.still_resident.push(res);
        }
    }
    report.method = match (used_cachestat, used_mincore) {
        (true, true) => "cachestat+mincore",
        (false, true) => Method::Mincore.as_str(),
        _ => Method::Cachestat.as_str(),
    }
    .to_string();
    if !report.still_resident.is_empty() {
        let resident: Vec<PathBuf> = report.still_resident.iter().map(|r| r.path.clone()).collect();
        // This process is a holder too when it maps a file for its own reasons (its own
        // executable and libraries); the mapping `mincore` makes is gone by now.
        let scan = holders::scan(proc_root, &resident, verify.exclude_pids)?;
        for r in &open {
            let res = &mut report.still_resident[r.index];
            let mapped = &scan.mapped[r.index];
            let mut counter = RangeCounter::new(&r.file, r.method);
            // Pages can come and go between the two readings: keep the parts within the total.
            let mut held = counter.cached(mapped)?.min(res.cached_pages);
            let mut holding = mapped.clone();
            if held < res.cached_pages {
                // Pages that share a large folio with a mapped one are held too.
                let len = r.file.metadata()?.len();
                let by_folio = residency::mincore_vec(&r.file, len)
                    .and_then(|resident| folios::held_by_folio(&r.file, &resident, mapped))
                    .unwrap_or_default();
                if !by_folio.is_empty() {
                    holding.extend(&by_folio);
                    held = counter.cached(&holding)?.min(res.cached_pages);
                }
            }
            res.held_pages = Some(held);
            report.held_pages += held;
            if let Some(touched) = verify.touched {
                res.touched_held_pages = match FileId::of(&r.file).and_then(|id| touched.get(&id)) {
                    Some(used) => Some(counter.cached(&holding.intersect(used))?.min(held)),
                    None => None,
                };
            }
        }
        let mut per_file: std::collections::HashMap<PathBuf, usize> = Default::default();
        for holder in scan.holders {
            let kept = per_file.entry(holder.path.clone()).or_default();
            if *kept < MAX_HOLDERS_PER_FILE {
                *kept += 1;
                report.holders.push(holder);
            } else {
                report.holders_omitted += 1;
            }
        }
    }
    report.held = report.still_resident.is_empty() && report.unreadable.is_empty();
    Ok(report)
}

/// The page-cache operations a measurement needs, behind a trait so that the orchestration can
/// be unit-tested with a fake; [`LinuxPageCache`] is the real one.
pub trait PageCache {
    /// See [`evict`].
    fn evict(&self, paths: &[PathBuf], exclude_pids: &[u32]) -> io::Result<EvictionReport>;
    /// See [`verify_evicted`].
    fn verify_evicted(&self, paths: &[PathBuf], exclude_pids: &[u32])
        -> io::Result<EvictionReport>;
    /// See [`drop_all_caches`].
    fn drop_all_caches(&self) -> Result<(), CacheError>;
}

/// The page cache of the running kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinuxPageCache;

impl PageCache for LinuxPageCache {
    fn evict(&self, paths: &[PathBuf], exclude_pids: &[u32]) -> io::Result<EvictionReport> {
        evict(paths, exclude_pids)
    }

    fn verify_evicted(
        &self,
        paths: &[PathBuf],
        exclude_pids: &[u32],
    ) -> io::Result<EvictionReport> {
        verify_evicted(paths, exclude_pids)
    }

    fn drop_all_caches(&self) -> Result<(), CacheError> {
        drop_all_caches()
    }
}

/// `sync()`, then drop the page cache, dentries and inodes (`echo 3 >
/// /proc/sys/vm/drop_caches`). Needs root; [`CacheError::NotRoot`] otherwise.
pub fn drop_all_caches() -> Result<(), CacheError> {
    const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let io_err = |source: io::Error| {
        if matches!(source.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) {
            CacheError::NotRoot
        } else {
            CacheError::Io { path: PathBuf::from(DROP_CACHES), source }
        }
    };
    let mut file = std::fs::OpenOptions::new().write(true).open(DROP_CACHES).map_err(io_err)?;
    io::Write::write_all(&mut file, b"3\n").map_err(io_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_state_parses_and_displays_every_state() {
        for state in CacheState::ALL {
            assert_eq!(state.to_string().parse::<CacheState>(), Ok(state));
        }
        assert_eq!("Cold".parse::<CacheState>(), Ok(CacheState::Cold));
    }

    #[test]
    fn unknown_cache_state_lists_the_valid_ones() {
        let err = "lukewarm".parse::<CacheState>().unwrap_err().to_string();
        assert!(err.contains("lukewarm"), "{err}");
        for name in ["hot", "warm", "selective", "cold"] {
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn not_root_message_names_the_privilege_and_the_alternative() {
        let msg = CacheError::NotRoot.to_string();
        assert!(msg.contains("CAP_SYS_ADMIN"), "{msg}");
        assert!(msg.contains("/proc/sys/vm/drop_caches"), "{msg}");
        assert!(msg.contains("--cache selective"), "{msg}");
    }

    #[test]
    fn missing_and_non_regular_files_are_classified_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let paths = vec![gone.clone(), dir.path().to_path_buf()];
        let report = verify_evicted(&paths, &[]).unwrap();
        assert_eq!(report.files, 2);
        assert_eq!(report.vanished, vec![gone]);
        assert_eq!(report.unreadable.len(), 1);
        assert_eq!(report.unreadable[0].path, dir.path());
        assert!(report.unreadable[0].reason.contains("not a regular file"));
        assert!(!report.held);
        assert!(report.failure_reason().unwrap().contains("could not be verified"));
    }

    #[test]
    fn only_vanished_files_hold() {
        let dir = tempfile::tempdir().unwrap();
        let report = verify_evicted(&[dir.path().join("gone")], &[]).unwrap();
        assert!(report.held);
        assert_eq!(report.failure_reason(), None);
    }
}
