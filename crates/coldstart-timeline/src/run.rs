//! Starting the program for the traced run: held before `exec` until tracing is on
//! ([`coldstart_process::held`]), then executed; its readiness watched as `measure --ready`
//! defines it.

use std::ffi::OsString;
use std::io::{BufRead, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coldstart_process::held::{Held, SpawnError, Spawner};
use coldstart_ready::{FileMarker, Ready, READY_FD_ENV};

use crate::TimelineError;

/// What the child does before it waits to be let go: join the throttled cgroup of an emulated
/// device, then enter a mount namespace where the program's files are the device's copies.
pub(crate) struct Enter {
    pub hook: coldstart_storage::EnterHook,
    /// The throttled cgroup's `cgroup.procs`, open for writing.
    pub join: std::fs::File,
}

/// A child held before `exec`, waiting for [`Child::go`] before it executes the command.
pub(crate) struct Child {
    pub pid: i32,
    held: Held,
    ready: Arc<AtomicBool>,
    readers: Vec<std::thread::JoinHandle<()>>,
    /// The program's standard error, unless a `stderr:` signal reads it.
    stderr: Option<coldstart_sys::stderr::StderrFile>,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), TimelineError> {
    coldstart_sys::pipe(libc::O_CLOEXEC)
        .map_err(|e| TimelineError::Spawn { why: format!("pipe: {e}") })
}

/// Read `r` line by line, raising `ready` at the first line `re` matches; the rest is read to
/// the end so the program never blocks on a full pipe.
fn watch_lines(
    r: OwnedFd,
    re: regex::Regex,
    ready: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let reader = std::io::BufReader::new(std::fs::File::from(r));
        for line in reader.split(b'\n').map_while(Result::ok) {
            if re.is_match(&String::from_utf8_lossy(&line)) {
                ready.store(true, Ordering::SeqCst);
            }
        }
    })
}

impl Child {
    /// Start the child held in a process group of its own; once let go ([`Child::go`]) it
    /// executes `program` with `args` (its output discarded unless readiness reads it).
    pub(crate) fn fork(
        program: &std::path::Path,
        command: &[OsString],
        ready: &Ready,
        enter: Option<&Enter>,
    ) -> Result<Child, TimelineError> {
        let flag = Arc::new(AtomicBool::new(false));
        let stderr = match ready {
            Ready::Stderr(_) => None,
            _ => Some(
                coldstart_sys::stderr::StderrFile::new()
                    .map_err(|e| TimelineError::Spawn { why: format!("memfd_create: {e}") })?,
            ),
        };
        let capture = match ready {
            Ready::Stdout(re) | Ready::Stderr(re) => Some((re, pipe()?)),
            _ => None,
        };
        let fd_pipe = match ready {
            Ready::Fd => Some(pipe()?),
            _ => None,
        };
        let mut spawner = Spawner::new(program, command).null(0).env_remove(READY_FD_ENV);
        spawner = match (ready, &capture) {
            (Ready::Stdout(_), Some((_, (_, w)))) => spawner.fd(1, w.as_fd()),
            _ => spawner.null(1),
        };
        spawner = match (ready, &capture, &stderr) {
            (Ready::Stderr(_), Some((_, (_, w))), _) => spawner.fd(2, w.as_fd()),
            (_, _, Some(f)) => spawner.fd(2, f.as_fd()),
            _ => spawner.null(2),
        };
        if let Some((_, w)) = &fd_pipe {
            spawner = spawner.env(READY_FD_ENV, "3").fd(3, w.as_fd());
        }
        if let Some(e) = enter {
            spawner = spawner.join_cgroup(e.join.as_fd()).hook(&e.hook);
        }
        let held = spawner.spawn().map_err(|e| match e {
            SpawnError::Nul { .. } => {
                TimelineError::BadCommand { why: "an argument holds a NUL byte".into() }
            }
            SpawnError::Setup { call, source, .. } => {
                TimelineError::Spawn { why: format!("{call}: {source}") }
            }
            other => TimelineError::Spawn { why: other.to_string() },
        })?;
        // The write ends belong to the child now; closing ours lets the readers see EOF.
        let mut readers = Vec::new();
        if let Some((re, (r, _w))) = capture {
            readers.push(watch_lines(r, re.clone(), flag.clone()));
        }
        if let Some((r, _w)) = fd_pipe {
            let f = flag.clone();
            readers.push(std::thread::spawn(move || {
                let mut b = [0u8; 1];
                if std::fs::File::from(r).read(&mut b).is_ok_and(|n| n > 0) {
                    f.store(true, Ordering::SeqCst);
                }
            }));
        }
        Ok(Child { pid: held.pid(), held, ready: flag, readers, stderr })
    }

    /// Let the child execute the command. A child that cannot (its cgroup, its namespace or
    /// `exec` failed) has exited, with status 127, when this returns: the wait sees it end.
    pub(crate) fn go(&mut self) {
        let _ = self.held.release();
    }

    /// Wait until ready (or the timeout, or an interrupting signal: [`crate::TimelineError::Interrupted`]);
    /// `on_poll` runs every millisecond or so meanwhile. Returns the monotonic time readiness
    /// was seen, or `None` on timeout.
    pub(crate) fn wait_ready(
        &mut self,
        ready: &Ready,
        timeout: Duration,
        mut on_poll: impl FnMut(i32),
    ) -> Result<Option<u64>, TimelineError> {
        let marker = match ready {
            Ready::File(p) => Some(FileMarker::before(p)),
            _ => None,
        };
        let start = Instant::now();
        loop {
            if let Ok(Some(_)) = self.held.try_wait() {
                if matches!(ready, Ready::Exit) {
                    return Ok(Some(coldstart_sys::monotonic_ns()));
                }
                if !self.ready.load(Ordering::SeqCst) {
                    return Err(TimelineError::ExitedBeforeReady { said: self.said() });
                }
            }
            let now = match ready {
                Ready::Exit => false,
                Ready::Tcp(port) => coldstart_ready::tcp_accepts(*port),
                Ready::File(_) => marker.as_ref().is_some_and(FileMarker::appeared),
                _ => self.ready.load(Ordering::SeqCst),
            };
            if now {
                return Ok(Some(coldstart_sys::monotonic_ns()));
            }
            if start.elapsed() > timeout {
                return Ok(None);
            }
            if let Some(signal) = coldstart_process::cancel::raised() {
                return Err(TimelineError::Interrupted { signal });
            }
            on_poll(self.pid);
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// What the program said on standard error (see [`coldstart_sys::stderr::said`]).
    pub(crate) fn said(&self) -> String {
        let tail = self.stderr.as_ref().map(|f| f.last_lines()).unwrap_or_default();
        coldstart_sys::stderr::said(&tail)
    }

    /// The exit status, once reaped.
    pub(crate) fn status(&self) -> Option<i32> {
        self.held.exit().map(|e| e.raw())
    }
}

impl Drop for Child {
    /// The timeline's run is an extra run: what is left of it is killed and reaped.
    fn drop(&mut self) {
        self.held.kill();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

/// Run the command once, untraced, to its readiness or exit (to warm the page cache).
pub(crate) fn warm(
    program: &std::path::Path,
    command: &[OsString],
    ready: &Ready,
    timeout: Duration,
    enter: Option<&Enter>,
) -> Result<(), TimelineError> {
    let mut c = Child::fork(program, command, ready, enter)?;
    c.go();
    c.wait_ready(ready, timeout, |_| {})?;
    Ok(())
}
