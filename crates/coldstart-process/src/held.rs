//! The held child: a program forked, set up, and held just before its `execve` until the parent
//! lets it go, so that whatever watches it (a cgroup, a counter, a tracer) is in place before
//! its first instruction.
//!
//! A [`Spawner`] says what the child does between `fork` and `exec`, in this order:
//!
//! 1. reset the signal mask and the dispositions of `SIGPIPE`, `SIGINT`, `SIGTERM` and
//!    `SIGQUIT` (coldstart blocks or handles some; the program starts as a shell would start it);
//! 2. make a process group of its own (the parent does so too, so the group exists when
//!    [`Spawner::spawn`] returns): [`Held::signal_group`] reaches the whole tree but for
//!    processes that start a session of their own;
//! 3. join cgroups ([`Spawner::join_cgroup`]: a `cgroup.procs` file opened by the parent);
//! 4. ask to be traced ([`Spawner::trace`], `PTRACE_TRACEME`), or to die with the parent
//!    ([`Spawner::die_with_parent`]);
//! 5. close what it is told to ([`Spawner::close`]), lay its descriptors ([`Spawner::fd`],
//!    [`Spawner::null`]) and change its working directory;
//! 6. run the caller's [`BeforeExec`] hooks (a mount namespace, for instance);
//! 7. wait to be let go ([`Hold`]: a byte on the *go* pipe, or `SIGCONT` after a `SIGSTOP`);
//! 8. read the monotonic clock into a page shared with the parent ([`Spawner::exec_clock`])
//!    and `execve`.
//!
//! A step that fails, and a failed `execve`, is written to the close-on-exec *exec-error* pipe
//! ([`ExecReport`]) and ends the child: [`Held::release`] returns it as a
//! [`SpawnError::Child`] naming the step. The [`Held`] owns the child: it signals its group,
//! waits for it with or without a bound, and on `Drop` kills the group and reaps the child.
//!
//! Everything that can fail or allocate is done before `fork`: the child makes only
//! async-signal-safe calls on memory made ready for it.
//!
//! ```
//! use coldstart_process::held::Spawner;
//! let mut held = Spawner::new("/bin/sh", ["sh", "-c", "exit 3"]).null(0).spawn().unwrap();
//! held.release().unwrap();
//! let exit = held.wait().unwrap().unwrap();
//! assert_eq!(exit.code(), Some(3));
//! ```

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use coldstart_error::Category;

/// Work a child does between `fork` and `exec` ([`Spawner::hook`]), after its descriptors and
/// working directory are laid and before it is let go.
///
/// # Safety
///
/// [`BeforeExec::run`] is called in the child of a `fork` of a process that may have other
/// threads: it must make only async-signal-safe calls (no allocation, no lock) on memory
/// prepared before the `fork`, and must not unwind.
pub unsafe trait BeforeExec: Sync {
    /// Do the work; an error ends the child and is reported as [`Stage::Hook`].
    fn run(&self) -> io::Result<()>;
}

/// How the child waits before `exec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Reads one byte from the go pipe: [`Held::release`] writes it. A parent that dies
    /// first closes the pipe, and the child ends without running the program.
    Pipe,
    /// Stops itself with `SIGSTOP`: [`Spawner::spawn`] returns once it is stopped, and
    /// [`Held::release`] (or a tracer's `PTRACE_CONT`) continues it.
    Stop,
}

/// The step of the child between `fork` and `exec` that failed ([`SpawnError::Child`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Writing to a `cgroup.procs` file.
    Cgroup,
    /// `PTRACE_TRACEME`.
    Trace,
    /// `dup2` of a descriptor.
    Descriptors,
    /// `chdir` to the working directory.
    Directory,
    /// A [`BeforeExec`] hook.
    Hook,
    /// `execve` itself.
    Exec,
}

impl Stage {
    fn code(self) -> u32 {
        self as u32 + 1
    }

