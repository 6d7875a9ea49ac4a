//! File pages touched during start-up, from the kernel's `filemap` tracepoints.
//!
//! `mm_filemap_fault` (a page fault on a file mapping), `mm_filemap_map_pages` (fault-around
//! mapping pages already cached) and `mm_filemap_add_to_page_cache` (a page read from storage,
//! by faults, `read(2)` or read-ahead) together name every file page start-up uses, for any
//! program, stripped or not. Tracing happens in a tracefs *instance* of its own
//! (`instances/coldstart-PID`), filtered to the process tree with `set_event_pid` and the
//! `event-fork` option, so other tracing users are not disturbed; tracefs is mounted only if
//! it is not, and unmounted after the page run only if coldstart mounted it
//! ([`coldstart_sys::tracefs::Tracefs`]).
//!
//! The page run is a run of its own, without breakpoints: the function profiler's `int3`
//! writes make private copies of the text pages they patch, which would hide those pages
//! from this trace. Its program is always killed at readiness (it is an extra run).
//! `trace` is one such run; `--pages=traced` turns its events into a profile as they
//! are (read-ahead and fault-around included), and the `exact` module runs it twice, the
//! second time on a private copy with read-ahead off, for the pages touched and nothing else.
//! Without root, the `perf` module samples page faults instead (labelled as sampled).
//! Events carry a device and inode; they are mapped back to paths through the files opened
//! (fanotify) and the files the tree has mapped or open (`/proc/PID/maps`, `/proc/PID/fd`).

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use coldstart_process::maps;

use crate::format::{PageAccess, PageFile, PageProfile};
pub(crate) use crate::page_files::describe;
pub use crate::page_files::PagesError;
use crate::{ProfileError, ProfileOptions, Ready};

/// The events enabled, under `events/`: the three page events, and forks (which say what
/// processes the run's tree holds).
const EVENTS: [&str; 4] = [
    "filemap/mm_filemap_fault",
    "filemap/mm_filemap_map_pages",
    "filemap/mm_filemap_add_to_page_cache",
    "sched/sched_process_fork",
];

pub(crate) fn tracefs_err(e: coldstart_sys::tracefs::TraceError) -> PagesError {
    PagesError::Tracefs { path: e.path, message: e.message }
}

/// Prefix of the page runs' tracefs instances, followed by the owner's pid.
const INSTANCE_PREFIX: &str = "coldstart-";

/// Remove the tracing state of coldstarts that are gone (root only; tracefs where mounted).
pub(crate) fn remove_stale_tracing() {
    if coldstart_sys::is_root() {
        coldstart_sys::tracefs::remove_stale(INSTANCE_PREFIX);
    }
}

/// (major, minor, inode) -> path, from the files the process group maps or holds open.
fn snapshot_files(pgid: i32, into: &mut HashMap<(u32, u32, u64), PathBuf>) {
    for pid in maps::group_members(pgid) {
        for (key, path) in maps::mapped_files(pid).into_iter().chain(maps::open_files(pid)) {
            into.entry(key).or_insert(path);
        }
    }
}

/// One parsed page event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    pub pid: i32,
    /// Monotonic nanoseconds (in [`Traced::events`]: since the program was continued).
    pub ts_ns: u64,
    /// `fault`, `map` or `read`.
    pub kind: &'static str,
    pub dev: (u32, u32),
    pub ino: u64,
    pub page: u64,
    /// Pages, from `page` on (a folio of more than one page, or a fault-around range).
    pub count: u64,
}

/// The parent and child of a `sched_process_fork` line, e.g.
/// `bash-42 [001] ..... 1.5: sched_process_fork: comm=bash pid=42 child_comm=bash child_pid=43`.
/// The parent is the task that wrote the line (the name before `[`), read as
/// [`parse_line`] reads it: a task name may hold ` pid=` itself.
fn parse_fork(line: &str) -> Option<(i32, i32)> {
    let (head, fields) = line.split_once(": sched_process_fork: ")?;
    let (task, _) = head.rsplit_once(" [")?;
    let parent = task.trim().rsplit_once('-')?.1.parse().ok()?;
    let child = fields.rsplit_once("child_pid=")?.1.split_whitespace().next()?.parse().ok()?;
    Some((parent, child))
}

