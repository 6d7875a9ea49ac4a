//! What eviction did before a run, as a measurement records it: the residency of each file
//! after eviction, the processes that keep pages resident, and whether eviction held
//! (`coldstart-measure`'s `cache` module evicts, verifies and fills these in).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Residency of one file in the page cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Residency {
    /// The file.
    pub path: PathBuf,
    /// Pages of the file (rounded up).
    pub total_pages: u64,
    /// Pages present in the page cache.
    pub cached_pages: u64,
    /// Dirty pages, where `cachestat` reports them.
    pub dirty_pages: Option<u64>,
    /// Of `cached_pages`, those in ranges that live processes outside the measured tree map
    /// (see the module docs); `None` where not classified (absent in older reports).
    #[serde(default)]
    pub held_pages: Option<u64>,
    /// Of `held_pages`, those start-up uses, as a discovery run saw them in its page tables;
    /// `None` when not counted or when start-up was not seen to map the file.
    #[serde(default)]
    pub touched_held_pages: Option<u64>,
}

impl Residency {
    /// Whether no page of the file is cached.
    pub fn is_evicted(&self) -> bool {
        self.cached_pages == 0
    }

    /// Resident pages that no process outside the measured tree maps: an eviction that failed.
    pub fn unheld_pages(&self) -> u64 {
        self.cached_pages - self.held_pages.unwrap_or(0).min(self.cached_pages)
    }
}

/// A live process that maps (or holds open) a file, which keeps its pages resident.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The process.
    pub pid: u32,
    /// The process name (`/proc/PID/comm`).
    pub comm: String,
    /// The file it maps or holds open.
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
    /// The file.
    pub path: PathBuf,
    /// Why it could not be checked.
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
    /// `true` when every file's residency after eviction is zero and every file was verified:
    /// the strict answer (see [`EvictionReport::held_except_mapped`] for the other one).
    pub held: bool,
    /// Of `resident_pages_after`, the pages held by processes outside the measured tree
    /// (summed [`Residency::held_pages`]; absent in older reports).
    #[serde(default)]
    pub held_pages: u64,
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
    /// keep mapped: every resident page lies in a range such a process maps, and every file
    /// was verified. Those pages cannot be evicted without stopping the holder (a library, the
    /// locale archive or the shell binary that other processes map), so a measurement counts
    /// such a run and reports the held pages; [`EvictionReport::held`] stays the strict answer.
    pub fn held_except_mapped(&self) -> bool {
        self.unreadable.is_empty() && self.unheld_pages() == 0
    }

    /// Resident pages that no process outside the measured tree maps: an eviction that failed.
    pub fn unheld_pages(&self) -> u64 {
        self.still_resident.iter().map(Residency::unheld_pages).sum()
    }

    /// A one-line reason why eviction failed beyond the held pages (see
    /// [`EvictionReport::held_except_mapped`]): the resident pages no other process maps, the
    /// processes that hold those files open, and the files that could not be verified; `None`
    /// when only held pages stayed.
    pub fn unheld_reason(&self) -> Option<String> {
        if self.held_except_mapped() {
            return None;
        }
        let mut parts = Vec::new();
        let failed: Vec<&Residency> =
            self.still_resident.iter().filter(|r| r.unheld_pages() > 0).collect();
        if let Some(first) = failed.first() {
            let mut s = format!(
                "{} page(s) of {} file(s) stayed cached that no other process maps, e.g. {} ({} of \
                 its {} cached pages)",
                self.unheld_pages(),
                failed.len(),
                first.path.display(),
                first.unheld_pages(),
                first.cached_pages
            );
            let openers: Vec<String> = self
                .holders
                .iter()
                .filter(|h| failed.iter().any(|r| r.path == h.path))
                .take(3)
                .map(|h| {
                    let how = if h.mapped { "maps part of" } else { "holds open" };
                    format!("{} {how} {}", h.who(), h.path.display())
                })
                .collect();
            if !openers.is_empty() {
                s.push_str(&format!(" ({})", openers.join(", ")));
            }
            parts.push(s);
        }
        parts.extend(self.unverified());
        Some(parts.join("; "))
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
                "{} still resident ({} of {} pages), e.g. {} ({} pages)",
                coldstart_units::count(self.still_resident.len() as u64, "file"),
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
        parts.extend(self.unverified());
        Some(parts.join("; "))
    }

    /// The files that could not be verified, as a part of a reason.
    fn unverified(&self) -> Option<String> {
        let u = self.unreadable.first()?;
        Some(format!(
            "{} file(s) could not be verified, e.g. {}: {}",
            self.unreadable.len(),
            u.path.display(),
            u.reason
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                ..Residency::default()
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
        // Not classified: every resident page counts as failed.
        assert!(!report.held_except_mapped());
        assert_eq!(report.unheld_pages(), 3);
    }

    #[test]
    fn only_pages_no_other_process_maps_fail_the_eviction() {
        let resident = |held| Residency {
            path: "/opt/app/data".into(),
            total_pages: 10,
            cached_pages: 3,
            held_pages: Some(held),
            ..Residency::default()
        };
        let holder =
            Holder { pid: 7, comm: "reader".into(), path: "/opt/app/data".into(), mapped: false };
        let all_held = EvictionReport {
            files: 1,
            resident_pages_after: 3,
            held_pages: 3,
            total_pages: 10,
            still_resident: vec![resident(3)],
            ..EvictionReport::default()
        };
        assert!(all_held.held_except_mapped() && !all_held.held);
        assert_eq!(all_held.unheld_reason(), None);
        let part = EvictionReport {
            still_resident: vec![resident(1)],
            held_pages: 1,
            holders: vec![holder],
            ..all_held.clone()
        };
        assert!(!part.held_except_mapped());
        assert_eq!(part.unheld_pages(), 2);
        let why = part.unheld_reason().unwrap();
        assert!(why.contains("2 page(s) of 1 file(s)") && why.contains("/opt/app/data"), "{why}");
        assert!(why.contains("pid 7 (reader) holds open /opt/app/data"), "{why}");
        let unverified = EvictionReport {
            unreadable: vec![Unreadable { path: "/x".into(), reason: "EPERM".into() }],
            ..all_held
        };
        assert!(!unverified.held_except_mapped());
        assert!(unverified.unheld_reason().unwrap().contains("could not be verified"));
    }

    #[test]
    fn failure_reason_counts_omitted_holders() {
        let report = EvictionReport {
            resident_pages_after: 1,
            still_resident: vec![Residency {
                path: "/a".into(),
                cached_pages: 1,
                ..Default::default()
            }],
            holders: vec![Holder { pid: 1, comm: "x".into(), path: "/a".into(), mapped: true }],
            ..EvictionReport::default()
        };
        let omitted = EvictionReport { holders_omitted: 5, ..report };
        assert!(omitted.failure_reason().unwrap().contains("and 5 more"));
    }
}