    fn from_code(code: u32) -> Stage {
        match code {
            1 => Stage::Cgroup,
            2 => Stage::Trace,
            3 => Stage::Descriptors,
            4 => Stage::Directory,
            5 => Stage::Hook,
            _ => Stage::Exec,
        }
    }

    fn doing(self) -> &'static str {
        match self {
            Stage::Cgroup => "join its cgroup",
            Stage::Trace => "ask to be traced (PTRACE_TRACEME)",
            Stage::Descriptors => "set up its standard streams",
            Stage::Directory => "enter its working directory",
            Stage::Hook => "prepare its environment before exec",
            Stage::Exec => "execute the program",
        }
    }
}

/// Why a held child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// A path, argument or variable holds a NUL byte, which `execve` cannot pass.
    #[error("{what} holds a NUL byte")]
    Nul {
        /// Which path, argument or variable.
        what: String,
    },
    /// A call of the parent before or at `fork` failed (nothing ran).
    #[error("cannot start {}: {call}: {source}", program.display())]
    Setup {
        /// The program to start.
        program: PathBuf,
        /// The call that failed (`pipe2`, `fork`, ...).
        call: &'static str,
        /// Its error.
        source: io::Error,
    },
    /// The child failed at `stage`, before running the program; it has been reaped.
    #[error("cannot start {}: the child could not {}: {source}", program.display(), stage.doing())]
    Child {
        /// The program to start.
        program: PathBuf,
        /// What the child was doing when it failed.
        stage: Stage,
        /// Its error.
        source: io::Error,
    },
}

impl SpawnError {
    /// What the user can do about it: a program that cannot be executed is a usage error, a
    /// refused trace or cgroup a missing privilege, anything else the machine's.
    pub fn category(&self) -> Category {
        match self {
            SpawnError::Nul { .. } => Category::Usage,
            SpawnError::Setup { source, .. } => Category::of_io(source, Category::Environment),
            SpawnError::Child { stage: Stage::Exec, .. } => Category::Usage,
            SpawnError::Child { source, .. } => Category::of_io(source, Category::Environment),
        }
    }
}

enum Source<'a> {
    Fd(BorrowedFd<'a>),
    Null,
}

/// A program to start held before `exec` (see the module docs); a builder like
/// [`std::process::Command`].
pub struct Spawner<'a> {
    program: PathBuf,
    argv: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
    fds: Vec<(RawFd, Source<'a>)>,
    close: Vec<RawFd>,
    cgroups: Vec<BorrowedFd<'a>>,
    hooks: Vec<&'a dyn BeforeExec>,
    trace: bool,
    die_with_parent: bool,
    hold: Hold,
    clock: bool,
    /// The errno `execve` would give for a name [`Spawner::command`] did not find.
    missing: Option<i32>,
}

