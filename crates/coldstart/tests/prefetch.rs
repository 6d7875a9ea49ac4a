//! `prefetch record|show` and `launch --prefetch`: a database is never applied to another
//! build, a deleted file does no harm, an oversize database is refused or cut clearly, launch
//! behaves like its command (exit codes, signals), and the replay makes the recorded pages
//! resident in a cold cache.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use coldstart_profile_format::{PageAccess, PageFile, PageProfile, SOURCE_EXACT};
use coldstart_profile_format::{Profile, Stop};

fn coldstart() -> Command {
    Command::cargo_bin("coldstart").unwrap()
}

/// A scratch directory on a disk file system (not tmpfs: its pages can leave the cache).
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("coldstart-prefetch-").tempdir_in("/var/tmp").unwrap()
}

/// An exact page profile in which start-up touched `pages` of each file, in this order.
fn page_profile(files: &[(&Path, &[(u64, u64)])]) -> Profile {
    use std::os::unix::fs::MetadataExt;
    let mut p = PageProfile {
        source: SOURCE_EXACT.into(),
        sampled: false,
        files: Vec::new(),
        accesses: Vec::new(),
        lost_events: 0,
    };
    for (i, (path, ranges)) in files.iter().enumerate() {
        let m = std::fs::metadata(path).unwrap();
        p.files.push(PageFile {
            path: path.to_path_buf(),
            size: m.len(),
            mtime: m.mtime(),
            build_id: None,
            dev: "0:0".into(),
            ino: m.ino(),
        });
        for &(page, count) in ranges.iter() {
            p.accesses.push(PageAccess {
                file: i,
                page,
                count,
                t_ns: 0,
                event: "read".into(),
                pid: 1,
            });
        }
    }
    Profile {
        format: "coldstart-profile".into(),
        version: 1,
        workload: "default".into(),
        command: vec![],
        created_unix: 0,
        duration_ns: 1,
        stop: Stop::Exit { code: 0 },
        modules: vec![],
        pages: Some(p),
        warnings: vec![],
        images: vec![],
        workloads: vec![],
    }
}

/// `prefetch record --from-profile` of `profile` into `dir/name.db`.
fn record(dir: &Path, name: &str, profile: &Profile) -> PathBuf {
    let p = dir.join(format!("{name}.json"));
    profile.write(&p).unwrap();
    let db = dir.join(format!("{name}.db"));
    let out = coldstart()
        .args(["prefetch", "record", "--from-profile"])
        .arg(&p)
        .arg("-o")
        .arg(&db)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    db
}

fn data_file(dir: &Path, name: &str, bytes: usize) -> PathBuf {
    let path = dir.join(name);
    let content: Vec<u8> = (0..bytes).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&path, content).unwrap();
    path
}

