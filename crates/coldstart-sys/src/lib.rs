//! The few Linux calls that several stages make, written once.
//!
//! Each is a thin, safe wrapper: the stage crates keep their own logic (what to count, what
//! to trace) and share only the system interface. Nothing here allocates on a hot path or
//! keeps state, but for the count of a process's users of tracefs ([`tracefs::Tracefs`]).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

pub mod file;
pub mod fuse;
pub mod map;
pub mod net;
pub mod perf;
pub mod stderr;
pub mod tracefs;

/// Whether the process runs with an effective user id of 0 (cgroups, `drop_caches`,
/// tracefs, loop devices and ptrace of any program need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether process `pid` exists (a signal 0 reaches it, or it exists but is not ours; never
/// for 0). The owner check of everything a killed coldstart leaves behind, named after its pid.
pub fn pid_alive(pid: u32) -> bool {
    // 0 would ask about our own process group, a pid above i32::MAX about another group.
    let Ok(pid @ 1..) = i32::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of the kernel's trace events and of
/// `perf_event_open` with `use_clockid`, so times from both can be compared.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A pipe, `(read end, write end)`, with `pipe2` flags (`O_CLOEXEC`, `O_NONBLOCK`).
pub fn pipe(flags: i32) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds on success, which we own from here on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two fresh descriptors nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The size of a memory page (4096 where the kernel does not say).
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn only_existing_processes_are_alive() {
        assert!(pid_alive(std::process::id()));
        assert!(pid_alive(1), "init exists, though not ours");
        assert!(!pid_alive(0), "not our process group");
        assert!(!pid_alive(u32::MAX), "not a process group either");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid), "reaped");
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(monotonic_ns() >= a + 2_000_000);
    }

    #[test]
    fn a_pipe_carries_bytes_and_has_its_flags() {
        let (r, w) = pipe(libc::O_CLOEXEC).unwrap();
        std::fs::File::from(w).write_all(b"ok").unwrap();
        let mut s = String::new();
        std::fs::File::from(r).read_to_string(&mut s).unwrap();
        assert_eq!(s, "ok");
        let (r, _w) = pipe(libc::O_CLOEXEC | libc::O_NONBLOCK).unwrap();
        let err = std::fs::File::from(r).read(&mut [0u8; 1]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn is_root_agrees_with_the_kernel() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let euid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap();
        assert_eq!(is_root(), euid == "0");
    }
}
