//! What both page recorders share (the tracefs trace in [`crate::pages`], the page-fault
//! samples in `perf`): their error, and the files of a page profile. Both traces name a file
//! by device and inode; here a file is described by its path (size, mtime, build-id), and
//! files a trace could only number are named afterwards from candidate paths.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use coldstart_error::Category;

use crate::format::{PageFile, PageProfile};

/// Why the page trace could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum PagesError {
    /// Sampling page faults with perf failed.
    #[error("page-fault sampling: {0}")]
    Perf(String),
    /// tracefs could not be used.
    #[error("tracefs at {path}: {message}")]
    Tracefs {
        /// The file of tracefs.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// The method needs root.
    #[error("--pages={method} needs root (it traces the page cache with tracefs{}): run the same command with sudo, or use --pages=sampled (page faults sampled without root)", if method == "exact" { ", on a private copy of the files start-up reads" } else { "" })]
    NeedsRoot {
        /// The `--pages` method asked for.
        method: String,
    },
    /// The private copy for an exact profile could not be made.
    #[error("cannot put the files start-up reads on a private device for an exact page profile: {source}; --pages=traced traces them where they are instead (read-ahead and fault-around included)")]
    Copy {
        /// Why the copy failed.
        #[source]
        source: coldstart_storage::StorageError,
    },
}

impl PagesError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            PagesError::Perf(_) => Category::Privilege,
            PagesError::Tracefs { .. } => Category::Environment,
            PagesError::NeedsRoot { .. } => Category::Privilege,
            PagesError::Copy { source } => source.category(),
        }
    }
}

/// A traced file, by its path when known, else by device and inode (`key`) alone.
pub(crate) fn describe(path: Option<PathBuf>, key: (u32, u32, u64)) -> PageFile {
    let dev = format!("{}:{}", key.0, key.1);
    match path {
        Some(path) => {
            let meta = std::fs::metadata(&path).ok();
            let build_id = coldstart_elf::is_elf(&path)
                .then(|| {
                    coldstart_elf::ElfInfo::open(
                        &path,
                        &coldstart_elf::SymbolOptions {
                            use_debug_files: false,
                            ..Default::default()
                        },
                    )
                    .ok()
                    .and_then(|i| i.build_id_hex())
                })
                .flatten();
            PageFile {
                size: meta.as_ref().map(|m| m.len()).unwrap_or(0),
                mtime: meta.as_ref().map(|m| m.mtime()).unwrap_or(0),
                path,
                build_id,
                dev,
                ino: key.2,
            }
        }
        None => {
            PageFile { path: PathBuf::new(), size: 0, mtime: 0, build_id: None, dev, ino: key.2 }
        }
    }
}

/// Name files the trace knew only by device and inode, from candidate paths (the program,
/// its interpreter and the modules the function run saw), then from the other entries of the
/// directories holding them (the loader's cache, a library loaded and closed again, a data
/// file beside the program): a short-lived program exits before its maps can be read.
/// Returns how many files are still unnamed.
pub(crate) fn resolve_with(pages: &mut PageProfile, candidates: &[PathBuf]) -> usize {
    let unnamed =
        |pages: &PageProfile| pages.files.iter().filter(|f| f.path.as_os_str().is_empty()).count();
    name_block_devices(pages, Path::new("/sys/dev/block"));
    name_from(pages, candidates.iter().cloned());
    if unnamed(pages) == 0 {
        return 0;
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for c in candidates {
        for p in [Some(c.clone()), std::fs::canonicalize(c).ok()].into_iter().flatten() {
            if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                if !dirs.iter().any(|x| x == d) {
                    dirs.push(d.to_path_buf());
                }
            }
        }
    }
    let siblings = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()).collect::<Vec<_>>());
    name_from(pages, siblings);
    unnamed(pages)
}

/// Name the pages of block devices: a file system reads its metadata (directories, inode
/// tables, journal) through the page cache of its block device, whose inode lives in the
/// kernel's `bdev` pseudo file system (a device of major 0) and is numbered by the device it
/// stands for (`major << 20 | minor`). Such a "file" is named by its device node
/// (`/dev/vda`), as `sys` (`/sys/dev/block`) lists it; it is I/O start-up does, not a file the
/// program opened.
fn name_block_devices(pages: &mut PageProfile, sys_block: &Path) {
    for f in pages.files.iter_mut().filter(|f| f.path.as_os_str().is_empty()) {
        if !f.dev.starts_with("0:") {
            continue;
        }
        let (major, minor) = (f.ino >> 20, f.ino & 0xf_ffff);
        let Ok(uevent) = std::fs::read_to_string(sys_block.join(format!("{major}:{minor}/uevent")))
        else {
            continue;
        };
        let Some(name) = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME=")) else {
            continue;
        };
        f.path = Path::new("/dev").join(name);
    }
}

