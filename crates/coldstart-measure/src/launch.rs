//! Starting one run: the [`Executor`] trait and its Linux implementation.
//!
//! [`measure`](crate::measure::measure) never starts a process itself; it asks an
//! [`Executor`] for one run of a [`RunSpec`] and gets a [`RunOutput`] back. The real one,
//! [`LinuxExecutor`], does per run:
//!
//! 1. create a fresh cgroup ([`crate::cgroup`]) and, when `perf_event_open` works, an
//!    instruction counter;
//! 2. `fork`; the child puts itself in its own process group and in the cgroup, then waits
//!    until the parent has attached the instruction counter (inherited by every descendant,
//!    enabled on `exec`, user space only), reads the monotonic clock into a page shared with
//!    the parent, and `execve`s: the wall time starts there;
//! 3. wait for the readiness signal ([`crate::ready`]) or the timeout, draining any captured
//!    output so the program never blocks on a full pipe;
//! 4. at readiness read the clock and the counters, then kill the whole tree, reap the root and
//!    remove the cgroup (also on every error path: the cgroup guard's `Drop`).
//!
//! Without write access to the cgroup tree the counters come from `wait4` rusage of the root
//! process (its waited-for children included, others not) or, for a root that is still alive
//! at readiness, from `/proc/PID/stat` and `/proc/PID/io`; the tree is then killed by process
//! group, which misses descendants that left the group (daemons calling `setsid`). Both limits
//! are reported in [`LinuxExecutor::warnings`].
//!
//! ## File discovery
//!
//! `warm` and `selective` need the files a program reads during start-up. With
//! [`RunSpec::discover_files`] the run also collects them, by two methods:
//!
//! - **fanotify** (root): `FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM` on every block-device file
//!   system. Permission events hold the opening process until coldstart answers, so its
//!   membership of the run's cgroup (or process group) can be checked while it is alive, even
//!   for a process that exits a moment later. It misses files opened before the run (none:
//!   the marks are placed before `fork`), files on file systems without a block device (tmpfs,
//!   FUSE, NFS: not evictable by `fadvise` anyway) and files another process reads on the
//!   program's behalf (a daemon, a D-Bus service).
//! - **`/proc/PID/maps` and `/proc/PID/fd`** of every live member, sampled every 0.2 ms
//!   (plus the time a sample takes) during the run and once more at readiness: works without root, but misses a
//!   file that was opened, read and closed (or a process that lived) between two samples.

use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coldstart_error::Category;

use crate::cgroup::{Hierarchy, RunCgroup};
use crate::ready::{self, Ready};
use crate::result::{Counters, Outcome};

/// One run to start.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The command; `argv[0]` is looked up in `PATH` unless it contains a `/`.
    pub argv: Vec<String>,
    /// Variables added to (or replacing in) coldstart's environment.
    pub env: Vec<(String, String)>,
    /// Working directory; coldstart's own when `None`.
    pub cwd: Option<PathBuf>,
    pub ready: Ready,
    /// The run is killed and reported as [`Outcome::Timeout`] when not ready by then.
    pub timeout: Duration,
    /// Collect the files the tree opens or maps (see the module docs).
    pub discover_files: bool,
}

/// What one run produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOutput {
    pub outcome: Option<Outcome>,
    pub counters: Counters,
    /// Regular files the tree opened or mapped (only with [`RunSpec::discover_files`]),
    /// sorted and without duplicates.
    pub files: Vec<PathBuf>,
}

impl RunOutput {
    /// The outcome, `Ready` when unset.
    pub fn outcome(&self) -> Outcome {
        self.outcome.clone().unwrap_or(Outcome::Ready)
    }
}

/// A command that cannot be started at all (nothing was run).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the command is empty")]
    EmptyCommand,
    #[error("command `{0}` not found in PATH")]
    NotFound(String),
    #[error("`{0}` is a directory, not a program")]
    IsDirectory(PathBuf),
    #[error("`{0}` is not executable (chmod +x?)")]
    NotExecutable(PathBuf),
    #[error("cannot start `{path}`: {source}")]
    Exec { path: PathBuf, source: io::Error },
    #[error("cannot prepare the run: {0}")]
    Setup(#[source] io::Error),
    #[error("{0}")]
    Cgroup(#[from] crate::cgroup::CgroupError),
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
    #[error(
        "emulated storage needs a cgroup to throttle the runs' reads, and none is usable: {0}"
    )]
    StorageWithoutCgroup(String),
    #[error(transparent)]
    Window(#[from] ready::x11::WindowError),
}

