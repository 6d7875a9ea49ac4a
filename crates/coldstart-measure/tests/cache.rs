//! Eviction and its verification on the real kernel (run as root, as CI does).
//!
//! Every file lives in a temporary directory under `/var/tmp`, on the machine's disk: a file on
//! tmpfs (`/tmp` on many systems, `/dev/shm`) *is* its page cache and can never be evicted, so
//! a test there would prove nothing.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{RwLock, RwLockReadGuard};

use coldstart_measure::cache::{self, Method};

const HOLDER_ENV: &str = "COLDSTART_TEST_HOLD_FILE";
/// `FIRST:COUNT`: the holder maps only these pages of the file.
const HOLDER_PAGES_ENV: &str = "COLDSTART_TEST_HOLD_PAGES";

/// Tests that expect pages to stay cached between two steps share this lock; the test that
/// drops the whole page cache takes it exclusively, so that it cannot run in between.
static PAGE_CACHE: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    PAGE_CACHE.read().unwrap_or_else(|e| e.into_inner())
}

fn disk_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("coldstart-cache-test").tempdir_in("/var/tmp").unwrap()
}

/// A file of `len` bytes of non-zero data, synced (so no page is dirty) and then read whole.
fn cached_file(dir: &Path, name: &str, len: usize) -> PathBuf {
    let path = dir.join(name);
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
    let mut f = File::create(&path).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    read_all(&path);
    path
}

fn read_all(path: &Path) {
    let mut buf = Vec::new();
    File::open(path).unwrap().read_to_end(&mut buf).unwrap();
}

#[test]
fn read_file_is_fully_resident_then_evicted() {
    let _cache = shared();
    let dir = disk_dir();
    let path = cached_file(dir.path(), "data", 1024 * 1024 + 100);
    let before = cache::residency(&path).unwrap();
    assert_eq!(before.total_pages, (1024 * 1024 + 100_u64).div_ceil(page_size()));
    assert_eq!(before.cached_pages, before.total_pages, "{before:?}");

    let report = cache::evict(std::slice::from_ref(&path), &[]).unwrap();
    assert!(report.held, "{report:?}");
    assert_eq!(report.files, 1);
    assert_eq!(report.total_pages, before.total_pages);
    assert_eq!(report.resident_pages_after, 0);
    assert!(report.still_resident.is_empty());
    assert_eq!(report.method, "cachestat");
    assert_eq!(cache::residency(&path).unwrap().cached_pages, 0);
}

#[test]
fn dirty_pages_are_reported_and_written_back_by_eviction() {
    let _cache = shared();
    let dir = disk_dir();
    let path = dir.path().join("dirty");
    fs::write(&path, vec![7u8; 64 * 1024]).unwrap(); // not synced: dirty pages
    let r = cache::residency_with(&path, Method::Cachestat).unwrap();
    assert!(r.dirty_pages.unwrap() > 0, "{r:?}");
    let report = cache::evict(&[path], &[]).unwrap();
    assert!(report.held, "{report:?}");
}

#[test]
fn empty_file_has_no_pages() {
    let _cache = shared();
    let dir = disk_dir();
    let path = dir.path().join("empty");
    File::create(&path).unwrap();
    for method in [Method::Cachestat, Method::Mincore] {
        let r = cache::residency_with(&path, method).unwrap();
        assert_eq!((r.total_pages, r.cached_pages), (0, 0), "{method:?}");
    }
    assert!(cache::evict(&[path], &[]).unwrap().held);
}