impl<'a> Spawner<'a> {
    /// Run the file `program` (a path, not looked up: see [`crate::find_program`]) with the
    /// arguments `argv` (`argv[0]` included), in coldstart's environment, working directory
    /// and descriptors 0 to 2, held at the go pipe.
    pub fn new(
        program: impl Into<PathBuf>,
        argv: impl IntoIterator<Item = impl AsRef<OsStr>>,
    ) -> Spawner<'a> {
        Spawner {
            program: program.into(),
            argv: argv.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            env: Vec::new(),
            cwd: None,
            fds: Vec::new(),
            close: Vec::new(),
            cgroups: Vec::new(),
            hooks: Vec::new(),
            trace: false,
            die_with_parent: false,
            hold: Hold::Pipe,
            clock: false,
            missing: None,
        }
    }

    /// Run `name` as `execvp` would find it (a name without a slash is looked up in `PATH`,
    /// [`crate::find_program`]); a name that names no program fails at [`Spawner::spawn`] as
    /// `execve` would ([`Stage::Exec`], `ENOENT` or `EACCES`).
    pub fn command(
        name: impl AsRef<OsStr>,
        argv: impl IntoIterator<Item = impl AsRef<OsStr>>,
    ) -> Spawner<'a> {
        let name = name.as_ref();
        let found = if name.as_bytes().contains(&b'/') {
            Ok(PathBuf::from(name))
        } else {
            crate::find_program(name)
        };
        let mut spawner = Spawner::new(found.as_deref().unwrap_or(Path::new(name)), argv);
        if let Err(e) = found {
            spawner.missing = Some(match e {
                crate::LookupError::IsDirectory(_) | crate::LookupError::NotExecutable(_) => {
                    libc::EACCES
                }
                _ => libc::ENOENT,
            });
        }
        spawner
    }

    /// Set (or replace) a variable of the environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Remove a variable from the environment.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// The working directory (coldstart's own when not set).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// The child's descriptor `target` is a copy of `source` (kept across `exec`).
    pub fn fd(mut self, target: RawFd, source: BorrowedFd<'a>) -> Self {
        self.fds.push((target, Source::Fd(source)));
        self
    }

    /// The child's descriptor `target` is `/dev/null`, open for reading and writing.
    pub fn null(mut self, target: RawFd) -> Self {
        self.fds.push((target, Source::Null));
        self
    }

    /// Close the child's copy of `fd` before it is held (a descriptor that must not stay open
    /// in the program, even while `exec` reads its file).
    pub fn close(mut self, fd: BorrowedFd<'a>) -> Self {
        self.close.push(fd.as_raw_fd());
        self
    }

    /// Move the child into the cgroup of `procs`, its `cgroup.procs` file open for writing.
    pub fn join_cgroup(mut self, procs: BorrowedFd<'a>) -> Self {
        self.cgroups.push(procs);
        self
    }

    /// Run `hook` in the child before it is held.
    pub fn hook(mut self, hook: &'a dyn BeforeExec) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Ask to be traced by the parent (`PTRACE_TRACEME`); use with [`Hold::Stop`], so that the
    /// tracer sets its options while the child is stopped.
    pub fn trace(mut self) -> Self {
        self.trace = true;
        self
    }

    /// Have the child killed when the parent's thread ends (`PR_SET_PDEATHSIG`).
    pub fn die_with_parent(mut self) -> Self {
        self.die_with_parent = true;
        self
    }

    /// How the child is held ([`Hold::Pipe`] unless said).
    pub fn hold(mut self, hold: Hold) -> Self {
        self.hold = hold;
        self
    }

    /// Have the child read the monotonic clock just before `execve`
    /// ([`Held::exec_clock_ns`]).
    pub fn exec_clock(mut self) -> Self {
        self.clock = true;
        self
    }

    /// Fork the child and hold it (see the module docs); with [`Hold::Stop`], return once it
    /// has stopped.
    pub fn spawn(self) -> Result<Held, SpawnError> {
        let program = self.program.clone();
        if let Some(errno) = self.missing {
            let source = io::Error::from_raw_os_error(errno);
            return Err(SpawnError::Child { program, stage: Stage::Exec, source });
        }
        let setup = |call: &'static str| {
            let program = program.clone();
            move |source| SpawnError::Setup { program, call, source }
        };
        let nul = |what: &OsStr| SpawnError::Nul { what: format!("{what:?}") };
        let cstring = |s: &OsStr| CString::new(s.as_bytes()).map_err(|_| nul(s));
        let prog = cstring(self.program.as_os_str())?;
        let argv: Vec<CString> = self.argv.iter().map(|a| cstring(a)).collect::<Result<_, _>>()?;
        let env = environment(&self.env).map_err(|what| SpawnError::Nul { what })?;
        let cwd = self.cwd.as_ref().map(|c| cstring(c.as_os_str())).transpose()?;

        // Every descriptor the child reads from is numbered above every descriptor it lays, so
        // that laying one never closes another it still needs.
        let floor = self.fds.iter().map(|(t, _)| t + 1).max().unwrap_or(0).max(3);
        let null = if self.fds.iter().any(|(_, s)| matches!(s, Source::Null)) {
            Some(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/null")
                    .map_err(setup("open /dev/null"))?,
            )
        } else {
            None
        };
        let fds: Vec<(RawFd, OwnedFd)> = self
            .fds
            .iter()
            .map(|(target, source)| {
                let source = match source {
                    Source::Fd(fd) => *fd,
                    Source::Null => null.as_ref().expect("opened above").as_fd(),
                };
                Ok((*target, dup_above(source, floor)?))
            })
            .collect::<io::Result<_>>()
            .map_err(setup("fcntl(F_DUPFD_CLOEXEC)"))?;
        let cgroups: Vec<OwnedFd> = self
            .cgroups
            .iter()
            .map(|fd| dup_above(*fd, floor))
            .collect::<io::Result<_>>()
            .map_err(setup("fcntl(F_DUPFD_CLOEXEC)"))?;
        let (err_r, err_w) = pipe_above(floor).map_err(setup("pipe2"))?;
        let (go_r, go_w) = pipe_above(floor).map_err(setup("pipe2"))?;
        let clock =
            if self.clock { Some(SharedClock::new().map_err(setup("mmap"))?) } else { None };

        let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|c| c.as_ptr()).collect();
        argv_p.push(std::ptr::null());
        let mut env_p: Vec<*const libc::c_char> = env.iter().map(|c| c.as_ptr()).collect();
        env_p.push(std::ptr::null());
        let lay: Vec<(RawFd, RawFd)> = fds.iter().map(|(t, s)| (*t, s.as_raw_fd())).collect();
        let procs: Vec<RawFd> = cgroups.iter().map(|f| f.as_raw_fd()).collect();
        let plan = Plan {
            procs: &procs,
            trace: self.trace,
            die_with_parent: self.die_with_parent,
            lay: &lay,
            close: &self.close,
            cwd: cwd.as_ref().map(|c| c.as_ptr()),
            hooks: &self.hooks,
            hold: self.hold,
            go_r: go_r.as_raw_fd(),
            err_w: err_w.as_raw_fd(),
            clock: clock.as_ref().map_or(std::ptr::null_mut(), |c| c.0),
            prog: prog.as_ptr(),
            argv: argv_p.as_ptr(),
            envp: env_p.as_ptr(),
        };

        // SAFETY: between fork and exec the child only makes async-signal-safe calls on the
        // plan, made above, and ends in execve or _exit (`child` never returns).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(setup("fork")(io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: in the child of the fork above, as `child` requires.
            unsafe { child(&plan) }
        }
        // SAFETY: the child's own group, also made by the child: it exists before we return,
        // whichever runs first. An error (the child is gone already) shows at release.
        unsafe { libc::setpgid(pid, pid) };
        drop((err_w, go_r, fds, cgroups, null));
        let mut held = Held {
            pid,
            program: self.program,
            go: (self.hold == Hold::Pipe).then_some(go_w),
            report: ExecReport { pipe: Some(err_r), program: PathBuf::new() },
            pidfd: pidfd_open(pid).map_err(|e| e.raw_os_error().unwrap_or(libc::ENOSYS)),
            clock,
            state: State::Running,
            disowned: false,
        };
        held.report.program = held.program.clone();
        if self.hold == Hold::Stop {
            let mut status = 0;
            // SAFETY: waiting for our own child to stop (or end).
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED | libc::__WALL) };
            if r != pid || !libc::WIFSTOPPED(status) {
                if r == pid {
                    held.state = State::Gone;
                }
                return Err(held.report.error().unwrap_or_else(|| SpawnError::Setup {
                    program: held.program.clone(),
                    call: "waitpid",
                    source: io::Error::other(format!(
                        "the child did not stop before exec (wait status {status:#x})"
                    )),
                }));
            }
        }
        Ok(held)
    }
}

