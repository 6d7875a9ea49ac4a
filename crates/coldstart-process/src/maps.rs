//! The files a running program uses, read from `/proc`: what each process maps
//! (`/proc/PID/maps`) and holds open (`/proc/PID/fd`), and which processes a group holds.
//!
//! A snapshot names only what a process holds when it is read: a file opened, read and
//! closed in between is missed (the fanotify watchers name those), and a process that exits
//! takes its maps with it. Processes that exit while they are read, or whose files this
//! process may not read, are passed over.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::FileKey;

/// One file mapping of `/proc/PID/maps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping<'a> {
    /// First address of the mapping.
    pub start: u64,
    /// The address just past the mapping.
    pub end: u64,
    /// Offset in the file of `start`, bytes.
    pub offset: u64,
    /// `(major, minor)` of the file's device.
    pub dev: (u32, u32),
    /// The file's inode.
    pub inode: u64,
    /// The file's path as the kernel shows it: it may hold spaces, and ends in ` (deleted)`
    /// for a file deleted since it was mapped.
    pub path: &'a str,
}

impl Mapping<'_> {
    /// The file mapped, as page events name it.
    pub fn key(&self) -> FileKey {
        (self.dev.0, self.dev.1, self.inode)
    }
}

/// Parse one line of `/proc/PID/maps`:
/// `7f1c2a000000-7f1c2a021000 r--p 00000000 fd:01 1835009   /usr/lib/libc.so.6`.
/// The device is `major:minor` in hex, the inode decimal, the path the rest of the line after
/// the padding. `None` for anonymous and pseudo mappings (`[stack]`, inode 0) and malformed
/// lines.
pub fn parse_line(line: &str) -> Option<Mapping<'_>> {
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
    let dev = (u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?);
    let (start, end) = fields[0].split_once('-')?;
    let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
    let offset = u64::from_str_radix(fields[2], 16).ok()?;
    Some(Mapping { start, end, offset, dev, inode, path })
}

/// The processes whose process group is `pgid`, now.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let pgid_of = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid)));
            pgid_of.is_ok_and(|g| g.as_raw() == pgid)
        })
        .collect()
}

/// The files process `pid` maps, by key, each with the path of its first mapping that has
/// an absolute path. Empty when the process is gone.
pub fn mapped_files(pid: i32) -> Vec<(FileKey, PathBuf)> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let mut out: Vec<(FileKey, PathBuf)> = Vec::new();
    for m in maps.lines().filter_map(parse_line).filter(|m| m.path.starts_with('/')) {
        if !out.iter().any(|(k, _)| *k == m.key()) {
            out.push((m.key(), PathBuf::from(m.path)));
        }
    }
    out
}

/// The regular files process `pid` holds open, by key, with their paths.
///
/// Each descriptor is opened again with `O_PATH` (no open for I/O: nothing the file's owner
/// sees), so that its key and its path are of one file even if the process closes the
/// descriptor and opens another meanwhile.
pub fn open_files(pid: i32) -> Vec<(FileKey, PathBuf)> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    let mut out = Vec::new();
    for fd in fds.flatten() {
        let Ok(file) =
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open(fd.path())
        else {
            continue;
        };
        let own = format!("/proc/self/fd/{}", file.as_raw_fd());
        if let (Ok(target), Ok(meta)) = (std::fs::read_link(&own), file.metadata()) {
            if meta.is_file() {
                out.push(((libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino()), target));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_mapping_gives_every_field() {
        let line = "7f1c2a000000-7f1c2a021000 r--p 00003000 fd:01 1835009                    /usr/lib/x86_64-linux-gnu/libc.so.6";
        assert_eq!(
            parse_line(line),
            Some(Mapping {
                start: 0x7f1c2a000000,
                end: 0x7f1c2a021000,
                offset: 0x3000,
                dev: (0xfd, 1),
                inode: 1835009,
                path: "/usr/lib/x86_64-linux-gnu/libc.so.6"
            })
        );
        assert_eq!(parse_line(line).unwrap().key(), (0xfd, 1, 1835009));
    }

    #[test]
    fn spaces_and_the_deleted_suffix_stay_in_the_path() {
        let e = parse_line("00400000-00401000 r-xp 00001000 103:0a 42   /opt/my app/bin (deleted)")
            .unwrap();
        assert_eq!(e.dev, (0x103, 0x0a));
        assert_eq!(e.path, "/opt/my app/bin (deleted)");
    }

    #[test]
    fn anonymous_and_pseudo_mappings_are_not_files() {
        assert_eq!(parse_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0   [stack]"), None);
        assert_eq!(parse_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0"), None);
        assert_eq!(parse_line("garbage"), None);
    }

    #[test]
    fn this_process_maps_its_executable_and_holds_its_open_files() {
        let pid = std::process::id() as i32;
        let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
        let meta = std::fs::metadata(&exe).unwrap();
        let key = (libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino());
        assert!(mapped_files(pid).contains(&(key, exe.clone())), "{:?}", mapped_files(pid));
        let file = tempfile::NamedTempFile::new().unwrap();
        let meta = file.as_file().metadata().unwrap();
        let key = (libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino());
        assert!(open_files(pid).contains(&(key, file.path().to_owned())));
        assert!(mapped_files(-1).is_empty() && open_files(-1).is_empty());
    }

    #[test]
    fn a_group_holds_its_members() {
        let me = std::process::id() as i32;
        let pgid = nix::unistd::getpgrp().as_raw();
        assert!(group_members(pgid).contains(&me));
        assert!(group_members(-5).is_empty());
    }
}