/// Whether `line` is a fork; if its parent is in `tree`, the child joins it. Only the run's
/// own descendants count: a pid of another program taken into the tree would put that
/// program's files into this run's profile (and, for an exact run, onto its private copy).
fn grow_tree(tree: &mut HashSet<i32>, line: &str) -> bool {
    let Some((parent, child)) = parse_fork(line) else { return false };
    if tree.contains(&parent) {
        tree.insert(child);
    }
    true
}

/// Parse a line of the `trace` file, e.g.
/// `prog-42 [001] ..... 12.345678: mm_filemap_fault: dev=8:1 ino=1a2b ofs=4096`.
fn parse_line(line: &str) -> Option<Event> {
    let (head, rest) = line.split_once(": mm_filemap_")?;
    let (name, fields) = rest.split_once(": ")?;
    let kind = match name {
        "fault" => "fault",
        "map_pages" => "map",
        "add_to_page_cache" => "read",
        _ => return None,
    };
    let (task, after) = head.rsplit_once(" [")?;
    let pid = task.trim().rsplit_once('-')?.1.parse().ok()?;
    let ts = after.split_whitespace().last()?;
    let (secs, frac) = ts.split_once('.')?;
    // The kernel writes microseconds (or nanoseconds): digits only, at most nine of them. A
    // task name is the program's to choose and may hold anything, this text included.
    if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_ns = frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32);
    let ts_ns = secs.parse::<u64>().ok()?.checked_mul(1_000_000_000)?.checked_add(frac_ns)?;
    let norm = fields.replace('=', " ");
    let tokens: Vec<&str> = norm.split_whitespace().collect();
    let value =
        |key: &str| tokens.iter().position(|t| *t == key).and_then(|i| tokens.get(i + 1)).copied();
    let (ma, mi) = value("dev")?.split_once(':')?;
    let ino = u64::from_str_radix(value("ino")?, 16).ok()?;
    let ofs = value("ofs")?;
    let (first, last) = match ofs.split_once('-') {
        Some((a, b)) => (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?),
        None => {
            let a = ofs.parse::<u64>().ok()?;
            let order = value("order").and_then(|o| o.parse::<u32>().ok()).unwrap_or(0);
            (a, a.checked_add(4096u64.checked_shl(order).filter(|n| *n != 0)?)? - 1)
        }
    };
    if last < first || last == u64::MAX {
        return None;
    }
    Some(Event {
        pid,
        ts_ns,
        kind,
        dev: (ma.parse().ok()?, mi.parse().ok()?),
        ino,
        page: first / 4096,
        count: (last + 1 - first).div_ceil(4096).max(1),
    })
}

/// What the page run gives: the pages, warnings, and where the program's CPU time went.
pub(crate) struct PageRun {
    pub pages: PageProfile,
    pub warnings: Vec<String>,
    /// Samples of the run's CPU time by file, when perf events are allowed.
    pub cpu: Option<crate::cpu::CpuSamples>,
}

/// Where the exact page run makes its private device when not told: memory (`/dev/shm`, a
/// tmpfs, which takes the loop device's direct I/O) when it has room for twice the copy, so
/// that the run's reads, one 4 KiB page at a time, are not each a trip to this machine's disk;
/// else [`coldstart_storage::DEFAULT_WORK_DIR`].
pub fn work_dir_for(bytes: u64) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let room = nix::sys::statvfs::statvfs(shm)
        .map(|s| s.blocks_available() * s.fragment_size())
        .unwrap_or(0);
    // The copy, ext4's journal and tables (the backing file's 64 MiB), twice over.
    if room / 2 > bytes + (64 << 20) {
        shm.to_owned()
    } else {
        PathBuf::from(coldstart_storage::DEFAULT_WORK_DIR)
    }
}

