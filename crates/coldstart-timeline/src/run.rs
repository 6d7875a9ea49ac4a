//! Starting the program for the traced run: forked, held at a pipe until tracing is on, then
//! executed; its readiness watched as `measure --ready` defines it.

use std::ffi::{CString, OsString};
use std::io::{BufRead, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coldstart_ready::{FileMarker, Ready, READY_FD_ENV};

use crate::TimelineError;

/// What the child does before it waits to be let go: join the throttled cgroup of an emulated
/// device, then enter a mount namespace where the program's files are the device's copies.
pub(crate) struct Enter {
    pub hook: coldstart_storage::EnterHook,
    pub join: Box<dyn Fn() -> std::io::Result<()> + Send + Sync>,
}

/// A forked child, waiting for [`Child::go`] before it executes the command.
pub(crate) struct Child {
    pub pid: i32,
    go: Option<OwnedFd>,
    ready: Arc<AtomicBool>,
    readers: Vec<std::thread::JoinHandle<()>>,
    reaped: Option<i32>,
    /// The program's standard error, unless a `stderr:` signal reads it.
    stderr: Option<coldstart_sys::stderr::StderrFile>,
}

fn cstring(s: &std::ffi::OsStr) -> Result<CString, TimelineError> {
    CString::new(s.as_bytes())
        .map_err(|_| TimelineError::BadCommand { why: "an argument holds a NUL byte".into() })
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
    /// Fork; the child joins a process group of its own, waits for [`Child::go`], then
    /// executes `program` with `args` (its output discarded unless readiness reads it).
    pub(crate) fn fork(
        program: &std::path::Path,
        command: &[OsString],
        ready: &Ready,
        enter: Option<&Enter>,
    ) -> Result<Child, TimelineError> {
        let path = cstring(program.as_os_str())?;
        let argv: Vec<CString> = command.iter().map(|a| cstring(a)).collect::<Result<_, _>>()?;
        let (go_r, go_w) = pipe()?;
        let flag = Arc::new(AtomicBool::new(false));
        let mut readers = Vec::new();
        let devnull = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(|e| TimelineError::Spawn { why: format!("/dev/null: {e}") })?;
        let null = devnull.as_raw_fd();
        let stderr = match ready {
            Ready::Stderr(_) => None,
            _ => Some(
                coldstart_sys::stderr::StderrFile::new()
                    .map_err(|e| TimelineError::Spawn { why: format!("memfd_create: {e}") })?,
            ),
        };
        let (mut out_fd, mut err_fd) = (null, stderr.as_ref().map_or(null, |f| f.raw_fd()));
        let mut keep: Vec<OwnedFd> = Vec::new();
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        match ready {
            Ready::Stdout(re) | Ready::Stderr(re) => {
                let (r, w) = pipe()?;
                if matches!(ready, Ready::Stdout(_)) {
                    out_fd = w.as_raw_fd();
                } else {
                    err_fd = w.as_raw_fd();
                }
                keep.push(w);
                readers.push(watch_lines(r, re.clone(), flag.clone()));
            }
            Ready::Fd => {
                let (r, w) = pipe()?;
                env.push((READY_FD_ENV.into(), "3".into()));
                let f = flag.clone();
                readers.push(std::thread::spawn(move || {
                    let mut b = [0u8; 1];
                    if std::fs::File::from(r).read(&mut b).is_ok_and(|n| n > 0) {
                        f.store(true, Ordering::SeqCst);
                    }
                }));
                keep.push(w);
            }
            _ => {}
        }
        let ready_w = match ready {
            Ready::Fd => keep.last().map(|w| w.as_raw_fd()),
            _ => None,
        };
        let envp: Vec<CString> = env
            .iter()
            .filter(|(k, _)| !(k == READY_FD_ENV && ready_w.is_none()))
            .filter_map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv).ok()
            })
            .collect();
        let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_p.push(std::ptr::null());
        let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
        envp_p.push(std::ptr::null());
        let go_fd = go_r.as_raw_fd();
        // SAFETY: the child only makes async-signal-safe calls (setpgid, the storage hooks'
        // open, write, unshare, mount and chdir, read, dup2, execve,
        // _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(TimelineError::Spawn {
                why: format!("fork: {}", std::io::Error::last_os_error()),
            });
        }
        if pid == 0 {
            unsafe {
                libc::setpgid(0, 0);
                // The hooks make system calls on memory prepared before the fork.
                if let Some(e) = enter {
                    if (e.join)().is_err() || e.hook.run().is_err() {
                        libc::_exit(126);
                    }
                }
                let mut b = [0u8; 1];
                if libc::read(go_fd, b.as_mut_ptr().cast(), 1) != 1 {
                    libc::_exit(127);
                }
                libc::dup2(null, 0);
                libc::dup2(out_fd, 1);
                libc::dup2(err_fd, 2);
                if let Some(w) = ready_w {
                    libc::dup2(w, 3);
                }
                libc::execve(path.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr());
                libc::_exit(127);
            }
        }
        // SAFETY: also set from the parent, so the group exists before `go`.
        unsafe { libc::setpgid(pid, pid) };
        drop(go_r);
        drop(keep);
        Ok(Child { pid, go: Some(go_w), ready: flag, readers, reaped: None, stderr })
    }

    /// Let the child execute the command.
    pub(crate) fn go(&mut self) {
        if let Some(w) = self.go.take() {
            let _ = std::fs::File::from(w).write_all_once();
        }
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
            if self.reaped.is_none() {
                let mut status = 0;
                // SAFETY: polling our own child.
                if unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) } == self.pid {
                    self.reaped = Some(status);
                    if matches!(ready, Ready::Exit) {
                        return Ok(Some(coldstart_sys::monotonic_ns()));
                    }
                    if !self.ready.load(Ordering::SeqCst) {
                        return Err(TimelineError::ExitedBeforeReady { said: self.said() });
                    }
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
            if let Some(signal) = coldstart_profile::interrupt::raised() {
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
        self.reaped
    }
}

impl Drop for Child {
    /// The timeline's run is an extra run: what is left of it is killed and reaped.
    fn drop(&mut self) {
        drop(self.go.take());
        if self.reaped.is_none() {
            // SAFETY: killing and reaping our own child's process group.
            unsafe {
                libc::kill(-self.pid, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(self.pid, &mut status, 0);
            }
        } else {
            // SAFETY: what the program left running in its group.
            unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

trait WriteOnce {
    fn write_all_once(self) -> std::io::Result<()>;
}

impl WriteOnce for std::fs::File {
    fn write_all_once(mut self) -> std::io::Result<()> {
        std::io::Write::write_all(&mut self, b"g")
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
