//! The files a run's tree reads, for `warm` and `selective` ([`RunSpec::discover_files`]).
//!
//! Two methods, described with their limits in the [`launch`](super) module docs: fanotify
//! permission events (root), and samples of `/proc/PID/maps` and `/proc/PID/fd` of every live
//! member during the run and at readiness.
//!
//! The samples also record which pages of the files *other* processes map the tree has in
//! its page tables (`/proc/PID/pagemap`, the present bit): those files' pages may stay cached
//! in a cold state, held by the other processes, and these are the ones start-up would have
//! read. Which files other processes map is read from `/proc/*/maps` once, when the run
//! starts; only their mappings are sampled, which keeps a sample cheap (a large program's own
//! libraries are mapped by nobody else).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coldstart_process::fanotify::OpenWatch;
use coldstart_process::maps::{parse_line, Mapping};
use coldstart_process::mountinfo::Mount;

#[cfg(doc)]
use super::RunSpec;
use crate::cache::pages::{FileId, PageSet, TouchedPages};
use crate::cache::{file_id, file_pages};
use crate::cgroup::RunCgroup;

/// The files a discovery run collects: fanotify's, and the samples of the tree's maps and open
/// files; and the pages of files other processes map that the tree has in its page tables.
pub(super) struct Discovery {
    fanotify: Fanotify,
    sampled: BTreeSet<PathBuf>,
    /// Files mapped by processes other than the tree when the run started.
    shared: HashSet<FileId>,
    /// Files this process held open when the run started: what the tree inherits on a
    /// descriptor without close-on-exec (a CI runner's lock file, a redirected output), never
    /// what start-up reads.
    inherited: HashSet<PathBuf>,
    touched: HashMap<FileId, PageSet>,
}

impl Discovery {
    /// Start watching, before `fork` (so the marks are in place when the tree starts).
    pub(super) fn start(cgroup: Option<&RunCgroup>) -> Discovery {
        Discovery {
            fanotify: Fanotify::start(cgroup.map(|c| c.name().to_string())),
            sampled: BTreeSet::new(),
            shared: files_mapped_by_any_process(),
            inherited: open_files(std::process::id()),
            touched: HashMap::new(),
        }
    }

    /// Sample the files of the live members of the tree of `root`.
    pub(super) fn sample_tree(&mut self, cgroup: Option<&RunCgroup>, root: libc::pid_t) {
        self.sample(&tree_members(cgroup, root));
    }

    /// Sample the files of `pids`.
    pub(super) fn sample(&mut self, pids: &[u32]) {
        for &pid in pids {
            let seen = Seen { shared: &self.shared, inherited: &self.inherited };
            sample_process(pid, &mut self.sampled, seen, &mut self.touched);
        }
    }

    /// Stop watching (after the tree was killed): the regular files found, sorted and without
    /// duplicates, and the pages of files other processes map that the tree used.
    pub(super) fn finish(self) -> (Vec<PathBuf>, TouchedPages) {
        let mut files: Vec<PathBuf> = self.sampled.into_iter().collect();
        files.extend(self.fanotify.finish());
        files.retain(|f| f.is_absolute() && fs::metadata(f).map(|m| m.is_file()).unwrap_or(false));
        files.sort();
        files.dedup();
        let mut touched = TouchedPages::new();
        for (id, pages) in &self.touched {
            touched.add(*id, pages);
        }
        (files, touched)
    }
}

/// Every file some live process maps (this one included), by device and inode. Processes
/// whose maps this user may not read are left out.
fn files_mapped_by_any_process() -> HashSet<FileId> {
    let mut out = HashSet::new();
    let Ok(dir) = fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        if !entry.file_name().to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let Ok(maps) = fs::read_to_string(entry.path().join("maps")) else { continue };
        out.extend(maps.lines().filter_map(parse_line).map(|e| file_id(&e)));
    }
    out
}

/// The files process `pid` holds open, by the paths of its descriptors.
fn open_files(pid: u32) -> HashSet<PathBuf> {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else { return HashSet::new() };
    fds.flatten()
        .filter_map(|fd| fs::read_link(fd.path()).ok())
        .filter(|t| t.is_absolute())
        .collect()
}

/// What a sample is told of the world outside the tree.
#[derive(Clone, Copy)]
struct Seen<'a> {
    /// Files other processes map: their pages the tree has in its page tables are recorded.
    shared: &'a HashSet<FileId>,
    /// Files the tree holds only because it inherited their descriptors: left out.
    inherited: &'a HashSet<PathBuf>,
}

/// How often a discovery run samples the maps and open files of the tree.
pub(super) const DISCOVERY_SAMPLE_INTERVAL: Duration = Duration::from_micros(200);

/// The live members of the run's tree: the cgroup's, or without one the root and its
/// descendants (`/proc/PID/task/TID/children`).
fn tree_members(cgroup: Option<&RunCgroup>, root: libc::pid_t) -> Vec<u32> {
    if let Some(cg) = cgroup {
        return cg.pids();
    }
    let mut out = vec![root as u32];
    let mut i = 0;
    while i < out.len() {
        let pid = out[i];
        if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.flatten() {
                if let Ok(c) = fs::read_to_string(t.path().join("children")) {
                    out.extend(c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
                }
            }
        }
        i += 1;
    }
    out
}