impl LaunchError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            LaunchError::EmptyCommand
            | LaunchError::NotFound(_)
            | LaunchError::IsDirectory(_)
            | LaunchError::NotExecutable(_)
            | LaunchError::Exec { .. } => Category::Usage,
            LaunchError::Setup(_) | LaunchError::StorageWithoutCgroup(_) => Category::Environment,
            LaunchError::Cgroup(e) => e.category(),
            LaunchError::Storage(e) => e.category(),
            LaunchError::Window(e) => e.category(),
        }
    }
}

/// What a run on emulated storage ([`crate::storage`]) needs from the executor: the hook that
/// puts the child in a mount namespace with the copies bind-mounted over the originals, and
/// the read limit for the run's cgroup on the emulated device.
#[derive(Debug, Clone)]
pub struct RunStorage {
    /// Run in the child between `fork` and `exec`.
    pub enter: crate::storage::EnterHook,
    /// Applied to each run's cgroup before the child joins it; `None` for an unthrottled
    /// profile.
    pub throttle: Option<crate::storage::ThrottleRule>,
    /// The emulated device's `/sys/block/NAME/stat`, whose completed reads during a run are
    /// [`Counters::storage_read_requests`](crate::result::Counters::storage_read_requests).
    pub device_stat: Option<PathBuf>,
}

impl RunStorage {
    /// The hook and the limit of `storage`.
    pub fn of(
        storage: &crate::storage::EmulatedStorage,
    ) -> Result<Self, crate::storage::StorageError> {
        let profile = storage.profile();
        Ok(RunStorage {
            enter: storage.enter_hook()?,
            throttle: profile
                .is_throttled()
                .then(|| crate::storage::ThrottleRule::for_profile(profile, storage.device().dev)),
            device_stat: Some(Path::new("/sys/block").join(&storage.device().name).join("stat")),
        })
    }
}

/// Starts runs. The Linux implementation is [`LinuxExecutor`]; [`FakeExecutor`] replays
/// scripted results for unit tests.
pub trait Executor {
    /// Start one run, wait for readiness (or the timeout), and clean the tree up.
    fn run(&mut self, spec: &RunSpec) -> Result<RunOutput, LaunchError>;
    /// How the runs are counted: `v1`, `v2` (cgroup) or `rusage`.
    fn accounting(&self) -> String;
    /// Limits of this executor on this machine, each naming a remedy.
    fn warnings(&self) -> Vec<String>;
    /// Run the following runs on emulated storage (`Some`) or on the host's files (`None`).
    fn set_storage(&mut self, storage: Option<RunStorage>) -> Result<(), LaunchError>;
}

/// Resolve `argv[0]` the way `execvp` would, and reject what cannot run.
pub fn resolve_program(argv: &[String]) -> Result<PathBuf, LaunchError> {
    let name = argv.first().filter(|s| !s.is_empty()).ok_or(LaunchError::EmptyCommand)?;
    let candidates: Vec<PathBuf> = if name.contains('/') {
        vec![PathBuf::from(name)]
    } else {
        let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
        std::env::split_paths(&path).map(|d| d.join(name)).collect()
    };
    let mut non_exec = None;
    for c in &candidates {
        let Ok(meta) = fs::metadata(c) else { continue };
        if meta.is_dir() {
            if name.contains('/') {
                return Err(LaunchError::IsDirectory(c.clone()));
            }
            continue;
        }
        if meta.permissions().mode() & 0o111 == 0 {
            non_exec.get_or_insert(c.clone());
            continue;
        }
        return Ok(c.clone());
    }
    match non_exec {
        Some(p) => Err(LaunchError::NotExecutable(p)),
        None if name.contains('/') => Err(LaunchError::NotFound(name.clone())),
        None => Err(LaunchError::NotFound(name.clone())),
    }
}

/// The real executor: fork/exec into a per-run cgroup.
pub struct LinuxExecutor {
    hierarchy: Option<Hierarchy>,
    warnings: Vec<String>,
    perf_supported: Option<bool>,
    storage: Option<RunStorage>,
    hierarchy_error: Option<String>,
}

