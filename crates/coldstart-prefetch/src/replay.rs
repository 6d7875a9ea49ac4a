//! Replay: open each recorded file, check its identity, and ask the kernel to read the
//! recorded ranges into the page cache in one sweep.
//!
//! A replay is planned ([`plan`]: files opened and checked, ranges of a file closer than the
//! gap merged, cut to what one read-ahead call reads, put in order) and then issued
//! ([`issue`]). Planning reads only metadata and, for ELF files, the build-id's bytes.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::db::{Database, PAGE};
use crate::identity::{compare, Match};

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
    /// `readahead(2)`: starts the reads and returns.
    Readahead,
    /// `posix_fadvise(POSIX_FADV_WILLNEED)`: the same kernel path as `readahead(2)`.
    Fadvise,
    /// `readahead(2)` of the range, then `madvise(MADV_POPULATE_READ)` on a mapping of it:
    /// returns when the pages are in; several in flight need several jobs.
    Populate,
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
            "readahead" => Ok(Mechanism::Readahead),
            "fadvise" => Ok(Mechanism::Fadvise),
            "populate" => Ok(Mechanism::Populate),
            o => Err(format!("unknown mechanism `{o}`: use readahead, fadvise or populate")),
        }
    }
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub order: Order,
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
}

impl Default for ReplayOptions {
    /// The defaults measured in BENCHMARKS.md ("Prefetch"): order `auto`, `readahead(2)`,
    /// one job, gaps filled by the disk's kind, and wait until everything is read.
    fn default() -> Self {
        ReplayOptions {
            order: Order::Auto,
            mechanism: Mechanism::Readahead,
            jobs: 1,
            gap: None,
            wait: true,
            hold: true,
        }
    }
}

/// The gap filled on a disk that is not rotational (flash): a request costs little more than
/// the 256 KiB around it.
pub const DEFAULT_GAP: u64 = 256 << 10;

/// The gap filled on a rotational disk: at 100 reads/s and 120 MB/s a request costs 10 ms and
/// a MiB of reading 9 ms, so reading a gap of up to a MiB is cheaper than a second request
/// (measured against 256 KiB and against whole files: BENCHMARKS.md, "Prefetch").
pub const ROTATIONAL_GAP: u64 = 1 << 20;

/// A file skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: PathBuf,
    pub why: String,
}

/// One read to issue.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Index into [`Plan::open`].
    pub file: usize,
    pub offset: u64,
    pub len: u64,
}

/// What replay will do.
#[derive(Debug)]
pub struct Plan {
    /// The files that matched, opened.
    pub open: Vec<File>,
    pub requests: Vec<Request>,
    /// Files whose identity changed, or that are gone or unreadable.
    pub skipped: Vec<Skipped>,
    /// Files replayed although their device or inode changed (a copy with its times kept).
    pub moved: usize,
    /// The order used (never `Auto`).
    pub order: Order,
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
    pub requests: usize,
    pub bytes: u64,
    /// Calls the kernel refused (with the first error).
    pub failed: usize,
    pub first_error: Option<String>,
    /// Time to issue (and with `wait`, to have everything in).
    pub elapsed: Duration,
    /// The ranges locked in memory (with `hold`), until the last clone is dropped.
    pub held: std::sync::Arc<Held>,
}

/// Ranges mapped and locked in memory; unlocked and unmapped when dropped.
#[derive(Debug, Default)]
pub struct Held {
    maps: std::sync::Mutex<Vec<(usize, usize)>>,
    /// Bytes locked.
    pub bytes: std::sync::atomic::AtomicU64,
    /// Ranges the lock limit refused (only waited for).
    pub refused: AtomicUsize,
}

impl Held {
    /// Map `len` bytes of `fd` at `offset` and lock them (waiting for them to be read);
    /// false when the mapping or the lock was refused.
    fn lock(&self, fd: i32, offset: u64, len: u64) -> bool {
        // SAFETY: a fresh read-only shared mapping of a file we hold open; kept until drop.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                offset as libc::off_t,
            );
            if p == libc::MAP_FAILED {
                return false;
            }
            if libc::mlock(p, len as usize) != 0 {
                libc::munmap(p, len as usize);
                return false;
            }
            self.maps.lock().unwrap_or_else(|e| e.into_inner()).push((p as usize, len as usize));
        }
        self.bytes.fetch_add(len, Ordering::Relaxed);
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        for &(p, len) in self.maps.get_mut().unwrap_or_else(|e| e.into_inner()).iter() {
            // SAFETY: each mapping was made by `lock` and is unmapped once, here.
            unsafe { libc::munmap(p as *mut libc::c_void, len) };
        }
    }
}

