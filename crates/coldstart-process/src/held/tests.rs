//! The held child, started for real: held before exec, released, reported, killed with its group.

use super::*;

fn sh(script: &str) -> Spawner<'static> {
    Spawner::new("/bin/sh", ["sh", "-c", script])
}

#[test]
fn the_child_runs_only_once_released_in_a_group_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let file = mark.to_str().unwrap();
    let held = Spawner::new("/bin/sh", ["sh", "-c", "echo $$ > \"$0\"", file]).spawn().unwrap();
    drop(held);
    assert!(!mark.exists(), "a child dropped before release never runs the program");

    let mut held = Spawner::new("/bin/sh", ["sh", "-c", "echo $$ > \"$0\"", file])
        .exec_clock()
        .null(0)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(!mark.exists(), "held before exec");
    let before = now_ns();
    held.release().unwrap();
    assert!(held.exec_clock_ns().unwrap() >= before);
    let exit = held.wait_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(exit.code(), Some(0));
    let pid: i32 = std::fs::read_to_string(&mark).unwrap().trim().parse().unwrap();
    assert_eq!(pid, held.pid());
    // SAFETY: getpgid of our own process.
    assert_ne!(unsafe { libc::getpgid(0) }, held.pid());
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn a_failed_exec_and_a_failed_directory_are_reported_with_their_step() {
    let mut held = Spawner::new("/nonexistent/program", ["program"]).spawn().unwrap();
    match held.release() {
        Err(SpawnError::Child { stage: Stage::Exec, source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT))
        }
        other => panic!("{other:?}"),
    }
    assert!(held.reaped());

    let mut held = sh("true").current_dir("/nonexistent/dir").spawn().unwrap();
    let e = held.release().unwrap_err();
    assert!(matches!(e, SpawnError::Child { stage: Stage::Directory, .. }), "{e:?}");
    assert!(e.to_string().contains("working directory"), "{e}");
}

struct Fails;

// SAFETY: returns an error without any call.
unsafe impl BeforeExec for Fails {
    fn run(&self) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
}

#[test]
fn a_hook_runs_in_the_child_and_its_error_comes_back() {
    let mut held = sh("true").hook(&Fails).spawn().unwrap();
    match held.release() {
        Err(SpawnError::Child { stage: Stage::Hook, source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EPERM))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn descriptors_are_laid_even_over_the_ones_they_come_from() {
    let (r, w) = pipe_above(3).unwrap();
    let mut held = sh("echo hello >&3; echo bye >&7")
        .fd(3, w.as_fd())
        .fd(7, w.as_fd())
        .null(0)
        .spawn()
        .unwrap();
    drop(w);
    held.release().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut out).unwrap();
    assert_eq!(out, "hello\nbye\n");
    assert_eq!(held.wait().unwrap().unwrap().code(), Some(0));
}

#[test]
fn the_environment_is_changed_and_a_stopped_child_continues() {
    let (r, w) = pipe_above(3).unwrap();
    let mut held = sh("echo \"$COLDSTART_HELD_A-${HOME+set}\"")
        .env("COLDSTART_HELD_A", "one")
        .env("COLDSTART_HELD_A", "two")
        .env_remove("HOME")
        .fd(1, w.as_fd())
        .hold(Hold::Stop)
        .spawn()
        .unwrap();
    drop(w);
    assert!(held.try_wait().unwrap().is_none(), "stopped, not ended");
    held.release().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut out).unwrap();
    assert_eq!(out, "two-\n");
}

#[test]
fn dropping_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let file = pidfile.to_str().unwrap();
    let mut held = Spawner::new("/bin/sh", ["sh", "-c", "sleep 30 & echo $! > \"$0\"; wait", file])
        .null(0)
        .spawn()
        .unwrap();
    held.release().unwrap();
    let t = Instant::now();
    while std::fs::read_to_string(&pidfile).map_or(true, |s| !s.ends_with('\n')) {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5));
    }
    let grandchild: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(held.wait_timeout(Duration::from_millis(50)).unwrap().is_none());
    let pgid = held.pid();
    drop(held);
    assert!(ends_within_5_s(grandchild), "the group {pgid} lives on");
}

/// Whether `pid` ends within 5 s. It is not ours to reap: it has ended once it is gone or a
/// zombie of init.
fn ends_within_5_s(pid: i32) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(s) if s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')) => {
                return true
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    false
}

#[test]
fn dropping_kills_the_group_a_reaped_child_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let file = pidfile.to_str().unwrap();
    let mut held = Spawner::new("/bin/sh", ["sh", "-c", "sleep 30 & echo $! > \"$0\"", file])
        .null(0)
        .spawn()
        .unwrap();
    held.release().unwrap();
    held.wait().unwrap();
    assert!(held.reaped());
    let grandchild: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(held.group_alive(), "the reaped child's group keeps its id while one lives");
    drop(held);
    assert!(ends_within_5_s(grandchild), "the left-behind {grandchild} lives on");
}
