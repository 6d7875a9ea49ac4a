//! Files that live in memory, not on storage.
//!
//! Such a file has no page cache in the sense the stages care about: its pages cannot be
//! evicted (a cold start never reads them from a disk), copying it onto emulated storage would
//! make it slower than it is, and reading it ahead is pointless. Two kinds:
//!
//! - memory-backed file systems, whose pages are the only copy of the data (tmpfs, which is
//!   also `/dev/shm` and `memfd`s; ramfs; hugetlbfs);
//! - kernel pseudo file systems, whose files are made when read (proc, sysfs, devpts,
//!   cgroup and cgroup2, tracefs, debugfs).
//!
//! The list is the union of what `measure` (eviction), `profile` (the exact page run's copy)
//! and `demo` (its working directory) each knew: every one of those file systems is wrong to
//! evict, to copy and to hold a demo's cold start, so one list serves all three.

use std::path::Path;

/// `statfs(2)` `f_type` of each file system whose files are memory, with its name.
const MEMORY_FILE_SYSTEMS: [(i64, &str); 10] = [
    (0x0102_1994, "tmpfs"),
    (0x8584_58f6, "ramfs"),
    (0x9584_58f6, "hugetlbfs"),
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x1cd1, "devpts"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x7472_6163, "tracefs"),
    (0x6462_6720, "debugfs"),
];

/// The name of the memory file system `path` is on (`tmpfs`, `proc`...), `None` when it is
/// on storage; an error when `statfs(2)` fails (the path does not exist, say).
pub fn memory_file_system(path: &Path) -> nix::Result<Option<&'static str>> {
    let kind = nix::sys::statfs::statfs(path)?.filesystem_type().0 as i64;
    Ok(MEMORY_FILE_SYSTEMS.iter().find(|(magic, _)| *magic == kind).map(|(_, name)| *name))
}

/// The device of the kernel's internal shared-memory file system, which backs `memfd`s,
/// System V shared memory and shared anonymous mappings: their pages have `filemap` trace
/// events too (a browser's shared memory), but they are memory, not files a program starts
/// from. `None` when a `memfd` cannot be made.
pub fn shared_memory_device() -> Option<(u32, u32)> {
    let fd =
        nix::sys::memfd::memfd_create(c"coldstart-probe", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .ok()?;
    let dev = nix::sys::stat::fstat(&fd).ok()?.st_dev;
    Some((libc::major(dev), libc::minor(dev)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_and_shared_memory_are_memory_and_the_root_is_not() {
        assert_eq!(memory_file_system(Path::new("/proc/self")), Ok(Some("proc")));
        if Path::new("/dev/shm").is_dir() {
            assert_eq!(memory_file_system(Path::new("/dev/shm")), Ok(Some("tmpfs")));
        }
        assert_eq!(memory_file_system(Path::new(env!("CARGO_MANIFEST_DIR"))).ok(), Some(None));
        assert!(memory_file_system(Path::new("/nonexistent/coldstart")).is_err());
    }

    #[test]
    fn a_memfd_is_on_the_shared_memory_device() {
        let dev = shared_memory_device().unwrap();
        let fd = nix::sys::memfd::memfd_create(c"t", nix::sys::memfd::MFdFlags::empty()).unwrap();
        let st = nix::sys::stat::fstat(&fd).unwrap();
        assert_eq!(dev, (libc::major(st.st_dev), libc::minor(st.st_dev)));
    }
}
