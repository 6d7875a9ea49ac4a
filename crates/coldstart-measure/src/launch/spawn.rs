//! Starting the tree: `fork` and `exec` of the root in its cgroup, the pipes between parent
//! and child, and the clock the child reads just before `exec`.
//!
//! [`prepare`] does everything that can fail before `fork` (resolving the program, building
//! `argv` and the environment as C strings, opening the pipes and the cgroup's `cgroup.procs`
//! files), so the child between `fork` and `exec` only makes async-signal-safe calls on data
//! made ready for it. [`spawn`] forks; the child joins the cgroup, waits on the *go* pipe,
//! stores the monotonic clock in a shared page and execs, reporting a failed `exec` through the
//! close-on-exec *err* pipe. The parent, between `fork` and *go*, attaches the instruction
//! counter and takes the readings that are subtracted at readiness: the wall time and those
//! readings start at the same point for every run.

use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::counters::{self, Before};
use super::{resolve_program, LaunchError, RunSpec};
use crate::cgroup::RunCgroup;
use crate::ready::{self, Ready};

fn cstr(s: &OsStr) -> Result<CString, LaunchError> {
    CString::new(s.as_bytes())
        .map_err(|_| LaunchError::Setup(io::Error::other(format!("{s:?} contains a NUL byte"))))
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    coldstart_sys::pipe(libc::O_CLOEXEC)
}

/// A page shared between parent and child, where the child stores the clock before `exec`.
struct SharedClock(*mut u64);

impl SharedClock {
    fn new() -> io::Result<SharedClock> {
        // SAFETY: an anonymous shared mapping of one page.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedClock(p.cast()))
    }
    fn get(&self) -> u64 {
        // SAFETY: the page is mapped for our lifetime; volatile because the child wrote it.
        unsafe { std::ptr::read_volatile(self.0) }
    }
}

impl Drop for SharedClock {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.0.cast(), 4096) };
    }
}

/// What the child needs, made before `fork`.
pub(super) struct Prepared {
    program: PathBuf,
    prog_c: CString,
    argv_c: Vec<CString>,
    env_c: Vec<CString>,
    cwd_c: Option<CString>,
    devnull_in: fs::File,
    devnull_out: fs::File,
    /// The program's standard error, unless a `stderr:` signal reads it.
    stderr_file: Option<coldstart_sys::stderr::StderrFile>,
    /// The pipe of the stream a `stdout:`/`stderr:` signal reads.
    capture: Option<(OwnedFd, OwnedFd)>,
    /// The pipe whose write end is `$COLDSTART_READY_FD` (`--ready fd`).
    ready_pipe: Option<(OwnedFd, OwnedFd)>,
    err: (OwnedFd, OwnedFd),
    go: (OwnedFd, OwnedFd),
    clock: SharedClock,
    /// The run cgroup's `cgroup.procs` files, open for writing.
    procs_fds: Vec<OwnedFd>,
}

/// Prepare the run of `spec` in `cgroup`: everything that can fail before `fork`.
pub(super) fn prepare(spec: &RunSpec, cgroup: Option<&RunCgroup>) -> Result<Prepared, LaunchError> {
    let program = resolve_program(&spec.argv)?;
    let prog_c = cstr(program.as_os_str())?;
    let argv_c: Vec<CString> =
        spec.argv.iter().map(|a| cstr(OsStr::new(a))).collect::<Result<_, _>>()?;

    let setup = LaunchError::Setup;
    let devnull_in = fs::File::open("/dev/null").map_err(setup)?;
    let devnull_out = fs::OpenOptions::new().write(true).open("/dev/null").map_err(setup)?;
    let capture = match &spec.ready {
        Ready::Stdout(_) | Ready::Stderr(_) => Some(pipe().map_err(setup)?),
        _ => None,
    };
    let stderr_file = match &spec.ready {
        Ready::Stderr(_) => None,
        _ => Some(coldstart_sys::stderr::StderrFile::new().map_err(setup)?),
    };
    let ready_pipe = match &spec.ready {
        Ready::Fd => Some(pipe().map_err(setup)?),
        _ => None,
    };
    let err = pipe().map_err(setup)?;
    let go = pipe().map_err(setup)?;
    let clock = SharedClock::new().map_err(setup)?;

    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut set = |k: &str, v: String| {
        env.retain(|(ek, _)| ek != k);
        env.push((k.into(), v.into()));
    };
    for (k, v) in &spec.env {
        set(k, v.clone());
    }
    if let Some((_, w)) = &ready_pipe {
        set(ready::READY_FD_ENV, w.as_raw_fd().to_string());
    }
    let env_c: Vec<CString> = env
        .iter()
        .map(|(k, v)| {
            let mut b = k.as_bytes().to_vec();
            b.push(b'=');
            b.extend_from_slice(v.as_bytes());
            cstr(OsStr::from_bytes(&b))
        })
        .collect::<Result<_, _>>()?;
    let cwd_c = spec.cwd.as_ref().map(|c| cstr(c.as_os_str())).transpose()?;

    let procs_fds: Vec<OwnedFd> = match cgroup {
        Some(cg) => cg
            .procs_files()
            .iter()
            .map(|p| fs::OpenOptions::new().write(true).open(p).map(OwnedFd::from))
            .collect::<io::Result<_>>()
            .map_err(setup)?,
        None => Vec::new(),
    };
    Ok(Prepared {
        program,
        prog_c,
        argv_c,
        env_c,
        cwd_c,
        devnull_in,
        devnull_out,
        stderr_file,
        capture,
        ready_pipe,
        err,
        go,
        clock,
        procs_fds,
    })
}

