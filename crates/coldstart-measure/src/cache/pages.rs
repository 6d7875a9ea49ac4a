//! Sets of file pages, and files named by device and inode.
//!
//! Whether a resident page counts against a cold state is decided per page: a page in a range
//! that a live process outside the run maps is *held* (it cannot leave the cache while that
//! process lives), any other resident page is an eviction that failed. Both sides of that test
//! are sets of page indices of one file, kept here as sorted, merged ranges: the ranges other
//! processes map (from `/proc/PID/maps`), and the pages start-up was seen to use (from the
//! page tables of a discovery run).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;

/// A file named by its device (`st_dev`) and inode, as `/proc/PID/maps` names it too: a
/// renamed, replaced or bind-mounted file is still the same file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    /// The device (`st_dev`).
    pub dev: u64,
    /// The inode.
    pub ino: u64,
}

impl FileId {
    /// The id of an open file.
    pub fn of(file: &File) -> Option<FileId> {
        file.metadata().ok().map(|m| FileId { dev: m.dev(), ino: m.ino() })
    }

    /// The id of a `/proc/PID/maps` entry's `major:minor` device and inode.
    pub fn from_maps(major: u64, minor: u64, ino: u64) -> FileId {
        FileId { dev: libc::makedev(major as u32, minor as u32), ino }
    }
}

/// A set of page indices of one file: sorted, disjoint, non-adjacent half-open ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageSet {
    ranges: Vec<(u64, u64)>,
}

impl PageSet {
    /// The empty set.
    pub fn new() -> PageSet {
        PageSet::default()
    }

    /// The set of the given half-open ranges (in any order, overlapping or not).
    pub fn from_ranges(ranges: impl IntoIterator<Item = (u64, u64)>) -> PageSet {
        let mut v: Vec<(u64, u64)> = ranges.into_iter().filter(|(a, b)| a < b).collect();
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match out.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        PageSet { ranges: out }
    }

    /// Add the pages `start..end`.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        // The first range that ends at or after `start` (it may touch or overlap the new one).
        let i = self.ranges.partition_point(|&(_, b)| b < start);
        let mut j = i;
        let (mut a, mut b) = (start, end);
        while j < self.ranges.len() && self.ranges[j].0 <= b {
            a = a.min(self.ranges[j].0);
            b = b.max(self.ranges[j].1);
            j += 1;
        }
        self.ranges.splice(i..j, std::iter::once((a, b)));
    }

    /// Add every page of `other`.
    pub fn extend(&mut self, other: &PageSet) {
        for &(a, b) in &other.ranges {
            self.insert(a, b);
        }
    }

    /// The pages in both sets.
    pub fn intersect(&self, other: &PageSet) -> PageSet {
        let (mut i, mut j) = (0, 0);
        let mut out = Vec::new();
        while i < self.ranges.len() && j < other.ranges.len() {
            let (a0, a1) = self.ranges[i];
            let (b0, b1) = other.ranges[j];
            let (lo, hi) = (a0.max(b0), a1.min(b1));
            if lo < hi {
                out.push((lo, hi));
            }
            if a1 < b1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        PageSet { ranges: out }
    }

    /// Whether page `page` is in the set.
    pub fn contains(&self, page: u64) -> bool {
        let i = self.ranges.partition_point(|&(_, b)| b <= page);
        self.ranges.get(i).is_some_and(|&(a, _)| a <= page)
    }

    /// The number of pages.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|(a, b)| b - a).sum()
    }

    /// Whether no page is in the set.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges, sorted.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }
}

/// The pages start-up was seen to map, per file: what a discovery run found in the page tables
/// of the run's processes for the files other processes also map (see
/// [`crate::launch`]). A file that is not in the map was not sampled: how much of it start-up
/// uses is unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TouchedPages {
    files: HashMap<FileId, PageSet>,
}

impl TouchedPages {
    /// No file sampled.
    pub fn new() -> TouchedPages {
        TouchedPages::default()
    }

    /// Record `pages` of `file` as used (the file counts as sampled even when `pages` is empty).
    pub fn add(&mut self, file: FileId, pages: &PageSet) {
        self.files.entry(file).or_default().extend(pages);
    }

    /// Every file and page of `other` too.
    pub fn merge(&mut self, other: &TouchedPages) {
        for (id, pages) in &other.files {
            self.add(*id, pages);
        }
    }

    /// The pages of `file` start-up used; `None` when the file was not sampled.
    pub fn get(&self, file: &FileId) -> Option<&PageSet> {
        self.files.get(file)
    }

    /// The number of files sampled.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file was sampled.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_when_they_overlap_or_touch() {
        let s = PageSet::from_ranges([(10, 12), (0, 2), (2, 4), (11, 15), (20, 20)]);
        assert_eq!(s.ranges(), &[(0, 4), (10, 15)]);
        assert_eq!(s.len(), 9);
        let inside: Vec<u64> = (0..16).filter(|&p| s.contains(p)).collect();
        assert_eq!(inside, [0, 1, 2, 3, 10, 11, 12, 13, 14]);
    }

    #[test]
    fn insert_joins_its_neighbours() {
        let mut s = PageSet::from_ranges([(0, 2), (5, 6), (8, 9), (20, 30)]);
        s.insert(2, 8);
        assert_eq!(s.ranges(), &[(0, 9), (20, 30)]);
        s.insert(40, 41);
        s.insert(31, 32);
        s.insert(25, 26);
        assert_eq!(s.ranges(), &[(0, 9), (20, 30), (31, 32), (40, 41)]);
        s.insert(3, 3);
        assert_eq!(s.len(), 9 + 10 + 1 + 1);
    }

    #[test]
    fn intersection_keeps_common_pages_only() {
        let a = PageSet::from_ranges([(0, 10), (20, 30)]);
        let b = PageSet::from_ranges([(5, 25), (29, 40)]);
        assert_eq!(a.intersect(&b).ranges(), &[(5, 10), (20, 25), (29, 30)]);
        assert!(a.intersect(&PageSet::new()).is_empty());
    }

    #[test]
    fn maps_devices_match_stat_devices() {
        let f = File::open("/proc/self/exe").unwrap();
        let m = f.metadata().unwrap();
        let (major, minor) = (libc::major(m.dev()) as u64, libc::minor(m.dev()) as u64);
        assert_eq!(Some(FileId::from_maps(major, minor, m.ino())), FileId::of(&f));
    }

    #[test]
    fn a_sampled_file_without_pages_is_known() {
        let mut t = TouchedPages::new();
        let id = FileId { dev: 1, ino: 2 };
        assert_eq!(t.get(&id), None);
        t.add(id, &PageSet::new());
        assert_eq!(t.get(&id), Some(&PageSet::new()));
        let mut u = TouchedPages::new();
        u.add(id, &PageSet::from_ranges([(3, 4)]));
        t.merge(&u);
        assert_eq!(t.get(&id).unwrap().len(), 1);
    }
}
