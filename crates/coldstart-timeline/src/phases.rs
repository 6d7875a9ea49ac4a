//! From the events of one run to the timeline: the phases of the program's start, the time
//! its threads were blocked, the block requests it caused, and what each file cost.
//!
//! The phases are read off the main process's own events, in the order the dynamic loader
//! works (glibc's `ld.so`):
//!
//! | phase | from | to |
//! | --- | --- | --- |
//! | `wrapper` | the first `execve` | the last one (a shell script or shim executing the program) |
//! | `exec` | `execve` entered | `execve` returned: the kernel maps the program and its loader |
//! | `loader` | `execve` returned | the last `mmap` of a file before the entry point: the loader opens and maps each library |
//! | `relocation` | that `mmap` | the last `mprotect(PROT_READ)` before the entry point: the loader relocates each object and seals its RELRO part |
//! | `constructors` | that `mprotect` | `main` (a uprobe): library constructors, `_start`, the program's constructors |
//! | `main` | `main` | readiness |
//!
//! Where a boundary was not seen (a static program maps no library; a program without a
//! `main` symbol), the phases on either side of it merge into one named for both
//! (`program` from the entry point to readiness); what no phase covers is left unnamed.

use std::collections::HashMap;

use coldstart_formats::{BlockRequest, FileCost, PageEvent, Phase, TimelineFile, Wait};

use crate::trace::{Event, Kind};

/// The uprobe event names.
pub(crate) const ENTRY: &str = "cs_entry";
pub(crate) const MAIN: &str = "cs_main";

/// What the events of one run give.
#[derive(Debug, Default)]
pub(crate) struct Derived {
    pub t0_ns: u64,
    pub wall_s: f64,
    pub phases: Vec<Phase>,
    pub waits: Vec<Wait>,
    pub io_wait_s: f64,
    pub io_wait_wall_s: f64,
    pub files: Vec<TimelineFile>,
    pub events: Vec<PageEvent>,
    pub block: Vec<BlockRequest>,
    pub costs: Vec<FileCost>,
    /// Times (since t0) of the entry point and `main`, when probed.
    pub entry_s: Option<f64>,
    pub main_s: Option<f64>,
}

type Key = (u32, u32, u64);

/// Derive the timeline of the process tree rooted at `root`, ready at `ready_ns` (the
/// root's exit, for `exit` readiness). `names` names files by device and inode; `skip` are
/// devices whose pages are not files (shared memory).
pub(crate) fn derive(
    events: &[Event],
    block: &[Event],
    root: i32,
    ready_ns: u64,
    names: &HashMap<Key, String>,
    skip: &[(u32, u32)],
) -> Derived {
    let mut d = Derived::default();
    let Some(t0) =
        events.iter().find(|e| e.pid == root && e.kind == Kind::ExecEnter).map(|e| e.ts_ns)
    else {
        return d;
    };
    let ready = ready_ns.max(t0);
    let at = |ns: u64| s(ns.saturating_sub(t0));
    let probe = |name: &str| {
        events
            .iter()
            .find(|e| {
                e.pid == root && matches!(&e.kind, Kind::Probe(n) if n == name) && e.ts_ns <= ready
            })
            .map(|e| e.ts_ns)
    };
    let marks = Marks {
        t0,
        exec: program_exec(events, root, ready_ns),
        entry: probe(ENTRY),
        main: probe(MAIN),
        ready,
    };
    d.t0_ns = t0;
    d.wall_s = s(ready - t0);
    d.entry_s = marks.entry.map(at);
    d.main_s = marks.main.map(at);
    d.phases = phases(events, root, &marks);
    let tree = Activity::of(events, t0, ready, names, skip);
    d.io_wait_s = tree.waits.iter().map(|w| s(w.2 - w.1)).sum();
    d.io_wait_wall_s = s(union(tree.waits.iter().map(|w| (w.1, w.2))));
    d.costs = file_costs(tree.files.len(), &tree.events, &tree.waits);
    d.waits = tree
        .waits
        .iter()
        .map(|&(pid, a, b, file)| Wait { pid, start_s: at(a), end_s: at(b), file })
        .collect();
    d.block = block_requests(block, &tree.bios, t0, ready);
    d.files = tree.files;
    d.events = tree.events;
    d
}

/// The times the phases are cut at: the first exec (`t0`), the exec that started the
/// program (entered, returned), the entry point and `main` when probed, and readiness.
struct Marks {
    t0: u64,
    exec: Option<(u64, u64)>,
    entry: Option<u64>,
    main: Option<u64>,
    ready: u64,
}

