//! Waiting for readiness: the loop between `exec` and the readiness signal (or the timeout).
//!
//! One `ppoll` waits on everything that can end the wait at once: the root's pidfd (exit), the
//! captured stream (`stdout:`/`stderr:`), the `--ready fd` pipe and the X connection
//! (`window:`). Signals that cannot be waited on (`tcp:`, `file:`, and the window list after a
//! missed event) are polled at their interval, and the descriptor of
//! [`coldstart_process::cancel::fd`] ends the wait with
//! [`LaunchError::Interrupted`] at a signal (the run's guards then kill the tree), and a discovery run samples the tree's files
//! every [`DISCOVERY_SAMPLE_INTERVAL`]. Readiness is timed when the loop wakes, before any
//! check that takes time of its own; a polled signal at the moment it was seen.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::discovery::{Discovery, DISCOVERY_SAMPLE_INTERVAL};
use super::spawn::Launched;
use super::{LaunchError, RunSpec};
use crate::cgroup::RunCgroup;
use coldstart_formats::measure::Outcome;
use coldstart_ready::{self as ready, Ready};

/// Captured-output reader: keeps the last partial line, matches complete lines.
struct LineMatcher {
    buf: Vec<u8>,
    matched: bool,
}

impl LineMatcher {
    fn feed(&mut self, data: &[u8], re: Option<&regex::Regex>) {
        let Some(re) = re else { return };
        if self.matched {
            return;
        }
        self.buf.extend_from_slice(data);
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            if re.is_match(&String::from_utf8_lossy(&line[..line.len() - 1])) {
                self.matched = true;
                self.buf.clear();
                return;
            }
        }
    }
    /// At end of stream a last line without newline counts too.
    fn finish(&mut self, re: Option<&regex::Regex>) {
        if let Some(re) = re {
            if !self.matched
                && !self.buf.is_empty()
                && re.is_match(&String::from_utf8_lossy(&self.buf))
            {
                self.matched = true;
            }
        }
        self.buf.clear();
    }
}

/// How the wait ended.
pub(super) struct Waited {
    /// The monotonic clock when the readiness signal was seen; `None` when it was not.
    pub(super) ready_at: Option<u64>,
    /// `Timeout` or `ExitedBeforeReady`; `None` when ready.
    pub(super) outcome: Option<Outcome>,
    /// The end of what a `stderr:` signal read (the last [`CAPTURED_TAIL`] bytes).
    pub(super) stderr_tail: Vec<u8>,
}

/// Bytes of a captured standard error kept for a failed run's message.
const CAPTURED_TAIL: usize = 16 * 1024;