/// Open and check every file of `db`, and lay out the reads.
pub fn plan(db: &Database, options: &ReplayOptions) -> Plan {
    let mut open = Vec::new();
    let mut index: Vec<Option<usize>> = vec![None; db.files.len()];
    let mut skipped = Vec::new();
    let mut moved = 0;
    for (i, entry) in db.files.iter().enumerate() {
        let file = match File::open(&entry.path) {
            Ok(f) => f,
            Err(e) => {
                skipped.push(Skipped { path: entry.path.clone(), why: e.to_string() });
                continue;
            }
        };
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => {
                skipped.push(Skipped { path: entry.path.clone(), why: e.to_string() });
                continue;
            }
        };
        match compare(entry, &file, &meta) {
            Match::Same => {}
            Match::Moved => moved += 1,
            Match::Changed(why) => {
                skipped.push(Skipped { path: entry.path.clone(), why });
                continue;
            }
        }
        index[i] = Some(open.len());
        open.push(file);
    }
    let rotational = open
        .first()
        .and_then(|f| f.metadata().ok())
        .is_some_and(|m| device_queue(m.dev(), "rotational").is_some_and(|v| v == 1));
    let gap = options.gap.unwrap_or(if rotational { ROTATIONAL_GAP } else { DEFAULT_GAP });
    // Per file, its ranges by offset, merged across small gaps; each extent keeps the rank of
    // its first-touched range.
    let mut per_file: Vec<Vec<(u64, u64, usize)>> = vec![Vec::new(); open.len()];
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
            let maps: Vec<Vec<Extent>> = open.iter().map(fiemap).collect();
            let key = |&(f, s, _, _): &(usize, u64, u64, usize)| {
                let dev = open[f].metadata().map(|m| m.dev()).unwrap_or(0);
                (dev, physical(&maps[f], s).unwrap_or(u64::MAX), f, s)
            };
            extents.sort_by_cached_key(key);
        }
        _ => extents.sort_by_key(|e| e.3),
    }
    // One read-ahead call reads at most the larger of the device's read-ahead and its largest
    // request; a longer extent is cut.
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
    Plan { open, requests, skipped, moved, order }
}

/// Issue the plan's reads with `options.jobs` threads, and with `options.wait` wait until they
/// are in.
pub fn issue(plan: &Plan, options: &ReplayOptions) -> Issued {
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let jobs = options.jobs.clamp(1, 64);
    let results: Vec<Issued> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Issued::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(r) = plan.requests.get(i) else { break };
                        let result = one(&plan.open[r.file], r, options.mechanism);
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
    let held = std::sync::Arc::new(Held::default());
    if options.wait && (options.hold || options.mechanism != Mechanism::Populate) {
        // In issue order, which is the order the reads complete in: each range is locked (or
        // waited for) as soon as it is in.
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..jobs {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(r) = plan.requests.get(i) else { break };
                    let fd = plan.open[r.file].as_raw_fd();
                    if options.hold && held.refused.load(Ordering::Relaxed) == 0 {
                        if held.lock(fd, r.offset, r.len) {
                            continue;
                        }
                        held.refused.fetch_add(1, Ordering::Relaxed);
                    } else if options.hold {
                        held.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = populate(fd, r.offset, r.len);
                });
            }
        });
    }
    let mut total = Issued { held, ..Issued::default() };
    for r in results {
        total.requests += r.requests;
        total.bytes += r.bytes;
        total.failed += r.failed;
        if total.first_error.is_none() {
            total.first_error = r.first_error;
        }
    }
    total.elapsed = start.elapsed();
    total
}