/// coldstart's environment with `changes` made, as `KEY=value` strings; a variable given
/// twice is kept once, where it was set last.
fn environment(changes: &[(OsString, Option<OsString>)]) -> Result<Vec<CString>, String> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for (key, value) in changes {
        env.retain(|(k, _)| k != key);
        if let Some(v) = value {
            env.push((key.clone(), v.clone()));
        }
    }
    env.iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).map_err(|_| format!("variable {k:?}"))
        })
        .collect()
}

/// A copy of `fd`, close-on-exec, numbered `floor` or above.
fn dup_above(fd: BorrowedFd<'_>, floor: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: duplicating a descriptor we borrow; the new one is ours.
    let raw = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor, owned from here.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A close-on-exec pipe whose ends are numbered `floor` or above.
fn pipe_above(floor: RawFd) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 fills the two descriptors, ours from here.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors, owned from here.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    if r.as_raw_fd() >= floor && w.as_raw_fd() >= floor {
        return Ok((r, w));
    }
    Ok((dup_above(r.as_fd(), floor)?, dup_above(w.as_fd(), floor)?))
}

/// A descriptor that is readable when process `pid` ends (`pidfd_open`, Linux 5.3).
fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor, owned from here.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as RawFd) })
}

/// A page shared between parent and child, where the child stores the clock before `exec`.
struct SharedClock(*mut u64);

