//! Tests of the replay's planning and issuing, on real files in the page cache.

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
fn files_opened_by_several_threads_come_back_in_the_order_asked() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..40)
        .map(|i| {
            let p = dir.path().join(format!("f{i}"));
            if i % 7 != 3 {
                std::fs::write(&p, vec![0u8; i]).unwrap();
            }
            p
        })
        .collect();
    for jobs in [1, 16, 64] {
        let opened = open_all(paths.iter().map(|p| p.as_path()).collect(), jobs);
        assert_eq!(opened.len(), paths.len());
        for (i, r) in opened.iter().enumerate() {
            match r {
                Ok((_, meta)) => assert_eq!((meta.len(), i % 7 != 3), (i as u64, true)),
                Err(e) => assert_eq!((e.kind(), i % 7), (std::io::ErrorKind::NotFound, 3)),
            }
        }
    }
}

#[test]
fn ranges_closer_than_the_gap_are_one_read_in_first_touch_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, vec![7u8; 1 << 20]).unwrap();
    let db = db_for(&p, &[(200, 1), (0, 2), (4, 1)]);
    let o = ReplayOptions { gap: Some(2 * PAGE), order: Order::FirstTouch, ..Default::default() };
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

/// A copy of this test binary (an ELF file with a build-id) and a database naming it
/// with two ranges: the build-id's page and one far from it.
fn elf_db(dir: &Path) -> (PathBuf, Database) {
    let p = dir.join("elf");
    std::fs::copy(std::env::current_exe().unwrap(), &p).unwrap();
    let entry = identify(&p).unwrap();
    let at = entry.build_id_offset.expect("rustc links a build-id") / PAGE;
    let size = entry.size / PAGE;
    let db = db_for(&p, &[(at, 1), (size - 1, 1)]);
    (p, db)
}

#[test]
fn a_build_id_checked_in_the_sweep_drops_a_changed_file_and_keeps_a_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut db) = elf_db(dir.path());
    let o = ReplayOptions { gap: Some(0), order: Order::FirstTouch, ..Default::default() };
    let good = plan(&db, &o);
    assert_eq!((good.open.len(), good.requests.len()), (1, 2), "{:?}", good.skipped);
    let id = db.files[0].build_id.as_mut().unwrap();
    let flipped = if id.starts_with('0') { "1" } else { "0" };
    id.replace_range(0..1, flipped);
    for check_in_sweep in [true, false] {
        let bad = plan(&db, &ReplayOptions { check_in_sweep, ..o.clone() });
        assert!(bad.open.is_empty() && bad.requests.is_empty(), "{check_in_sweep}");
        assert_eq!(bad.skipped.len(), 1);
        assert!(bad.skipped[0].why.contains("build-id"), "{:?}", bad.skipped);
    }
}

#[test]
fn checking_a_build_id_in_the_sweep_reads_the_request_that_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let (p, db) = elf_db(dir.path());
    let file = File::open(&p).unwrap();
    let evict = || coldstart_sys::file::drop_cached(&file).unwrap();
    let o = ReplayOptions {
        gap: Some(0),
        order: Order::FirstTouch,
        mechanism: Mechanism::Populate,
        ..Default::default()
    };
    evict();
    let plan = plan(&db, &o);
    assert_eq!((plan.early, plan.requests.len()), (1, 2));
    let r = plan.requests.iter().find(|r| r.offset == db.ranges[0].page * PAGE).unwrap();
    assert_eq!(resident_pages(&p, r.offset, r.len).unwrap(), (1, 1));
    evict();
    let plan = super::plan(&db, &ReplayOptions { check_in_sweep: false, ..o });
    assert_eq!((plan.early, plan.requests.len()), (0, 2));
}

#[test]
fn huge_reads_the_range_and_issue_leaves_it_resident() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, vec![7u8; 5 << 20]).unwrap();
    evict(&p);
    // A range across a 2 MiB boundary, and the file's last page.
    let db = db_for(&p, &[(500, 20), ((5 << 20) / PAGE - 1, 1)]);
    let o = ReplayOptions {
        mechanism: Mechanism::Huge,
        gap: Some(0),
        hold: false,
        ..Default::default()
    };
    let plan = plan(&db, &o);
    assert_eq!(plan.mechanism, Mechanism::Huge);
    let issued = issue(&plan, &o);
    assert_eq!((issued.requests, issued.failed), (2, 0), "{:?}", issued.first_error);
    assert_eq!(resident_pages(&p, 500 * PAGE, 20 * PAGE).unwrap(), (20, 20));
    assert_eq!(resident_pages(&p, (5 << 20) - PAGE, PAGE).unwrap(), (1, 1));
}

/// Write back and drop the page cache of `path`.
fn evict(path: &Path) {
    let file = File::open(path).unwrap();
    file.sync_all().unwrap();
    coldstart_sys::file::drop_cached(&file).unwrap();
}

#[test]
fn locking_what_huge_read_reads_nothing_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, vec![7u8; 8 << 20]).unwrap();
    evict(&p);
    assert_eq!(resident_pages(&p, 0, 8 << 20).unwrap().0, 0, "not evicted");
    let db = db_for(&p, &[(0, 4)]);
    let o = ReplayOptions { mechanism: Mechanism::Huge, gap: Some(0), ..Default::default() };
    let plan = plan(&db, &o);
    let issued = issue(&plan, &o);
    assert_eq!(issued.held.bytes.load(Ordering::Relaxed), 4 * PAGE, "locked");
    assert_eq!(resident_pages(&p, 0, 4 * PAGE).unwrap(), (4, 4));
    // The lock's faults on the block's read-ahead mark read no window after it.
    assert_eq!(resident_pages(&p, 2 << 20, 6 << 20).unwrap().0, 0);
}

#[test]
fn auto_chooses_huge_on_a_rotational_disk_and_readahead_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, vec![7u8; 8192]).unwrap();
    let dev = std::fs::metadata(&p).unwrap().dev();
    let rotational = device_queue(dev, "rotational") == Some(1);
    let plan = plan(&db_for(&p, &[(0, 1)]), &ReplayOptions::default());
    let want = if rotational { Mechanism::Huge } else { Mechanism::Readahead };
    assert_eq!(plan.mechanism, want);
    let o = ReplayOptions::default();
    assert_eq!(jobs_for(&o, Mechanism::Huge), HUGE_JOBS);
    assert_eq!(jobs_for(&ReplayOptions { mechanism: Mechanism::Huge, ..o }, Mechanism::Huge), 1);
}

#[test]
fn physical_offsets_map_through_extents() {
    let extents = vec![(0, 1000, 100), (100, 5000, 50)];
    assert_eq!(physical(&extents, 10), Some(1010));
    assert_eq!(physical(&extents, 120), Some(5020));
    assert_eq!(physical(&extents, 150), None);
}
