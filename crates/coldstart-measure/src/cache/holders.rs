//! Naming the processes that keep a file's pages resident.
//!
//! A page that a live process maps cannot be dropped by `POSIX_FADV_DONTNEED`, so when
//! eviction does not hold the useful answer is *who* maps the file. We scan `/proc/*/maps`
//! (matching the path, or the device and inode, so a renamed or deleted-but-mapped file is
//! still found) and `/proc/*/fd` (matching the link target: holding a file open does not pin its
//! pages, but it explains who may read them back in). File descriptors are matched by their
//! link text only, never by `stat`: a `stat` through `/proc/PID/fd/N` can block on a hung FUSE
//! file system.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use coldstart_process::maps::{parse_line, Mapping};

use super::pages::{FileId, PageSet};
use coldstart_formats::measure::Holder;
use coldstart_sys::page_size;

/// One file to look for: its path and, when it can be stat'ed, its device and inode.
struct Target {
    path: PathBuf,
    id: Option<FileId>,
}

impl Target {
    fn new(path: &Path) -> Target {
        let id = fs::metadata(path).ok().map(|m| FileId { dev: m.dev(), ino: m.ino() });
        Target { path: path.to_path_buf(), id }
    }
}

/// The file a mapping maps.
pub(crate) fn file_id(mapping: &Mapping<'_>) -> FileId {
    FileId::from_maps(mapping.dev.0.into(), mapping.dev.1.into(), mapping.inode)
}

/// The pages of the file a mapping maps (it may reach past the end of the file).
pub(crate) fn file_pages(mapping: &Mapping<'_>) -> (u64, u64) {
    let ps = page_size();
    let first = mapping.offset / ps;
    (first, first + (mapping.end.saturating_sub(mapping.start)).div_ceil(ps))
}

/// Live processes (other than `exclude_pids`) that map or hold open any of `paths`, from
/// `/proc`. One [`Holder`] per (process, file), sorted by pid then path.
pub fn find_holders(paths: &[PathBuf], exclude_pids: &[u32]) -> io::Result<Vec<Holder>> {
    find_holders_in(Path::new("/proc"), paths, exclude_pids)
}

/// [`find_holders`] on a `/proc`-like tree at `proc_root` (a fake one in tests).
/// Processes that exit during the scan or whose files we may not read are skipped; only an
/// unreadable `proc_root` is an error.
pub fn find_holders_in(
    proc_root: &Path,
    paths: &[PathBuf],
    exclude_pids: &[u32],
) -> io::Result<Vec<Holder>> {
    Ok(scan(proc_root, paths, exclude_pids)?.holders)
}

/// What a scan of `/proc` found for a list of files.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// The processes that map or hold open the files, sorted by pid then path.
    pub holders: Vec<Holder>,
    /// Per file, in the order given: the pages those processes map.
    pub mapped: Vec<PageSet>,
}