/// The exec that started the program (entered, returned): the last of `root`'s that
/// succeeded before readiness.
fn program_exec(events: &[Event], root: i32, ready_ns: u64) -> Option<(u64, u64)> {
    let mut exec = None;
    let mut pending = None;
    for e in events.iter().filter(|e| e.pid == root && e.ts_ns <= ready_ns) {
        match e.kind {
            Kind::ExecEnter => pending = Some(e.ts_ns),
            Kind::ExecExit { ok: true } => exec = pending.map(|p| (p, e.ts_ns)),
            _ => {}
        }
    }
    exec
}

/// The phases of `root`'s start (see the module docs), from its events and `marks`, each
/// clipped to readiness; none when the program's exec was not seen.
fn phases(events: &[Event], root: i32, marks: &Marks) -> Vec<Phase> {
    let Marks { t0, exec, entry, main, ready } = *marks;
    let Some((enter, exit)) = exec else { return Vec::new() };
    let mut phases: Vec<(String, u64, u64)> = Vec::new();
    if enter > t0 {
        phases.push(("wrapper".into(), t0, enter));
    }
    phases.push(("exec".into(), enter, exit));
    // The loader's work ends at the entry point (or main, or readiness).
    let (last_map, last_seal) = loader_marks(events, root, exit, entry.or(main).unwrap_or(ready));
    let mut t = exit;
    if let Some(m) = last_map {
        phases.push(("loader".into(), t, m));
        t = m;
    }
    if let Some(r) = last_seal {
        phases.push(("relocation".into(), t, r));
        t = r;
    }
    match (entry, main) {
        (_, Some(m)) => {
            phases.push(("constructors".into(), t, m));
            phases.push(("main".into(), m, ready));
        }
        (Some(en), None) => {
            phases.push(("constructors".into(), t, en));
            phases.push(("program".into(), en, ready));
        }
        (None, None) => phases.push(("program".into(), t, ready)),
    }
    let at = |ns: u64| s(ns.saturating_sub(t0));
    phases
        .into_iter()
        .filter(|(_, a, b)| b >= a)
        .map(|(name, a, b)| Phase { name, start_s: at(a.min(ready)), end_s: at(b.min(ready)) })
        .collect()
}

/// Where the loader's work ends, between exec's return (`from`) and `limit`: the last
/// `mmap` of a file, and the last `mprotect(PROT_READ)` after it (the RELRO seal).
fn loader_marks(events: &[Event], root: i32, from: u64, limit: u64) -> (Option<u64>, Option<u64>) {
    let mut last_map = None;
    let mut last_seal = None;
    let mut file_map = false;
    for e in events.iter().filter(|e| e.pid == root && e.ts_ns >= from && e.ts_ns <= limit) {
        match e.kind {
            Kind::Mmap { fd } => file_map = fd >= 0,
            Kind::MmapReturn if file_map => {
                last_map = Some(e.ts_ns);
                last_seal = None;
            }
            Kind::Mprotect { prot: 1 } if last_map.is_some() => last_seal = Some(e.ts_ns),
            _ => {}
        }
    }
    (last_map, last_seal)
}

/// A thread's wait: its pid, from and until (ns), and the file of its last page event.
type Waiting = (i32, u64, u64, Option<usize>);

/// What the whole tree did between the first exec and readiness: the files it touched, its
/// page events, its threads' waits (sorted by start) and the bios it submitted.
struct Activity {
    files: Vec<TimelineFile>,
    events: Vec<PageEvent>,
    waits: Vec<Waiting>,
    bios: Vec<((u32, u32), u64, u64)>,
}

impl Activity {
    /// Read the page, switch and bio events from `t0` to `ready`: a file is numbered when
    /// first touched, and a thread that blocks waits until it runs again (or readiness).
    fn of(
        events: &[Event],
        t0: u64,
        ready: u64,
        names: &HashMap<Key, String>,
        skip: &[(u32, u32)],
    ) -> Activity {
        let mut tree =
            Activity { files: Vec::new(), events: Vec::new(), waits: Vec::new(), bios: Vec::new() };
        let at = |ns: u64| s(ns.saturating_sub(t0));
        let mut index: HashMap<Key, usize> = HashMap::new();
        let mut last_page: HashMap<i32, usize> = HashMap::new();
        let mut open: HashMap<i32, (u64, Option<usize>)> = HashMap::new();
        for e in events.iter().filter(|e| e.ts_ns >= t0 && e.ts_ns <= ready) {
            match &e.kind {
                Kind::Page { kind, dev, ino, page, count } => {
                    if skip.contains(dev) {
                        continue;
                    }
                    let key = (dev.0, dev.1, *ino);
                    let file = *index.entry(key).or_insert_with(|| {
                        tree.files.push(TimelineFile {
                            path: names.get(&key).cloned().unwrap_or_default(),
                            dev: format!("{}:{}", dev.0, dev.1),
                            ino: *ino,
                        });
                        tree.files.len() - 1
                    });
                    last_page.insert(e.pid, file);
                    tree.events.push(PageEvent {
                        t_s: at(e.ts_ns),
                        file,
                        page: *page,
                        count: *count,
                        kind: (*kind).into(),
                        pid: e.pid,
                    });
                }
                Kind::Switch { prev_pid, prev_blocked, next_pid } => {
                    if *prev_blocked {
                        open.insert(*prev_pid, (e.ts_ns, last_page.get(prev_pid).copied()));
                    }
                    if let Some((a, f)) = open.remove(next_pid) {
                        tree.waits.push((*next_pid, a, e.ts_ns, f));
                    }
                }
                Kind::Bio { dev, sector, sectors } => tree.bios.push((*dev, *sector, *sectors)),
                _ => {}
            }
        }
        for (pid, (a, f)) in open {
            tree.waits.push((pid, a, ready, f));
        }
        tree.waits.sort_by_key(|w| w.1);
        tree
    }
}

