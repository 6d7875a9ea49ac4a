//! Replay: open each recorded file, check its identity, and ask the kernel to read the
//! recorded ranges into the page cache in one sweep.
//!
//! A replay is planned ([`plan`]: files opened and checked, ranges of a file closer than the
//! gap merged, cut to what one read-ahead call reads, put in order) and then issued
//! ([`issue`]). Planning reads only metadata and, for ELF files, the build-id's bytes.

use coldstart_sys::file::Extent;
use coldstart_sys::map::{Advice, Map, Sharing};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::db::{Database, PAGE};
use crate::identity::{build_id_changed, compare, compare_metadata, Match};

/// In which order the reads are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// By physical offset (FIEMAP) on a rotational disk, else by first touch.
    Auto,
    /// The order start-up first touched the ranges: the program's next page is the next read.
    FirstTouch,
    /// By the device and physical offset of each range's first block (FIEMAP), one sweep of
    /// the disk head.
    Physical,
}

/// How a read is asked of the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// `Huge` with at least [`HUGE_JOBS`] jobs on a rotational disk, where a request costs more
    /// than a MiB of reading; else `Readahead` (BENCHMARKS.md, "Prefetch").
    Auto,
    /// `readahead(2)`: starts the reads and returns.
    Readahead,
    /// `posix_fadvise(POSIX_FADV_WILLNEED)`: the same kernel path as `readahead(2)`.
    Fadvise,
    /// `readahead(2)` of the range, then `madvise(MADV_POPULATE_READ)` on a mapping of it:
    /// returns when the pages are in; several in flight need several jobs.
    Populate,
    /// `MADV_POPULATE_READ` on a mapping advised `MADV_HUGEPAGE` and `MADV_RANDOM`: the kernel
    /// reads each 2 MiB-aligned block the range touches into large folios, so one request is
    /// as large as the device takes (`readahead(2)` reads into 4 KiB pages, and a device that
    /// takes 128 segments cuts those reads at 512 KiB). Waits per block: several in flight
    /// need several jobs. Where the file system has no large folios, as `Populate`.
    Huge,
}

impl Mechanism {
    /// Whether issuing a read returns only once it is in (several in flight need several
    /// jobs).
    pub fn waits(self) -> bool {
        matches!(self, Mechanism::Populate | Mechanism::Huge)
    }
}

