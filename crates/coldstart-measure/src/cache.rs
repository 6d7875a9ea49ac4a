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
//! with `cachestat(2)` (falling back to `mincore(2)` on kernels without it). A run whose
//! eviction did not hold is labelled and excluded, with the process that keeps the pages mapped
//! named.
//!
//! # Why verify
//!
//! `POSIX_FADV_DONTNEED` is advice: the kernel drops only clean, unmapped, unlocked pages. A page
//! that another live process maps (a shared library every process uses, an editor that has the
//! file open with `mmap`) stays resident, and a measurement that believes it is cold is then
//! silently warm. So every eviction is followed by a residency check, and the processes that
//! map or hold the still-resident files are named so that the user can act.
//!
//! # Tolerance
//!
//! None: [`EvictionReport::held`] is `true` only when *every* verified file has zero pages in
//! the page cache, and every file could be checked. A remaining page is a page the measured
//! program will not fault in from storage, so it is not cold. Two cases are treated specially:
//!
//! - A file that no longer exists ([`EvictionReport::vanished`]) counts as evicted: a run that
//!   opens the same path gets a new inode whose pages start uncached.
//! - A file that cannot be opened or is not a regular file ([`EvictionReport::unreadable`]) cannot
//!   be verified, so eviction does not hold; the reason is reported and nothing fails. The same
//!   goes for a file whose residency the kernel hides from this user: since Linux 6.x
//!   `cachestat` refuses (`EPERM`) files the caller neither owns nor may write, unless it has
//!   `CAP_SYS_ADMIN`, and `mincore` then reports every page resident. Without root, `warm`
//!   (the user's own program files) verifies; system files in `selective` do not.

mod holders;
mod sets;

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};

use coldstart_error::Category;
use serde::{Deserialize, Serialize};

pub(crate) use holders::parse_maps_line;
pub use holders::{find_holders, find_holders_in};
pub use sets::{is_system_library, selective_set, warm_set, warm_set_with, LibDirs};

/// A cache state to put the system in before each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheState {
    Hot,
    Warm,
    Selective,
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
        path: PathBuf,
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

/// Residency of one file in the page cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Residency {
    pub path: PathBuf,
    /// Pages of the file (rounded up).
    pub total_pages: u64,
    /// Pages present in the page cache.
    pub cached_pages: u64,
    /// Dirty pages, where `cachestat` reports them.
    pub dirty_pages: Option<u64>,
}

impl Residency {
    /// Whether no page of the file is cached.
    pub fn is_evicted(&self) -> bool {
        self.cached_pages == 0
    }
}

/// A live process that maps (or holds open) a file, which keeps its pages resident.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// The process name (`/proc/PID/comm`).
    pub comm: String,
    pub path: PathBuf,
    /// `true` when the process maps the file (its mapped pages cannot be evicted); `false` when
    /// it only holds it open.
    #[serde(default)]
    pub mapped: bool,
}

impl Holder {
    /// `pid 4242 (firefox)`: how warnings and exclusion reasons name the process.
    pub fn who(&self) -> String {
        format!("pid {} ({})", self.pid, self.comm)
    }
}

/// A file that eviction or verification could not check, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreadable {
    pub path: PathBuf,
    pub reason: String,
}

/// What eviction did before one run, and whether it held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvictionReport {
    /// Files that eviction was asked to drop.
    pub files: usize,
    /// Pages of those files still cached after eviction (summed).
    pub resident_pages_after: u64,
    /// Total pages of those files.
    pub total_pages: u64,
    /// Files still (partly) resident after eviction, with their residency.
    pub still_resident: Vec<Residency>,
    /// Live processes (outside the measured tree) that map the still-resident files.
    pub holders: Vec<Holder>,
    /// `true` when every file's residency after eviction is zero (within the
    /// verification's tolerance); a run after an eviction that did not hold is excluded.
    pub held: bool,
    /// Whether `cachestat(2)` or `mincore(2)` verified it.
    pub method: String,
    /// Holders found beyond [`MAX_HOLDERS_PER_FILE`] per file (a system library is mapped by
    /// most processes) and left out of `holders`.
    #[serde(default)]
    pub holders_omitted: usize,
    /// Files that no longer exist; they count as evicted (see the module docs).
    #[serde(default)]
    pub vanished: Vec<PathBuf>,
    /// Files that could not be opened, are not regular files, or whose residency this user may
    /// not read; they make `held` false.
    #[serde(default)]
    pub unreadable: Vec<Unreadable>,
}

