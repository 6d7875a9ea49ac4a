//! Building a database: from the page profiles of one or more recordings, or by merging
//! databases, keeping the pages seen in at least `min_share` of the recordings.

use std::collections::HashMap;
use std::path::PathBuf;

use coldstart_profile_format::PageProfile;

use crate::db::{Database, FileEntry, Range};
use crate::identity;

/// The most pages one recording keeps (64 GiB): more is no start-up's.
pub const MAX_PAGES: u64 = 1 << 24;

/// One recording's pages in first-touch order, each file named by its identity now.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    /// The recorded command line.
    pub command: Vec<String>,
    /// The files, each with its identity now.
    pub files: Vec<FileEntry>,
    /// `(index into files, page)`, each page once, in first-touch order.
    pub pages: Vec<(usize, u64)>,
    /// How many recordings this stands for, and per page in how many it was seen (a database
    /// being merged again); `None`: one recording, every page seen once.
    pub seen: Option<(u32, Vec<u32>)>,
    /// Things the user should know (a sampled profile, files left out).
    pub warnings: Vec<String>,
}

impl Recording {
    /// The pages of a page profile, each once at its first access. Files the profile could
    /// not name, files that are not regular files (a device's metadata) and files that
    /// changed since the profile was recorded (size, mtime or build-id) are left out and
    /// named in the warnings.
    pub fn from_page_profile(command: Vec<String>, pages: &PageProfile) -> Recording {
        let mut rec = Recording { command, ..Recording::default() };
        if !pages.is_exact() {
            rec.warnings.push(format!(
                "the profile's pages were recorded by `{}`{}, not exactly: pages read with read(2) or brought in by read-ahead may be missing or extra; record as root for an exact database",
                pages.source,
                if pages.sampled { " (sampled)" } else { "" }
            ));
        }
        let mut index: Vec<Option<usize>> = vec![None; pages.files.len()];
        let mut left_out: Vec<String> = Vec::new();
        for (i, f) in pages.files.iter().enumerate() {
            if f.path.as_os_str().is_empty() {
                left_out.push(format!("inode {} on {} (unnamed)", f.ino, f.dev));
                continue;
            }
            match identity::identify(&f.path) {
                Ok(now) if now.size == f.size && now.mtime == f.mtime => {
                    if f.build_id.is_some() && now.build_id != f.build_id {
                        left_out.push(format!("{} (another build now)", f.path.display()));
                        continue;
                    }
                    index[i] = Some(rec.files.len());
                    rec.files.push(now);
                }
                Ok(_) => left_out.push(format!("{} (changed since the profile)", f.path.display())),
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {}
                Err(e) => left_out.push(format!("{} ({e})", f.path.display())),
            }
        }
        if !left_out.is_empty() {
            rec.warnings.push(format!(
                "{} files of the profile left out: {}",
                left_out.len(),
                abbreviate(&left_out)
            ));
        }
        let mut done = std::collections::HashSet::new();
        'accesses: for a in &pages.accesses {
            let Some(Some(file)) = index.get(a.file) else { continue };
            let size = rec.files[*file].size;
            for page in a.page..a.page.saturating_add(a.count) {
                if page * crate::db::PAGE >= size {
                    break;
                }
                if done.insert((*file, page)) {
                    rec.pages.push((*file, page));
                    if rec.pages.len() as u64 >= MAX_PAGES {
                        rec.warnings.push(format!(
                            "the profile names more than {} GiB of pages: only the first {} GiB in first-touch order are kept",
                            (MAX_PAGES * crate::db::PAGE) >> 30,
                            (MAX_PAGES * crate::db::PAGE) >> 30
                        ));
                        break 'accesses;
                    }
                }
            }
        }
        rec
    }

    /// A database as a recording, to merge it with others: its ranges in order, page by page,
    /// each page's count of recordings kept.
    pub fn from_database(db: &Database) -> Recording {
        let mut pages = Vec::new();
        let mut seen = Vec::new();
        for r in &db.ranges {
            for p in r.page..r.page + r.pages {
                pages.push((r.file, p));
                seen.push(r.seen);
            }
        }
        Recording {
            command: db.command.clone(),
            files: db.files.clone(),
            pages,
            seen: Some((db.recordings, seen)),
            warnings: db.warnings.clone(),
        }
    }
}

fn abbreviate(items: &[String]) -> String {
    let mut s = items.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 5 {
        s.push_str(&format!(" and {} more", items.len() - 5));
    }
    s
}

