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
