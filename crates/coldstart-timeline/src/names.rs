//! Naming the files the trace knows by device and inode: every open on the machine's file
//! systems with a page cache, as it happens (fanotify, notification only: nothing waits for
//! it), and what the program's processes map while it runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use coldstart_process::fanotify::{self, OpenWatch};

type Key = coldstart_process::FileKey;

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
    /// Listen for opens on every mounted file system with a page cache; `None` when fanotify
    /// is not available.
    pub(crate) fn start() -> Option<Names> {
        let watch = OpenWatch::notify(fanotify::has_page_cache, false)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("coldstart-timeline-names".into())
            .spawn(move || listen(&watch, &s))
            .ok()?;
        Some(Names { stop, thread: Some(thread) })
    }

    /// Stop listening (after the events already queued) and return the names.
    pub(crate) fn finish(mut self) -> HashMap<Key, String> {
        self.stop.store(true, Ordering::Release);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

fn listen(watch: &OpenWatch, stop: &AtomicBool) -> HashMap<Key, String> {
    let mut names = HashMap::new();
    // Once stopped, what is queued is read for at most this long: on a busy machine opens
    // never pause, and waiting for a quiet moment kept the end of a run (and of a signal)
    // waiting.
    const DRAIN: Duration = Duration::from_millis(100);
    let mut stopped: Option<std::time::Instant> = None;
    loop {
        let events = watch.read(Duration::from_millis(20));
        for (key, path) in events.iter().filter_map(|e| e.regular_file()) {
            names.entry(key).or_insert_with(|| path.display().to_string());
        }
        if stop.load(Ordering::Acquire) {
            let since = *stopped.get_or_insert_with(std::time::Instant::now);
            if events.is_empty() || since.elapsed() >= DRAIN {
                return names;
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