/// The processes other than `exclude_pids` that map or hold open any of `paths`, and the pages
/// of each file they map (see [`Scan`]).
pub(crate) fn scan(proc_root: &Path, paths: &[PathBuf], exclude_pids: &[u32]) -> io::Result<Scan> {
    let targets: Vec<Target> = paths.iter().map(|p| Target::new(p)).collect();
    let mut found: BTreeMap<(u32, PathBuf), Holder> = BTreeMap::new();
    let mut mapped = vec![PageSet::new(); targets.len()];
    if targets.is_empty() {
        return Ok(Scan::default());
    }
    for entry in fs::read_dir(proc_root)? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if exclude_pids.contains(&pid) {
            continue;
        }
        let dir = entry.path();
        let mut hits: Vec<(usize, bool)> = Vec::new();
        if let Ok(maps) = fs::read_to_string(dir.join("maps")) {
            for entry in maps.lines().filter_map(parse_line) {
                let shown = entry.path.strip_suffix(" (deleted)").unwrap_or(entry.path);
                for (i, t) in targets.iter().enumerate() {
                    let same_id = t.id == Some(file_id(&entry));
                    if same_id || Path::new(shown) == t.path {
                        hits.push((i, true));
                        let (a, b) = file_pages(&entry);
                        mapped[i].insert(a, b);
                    }
                }
            }
        }
        // This process holds the files open to verify them; it is a holder only by its maps.
        let fds = if pid == std::process::id() { None } else { fs::read_dir(dir.join("fd")).ok() };
        for fd in fds.into_iter().flatten().flatten() {
            let Ok(link) = fs::read_link(fd.path()) else { continue };
            for (i, t) in targets.iter().enumerate() {
                if link == t.path {
                    hits.push((i, false));
                }
            }
        }
        if hits.is_empty() {
            continue;
        }
        let comm = fs::read_to_string(dir.join("comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default();
        for (i, is_mapped) in hits {
            let path = targets[i].path.clone();
            found
                .entry((pid, path.clone()))
                .and_modify(|h| h.mapped |= is_mapped)
                .or_insert_with(|| Holder { pid, comm: comm.clone(), path, mapped: is_mapped });
        }
    }
    Ok(Scan { holders: found.into_values().collect(), mapped })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Process `pid` named `comm` in the fake `/proc` at `proc_root`, with these `maps` and no
    /// open file yet (its directory is returned).
    fn fake_process(proc_root: &Path, pid: &str, comm: &str, maps: &str) -> PathBuf {
        let p = proc_root.join(pid);
        fs::create_dir_all(p.join("fd")).unwrap();
        fs::write(p.join("comm"), format!("{comm}\n")).unwrap();
        fs::write(p.join("maps"), maps).unwrap();
        p
    }

    /// A fake `/proc` with: pid 10 mapping the target, pid 11 holding it open, pid 12 (excluded)
    /// mapping it, pid 13 mapping another file, and a non-numeric entry.
    #[test]
    fn finds_mapping_and_open_holders_in_a_fake_proc() {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        let target = dir.path().join("lib.so");
        fs::write(&target, b"x").unwrap();
        let mk = |pid: &str, comm: &str, maps: &str| fake_process(&proc_root, pid, comm, maps);
        let map_line = format!("1000-2000 r--p 00000000 00:00 77 {}\n", target.display());
        mk("10", "mapper", &map_line);
        let p11 = mk("11", "opener", "");
        std::os::unix::fs::symlink(&target, p11.join("fd/3")).unwrap();
        mk("12", "excluded", &map_line);
        mk("13", "other", "1000-2000 r--p 00000000 00:00 78 /usr/lib/other.so\n");
        fs::create_dir_all(proc_root.join("self")).unwrap();

        let holders = find_holders_in(&proc_root, std::slice::from_ref(&target), &[12]).unwrap();
        assert_eq!(
            holders,
            vec![
                Holder { pid: 10, comm: "mapper".into(), path: target.clone(), mapped: true },
                Holder { pid: 11, comm: "opener".into(), path: target.clone(), mapped: false },
            ]
        );
    }

    #[test]
    fn matches_a_renamed_mapping_by_device_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        let target = dir.path().join("data");
        fs::write(&target, b"x").unwrap();
        let m = fs::metadata(&target).unwrap();
        let (maj, min) = (libc::major(m.dev()), libc::minor(m.dev()));
        let maps = format!(
            "1000-2000 r--p 00000000 {maj:02x}:{min:02x} {} /old/name (deleted)\n",
            m.ino()
        );
        fake_process(&proc_root, "20", "renamer", &maps);
        let holders = find_holders_in(&proc_root, std::slice::from_ref(&target), &[]).unwrap();
        assert_eq!(holders.len(), 1);
        assert_eq!(holders[0].pid, 20);
        assert!(holders[0].mapped);
    }

    #[test]
    fn collects_the_pages_other_processes_map() {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        let target = dir.path().join("data");
        fs::write(&target, vec![1u8; 8 * 4096]).unwrap();
        let other = dir.path().join("other");
        fs::write(&other, b"x").unwrap();
        let t = target.display();
        // Pages 0-1; page 5 (offset 0x5000); pages 2-4 by an excluded process; another file.
        fake_process(
            &proc_root,
            "10",
            "a",
            &format!("7f0000000000-7f0000002000 r--p 00000000 00:00 1 {t}\n"),
        );
        fake_process(
            &proc_root,
            "11",
            "b",
            &format!("7f0000010000-7f0000011000 r--p 00005000 00:00 1 {t}\n"),
        );
        fake_process(
            &proc_root,
            "12",
            "c",
            &format!("7f0000020000-7f0000023000 r--p 00002000 00:00 1 {t}\n"),
        );
        fake_process(
            &proc_root,
            "13",
            "d",
            &format!("7f0000030000-7f0000038000 r--p 00000000 00:00 2 {}\n", other.display()),
        );
        let found = scan(&proc_root, &[target.clone(), other.clone()], &[12]).unwrap();
        assert_eq!(found.mapped[0].ranges(), &[(0, 2), (5, 6)]);
        assert_eq!(found.mapped[1].ranges(), &[(0, 8)]);
        let pids: Vec<u32> = found.holders.iter().map(|h| h.pid).collect();
        assert_eq!(pids, [10, 11, 13]);
    }

    #[test]
    fn a_mapping_names_the_file_pages_it_covers() {
        let e = parse_line("7f0000001000-7f0000003800 r-xp 00003000 fd:01 9 /lib/x.so").unwrap();
        // 0x2800 bytes from page 3: pages 3 to 5 (the last one partly).
        assert_eq!(file_pages(&e), (3, 6));
        assert_eq!(file_id(&e), FileId::from_maps(0xfd, 1, 9));
    }
}