impl LinuxExecutor {
    /// Detect the cgroup hierarchy (cleaning stale run cgroups of crashed runs). Without one,
    /// runs are counted by rusage and a warning says so.
    pub fn new() -> LinuxExecutor {
        let mut warnings = Vec::new();
        let mut hierarchy_error = None;
        let hierarchy = match Hierarchy::detect() {
            Ok(h) => Some(h),
            Err(e) => {
                hierarchy_error = Some(e.to_string());
                warnings.push(format!(
                    "{e}; counting with wait4 rusage instead: only the root process and the \
                     children it waited for are counted, read requests and peak memory of the \
                     tree are not; run as root for whole-tree figures"
                ));
                None
            }
        };
        LinuxExecutor { hierarchy, warnings, perf_supported: None, storage: None, hierarchy_error }
    }
}

impl Drop for LinuxExecutor {
    fn drop(&mut self) {
        // Leave no empty `coldstart` cgroup directories behind.
        if let Some(h) = &self.hierarchy {
            h.release();
        }
    }
}

impl Default for LinuxExecutor {
    fn default() -> Self {
        Self::new()
    }
}

impl Executor for LinuxExecutor {
    fn run(&mut self, spec: &RunSpec) -> Result<RunOutput, LaunchError> {
        let watch = match &spec.ready {
            Ready::Window(re) => {
                let watch = ready::x11::WindowWatch::connect()?;
                // The previous run's window may still be listed for a moment after its client
                // was killed; wait until it is gone so it cannot end this run.
                let start = Instant::now();
                while watch.mapped(re)? && start.elapsed() < Duration::from_secs(2) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Some(watch)
            }
            _ => None,
        };
        let cgroup = match &self.hierarchy {
            Some(h) => Some(h.create_run()?),
            None => None,
        };
        if let (Some(rule), Some(cg)) =
            (self.storage.as_ref().and_then(|s| s.throttle.as_ref()), cgroup.as_ref())
        {
            let paths = cg.io_paths().ok_or_else(|| {
                LaunchError::StorageWithoutCgroup("the blkio hierarchy is not mounted".into())
            })?;
            paths.apply(rule)?;
        }
        let enter = self.storage.as_ref().map(|s| &s.enter);
        let device_stat = self.storage.as_ref().and_then(|s| s.device_stat.as_deref());
        let out = run_one(
            spec,
            cgroup.as_ref(),
            enter,
            device_stat,
            watch.as_ref(),
            &mut self.perf_supported,
        );
        if self.perf_supported == Some(false)
            && !self.warnings.iter().any(|w| w.contains("perf_event_open"))
        {
            self.warnings.push(
                "instructions are not counted: perf_event_open has no hardware instruction counter here \
                 (a virtual machine without a virtual PMU, or kernel.perf_event_paranoid too high)"
                    .into(),
            );
        }
        if let Some(cg) = cgroup {
            cg.destroy().map_err(LaunchError::Setup)?;
        }
        out
    }

