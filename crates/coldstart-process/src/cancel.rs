//! One cancellation model for every command: `SIGINT`, `SIGTERM` and `SIGHUP` end the work
//! through its guards, and the binary exits with 128 plus the signal.
//!
//! The contract:
//!
//! - a command that must clean up before it ends (it owns a process tree, a cgroup, a mount, a
//!   tracefs instance, a temporary directory) holds a [`Catch`] ([`catch`]) while it works. The
//!   handler it installs only notes the signal (async-signal-safe: an atomic store and a
//!   `write` to a pipe) and never ends the process;
//! - long-running work observes the signal: a loop polls [`raised`] (or [`check`]) at least
//!   every 100 ms, and a wait that blocks (a child, FUSE, the network) puts [`fd`] among the
//!   descriptors it polls, which becomes readable at the signal and stays so;
//! - the work then returns [`Interrupted`] (or its own error that carries the signal) through
//!   its guards, whose `Drop` kills what it started and removes what it made. Killing a child's
//!   process group stays with the code that owns the child;
//! - the binary, seeing the error with [`raised`] set, exits with [`exit_code`] (130 for
//!   `SIGINT`, 143 for `SIGTERM`, 129 for `SIGHUP`), as a shell reports a command killed by
//!   the signal.
//!
//! Catches nest: the first one installs the handler, the last one dropped restores what was
//! there before, so a program left running after the work (`profile` forwarding its output)
//! can be interrupted as usual. The first signal is kept for the life of the process: work
//! started after it is cancelled at once.
//!
//! ```
//! let caught = coldstart_process::cancel::catch().unwrap();
//! assert_eq!(coldstart_process::cancel::raised(), None);
//! assert!(coldstart_process::cancel::check().is_ok());
//! drop(caught);
//! ```

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The signals that end a command.
pub const SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The first signal (0: none yet).
static FIRST: AtomicI32 = AtomicI32::new(0);
/// Signals received so far.
static COUNT: AtomicU64 = AtomicU64::new(0);
/// The most recent signal.
static LAST: AtomicI32 = AtomicI32::new(0);
/// Whether the kernel sent the most recent signal (a terminal's Ctrl-C), not a process.
static LAST_FROM_KERNEL: AtomicBool = AtomicBool::new(false);
/// The write end of the wake-up pipe (-1 until the first [`catch`]).
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// The wake-up pipe: (read end, write end), both non-blocking and close-on-exec; made once and
/// kept for the life of the process (the handler may write to it at any time).
static PIPE: OnceLock<(RawFd, RawFd)> = OnceLock::new();

/// Live catches, and the actions to restore when the last one goes.
static NESTING: Mutex<(usize, Vec<(i32, libc::sigaction)>)> = Mutex::new((0, Vec::new()));

extern "C" fn note(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: this thread's errno, kept for the code the signal interrupted.
    let errno = unsafe { *libc::__errno_location() };
    let _ = FIRST.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let from_kernel = !info.is_null() && unsafe { (*info).si_code } == libc::SI_KERNEL;
    LAST_FROM_KERNEL.store(from_kernel, Ordering::SeqCst);
    LAST.store(sig, Ordering::SeqCst);
    COUNT.fetch_add(1, Ordering::SeqCst);
    let fd = WAKE.load(Ordering::SeqCst);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; the pipe lives as long as the process. A full
        // pipe (EAGAIN) is fine: it is readable already.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn pipe() -> io::Result<(RawFd, RawFd)> {
    if let Some(p) = PIPE.get() {
        return Ok(*p);
    }
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    match PIPE.set((fds[0], fds[1])) {
        Ok(()) => Ok((fds[0], fds[1])),
        Err(_) => {
            // Another thread made it first: keep its pipe.
            // SAFETY: closing the two fds just made, which nothing else knows.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            Ok(*PIPE.get().expect("set by the other thread"))
        }
    }
}

/// While alive, `SIGINT`, `SIGTERM` and `SIGHUP` are noted ([`raised`], [`fd`]) instead of
/// ending the process (see the module documentation).
#[must_use = "the signals end the process again once the catch is dropped"]
pub struct Catch {
    _private: (),
}

/// Catch the signals that end a command (see [`Catch`]).
pub fn catch() -> io::Result<Catch> {
    let (_, w) = pipe()?;
    WAKE.store(w, Ordering::SeqCst);
    let mut nesting = NESTING.lock().unwrap_or_else(|e| e.into_inner());
    if nesting.0 == 0 {
        let mut previous = Vec::new();
        for sig in SIGNALS {
            // SAFETY: a handler that stores into atomics and writes to a pipe
            // (async-signal-safe); the old action is kept to be restored.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = note as *const () as usize;
                sa.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
                libc::sigemptyset(&mut sa.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut old) != 0 {
                    let e = io::Error::last_os_error();
                    for (s, o) in &previous {
                        libc::sigaction(*s, o, std::ptr::null_mut());
                    }
                    return Err(e);
                }
                previous.push((sig, old));
            }
        }
        nesting.1 = previous;
    }
    nesting.0 += 1;
    Ok(Catch { _private: () })
}

