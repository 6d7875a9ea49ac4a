//! How a reaped child ended: its wait status and resource usage.

use std::os::unix::process::ExitStatusExt;

/// How a reaped child ended, with its resource usage (its waited-for descendants included).
#[derive(Clone, Copy)]
pub struct Exit {
    raw: i32,
    rusage: libc::rusage,
}

impl Exit {
    /// The status and usage `wait4` gave.
    pub(super) fn new(raw: i32, rusage: libc::rusage) -> Exit {
        Exit { raw, rusage }
    }

    /// The exit code, when it exited.
    pub fn code(&self) -> Option<i32> {
        libc::WIFEXITED(self.raw).then(|| libc::WEXITSTATUS(self.raw))
    }

    /// The signal that ended it, when one did.
    pub fn signal(&self) -> Option<i32> {
        libc::WIFSIGNALED(self.raw).then(|| libc::WTERMSIG(self.raw))
    }

    /// The wait status as `std` has it.
    pub fn status(&self) -> std::process::ExitStatus {
        std::process::ExitStatus::from_raw(self.raw)
    }

    /// The wait status as `waitpid` returns it.
    pub fn raw(&self) -> i32 {
        self.raw
    }

    /// `wait4`'s resource usage of the child and its waited-for descendants.
    pub fn rusage(&self) -> &libc::rusage {
        &self.rusage
    }
}

impl std::fmt::Debug for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exit").field("code", &self.code()).field("signal", &self.signal()).finish()
    }
}