/// The root of a started run, between `exec` and the end of the run.
pub(super) struct Launched {
    pub(super) pid: libc::pid_t,
    pub(super) guard: ChildGuard,
    /// Readable when the root exits.
    pub(super) pidfd: OwnedFd,
    /// The clock the child read just before `exec`.
    pub(super) start_ns: u64,
    /// The read end of the captured stream; `None` at its end.
    pub(super) capture: Option<OwnedFd>,
    /// The read end of the `--ready fd` pipe; `None` at its end.
    pub(super) ready_r: Option<OwnedFd>,
    pub(super) marker: Option<ready::FileMarker>,
    /// The file the program's standard error goes to (not with a `stderr:` signal).
    pub(super) stderr_file: Option<coldstart_sys::stderr::StderrFile>,
    /// The instruction counter, when `perf_event_open` works.
    pub(super) perf: Option<OwnedFd>,
    /// The readings taken before `exec`, subtracted at readiness.
    pub(super) before: Before,
}

impl Prepared {
    /// Fork, let the child join the cgroup and exec; see the module docs for what happens between
    /// `fork` and `exec` on either side. `perf_supported` remembers whether the instruction
    /// counter could be attached (it is not tried again once it failed).
    pub(super) fn spawn(
        self,
        ready: &Ready,
        enter: Option<&crate::storage::EnterHook>,
        device_stat: Option<&Path>,
        perf_supported: &mut Option<bool>,
    ) -> Result<Launched, LaunchError> {
        let setup = LaunchError::Setup;
        // Standard error, when no signal reads it.
        let stderr_fd = match &self.stderr_file {
            Some(f) => f.raw_fd(),
            None => self.devnull_out.as_raw_fd(),
        };
        let (err_r, err_w) = self.err;
        let (go_r, go_w) = self.go;
        let mut argv_p: Vec<*const libc::c_char> = self.argv_c.iter().map(|c| c.as_ptr()).collect();
        argv_p.push(std::ptr::null());
        let mut env_p: Vec<*const libc::c_char> = self.env_c.iter().map(|c| c.as_ptr()).collect();
        env_p.push(std::ptr::null());
        let procs_raw: Vec<RawFd> = self.procs_fds.iter().map(|f| f.as_raw_fd()).collect();
        let (stdout_fd, stderr_fd) = match (ready, &self.capture) {
            (Ready::Stderr(_), Some((_, w))) => (self.devnull_out.as_raw_fd(), w.as_raw_fd()),
            (Ready::Stdout(_), Some((_, w))) => (w.as_raw_fd(), stderr_fd),
            _ => (self.devnull_out.as_raw_fd(), stderr_fd),
        };
        let ready_w = self.ready_pipe.as_ref().map(|(_, w)| w.as_raw_fd()).unwrap_or(-1);
        let clock_p = self.clock.0;

        // SAFETY: after fork the child only calls async-signal-safe functions on data prepared
        // above, then execve or _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(setup(io::Error::last_os_error()));
        }
        if pid == 0 {
            unsafe {
                child_after_fork(ChildPlan {
                    procs: &procs_raw,
                    stdin: self.devnull_in.as_raw_fd(),
                    stdout: stdout_fd,
                    stderr: stderr_fd,
                    ready_w,
                    go_r: go_r.as_raw_fd(),
                    err_w: err_w.as_raw_fd(),
                    cwd: self.cwd_c.as_ref().map(|c| c.as_ptr()),
                    enter,
                    clock: clock_p,
                    prog: self.prog_c.as_ptr(),
                    argv: argv_p.as_ptr(),
                    envp: env_p.as_ptr(),
                })
            }
        }
        // Parent.
        let mut guard = ChildGuard { pid, reaped: false, rusage: None, status: 0 };
        drop(err_w);
        drop(go_r);
        drop(self.procs_fds);
        let capture_r = self.capture.map(|(r, w)| {
            drop(w);
            r
        });
        let ready_r = self.ready_pipe.map(|(r, w)| {
            drop(w);
            r
        });
        let perf = if *perf_supported != Some(false) {
            let p = counters::perf_instructions(pid);
            *perf_supported = Some(p.is_some());
            p
        } else {
            None
        };
        let before = Before::read(device_stat);
        let marker = match ready {
            Ready::File(p) => Some(ready::FileMarker::before(p)),
            _ => None,
        };
        // Let the child exec.
        // SAFETY: writing one byte to our pipe.
        unsafe { libc::write(go_w.as_raw_fd(), b"g".as_ptr().cast(), 1) };
        drop(go_w);
        let mut errno = [0u8; 4];
        // SAFETY: reading up to 4 bytes; EOF means exec succeeded (the pipe is close-on-exec).
        let n = unsafe { libc::read(err_r.as_raw_fd(), errno.as_mut_ptr().cast(), 4) };
        if n == 4 {
            let e = io::Error::from_raw_os_error(i32::from_ne_bytes(errno));
            guard.reap();
            return Err(LaunchError::Exec { path: self.program, source: e });
        }
        let start_ns = self.clock.get();