impl Drop for Catch {
    fn drop(&mut self) {
        let mut nesting = NESTING.lock().unwrap_or_else(|e| e.into_inner());
        nesting.0 = nesting.0.saturating_sub(1);
        if nesting.0 == 0 {
            for (sig, old) in std::mem::take(&mut nesting.1) {
                // SAFETY: restoring the action saved by the first `catch`.
                unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
            }
        }
    }
}

/// The first signal that asked the work to end, if one came.
pub fn raised() -> Option<i32> {
    Some(FIRST.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// `Err(Interrupted)` once a signal came.
pub fn check() -> Result<(), Interrupted> {
    match raised() {
        Some(signal) => Err(Interrupted { signal }),
        None => Ok(()),
    }
}

/// A descriptor that becomes readable at the first signal and stays readable (nothing reads
/// it): put it among the fds a blocking wait polls. Valid for the life of the process.
pub fn fd() -> io::Result<RawFd> {
    Ok(pipe()?.0)
}

/// Wait up to `timeout` for a signal (one that came before counts); returns the first.
pub fn wait(timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = raised() {
            return Some(s);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let Ok(fd) = fd() else {
            std::thread::sleep(left.min(Duration::from_millis(10)));
            continue;
        };
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: polling one fd of ours.
        unsafe { libc::poll(&mut p, 1, ms) };
    }
}

/// Signals received so far, and the most recent: a command that passes signals on to its
/// program (`run`, `launch`) compares the count with the one it saw last.
pub fn received() -> (u64, Option<i32>) {
    (COUNT.load(Ordering::SeqCst), Some(LAST.load(Ordering::SeqCst)).filter(|&s| s != 0))
}

/// Whether the kernel sent the most recent signal (a terminal's Ctrl-C, which reached the
/// whole foreground process group, a program started in it included) rather than a process.
pub fn last_from_kernel() -> bool {
    LAST_FROM_KERNEL.load(Ordering::SeqCst)
}

/// The work ended because of a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interrupted by {}", name(*signal))]
pub struct Interrupted {
    /// The signal's number (`SIGINT`, `SIGTERM` or `SIGHUP`).
    pub signal: i32,
}

impl Interrupted {
    /// Ending on a signal is the environment's doing, not a failure of the work.
    pub fn category(&self) -> coldstart_error::Category {
        coldstart_error::Category::Environment
    }
}

/// The exit code of a command that ended on `signal`: 128 + its number, as a shell says it.
pub fn exit_code(signal: i32) -> u8 {
    (128 + signal).clamp(0, 255) as u8
}

/// `SIGTERM` and the like, by name.
pub fn name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGKILL => "SIGKILL",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGCHLD => "SIGCHLD",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test: the signal is process-wide, so two tests would see each other's.
    #[test]
    fn a_signal_is_noted_woken_on_and_not_fatal_while_caught() {
        let outer = catch().unwrap();
        let inner = catch().unwrap();
        drop(inner);
        assert_eq!(raised(), None);
        assert_eq!(wait(Duration::from_millis(20)), None);
        let waiter = std::thread::spawn(|| {
            let started = Instant::now();
            (wait(Duration::from_secs(5)), started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: raising a caught signal in this process.
        unsafe { libc::raise(libc::SIGTERM) };
        let (got, _) = waiter.join().unwrap();
        assert_eq!(got, Some(libc::SIGTERM));
        assert_eq!(check(), Err(Interrupted { signal: libc::SIGTERM }));
        let mut p = libc::pollfd { fd: fd().unwrap(), events: libc::POLLIN, revents: 0 };
        // SAFETY: polling our pipe.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 1, "the fd stays readable");
        // SAFETY: as above; the first signal is kept.
        unsafe { libc::raise(libc::SIGINT) };
        assert_eq!(raised(), Some(libc::SIGTERM));
        assert_eq!(received(), (2, Some(libc::SIGINT)));
        assert!(!last_from_kernel(), "raised by this process");
        assert_eq!(exit_code(libc::SIGINT), 130);
        assert_eq!(Interrupted { signal: libc::SIGTERM }.to_string(), "interrupted by SIGTERM");
        drop(outer);
    }
}