/// Evict `path` from the page cache (its own file: no root needed).
fn evict(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: an advice call on our own descriptor.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// Pages of `path` in `page .. page + pages` that are resident.
fn resident(path: &Path, page: u64, pages: u64) -> u64 {
    coldstart_prefetch::replay::resident_pages(path, page * 4096, pages * 4096).unwrap().0
}

#[test]
fn a_database_recorded_for_one_build_is_not_applied_to_another() {
    if !coldstart_testkit::require_program("clang-19", "clang-19") {
        return;
    }
    let dir = scratch();
    let src = "int main(void) { return 7; }";
    let build = |id: &str| {
        coldstart_testkit::compile_c(dir.path(), "prog", src, &[&format!("-Wl,--build-id=0x{id}")])
    };
    let prog = build("1111111111111111");
    let mut profile = page_profile(&[(&prog, &[(0, 1)])]);
    let before = std::fs::metadata(&prog).unwrap();
    profile.pages.as_mut().unwrap().files[0].build_id = Some("1111111111111111".into());
    let db = record(dir.path(), "prog", &profile);
    // The same program, another build: same size, same mtime, another build-id.
    build("2222222222222222");
    let after = std::fs::metadata(&prog).unwrap();
    assert_eq!(before.len(), after.len(), "the two builds differ only in their build-id");
    std::fs::File::options()
        .write(true)
        .open(&prog)
        .unwrap()
        .set_modified(before.modified().unwrap())
        .unwrap();
    let out = coldstart()
        .args(["launch", "-v", "--prefetch"])
        .arg(&db)
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    assert!(
        err.contains("1 file skipped") && err.contains("build-id is no longer 1111111111111111"),
        "{err}"
    );
    assert!(err.contains("0 reads"), "{err}");
    let show = coldstart().args(["prefetch", "show"]).arg(&db).output().unwrap();
    assert!(String::from_utf8_lossy(&show.stdout).contains("changed: build-id"));
}

#[test]
fn a_database_naming_a_deleted_file_does_no_harm() {
    let dir = scratch();
    let gone = data_file(dir.path(), "gone", 64 << 10);
    let kept = data_file(dir.path(), "kept", 64 << 10);
    let db = record(dir.path(), "two", &page_profile(&[(&gone, &[(0, 4)]), (&kept, &[(2, 3)])]));
    std::fs::remove_file(&gone).unwrap();
    let out = coldstart()
        .args(["launch", "-v", "--gap", "0", "--prefetch"])
        .arg(&db)
        .args(["--", "sh", "-c", "exit 0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("1 file skipped") && err.contains("gone (No such file"), "{err}");
    // One count, its noun singular; one size, in the units of every other command.
    assert!(err.contains("prefetch: 1 file opened") && err.contains("; 1 read, 12 KiB"), "{err}");
}

#[test]
fn an_oversize_database_is_refused_and_the_command_still_starts() {
    let dir = scratch();
    let db = dir.path().join("huge.db");
    let f = std::fs::File::create(&db).unwrap();
    f.set_len(65 << 20).unwrap();
    let out = coldstart().args(["prefetch", "show"]).arg(&db).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("more than any prefetch database coldstart writes"), "{err}");
    let out = coldstart()
        .args(["launch", "--prefetch"])
        .arg(&db)
        .args(["--", "sh", "-c", "exit 4"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("starting sh without prefetch"), "{err}");
    let out =
        coldstart().args(["measure", "--prefetch"]).arg(&db).args(["--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_database_larger_than_memory_is_cut_to_its_first_ranges() {
    let dir = scratch();
    let small = data_file(dir.path(), "small", 8192);
    // A sparse file larger than the memory of any test machine: nothing of it is read.
    let big = dir.path().join("big");
    std::fs::File::create(&big).unwrap().set_len(1 << 40).unwrap();
    // Written as a database: a profile of a terabyte of pages is refused before (MAX_PAGES).
    let mut db = coldstart_prefetch::Database::new(vec![]);
    for (path, pages) in [(&big, (1u64 << 40) / 4096), (&small, 2)] {
        db.files.push(coldstart_prefetch::identity::identify(path).unwrap());
        let file = db.files.len() - 1;
        db.ranges.push(coldstart_prefetch::Range { file, page: 0, pages, seen: 1 });
    }
    let path = dir.path().join("big.db");
    db.write(&path).unwrap();
    let db = path;
    let out = coldstart()
        .args(["launch", "-v", "--prefetch"])
        .arg(&db)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("more than half the available memory: only its first 0 B"), "{err}");
    assert!(err.contains("; 0 reads, 0 B"), "{err}");
}

#[test]
fn launch_passes_exit_codes_and_deaths_by_signal_through() {
    for (script, code) in [
        ("exit 0", 0),
        ("exit 3", 3),
        ("exit 255", 255),
        ("kill -TERM $$", 143),
        ("kill -SEGV $$", 139),
    ] {
        let out = coldstart()
            .args(["launch", "--prefetch", "/nonexistent.db", "--", "sh", "-c", script])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{script}");
    }
    let out = coldstart()
        .args(["launch", "--prefetch", "/nonexistent.db", "--", "/nonexistent/prog"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
}

#[test]
fn launch_forwards_sigint_sigterm_and_sighup_to_its_command() {
    let dir = scratch();
    for (signal, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143), (libc::SIGHUP, 129)] {
        let marker = dir.path().join(format!("got-{signal}"));
        // The command reports the signal it got, then dies of it.
        let script = format!(
            "trap 'echo got > {m}; trap - {signal}; kill -{signal} $$' {signal}; echo ready; while :; do sleep 0.05; done",
            m = marker.display()
        );
        let mut child = coldstart()
            .args(["launch", "--prefetch", "/nonexistent.db", "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "ready");
        coldstart_testkit::signal(child.id(), signal);
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "launch did not end after signal {signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(code), "signal {signal}");
        assert!(marker.exists(), "the command got signal {signal}");
    }
}

#[test]
fn the_replay_makes_the_recorded_pages_resident_in_a_cold_cache() {
    let _lock = coldstart_testkit::cache_lock();
    let dir = scratch();
    // 8 MiB: one range longer than any read-ahead (a single readahead(2) call stops there).
    let file = data_file(dir.path(), "data", 8 << 20);
    let ranges: &[(u64, u64)] = &[(1500, 4), (0, 1), (200, 768), (1900, 1)];
    let db = record(dir.path(), "data", &page_profile(&[(&file, ranges)]));
    for mechanism in ["readahead", "fadvise", "populate", "huge"] {
        for order in ["first-touch", "physical"] {
            evict(&file);
            let before: u64 = ranges.iter().map(|&(p, n)| resident(&file, p, n)).sum();
            assert!(before < 8, "the file stayed cached ({before} pages): eviction failed");
            let out = coldstart()
                .args([
                    "launch",
                    "-v",
                    "--gap",
                    "0",
                    "--mechanism",
                    mechanism,
                    "--order",
                    order,
                    "--prefetch",
                ])
                .arg(&db)
                .args(["--", "true"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            if mechanism == "readahead" || mechanism == "huge" {
                // Locked as it arrived (3 MiB: within the usual lock limit of 8 MiB).
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(err.contains("MiB locked in memory"), "{err}");
            }
            for &(page, pages) in ranges {
                assert_eq!(
                    resident(&file, page, pages),
                    pages,
                    "{mechanism}, {order}: pages {page}+{pages}"
                );
            }
            // Far from every range, and more than a read-ahead away: not read (`huge` reads
            // the 2 MiB blocks that hold a range, and every block here holds one).
            assert!(
                mechanism == "huge" || resident(&file, 1200, 64) < 64,
                "{mechanism}, {order}: read more than recorded"
            );
        }
    }
}

#[test]
fn record_as_root_names_the_program_and_its_libraries() {
    if !coldstart_testkit::require_root("exact page profiles") {
        return;
    }
    let dir = scratch();
    let db = dir.path().join("sh.db");
    let out = coldstart()
        .args(["prefetch", "record", "-o"])
        .arg(&db)
        .args(["--", "/usr/bin/python3", "-c", "import json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let db = coldstart_prefetch::Database::read(&db).unwrap();
    let paths: Vec<String> = db.files.iter().map(|f| f.path.display().to_string()).collect();
    assert!(paths.iter().any(|p| p.starts_with("/usr/bin/python3")), "{paths:?}");
    assert!(paths.iter().any(|p| p.contains("libc.so")), "{paths:?}");
    assert!(paths.iter().any(|p| p.contains("json")), "{paths:?}");
    let exe =
        db.files.iter().find(|f| f.path.to_string_lossy().starts_with("/usr/bin/python3")).unwrap();
    assert!(exe.build_id.is_some(), "the executable's build-id is recorded");
}

#[test]
fn record_refresh_records_again_only_when_a_file_changed() {
    let dir = scratch();
    let data = data_file(dir.path(), "data", 64 << 10);
    let profile = page_profile(&[(&data, &[(0, 4)])]);
    let p = dir.path().join("p.json");
    profile.write(&p).unwrap();
    let db = dir.path().join("d.db");
    let refresh = || {
        coldstart()
            .args(["prefetch", "record", "--refresh", "--from-profile"])
            .arg(&p)
            .arg("-o")
            .arg(&db)
            .output()
            .unwrap()
    };
    assert!(refresh().status.success());
    let written = std::fs::read(&db).unwrap();
    let out = refresh();
    assert!(String::from_utf8_lossy(&out.stdout).contains("is up to date"), "{out:?}");
    assert_eq!(std::fs::read(&db).unwrap(), written);
    // The file changes (another size): the database is recorded again, from the profile,
    // which now names a file that changed, so it is left out and said so.
    std::fs::write(&data, vec![1u8; 100]).unwrap();
    let out = refresh();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("1 file changed since") && err.contains("recording again"), "{err}");
    assert!(err.contains("changed since the profile"), "{err}");
}

#[test]
fn measure_prefetch_compare_runs_the_command_through_launch_and_alone() {
    let dir = scratch();
    let data = data_file(dir.path(), "data", 64 << 10);
    let db = record(dir.path(), "m", &page_profile(&[(&data, &[(0, 4)])]));
    let json = dir.path().join("m.json");
    let out = coldstart()
        .args(["measure", "--cache", "hot", "--runs", "2", "--compare", "--prefetch"])
        .arg(&db)
        .arg("--export-json")
        .arg(&json)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let a: Vec<&str> = report["commands"][0]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let b: Vec<&str> = report["commands"][1]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(&a[1..3], ["launch", "--prefetch"], "{a:?}");
    assert_eq!(a.last(), Some(&"true"));
    assert_eq!(b, ["true"]);
}