/// What each of `files` files cost: pages read, faults and the time threads waited after
/// touching it; the costliest first, those never read nor faulted on left out.
fn file_costs(files: usize, events: &[PageEvent], waits: &[Waiting]) -> Vec<FileCost> {
    let mut costs: Vec<FileCost> =
        (0..files).map(|file| FileCost { file, pages_read: 0, faults: 0, wait_s: 0.0 }).collect();
    for ev in events {
        match ev.kind.as_str() {
            "read" => costs[ev.file].pages_read += ev.count,
            "fault" => costs[ev.file].faults += 1,
            _ => {}
        }
    }
    for (_, a, b, f) in waits {
        if let Some(f) = f {
            costs[*f].wait_s += s(b - a);
        }
    }
    costs.sort_by(|a, b| b.wait_s.total_cmp(&a.wait_s).then(b.pages_read.cmp(&a.pages_read)));
    costs.retain(|c| c.pages_read > 0 || c.faults > 0);
    costs
}

/// The block requests issued from `t0` to `ready` that carry one of the program's `bios`,
/// each with its completion when seen.
fn block_requests(
    block: &[Event],
    bios: &[((u32, u32), u64, u64)],
    t0: u64,
    ready: u64,
) -> Vec<BlockRequest> {
    let at = |ns: u64| s(ns.saturating_sub(t0));
    let mut issued: Vec<(BlockRequest, (u32, u32))> = Vec::new();
    for e in block {
        match &e.kind {
            Kind::Issue { dev, sector, sectors, write } if e.ts_ns >= t0 && e.ts_ns <= ready => {
                let end = sector + sectors;
                if bios.iter().any(|(d2, s2, n2)| d2 == dev && *s2 < end && s2 + n2 > *sector) {
                    issued.push((
                        BlockRequest {
                            dev: format!("{}:{}", dev.0, dev.1),
                            sector: *sector,
                            bytes: sectors * 512,
                            write: *write,
                            issue_s: at(e.ts_ns),
                            complete_s: None,
                        },
                        *dev,
                    ));
                }
            }
            Kind::Complete { dev, sector } => {
                if let Some((r, _)) = issued
                    .iter_mut()
                    .find(|(r, d2)| d2 == dev && r.sector == *sector && r.complete_s.is_none())
                {
                    r.complete_s = Some(at(e.ts_ns));
                }
            }
            _ => {}
        }
    }
    issued.into_iter().map(|(r, _)| r).collect()
}