/// At most this many holders are recorded per still-resident file.
pub const MAX_HOLDERS_PER_FILE: usize = 8;

impl EvictionReport {
    /// Whether eviction held except for pages that live processes outside the measured tree
    /// keep mapped: every still-resident file is mapped by a named holder, and every file was
    /// verified. Those pages cannot be evicted without stopping the holder (a system library
    /// mapped by every process, typically), so a caller may choose to accept them and say so;
    /// [`EvictionReport::held`] stays the strict answer.
    pub fn held_except_mapped(&self) -> bool {
        self.unreadable.is_empty()
            && self
                .still_resident
                .iter()
                .all(|r| self.holders.iter().any(|h| h.mapped && h.path == r.path))
    }

    /// A one-line reason why eviction did not hold, naming the files and the processes that
    /// keep them resident; `None` when it held.
    pub fn failure_reason(&self) -> Option<String> {
        if self.held {
            return None;
        }
        let mut parts = Vec::new();
        if !self.still_resident.is_empty() {
            let first = &self.still_resident[0];
            let mut s = format!(
                "{} file(s) still resident ({} of {} pages), e.g. {} ({} pages)",
                self.still_resident.len(),
                self.resident_pages_after,
                self.total_pages,
                first.path.display(),
                first.cached_pages
            );
            if self.holders.is_empty() {
                s.push_str("; no live process maps them");
            } else {
                let named: Vec<String> = self
                    .holders
                    .iter()
                    .take(3)
                    .map(|h| format!("{} {}", h.who(), h.path.display()))
                    .collect();
                s.push_str(&format!("; held by {}", named.join(", ")));
                let more = self.holders.len().saturating_sub(3) + self.holders_omitted;
                if more > 0 {
                    s.push_str(&format!(" and {more} more"));
                }
            }
            parts.push(s);
        }
        if let Some(u) = self.unreadable.first() {
            parts.push(format!(
                "{} file(s) could not be verified, e.g. {}: {}",
                self.unreadable.len(),
                u.path.display(),
                u.reason
            ));
        }
        Some(parts.join("; "))
    }
}

/// How residency was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `cachestat(2)`: cached and dirty pages of the whole file, without mapping it.
    Cachestat,
    /// `mincore(2)` on a fresh `mmap` of the file: cached pages only.
    Mincore,
}

impl Method {
    /// The name written into [`EvictionReport::method`].
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Cachestat => "cachestat",
            Method::Mincore => "mincore",
        }
    }
}

/// `cachestat(2)` (Linux 6.5+) has the same number on every architecture Rust targets (only
/// alpha differs); the `libc` crate does not define it for x86_64 glibc yet.
const SYS_CACHESTAT: libc::c_long = 451;

#[repr(C)]
struct CachestatRange {
    off: u64,
    /// 0 means "to the end of the file".
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// 0: not probed yet, 1: cachestat works, 2: cachestat missing (ENOSYS), use mincore.
static CACHESTAT_SUPPORT: AtomicU8 = AtomicU8::new(0);

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

fn pages_of(len: u64) -> u64 {
    len.div_ceil(page_size())
}

fn open_read(path: &Path) -> io::Result<File> {
    // O_NONBLOCK so that a FIFO in a discovered list cannot block us; regular files ignore it.
    OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path)
}