impl std::str::FromStr for Order {
    type Err = String;
    fn from_str(s: &str) -> Result<Order, String> {
        match s {
            "auto" => Ok(Order::Auto),
            "first-touch" => Ok(Order::FirstTouch),
            "physical" => Ok(Order::Physical),
            o => Err(format!("unknown order `{o}`: use auto, first-touch or physical")),
        }
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Mechanism, String> {
        match s {
            "auto" => Ok(Mechanism::Auto),
            "readahead" => Ok(Mechanism::Readahead),
            "fadvise" => Ok(Mechanism::Fadvise),
            "populate" => Ok(Mechanism::Populate),
            "huge" => Ok(Mechanism::Huge),
            o => Err(format!(
                "unknown mechanism `{o}`: use auto, readahead, fadvise, populate or huge"
            )),
        }
    }
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// In which order the ranges are read.
    pub order: Order,
    /// Which call reads them.
    pub mechanism: Mechanism,
    /// Threads issuing reads at once.
    pub jobs: usize,
    /// Two ranges of a file at most this many bytes apart are read as one (the gap too);
    /// `None`: [`ROTATIONAL_GAP`] on a rotational disk, else [`DEFAULT_GAP`].
    pub gap: Option<u64>,
    /// After issuing, wait until every range is in the page cache.
    pub wait: bool,
    /// While waiting, lock each range in memory (`mlock(2)`) as it arrives, so that nothing
    /// reclaims it before the program touches it; the lock lasts as long as the [`Held`]
    /// of the returned [`Issued`]. Ranges the lock limit (`RLIMIT_MEMLOCK`) refuses are only
    /// waited for.
    pub hold: bool,
    /// Check an ELF file's build-id with the sweep's own request that holds it: [`plan`]
    /// issues those requests first and reads the build-ids from the page cache, so a check
    /// costs no request of its own (a small read of its own is a whole request to the device,
    /// and it cuts the sweep's request around it in two). Without it, planning reads only
    /// metadata and the build-ids' bytes (for `prefetch show` and `--refresh`).
    pub check_in_sweep: bool,
    /// Threads opening the database's files at once (1 by default). Opening a cold file
    /// reads its directory's blocks and its inode's block; with several threads those reads
    /// are in the device's queue together. Measured on `hdd-seek`, 16 threads gained nothing
    /// for python3 or Firefox and cost about 2 ms on flash (BENCHMARKS.md, "Prefetch").
    pub open_jobs: usize,
}

impl Default for ReplayOptions {
    /// The defaults measured in BENCHMARKS.md ("Prefetch"): order and mechanism `auto`,
    /// one job (more for a mechanism that waits), gaps filled by the disk's kind, and wait
    /// until everything is read.
    fn default() -> Self {
        ReplayOptions {
            order: Order::Auto,
            mechanism: Mechanism::Auto,
            jobs: 1,
            gap: None,
            wait: true,
            hold: true,
            check_in_sweep: true,
            open_jobs: 1,
        }
    }
}

/// The gap filled on a disk that is not rotational (flash): a gap is worth reading when it
/// costs less than a request, and a request costs about what 32-64 KiB of reading does
/// (eMMC: 4,000 reads/s at 160 MB/s, 40 KB; a SATA SSD 54 KB; NVMe at queue depth about as
/// much). 256 KiB read the sample 2.0x slower on `emmc` (BENCHMARKS.md, "Prefetch").
pub const DEFAULT_GAP: u64 = 32 << 10;

/// The gap filled on a rotational disk: at 100 reads/s and 120 MB/s a request costs 10 ms and
/// a MiB of reading 9 ms, so reading a gap of up to a MiB is cheaper than a second request
/// (measured against 256 KiB and against whole files: BENCHMARKS.md, "Prefetch").
pub const ROTATIONAL_GAP: u64 = 1 << 20;

/// Jobs of the `auto` mechanism when it chooses `Huge`: each waits for its block, and a disk
/// serves several requests in flight better than one.
pub const HUGE_JOBS: usize = 4;

/// A file skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why it was skipped (its identity changed, it is gone, ...).
    pub why: String,
}

/// One read to issue.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Index into [`Plan::open`].
    pub file: usize,
    /// Where the read starts, bytes.
    pub offset: u64,
    /// How many bytes it reads.
    pub len: u64,
}

/// What replay will do.
#[derive(Debug)]
pub struct Plan {
    /// The files that matched, opened.
    pub open: Vec<File>,
    /// The reads, in the order they will be issued.
    pub requests: Vec<Request>,
    /// Files whose identity changed, or that are gone or unreadable.
    pub skipped: Vec<Skipped>,
    /// Files replayed although their device or inode changed (a copy with its times kept).
    pub moved: usize,
    /// The order used (never `Auto`).
    pub order: Order,
    /// The mechanism used (never `Auto`).
    pub mechanism: Mechanism,
    /// Requests read while planning: those holding a build-id checked in the sweep (they are
    /// in [`Plan::requests`] too, and cost nothing more when issued again).
    pub early: usize,
    /// How long opening and checking the files took (with the early requests).
    pub elapsed: Duration,
}

impl Plan {
    /// Bytes the requests read.
    pub fn bytes(&self) -> u64 {
        self.requests.iter().map(|r| r.len).sum()
    }
}

/// What an issue did.
#[derive(Debug, Clone, Default)]
pub struct Issued {
    /// Requests issued.
    pub requests: usize,
    /// Bytes they read.
    pub bytes: u64,
    /// Calls the kernel refused (with the first error).
    pub failed: usize,
    /// The first such error.
    pub first_error: Option<String>,
    /// Time to issue (and with `wait`, to have everything in).
    pub elapsed: Duration,
    /// The ranges locked in memory (with `hold`), until the last clone is dropped.
    pub held: std::sync::Arc<Held>,
}