/// Name the unnamed files of `pages` whose device and inode one of `paths` has.
fn name_from(pages: &mut PageProfile, paths: impl Iterator<Item = PathBuf>) {
    let wanted: std::collections::HashSet<(String, u64)> = pages
        .files
        .iter()
        .filter(|f| f.path.as_os_str().is_empty())
        .map(|f| (f.dev.clone(), f.ino))
        .collect();
    if wanted.is_empty() {
        return;
    }
    let mut by_key: HashMap<(String, u64), PathBuf> = HashMap::new();
    for c in paths {
        if let Ok(m) = std::fs::metadata(&c) {
            let key = (format!("{}:{}", libc::major(m.dev()), libc::minor(m.dev())), m.ino());
            if wanted.contains(&key) {
                by_key.entry(key).or_insert(c);
            }
        }
    }
    for f in pages.files.iter_mut().filter(|f| f.path.as_os_str().is_empty()) {
        if let Some(path) = by_key.get(&(f.dev.clone(), f.ino)) {
            let (ma, mi) = f.dev.split_once(':').unwrap_or(("0", "0"));
            *f = describe(
                Some(path.clone()),
                (ma.parse().unwrap_or(0), mi.parse().unwrap_or(0), f.ino),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::PageFile;

    fn key_of(path: &Path) -> (u32, u32, u64) {
        let m = std::fs::metadata(path).unwrap();
        (libc::major(m.dev()), libc::minor(m.dev()), m.ino())
    }

    #[test]
    fn block_device_pages_are_named_by_the_device_node() {
        let sys = tempfile::tempdir().unwrap();
        std::fs::create_dir(sys.path().join("254:16")).unwrap();
        std::fs::write(sys.path().join("254:16/uevent"), "MAJOR=254\nMINOR=16\nDEVNAME=vdb\n")
            .unwrap();
        let bdev = |ino: u64| PageFile { dev: "0:3".into(), ..describe(None, (0, 3, ino)) };
        let mut pages = PageProfile {
            source: "tracefs".into(),
            sampled: false,
            files: vec![bdev(254 << 20 | 16), bdev(8 << 20), describe(None, (254, 16, 12))],
            accesses: Vec::new(),
            lost_events: 0,
        };
        name_block_devices(&mut pages, sys.path());
        assert_eq!(pages.files[0].path, Path::new("/dev/vdb"));
        assert!(pages.files[1].path.as_os_str().is_empty(), "a device sys does not list");
        assert!(pages.files[2].path.as_os_str().is_empty(), "a file of a real file system");
    }

    #[test]
    fn unnamed_files_are_named_from_candidates_and_their_directories() {
        let d = tempfile::tempdir().unwrap();
        let (bin, lib) = (d.path().join("bin"), d.path().join("lib"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        let (prog, cache, data, other) =
            (bin.join("prog"), bin.join("cache"), lib.join("data"), d.path().join("other"));
        for f in [&prog, &cache, &data, &other] {
            std::fs::write(f, b"x").unwrap();
        }
        let unnamed = |p: &Path| describe(None, key_of(p));
        let mut pages = PageProfile {
            source: "tracefs".into(),
            sampled: false,
            files: vec![unnamed(&prog), unnamed(&cache), unnamed(&data), unnamed(&other)],
            accesses: Vec::new(),
            lost_events: 0,
        };
        // prog is a candidate; cache sits beside it; data and other beside no candidate.
        assert_eq!(resolve_with(&mut pages, std::slice::from_ref(&prog)), 2);
        assert_eq!(pages.files[0].path, prog);
        assert_eq!(pages.files[1].path, cache);
        assert_eq!(pages.files[1].size, 1, "a named file is described");
        assert!(pages.files[2].path.as_os_str().is_empty());
        assert!(pages.files[3].path.as_os_str().is_empty());
        // With a candidate in lib/, data is named too; other stays unnamed.
        assert_eq!(resolve_with(&mut pages, &[prog.clone(), lib.join("absent")]), 1);
        assert_eq!(pages.files[2].path, data);
    }
}