// SAFETY: the page is only read by the parent (volatile) after the child wrote it; nothing in
// this process writes it.
unsafe impl Send for SharedClock {}
// SAFETY: as above: reads only.
unsafe impl Sync for SharedClock {}

impl SharedClock {
    fn new() -> io::Result<SharedClock> {
        // SAFETY: an anonymous shared mapping of one page, ours until dropped.
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
struct Plan<'a> {
    procs: &'a [RawFd],
    trace: bool,
    die_with_parent: bool,
    lay: &'a [(RawFd, RawFd)],
    close: &'a [RawFd],
    cwd: Option<*const libc::c_char>,
    hooks: &'a [&'a dyn BeforeExec],
    hold: Hold,
    go_r: RawFd,
    err_w: RawFd,
    clock: *mut u64,
    prog: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
}

/// The child between `fork` and `exec`.
///
/// # Safety
///
/// Only in the child of a `fork`, with `p` made before it: async-signal-safe calls only.
unsafe fn child(p: &Plan<'_>) -> ! {
    let fail = |stage: Stage, errno: i32| -> ! {
        let mut msg = [0u8; 8];
        msg[..4].copy_from_slice(&stage.code().to_ne_bytes());
        msg[4..].copy_from_slice(&errno.to_ne_bytes());
        libc::write(p.err_w, msg.as_ptr().cast(), msg.len());
        libc::_exit(127)
    };
    let errno = || *libc::__errno_location();
    // The program starts with no signal blocked and the default disposition of the signals
    // coldstart handles or ignores (ignored ones would stay ignored across exec).
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    for sig in [libc::SIGPIPE, libc::SIGINT, libc::SIGTERM, libc::SIGQUIT] {
        libc::signal(sig, libc::SIG_DFL);
    }
    libc::setpgid(0, 0);
    for &fd in p.procs {
        if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
            fail(Stage::Cgroup, errno());
        }
    }
    if p.trace && libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != 0 {
        fail(Stage::Trace, errno());
    }
    if p.die_with_parent {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    // Closed first: a descriptor closed never takes one laid (the sources are copies, apart).
    for &fd in p.close {
        libc::close(fd);
    }
    for &(target, source) in p.lay {
        if libc::dup2(source, target) < 0 {
            fail(Stage::Descriptors, errno());
        }
    }
    if let Some(cwd) = p.cwd {
        if libc::chdir(cwd) != 0 {
            fail(Stage::Directory, errno());
        }
    }
    for hook in p.hooks {
        if let Err(e) = hook.run() {
            fail(Stage::Hook, e.raw_os_error().unwrap_or(libc::EIO));
        }
    }
    match p.hold {
        Hold::Pipe => {
            let mut b = 0u8;
            if libc::read(p.go_r, (&mut b as *mut u8).cast(), 1) != 1 {
                // The parent is gone (or gave up): do not start the program.
                libc::_exit(127);
            }
        }
        Hold::Stop => {
            libc::raise(libc::SIGSTOP);
        }
    }
    if !p.clock.is_null() {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        std::ptr::write_volatile(p.clock, ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
    }
    libc::execve(p.prog, p.argv, p.envp);
    fail(Stage::Exec, errno())
}

/// The read end of the exec-error pipe: what the child reports when a step before `exec`, or
/// `exec` itself, fails. It closes when `exec` succeeds.
pub struct ExecReport {
    pipe: Option<OwnedFd>,
    program: PathBuf,
}

impl ExecReport {
    /// Wait until the child has executed the program (`None`) or failed before (the error).
    /// Once read, the report is gone: a second call returns `None`.
    pub fn error(&mut self) -> Option<SpawnError> {
        let pipe = self.pipe.take()?;
        let mut msg = [0u8; 8];
        let mut got = 0;
        while got < msg.len() {
            // SAFETY: reading into the rest of our buffer.
            let n = unsafe {
                libc::read(pipe.as_raw_fd(), msg[got..].as_mut_ptr().cast(), msg.len() - got)
            };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                return None;
            }
            got += n as usize;
        }
        let stage = Stage::from_code(u32::from_ne_bytes(msg[..4].try_into().expect("4 bytes")));
        let errno = i32::from_ne_bytes(msg[4..].try_into().expect("4 bytes"));
        Some(SpawnError::Child {
            program: self.program.clone(),
            stage,
            source: io::Error::from_raw_os_error(errno),
        })
    }
}