/// Ranges mapped and locked in memory; unlocked and unmapped when dropped.
#[derive(Debug, Default)]
pub struct Held {
    maps: std::sync::Mutex<Vec<Map>>,
    /// Bytes locked.
    pub bytes: std::sync::atomic::AtomicU64,
    /// Ranges the lock limit refused (only waited for).
    pub refused: AtomicUsize,
}

impl Held {
    /// Lock a range as [`Held::lock`] does, unless the lock limit refused one already: false
    /// when it was not locked (and counted as refused).
    fn try_lock(&self, file: &File, offset: u64, len: u64, no_read_ahead: bool) -> bool {
        if self.refused.load(Ordering::Relaxed) == 0 && self.lock(file, offset, len, no_read_ahead)
        {
            return true;
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        false
    }
}

impl Held {
    /// Map `len` bytes of `file` at `offset` and lock them (waiting for them to be read);
    /// false when the mapping or the lock was refused.
    fn lock(&self, file: &File, offset: u64, len: u64, no_read_ahead: bool) -> bool {
        let Ok(map) = Map::new(file, offset, len as usize, Sharing::Shared) else { return false };
        // No read-ahead from the lock's faults on what `Huge` read: its blocks carry the
        // kernel's read-ahead mark, and a fault on one would read the next window.
        if no_read_ahead {
            let _ = map.advise(Advice::Random);
        }
        if map.lock().is_err() {
            return false;
        }
        // Kept (locked) until the `Held` drops.
        self.maps.lock().unwrap_or_else(|e| e.into_inner()).push(map);
        self.bytes.fetch_add(len, Ordering::Relaxed);
        true
    }
}

/// Open and check every file of `db`, and lay out the reads.
pub fn plan(db: &Database, options: &ReplayOptions) -> Plan {
    let start = Instant::now();
    let Opened { open, index, skipped, moved, checks } = open_checked(db, options);
    let rotational = open
        .first()
        .and_then(|f| f.metadata().ok())
        .is_some_and(|m| device_queue(m.dev(), "rotational") == Some(1));
    let gap = options.gap.unwrap_or(if rotational { ROTATIONAL_GAP } else { DEFAULT_GAP });
    let mut extents = merged_extents(db, &index, open.len(), gap);
    let order = match options.order {
        Order::Auto => {
            if rotational {
                Order::Physical
            } else {
                Order::FirstTouch
            }
        }
        o => o,
    };
    match order {
        Order::Physical => {
            let maps: Vec<Vec<Extent>> = open.iter().map(coldstart_sys::file::extents).collect();
            let key = |&(f, s, _, _): &(usize, u64, u64, usize)| {
                let dev = open[f].metadata().map(|m| m.dev()).unwrap_or(0);
                (dev, physical(&maps[f], s).unwrap_or(u64::MAX), f, s)
            };
            extents.sort_by_cached_key(key);
        }
        _ => extents.sort_by_key(|e| e.3),
    }
    let requests = cut(&open, extents);
    let mechanism = match options.mechanism {
        Mechanism::Auto if rotational => Mechanism::Huge,
        Mechanism::Auto => Mechanism::Readahead,
        m => m,
    };
    let mut plan = Plan {
        open,
        requests,
        skipped,
        moved,
        order,
        mechanism,
        early: 0,
        elapsed: Duration::ZERO,
    };
    if !checks.is_empty() {
        check_build_ids(&mut plan, db, &checks, jobs_for(options, mechanism));
    }
    plan.elapsed = start.elapsed();
    plan
}

/// The files of a database opened and checked against it.
struct Opened {
    /// The files still as recorded (or moved), in database order.
    open: Vec<File>,
    /// Index into `db.files` -> index into `open`, for the files kept.
    index: Vec<Option<usize>>,
    /// Files whose identity changed, or that are gone or unreadable.
    skipped: Vec<Skipped>,
    /// Files kept although their device or inode changed (a copy with its times kept).
    moved: usize,
    /// Files whose build-id is checked with the sweep's first request (index into `open`,
    /// into `db.files`).
    checks: Vec<(usize, usize)>,
}

/// Open every file of `db` and compare it with what was recorded: a file missing or changed
/// is skipped; with `check_in_sweep`, a file with a build-id is compared by its metadata only
/// now, its build-id later.
fn open_checked(db: &Database, options: &ReplayOptions) -> Opened {
    let mut out = Opened {
        open: Vec::new(),
        index: vec![None; db.files.len()],
        skipped: Vec::new(),
        moved: 0,
        checks: Vec::new(),
    };
    let opened = open_all(db.files.iter().map(|e| e.path.as_path()).collect(), options.open_jobs);
    for ((i, entry), opened) in db.files.iter().enumerate().zip(opened) {
        let (file, meta) = match opened {
            Ok(f) => f,
            Err(e) => {
                out.skipped.push(Skipped { path: entry.path.clone(), why: e.to_string() });
                continue;
            }
        };
        let check_later = options.check_in_sweep && entry.build_id.is_some();
        let found =
            if check_later { compare_metadata(entry, &meta) } else { compare(entry, &file, &meta) };
        match found {
            Match::Same => {}
            Match::Moved => out.moved += 1,
            Match::Changed(why) => {
                out.skipped.push(Skipped { path: entry.path.clone(), why });
                continue;
            }
        }
        if check_later {
            out.checks.push((out.open.len(), i));
        }
        out.index[i] = Some(out.open.len());
        out.open.push(file);
    }
    out
}

/// The ranges of `db` in the files kept (`index`, `files` of them), per file by offset and
/// merged across gaps of up to `gap` bytes: (file, start, end, rank), each extent with the
/// rank of its first-touched range.
fn merged_extents(
    db: &Database,
    index: &[Option<usize>],
    files: usize,
    gap: u64,
) -> Vec<(usize, u64, u64, usize)> {
    let mut per_file: Vec<Vec<(u64, u64, usize)>> = vec![Vec::new(); files];
    for (rank, r) in db.ranges.iter().enumerate() {
        if let Some(Some(f)) = index.get(r.file) {
            per_file[*f].push((r.page * PAGE, r.pages * PAGE, rank));
        }
    }
    let mut extents: Vec<(usize, u64, u64, usize)> = Vec::new();
    for (f, mut ranges) in per_file.into_iter().enumerate() {
        ranges.sort_unstable();
        let mut cur: Option<(u64, u64, usize)> = None;
        for (off, len, rank) in ranges {
            cur = match cur {
                Some((s, e, rk)) if off <= e.saturating_add(gap) => {
                    Some((s, e.max(off + len), rk.min(rank)))
                }
                Some((s, e, rk)) => {
                    extents.push((f, s, e, rk));
                    Some((off, off + len, rank))
                }
                None => Some((off, off + len, rank)),
            };
        }
        if let Some((s, e, rk)) = cur {
            extents.push((f, s, e, rk));
        }
    }
    extents
}

/// The extents as requests, in their order: one read-ahead call reads at most the larger of
/// the device's read-ahead and its largest request, so a longer extent is cut.
fn cut(open: &[File], extents: Vec<(usize, u64, u64, usize)>) -> Vec<Request> {
    let chunks: Vec<u64> = open
        .iter()
        .map(|f| f.metadata().map(|m| chunk_for(m.dev())).unwrap_or(128 << 10))
        .collect();
    let mut requests = Vec::new();
    for (f, s, e, _) in extents {
        let mut off = s;
        while off < e {
            let len = chunks[f].min(e - off);
            requests.push(Request { file: f, offset: off, len });
            off += len;
        }
    }
    requests
}

/// Each of `paths` opened, with its metadata, in the order given; `jobs` threads open them
/// at once (one: in order, on this thread).
fn open_all(paths: Vec<&Path>, jobs: usize) -> Vec<std::io::Result<(File, std::fs::Metadata)>> {
    let open = |p: &Path| File::open(p).and_then(|f| f.metadata().map(|m| (f, m)));
    let jobs = jobs.clamp(1, paths.len().max(1));
    if jobs == 1 {
        return paths.into_iter().map(open).collect();
    }
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, std::io::Result<(File, std::fs::Metadata)>)> =
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..jobs)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(p) = paths.get(i) else { break mine };
                            mine.push((i, open(p)));
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
    done.sort_by_key(|(i, _)| *i);
    debug_assert_eq!(done.len(), paths.len());
    done.into_iter().map(|(_, r)| r).collect()
}

