//! Exact page profiles: the file pages start-up touches, at 4 KiB, each once, in first-touch
//! order, whatever this machine's read-ahead and fault-around.
//!
//! Traced where the files are, the page cache shows what was *brought in* for start-up, not
//! what start-up touched: a fault or a `read(2)` makes the kernel read ahead up to the device's
//! read-ahead (8 MiB on some machines: a whole library), and a fault maps up to 16 cached
//! neighbours of the faulting page without the program touching them (fault-around,
//! `mm_filemap_map_pages`). On a device whose read-ahead is 0 and whose cache is cold, a page
//! enters the page cache only when a process touches it: a fault reads the one page, a
//! `read(2)` the pages it asks for, one by one. The pages added
//! (`mm_filemap_add_to_page_cache`) are then the pages touched, in the order of their first
//! touch, by a mapping or by `read(2)`, whichever came first; fault-around only maps pages
//! touched before, and its events are left out.
//!
//! So the page run is two runs:
//!
//! 1. *Discovery*, traced where the files are (as `--pages=traced`): the files the run's
//!    processes open (fanotify) or have pages of, system libraries and data included.
//! 2. Those files are copied onto a private loop device with read-ahead 0
//!    (`coldstart-storage`, which `measure --storage` uses too), its cache dropped; the program
//!    runs again in a mount namespace where each copy is bind-mounted over its original, and is
//!    traced there. Each page of a copy counts at its first addition to the page cache:
//!    `fault` when that thread's previous event was a fault on the page, else `read`.
//!
//! Not copied, and traced where they are: files the program writes (a bind-mounted file cannot
//! be replaced by a rename), files in memory file systems (tmpfs: no storage to read), files
//! coldstart cannot read, and files only the second run opened. Pages of the file systems'
//! own metadata (directories, inode tables, the journal: I/O of a block device's page cache)
//! are left out, since they belong to how a file system lays itself out, not to the program.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use coldstart_storage::{EmulatedStorage, StorageError, StorageProfile};

use crate::format::{PageAccess, PageFile, PageProfile, SOURCE_EXACT};
use crate::pages::{describe, Event, Key, PageRun, PagesError, Traced};
use crate::{ProfileError, ProfileOptions};

/// Record an exact page profile: discovery, the copy, the run on the copy.
pub(crate) fn record(options: &ProfileOptions, path: &Path) -> Result<PageRun, ProfileError> {
    let discovery = crate::pages::trace(options, path, None)?;
    crate::interrupt::check()?;
    let files = files_to_copy(&discovery, path);
    if files.is_empty() {
        // Nothing with a page cache to copy (a program in a memory file system): every page
        // the run touches is traced where it is.
        let run = crate::pages::trace(options, path, None)?;
        return Ok(first_touches(run, None, &HashMap::new(), &discovery));
    }
    let bytes: u64 = files.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum();
    let work_dir =
        options.page_work_dir.clone().unwrap_or_else(|| crate::pages::work_dir_for(bytes));
    // What a coldstart killed with SIGKILL left in the other place it may choose.
    for dir in ["/dev/shm", coldstart_storage::DEFAULT_WORK_DIR] {
        if Path::new(dir) != work_dir && Path::new(dir).is_dir() {
            let _ = coldstart_storage::cleanup_stale(Path::new(dir));
        }
    }
    let (storage, unreadable) = copy_what_reads(files, |files| {
        EmulatedStorage::create(&read_ahead_off(), files, &work_dir)
    })
    .map_err(|source| PagesError::Copy { source })?;
    let copies = copies_of(&storage);
    let hook = storage.enter_hook().map_err(|source| PagesError::Copy { source })?;
    let device = storage.device().dev;
    let run = crate::pages::trace(options, path, Some(&hook))?;
    let mut recorded = first_touches(run, Some(device), &copies, &discovery);
    for (file, e) in unreadable {
        recorded.warnings.push(format!(
            "{} could not be read for the private copy ({e}): its pages are traced where it is, read-ahead and fault-around included",
            file.display()
        ));
    }
    if let Err(e) = storage.close() {
        recorded.warnings.push(format!(
            "the private copy's device could not be removed ({e}); the next coldstart profile removes it"
        ));
    }
    Ok(recorded)
}

