//! Naming the files the trace knows by device and inode: every open on the machine's file
//! systems with a page cache, as it happens (fanotify, notification only: nothing waits for
//! it), and what the program's processes map or hold open while it runs.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

type Key = (u32, u32, u64);

fn key(meta: &std::fs::Metadata) -> Key {
    (libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino())
}

/// A running listener; [`Names::finish`] stops it.
pub(crate) struct Names {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<HashMap<Key, String>>>,
}

impl Drop for Names {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Names {
    /// Listen for opens on every mounted file system backed by a device (and FUSE); `None`
    /// when fanotify is not available.
    pub(crate) fn start() -> Option<Names> {
        let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_UNLIMITED_QUEUE;
        let event_flags = (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as u32;
        // SAFETY: fanotify_init with valid flags; the descriptor is owned below.
        let raw = unsafe { libc::fanotify_init(flags, event_flags) };
        if raw < 0 {
            return None;
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut marked = 0;
        for m in coldstart_process::mountinfo::read().unwrap_or_default() {
            if !(m.on_block_device() || m.fstype.starts_with("fuse") || m.fstype == "overlay") {
                continue;
            }
            let Ok(c) = std::ffi::CString::new(m.point.into_os_string().into_vec()) else {
                continue;
            };
            // SAFETY: a valid descriptor and NUL-terminated path.
            let r = unsafe {
                libc::fanotify_mark(
                    fd.as_raw_fd(),
                    libc::FAN_MARK_ADD | libc::FAN_MARK_MOUNT,
                    libc::FAN_OPEN,
                    libc::AT_FDCWD,
                    c.as_ptr(),
                )
            };
            if r == 0 {
                marked += 1;
            }
        }
        if marked == 0 {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("coldstart-timeline-names".into())
            .spawn(move || listen(fd, &s))
            .ok()?;
        Some(Names { stop, thread: Some(thread) })
    }

    /// Stop listening (after the events already queued) and return the names.
    pub(crate) fn finish(mut self) -> HashMap<Key, String> {
        self.stop.store(true, Ordering::Release);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

fn listen(fd: OwnedFd, stop: &AtomicBool) -> HashMap<Key, String> {
    let mut names = HashMap::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, 20) };
        if ready <= 0 {
            if stop.load(Ordering::Acquire) {
                return names;
            }
            continue;
        }
        // SAFETY: reading into our buffer.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            continue;
        }
        let mut off = 0usize;
        let size = std::mem::size_of::<libc::fanotify_event_metadata>();
        while off + size <= n as usize {
            // SAFETY: the kernel wrote whole event records; read one unaligned.
            let m: libc::fanotify_event_metadata =
                unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
            if m.event_len < size as u32 {
                break;
            }
            off += m.event_len as usize;
            if m.fd < 0 {
                continue;
            }
            // SAFETY: the event's descriptor is ours to close.
            let file = unsafe { OwnedFd::from_raw_fd(m.fd) };
            let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
            if let (Ok(meta), Ok(path)) =
                (std::fs::metadata(&proc_path), std::fs::read_link(&proc_path))
            {
                if meta.is_file() {
                    names.entry(key(&meta)).or_insert_with(|| path.display().to_string());
                }
            }
        }
    }
}

/// Add the files the processes of group `pgid` map now.
pub(crate) fn snapshot(pgid: i32, into: &mut HashMap<Key, String>) {
    for pid in coldstart_process::maps::group_members(pgid) {
        for (key, path) in coldstart_process::maps::mapped_files(pid) {
            into.entry(key).or_insert_with(|| path.to_string_lossy().into_owned());
        }
    }
}