    fn accounting(&self) -> String {
        match &self.hierarchy {
            Some(h) => h.version.to_string(),
            None => "rusage".into(),
        }
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    fn set_storage(&mut self, storage: Option<RunStorage>) -> Result<(), LaunchError> {
        if storage.is_some() && self.hierarchy.is_none() {
            return Err(LaunchError::StorageWithoutCgroup(
                self.hierarchy_error.clone().unwrap_or_default(),
            ));
        }
        self.storage = storage;
        Ok(())
    }
}

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

/// An instruction counter on `pid` and its future descendants, user space only, enabled on exec.
fn perf_instructions(pid: libc::pid_t) -> Option<OwnedFd> {
    use coldstart_sys::perf;
    let mut attr = perf::Attr::new(perf::TYPE_HARDWARE, perf::COUNT_HW_INSTRUCTIONS);
    attr.flags = perf::FLAG_DISABLED
        | perf::FLAG_INHERIT
        | perf::FLAG_EXCLUDE_KERNEL
        | perf::FLAG_EXCLUDE_HV
        | perf::FLAG_ENABLE_ON_EXEC;
    perf::open(&attr, pid, -1).ok()
}

fn read_u64(fd: &OwnedFd) -> Option<u64> {
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into v.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    (n == 8).then_some(v)
}

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

fn run_one(
    spec: &RunSpec,
    cgroup: Option<&RunCgroup>,
    enter: Option<&crate::storage::EnterHook>,
    device_stat: Option<&Path>,
    watch: Option<&ready::x11::WindowWatch>,
    perf_supported: &mut Option<bool>,
) -> Result<RunOutput, LaunchError> {
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
    let ready_pipe = match &spec.ready {
        Ready::Fd => Some(pipe().map_err(setup)?),
        _ => None,
    };
    let (err_r, err_w) = pipe().map_err(setup)?;
    let (go_r, go_w) = pipe().map_err(setup)?;
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
    let discovery = if spec.discover_files {
        Some(Discovery::start(cgroup.map(|c| c.name().to_string())))
    } else {
        None
    };

    let mut argv_p: Vec<*const libc::c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut env_p: Vec<*const libc::c_char> = env_c.iter().map(|c| c.as_ptr()).collect();
    env_p.push(std::ptr::null());
    let procs_raw: Vec<RawFd> = procs_fds.iter().map(|f| f.as_raw_fd()).collect();
    let (stdout_fd, stderr_fd) = match (&spec.ready, &capture) {
        (Ready::Stdout(_), Some((_, w))) => (w.as_raw_fd(), devnull_out.as_raw_fd()),
        (Ready::Stderr(_), Some((_, w))) => (devnull_out.as_raw_fd(), w.as_raw_fd()),
        _ => (devnull_out.as_raw_fd(), devnull_out.as_raw_fd()),
    };
    let ready_w = ready_pipe.as_ref().map(|(_, w)| w.as_raw_fd()).unwrap_or(-1);
    let clock_p = clock.0;

    // An interrupt takes this lock before killing the live runs, so no run starts after it.
    let launch_lock = crate::cgroup::launch_lock();
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
                stdin: devnull_in.as_raw_fd(),
                stdout: stdout_fd,
                stderr: stderr_fd,
                ready_w,
                go_r: go_r.as_raw_fd(),
                err_w: err_w.as_raw_fd(),
                cwd: cwd_c.as_ref().map(|c| c.as_ptr()),
                enter,
                clock: clock_p,
                prog: prog_c.as_ptr(),
                argv: argv_p.as_ptr(),
                envp: env_p.as_ptr(),
            })
        }
    }
    // Parent.
    let mut guard = ChildGuard { pid, reaped: false, rusage: None, status: 0 };
    if cgroup.is_none() {
        crate::cgroup::register_process_group(pid);
    }
    drop(launch_lock);
    drop(err_w);
    drop(go_r);
    drop(procs_fds);
    let mut capture_r = capture.map(|(r, w)| {
        drop(w);
        r
    });
    let mut ready_r = ready_pipe.map(|(r, w)| {
        drop(w);
        r
    });
    let perf = if *perf_supported != Some(false) {
        let p = perf_instructions(pid);
        *perf_supported = Some(p.is_some());
        p
    } else {
        None
    };
    let disk_before = disk_reads();
    let device_before = device_stat.and_then(reads_completed);
    let marker = match &spec.ready {
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
        return Err(LaunchError::Exec { path: program, source: e });
    }
    let start_ns = clock.get();

    // SAFETY: pidfd_open on our own child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return Err(setup(io::Error::last_os_error()));
    }
    // SAFETY: fresh fd.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };

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
    let mut sampled = std::collections::BTreeSet::new();
    loop {
        let now = Instant::now();
        if now >= deadline {
            outcome = Some(Outcome::Timeout);
            break;
        }
        let mut fds =
            vec![libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        if root_exited {
            fds[0].fd = -1;
        }
        if let Some(r) = &capture_r {
            fds.push(libc::pollfd { fd: r.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        if let Some(r) = &ready_r {
            fds.push(libc::pollfd { fd: r.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
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
        if discovery.is_some() && !root_exited {
            sample_files(&tree_members(cgroup, pid), &mut sampled);
        }
        let t = coldstart_sys::monotonic_ns();
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(setup(e));
        }
        let mut idx = 1;
        if let Some(r) = &capture_r {
            if fds[idx].revents != 0 {
                // SAFETY: reading into our buffer.
                let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n > 0 {
                    matcher.feed(&buf[..n as usize], regex);
                } else {
                    matcher.finish(regex);
                    capture_r = None;
                }
            }
            idx += 1;
        }
        if let Some(r) = &ready_r {
            if fds[idx].revents != 0 {
                // SAFETY: reading into our buffer.
                let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n > 0 && ready_at.is_none() {
                    ready_at = Some(t);
                }
                if n <= 0 {
                    ready_r = None;
                }
            }
        }
        if matcher.matched && ready_at.is_none() {
            ready_at = Some(t);
        }
        let exited_now = !root_exited && fds[0].revents != 0;
        if exited_now {
            root_exited = true;
            guard.reap();
            if matches!(spec.ready, Ready::Exit) {
                ready_at = Some(t);
            }
        }
        if ready_at.is_none() {
            let polled = match &spec.ready {
                Ready::Tcp(port) => ready::tcp_accepts(*port),
                Ready::File(_) => marker.as_ref().is_some_and(ready::FileMarker::appeared),
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
            if !alive && capture_r.is_none() {
                let (code, signal) = guard.code_signal();
                outcome = Some(Outcome::ExitedBeforeReady { code, signal });
                break;
            }
        }
    }
    let end_ns = ready_at.unwrap_or_else(coldstart_sys::monotonic_ns);
    // A root that exited right after signalling readiness is a zombie now: its /proc figures
    // read as zero, so reap it and count its rusage instead.
    guard.try_reap();
    let mut counters =
        Counters { wall_s: end_ns.saturating_sub(start_ns) as f64 / 1e9, ..Counters::default() };
    let members: Vec<u32> = match cgroup {
        Some(cg) => {
            let members = cg.pids();
            if !guard.reaped && !members.contains(&(pid as u32)) {
                // Left the cgroup: exiting, a moment from being a zombie. Wait for that (briefly:
                // a program that moved itself to another cgroup is not waited for).
                let mut p =
                    libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: polling our pidfd.
                if unsafe { libc::poll(&mut p, 1, 100) } == 1 {
                    guard.reap();
                }
            }
            members
        }
        None if !guard.reaped => vec![pid as u32],
        None => Vec::new(),
    };
    let tasks = TaskCounters::sum(&members, guard.rusage.as_ref());
    counters.major_faults = Some(tasks.major_faults);
    counters.minor_faults = Some(tasks.minor_faults);
    counters.read_bytes = Some(tasks.read_bytes);
    counters.user_s = Some(tasks.user_s);
    counters.sys_s = Some(tasks.sys_s);
    let disk_after = disk_reads();
    counters.read_requests = match (&disk_before, &disk_after) {
        (Some(b), Some(a)) => Some(a.saturating_sub(*b)),
        _ => None,
    };
    // Only this run reads from the emulated device: its count is exact.
    counters.storage_read_requests = match (device_before, device_stat.and_then(reads_completed)) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b)),
        _ => None,
    };
    if let Some(cg) = cgroup {
        let c = cg.counters();
        // The cgroup's CPU time covers every member, exited or not.
        counters.user_s = c.user_s.or(counters.user_s);
        counters.sys_s = c.sys_s.or(counters.sys_s);
        counters.peak_memory_bytes = c.peak_memory_bytes;
        // v2 attributes block I/O to the cgroup; v1's blkio counts nothing for the page cache
        // on current kernels, so there the per-task sums and the disk counters stay.
        if cg.version() == crate::cgroup::Version::V2 {
            counters.read_bytes = c.read_bytes.or(counters.read_bytes);
            counters.read_requests = c.read_requests.or(counters.read_requests);
        }
    } else {
        counters.peak_memory_bytes = guard.rusage.as_ref().map(|ru| ru.ru_maxrss as u64 * 1024);
    }
    counters.instructions = perf.as_ref().and_then(read_u64);
    if discovery.is_some() {
        sample_files(&members, &mut sampled);
    }
    let mut files: Vec<PathBuf> = sampled.into_iter().collect();

    // Kill the tree and reap the root.
    if let Some(cg) = cgroup {
        cg.kill_all(Duration::from_secs(5)).map_err(setup)?;
    } else {
        // SAFETY: killing the process group we created.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        crate::cgroup::unregister_process_group(pid);
    }
    guard.reap();
    if let Some(d) = discovery {
        files.extend(d.finish());
    }
    files.retain(|f| f.is_absolute() && fs::metadata(f).map(|m| m.is_file()).unwrap_or(false));
    files.sort();
    files.dedup();

    if outcome.is_none() && matches!(spec.ready, Ready::Exit) {
        let (code, signal) = guard.code_signal();
        if code != Some(0) {
            outcome = Some(Outcome::Failed { code, signal });
        }
    }
    Ok(RunOutput { outcome: Some(outcome.unwrap_or(Outcome::Ready)), counters, files })
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
struct ChildGuard {
    pid: libc::pid_t,
    reaped: bool,
    rusage: Option<libc::rusage>,
    status: libc::c_int,
}

impl ChildGuard {
    fn reap(&mut self) {
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
    fn try_reap(&mut self) {
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

    fn code_signal(&self) -> (Option<i32>, Option<i32>) {
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
        crate::cgroup::unregister_process_group(self.pid);
    }
}

/// Faults, bytes read and CPU summed over processes: each live member's own figures plus
/// those of the children it reaped (`/proc/PID/stat`, `/proc/PID/io`), plus the root's
/// `wait4` rusage once it has been reaped (which again includes its reaped children).
///
/// Per-task accounting is exact to the event, unlike the cgroup v1 `memory.stat` event
/// counters, which the kernel flushes lazily (a small start-up's few dozen faults can be
/// missing from them). What it misses: a process that exited and was reaped by init (a
/// daemon's double fork) before readiness.
#[derive(Debug, Default, Clone, PartialEq)]
struct TaskCounters {
    major_faults: u64,
    minor_faults: u64,
    read_bytes: u64,
    user_s: f64,
    sys_s: f64,
}

impl TaskCounters {
    fn sum(members: &[u32], root: Option<&libc::rusage>) -> TaskCounters {
        let mut t = TaskCounters::default();
        if let Some(ru) = root {
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            t.major_faults += ru.ru_majflt as u64;
            t.minor_faults += ru.ru_minflt as u64;
            t.read_bytes += ru.ru_inblock as u64 * 512;
            t.user_s += tv(ru.ru_utime);
            t.sys_s += tv(ru.ru_stime);
        }
        // SAFETY: sysconf is always safe.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        for pid in members {
            if let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) {
                let f = parse_stat(&stat);
                let n = |i: usize| f.get(i).copied().unwrap_or(0);
                // minflt, cminflt, majflt, cmajflt, utime, stime, cutime, cstime.
                t.minor_faults += n(7) + n(8);
                t.major_faults += n(9) + n(10);
                t.user_s += (n(11) + n(13)) as f64 / hz;
                t.sys_s += (n(12) + n(14)) as f64 / hz;
            }
            if let Ok(io) = fs::read_to_string(format!("/proc/{pid}/io")) {
                t.read_bytes += io
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("read_bytes: ").and_then(|v| v.trim().parse::<u64>().ok())
                    })
                    .unwrap_or(0);
            }
        }
        t
    }
}

/// The numeric fields of `/proc/PID/stat` after the command name, 0-based from the state
/// (which parses as 0).
fn parse_stat(stat: &str) -> Vec<u64> {
    let Some((_, rest)) = stat.rsplit_once(')') else { return Vec::new() };
    rest.split_whitespace().map(|v| v.parse::<u64>().unwrap_or(0)).collect()
}

/// Reads completed by the physical block devices (`/sys/block/*/stat`, first field), summed.
///
/// These are system-wide: they count every process's reads during the run, so on a busy
/// machine they are an upper bound for the run's read requests. Virtual devices (loop, zram,
/// device-mapper) are left out: their reads reach a physical device and would count twice.
/// Field 1 of a `/sys/block/NAME/stat` file: reads completed.
fn reads_completed(stat: &Path) -> Option<u64> {
    fs::read_to_string(stat).ok()?.split_whitespace().next()?.parse().ok()
}

fn disk_reads() -> Option<u64> {
    let mut total = None;
    for e in fs::read_dir("/sys/block").ok()?.flatten() {
        let dir = e.path();
        if !dir.join("device").exists() {
            continue;
        }
        if let Some(v) = reads_completed(&dir.join("stat")) {
            *total.get_or_insert(0) += v;
        }
    }
    total
}

/// Identity and modification time of a file, to tell a readiness file that appears (or is
/// touched again) during the run from one left by an earlier run.
/// How often a discovery run samples the maps and open files of the tree.
const DISCOVERY_SAMPLE_INTERVAL: Duration = Duration::from_micros(200);

/// The live members of the run's tree: the cgroup's, or without one the root and its
/// descendants (`/proc/PID/task/TID/children`).
fn tree_members(cgroup: Option<&RunCgroup>, root: libc::pid_t) -> Vec<u32> {
    if let Some(cg) = cgroup {
        return cg.pids();
    }
    let mut out = vec![root as u32];
    let mut i = 0;
    while i < out.len() {
        let pid = out[i];
        if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.flatten() {
                if let Ok(c) = fs::read_to_string(t.path().join("children")) {
                    out.extend(c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
                }
            }
        }
        i += 1;
    }
    out
}

/// Add the files the processes map (`/proc/PID/maps`) or hold open (`/proc/PID/fd`).
fn sample_files(pids: &[u32], into: &mut std::collections::BTreeSet<PathBuf>) {
    for &pid in pids {
        into.extend(mapped_files(pid));
        if let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) {
            for fd in fds.flatten() {
                if let Ok(target) = fs::read_link(fd.path()) {
                    if target.is_absolute() {
                        into.insert(target);
                    }
                }
            }
        }
    }
}

/// Files mapped by a process (`/proc/PID/maps`).
pub fn mapped_files(pid: u32) -> Vec<PathBuf> {
    let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else { return Vec::new() };
    let mut out: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path
        let path = line.splitn(6, ' ').nth(5).map(str::trim_start).unwrap_or("");
        if path.starts_with('/') && !path.ends_with(" (deleted)") {
            let p = PathBuf::from(path);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// fanotify-based discovery of the files a run's tree opens.
struct Discovery {
    stop: Arc<AtomicBool>,
    files: Arc<Mutex<Vec<PathBuf>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Discovery {
    /// Start watching; a no-op (maps only) when fanotify is unavailable (not root).
    fn start(cgroup_name: Option<String>) -> Discovery {
        let stop = Arc::new(AtomicBool::new(false));
        let files = Arc::new(Mutex::new(Vec::new()));
        let mut d = Discovery { stop: stop.clone(), files: files.clone(), thread: None };
        let Some(fd) = fanotify_open() else { return d };
        let root_pid = std::process::id();
        d.thread = Some(std::thread::spawn(move || {
            fanotify_loop(fd, &stop, &files, cgroup_name.as_deref(), root_pid);
        }));
        d
    }

    fn finish(mut self) -> Vec<PathBuf> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.files.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn fanotify_open() -> Option<OwnedFd> {
    // SAFETY: fanotify_init returns a new fd or -1.
    let fd = unsafe {
        libc::fanotify_init(
            libc::FAN_CLOEXEC | libc::FAN_CLASS_CONTENT | libc::FAN_NONBLOCK,
            (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as u32,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: fresh fd.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut marked = 0;
    let mut seen_devs = Vec::new();
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else { continue };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if pre.len() < 5 || post.len() < 2 || !post[1].starts_with("/dev/") {
            continue;
        }
        if seen_devs.contains(&pre[2]) {
            continue;
        }
        seen_devs.push(pre[2]);
        let Ok(mp) = CString::new(unescape_mount(pre[4])) else { continue };
        // SAFETY: marking a mount point path.
        let r = unsafe {
            libc::fanotify_mark(
                fd.as_raw_fd(),
                libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
                libc::FAN_OPEN_PERM | libc::FAN_OPEN_EXEC_PERM,
                libc::AT_FDCWD,
                mp.as_ptr(),
            )
        };
        if r == 0 {
            marked += 1;
        }
    }
    (marked > 0).then_some(fd)
}

fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

fn fanotify_loop(
    fd: OwnedFd,
    stop: &AtomicBool,
    files: &Mutex<Vec<PathBuf>>,
    cgroup_name: Option<&str>,
    own_pid: u32,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let meta_len = std::mem::size_of::<libc::fanotify_event_metadata>();
    let mut pid_cache: Vec<(i32, bool)> = Vec::new();
    let belongs = |pid: i32, cache: &mut Vec<(i32, bool)>| -> bool {
        if let Some((_, b)) = cache.iter().find(|(p, _)| *p == pid) {
            return *b;
        }
        let b = match cgroup_name {
            Some(name) => fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .map(|t| t.lines().any(|l| l.ends_with(&format!("/{name}"))))
                .unwrap_or(false),
            // Without a cgroup: the launched process group (the root's pid is the pgid),
            // approximated by "not coldstart and in a group created after it".
            None => {
                // SAFETY: getpgid of any pid.
                let pgid = unsafe { libc::getpgid(pid) };
                pgid > 0 && pgid as u32 != own_pid && pgid != unsafe { libc::getpgid(0) }
            }
        };
        cache.push((pid, b));
        b
    };
    loop {
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: polling our fd.
        let rc = unsafe { libc::poll(&mut pfd, 1, 20) };
        if rc <= 0 {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            continue;
        }
        // SAFETY: reading events into our buffer.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            continue;
        }
        let mut off = 0usize;
        while off + meta_len <= n as usize {
            // SAFETY: the kernel wrote a whole event at `off`.
            let meta: libc::fanotify_event_metadata =
                unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
            if meta.event_len == 0 {
                break;
            }
            if meta.fd >= 0 {
                if belongs(meta.pid, &mut pid_cache) {
                    if let Ok(p) = fs::read_link(format!("/proc/self/fd/{}", meta.fd)) {
                        if let Ok(mut f) = files.lock() {
                            f.push(p);
                        }
                    }
                }
                let resp = libc::fanotify_response { fd: meta.fd, response: libc::FAN_ALLOW };
                // SAFETY: answering the permission event, then closing its fd.
                unsafe {
                    libc::write(
                        fd.as_raw_fd(),
                        (&resp as *const libc::fanotify_response).cast(),
                        std::mem::size_of::<libc::fanotify_response>(),
                    );
                    libc::close(meta.fd);
                }
            }
            off += meta.event_len as usize;
        }
    }
}

/// An executor that replays scripted outputs, for unit tests of the orchestration.
#[derive(Debug, Default)]
pub struct FakeExecutor {
    /// Outputs returned in order; the last one repeats when the script runs out.
    pub script: Vec<RunOutput>,
    /// Every spec asked for, in order.
    pub calls: Vec<RunSpec>,
    pub accounting: String,
    pub warnings: Vec<String>,
    /// Every [`Executor::set_storage`], `true` for `Some`.
    pub storage_calls: Vec<bool>,
}

impl FakeExecutor {
    pub fn new(script: Vec<RunOutput>) -> FakeExecutor {
        FakeExecutor {
            script,
            calls: Vec::new(),
            accounting: "fake".into(),
            warnings: Vec::new(),
            storage_calls: Vec::new(),
        }
    }
}

impl Executor for FakeExecutor {
    fn run(&mut self, spec: &RunSpec) -> Result<RunOutput, LaunchError> {
        resolve_program(&spec.argv).or_else(|e| match e {
            LaunchError::EmptyCommand => Err(e),
            _ => Ok(PathBuf::new()),
        })?;
        let i = self.calls.len();
        self.calls.push(spec.clone());
        let out = self.script.get(i).or(self.script.last()).cloned().unwrap_or_default();
        Ok(out)
    }
    fn accounting(&self) -> String {
        self.accounting.clone()
    }
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
    fn set_storage(&mut self, storage: Option<RunStorage>) -> Result<(), LaunchError> {
        self.storage_calls.push(storage.is_some());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_empty_missing_and_directory_commands() {
        assert!(matches!(resolve_program(&[]), Err(LaunchError::EmptyCommand)));
        assert!(matches!(resolve_program(&["".into()]), Err(LaunchError::EmptyCommand)));
        assert!(matches!(
            resolve_program(&["coldstart-no-such-program".into()]),
            Err(LaunchError::NotFound(_))
        ));
        assert!(matches!(resolve_program(&["/tmp".into()]), Err(LaunchError::IsDirectory(_))));
        assert!(resolve_program(&["true".into()]).unwrap().is_absolute());
    }

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

    #[test]
    fn lists_mapped_files_of_a_process() {
        let files = mapped_files(std::process::id());
        let exe = fs::read_link("/proc/self/exe").unwrap();
        assert!(files.contains(&exe), "{files:?} lacks {exe:?}");
    }
}