/// A child given up by [`Held::disown`]: still held if it was not released.
pub struct Disowned {
    /// Its process id, which is its group's.
    pub pid: i32,
    /// Its exec-error pipe.
    pub report: ExecReport,
    /// Readable when it ends (`None` on a kernel before 5.3).
    pub pidfd: Option<OwnedFd>,
}

enum State {
    Running,
    Exited(Exit),
    /// Reaped, its status unknown (a wait that failed, or a child that died before it stopped).
    Gone,
}

/// A child started by [`Spawner::spawn`], in a process group of its own, held before `exec`
/// until [`Held::release`]; killed with its group and reaped on `Drop` (unless
/// [`Held::disown`]ed).
pub struct Held {
    pid: i32,
    program: PathBuf,
    go: Option<OwnedFd>,
    report: ExecReport,
    pidfd: Result<OwnedFd, i32>,
    clock: Option<SharedClock>,
    state: State,
    disowned: bool,
}

impl Held {
    /// The child's process id, which is also its process group's.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Let the child run the program, and wait until it has (`exec` succeeded) or has failed
    /// to; a failed child is reaped. With [`Hold::Stop`] this sends `SIGCONT`.
    pub fn release(&mut self) -> Result<(), SpawnError> {
        match self.go.take() {
            Some(go) => {
                // SAFETY: writing one byte to our pipe.
                unsafe { libc::write(go.as_raw_fd(), b"g".as_ptr().cast(), 1) };
            }
            None => self.signal(libc::SIGCONT),
        }
        match self.report.error() {
            Some(e) => {
                let _ = self.wait();
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// The monotonic clock (ns) the child read just before `execve`, with
    /// [`Spawner::exec_clock`]; meaningful once [`Held::release`] returned.
    pub fn exec_clock_ns(&self) -> Option<u64> {
        self.clock.as_ref().map(SharedClock::get)
    }

    /// A descriptor readable when the child ends (an error on a kernel before 5.3).
    pub fn pidfd(&self) -> io::Result<BorrowedFd<'_>> {
        match &self.pidfd {
            Ok(fd) => Ok(fd.as_fd()),
            Err(errno) => Err(io::Error::from_raw_os_error(*errno)),
        }
    }

    /// Send `signal` to the child (nothing once it is reaped).
    pub fn signal(&self, signal: i32) {
        if matches!(self.state, State::Running) {
            // SAFETY: a signal to our own unreaped child: its pid is not reused.
            unsafe { libc::kill(self.pid, signal) };
        }
    }

    /// Send `signal` to every process of the child's group.
    pub fn signal_group(&self, signal: i32) {
        if self.group_id_reused() {
            return;
        }
        // SAFETY: a signal to the process group the child made (see `group_id_reused`).
        unsafe { libc::kill(-self.pid, signal) };
    }

    /// Whether any process of the child's group is left.
    pub fn group_alive(&self) -> bool {
        // SAFETY: signal 0 only checks.
        !self.group_id_reused() && unsafe { libc::kill(-self.pid, 0) == 0 }
    }

    /// Whether the group's id may name another group now. While the child is not reaped, its
    /// pid (the group's id) stays its own. Once it is reaped, the kernel keeps the number
    /// while any process of the group lives; when none does, the number is free, and a new
    /// process that takes it and makes its own group (as every held child does) would get
    /// the signals meant for this one. A process holding the number after the reap is such a
    /// process: then the group is left alone.
    fn group_id_reused(&self) -> bool {
        self.reaped() && std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
    }

    fn wait4(&mut self, flags: i32) -> io::Result<Option<Exit>> {
        match self.state {
            State::Exited(e) => return Ok(Some(e)),
            State::Gone => return Err(io::Error::from_raw_os_error(libc::ECHILD)),
            State::Running => {}
        }
        let mut raw = 0;
        // SAFETY: wait4 on our own child into locals.
        let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = loop {
            // SAFETY: as above.
            let r = unsafe { libc::wait4(self.pid, &mut raw, flags, &mut rusage) };
            if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break r;
        };
        if r == self.pid {
            let e = Exit::new(raw, rusage);
            self.state = State::Exited(e);
            Ok(Some(e))
        } else if r == 0 {
            Ok(None)
        } else {
            self.state = State::Gone;
            Err(io::Error::last_os_error())
        }
    }

    /// Reap the child if it has ended, without waiting.
    pub fn try_wait(&mut self) -> io::Result<Option<Exit>> {
        self.wait4(libc::WNOHANG)
    }

    /// Wait until the child ends and reap it (`ECHILD` once reaped without a status).
    pub fn wait(&mut self) -> io::Result<Option<Exit>> {
        self.wait4(0)
    }

    /// Wait at most `timeout` for the child to end; `None` if it has not.
    pub fn wait_timeout(&mut self, timeout: Duration) -> io::Result<Option<Exit>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.try_wait()? {
                return Ok(Some(e));
            }
            if !matches!(self.state, State::Running) {
                return Ok(None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            match &self.pidfd {
                Ok(fd) => {
                    let mut p =
                        libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                    let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
                    // SAFETY: polling our pidfd.
                    unsafe { libc::poll(&mut p, 1, ms) };
                }
                Err(_) => std::thread::sleep(left.min(Duration::from_millis(1))),
            }
        }
    }

    /// How the child ended, once reaped.
    pub fn exit(&self) -> Option<Exit> {
        match self.state {
            State::Exited(e) => Some(e),
            _ => None,
        }
    }

    /// Whether the child has been reaped.
    pub fn reaped(&self) -> bool {
        !matches!(self.state, State::Running)
    }

    /// Kill the child's group (and the child, should it have left it) and reap the child.
    pub fn kill(&mut self) {
        self.signal_group(libc::SIGKILL);
        self.signal(libc::SIGKILL);
        let _ = self.wait();
    }

    /// Give the child up: it is neither killed nor reaped on `Drop`; the caller kills and
    /// reaps it (a tracer, a program meant to run on).
    pub fn disown(mut self) -> Disowned {
        self.disowned = true;
        Disowned {
            pid: self.pid,
            report: ExecReport { pipe: self.report.pipe.take(), program: self.program.clone() },
            pidfd: std::mem::replace(&mut self.pidfd, Err(libc::EBADF)).ok(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.disowned {
            self.kill();
        }
    }
}

mod exit;
pub use exit::Exit;

#[cfg(test)]
mod tests;
