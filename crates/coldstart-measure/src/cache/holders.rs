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

use super::Holder;

/// One file to look for: its path and, when it can be stat'ed, its (major, minor, inode).
struct Target {
    path: PathBuf,
    id: Option<(u64, u64, u64)>,
}

impl Target {
    fn new(path: &Path) -> Target {
        let id = fs::metadata(path).ok().map(|m| {
            let dev = m.dev();
            (libc::major(dev) as u64, libc::minor(dev) as u64, m.ino())
        });
        Target { path: path.to_path_buf(), id }
    }
}

/// A parsed line of `/proc/PID/maps`: the device (major, minor), the inode and the path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MapsEntry<'a> {
    pub dev: (u64, u64),
    pub inode: u64,
    pub path: &'a str,
}

/// Parse one `/proc/PID/maps` line:
/// `7f1c2a000000-7f1c2a021000 r--p 00000000 fd:01 1835009   /usr/lib/libc.so.6`.
/// The device is `major:minor` in hex, the inode decimal, the path is the rest of the line
/// (it may contain spaces, and ends in ` (deleted)` for a deleted file). `None` for anonymous
/// mappings and malformed lines.
pub(crate) fn parse_maps_line(line: &str) -> Option<MapsEntry<'_>> {
    let mut rest = line;
    let mut fields = [""; 5];
    for field in &mut fields {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        *field = &rest[..end];
        rest = &rest[end..];
    }
    let path = rest.trim_start();
    let inode: u64 = fields[4].parse().ok()?;
    if inode == 0 || path.is_empty() {
        return None;
    }
    let (major, minor) = fields[3].split_once(':')?;
    let dev = (u64::from_str_radix(major, 16).ok()?, u64::from_str_radix(minor, 16).ok()?);
    Some(MapsEntry { dev, inode, path })
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
    let targets: Vec<Target> = paths.iter().map(|p| Target::new(p)).collect();
    let mut found: BTreeMap<(u32, PathBuf), Holder> = BTreeMap::new();
    if targets.is_empty() {
        return Ok(Vec::new());
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
            for entry in maps.lines().filter_map(parse_maps_line) {
                let shown = entry.path.strip_suffix(" (deleted)").unwrap_or(entry.path);
                for (i, t) in targets.iter().enumerate() {
                    let same_id = t.id == Some((entry.dev.0, entry.dev.1, entry.inode));
                    if same_id || Path::new(shown) == t.path {
                        hits.push((i, true));
                    }
                }
            }
        }
        if let Ok(fds) = fs::read_dir(dir.join("fd")) {
            for fd in fds.flatten() {
                let Ok(link) = fs::read_link(fd.path()) else { continue };
                for (i, t) in targets.iter().enumerate() {
                    if link == t.path {
                        hits.push((i, false));
                    }
                }
            }
        }
        if hits.is_empty() {
            continue;
        }
        let comm = fs::read_to_string(dir.join("comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default();
        for (i, mapped) in hits {
            let path = targets[i].path.clone();
            found
                .entry((pid, path.clone()))
                .and_modify(|h| h.mapped |= mapped)
                .or_insert_with(|| Holder { pid, comm: comm.clone(), path, mapped });
        }
    }
    Ok(found.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_file_mapping() {
        let line = "7f1c2a000000-7f1c2a021000 r--p 00000000 fd:01 1835009                    /usr/lib/x86_64-linux-gnu/libc.so.6";
        assert_eq!(
            parse_maps_line(line),
            Some(MapsEntry {
                dev: (0xfd, 1),
                inode: 1835009,
                path: "/usr/lib/x86_64-linux-gnu/libc.so.6"
            })
        );
    }

    #[test]
    fn keeps_spaces_and_deleted_suffix_in_the_path() {
        let line = "00400000-00401000 r-xp 00001000 103:0a 42   /opt/my app/bin (deleted)";
        let e = parse_maps_line(line).unwrap();
        assert_eq!(e.dev, (0x103, 0x0a));
        assert_eq!(e.path, "/opt/my app/bin (deleted)");
    }

    #[test]
    fn skips_anonymous_and_pseudo_mappings() {
        assert_eq!(parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0   [stack]"), None);
        assert_eq!(parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0"), None);
        assert_eq!(parse_maps_line("garbage"), None);
    }

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
}