#[test]
fn cachestat_and_mincore_agree() {
    let _cache = shared();
    let dir = disk_dir();
    let len = 4 * 1024 * 1024;
    let path = cached_file(dir.path(), "partial", len);
    assert!(cache::evict(std::slice::from_ref(&path), &[]).unwrap().held);

    // Bring back a few scattered pages, readahead disabled, so that residency is partial.
    let f = File::open(&path).unwrap();
    // SAFETY: valid descriptor; advice only.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let mut page = vec![0u8; page_size() as usize];
    for offset in [0, len / 3, len - 100] {
        // SAFETY: `page` is a writable buffer of its length.
        let n = unsafe {
            libc::pread(f.as_raw_fd(), page.as_mut_ptr().cast(), page.len(), offset as i64)
        };
        assert!(n > 0);
    }
    let by_cachestat = cache::residency_with(&path, Method::Cachestat).unwrap();
    let by_mincore = cache::residency_with(&path, Method::Mincore).unwrap();
    assert_eq!(by_cachestat.total_pages, by_mincore.total_pages);
    assert_eq!(by_cachestat.cached_pages, by_mincore.cached_pages);
    assert!(by_mincore.cached_pages > 0 && by_mincore.cached_pages < by_mincore.total_pages);
    assert_eq!(by_mincore.dirty_pages, None);

    read_all(&path);
    let full = cache::residency_with(&path, Method::Mincore).unwrap();
    assert_eq!(full.cached_pages, full.total_pages);
    assert_eq!(
        cache::residency_with(&path, Method::Cachestat).unwrap().cached_pages,
        full.total_pages
    );
}

/// Kills and reaps the holder child even when an assertion fails.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start this test binary again, running only [`holder_child`], which maps `path` with
/// `MAP_POPULATE` and sleeps; return once it says the pages are mapped.
fn spawn_holder(path: &Path) -> ChildGuard {
    spawn_holder_of(path, None)
}