/// A file by (major, minor, inode), as the trace names it.
pub(crate) type Key = crate::opens::Key;

/// What one traced run of the program gave, before it becomes a page profile.
pub(crate) struct Traced {
    /// Page events of the program's processes since it was continued, in time order
    /// (coldstart's own code between fork and exec, and shared memory, left out).
    pub events: Vec<Event>,
    /// Paths of files: from the opens, then the tree's maps and open files.
    pub files: HashMap<Key, PathBuf>,
    /// What the opens said, when fanotify could listen.
    pub opened: Option<crate::opens::Opened>,
    /// The run's processes: the program and every process forked in its tree.
    pub tree: HashSet<i32>,
    /// Events the kernel dropped.
    pub lost: u64,
    pub warnings: Vec<String>,
    pub cpu: Option<crate::cpu::CpuSamples>,
}

/// Run the program once under the page trace (killed at readiness); `enter` runs it in the
/// mount namespace of a private copy of its files.
pub(crate) fn trace(
    options: &ProfileOptions,
    path: &Path,
    enter: Option<&coldstart_storage::EnterHook>,
) -> Result<Traced, ProfileError> {
    let instance = page_instance()?;
    let mut launched = crate::launch(options, path, false, &[], enter)?;
    let pid = launched.stopped.pid;
    let guard = crate::tree::TreeGuard { pgid: pid, armed: true };
    instance.write("set_event_pid", &pid.to_string()).map_err(tracefs_err)?;
    // Every file the program opens, named as it opens it; where its CPU time goes.
    let opens = crate::opens::Opens::start(pid);
    let sampler = crate::cpu::CpuSampler::start(pid);
    instance.write("tracing_on", "1").map_err(tracefs_err)?;
    let t0 = coldstart_sys::monotonic_ns();
    // SAFETY: continuing our own stopped child.
    unsafe { libc::kill(pid, libc::SIGCONT) };

    let mut files: HashMap<Key, PathBuf> = HashMap::new();
    let mut warnings = Vec::new();
    let exited = launched.poll_until_ready(
        options.timeout,
        Duration::from_millis(2),
        &mut warnings,
        || {
            crate::interrupt::check()?;
            if matches!(options.ready, Ready::Exit) {
                // Exit readiness: the maps vanish at exit, so keep the file table fresh.
                snapshot_files(pid, &mut files);
            }
            Ok(())
        },
    )?;
    instance.write("tracing_on", "0").map_err(tracefs_err)?;
    if !exited {
        snapshot_files(pid, &mut files);
    }
    let opened = opens.map(crate::opens::Opens::finish);
    let cpu = sampler.map(crate::cpu::CpuSampler::finish);
    if let Some(o) = &opened {
        name_from_opens(o, &mut files, &mut warnings);
    }
    launched.stop_pollers();
    // The page run is an extra run: kill its tree now and reap it.
    drop(guard);
    for r in launched.readers.drain(..) {
        let _ = r.join();
    }

    let text = instance.read().map_err(tracefs_err)?;
    let lost = instance.lost();
    drop(instance);
    if lost > 0 {
        warnings.push(format!(
            "page trace lost {lost} events (ring buffer overrun): the page profile is incomplete"
        ));
    }
    let (events, tree) = program_events(&text, pid, t0, path);
    Ok(Traced { events, files, opened, tree, lost, warnings, cpu })
}