/// The private copy of `files`, made by `create`. A file removed between the discovery and
/// the copy (on a busy machine another process's file can be named by an inode the run read,
/// and be deleted) is left out; so is a file that cannot be read while it is copied (a file
/// of a FUSE mount whose server went away), returned with its error, up to a few such files.
/// The program's pages of those are traced where they are.
fn copy_what_reads<T>(
    mut files: Vec<PathBuf>,
    mut create: impl FnMut(&[PathBuf]) -> Result<T, StorageError>,
) -> Result<(T, Vec<(PathBuf, String)>), StorageError> {
    const MAX_LEFT_OFF: usize = 8;
    let mut left_off = Vec::new();
    loop {
        match create(&files) {
            Ok(storage) => return Ok((storage, left_off)),
            Err(StorageError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound
                    && files.iter().any(|f| !f.exists()) =>
            {
                files.retain(|f| f.exists());
            }
            Err(StorageError::Io { path, what, source })
                if what == "copy" && left_off.len() < MAX_LEFT_OFF && files.contains(&path) =>
            {
                files.retain(|f| *f != path);
                left_off.push((path, source.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A device that reads nothing ahead and is not throttled.
fn read_ahead_off() -> StorageProfile {
    StorageProfile {
        name: "custom".into(),
        read_iops: None,
        read_bps: None,
        readahead_kb: 0,
        seek: None,
    }
}

/// The files of the discovery run to put on the copy: every file the run's processes opened
/// or had pages of, by its path, when it is a regular file that still exists, is not in a
/// memory file system, was not written during the run, and can be read. Sorted.
fn files_to_copy(discovery: &Traced, program: &Path) -> Vec<PathBuf> {
    let mut keys: HashSet<Key> =
        discovery.events.iter().map(|e| (e.dev.0, e.dev.1, e.ino)).collect();
    let mut modified = HashSet::new();
    if let Some(o) = &discovery.opened {
        keys.extend(
            o.opens.iter().filter(|(pid, _)| discovery.tree.contains(pid)).map(|(_, k)| *k),
        );
        modified = o.modified.clone();
    }
    let own = std::fs::canonicalize("/proc/self/exe").ok();
    let target = std::fs::canonicalize(program).ok();
    let mut paths: Vec<PathBuf> = keys
        .iter()
        .filter(|k| !modified.contains(k))
        .filter_map(|k| discovery.files.get(k))
        .filter(|p| !p.to_string_lossy().ends_with(" (deleted)"))
        .filter(|p| own.as_deref() != Some(p.as_path()) || own == target)
        .filter(|p| copyable(p, &modified))
        .cloned()
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// Whether `path` is a regular file, not empty, on a file system with storage behind it, not
/// written during the run (`modified`), and readable.
fn copyable(path: &Path, modified: &HashSet<Key>) -> bool {
    let Ok(meta) = std::fs::metadata(path) else { return false };
    let key = (libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino());
    meta.is_file()
        && meta.len() > 0
        && !modified.contains(&key)
        && coldstart_process::memory_file_system(path).is_ok_and(|m| m.is_none())
        && std::fs::File::open(path).is_ok()
}

/// Each copy's inode on the device, with its original's path and key.
fn copies_of(storage: &EmulatedStorage) -> HashMap<u64, (PathBuf, Key)> {
    let key = |m: &std::fs::Metadata| (libc::major(m.dev()), libc::minor(m.dev()), m.ino());
    storage
        .entries()
        .iter()
        .filter_map(|original| {
            let copy = std::fs::metadata(storage.emulated_path(original)).ok()?;
            let meta = std::fs::metadata(original).ok()?;
            Some((copy.ino(), (original.clone(), key(&meta))))
        })
        .collect()
}

/// Whether `key` is the page cache of a block device (the `bdev` pseudo file system numbers
/// its inodes by the device: `major << 20 | minor`): a file system's metadata.
fn is_block_device(key: Key) -> bool {
    key.0 == 0
        && Path::new(&format!("/sys/dev/block/{}:{}", key.2 >> 20, key.2 & 0xf_ffff)).exists()
}

/// The pages of the run on the copy (`device`, whose inodes `copies` names), each once at its
/// first touch; events of files not on the copy are kept as traced, and those the program did
/// not write (in either run) are named in a warning.
fn first_touches(
    run: Traced,
    device: Option<(u32, u32)>,
    copies: &HashMap<u64, (PathBuf, Key)>,
    discovery: &Traced,
) -> PageRun {
    let written: HashSet<Key> = [&run.opened, &discovery.opened]
        .into_iter()
        .flatten()
        .flat_map(|o| o.modified.iter().copied())
        .collect();
    let mut touches = Touches::default();
    let mut in_place: HashMap<Key, usize> = HashMap::new();
    let mut last_fault: HashMap<i32, (Key, u64)> = HashMap::new();
    let mut large = 0u64;
    let metadata = crate::pages::metadata_keys(&run, device);
    for e in &run.events {
        let key = (e.dev.0, e.dev.1, e.ino);
        if metadata.contains(&key) {
            continue;
        }
        let (fi, how) = if Some(e.dev) == device {
            let Some((original, original_key)) = copies.get(&e.ino) else { continue };
            match e.kind {
                "fault" => {
                    last_fault.insert(e.pid, (key, e.page));
                    continue;
                }
                "map" => continue,
                _ => {}
            }
            if e.count > 1 {
                large += e.count;
            }
            let faulted = last_fault
                .get(&e.pid)
                .is_some_and(|&(k, p)| k == key && (e.page..e.page + e.count).contains(&p));
            let fi =
                touches.file(*original_key, || describe(Some(original.clone()), *original_key));
            (fi, if faulted { "fault" } else { "read" })
        } else if is_block_device(key) {
            continue;
        } else {
            let fi = touches.file(key, || describe(run.files.get(&key).cloned(), key));
            if !written.contains(&key) {
                in_place.insert(key, fi);
            }
            (fi, e.kind)
        };
        touches.touch(fi, how, e);
    }
    let mut warnings = run.warnings;
    for w in &discovery.warnings {
        if !warnings.contains(w) {
            warnings.push(format!("discovery run: {w}"));
        }
    }
    warnings.extend(in_place_warning(&touches.files, &in_place));
    if let Some(o) = &run.opened {
        warnings.extend(cached_outside_warning(o, device, &touches));
    }
    if large > 0 {
        warnings.push(format!(
            "the kernel read {large} pages of the copy in folios larger than 4 KiB: all of them count as touched, though start-up may have touched only one page of each folio"
        ));
    }
    PageRun {
        pages: PageProfile {
            source: SOURCE_EXACT.into(),
            sampled: false,
            files: touches.files,
            accesses: touches.accesses,
            lost_events: run.lost,
        },
        warnings,
        cpu: run.cpu,
    }
}

/// The files and pages of a run, each page once at its first touch.
#[derive(Default)]
struct Touches {
    files: Vec<PageFile>,
    /// Each file's index in `files`, by its key.
    index: HashMap<Key, usize>,
    /// The pages already touched (file index, page).
    seen: HashSet<(usize, u64)>,
    /// The first touches, consecutive pages of one file, event and process in one access.
    accesses: Vec<PageAccess>,
}

impl Touches {
    /// The index of the file of `key`, described by `describe` when it is new.
    fn file(&mut self, key: Key, describe: impl FnOnce() -> PageFile) -> usize {
        *self.index.entry(key).or_insert_with(|| {
            self.files.push(describe());
            self.files.len() - 1
        })
    }

    /// Add the pages of `e` in file `fi` not touched before, as `how` (`fault`, `read`,
    /// `map`); a page that follows the last access of the same kind extends it.
    fn touch(&mut self, fi: usize, how: &'static str, e: &Event) {
        for page in e.page..e.page + e.count.max(1) {
            if !self.seen.insert((fi, page)) {
                continue;
            }
            match self.accesses.last_mut() {
                Some(last)
                    if last.file == fi
                        && last.event == how
                        && last.pid == e.pid
                        && last.page + last.count == page =>
                {
                    last.count += 1
                }
                _ => self.accesses.push(PageAccess {
                    file: fi,
                    page,
                    count: 1,
                    t_ns: e.ts_ns,
                    event: how.into(),
                    pid: e.pid,
                }),
            }
        }
    }
}

/// The warning naming the files (`in_place`: key to index in `files`) the program read
/// where they are, not on the private copy: their pages include read-ahead and fault-around.
fn in_place_warning(files: &[PageFile], in_place: &HashMap<Key, usize>) -> Option<String> {
    if in_place.is_empty() {
        return None;
    }
    let mut names: Vec<String> = in_place
        .values()
        .map(|&i| match files[i].path.as_os_str().is_empty() {
            true => format!("inode {} on {}", files[i].ino, files[i].dev),
            false => files[i].path.display().to_string(),
        })
        .collect();
    names.sort();
    let shown = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    Some(format!(
        "{} the program read {} not on the private copy (opened in the second run only, or not readable by coldstart), so {} pages are traced where they are, read-ahead and fault-around included: {shown}{}",
        if names.len() == 1 { "1 file".to_string() } else { format!("{} files", names.len()) },
        if names.len() == 1 { "was" } else { "were" },
        if names.len() == 1 { "its" } else { "their" },
        if names.len() > 5 { ", ..." } else { "" }
    ))
}

/// A file outside the copy (`device`) that was cached before the run leaves no event for
/// what the program read of it with read(2): the warning that says so (the copies start
/// cold).
fn cached_outside_warning(
    opened: &crate::opens::Opened,
    device: Option<(u32, u32)>,
    touches: &Touches,
) -> Option<String> {
    let outside = crate::opens::Opened {
        cached_at_open: opened
            .cached_at_open
            .iter()
            .filter(|(key, _, _)| Some((key.0, key.1)) != device)
            .cloned()
            .collect(),
        ..Default::default()
    };
    crate::pages::cached_warning(&outside, &touches.index, &touches.accesses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_removed_between_the_discovery_and_the_copy_is_left_out_not_fatal() {
        // A gate on a busy machine failed: "cannot stat .../layout-sample-24837/sample/data",
        // another test's file, deleted after the discovery named it.
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("kept");
        std::fs::write(&kept, b"x").unwrap();
        let gone = dir.path().join("gone");
        let files = vec![gone.clone(), kept.clone()];
        let mut calls = Vec::new();
        let got = copy_what_reads(files.clone(), |f| {
            calls.push(f.to_vec());
            match f.iter().find(|p| !p.exists()) {
                Some(p) => Err(StorageError::Io {
                    path: p.clone(),
                    what: "stat".into(),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                }),
                None => Ok(f.len()),
            }
        });
        let (n, unreadable) = got.unwrap();
        assert_eq!((n, unreadable.len()), (1, 0));
        assert_eq!(calls, [files.clone(), vec![kept.clone()]]);
        // A file that cannot be read while copied is left out and named.
        let got = copy_what_reads(files.clone(), |f| match f.iter().find(|p| **p == gone) {
            Some(p) => Err(StorageError::Io {
                path: p.clone(),
                what: "copy".into(),
                source: std::io::Error::from_raw_os_error(libc::EIO),
            }),
            None => Ok(f.len()),
        });
        let (n, unreadable) = got.unwrap();
        assert_eq!((n, unreadable.len()), (1, 1));
        assert_eq!(unreadable[0].0, gone);
        // Any other failure is not retried.
        let mut n = 0;
        let got: Result<((), _), _> = copy_what_reads(files.clone(), |_| {
            n += 1;
            Err(StorageError::NotRoot)
        });
        assert!(got.is_err());
        assert_eq!(n, 1);
    }
}
