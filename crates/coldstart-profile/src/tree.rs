//! The process tree a tracer runs: killed whole on any error, a sleeping wait for its
//! state changes, and the names of the signals that end it. Shared by both function tracers
//! and the page runs.

/// Kills the whole tree unless disarmed: no stopped or orphaned process after an error.
pub(crate) struct TreeGuard {
    pub pgid: i32,
    pub armed: bool,
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        if self.armed {
            // SAFETY: signalling and reaping our own process group.
            unsafe {
                libc::kill(-self.pgid, libc::SIGKILL);
                let mut status = 0;
                while libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) > 0 {}
                libc::waitpid(self.pgid, &mut status, libc::__WALL);
                while libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) > 0 {}
            }
        }
    }
}

/// Wakes the tracer when a tracee stops: `SIGCHLD` is blocked in the tracing thread and read
/// from a `signalfd`, so an idle tracer sleeps in `poll` instead of spinning, and a trap is
/// handled as soon as it happens. (The callers block `SIGCHLD` before starting any helper
/// thread; the poll timeout bounds the delay if another thread consumed the signal.)
pub(crate) struct ChildWake {
    fd: i32,
}

impl ChildWake {
    pub(crate) fn new() -> ChildWake {
        let mask = block_sigchld();
        // SAFETY: a signalfd for the signal set just built; a failure leaves `fd` at -1.
        let fd = unsafe { libc::signalfd(-1, &mask, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        ChildWake { fd }
    }

    /// Sleep until a child changes state, readiness fires, or `ms` pass.
    pub(crate) fn wait(&self, ready_fd: Option<i32>, ms: i32) {
        let mut fds = Vec::with_capacity(2);
        if self.fd >= 0 {
            fds.push(libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 });
        }
        if let Some(fd) = ready_fd {
            fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        // SAFETY: polling and draining descriptors we own.
        unsafe {
            libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms);
            let mut info = [0u8; 128];
            while self.fd >= 0 && libc::read(self.fd, info.as_mut_ptr().cast(), info.len()) > 0 {}
        }
    }
}

impl Drop for ChildWake {
    fn drop(&mut self) {
        if self.fd >= 0 {
            // SAFETY: closing our signalfd.
            unsafe { libc::close(self.fd) };
        }
    }
}

/// The name of a signal that ended a process, as the profile's `stop` records it.
pub(crate) fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

/// Block `SIGCHLD` in the calling thread and return the set that holds it. Called before any
/// helper thread starts, so helper threads inherit the mask and the tracer's `signalfd` sees
/// every child state change.
pub(crate) fn block_sigchld() -> libc::sigset_t {
    // SAFETY: building a signal set and changing this thread's signal mask.
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut mask);
        libc::sigaddset(&mut mask, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut());
        mask
    }
}