/// A new tracefs instance of the page events, off (until the run's pid filter is set, it
/// would record every process), following forks; what killed runs left is removed first.
fn page_instance() -> Result<coldstart_sys::tracefs::Instance, ProfileError> {
    use coldstart_sys::tracefs::{Instance, Mount, Tracefs};
    let tracefs = Tracefs::hold(Mount::IfMissing).map_err(tracefs_err)?;
    coldstart_sys::tracefs::remove_stale(INSTANCE_PREFIX);
    let name = format!("{INSTANCE_PREFIX}{}", std::process::id());
    let instance = Instance::create(&name, &EVENTS, 32768, Mount::Never).map_err(tracefs_err)?;
    drop(tracefs);
    instance.write("options/event-fork", "1").map_err(tracefs_err)?;
    Ok(instance)
}

/// Name files by what the opens said, before any other name: they are exact, where a look
/// at another process's open files can race with it closing one and opening another.
fn name_from_opens(
    opened: &crate::opens::Opened,
    files: &mut HashMap<Key, PathBuf>,
    warnings: &mut Vec<String>,
) {
    for (key, path) in &opened.names {
        files.insert(*key, path.clone());
    }
    if opened.overflowed {
        warnings.push(
            "the kernel dropped open events (fanotify queue overflow): some files may be named by inode only"
                .into(),
        );
    }
}

/// The page events of the trace `text` of the program (`path`, pid `pid`, continued at
/// `t0`) and of the processes its tree forked, with times since `t0`; and that tree.
/// Coldstart's own code between fork and exec and shared memory are left out.
fn program_events(text: &str, pid: i32, t0: u64, path: &Path) -> (Vec<Event>, HashSet<i32>) {
    let key = |m: std::fs::Metadata| (libc::major(m.dev()), libc::minor(m.dev()), m.ino());
    let own = std::fs::metadata("/proc/self/exe").ok().map(key);
    let target = std::fs::metadata(path).ok().map(key);
    let shared_memory = coldstart_process::shared_memory_device();
    let mut tree: HashSet<i32> = HashSet::from([pid]);
    let mut events = Vec::new();
    for line in text.lines() {
        if grow_tree(&mut tree, line) {
            continue;
        }
        let Some(event) = parse_line(line) else { continue };
        let key = (event.dev.0, event.dev.1, event.ino);
        if event.ts_ns < t0
            || (Some(key) == own && own != target)
            || Some(event.dev) == shared_memory
        {
            continue;
        }
        events.push(Event { ts_ns: event.ts_ns - t0, ..event });
    }
    (events, tree)
}

/// The keys of a run that are not files of the program: with every open on the file systems
/// seen (fanotify, no overflow), a key that nothing opened, mapped or held and that has no
/// fault or map event, outside `device` (the exact run's private copy, whose files are named
/// by their inodes there). That is the file system's own metadata: inode tables and
/// directories read through the block device's page cache, traced as the device's number and
/// a small inode number, while the program looked files up.
pub(crate) fn metadata_keys(run: &Traced, device: Option<(u32, u32)>) -> HashSet<Key> {
    if run.opened.as_ref().is_none_or(|o| o.overflowed) {
        return HashSet::new();
    }
    let key = |e: &Event| (e.dev.0, e.dev.1, e.ino);
    let mapped: HashSet<Key> = run.events.iter().filter(|e| e.kind != "read").map(key).collect();
    run.events
        .iter()
        // Pseudo file systems (major 0): the block devices' own page caches are named by
        // their device nodes (page_files), memory is left out when traced.
        .filter(|e| Some(e.dev) != device && e.dev.0 != 0)
        .map(key)
        .filter(|k| !run.files.contains_key(k) && !mapped.contains(k))
        .collect()
}

