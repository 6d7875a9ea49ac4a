//! Reading page-cache residency: `cachestat(2)`, or `mincore(2)` where the kernel lacks it, for
//! a whole file or for sets of its pages.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

use super::mapping::Mapping;
use super::pages::PageSet;
use coldstart_formats::measure::Residency;
use coldstart_sys::page_size;

/// How residency was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `cachestat(2)`: cached and dirty pages of the whole file, without mapping it.
    Cachestat,
    /// `mincore(2)` on a fresh `mmap` of the file: cached pages only.
    Mincore,
}

impl Method {
    /// The name written into [`EvictionReport::method`](super::EvictionReport::method).
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

fn pages_of(len: u64) -> u64 {
    len.div_ceil(page_size())
}

pub(super) fn open_read(path: &Path) -> io::Result<File> {
    // O_NONBLOCK so that a FIFO in a discovered list cannot block us; regular files ignore it.
    OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path)
}

/// Cached and dirty pages of the byte range `off..off + len` of `file` (`len` 0: to the end).
fn cachestat_fd(file: &File, off: u64, len: u64) -> io::Result<(u64, u64)> {
    let range = CachestatRange { off, len };
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

/// One byte per page of `file` (`len` bytes long) from `mincore(2)` on a fresh mapping: bit 0
/// set when the page is in the page cache.
pub(super) fn mincore_vec(file: &File, len: u64) -> io::Result<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let len = usize::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
    Mapping::new(file, len)?.mincore()
}

fn mincore_fd(file: &File, len: u64) -> io::Result<u64> {
    Ok(mincore_vec(file, len)?.iter().filter(|&&b| b & 1 != 0).count() as u64)
}

/// Counts the cached pages among sets of pages of one open file, with the method its
/// residency was read by: `cachestat` per range, or one `mincore` vector for the file.
pub(super) struct RangeCounter<'a> {
    file: &'a File,
    method: Method,
    vec: Option<Vec<u8>>,
}

impl<'a> RangeCounter<'a> {
    pub(super) fn new(file: &'a File, method: Method) -> RangeCounter<'a> {
        RangeCounter { file, method, vec: None }
    }

    /// How many pages of `set` are in the page cache (pages past the end of the file are not).
    pub(super) fn cached(&mut self, set: &PageSet) -> io::Result<u64> {
        let ps = page_size();
        match self.method {
            Method::Cachestat => {
                let mut n = 0;
                for &(a, b) in set.ranges() {
                    n += cachestat_fd(self.file, a * ps, (b - a) * ps)?.0;
                }
                Ok(n)
            }
            Method::Mincore => {
                if self.vec.is_none() {
                    self.vec = Some(mincore_vec(self.file, self.file.metadata()?.len())?);
                }
                let vec = self.vec.as_deref().unwrap_or_default();
                let len = vec.len() as u64;
                Ok(set
                    .ranges()
                    .iter()
                    .map(|&(a, b)| {
                        let (a, b) = (a.min(len) as usize, b.min(len) as usize);
                        vec[a..b].iter().filter(|&&v| v & 1 != 0).count() as u64
                    })
                    .sum())
            }
        }
    }
}

fn residency_file(path: &Path, file: &File, method: Method) -> io::Result<Residency> {
    let len = file.metadata()?.len();
    let total_pages = pages_of(len);
    match method {
        Method::Cachestat => {
            let (cached, dirty) = cachestat_fd(file, 0, 0)?;
            Ok(Residency {
                path: path.to_path_buf(),
                total_pages,
                cached_pages: cached,
                dirty_pages: Some(dirty),
                held_pages: None,
                touched_held_pages: None,
            })
        }
        Method::Mincore => Ok(Residency {
            path: path.to_path_buf(),
            total_pages,
            cached_pages: mincore_fd(file, len)?,
            dirty_pages: None,
            held_pages: None,
            touched_held_pages: None,
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
pub(super) fn residency_auto(path: &Path, file: &File) -> io::Result<(Residency, Method)> {
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
