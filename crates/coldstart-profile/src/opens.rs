//! The files a page run opens, named as they are opened, and the files it writes (fanotify).
//!
//! The page trace names a file by device and inode only, and a process's maps and open files
//! name only what it holds when they are read: an interpreter that opens, reads and closes
//! many small files (Python importing modules: hundreds of `.pyc` files) left most of them
//! unnamed. A fanotify group with `FAN_OPEN` marks on the file systems that have a page cache
//! (block devices, network and FUSE file systems, overlays) is told of every open as it
//! happens, with a descriptor of the file: its device and inode, and its path from
//! `/proc/self/fd`. It only listens (`FAN_CLASS_NOTIF`): the program never waits for it.
//!
//! The same descriptor says how much of the file is in the page cache when coldstart sees the
//! program's first open of it (`cachestat(2)`): more pages than the trace saw the run add
//! means pages were cached before the run, and a page read with `read(2)` from the cache
//! leaves no trace event, so those pages may be missing from the profile; the page run says
//! so.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A file by (major, minor, inode), as the page trace names it.
pub(crate) type Key = (u32, u32, u64);

/// What the opens of a run said.
#[derive(Debug, Default)]
pub(crate) struct Opened {
    /// A path of every file opened on a marked file system during the run, by any process.
    pub names: HashMap<Key, PathBuf>,
    /// Files the program's processes opened that had pages in the page cache when their
    /// first open in the run was seen, with how many (pages the program may have read by
    /// then included: compare with the pages the trace saw added).
    pub cached_at_open: Vec<(Key, PathBuf, u64)>,
    /// Every (process, file) pair of an open, by any process (the run's tree is known only
    /// afterwards, from the trace: a short-lived child is gone by the time its open is read).
    pub opens: HashSet<(i32, Key)>,
    /// Files written during the run, by any process.
    pub modified: HashSet<Key>,
    /// The kernel's queue of events overflowed: some opens were missed.
    pub overflowed: bool,
}

/// A running fanotify listener; [`Opens::finish`] stops it and returns what it saw.
pub(crate) struct Opens {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Opened>>,
}

impl Drop for Opens {
    /// A run that ends with an error stops the listener too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// File systems whose files have page-cache pages the filemap events report.
fn traced_file_system(fstype: &str, source: &str) -> bool {
    source.starts_with("/dev/")
        || fstype.starts_with("fuse")
        || ["overlay", "nfs", "nfs4", "9p", "virtiofs", "cifs", "smb3", "ceph", "erofs", "squashfs"]
            .contains(&fstype)
}

impl Opens {
    /// Start listening for opens on every file system with a page cache; `pgid` is the
    /// program's process group (whose first opens are checked against the page cache).
    /// `None` when fanotify is not available (not root, an old kernel).
    pub(crate) fn start(pgid: i32) -> Option<Opens> {
        let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_UNLIMITED_QUEUE;
        let event_flags = (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as u32;
        // SAFETY: fanotify_init with valid flags; the descriptor is owned below.
        let raw = unsafe { libc::fanotify_init(flags, event_flags) };
        if raw < 0 {
            return None;
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut marked = HashSet::new();
        for m in coldstart_process::mountinfo::read().unwrap_or_default() {
            if !traced_file_system(&m.fstype, &m.source) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(&m.point) else { continue };
            if !marked.insert(meta.dev()) {
                continue;
            }
            let Ok(c) = std::ffi::CString::new(m.point.into_os_string().into_vec()) else {
                continue;
            };
            for how in [libc::FAN_MARK_FILESYSTEM, libc::FAN_MARK_MOUNT] {
                // SAFETY: marking a path for open events on our fanotify descriptor.
                let r = unsafe {
                    libc::fanotify_mark(
                        fd.as_raw_fd(),
                        libc::FAN_MARK_ADD | how,
                        libc::FAN_OPEN | libc::FAN_MODIFY,
                        libc::AT_FDCWD,
                        c.as_ptr(),
                    )
                };
                if r == 0 {
                    break;
                }
            }
        }
        if marked.is_empty() {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        let thread = std::thread::Builder::new()
            .name("coldstart-opens".into())
            .spawn(move || listen(fd, pgid, &done))
            .ok()?;
        Some(Opens { stop, thread: Some(thread) })
    }

    /// Stop listening (after the events already queued are read).
    pub(crate) fn finish(mut self) -> Opened {
        self.stop.store(true, Ordering::Release);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

/// Read events until `stop`, then what is left.
fn listen(fd: OwnedFd, pgid: i32, stop: &AtomicBool) -> Opened {
    let mut opened = Opened::default();
    let mut first_seen: HashSet<Key> = HashSet::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let metadata_len = std::mem::size_of::<libc::fanotify_event_metadata>();
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: polling one descriptor we own.
        let ready = unsafe { libc::poll(&mut pfd, 1, if stopping { 0 } else { 20 }) };
        if ready <= 0 {
            if stopping {
                return opened;
            }
            continue;
        }
        // SAFETY: reading events into our buffer.
        let n = unsafe { libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
        if n <= 0 {
            continue;
        }
        let mut at = 0usize;
        while at + metadata_len <= n as usize {
            // SAFETY: the kernel wrote whole event records; read_unaligned copies one.
            let m: libc::fanotify_event_metadata =
                unsafe { std::ptr::read_unaligned(buffer.as_ptr().add(at).cast()) };
            if m.event_len < metadata_len as u32 || m.vers != libc::FANOTIFY_METADATA_VERSION {
                break;
            }
            at += m.event_len as usize;
            if m.mask & libc::FAN_Q_OVERFLOW != 0 {
                opened.overflowed = true;
            }
            if m.fd < 0 {
                continue;
            }
            // SAFETY: the event's descriptor is ours to close.
            let file = unsafe { OwnedFd::from_raw_fd(m.fd) };
            note(&mut opened, &mut first_seen, &file, m.pid, pgid, m.mask);
        }
    }
}

/// Name the file of one open event; check the page cache at the program's first open of it.
/// A write event only marks the file as written.
fn note(
    opened: &mut Opened,
    first_seen: &mut HashSet<Key>,
    file: &OwnedFd,
    pid: i32,
    pgid: i32,
    mask: u64,
) {
    let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    let Ok(meta) = std::fs::metadata(&proc_path) else { return };
    if !meta.is_file() {
        return;
    }
    let key = (libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino());
    if mask & libc::FAN_MODIFY != 0 {
        opened.modified.insert(key);
    }
    if mask & libc::FAN_OPEN == 0 {
        return;
    }
    // A file deleted since it was opened (a lock file, a database journal) keeps the name
    // the kernel gives it, `PATH (deleted)`: what it was.
    let Ok(path) = std::fs::read_link(&proc_path) else { return };
    opened.names.entry(key).or_insert_with(|| path.clone());
    opened.opens.insert((pid, key));
    // SAFETY: getpgid has no memory preconditions.
    if unsafe { libc::getpgid(pid) } != pgid || !first_seen.insert(key) {
        return;
    }
    if let Some(pages) = cached_pages(file).filter(|&p| p > 0) {
        opened.cached_at_open.push((key, path, pages));
    }
}

/// Pages of the file in the page cache now (`cachestat(2)`, Linux 6.5); `None` without it.
fn cached_pages(file: &OwnedFd) -> Option<u64> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off: 0, len: 0 };
    let mut stat = Stat::default();
    // SAFETY: cachestat reads one range and writes one struct of the documented layout.
    let r = unsafe {
        libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), &range as *const Range, &mut stat, 0)
    };
    (r == 0).then_some(stat.nr_cache)
}