fn s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The length of the union of intervals (sorted by start).
fn union(intervals: impl Iterator<Item = (u64, u64)>) -> u64 {
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for (a, b) in intervals {
        match cur {
            Some((ca, cb)) if a <= cb => cur = Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                cur = Some((a, b));
            }
            None => cur = Some((a, b)),
        }
    }
    total + cur.map_or(0, |(a, b)| b - a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(pid: i32, us: u64, kind: Kind) -> Event {
        Event { pid, ts_ns: 1_000_000_000 + us * 1000, kind }
    }

    fn page(kind: &'static str, ino: u64) -> Kind {
        Kind::Page { kind, dev: (8, 1), ino, page: 0, count: 1 }
    }

    /// A dynamically linked start: exec, two libraries mapped, RELRO sealed, constructors,
    /// main, two waits on I/O (each until the thread runs again).
    fn start() -> Vec<Event> {
        vec![
            ev(7, 0, Kind::ExecEnter),
            ev(7, 100, Kind::ExecExit { ok: true }),
            ev(7, 150, page("fault", 1)),
            ev(7, 160, Kind::Switch { prev_pid: 7, prev_blocked: true, next_pid: 0 }),
            ev(0, 400, Kind::Wakeup { pid: 7 }),
            ev(0, 450, Kind::Switch { prev_pid: 0, prev_blocked: false, next_pid: 7 }),
            ev(7, 500, Kind::Mmap { fd: 3 }),
            ev(7, 510, Kind::MmapReturn),
            ev(7, 600, Kind::Mmap { fd: -1 }),
            ev(7, 610, Kind::MmapReturn),
            ev(7, 700, Kind::Mmap { fd: 3 }),
            ev(7, 710, Kind::MmapReturn),
            ev(7, 800, Kind::Mprotect { prot: 1 }),
            ev(7, 900, Kind::Mprotect { prot: 1 }),
            ev(7, 950, Kind::Probe(ENTRY.into())),
            ev(7, 1000, Kind::Probe(MAIN.into())),
            ev(7, 1100, page("read", 2)),
            ev(7, 1110, page("read", 2)),
            ev(7, 1200, Kind::Switch { prev_pid: 7, prev_blocked: true, next_pid: 0 }),
            ev(0, 1500, Kind::Switch { prev_pid: 0, prev_blocked: false, next_pid: 7 }),
            ev(7, 1700, Kind::Bio { dev: (8, 0), sector: 100, sectors: 8 }),
        ]
    }

    #[test]
    fn the_phases_follow_the_loader_and_cover_the_start() {
        let d = derive(&start(), &[], 7, 1_000_000_000 + 2_000_000, &HashMap::new(), &[]);
        let names: Vec<(&str, f64, f64)> =
            d.phases.iter().map(|p| (p.name.as_str(), p.start_s * 1e6, p.end_s * 1e6)).collect();
        let want = [
            ("exec", 0.0, 100.0),
            ("loader", 100.0, 710.0),
            ("relocation", 710.0, 900.0),
            ("constructors", 900.0, 1000.0),
            ("main", 1000.0, 2000.0),
        ];
        assert_eq!(names.len(), want.len(), "{names:?}");
        for ((n, a, b), (wn, wa, wb)) in names.iter().zip(want) {
            assert_eq!(*n, wn);
            assert!((a - wa).abs() < 1e-6 && (b - wb).abs() < 1e-6, "{n}: {a}-{b}");
        }
        assert!((d.wall_s - 0.002).abs() < 1e-12);
    }

    #[test]
    fn blocked_time_lasts_until_the_thread_runs_again_and_goes_to_the_last_file() {
        let mut names = HashMap::new();
        names.insert((8, 1, 1), "/bin/prog".to_owned());
        let d = derive(&start(), &[], 7, 1_000_000_000 + 2_000_000, &names, &[]);
        assert_eq!(d.waits.len(), 2);
        assert!((d.io_wait_s - 590e-6).abs() < 1e-12, "{}", d.io_wait_s);
        assert_eq!(d.files[0].path, "/bin/prog");
        let c = |f: usize| d.costs.iter().find(|c| c.file == f).unwrap();
        assert!((c(0).wait_s - 290e-6).abs() < 1e-12);
        assert!((c(1).wait_s - 300e-6).abs() < 1e-12);
        assert_eq!(c(1).pages_read, 2);
        assert_eq!(d.costs[0].file, 1, "the costliest first");
    }

    #[test]
    fn without_probes_or_libraries_the_rest_is_one_program_phase() {
        let events = vec![
            ev(7, 0, Kind::ExecEnter),
            ev(7, 0, Kind::ExecExit { ok: false }),
            ev(7, 10, Kind::ExecEnter),
            ev(7, 50, Kind::ExecExit { ok: true }),
        ];
        let d = derive(&events, &[], 7, 1_000_000_000 + 1_000_000, &HashMap::new(), &[]);
        let names: Vec<&str> = d.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["wrapper", "exec", "program"]);
    }

    #[test]
    fn only_requests_that_carry_the_programs_bios_are_kept() {
        let block = vec![
            ev(0, 1701, Kind::Issue { dev: (8, 0), sector: 96, sectors: 16, write: false }),
            ev(0, 1702, Kind::Issue { dev: (8, 0), sector: 5000, sectors: 8, write: true }),
            ev(0, 1800, Kind::Complete { dev: (8, 0), sector: 96 }),
        ];
        let d = derive(&start(), &block, 7, 1_000_000_000 + 2_000_000, &HashMap::new(), &[]);
        assert_eq!(d.block.len(), 1);
        assert_eq!(d.block[0].bytes, 16 * 512);
        assert!((d.block[0].complete_s.unwrap() - 1800e-6).abs() < 1e-12);
    }

    #[test]
    fn overlapping_waits_count_once_in_wall_time() {
        assert_eq!(union([(0, 10), (5, 20), (30, 40)].into_iter()), 30);
    }
}