/// Merge recordings into one database. A page is kept when it was seen in at least
/// `min_share` (0 to 1) of the recordings; the pages of each file are merged into ranges of
/// consecutive pages, and the ranges ordered by the earliest first touch of their pages (a
/// page's first touch: the smallest share of its recording that came before it). A file is
/// the same in two recordings when its path and identity are.
pub fn merge(recordings: &[Recording], min_share: f64) -> Database {
    let mut db = Database::new(recordings.first().map(|r| r.command.clone()).unwrap_or_default());
    db.min_share = min_share.clamp(0.0, 1.0);
    let total: u32 = recordings.iter().map(|r| r.seen.as_ref().map_or(1, |s| s.0)).sum();
    db.recordings = total;
    // Per file identity: its entry; per (file, page): (recordings seen, earliest rank).
    let mut files: Vec<FileEntry> = Vec::new();
    let mut file_index: HashMap<(PathBuf, String, u64, u64, i64, i64), usize> = HashMap::new();
    let mut pages: HashMap<(usize, u64), (u32, f64)> = HashMap::new();
    for rec in recordings {
        for w in &rec.warnings {
            if !db.warnings.contains(w) {
                db.warnings.push(w.clone());
            }
        }
        let local: Vec<usize> = rec
            .files
            .iter()
            .map(|f| {
                let key = (f.path.clone(), f.dev.clone(), f.ino, f.size, f.mtime, f.mtime_nsec);
                *file_index.entry(key).or_insert_with(|| {
                    files.push(f.clone());
                    files.len() - 1
                })
            })
            .collect();
        let n = rec.pages.len().max(1) as f64;
        for (i, &(file, page)) in rec.pages.iter().enumerate() {
            let rank = i as f64 / n;
            let count = rec.seen.as_ref().map_or(1, |s| s.1[i]);
            let e = pages.entry((local[file], page)).or_insert((0, f64::INFINITY));
            e.0 += count;
            e.1 = e.1.min(rank);
        }
    }
    let needed = ((min_share * total as f64) - 1e-9).ceil().max(1.0) as u32;
    let mut kept: Vec<((usize, u64), (u32, f64))> =
        pages.into_iter().filter(|(_, (seen, _))| *seen >= needed).collect();
    kept.sort_by_key(|&((f, p), _)| (f, p));
    // Consecutive pages of a file become one range.
    let mut ranges: Vec<(Range, f64)> = Vec::new();
    for ((file, page), (seen, rank)) in kept {
        match ranges.last_mut() {
            Some((r, first)) if r.file == file && r.page + r.pages == page => {
                r.pages += 1;
                r.seen = r.seen.min(seen);
                *first = first.min(rank);
            }
            _ => ranges.push((Range { file, page, pages: 1, seen }, rank)),
        }
    }
    ranges.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.file.cmp(&b.0.file)));
    // Files in the order of their first range; those left without a range are dropped.
    let mut renumber: Vec<Option<usize>> = vec![None; files.len()];
    for (r, _) in &ranges {
        if renumber[r.file].is_none() {
            renumber[r.file] = Some(db.files.len());
            db.files.push(files[r.file].clone());
        }
    }
    db.ranges = ranges
        .into_iter()
        .map(|(r, _)| Range { file: renumber[r.file].expect("numbered above"), ..r })
        .collect();
    db
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> FileEntry {
        FileEntry {
            path: path.into(),
            dev: "8:1".into(),
            ino: path.len() as u64,
            size: 1 << 20,
            mtime: 1,
            mtime_nsec: 0,
            build_id: None,
            build_id_offset: None,
        }
    }

    fn rec(pages: &[(usize, u64)]) -> Recording {
        Recording {
            files: vec![entry("/a"), entry("/bb")],
            pages: pages.to_vec(),
            ..Recording::default()
        }
    }

    #[test]
    fn consecutive_pages_merge_into_ranges_in_first_touch_order() {
        let db = merge(&[rec(&[(1, 7), (0, 3), (0, 4), (1, 8), (0, 0), (0, 5)])], 0.0);
        // /bb first (touched first), then /a.
        assert_eq!(db.files[0].path, PathBuf::from("/bb"));
        let r: Vec<(usize, u64, u64)> =
            db.ranges.iter().map(|r| (r.file, r.page, r.pages)).collect();
        assert_eq!(r, vec![(0, 7, 2), (1, 3, 3), (1, 0, 1)]);
        assert_eq!(db.bytes(), 6 * 4096);
    }

    #[test]
    fn min_share_leaves_out_pages_few_recordings_saw() {
        let a = rec(&[(0, 0), (0, 1), (0, 9)]);
        let b = rec(&[(0, 0), (0, 1)]);
        let c = rec(&[(0, 0), (0, 2)]);
        let all = merge(&[a.clone(), b.clone(), c.clone()], 0.0);
        assert_eq!(all.recordings, 3);
        assert_eq!(all.bytes(), 4 * 4096);
        let most = merge(&[a, b, c], 0.5);
        let r: Vec<(u64, u64, u32)> =
            most.ranges.iter().map(|r| (r.page, r.pages, r.seen)).collect();
        assert_eq!(r, vec![(0, 2, 2)]);
    }

    #[test]
    fn a_merged_database_merges_again_with_its_counts() {
        let ab = merge(&[rec(&[(0, 0), (0, 5)]), rec(&[(0, 0)])], 0.0);
        let again = merge(&[Recording::from_database(&ab), rec(&[(0, 5)])], 0.6);
        assert_eq!(again.recordings, 3);
        let r: Vec<(u64, u32)> = again.ranges.iter().map(|r| (r.page, r.seen)).collect();
        assert_eq!(r, vec![(0, 2), (5, 2)]);
    }

    #[test]
    fn the_same_path_with_another_identity_is_another_file() {
        let a = rec(&[(0, 0)]);
        let mut b = rec(&[(0, 0)]);
        b.files[0].mtime = 2;
        let db = merge(&[a, b], 0.0);
        assert_eq!(db.files.len(), 2);
    }
}