/// Read the request of each checked file that holds its build-id (all at once), check the
/// build-ids from the page cache, and drop the files whose build-id changed.
fn check_build_ids(plan: &mut Plan, db: &Database, checks: &[(usize, usize)], jobs: usize) {
    let holding = |f: usize, at: u64| {
        plan.requests.iter().find(|r| r.file == f && r.offset <= at && at < r.offset + r.len)
    };
    let first: Vec<Request> = checks
        .iter()
        .filter_map(|&(f, e)| holding(f, db.files[e].build_id_offset?).copied())
        .collect();
    plan.early = run(&plan.open, &first, plan.mechanism, jobs, None).requests;
    let mut bad = vec![false; plan.open.len()];
    for &(f, e) in checks {
        let entry = &db.files[e];
        if let Some(why) = build_id_changed(entry, &plan.open[f]) {
            bad[f] = true;
            plan.skipped.push(Skipped { path: entry.path.clone(), why });
            if plan.open[f].metadata().is_ok_and(|m| compare_metadata(entry, &m) == Match::Moved) {
                plan.moved -= 1;
            }
        }
    }
    if !bad.contains(&true) {
        return;
    }
    let mut remap = vec![usize::MAX; bad.len()];
    let open = std::mem::take(&mut plan.open);
    for (f, file) in open.into_iter().enumerate() {
        if !bad[f] {
            remap[f] = plan.open.len();
            plan.open.push(file);
        }
    }
    plan.requests.retain(|r| !bad[r.file]);
    for r in &mut plan.requests {
        r.file = remap[r.file];
    }
}

