//! Being told of every open on the machine's file systems with a page cache (fanotify(7)),
//! with a descriptor of the file opened: its device and inode, and its path from
//! `/proc/self/fd`.
//!
//! The trace of a start-up names files by device and inode, and a snapshot of a process's maps
//! names only what it holds when read: an interpreter that opens, reads and closes hundreds
//! of modules leaves them unnamed. A watch marks the file systems its caller chooses (every one
//! with a page cache, [`has_page_cache`], or those on a block device,
//! [`Mount::on_block_device`]) once each, as a whole file system where the kernel allows
//! (opens through every mount of it, bind mounts in another namespace included), else as a
//! mount.
//!
//! Two kinds, as the kernel has them:
//!
//! - [`OpenWatch::notify`]: notification only (`FAN_CLASS_NOTIF`, an unlimited queue): the
//!   program never waits for the watcher;
//! - [`OpenWatch::permission`]: permission events (`FAN_CLASS_CONTENT`): the kernel holds
//!   each open until the watcher answers, so no open can be missed while the queue is read;
//!   the watch answers "allow" as soon as it has read an event.
//!
//! Both need `CAP_SYS_ADMIN`: without it (or on a kernel without fanotify) there is no
//! watch, and the stages name files from snapshots alone.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use crate::mountinfo::Mount;
use crate::FileKey;

/// File systems whose files have page-cache pages that start-up reads from storage: a
/// block device's, a FUSE file system's, an overlay's, and the network and compressed
/// read-only file systems that have no device of their own.
pub fn has_page_cache(mount: &Mount) -> bool {
    mount.on_block_device()
        || mount.fstype.starts_with("fuse")
        || ["overlay", "nfs", "nfs4", "9p", "virtiofs", "cifs", "smb3", "ceph", "erofs", "squashfs"]
            .contains(&mount.fstype.as_str())
}

/// One event: a process opened (or wrote) a file, or the queue overflowed.
#[derive(Debug)]
pub struct Event {
    /// The process that opened the file.
    pub pid: i32,
    /// An open (`FAN_OPEN`, or an open permission event).
    pub opened: bool,
    /// A write (`FAN_MODIFY`).
    pub modified: bool,
    /// The kernel's queue overflowed: events were lost before this one.
    pub overflowed: bool,
    /// The file, open for reading, closed when the event drops; `None` on an overflow.
    pub file: Option<OwnedFd>,
}

impl Event {
    /// The file's key and path, when it is a regular file. A file deleted since it was
    /// opened keeps the name the kernel gives it, `PATH (deleted)`.
    pub fn regular_file(&self) -> Option<(FileKey, PathBuf)> {
        let link = format!("/proc/self/fd/{}", self.file.as_ref()?.as_raw_fd());
        let meta = std::fs::metadata(&link).ok().filter(|m| m.is_file())?;
        let path = std::fs::read_link(&link).ok()?;
        Some(((libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino()), path))
    }
}

/// How a file system was marked.
#[derive(Clone, Copy)]
enum Mark {
    /// As a whole: opens through any of its mounts.
    FileSystem,
    /// At one mount point.
    Mount,
}

/// A fanotify group with the file systems its caller chose marked.
pub struct OpenWatch {
    fd: OwnedFd,
    permission: bool,
}

impl OpenWatch {
    /// Notification of opens, and of writes with `writes`, on the file systems `watched`
    /// chooses: `None` when fanotify is not available or no file system could be marked.
    pub fn notify(watched: impl Fn(&Mount) -> bool, writes: bool) -> Option<OpenWatch> {
        let init = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_UNLIMITED_QUEUE;
        let events = libc::FAN_OPEN | if writes { libc::FAN_MODIFY } else { 0 };
        OpenWatch::start(init, events, false, watched)
    }

