//! The steady figure of a page profile: how many distinct file pages start-up touched.
//!
//! It counts every page a profile names, `(file, page)` once however many events name it
//! (a fault, a fault-around mapping, a page added to the cache). Today's tracefs profiles
//! name the pages the kernel mapped or read for start-up: fault-around maps up to 16 cached
//! neighbours of a faulting page and a read brings its read-ahead window, so the count moves
//! by tens of pages between runs and the steady rule's limit widens to match. Exact page
//! profiles, which record the pages touched at 4 KiB whatever the read-ahead, are read the
//! same way: the count then is exactly the pages start-up used, and one more page is one
//! more. The profile's `source` is kept with the counts so that counts of two kinds are never
//! compared.

use std::collections::HashSet;

use coldstart_profile_format::PageProfile;

/// Distinct `(file, page)` pairs of `pages`' accesses.
pub fn pages_touched(pages: &PageProfile) -> u64 {
    let mut seen: HashSet<(usize, u64)> = HashSet::new();
    for a in &pages.accesses {
        for k in 0..a.count.max(1) {
            seen.insert((a.file, a.page + k));
        }
    }
    seen.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_profile_format::PageAccess;

    fn access(file: usize, page: u64, count: u64, event: &str) -> PageAccess {
        PageAccess { file, page, count, t_ns: 0, event: event.into(), pid: 1 }
    }

    #[test]
    fn each_page_counts_once_whatever_names_it() {
        let p = PageProfile {
            source: "tracefs".into(),
            sampled: false,
            files: vec![],
            accesses: vec![
                access(0, 0, 1, "read"),
                access(0, 0, 4, "map"), // pages 0-3
                access(0, 2, 1, "fault"),
                access(1, 0, 1, "fault"),    // another file's page 0
                access(0, 1000, 0, "fault"), // a count of 0 reads as 1
            ],
            lost_events: 0,
        };
        assert_eq!(pages_touched(&p), 6);
    }
}