/// Threads that issue reads: `options.jobs`, and at least [`HUGE_JOBS`] when the `auto`
/// mechanism chose one that waits.
fn jobs_for(options: &ReplayOptions, mechanism: Mechanism) -> usize {
    match options.mechanism {
        Mechanism::Auto if mechanism.waits() => options.jobs.max(HUGE_JOBS),
        _ => options.jobs,
    }
    .clamp(1, 64)
}

/// Issue `requests` with `jobs` threads; with `hold`, lock each as soon as it is read (a
/// mechanism that waits: the page reclaim of some machines takes pages back within a second,
/// sooner than a whole sweep).
fn run(
    open: &[File],
    requests: &[Request],
    mechanism: Mechanism,
    jobs: usize,
    hold: Option<&Held>,
) -> Issued {
    let next = AtomicUsize::new(0);
    let results: Vec<Issued> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Issued::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(r) = requests.get(i) else { break };
                        let result = one(&open[r.file], r, mechanism);
                        if let (Some(held), Ok(())) = (hold, &result) {
                            held.try_lock(
                                &open[r.file],
                                r.offset,
                                r.len,
                                mechanism == Mechanism::Huge,
                            );
                        }
                        done.requests += 1;
                        done.bytes += r.len;
                        if let Err(e) = result {
                            done.failed += 1;
                            done.first_error.get_or_insert(e.to_string());
                        }
                    }
                    done
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_default()).collect()
    });
    let mut total = Issued::default();
    for r in results {
        total.requests += r.requests;
        total.bytes += r.bytes;
        total.failed += r.failed;
        if total.first_error.is_none() {
            total.first_error = r.first_error;
        }
    }
    total
}

/// Issue the plan's reads with `options.jobs` threads, and with `options.wait` wait until they
/// are in.
pub fn issue(plan: &Plan, options: &ReplayOptions) -> Issued {
    let start = Instant::now();
    let mechanism = plan.mechanism;
    let jobs = jobs_for(options, mechanism);
    let held = std::sync::Arc::new(Held::default());
    let inline = (mechanism.waits() && options.hold).then_some(&*held);
    let issued = run(&plan.open, &plan.requests, mechanism, jobs, inline);
    if options.wait && !mechanism.waits() {
        // In issue order, which is the order the reads complete in: each range is locked (or
        // waited for) as soon as it is in.
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..jobs {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(r) = plan.requests.get(i) else { break };
                    let file = &plan.open[r.file];
                    if !(options.hold && held.try_lock(file, r.offset, r.len, false)) {
                        let _ = populate(file, r.offset, r.len);
                    }
                });
            }
        });
    }
    let mut total = Issued { held, ..issued };
    total.elapsed = start.elapsed();
    total
}