/// Pages traced where the files are (`--pages=traced`): every event as it came, fault-around
/// maps and read-ahead included.
pub(crate) fn record_traced(
    options: &ProfileOptions,
    path: &Path,
) -> Result<PageRun, ProfileError> {
    let run = trace(options, path, None)?;
    let metadata = metadata_keys(&run, None);
    let mut profile_files: Vec<PageFile> = Vec::new();
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut accesses = Vec::new();
    for event in &run.events {
        let key = (event.dev.0, event.dev.1, event.ino);
        if metadata.contains(&key) {
            continue;
        }
        let fi = *index.entry(key).or_insert_with(|| {
            profile_files.push(describe(run.files.get(&key).cloned(), key));
            profile_files.len() - 1
        });
        accesses.push(PageAccess {
            file: fi,
            page: event.page,
            count: event.count,
            t_ns: event.ts_ns,
            event: event.kind.into(),
            pid: event.pid,
        });
    }
    let mut warnings = run.warnings;
    if let Some(o) = &run.opened {
        warnings.extend(cached_warning(o, &index, &accesses));
    }
    Ok(PageRun {
        pages: PageProfile {
            source: crate::format::SOURCE_TRACEFS.into(),
            sampled: false,
            files: profile_files,
            accesses,
            lost_events: run.lost,
        },
        warnings,
        cpu: run.cpu,
    })
}

/// The warning for files that had pages in the page cache before the run: a page read with
/// `read(2)` from the cache leaves no trace event. A file counts when the program did not map
/// it and more of its pages were cached at the program's first open than the run added
/// (`read` events) in all.
pub(crate) fn cached_warning(
    opened: &crate::opens::Opened,
    index: &HashMap<(u32, u32, u64), usize>,
    accesses: &[PageAccess],
) -> Option<String> {
    let mut added: HashMap<usize, u64> = HashMap::new();
    let mut mapped: std::collections::HashSet<usize> = Default::default();
    for a in accesses {
        if a.event == "read" {
            *added.entry(a.file).or_default() += a.count.max(1);
        } else {
            mapped.insert(a.file);
        }
    }
    // Files the program mapped have their pages seen (faults and fault-around of cached
    // pages are events); what is missed is a file read with read(2) alone.
    let cached: Vec<&PathBuf> = opened
        .cached_at_open
        .iter()
        .filter(|(key, _, pages)| {
            let file = index.get(key);
            !file.is_some_and(|i| mapped.contains(i))
                && *pages > file.and_then(|i| added.get(i)).copied().unwrap_or(0)
        })
        .map(|(_, path, _)| path)
        .collect();
    if cached.is_empty() {
        return None;
    }
    let shown: Vec<String> = cached.iter().take(3).map(|p| p.display().to_string()).collect();
    Some(format!(
        "{} files the program read were already in the page cache ({}{}): pages read from the cache with read(2) leave no trace, so the profile may miss some of theirs; for a complete page profile, drop the cache first (sync; echo 1 > /proc/sys/vm/drop_caches) or profile after a reboot",
        cached.len(),
        shown.join(", "),
        if cached.len() > 3 { ", ..." } else { "" }
    ))
}

