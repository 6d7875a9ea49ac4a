//! The database file: format `coldstart-prefetch`, version 1 (docs/formats/prefetch.md).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::PrefetchError;

/// The format name written in every database.
pub const FORMAT: &str = "coldstart-prefetch";
/// The only version this build reads and writes.
pub const VERSION: u32 = 1;
/// The unit of every range: 4 KiB pages.
pub const PAGE: u64 = 4096;
/// The largest database file read (64 MiB): a start-up touching every page of 10 GiB of files
/// in single-page ranges needs less; a larger file is not one coldstart wrote.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// One prefetch database: the file ranges a start-up read, each file named by identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Database {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`] when written by this build.
    pub version: u32,
    /// The recorded command line (the first recording's, for a merge).
    #[serde(default)]
    pub command: Vec<String>,
    /// When the database was written, seconds since the Unix epoch.
    pub created_unix: u64,
    /// How many recordings were merged into it (1 for one recording).
    pub recordings: u32,
    /// The share of recordings a page had to be seen in to be kept (`--min-share`).
    pub min_share: f64,
    /// The files, in the order start-up first touched them.
    pub files: Vec<FileEntry>,
    /// The ranges, in the order start-up first touched them (a range's first touch is the
    /// earliest of its pages').
    pub ranges: Vec<Range>,
    /// Things the user should know about the recording (a sampled profile, files left out).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// A file and its identity when it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The file.
    pub path: PathBuf,
    /// Device `major:minor`.
    pub dev: String,
    /// Inode.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time: seconds since the epoch.
    pub mtime: i64,
    /// Modification time: nanoseconds within the second.
    pub mtime_nsec: i64,
    /// The GNU build-id of an ELF file, in hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// Where the build-id's bytes are in the file, so replay checks them with one small read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id_offset: Option<u64>,
}

/// Pages `page .. page + pages` of `files[file]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    /// The file (an index into [`Database::files`]).
    pub file: usize,
    /// The first page (offset / 4096).
    pub page: u64,
    /// How many pages.
    pub pages: u64,
    /// In how many of the merged recordings the range's pages were seen (the fewest of its
    /// pages').
    pub seen: u32,
}

impl Database {
    /// An empty database of the current format.
    pub fn new(command: Vec<String>) -> Database {
        Database {
            format: FORMAT.into(),
            version: VERSION,
            command,
            created_unix: coldstart_units::now_unix(),
            recordings: 1,
            min_share: 0.0,
            files: Vec::new(),
            ranges: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Bytes the ranges cover.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.pages * PAGE).sum()
    }

    /// Pages of each file the ranges cover.
    pub fn pages_per_file(&self) -> Vec<u64> {
        let mut pages = vec![0; self.files.len()];
        for r in &self.ranges {
            pages[r.file] += r.pages;
        }
        pages
    }

