//! Passing signals on to a command coldstart started and waits for (`launch`), and starting it
//! as it would start without coldstart: no signal blocked, or in a session of its own.
//!
//! The signals that end coldstart come from [`crate::cancel`]; the others a wrapper passes on
//! (`SIGQUIT`, `SIGUSR1`, ...) are blocked in every thread and taken with [`Blocked::wait`].

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

/// Signals blocked in this thread and the threads it starts afterwards, to be taken with
/// [`Blocked::wait`] instead of delivered.
pub struct Blocked {
    set: libc::sigset_t,
}

impl Blocked {
    /// Blocks `signals` (call it before starting threads that must not take them).
    pub fn new(signals: &[i32]) -> Blocked {
        // SAFETY: plain signal-mask calls on a set we own.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Blocked { set }
        }
    }

    /// Waits up to `timeout` for one of the signals: its number, and whether the kernel sent
    /// it (a terminal's key, which reached the whole process group) rather than a process.
    pub fn wait(&self, timeout: Duration) -> Option<(i32, bool)> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: sigtimedwait fills `info`, which we own, when it returns a signal.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let s = libc::sigtimedwait(&self.set, &mut info, &ts);
            (s > 0).then_some((s, info.si_code == libc::SI_KERNEL))
        }
    }
}

/// Sends `signal` to process `pid` (a child not yet reaped, so the pid is still its own).
pub fn send(pid: u32, signal: i32) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `command` starts with no signal blocked, whatever this thread blocks (as it would without
/// coldstart in between).
pub fn unblocked(command: &mut Command) -> &mut Command {
    // SAFETY: only sigemptyset and sigprocmask, both async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        })
    }
}

/// `command` starts in a session of its own (`setsid`), away from this terminal and its
/// signals: for work left running in the background.
pub fn own_session(command: &mut Command) -> &mut Command {
    // SAFETY: only setsid, async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        })
    }
}

/// Restores the default action of `SIGPIPE` (Rust ignores it), so that a closed pipe
/// (`coldstart ... | head`) ends the process quietly. Call it first, before any thread starts.
pub fn default_sigpipe() {
    // SAFETY: setting a disposition before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_signal_is_taken_by_wait_and_a_command_starts_with_none_blocked() {
        let blocked = Blocked::new(&[libc::SIGUSR2]);
        assert_eq!(blocked.wait(Duration::from_millis(1)), None);
        // To this thread: a process-directed signal could be taken by another test's thread.
        // SAFETY: raise has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGUSR2) };
        assert_eq!(blocked.wait(Duration::from_secs(1)).map(|(s, _)| s), Some(libc::SIGUSR2));
        let out = unblocked(Command::new("sh").args(["-c", "grep SigBlk /proc/self/status"]))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.trim().ends_with("0000000000000000"), "{text}");
    }
}