/// Pages touched per loaded section of each ELF file of a page profile (`.text`, `.rodata`,
/// `.rela.dyn`, `.data.rel.ro`, ...), so relocation and data reads show beside code; empty for
/// files that are not ELF or no longer readable. One list per entry of `pages.files`.
pub fn section_pages(pages: &PageProfile) -> Vec<Vec<crate::format::SectionPages>> {
    use std::collections::HashSet;
    let mut touched: Vec<HashSet<u64>> = vec![HashSet::new(); pages.files.len()];
    for a in &pages.accesses {
        if let Some(set) = touched.get_mut(a.file) {
            set.extend(a.page..a.page + a.count.max(1));
        }
    }
    pages
        .files
        .iter()
        .zip(&touched)
        .map(|(file, set)| {
            if file.path.as_os_str().is_empty() || !coldstart_elf::is_elf(&file.path) {
                return Vec::new();
            }
            let options =
                coldstart_elf::SymbolOptions { use_debug_files: false, ..Default::default() };
            let Ok(info) = coldstart_elf::ElfInfo::open(&file.path, &options) else {
                return Vec::new();
            };
            info.sections
                .iter()
                .filter(|s| s.address != 0 && s.size > 0)
                .filter_map(|s| {
                    let offset = s.offset?;
                    let (first, last) = (offset / 4096, (offset + s.size - 1) / 4096);
                    Some(crate::format::SectionPages {
                        name: s.name.clone(),
                        pages: last - first + 1,
                        touched: (first..=last).filter(|p| set.contains(p)).count() as u64,
                    })
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_count_the_pages_touched_in_them() {
        let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
        let info = coldstart_elf::ElfInfo::open(&exe, &Default::default()).unwrap();
        let text = info.section(".text").unwrap();
        let first = text.offset.unwrap() / 4096;
        let pages = PageProfile {
            source: "tracefs".into(),
            sampled: false,
            files: vec![describe(Some(exe), (0, 0, 0))],
            accesses: vec![PageAccess {
                file: 0,
                page: first,
                count: 2,
                t_ns: 0,
                event: "map".into(),
                pid: 1,
            }],
            lost_events: 0,
        };
        let sections = section_pages(&pages);
        let t = sections[0].iter().find(|s| s.name == ".text").unwrap();
        assert_eq!(t.touched, 2.min(t.pages));
        assert!(t.pages >= t.touched);
    }

    #[test]
    fn parses_the_three_filemap_events() {
        let fault = parse_line("           prog-4242    [001] ..... 12345.678901: mm_filemap_fault: dev=8:1 ino=1a2b ofs=8192").unwrap();
        assert_eq!(
            fault,
            Event {
                pid: 4242,
                ts_ns: 12_345_678_901_000,
                kind: "fault",
                dev: (8, 1),
                ino: 0x1a2b,
                page: 2,
                count: 1
            }
        );
        let map = parse_line("ld-linux-x86-64-7 [000] ...1. 1.000000500: mm_filemap_map_pages: dev=254:3 ino=ff ofs=0-16383").unwrap();
        assert_eq!((map.kind, map.page, map.count, map.pid, map.dev), ("map", 0, 4, 7, (254, 3)));
        let read = parse_line("cat-9 [003] ..... 2.5: mm_filemap_add_to_page_cache: dev 0:33 ino 10 pfn=0x1234 ofs=4096 order=2").unwrap();
        assert_eq!((read.kind, read.page, read.count, read.ts_ns), ("read", 1, 4, 2_500_000_000));
        assert!(parse_line("# tracer: nop").is_none());
    }

    #[test]
    fn parses_the_child_of_a_fork() {
        let fork = "           bash-42      [001] ..... 1.500000: sched_process_fork: comm=bash pid=42 child_comm=bash child_pid=43";
        assert_eq!(parse_fork(fork), Some((42, 43)));
        let spaced = "Web Content-7 [000] ..... 2.0: sched_process_fork: comm=Web Content pid=7 child_comm=Web Content child_pid=9";
        assert_eq!(parse_fork(spaced), Some((7, 9)));
        let named = "a pid=5-8 [000] ..... 2.0: sched_process_fork: comm=a pid=5 pid=8 child_comm=a pid=5 child_pid=10";
        assert_eq!(parse_fork(named), Some((8, 10)));
        assert_eq!(
            parse_fork("prog-4242 [001] ..... 1.0: mm_filemap_fault: dev=8:1 ino=1a2b ofs=8192"),
            None
        );
    }

    #[test]
    fn the_tree_holds_the_runs_descendants_only() {
        let mut tree = HashSet::from([42]);
        let lines = [
            "cc-7 [000] ..... 1.0: sched_process_fork: comm=cc pid=7 child_comm=cc child_pid=9",
            "prog-42 [001] ..... 1.5: sched_process_fork: comm=prog pid=42 child_comm=prog child_pid=43",
            "prog-43 [001] ..... 1.6: sched_process_fork: comm=prog pid=43 child_comm=sh child_pid=44",
            "cc-9 [000] ..... 1.7: sched_process_fork: comm=cc pid=9 child_comm=as child_pid=10",
        ];
        assert!(lines.iter().all(|l| grow_tree(&mut tree, l)));
        assert_eq!(tree, HashSet::from([42, 43, 44]));
        assert!(!grow_tree(
            &mut tree,
            "prog-42 [001] ..... 1.0: mm_filemap_fault: dev=8:1 ino=1 ofs=0"
        ));
    }

    #[test]
    fn a_task_name_of_many_byte_characters_is_no_crash() {
        // Task names are the program's to choose (PR_SET_NAME, a thread's name).
        let line = "ééééé-3 [001] ..... 1.ééééééééé: mm_filemap_fault: dev=8:1 ino=1 ofs=0";
        assert_eq!(parse_line(line), None);
        let line = "x-3 [001] ..... 99999999999999999999.5: mm_filemap_fault: dev=8:1 ino=1 ofs=0";
        assert_eq!(parse_line(line), None, "seconds beyond u64 nanoseconds");
        let far = format!("x-3 [001] ..... 1.5: mm_filemap_fault: dev=8:1 ino=1 ofs={}", u64::MAX);
        assert_eq!(parse_line(&far), None);
        let order =
            "x-3 [001] ..... 1.5: mm_filemap_add_to_page_cache: dev 8:1 ino 1 ofs=4096 order=70";
        assert_eq!(parse_line(order), None);
    }

    proptest::proptest! {
        #[test]
        fn any_line_parses_or_is_skipped_without_a_crash(line in "\\PC{0,160}") {
            let _ = parse_line(&line);
            let _ = parse_fork(&line);
        }

        #[test]
        fn a_hostile_task_name_never_crashes_and_a_plain_one_keeps_its_pid(
            comm in "\\PC{0,15}",
            pid in 1i32..4_000_000,
            secs in proptest::num::u64::ANY,
            frac in "[0-9é.]{0,12}",
            ofs in proptest::num::u64::ANY,
            order in 0u32..80,
        ) {
            let line = format!(
                "{comm}-{pid} [001] ..... {secs}.{frac}: mm_filemap_add_to_page_cache: dev 8:1 ino 1a ofs={ofs} order={order}"
            );
            let parsed = parse_line(&line);
            let plain = !comm.contains(": mm_filemap_") && !comm.contains(" [")
                && frac.len() <= 9 && !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit())
                && secs < u64::MAX / 1_000_000_000
                && order < 40 && ofs < u64::MAX / 2;
            if plain {
                let e = parsed.expect("a kernel-shaped line");
                proptest::prop_assert_eq!(e.pid, pid);
                proptest::prop_assert_eq!(e.page, ofs / 4096);
            }
        }
    }

    #[test]
    fn reads_of_what_no_process_opened_or_mapped_are_file_system_metadata() {
        let ev = |kind: &'static str, dev: (u32, u32), ino: u64| Event {
            pid: 1,
            ts_ns: 0,
            kind,
            dev,
            ino,
            page: 366,
            count: 1,
        };
        let disk = (254, 0);
        let copy = (7, 3);
        let mut run = Traced {
            events: vec![
                ev("read", disk, 1),
                ev("read", disk, 7),
                ev("read", disk, 9),
                ev("fault", disk, 9),
                ev("read", copy, 12),
            ],
            files: HashMap::from([((254, 0, 7), PathBuf::from("/usr/lib/x.so"))]),
            opened: Some(crate::opens::Opened::default()),
            tree: HashSet::new(),
            lost: 0,
            warnings: Vec::new(),
            cpu: None,
        };
        // 7 was opened (named); 9 unnamed but mapped (a file closed before it was named);
        // 12 is on the private copy (named by its inode there); 1 was only read and never
        // opened: the block device's metadata pages.
        assert_eq!(metadata_keys(&run, Some(copy)), HashSet::from([(254, 0, 1)]));
        // Without every open seen, nothing can be ruled out.
        run.opened = None;
        assert!(metadata_keys(&run, Some(copy)).is_empty());
    }
}
