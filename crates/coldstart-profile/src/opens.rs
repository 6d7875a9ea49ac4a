//! The files a page run opens, named as they are opened, and the files it writes (fanotify).
//!
//! The page trace names a file by device and inode only, and a process's maps and open files
//! name only what it holds when they are read: an interpreter that opens, reads and closes
//! many small files (Python importing modules: hundreds of `.pyc` files) left most of them
//! unnamed. A notifying [`OpenWatch`] on the file systems that have a page cache is told of
//! every open and write as it happens, with a descriptor of the file: its device and inode,
//! and its path. It only listens: the program never waits for it.
//!
//! The same descriptor says how much of the file is in the page cache when coldstart sees the
//! program's first open of it (`cachestat(2)`): more pages than the trace saw the run add
//! means pages were cached before the run, and a page read with `read(2)` from the cache
//! leaves no trace event, so those pages may be missing from the profile; the page run says
//! so.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use coldstart_process::fanotify::{self, Event, OpenWatch};

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

impl Opens {
    /// Start listening for opens on every file system with a page cache; `pgid` is the
    /// program's process group (whose first opens are checked against the page cache).
    /// `None` when fanotify is not available (not root, an old kernel).
    pub(crate) fn start(pgid: i32) -> Option<Opens> {
        let watch = OpenWatch::notify(fanotify::has_page_cache, true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        let thread = std::thread::Builder::new()
            .name("coldstart-opens".into())
            .spawn(move || listen(&watch, pgid, &done))
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
fn listen(watch: &OpenWatch, pgid: i32, stop: &AtomicBool) -> Opened {
    let mut opened = Opened::default();
    let mut first_seen: HashSet<Key> = HashSet::new();
    // Once stopped, what is queued is read for at most this long: on a busy machine opens
    // never pause, and waiting for a quiet moment kept the end of a run (and of a signal)
    // waiting.
    const DRAIN: Duration = Duration::from_millis(100);
    let mut stopped: Option<std::time::Instant> = None;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let events = watch.read(if stopping { Duration::ZERO } else { Duration::from_millis(20) });
        if stopping {
            let since = *stopped.get_or_insert_with(std::time::Instant::now);
            if events.is_empty() || since.elapsed() >= DRAIN {
                for event in &events {
                    opened.overflowed |= event.overflowed;
                    note(&mut opened, &mut first_seen, event, pgid);
                }
                return opened;
            }
        }
        for event in &events {
            opened.overflowed |= event.overflowed;
            note(&mut opened, &mut first_seen, event, pgid);
        }
    }
}

/// Name the file of one open event; check the page cache at the program's first open of it.
/// A write event only marks the file as written.
fn note(opened: &mut Opened, first_seen: &mut HashSet<Key>, event: &Event, pgid: i32) {
    // A file deleted since it was opened (a lock file, a database journal) keeps the name
    // the kernel gives it, `PATH (deleted)`: what it was.
    let Some((key, path)) = event.regular_file() else { return };
    if event.modified {
        opened.modified.insert(key);
    }
    if !event.opened {
        return;
    }
    opened.names.entry(key).or_insert_with(|| path.clone());
    opened.opens.insert((event.pid, key));
    let in_group = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(event.pid)))
        .is_ok_and(|g| g.as_raw() == pgid);
    if !in_group || !first_seen.insert(key) {
        return;
    }
    if let Some(pages) = event.file.as_ref().and_then(cached_pages).filter(|&p| p > 0) {
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