fn one(file: &File, r: &Request, mechanism: Mechanism) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    let rc = match mechanism {
        Mechanism::Readahead => unsafe {
            libc::readahead(fd, r.offset as libc::off64_t, r.len as usize) as i32
        },
        Mechanism::Fadvise => {
            let rc = unsafe {
                libc::posix_fadvise(
                    fd,
                    r.offset as libc::off_t,
                    r.len as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            0
        }
        // The exact range first: a fault on a mapping would read around it (the device's
        // whole read-ahead window), and populate then only waits for what is in flight.
        Mechanism::Populate => {
            // SAFETY: an advice call on a descriptor the plan holds open.
            unsafe { libc::readahead(fd, r.offset as libc::off64_t, r.len as usize) };
            return populate(fd, r.offset, r.len);
        }
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Map the range and fault it in with `MADV_POPULATE_READ` (Linux 5.14): returns when the pages
/// are in the page cache.
fn populate(fd: i32, offset: u64, len: u64) -> std::io::Result<()> {
    const MADV_POPULATE_READ: i32 = 22;
    if len == 0 {
        return Ok(());
    }
    // SAFETY: a fresh read-only shared mapping of a file we hold open, unmapped before return.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            offset as libc::off_t,
        );
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let rc = libc::madvise(p, len as usize, MADV_POPULATE_READ);
        let err = std::io::Error::last_os_error();
        libc::munmap(p, len as usize);
        if rc != 0 {
            return Err(err);
        }
    }
    Ok(())
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

/// One extent of a file: logical offset, physical offset, length.
type Extent = (u64, u64, u64);

/// The file's extents (`FS_IOC_FIEMAP`), empty when the file system has no such call.
fn fiemap(file: &File) -> Vec<Extent> {
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const COUNT: usize = 512;
    #[repr(C)]
    struct Fiemap {
        start: u64,
        length: u64,
        flags: u32,
        mapped: u32,
        count: u32,
        reserved: u32,
        extents: [[u64; 7]; COUNT],
    }
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut m = Fiemap {
            start,
            length: u64::MAX - start,
            flags: 0,
            mapped: 0,
            count: COUNT as u32,
            reserved: 0,
            extents: [[0; 7]; COUNT],
        };
        // SAFETY: the struct is the kernel's `struct fiemap` with COUNT extents after it.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &mut m as *mut Fiemap) };
        if rc != 0 || m.mapped == 0 {
            return out;
        }
        let mut last = false;
        for e in &m.extents[..m.mapped as usize] {
            let (logical, phys, len, flags) = (e[0], e[1], e[2], e[5] as u32);
            out.push((logical, phys, len));
            start = logical + len;
            last |= flags & 1 != 0; // FIEMAP_EXTENT_LAST
        }
        if last || (m.mapped as usize) < COUNT {
            return out;
        }
    }
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
    let pages = len.div_ceil(PAGE) as usize;
    let mut vec = vec![0u8; pages];
    // SAFETY: a read-only shared mapping, unmapped before return; mincore writes `pages` bytes.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            offset as libc::off_t,
        );
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let rc = libc::mincore(p, len as usize, vec.as_mut_ptr());
        let err = std::io::Error::last_os_error();
        libc::munmap(p, len as usize);
        if rc != 0 {
            return Err(err);
        }
    }
    Ok((vec.iter().filter(|b| *b & 1 != 0).count() as u64, pages as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Range;
    use crate::identity::identify;

    fn db_for(path: &Path, ranges: &[(u64, u64)]) -> Database {
        let mut db = Database::new(vec![]);
        db.files.push(identify(path).unwrap());
        for &(page, pages) in ranges {
            db.ranges.push(Range { file: 0, page, pages, seen: 1 });
        }
        db
    }

    #[test]
    fn ranges_closer_than_the_gap_are_one_read_in_first_touch_order() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 1 << 20]).unwrap();
        let db = db_for(&p, &[(200, 1), (0, 2), (4, 1)]);
        let o =
            ReplayOptions { gap: Some(2 * PAGE), order: Order::FirstTouch, ..Default::default() };
        let plan = plan(&db, &o);
        let r: Vec<(u64, u64)> = plan.requests.iter().map(|r| (r.offset, r.len)).collect();
        assert_eq!(r, vec![(200 * PAGE, PAGE), (0, 5 * PAGE)]);
        let o = ReplayOptions { gap: Some(0), ..o };
        assert_eq!(super::plan(&db, &o).requests.len(), 3);
    }

    #[test]
    fn a_deleted_or_changed_file_is_skipped_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, vec![1u8; 8192]).unwrap();
        std::fs::write(&b, vec![1u8; 8192]).unwrap();
        let mut db = db_for(&a, &[(0, 2)]);
        db.files.push(identify(&b).unwrap());
        db.ranges.push(Range { file: 1, page: 0, pages: 1, seen: 1 });
        std::fs::remove_file(&a).unwrap();
        std::fs::write(&b, vec![1u8; 100]).unwrap();
        let plan = plan(&db, &ReplayOptions::default());
        assert!(plan.requests.is_empty());
        assert_eq!(plan.skipped.len(), 2);
        assert!(plan.skipped[1].why.contains("size"), "{:?}", plan.skipped);
    }

    #[test]
    fn physical_offsets_map_through_extents() {
        let extents = vec![(0, 1000, 100), (100, 5000, 50)];
        assert_eq!(physical(&extents, 10), Some(1010));
        assert_eq!(physical(&extents, 120), Some(5020));
        assert_eq!(physical(&extents, 150), None);
    }
}