    /// Read and validate a database: its format and version first, its size bounded by
    /// [`MAX_FILE_BYTES`], every range inside a file that exists in it and inside that file's
    /// recorded size.
    pub fn read(path: &Path) -> Result<Database, PrefetchError> {
        let read = |source: std::io::Error| match coldstart_fs::unusable_text_input(path, &source) {
            Some(problem) => PrefetchError::Unusable { path: path.to_owned(), problem },
            None => PrefetchError::Read { path: path.to_owned(), source },
        };
        let meta = std::fs::metadata(path).map_err(read)?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(PrefetchError::TooLarge {
                path: path.to_owned(),
                bytes: meta.len(),
                limit: MAX_FILE_BYTES,
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        if text.trim().is_empty() {
            return Err(PrefetchError::Unusable { path: path.to_owned(), problem: "is empty" });
        }
        Database::from_json(path, &text)
    }

    /// Parse and validate a database; `path` names it in errors.
    pub fn from_json(path: &Path, text: &str) -> Result<Database, PrefetchError> {
        #[derive(Deserialize)]
        struct Head {
            format: Option<String>,
            version: Option<u32>,
        }
        let parse = |source| PrefetchError::Parse { path: path.to_owned(), source };
        let head: Head = serde_json::from_str(text).map_err(parse)?;
        let format = head.format.unwrap_or_default();
        if format != FORMAT {
            return Err(PrefetchError::WrongFormat { path: path.to_owned(), found: format });
        }
        let version = head.version.unwrap_or(0);
        if version != VERSION {
            return Err(PrefetchError::UnknownVersion { path: path.to_owned(), found: version });
        }
        let db: Database = serde_json::from_str(text).map_err(parse)?;
        db.validate().map_err(|why| PrefetchError::Invalid { path: path.to_owned(), why })?;
        Ok(db)
    }

    /// Check that every range is inside its file as recorded.
    pub fn validate(&self) -> Result<(), String> {
        for (i, r) in self.ranges.iter().enumerate() {
            let Some(f) = self.files.get(r.file) else {
                return Err(format!("range {i} names file {} of {}", r.file, self.files.len()));
            };
            let end = r.page.checked_add(r.pages).and_then(|e| e.checked_mul(PAGE));
            match end {
                Some(end) if r.pages > 0 && end <= f.size.div_ceil(PAGE) * PAGE => {}
                _ => {
                    return Err(format!(
                        "range {i} (pages {} + {}) is outside {} ({} bytes)",
                        r.page,
                        r.pages,
                        f.path.display(),
                        f.size
                    ))
                }
            }
        }
        if !(0.0..=1.0).contains(&self.min_share) {
            return Err(format!("min_share {} is not between 0 and 1", self.min_share));
        }
        Ok(())
    }

    /// Write atomically (see [`coldstart_fs::write_atomic`]).
    pub fn write(&self, path: &Path) -> Result<(), PrefetchError> {
        let mut text = serde_json::to_string_pretty(self).expect("a database serialises");
        text.push('\n');
        coldstart_fs::write_atomic(path, text.as_bytes())
            .map_err(|source| PrefetchError::Write { path: path.to_owned(), source })
    }

    /// Keep the first ranges in first-touch order that fit in `budget` bytes (the rest would
    /// push out of memory what the start-up read first). Returns the bytes left out.
    pub fn truncate_to(&mut self, budget: u64) -> u64 {
        let mut used = 0u64;
        let mut keep = 0;
        for r in &self.ranges {
            let b = r.pages * PAGE;
            if used + b > budget {
                break;
            }
            used += b;
            keep += 1;
        }
        let dropped: u64 = self.ranges[keep..].iter().map(|r| r.pages * PAGE).sum();
        self.ranges.truncate(keep);
        dropped
    }
}

/// Memory the system says it can give without swapping (`MemAvailable`), in bytes.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(size: u64) -> FileEntry {
        FileEntry {
            path: "/x".into(),
            dev: "8:1".into(),
            ino: 1,
            size,
            mtime: 0,
            mtime_nsec: 0,
            build_id: None,
            build_id_offset: None,
        }
    }

    #[test]
    fn a_range_past_its_file_is_invalid() {
        let mut db = Database::new(vec![]);
        db.files.push(file(8192));
        db.ranges.push(Range { file: 0, page: 0, pages: 2, seen: 1 });
        assert!(db.validate().is_ok());
        db.ranges.push(Range { file: 0, page: 5, pages: 1, seen: 1 });
        assert!(db.validate().unwrap_err().contains("outside /x"));
        db.ranges.pop();
        db.ranges.push(Range { file: 0, page: u64::MAX, pages: 2, seen: 1 });
        assert!(db.validate().is_err());
        db.ranges.pop();
        db.ranges.push(Range { file: 3, page: 0, pages: 1, seen: 1 });
        assert!(db.validate().unwrap_err().contains("names file 3"));
    }

    #[test]
    fn a_wrong_version_says_so_before_any_field_error() {
        let err = Database::from_json(
            Path::new("db.json"),
            r#"{"format":"coldstart-prefetch","version":9}"#,
        )
        .unwrap_err();
        assert!(matches!(err, PrefetchError::UnknownVersion { found: 9, .. }), "{err}");
        let err = Database::from_json(Path::new("p.json"), r#"{"format":"coldstart-profile"}"#)
            .unwrap_err();
        assert!(err.to_string().contains("`coldstart-profile` file"), "{err}");
    }

    #[test]
    fn truncation_keeps_the_first_touched_ranges() {
        let mut db = Database::new(vec![]);
        db.files.push(file(1 << 20));
        for i in 0..10 {
            db.ranges.push(Range { file: 0, page: i * 3, pages: 2, seen: 1 });
        }
        let dropped = db.truncate_to(5 * PAGE);
        assert_eq!(db.ranges.len(), 2);
        assert_eq!(db.ranges[1].page, 3);
        assert_eq!(dropped, 8 * 2 * PAGE);
    }
}