fn cachestat_fd(file: &File) -> io::Result<(u64, u64)> {
    let range = CachestatRange { off: 0, len: 0 };
    let mut cs = Cachestat::default();
    // SAFETY: both pointers are to live, properly laid-out structs; flags must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut cs as *mut Cachestat,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cs.nr_cache, cs.nr_dirty))
}

fn mincore_fd(file: &File, len: u64) -> io::Result<u64> {
    if len == 0 {
        return Ok(0);
    }
    let len_usize = usize::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
    // SAFETY: a fresh shared read-only mapping of an open file; no pages are touched.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len_usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut vec = vec![0u8; pages_of(len) as usize];
    // SAFETY: `addr` is a mapping of `len_usize` bytes and `vec` has one byte per page of it.
    let rc = unsafe { libc::mincore(addr, len_usize, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmapping the mapping created above, not used after this.
    unsafe { libc::munmap(addr, len_usize) };
    if rc != 0 {
        return Err(err);
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count() as u64)
}

fn residency_file(path: &Path, file: &File, method: Method) -> io::Result<Residency> {
    let len = file.metadata()?.len();
    let total_pages = pages_of(len);
    match method {
        Method::Cachestat => {
            let (cached, dirty) = cachestat_fd(file)?;
            Ok(Residency {
                path: path.to_path_buf(),
                total_pages,
                cached_pages: cached,
                dirty_pages: Some(dirty),
            })
        }
        Method::Mincore => Ok(Residency {
            path: path.to_path_buf(),
            total_pages,
            cached_pages: mincore_fd(file, len)?,
            dirty_pages: None,
        }),
    }
}

/// The message for a file whose residency this user may not read.
const NOT_VERIFIABLE: &str = "page-cache residency of a file is only visible to its owner, to \
     a user who may write it, or with CAP_SYS_ADMIN (cachestat: EPERM; mincore would report every \
     page resident); run as root to verify eviction";

/// Residency of an open file with the best method available: `cachestat(2)`, or `mincore(2)`
/// when the kernel lacks it (`ENOSYS`). Both hide residency from a caller that neither owns the
/// file nor may write it (nor has `CAP_SYS_ADMIN`): `cachestat` fails with `EPERM` and
/// `mincore` claims every page is resident. That case is an error of kind
/// [`io::ErrorKind::PermissionDenied`] rather than a wrong answer.
fn residency_auto(path: &Path, file: &File) -> io::Result<(Residency, Method)> {
    if CACHESTAT_SUPPORT.load(Ordering::Relaxed) != 2 {
        match residency_file(path, file, Method::Cachestat) {
            Ok(r) => {
                CACHESTAT_SUPPORT.store(1, Ordering::Relaxed);
                return Ok((r, Method::Cachestat));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                CACHESTAT_SUPPORT.store(2, Ordering::Relaxed);
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, NOT_VERIFIABLE));
            }
            Err(e) => return Err(e),
        }
    }
    if !mincore_sees_cache(path, file) {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, NOT_VERIFIABLE));
    }
    Ok((residency_file(path, file, Method::Mincore)?, Method::Mincore))
}