/// Add the files process `pid` maps (`/proc/PID/maps`) or holds open (`/proc/PID/fd`, but
/// for the inherited ones of `seen`) to `into`, and the pages of its mappings of the shared
/// files of `seen` that are present in its page tables (`/proc/PID/pagemap`) to `touched`.
fn sample_process(
    pid: u32,
    into: &mut BTreeSet<PathBuf>,
    seen: Seen<'_>,
    touched: &mut HashMap<FileId, PageSet>,
) {
    if let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) {
        let mut pagemap = None;
        for entry in maps.lines().filter_map(parse_line) {
            if entry.path.starts_with('/') && !entry.path.ends_with(" (deleted)") {
                into.insert(PathBuf::from(entry.path));
            }
            let id = file_id(&entry);
            if !seen.shared.contains(&id) {
                continue;
            }
            let pagemap =
                pagemap.get_or_insert_with(|| fs::File::open(format!("/proc/{pid}/pagemap")));
            let Ok(pagemap) = pagemap else { continue };
            let set = touched.entry(id).or_default();
            present_pages(pagemap, &entry, set);
        }
    }
    if let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            if let Ok(target) = fs::read_link(fd.path()) {
                if target.is_absolute() && !seen.inherited.contains(&target) {
                    into.insert(target);
                }
            }
        }
    }
}

/// Add the file pages of `entry` present in the page tables of its process (`pagemap` open on
/// its `/proc/PID/pagemap`: one 64-bit word per virtual page, bit 63 set when present).
fn present_pages(pagemap: &fs::File, entry: &Mapping<'_>, into: &mut PageSet) {
    let ps = crate::cache::page_size();
    let (first_page, _) = file_pages(entry);
    let vpages = (entry.end.saturating_sub(entry.start) / ps) as usize;
    // Read in chunks so that a large mapping does not need one large buffer.
    const CHUNK: usize = 4096;
    let mut buf = vec![0u8; CHUNK.min(vpages) * 8];
    let mut done = 0usize;
    let mut run: Option<u64> = None;
    while done < vpages {
        let n = CHUNK.min(vpages - done);
        let off = (entry.start / ps + done as u64) * 8;
        let words = pagemap.read_at(&mut buf[..n * 8], off).map_or(0, |read| read / 8);
        for word in buf[..words * 8].chunks_exact(8) {
            let word = u64::from_ne_bytes([
                word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7],
            ]);
            let present = word >> 63 == 1;
            let page = first_page + done as u64;
            match (present, run) {
                (true, None) => run = Some(page),
                (false, Some(start)) => {
                    into.insert(start, page);
                    run = None;
                }
                _ => {}
            }
            done += 1;
        }
        if words < n {
            break;
        }
    }
    if let Some(start) = run {
        into.insert(start, first_page + done as u64);
    }
}