        // SAFETY: pidfd_open on our own child.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if pidfd < 0 {
            return Err(setup(io::Error::last_os_error()));
        }
        // SAFETY: fresh fd.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
        Ok(Launched {
            pid,
            guard,
            pidfd,
            start_ns,
            capture: capture_r,
            ready_r,
            marker,
            stderr_file: self.stderr_file,
            perf,
            before,
        })
    }
}

impl Launched {
    /// Kill the whole tree (the cgroup, or without one the process group) and reap the root.
    pub(super) fn kill_tree(&mut self, cgroup: Option<&RunCgroup>) -> Result<(), LaunchError> {
        if let Some(cg) = cgroup {
            cg.kill_all(std::time::Duration::from_secs(5)).map_err(LaunchError::Setup)?;
        } else {
            // SAFETY: killing the process group we created.
            unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        }
        self.guard.reap();
        Ok(())
    }
}

struct ChildPlan<'a> {
    procs: &'a [RawFd],
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    ready_w: RawFd,
    go_r: RawFd,
    err_w: RawFd,
    cwd: Option<*const libc::c_char>,
    enter: Option<&'a crate::storage::EnterHook>,
    clock: *mut u64,
    prog: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
}

/// The child between `fork` and `exec`: async-signal-safe calls only.
unsafe fn child_after_fork(p: ChildPlan<'_>) -> ! {
    let fail = |err_w: RawFd| -> ! {
        let e = *libc::__errno_location();
        let b = e.to_ne_bytes();
        libc::write(err_w, b.as_ptr().cast(), 4);
        libc::_exit(127)
    };
    // Default signal state for the program.
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    for sig in [libc::SIGPIPE, libc::SIGINT, libc::SIGTERM, libc::SIGQUIT] {
        libc::signal(sig, libc::SIG_DFL);
    }
    libc::setpgid(0, 0);
    for &fd in p.procs {
        if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
            fail(p.err_w);
        }
    }
    if libc::dup2(p.stdin, 0) < 0 || libc::dup2(p.stdout, 1) < 0 || libc::dup2(p.stderr, 2) < 0 {
        fail(p.err_w);
    }
    if p.ready_w >= 0 {
        let flags = libc::fcntl(p.ready_w, libc::F_GETFD);
        libc::fcntl(p.ready_w, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
    }
    if let Some(cwd) = p.cwd {
        if libc::chdir(cwd) != 0 {
            fail(p.err_w);
        }
    }
    // Emulated storage: a private mount namespace with the copies over the originals; the
    // hook enters the working directory again through the new mounts.
    if let Some(enter) = p.enter {
        if enter.run().is_err() {
            fail(p.err_w);
        }
    }
    let mut b = 0u8;
    if libc::read(p.go_r, (&mut b as *mut u8).cast(), 1) != 1 {
        // The parent is gone (interrupted): do not start the program.
        libc::_exit(127);
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    std::ptr::write_volatile(p.clock, ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
    libc::execve(p.prog, p.argv, p.envp);
    fail(p.err_w)
}

/// The root child: reaped exactly once (on drop at the latest, after a SIGKILL).
pub(super) struct ChildGuard {
    pid: libc::pid_t,
    pub(super) reaped: bool,
    /// The root's `wait4` rusage, once reaped.
    pub(super) rusage: Option<libc::rusage>,
    status: libc::c_int,
}

impl ChildGuard {
    pub(super) fn reap(&mut self) {
        if self.reaped {
            return;
        }
        // SAFETY: wait4 on our own child.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let mut status = 0;
        let r = unsafe { libc::wait4(self.pid, &mut status, 0, &mut ru) };
        if r == self.pid {
            self.rusage = Some(ru);
            self.status = status;
        }
        self.reaped = true;
    }

    /// Reap the root if it has exited, without waiting.
    pub(super) fn try_reap(&mut self) {
        if self.reaped {
            return;
        }
        // SAFETY: wait4 on our own child, not blocking.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let mut status = 0;
        let r = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == self.pid {
            self.rusage = Some(ru);
            self.status = status;
            self.reaped = true;
        }
    }

    /// The exit code or the signal of the reaped root.
    pub(super) fn code_signal(&self) -> (Option<i32>, Option<i32>) {
        let s = self.status;
        if libc::WIFEXITED(s) {
            (Some(libc::WEXITSTATUS(s)), None)
        } else if libc::WIFSIGNALED(s) {
            (None, Some(libc::WTERMSIG(s)))
        } else {
            (None, None)
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: killing and reaping our own child (and its process group).
            unsafe {
                libc::kill(-self.pid, libc::SIGKILL);
                libc::kill(self.pid, libc::SIGKILL);
            }
            self.reap();
        }
    }
}