/// Wait until `child`'s tree is ready by `spec.ready`, exits before it, or `spec.timeout`
/// passes, draining any captured output so the program never blocks on a full pipe.
pub(super) fn until_ready(
    spec: &RunSpec,
    cgroup: Option<&RunCgroup>,
    watch: Option<&ready::x11::WindowWatch>,
    child: &mut Launched,
    mut discovery: Option<&mut Discovery>,
) -> Result<Waited, LaunchError> {
    let regex = match &spec.ready {
        Ready::Stdout(r) | Ready::Stderr(r) => Some(r),
        _ => None,
    };
    let mut matcher = LineMatcher { buf: Vec::new(), matched: false };
    let deadline = Instant::now() + spec.timeout;
    let mut next_window_poll = Instant::now();
    let mut root_exited = false;
    let mut ready_at: Option<u64> = None;
    let mut outcome = None;
    let mut buf = vec![0u8; 65536];
    let mut stderr_tail = Vec::new();
    let cancel_fd = coldstart_process::cancel::fd().map_err(LaunchError::Setup)?;
    loop {
        coldstart_process::cancel::check()?;
        let now = Instant::now();
        if now >= deadline {
            outcome = Some(Outcome::Timeout);
            break;
        }
        let mut fds = vec![libc::pollfd { fd: child.pidfd(), events: libc::POLLIN, revents: 0 }];
        if root_exited {
            fds[0].fd = -1;
        }
        if let Some(r) = &child.capture {
            fds.push(libc::pollfd { fd: r.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        if let Some(r) = &child.ready_r {
            fds.push(libc::pollfd { fd: r.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        // A signal wakes the loop at once (the fd stays readable; `check` above ends it).
        fds.push(libc::pollfd { fd: cancel_fd, events: libc::POLLIN, revents: 0 });
        // An X event (a window created, mapped or reparented) wakes the loop at once.
        let x_idx = watch.map(|w| {
            fds.push(libc::pollfd { fd: w.fd(), events: libc::POLLIN, revents: 0 });
            fds.len() - 1
        });
        let mut wait = deadline - now;
        match &spec.ready {
            Ready::Tcp(_) | Ready::File(_) => wait = wait.min(ready::POLL_INTERVAL),
            Ready::Window(_) => wait = wait.min(next_window_poll.saturating_duration_since(now)),
            _ => {}
        }
        if root_exited {
            // Still waiting for a non-exit signal from the rest of the tree.
            wait = wait.min(Duration::from_millis(1));
        }
        if discovery.is_some() {
            wait = wait.min(DISCOVERY_SAMPLE_INTERVAL);
        }
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: polling our fds (ppoll: sub-millisecond timeouts).
        let rc = unsafe {
            libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null())
        };
        // Its error now, before the sampling below makes calls of its own (a signal's EINTR
        // was read as "Success" after them, and ended the run as a failure to prepare it).
        let poll_error = (rc < 0).then(io::Error::last_os_error);
        if let (Some(d), false) = (discovery.as_deref_mut(), root_exited) {
            d.sample_tree(cgroup, child.pid);
        }
        let t = coldstart_sys::monotonic_ns();
        if let Some(e) = poll_error {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(LaunchError::Setup(e));
        }
        let mut idx = 1;
        if let Some(r) = &child.capture {
            if fds[idx].revents != 0 {
                // SAFETY: reading into our buffer.
                let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n > 0 {
                    matcher.feed(&buf[..n as usize], regex);
                    if matches!(spec.ready, Ready::Stderr(_)) {
                        stderr_tail.extend_from_slice(&buf[..n as usize]);
                        let over = stderr_tail.len().saturating_sub(CAPTURED_TAIL);
                        stderr_tail.drain(..over);
                    }
                } else {
                    matcher.finish(regex);
                    child.capture = None;
                }
            }
            idx += 1;
        }
        if let Some(r) = &child.ready_r {
            if fds[idx].revents != 0 {
                // SAFETY: reading into our buffer.
                let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n > 0 && ready_at.is_none() {
                    ready_at = Some(t);
                }
                if n <= 0 {
                    child.ready_r = None;
                }
            }
        }
        if matcher.matched && ready_at.is_none() {
            ready_at = Some(t);
        }
        let exited_now = !root_exited && fds[0].revents != 0;
        if exited_now {
            root_exited = true;
            let _ = child.held.wait();
            if matches!(spec.ready, Ready::Exit) {
                ready_at = Some(t);
            }
        }
        if ready_at.is_none() {
            let polled = match &spec.ready {
                Ready::Tcp(port) => ready::tcp_accepts(*port),
                Ready::File(_) => child.marker.as_ref().is_some_and(ready::FileMarker::appeared),
                Ready::Window(re) => match watch {
                    Some(w)
                        if x_idx.is_some_and(|i| fds[i].revents != 0)
                            || Instant::now() >= next_window_poll =>
                    {
                        next_window_poll = Instant::now() + ready::WINDOW_POLL_INTERVAL;
                        let found = w.mapped(re)?;
                        // Events that came in during the walk were read with its replies and
                        // will not make the socket readable: walk again now.
                        if !found && w.drain_events()? {
                            next_window_poll = Instant::now();
                        }
                        found
                    }
                    _ => false,
                },
                _ => false,
            };
            if polled {
                ready_at = Some(coldstart_sys::monotonic_ns());
            }
        }
        if ready_at.is_some() {
            break;
        }
        if root_exited {
            // The signal may still come from the rest of the tree; stop when nothing is left.
            let alive = match cgroup {
                Some(cg) => !cg.pids().is_empty(),
                None => false,
            };
            if !alive && child.capture.is_none() {
                let (code, signal) = child.code_signal();
                outcome = Some(Outcome::ExitedBeforeReady { code, signal });
                break;
            }
        }
    }
    Ok(Waited { ready_at, outcome, stderr_tail })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_complete_lines_and_a_last_partial_line() {
        let re = regex::Regex::new("^ready$").unwrap();
        let mut m = LineMatcher { buf: Vec::new(), matched: false };
        m.feed(b"starting\nrea", Some(&re));
        assert!(!m.matched);
        m.feed(b"dy\n", Some(&re));
        assert!(m.matched);
        let mut m = LineMatcher { buf: Vec::new(), matched: false };
        m.feed(b"ready", Some(&re));
        assert!(!m.matched);
        m.finish(Some(&re));
        assert!(m.matched);
    }
}