/// Files mapped by a process (`/proc/PID/maps`).
pub fn mapped_files(pid: u32) -> Vec<PathBuf> {
    let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else { return Vec::new() };
    let mut out: Vec<PathBuf> = Vec::new();
    for entry in maps.lines().filter_map(parse_line) {
        if entry.path.starts_with('/') && !entry.path.ends_with(" (deleted)") {
            let p = PathBuf::from(entry.path);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// fanotify-based discovery of the files a run's tree opens.
struct Fanotify {
    stop: Arc<AtomicBool>,
    files: Arc<Mutex<Vec<PathBuf>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Fanotify {
    /// Start watching; a no-op (maps only) when fanotify is unavailable (not root).
    fn start(cgroup_name: Option<String>) -> Fanotify {
        let stop = Arc::new(AtomicBool::new(false));
        let files = Arc::new(Mutex::new(Vec::new()));
        let mut d = Fanotify { stop: stop.clone(), files: files.clone(), thread: None };
        let Some(watch) = OpenWatch::permission(Mount::on_block_device) else { return d };
        let root_pid = std::process::id();
        d.thread = Some(std::thread::spawn(move || {
            fanotify_loop(&watch, &stop, &files, cgroup_name.as_deref(), root_pid);
        }));
        d
    }

    fn finish(mut self) -> Vec<PathBuf> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.files.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Fanotify {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn fanotify_loop(
    watch: &OpenWatch,
    stop: &AtomicBool,
    files: &Mutex<Vec<PathBuf>>,
    cgroup_name: Option<&str>,
    own_pid: u32,
) {
    let mut pid_cache: Vec<(i32, bool)> = Vec::new();
    let belongs = |pid: i32, cache: &mut Vec<(i32, bool)>| -> bool {
        if let Some((_, b)) = cache.iter().find(|(p, _)| *p == pid) {
            return *b;
        }
        let b = match cgroup_name {
            Some(name) => fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .map(|t| t.lines().any(|l| l.ends_with(&format!("/{name}"))))
                .unwrap_or(false),
            // Without a cgroup: the launched process group (the root's pid is the pgid),
            // approximated by "not coldstart and in a group created after it".
            None => {
                // SAFETY: getpgid of any pid.
                let pgid = unsafe { libc::getpgid(pid) };
                pgid > 0 && pgid as u32 != own_pid && pgid != unsafe { libc::getpgid(0) }
            }
        };
        cache.push((pid, b));
        b
    };
    // Once stopped, the events already queued are read for at most this long: on a busy
    // machine (a build beside it) opens never pause, and waiting for a quiet moment kept a run
    // (and a signal that ended it) waiting for a minute.
    const DRAIN: Duration = Duration::from_millis(100);
    let mut stopped: Option<std::time::Instant> = None;
    loop {
        let events = watch.read(Duration::from_millis(20));
        for event in events.iter().filter(|e| belongs(e.pid, &mut pid_cache)) {
            if let (Some((_, path)), Ok(mut f)) = (event.regular_file(), files.lock()) {
                f.push(path);
            }
        }
        if stop.load(Ordering::SeqCst) {
            let since = *stopped.get_or_insert_with(std::time::Instant::now);
            if events.is_empty() || since.elapsed() >= DRAIN {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn lists_mapped_files_of_a_process() {
        let files = mapped_files(std::process::id());
        let exe = fs::read_link("/proc/self/exe").unwrap();
        assert!(files.contains(&exe), "{files:?} lacks {exe:?}");
    }

    /// The pages a process has in its page tables are read from its pagemap, for the files
    /// other processes map only.
    #[test]
    fn samples_the_pages_a_process_maps_of_shared_files() {
        let dir = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("data");
        fs::write(&path, vec![7u8; 64 * 4096]).unwrap();
        let file = fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        let ps = crate::cache::page_size() as usize;
        // SAFETY: a private read-only mapping of an open file, unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                64 * ps,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        // SAFETY: advice on our mapping; reading one byte of its page 40.
        let byte = unsafe {
            libc::madvise(addr, 64 * ps, libc::MADV_RANDOM);
            std::ptr::read_volatile((addr as *const u8).add(40 * ps))
        };
        assert_eq!(byte, 7);
        let id = FileId::of(&file).unwrap();
        let mut files = BTreeSet::new();
        let mut touched = HashMap::new();
        let shared = HashSet::from([id]);
        let seen = Seen { shared: &shared, inherited: &HashSet::new() };
        sample_process(std::process::id(), &mut files, seen, &mut touched);
        let not_shared = sample_touched_none(&path);
        // SAFETY: unmapping our mapping.
        unsafe { libc::munmap(addr, 64 * ps) };
        assert!(files.contains(&path), "{files:?}");
        let pages = touched.get(&id).expect("the shared file was sampled");
        assert!(pages.intersect(&PageSet::from_ranges([(40, 41)])).len() == 1, "{pages:?}");
        // Fault-around maps at most the cached neighbours of the page in its 16-page window
        // (aligned in virtual memory, so not necessarily at a file page multiple of 16).
        assert!(
            pages.len() <= 16 && pages.ranges().iter().all(|&(a, b)| a > 24 && b < 57),
            "{pages:?}"
        );
        assert!(not_shared, "a file no other process maps is not sampled");
    }

    /// Whether sampling this process with no shared file records no pages.
    fn sample_touched_none(path: &std::path::Path) -> bool {
        let mut files = BTreeSet::new();
        let mut touched = HashMap::new();
        let seen = Seen { shared: &HashSet::new(), inherited: &HashSet::new() };
        sample_process(std::process::id(), &mut files, seen, &mut touched);
        files.contains(path) && touched.is_empty()
    }

    /// A file the tree holds open only because it inherited the descriptor from this process
    /// is not one of its files; one it opens itself is.
    #[test]
    fn descriptors_inherited_from_this_process_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let (held, own) = (dir.path().join("held"), dir.path().join("own"));
        fs::write(&held, b"lock").unwrap();
        fs::write(&own, b"data").unwrap();
        let file = fs::File::open(&held).unwrap();
        // The child's standard input is the held file, as an inherited descriptor would be.
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "exec 4<\"$1\"; exec sleep 5", "sh"])
            .arg(&own)
            .stdin(fs::File::open(&held).unwrap())
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        let mut files = BTreeSet::new();
        let inherited = open_files(std::process::id());
        assert!(inherited.contains(&held), "{inherited:?}");
        while !files.contains(&own) && t.elapsed() < Duration::from_secs(5) {
            let seen = Seen { shared: &HashSet::new(), inherited: &inherited };
            sample_process(child.id(), &mut files, seen, &mut HashMap::new());
        }
        let _ = child.kill();
        let _ = child.wait();
        drop(file);
        assert!(files.contains(&own), "{files:?}");
        assert!(!files.contains(&held), "{files:?}");
    }
}