fn one(file: &File, r: &Request, mechanism: Mechanism) -> std::io::Result<()> {
    use coldstart_sys::file::{readahead, will_need};
    match mechanism {
        Mechanism::Auto | Mechanism::Readahead => readahead(file, r.offset, r.len),
        Mechanism::Fadvise => will_need(file, r.offset, r.len),
        // The exact range first: a fault on a mapping would read around it (the device's
        // whole read-ahead window), and populate then only waits for what is in flight.
        Mechanism::Populate => {
            let _ = readahead(file, r.offset, r.len);
            populate(file, r.offset, r.len)
        }
        Mechanism::Huge => populate_huge(file, r.offset, r.len),
    }
}

/// Map the range and fault it in with `MADV_POPULATE_READ` (Linux 5.14): returns when the pages
/// are in the page cache.
fn populate(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    let map = Map::new(file, offset, len as usize, Sharing::Shared)?;
    map.populate(0, map.len())
}

/// The 2 MiB blocks of a file that hold `offset .. offset + len`, read into the page cache in
/// large folios: a mapping of them advised `MADV_HUGEPAGE` (each fault reads its whole
/// PMD-aligned block) and `MADV_RANDOM` (and nothing after it), then populated.
fn populate_huge(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    const BLOCK: u64 = 2 << 20;
    if len == 0 {
        return Ok(());
    }
    let start = offset / BLOCK * BLOCK;
    // Pages past the end of the file are never mapped.
    let size = file.metadata()?.len();
    let end = ((offset + len).div_ceil(BLOCK) * BLOCK).min(size.next_multiple_of(PAGE));
    if end <= start {
        return Ok(());
    }
    let map = Map::new(file, start, (end - start) as usize, Sharing::Shared)?;
    // Without transparent huge pages the advice is refused: the reads are then the device's
    // read-ahead windows, as `Populate`'s.
    let _ = map.advise(Advice::HugePage);
    let _ = map.advise(Advice::Random);
    // Only the range itself: its blocks are read whole by its first fault in each.
    let skip = (offset - start) / PAGE * PAGE;
    let want = (offset + len).min(end) - (start + skip);
    map.populate(skip as usize, want as usize)
}

/// A value of the block queue of the device holding a file system (`st_dev`): the device's
/// own queue, or for a partition its disk's.
fn device_queue(dev: u64, name: &str) -> Option<u64> {
    let base = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
    let real = std::fs::canonicalize(&base).ok()?;
    for dir in [real.join("queue"), real.parent()?.join("queue")] {
        if let Ok(text) = std::fs::read_to_string(dir.join(name)) {
            return text.trim().parse().ok();
        }
    }
    None
}

/// The most one read-ahead call reads on the file system of `dev`: the larger of its
/// read-ahead and its largest request (the kernel cuts a longer call there), at least 128 KiB.
fn chunk_for(dev: u64) -> u64 {
    let bdi = format!("/sys/class/bdi/{}:{}/read_ahead_kb", libc::major(dev), libc::minor(dev));
    let ra = std::fs::read_to_string(bdi).ok().and_then(|t| t.trim().parse::<u64>().ok());
    let io = device_queue(dev, "max_sectors_kb");
    (ra.unwrap_or(0).max(io.unwrap_or(0)).max(128) << 10).min(16 << 20)
}

/// The physical offset of `offset` in a file with `extents`.
fn physical(extents: &[Extent], offset: u64) -> Option<u64> {
    let i = extents.partition_point(|e| e.0 + e.2 <= offset);
    let &(l, p, len) = extents.get(i)?;
    (offset >= l && offset < l + len).then(|| p + (offset - l))
}

/// Whether `path`'s pages `offset .. offset + len` are all in the page cache (`mincore(2)`).
pub fn resident_pages(path: &Path, offset: u64, len: u64) -> std::io::Result<(u64, u64)> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let len = len.min(size.saturating_sub(offset));
    if len == 0 {
        return Ok((0, 0));
    }
    Map::new(&file, offset, len as usize, Sharing::Shared)?.resident()
}

#[cfg(test)]
mod tests;