/// [`spawn_holder`] mapping only `pages` (first page, count) of the file.
fn spawn_holder_of(path: &Path, pages: Option<(u64, u64)>) -> ChildGuard {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if let Some((first, count)) = pages {
        command.env(HOLDER_PAGES_ENV, format!("{first}:{count}"));
    }
    let mut child = ChildGuard(
        command
            .args(["--exact", "holder_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env(HOLDER_ENV, path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match lines.next() {
            // libtest prints the marker after its own "test holder_child ... ".
            Some(Ok(line)) if line.trim_end().ends_with("MAPPED") => break,
            Some(Ok(_)) => continue,
            other => panic!("holder child did not map the file: {other:?}"),
        }
    }
    child
}

/// Not a test: the body of the background process of [`eviction_names_the_process_that_maps_the_file`].
#[test]
#[ignore = "helper process started by eviction_names_the_process_that_maps_the_file"]
fn holder_child() {
    let Some(path) = std::env::var_os(HOLDER_ENV) else { return };
    let f = File::open(&path).unwrap();
    let (offset, len) = match std::env::var(HOLDER_PAGES_ENV) {
        Ok(range) => {
            let (first, count) = range.split_once(':').unwrap();
            let ps = page_size() as usize;
            (first.parse::<usize>().unwrap() * ps, count.parse::<usize>().unwrap() * ps)
        }
        Err(_) => (0, f.metadata().unwrap().len() as usize),
    };
    // SAFETY: a private read-only mapping of an open file, kept until the process is killed.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            f.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    assert_ne!(addr, libc::MAP_FAILED);
    println!("MAPPED");
    std::io::stdout().flush().unwrap();
    // The parent kills us; exit on our own after a minute so that nothing can outlive a run.
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn eviction_names_the_process_that_maps_the_file() {
    let _cache = shared();
    let dir = disk_dir();
    let held_file = cached_file(dir.path(), "mapped", 256 * 1024);
    let free_file = cached_file(dir.path(), "free", 64 * 1024);
    let child = spawn_holder(&held_file);
    let pid = child.0.id();
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap().trim_end().to_string();

    let paths = vec![held_file.clone(), free_file.clone()];
    let report = cache::evict(&paths, &[]).unwrap();
    assert!(!report.held, "{report:?}");
    assert_eq!(report.still_resident.len(), 1, "{report:?}");
    assert_eq!(report.still_resident[0].path, held_file);
    assert!(report.resident_pages_after > 0);
    let holder = report.holders.iter().find(|h| h.pid == pid).expect("child named as holder");
    assert_eq!(holder.comm, comm);
    assert_eq!(holder.path, held_file);
    assert!(holder.mapped);
    assert!(report.held_except_mapped(), "every remaining page is explained by a mapping");
    assert_eq!(report.held_pages, report.resident_pages_after, "{report:?}");
    assert_eq!(report.still_resident[0].held_pages, Some(report.still_resident[0].cached_pages));
    assert!(report.holders.iter().all(|h| h.path == held_file), "{report:?}");
    let reason = report.failure_reason().unwrap();
    assert!(reason.contains(&format!("pid {pid} ({comm})")), "{reason}");

    // The child is part of the measured tree when its pid is excluded: not named, and its
    // pages are not held by anyone else, so eviction failed.
    let verified = cache::verify_evicted(&paths, &[pid]).unwrap();
    assert!(!verified.held);
    assert!(verified.holders.iter().all(|h| h.pid != pid), "{verified:?}");
    assert_eq!(verified.held_pages, 0, "{verified:?}");
    assert!(!verified.held_except_mapped());

    // Once the holder is gone, eviction holds.
    drop(child);
    let report = cache::evict(&paths, &[]).unwrap();
    assert!(report.held, "{report:?}");
}

/// A cached file of `pages` pages read back one page at a time without read-ahead, so that the
/// page cache holds it in folios of one page (see [`pages_in_one_folio_are_held_together`]).
fn cached_file_in_small_folios(dir: &Path, name: &str, pages: u64) -> PathBuf {
    let path = cached_file(dir, name, (pages * page_size()) as usize);
    assert!(cache::evict(std::slice::from_ref(&path), &[]).unwrap().held);
    let f = File::open(&path).unwrap();
    // SAFETY: valid descriptor; advice only.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let mut page = vec![0u8; page_size() as usize];
    for i in 0..pages {
        // SAFETY: `page` is a writable buffer of its length.
        let n = unsafe {
            libc::pread(
                f.as_raw_fd(),
                page.as_mut_ptr().cast(),
                page.len(),
                (i * page_size()) as i64,
            )
        };
        assert_eq!(n, page.len() as isize);
    }
    assert_eq!(cache::residency(&path).unwrap().cached_pages, pages);
    path
}

/// Held is decided per page: a page counts as held only inside the range another process maps.
/// Here one process maps the first 16 pages of a 64-page file and a process of the "measured
/// tree" (excluded) maps all of it: the other 48 resident pages are an eviction that failed,
/// even after the retries.
#[test]
fn only_pages_in_a_range_another_process_maps_are_held() {
    let _cache = shared();
    let dir = disk_dir();
    let pages: u64 = 64;
    let path = cached_file_in_small_folios(dir.path(), "partly-held", pages);
    let outside = spawn_holder_of(&path, Some((0, 16)));
    let tree = spawn_holder(&path);
    let tree_pid = tree.0.id();

    let report = cache::evict(std::slice::from_ref(&path), &[tree_pid]).unwrap();
    let r = &report.still_resident[0];
    assert_eq!(r.cached_pages, pages, "{report:?}");
    assert_eq!(r.held_pages, Some(16), "{report:?}");
    assert_eq!(report.unheld_pages(), 48);
    assert!(!report.held_except_mapped() && !report.held);
    let why = report.unheld_reason().unwrap();
    assert!(why.contains("48 page(s) of 1 file(s)"), "{why}");
    assert!(report.holders.iter().any(|h| h.pid == outside.0.id()), "{report:?}");

    // Without the tree's mapping only the held range stays.
    drop(tree);
    let report = cache::evict(std::slice::from_ref(&path), &[]).unwrap();
    assert_eq!(report.resident_pages_after, 16, "{report:?}");
    assert_eq!(report.held_pages, 16);
    assert!(report.held_except_mapped() && !report.held);
    drop(outside);
}

/// The page cache drops whole folios, and reads a file read in one go into large ones: a
/// process that maps the first pages of a folio keeps all of it resident. Those pages are held
/// by that process, not an eviction that failed (seen through /proc/kpageflags, as root).
#[test]
fn pages_in_one_folio_are_held_together() {
    if !coldstart_testkit::require_root("/proc/kpageflags shows where folios begin and end") {
        return;
    }
    let _cache = shared();
    let dir = disk_dir();
    let path = cached_file(dir.path(), "one-folio", 64 * page_size() as usize);
    let outside = spawn_holder_of(&path, Some((0, 1)));
    let report = cache::evict(std::slice::from_ref(&path), &[]).unwrap();
    assert!(report.held_except_mapped(), "{report:?}");
    assert!(
        report.held_pages >= 1 && report.held_pages == report.resident_pages_after,
        "{report:?}"
    );
    drop(outside);
    let report = cache::evict(std::slice::from_ref(&path), &[]).unwrap();
    assert!(report.held, "{report:?}");
}

/// The pages start-up uses of a held file are counted against the held range.
#[test]
fn held_pages_start_up_uses_are_counted() {
    use coldstart_measure::cache::pages::{FileId, PageSet, TouchedPages};
    let _cache = shared();
    let dir = disk_dir();
    let path = cached_file_in_small_folios(dir.path(), "used", 32);
    let outside = spawn_holder_of(&path, Some((8, 16)));
    let mut touched = TouchedPages::new();
    let id = FileId::of(&File::open(&path).unwrap()).unwrap();
    touched.add(id, &PageSet::from_ranges([(0, 12)]));
    let verify = cache::Verify { exclude_pids: &[], touched: Some(&touched) };
    let report = cache::evict_with(std::slice::from_ref(&path), verify).unwrap();
    let r = &report.still_resident[0];
    assert_eq!((r.held_pages, r.touched_held_pages), (Some(16), Some(4)), "{report:?}");
    // A file start-up was not seen to map: unknown.
    let report = cache::evict_with(
        std::slice::from_ref(&path),
        cache::Verify { touched: Some(&TouchedPages::new()), ..verify },
    )
    .unwrap();
    assert_eq!(report.still_resident[0].touched_held_pages, None);
    drop(outside);
}

#[test]
fn drop_all_caches_empties_the_page_cache_as_root() {
    let _cache = PAGE_CACHE.write().unwrap_or_else(|e| e.into_inner());
    if !coldstart_sys::is_root() {
        let err = cache::drop_all_caches().unwrap_err();
        assert!(matches!(err, cache::CacheError::NotRoot), "{err}");
        return;
    }
    let dir = disk_dir();
    let path = cached_file(dir.path(), "dropped", 128 * 1024);
    cache::drop_all_caches().unwrap();
    let report = cache::verify_evicted(&[path], &[]).unwrap();
    assert!(report.held, "{report:?}");
}

fn page_size() -> u64 {
    // SAFETY: no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as u64 }
}

const UNPRIVILEGED_ENV: &str = "COLDSTART_TEST_UNPRIVILEGED_FILE";

/// Not a test: run by [`residency_hidden_from_other_users_is_unverified_not_evicted`] as an
/// unprivileged user.
#[test]
#[ignore = "helper process started by residency_hidden_from_other_users_is_unverified_not_evicted"]
fn unprivileged_child() {
    let Some(path) = std::env::var_os(UNPRIVILEGED_ENV) else { return };
    let path = PathBuf::from(path);
    let kind = cache::residency(&path).map(|_| ()).map_err(|e| e.kind());
    let report = cache::verify_evicted(std::slice::from_ref(&path), &[]).unwrap();
    println!("\nRESULT {kind:?} held={} unreadable={}", report.held, report.unreadable.len());
}

/// Kernels restrict `cachestat` to the file's owner, a writer or CAP_SYS_ADMIN, and `mincore`
/// then claims every page is resident: neither may be taken as "evicted".
#[test]
fn residency_hidden_from_other_users_is_unverified_not_evicted() {
    let _cache = shared();
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !coldstart_testkit::require_root("to start a process as another user") {
        return;
    }
    let dir = disk_dir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let path = cached_file(dir.path(), "root-owned", 64 * 1024);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    assert!(cache::evict(std::slice::from_ref(&path), &[]).unwrap().held);

    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "unprivileged_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(UNPRIVILEGED_ENV, &path)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("RESULT"))
        .unwrap_or_else(|| panic!("no result: {stdout} {}", String::from_utf8_lossy(&out.stderr)));
    // Kernels without the restriction (6.5 up to its introduction) show residency to anyone
    // who can open the file; then the eviction verifies.
    assert!(
        line == "RESULT Err(PermissionDenied) held=false unreadable=1"
            || line == "RESULT Ok(()) held=true unreadable=0",
        "{line}"
    );
}
