//! Page-cache states and their verification.
//!
//! | state | what is evicted before each run |
//! | --- | --- |
//! | `hot` | nothing (a warm-up run first) |
//! | `warm` | the program's own files: the executable, its non-system shared libraries, files under its directory (the paper's warm-local) |
//! | `selective` | every file the program read during start-up, found by a discovery run (Firefox's "selectively cold") |
//! | `cold` | everything: `sync` and `drop_caches` (root only) |
//!
//! Eviction is `fdatasync` + `posix_fadvise(POSIX_FADV_DONTNEED)` per file, then *verified*
//! with `cachestat(2)` (falling back to `mincore(2)` on older kernels). A run whose eviction did
//! not hold is labelled and excluded, with the process that keeps the pages mapped named.
//!
//! STATUS: interface fixed by the workspace skeleton; implementation in progress.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A cache state to put the system in before each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheState {
    Hot,
    Warm,
    Selective,
    Cold,
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

/// A live process that maps (or holds open) a file, which keeps its pages resident.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// The process name (`/proc/PID/comm`).
    pub comm: String,
    pub path: PathBuf,
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
}

// ---- TEMPORARY SHIM (removed before merge; the real implementation lives in this file) ----
use std::io;
use std::os::fd::AsRawFd;

impl std::str::FromStr for CacheState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hot" => Ok(CacheState::Hot),
            "warm" => Ok(CacheState::Warm),
            "selective" => Ok(CacheState::Selective),
            "cold" => Ok(CacheState::Cold),
            _ => Err(format!("unknown cache state `{s}` (expected hot, warm, selective or cold)")),
        }
    }
}

impl std::fmt::Display for CacheState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CacheState::Hot => "hot",
            CacheState::Warm => "warm",
            CacheState::Selective => "selective",
            CacheState::Cold => "cold",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("dropping caches needs root")]
    NotRoot,
    #[error(transparent)]
    Io(#[from] io::Error),
}

pub fn residency(path: &Path) -> io::Result<Residency> {
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len() as usize;
    let total = len.div_ceil(4096) as u64;
    if len == 0 {
        return Ok(Residency {
            path: path.into(),
            total_pages: 0,
            cached_pages: 0,
            dirty_pages: None,
        });
    }
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut vec = vec![0u8; total as usize];
    let r = unsafe { libc::mincore(p, len, vec.as_mut_ptr()) };
    unsafe { libc::munmap(p, len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let cached = vec.iter().filter(|b| **b & 1 == 1).count() as u64;
    Ok(Residency { path: path.into(), total_pages: total, cached_pages: cached, dirty_pages: None })
}

fn holders(paths: &[PathBuf], exclude: &[u32]) -> Vec<Holder> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if exclude.contains(&pid) {
            continue;
        }
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { continue };
        for p in paths {
            let s = p.to_string_lossy();
            if maps.lines().any(|l| l.ends_with(&*s)) {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                out.push(Holder { pid, comm, path: p.clone() });
            }
        }
    }
    out
}

pub fn verify_evicted(paths: &[PathBuf], exclude_pids: &[u32]) -> io::Result<EvictionReport> {
    let mut rep =
        EvictionReport { files: paths.len(), method: "mincore".into(), ..Default::default() };
    for p in paths {
        let Ok(r) = residency(p) else { continue };
        rep.total_pages += r.total_pages;
        rep.resident_pages_after += r.cached_pages;
        if r.cached_pages > 0 {
            rep.still_resident.push(r);
        }
    }
    let still: Vec<PathBuf> = rep.still_resident.iter().map(|r| r.path.clone()).collect();
    rep.holders = holders(&still, exclude_pids);
    rep.held = rep.resident_pages_after == 0;
    Ok(rep)
}

pub fn evict(paths: &[PathBuf], exclude_pids: &[u32]) -> io::Result<EvictionReport> {
    for p in paths {
        if let Ok(f) = std::fs::File::open(p) {
            unsafe {
                libc::fdatasync(f.as_raw_fd());
                libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
    verify_evicted(paths, exclude_pids)
}

pub fn drop_all_caches() -> Result<(), CacheError> {
    if unsafe { libc::geteuid() } != 0 {
        return Err(CacheError::NotRoot);
    }
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")?;
    Ok(())
}

pub fn warm_set(discovered: &[PathBuf], exe: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = discovered
        .iter()
        .filter(|p| !(p.starts_with("/usr/lib") || p.starts_with("/lib") || p.starts_with("/etc")))
        .cloned()
        .collect();
    v.push(exe.to_path_buf());
    v.sort();
    v.dedup();
    v
}

pub fn selective_set(discovered: &[PathBuf]) -> Vec<PathBuf> {
    discovered
        .iter()
        .filter(|p| !p.starts_with("/proc") && !p.starts_with("/sys") && !p.starts_with("/dev"))
        .cloned()
        .collect()
}
