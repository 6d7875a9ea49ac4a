//! Honest start-up measurement.
//!
//! `coldstart-measure` starts a command many times, each run in a fresh cgroup and in a known,
//! *verified* page-cache state, waits for a readiness signal (not just process exit), and
//! reports wall time beside the figures that are stable from run to run: major and minor page
//! faults, bytes read from storage and read requests issued to the block device.
//!
//! The modules, in the order a run uses them:
//!
//! - [`cache`]: cache states, eviction with `fadvise(DONTNEED)`, verification with
//!   `cachestat(2)` / `mincore(2)` page by page: a page that another process maps is held by
//!   it (named), any other page that stayed is an eviction that failed.
//! - [`cgroup`]: one cgroup per run (v2 where its controllers are enabled, else v1), so the
//!   whole process tree is counted and killed together.
//! - [`launch`]: the [`launch::Executor`] trait and its Linux implementation: one run is
//!   prepared, spawned into its cgroup, waited on until ready, and its counters (and, for a
//!   discovery run, the files it read) collected.
//! - [`metric`]: the per-run metrics (name, unit, title, how each is read from the counters),
//!   which statistics and exporters share.
//! - [`stats`]: every metric summarised over the runs that count, and two commands compared.
//! - [`export`]: renders the result as JSON, CSV and Markdown.
//! - [`measure`](mod@measure): the orchestration of discovery, warm-up, cache preparation and
//!   runs, from validated [`MeasureOptions`] to a `MeasureReport` with its warnings.
//!
//! What it uses from the ground floor, where each type is owned: readiness signals (`exit`,
//! `stdout:REGEX`, `tcp:PORT`, `window:REGEX`, ...) are `coldstart-ready`'s; the result format
//! (`coldstart_formats::measure::MeasureReport`) and the statistics (`coldstart_formats::stats`)
//! are `coldstart-formats`'s. Slow storage emulation (`--storage`: the program's files on a throttled loop device, seen
//! by each run at their original paths) is the `coldstart-storage` crate's.

pub mod cache;
pub mod cgroup;
pub mod export;
pub mod launch;
pub mod measure;
pub mod metric;
pub mod stats;

pub use cache::CacheState;
pub use measure::{measure, storage_files, MeasureOptions};

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::measure::MeasureError, crate::launch::LaunchError, crate::cgroup::CgroupError, crate::cache::CacheError)
}