/// Whether `mincore` reports page-cache residency of this file to us rather than claiming
/// every page resident: the kernel's `can_do_mincore` (owner, write permission, or
/// `CAP_FOWNER`, which we approximate by root).
fn mincore_sees_cache(path: &Path, file: &File) -> bool {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 || file.metadata().is_ok_and(|m| m.uid() == euid) {
        return true;
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: `c` is a valid C string; faccessat only reads it.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

/// How much of `path` is in the page cache: `cachestat(2)` (with dirty pages), falling back
/// to `mincore(2)` on a fresh mapping when `cachestat` is unavailable. An empty file has
/// zero pages. Fails with [`io::ErrorKind::PermissionDenied`] when this user may not see the
/// file's residency (neither owner nor writer, without `CAP_SYS_ADMIN`).
pub fn residency(path: &Path) -> io::Result<Residency> {
    let file = open_read(path)?;
    residency_auto(path, &file).map(|(r, _)| r)
}

/// [`residency`] with a chosen method (to compare them, or to force `mincore`).
pub fn residency_with(path: &Path, method: Method) -> io::Result<Residency> {
    let file = open_read(path)?;
    residency_file(path, &file, method)
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

/// Evict `paths` from the page cache and verify it: per file `fdatasync` (dirty pages cannot
/// be dropped) and `posix_fadvise(POSIX_FADV_DONTNEED)`, then, once every file is advised, the
/// residency of each. Still-resident files are named with the live processes (other than
/// `exclude_pids` and this one) that map them or hold them open. Files that cannot be opened
/// are reported in the result, not returned as an error.
pub fn evict(paths: &[PathBuf], exclude_pids: &[u32]) -> io::Result<EvictionReport> {
    for path in paths {
        let Ok(file) = open_regular(path) else {
            continue; // classified by the verification below
        };
        let fd = file.as_raw_fd();
        // Dirty pages cannot be dropped, so write them back first. Failures of either call (a
        // read-only file system, one without fsync) are not recorded: the verification below
        // is the judge, and it sees every page that stayed, dirty or not.
        // SAFETY: fd is a valid descriptor owned by `file` for the duration of both calls.
        unsafe { libc::fdatasync(fd) };
        // SAFETY: as above; offset 0 with length 0 means the whole file.
        unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
    verify_evicted(paths, exclude_pids)
}

/// Verify that `paths` are not in the page cache (after [`evict`] or [`drop_all_caches`]) and
/// name the processes that keep the still-resident ones. Nothing is evicted.
pub fn verify_evicted(paths: &[PathBuf], exclude_pids: &[u32]) -> io::Result<EvictionReport> {
    verify_with_proc(paths, exclude_pids, Path::new("/proc"))
}

fn verify_with_proc(
    paths: &[PathBuf],
    exclude_pids: &[u32],
    proc_root: &Path,
) -> io::Result<EvictionReport> {
    let mut report = EvictionReport { files: paths.len(), ..EvictionReport::default() };
    let mut used_cachestat = false;
    let mut used_mincore = false;
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
        let mut exclude = exclude_pids.to_vec();
        exclude.push(std::process::id());
        let all = find_holders_in(proc_root, &resident, &exclude)?;
        let mut per_file: std::collections::HashMap<PathBuf, usize> = Default::default();
        for holder in all {
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
    let mut file = OpenOptions::new().write(true).open(DROP_CACHES).map_err(io_err)?;
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

    #[test]
    fn failure_reason_names_the_holder() {
        let report = EvictionReport {
            files: 1,
            resident_pages_after: 3,
            total_pages: 10,
            still_resident: vec![Residency {
                path: "/opt/app/lib.so".into(),
                total_pages: 10,
                cached_pages: 3,
                dirty_pages: Some(0),
            }],
            holders: vec![Holder {
                pid: 4242,
                comm: "firefox".into(),
                path: "/opt/app/lib.so".into(),
                mapped: true,
            }],
            held: false,
            method: "cachestat".into(),
            ..EvictionReport::default()
        };
        let reason = report.failure_reason().unwrap();
        assert!(reason.contains("pid 4242 (firefox)"), "{reason}");
        assert!(reason.contains("3 of 10 pages"), "{reason}");
        assert!(report.held_except_mapped());
        let only_open = EvictionReport {
            holders: vec![Holder { mapped: false, ..report.holders[0].clone() }],
            ..report.clone()
        };
        assert!(!only_open.held_except_mapped());
        let omitted = EvictionReport { holders_omitted: 5, ..report };
        assert!(omitted.failure_reason().unwrap().contains("and 5 more"));
    }
}