    /// Open permission events (each open held until the watch answers; it allows every one)
    /// on the file systems `watched` chooses: `None` when fanotify is not available or no
    /// file system could be marked.
    pub fn permission(watched: impl Fn(&Mount) -> bool) -> Option<OpenWatch> {
        let init = libc::FAN_CLASS_CONTENT | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK;
        OpenWatch::start(init, libc::FAN_OPEN_PERM | libc::FAN_OPEN_EXEC_PERM, true, watched)
    }

    fn start(
        init: u32,
        events: u64,
        permission: bool,
        watched: impl Fn(&Mount) -> bool,
    ) -> Option<OpenWatch> {
        let event_flags = (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as u32;
        // SAFETY: fanotify_init with valid flags returns a new descriptor or -1.
        let raw = unsafe { libc::fanotify_init(init, event_flags) };
        if raw < 0 {
            return None;
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let watch = OpenWatch { fd: unsafe { OwnedFd::from_raw_fd(raw) }, permission };
        let mounts = crate::mountinfo::read().unwrap_or_default();
        // A file system marked whole is marked once; one the kernel marks only mount by
        // mount (FUSE without a file system id) is marked at each of its mounts.
        let mut whole = Vec::new();
        let mut marked = 0;
        for m in mounts.iter().filter(|m| watched(m)) {
            if whole.contains(&m.dev) {
                continue;
            }
            match watch.mark(m, events) {
                Some(Mark::FileSystem) => whole.push(m.dev),
                Some(Mark::Mount) => {}
                None => continue,
            }
            marked += 1;
        }
        (marked > 0).then_some(watch)
    }

    /// Mark the file system of `mount` as a whole, else the mount alone.
    fn mark(&self, mount: &Mount, events: u64) -> Option<Mark> {
        let point = CString::new(mount.point.as_os_str().as_bytes()).ok()?;
        [(libc::FAN_MARK_FILESYSTEM, Mark::FileSystem), (libc::FAN_MARK_MOUNT, Mark::Mount)]
            .into_iter()
            .find(|(how, _)| {
                // SAFETY: our descriptor and a NUL-terminated path.
                let r = unsafe {
                    libc::fanotify_mark(
                        self.fd.as_raw_fd(),
                        libc::FAN_MARK_ADD | how,
                        events,
                        libc::AT_FDCWD,
                        point.as_ptr(),
                    )
                };
                r == 0
            })
            .map(|(_, mark)| mark)
    }

    /// The events queued, waiting up to `timeout` for the first (none when it passes).
    /// Permission events are allowed before they are returned.
    pub fn read(&self, timeout: Duration) -> Vec<Event> {
        let fd = self.fd.as_fd();
        let mut pfd = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
        let timeout =
            nix::poll::PollTimeout::try_from(timeout).unwrap_or(nix::poll::PollTimeout::MAX);
        if !matches!(nix::poll::poll(&mut pfd, timeout), Ok(1..)) {
            return Vec::new();
        }
        let mut buffer = vec![0u8; 64 * 1024];
        let Ok(n) = nix::unistd::read(fd, &mut buffer) else { return Vec::new() };
        let metadata_len = std::mem::size_of::<libc::fanotify_event_metadata>();
        let mut events = Vec::new();
        let mut at = 0;
        while at + metadata_len <= n {
            // SAFETY: the kernel wrote whole event records; read_unaligned copies one.
            let m: libc::fanotify_event_metadata =
                unsafe { std::ptr::read_unaligned(buffer.as_ptr().add(at).cast()) };
            if (m.event_len as usize) < metadata_len || m.vers != libc::FANOTIFY_METADATA_VERSION {
                break;
            }
            at += m.event_len as usize;
            // SAFETY: the event's descriptor is ours to close (none on an overflow).
            let file = (m.fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(m.fd) });
            if let (true, Some(file)) = (self.permission, &file) {
                self.allow(file);
            }
            let opened = libc::FAN_OPEN | libc::FAN_OPEN_PERM | libc::FAN_OPEN_EXEC_PERM;
            events.push(Event {
                pid: m.pid,
                opened: m.mask & opened != 0,
                modified: m.mask & libc::FAN_MODIFY != 0,
                overflowed: m.mask & libc::FAN_Q_OVERFLOW != 0,
                file,
            });
        }
        events
    }

    /// Answer a permission event: the open goes on.
    fn allow(&self, file: &OwnedFd) {
        let response = libc::fanotify_response { fd: file.as_raw_fd(), response: libc::FAN_ALLOW };
        // SAFETY: the struct is plain data of the size the kernel expects.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&response as *const libc::fanotify_response).cast::<u8>(),
                std::mem::size_of::<libc::fanotify_response>(),
            )
        };
        let _ = nix::unistd::write(&self.fd, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn mount(fstype: &str, source: &str) -> Mount {
        Mount {
            id: 1,
            parent: 0,
            dev: (8, 1),
            root: "/".into(),
            point: "/mnt".into(),
            fstype: fstype.into(),
            source: source.into(),
            super_options: String::new(),
        }
    }

    /// Whether the test may run: fanotify needs root. Where the suite must run whole
    /// (`COLDSTART_TESTS_NO_SKIP`), not being root fails.
    fn root() -> bool {
        let root = nix::unistd::geteuid().is_root();
        if !root && std::env::var_os("COLDSTART_TESTS_NO_SKIP").is_some() {
            panic!("fanotify needs root");
        }
        root
    }

    /// The events of `watch` until `enough` holds for them or two seconds pass.
    fn events_until(watch: &OpenWatch, enough: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let mut events = Vec::new();
        while !enough(&events) && std::time::Instant::now() < deadline {
            events.extend(watch.read(Duration::from_millis(20)));
        }
        events
    }

    /// A file on a disk (`/var/tmp`: not tmpfs, which has no page cache to watch).
    fn file_on_disk() -> (tempfile::TempDir, PathBuf, FileKey) {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("watched");
        std::fs::write(&path, b"x").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        (dir, path, (libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino()))
    }

    #[test]
    fn an_open_and_a_write_are_told_with_the_file_and_the_process() {
        if !root() {
            return;
        }
        let (_dir, path, key) = file_on_disk();
        let watch = OpenWatch::notify(has_page_cache, true).expect("fanotify as root");
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"y").unwrap();
        let me = std::process::id() as i32;
        let mine = |e: &Event| e.pid == me && e.regular_file().is_some_and(|(k, _)| k == key);
        let events = events_until(&watch, |events| {
            events.iter().any(|e| mine(e) && e.opened)
                && events.iter().any(|e| mine(e) && e.modified)
        });
        let open = events.iter().find(|e| mine(e) && e.opened).expect("the open is told");
        assert_eq!(open.regular_file(), Some((key, path.canonicalize().unwrap())));
        assert!(events.iter().any(|e| mine(e) && e.modified), "the write is told");
    }

    #[test]
    fn a_held_open_goes_on_once_the_watch_has_read_it() {
        if !root() {
            return;
        }
        let (_dir, path, key) = file_on_disk();
        let watch = OpenWatch::permission(Mount::on_block_device).expect("fanotify as root");
        let opener = std::thread::spawn(move || std::fs::read(&path).unwrap());
        let ours = |e: &Event| e.opened && e.regular_file().is_some_and(|(k, _)| k == key);
        let events = events_until(&watch, |events| events.iter().any(ours));
        assert!(events.iter().any(ours), "the open is told");
        assert_eq!(opener.join().unwrap(), b"x", "and allowed");
    }

    #[test]
    fn file_systems_with_storage_behind_them_are_watched() {
        assert!(has_page_cache(&mount("ext4", "/dev/vda1")));
        assert!(has_page_cache(&mount("fuse.coldstart", "coldstart")));
        assert!(has_page_cache(&mount("overlay", "overlay")));
        assert!(has_page_cache(&mount("nfs4", "server:/export")));
        assert!(!has_page_cache(&mount("tmpfs", "tmpfs")));
        assert!(!has_page_cache(&mount("proc", "proc")));
    }
}
