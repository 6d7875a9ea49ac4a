//! First-touch profiling of program start-up, without recompiling the program.
//!
//! The paper behind coldstart profiled with a binary rewriter, Firefox with a slow Valgrind
//! plugin, Chromium by rebuilding with instrumentation (which changes inlining). coldstart
//! profiles the program *as shipped*:
//!
//! - [`trace`](crate::profile) puts a one-shot `int3` at the entry of every function of the
//!   executable and of every library as the loader maps it, and records the first call of
//!   each (module, function, thread, time since exec, ordinal). One trap per function that
//!   runs, none after, so the cost is bounded by the number of distinct functions.
//! - By default the breakpoints are handled in the program itself: an rtld-audit agent
//!   (`LD_AUDIT`, built from `agent/*.c`) plants them as the loader maps each object and
//!   its `SIGTRAP` handler records the touch, with no ptrace stop. Static and setuid programs,
//!   which the loader does not audit, fall back to the ptrace tracer ([`Tracer`]).
//! - [`pages`] records the file pages start-up touches, from the kernel's `filemap`
//!   tracepoints, in runs of their own (breakpoints copy the text pages they patch, which
//!   would hide those pages from the page trace): by default exactly, each 4 KiB page once in
//!   first-touch order, by running the program on a private copy of its files with read-ahead
//!   off (the `exact` module; the copy is `coldstart-storage`'s).
//!
//! The profile it writes is `coldstart-profile-format`'s (the versioned file and the merge of
//! several workloads); readiness signals are `coldstart-ready`'s.
//!
//! ```no_run
//! use coldstart_profile::{profile, ProfileOptions};
//! use coldstart_ready::Ready;
//!
//! let mut options = ProfileOptions::new(vec!["python3".into(), "-c".into(), "pass".into()]);
//! options.ready = Ready::Exit;
//! let p = profile(&options)?.profile;
//! for m in &p.modules {
//!     println!("{}: {} of {} functions", m.path.display(), m.functions.len(), m.functions_total);
//! }
//! # Ok::<(), coldstart_profile::ProfileError>(())
//! ```

mod audit;
mod copied;
mod cpu;
mod exact;
pub mod interrupt;
mod modules;
mod opens;
mod page_files;
mod page_run;
pub mod pages;
mod perf;
mod ready;
mod ring;
mod spawn;
mod trace;
mod tree;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use coldstart_error::Category;

use coldstart_elf::SymbolOptions;
use coldstart_profile_format as format;
use coldstart_ready::Ready;
use format::{PageProfile, Profile, Stop};

/// What to profile and how.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// When start-up is over.
    pub ready: Ready,
    /// Which child processes are profiled with the command's own process.
    pub follow_forks: Follow,
    /// Keep profiling a process after it executes another program: the program a wrapper
    /// (a shell script, `env`, a version manager's shim) executes is the one to profile.
    pub follow_exec: bool,
    /// Kill the program at readiness instead of letting it run on.
    pub kill_at_ready: bool,
    /// Also record file pages, in a run of their own.
    pub pages: bool,
    /// How the page run records them.
    pub page_method: PageMethod,
    /// Where the exact page run makes its private device (`None`: chosen by the size of the
    /// files to copy, see [`pages::work_dir_for`]).
    pub page_work_dir: Option<PathBuf>,
    /// The workload label written into the profile.
    pub workload: String,
    /// Where to find debug files for stripped modules.
    pub symbols: SymbolOptions,
    /// Give up (and kill the program) when readiness has not come after this long.
    pub timeout: Option<Duration>,
    /// Which first-touch tracer runs the program.
    pub tracer: Tracer,
    /// Send the program's standard output and error to `/dev/null` (those a readiness signal
    /// reads excepted) instead of this process's: a caller printing a report of its own (the
    /// gate) keeps it readable.
    pub quiet: bool,
}

/// Which child processes a profile follows (records the functions of) with the command's own
/// process. Whatever the choice, the profile lists every program the processes ran
/// ([`Profile::images`]) and says which were followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// Only the command's own process (and its threads).
    None,
    /// Children that run their parent's program: forks, and executions of the program the
    /// parent runs (a browser starting its content processes, Python's multiprocessing, a
    /// compiler driver running itself again); not a child that runs another program (a
    /// shell's commands, a helper). The default: what a program's owner profiles.
    Same,
    /// Every child.
    All,
}

/// How the page run records the file pages start-up touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageMethod {
    /// [`Exact`](PageMethod::Exact) as root, [`Sampled`](PageMethod::Sampled) without.
    Auto,
    /// The files start-up reads are copied onto a private device with read-ahead off and the
    /// program is traced there (tracefs): each 4 KiB page it touches, once, in first-touch
    /// order, whatever this machine's read-ahead and fault-around. Root.
    Exact,
    /// Traced where the files are (tracefs): the pages the page cache brought in for
    /// start-up, read-ahead and fault-around included. Root.
    Traced,
    /// Page faults sampled with `perf_event_open`: no root needed; pages mapped by
    /// fault-around or read with `read(2)` are not seen.
    Sampled,
}

impl std::str::FromStr for PageMethod {
    type Err = String;
    fn from_str(s: &str) -> Result<PageMethod, String> {
        match s {
            "auto" => Ok(PageMethod::Auto),
            "exact" => Ok(PageMethod::Exact),
            "traced" => Ok(PageMethod::Traced),
            "sampled" => Ok(PageMethod::Sampled),
            other => {
                Err(format!("unknown page method `{other}`: use auto, exact, traced or sampled"))
            }
        }
    }
}

impl std::fmt::Display for PageMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PageMethod::Auto => "auto",
            PageMethod::Exact => "exact",
            PageMethod::Traced => "traced",
            PageMethod::Sampled => "sampled",
        })
    }
}

/// The first-touch tracer: the same breakpoints and the same profile, handled in the program
/// (audit) or by coldstart through ptrace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracer {
    /// The audit agent where the loader runs it, else ptrace (with a notice).
    Auto,
    /// The rtld-audit agent: a trap costs a signal in the program, not a ptrace stop.
    Audit,
    /// ptrace: works for every program (static ones too) and profiles the loader.
    Ptrace,
}

impl std::str::FromStr for Tracer {
    type Err = String;
    fn from_str(s: &str) -> Result<Tracer, String> {
        match s {
            "auto" => Ok(Tracer::Auto),
            "audit" => Ok(Tracer::Audit),
            "ptrace" => Ok(Tracer::Ptrace),
            other => Err(format!("unknown tracer `{other}`: use auto, audit or ptrace")),
        }
    }
}

impl std::fmt::Display for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tracer::Auto => "auto",
            Tracer::Audit => "audit",
            Tracer::Ptrace => "ptrace",
        })
    }
}

impl ProfileOptions {
    /// Defaults: readiness at exit, children that run their parent's program followed
    /// ([`Follow::Same`]), executions followed, no pages, workload `default`, 60 s timeout.
    pub fn new(command: Vec<OsString>) -> ProfileOptions {
        ProfileOptions {
            command,
            ready: Ready::Exit,
            follow_forks: Follow::Same,
            follow_exec: true,
            kill_at_ready: false,
            pages: false,
            page_method: PageMethod::Auto,
            page_work_dir: None,
            workload: "default".into(),
            symbols: SymbolOptions::default(),
            timeout: Some(Duration::from_secs(60)),
            tracer: Tracer::Auto,
            quiet: false,
        }
    }
}

/// Why profiling failed. Each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// No command was given.
    #[error("no command given: put it after `--`")]
    NoCommand,
    /// The command is not an executable file, nor a name in `PATH`.
    #[error(
        "command `{command}` {why}: give the program to run after `--` (a file, or a name in PATH)"
    )]
    CommandNotFound {
        /// The command as given.
        command: String,
        /// What is wrong (`is not in PATH`, `is not executable`, ...).
        why: &'static str,
    },
    /// The program's ELF file could not be read.
    #[error(transparent)]
    Elf(#[from] coldstart_elf::ElfError),
    /// The program is not built for x86-64.
    #[error("{path} is not an x86-64 program; the function profiler writes x86 breakpoints (use --pages alone on other machines)")]
    UnsupportedMachine {
        /// The program.
        path: PathBuf,
    },
    /// The program is setuid or setgid and coldstart is not root.
    #[error("{path} is setuid or setgid: under ptrace it would run without its privileges; run coldstart as root, or profile a copy without the bit")]
    Setuid {
        /// The program.
        path: PathBuf,
    },
    /// ptrace is not allowed here.
    #[error("cannot trace the program: ptrace(PTRACE_TRACEME) failed: {source}; is coldstart itself being traced, or does /proc/sys/kernel/yama/ptrace_scope (3 = no ptrace) or a container without CAP_SYS_PTRACE forbid it?")]
    CannotTrace {
        /// The error of `ptrace(PTRACE_TRACEME)`.
        source: std::io::Error,
    },
    /// The program could not be executed.
    #[error("cannot execute {path}: {source}")]
    Exec {
        /// The program.
        path: PathBuf,
        /// The error of `execve`.
        source: std::io::Error,
    },
    /// A system call failed.
    #[error("{call} failed: {source}")]
    Os {
        /// The call (`pipe2`, `waitpid`, ...).
        call: &'static str,
        /// Its error.
        source: std::io::Error,
    },
    /// The audit tracer cannot profile this program (`--tracer ptrace` can).
    #[error("{reason}: the audit tracer cannot profile it; use --tracer ptrace (or auto, which falls back to it)")]
    AuditUnsupported {
        /// Why, naming the program.
        reason: String,
    },
    /// Preparing the run failed (the message says what and why).
    #[error("{0}")]
    Setup(String),
    /// The page trace failed.
    #[error(transparent)]
    Pages(#[from] pages::PagesError),
    /// A signal stopped the profile; the program was killed and nothing was written.
    #[error("interrupted by {}: the program was killed and nothing was written", tree::signal_name(*signal))]
    Interrupted {
        /// The signal's number.
        signal: i32,
    },
}

impl ProfileError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ProfileError::NoCommand
            | ProfileError::CommandNotFound { .. }
            | ProfileError::UnsupportedMachine { .. }
            | ProfileError::AuditUnsupported { .. } => Category::Usage,
            ProfileError::Elf(e) => e.category(),
            ProfileError::Setuid { .. } | ProfileError::CannotTrace { .. } => Category::Privilege,
            ProfileError::Exec { .. }
            | ProfileError::Os { .. }
            | ProfileError::Setup(_)
            | ProfileError::Interrupted { .. } => Category::Environment,
            ProfileError::Pages(e) => e.category(),
        }
    }
}

impl ProfileError {
    pub(crate) fn os(call: &'static str, source: std::io::Error) -> ProfileError {
        ProfileError::Os { call, source }
    }
}

/// Check that `command[0]` can be profiled before anything runs.
fn check_program(options: &ProfileOptions) -> Result<PathBuf, ProfileError> {
    use std::os::unix::fs::MetadataExt;
    let first = options.command.first().ok_or(ProfileError::NoCommand)?;
    let path = spawn::resolve(first)?;
    let is_script = std::fs::File::open(&path)
        .and_then(|mut f| {
            let mut b = [0u8; 2];
            f.read_exact(&mut b).map(|()| &b == b"#!")
        })
        .unwrap_or(false);
    if !is_script {
        check_elf_header(&path)?;
    }
    let meta = std::fs::metadata(&path).map_err(|e| ProfileError::os("stat", e))?;
    if meta.mode() & 0o6000 != 0 && !coldstart_sys::is_root() {
        return Err(ProfileError::Setuid { path });
    }
    Ok(path)
}

/// Refuse a file that is not ELF, or is 32-bit, from its header alone (the same errors as
/// [`coldstart_elf::ElfInfo::open`]): its symbols are read while the program runs, and
/// reading a large executable's symbol table here only to drop it delayed the start by
/// milliseconds (11 ms for 20,000 functions).
fn check_elf_header(path: &Path) -> Result<(), coldstart_elf::ElfError> {
    use coldstart_elf::ElfError;
    let mut header = [0u8; 64];
    let io = |source| ElfError::io(path, source);
    let mut file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let read = file.read(&mut header).map_err(io)?;
    if read < 4 || &header[..4] != b"\x7fELF" {
        return Err(ElfError::not_elf(path, &header[..read]));
    }
    if header[4] == 1 {
        return Err(ElfError::Unsupported32Bit { path: path.to_owned() });
    }
    let malformed =
        |message: &str| ElfError::Malformed { path: path.to_owned(), message: message.to_owned() };
    if read < header.len() || header[4] != 2 || header[5] != 1 {
        return Err(malformed("truncated, or not a little-endian 64-bit ELF header"));
    }
    let half = |at: usize| u64::from(u16::from_le_bytes([header[at], header[at + 1]]));
    let phoff = u64::from_le_bytes(header[0x20..0x28].try_into().expect("8 bytes"));
    let (e_type, phentsize, phnum) = (half(0x10), half(0x36), half(0x38));
    if !(e_type == 2 || e_type == 3) {
        return Err(malformed("not an executable or shared object (e_type)"));
    }
    if phentsize != 56 || phnum == 0 || phoff.saturating_add(phnum * 56) > size {
        return Err(malformed("no valid program header table"));
    }
    Ok(())
}

/// A run of the program with readiness wired up.
pub(crate) struct Launched {
    pub stopped: spawn::Stopped,
    pub signal: ready::Signal,
    /// Readable when readiness fires (the tracer polls it).
    pub ready_read: std::fs::File,
    /// Threads forwarding the program's output (they end when the program closes it).
    pub readers: Vec<std::thread::JoinHandle<()>>,
    /// Threads polling `tcp:`, `file:` or `window:` (they end when `signal.done` is set).
    pub pollers: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Launched {
    /// Polling watchers never outlive the run, even when it ends with an error.
    fn drop(&mut self) {
        self.signal.done.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Launched {
    /// Poll the started program every `every` until it is ready (false), exits (true) or runs
    /// past `timeout` (false, with a warning: what was recorded so far is kept); `poll` runs
    /// first each time round.
    pub(crate) fn poll_until_ready(
        &self,
        timeout: Option<Duration>,
        every: Duration,
        warnings: &mut Vec<String>,
        mut poll: impl FnMut() -> Result<(), ProfileError>,
    ) -> Result<bool, ProfileError> {
        let pid = self.stopped.pid;
        let start = std::time::Instant::now();
        loop {
            poll()?;
            if self.signal.is_raised() {
                return Ok(false);
            }
            let mut status = 0;
            // SAFETY: polling our own child.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid && (libc::WIFEXITED(status) || libc::WIFSIGNALED(status)) {
                return Ok(true);
            }
            if timeout.is_some_and(|t| start.elapsed() > t) {
                warnings
                    .push("page run: not ready before the timeout; pages so far are kept".into());
                return Ok(false);
            }
            std::thread::sleep(every);
        }
    }

    /// Stop the polling watchers.
    pub(crate) fn stop_pollers(&mut self) {
        self.signal.done.store(true, std::sync::atomic::Ordering::SeqCst);
        for p in self.pollers.drain(..) {
            let _ = p.join();
        }
    }
}

/// Start `path` stopped before exec, with readiness watchers. `env` adds variables (the audit
/// tracer's); an untraced run without them (the page run) dies with coldstart, an audit run
/// may run on after readiness like a detached traced one. `enter` runs the program in a
/// mount namespace where copies cover the originals (the exact page run).
pub(crate) fn launch(
    options: &ProfileOptions,
    path: &std::path::Path,
    traced: bool,
    env: &[(OsString, OsString)],
    enter: Option<&coldstart_storage::EnterHook>,
) -> Result<Launched, ProfileError> {
    let (pipe_out, pipe_err) = match options.ready {
        Ready::Stdout(_) => (true, false),
        Ready::Stderr(_) => (false, true),
        _ => (false, false),
    };
    let (signal, ready_read) = ready::Signal::new().map_err(|e| ProfileError::os("pipe2", e))?;
    let fd_pipe = match options.ready {
        Ready::Fd => Some(ready::pipe(libc::O_CLOEXEC).map_err(|e| ProfileError::os("pipe2", e))?),
        _ => None,
    };
    let child_fd = fd_pipe.as_ref().map(|(_, w)| std::os::fd::AsFd::as_fd(w));
    let mut stopped = spawn::spawn_stopped(
        path,
        &options.command,
        traced,
        pipe_out,
        pipe_err,
        child_fd,
        env,
        !traced && env.is_empty(),
        enter,
        options.quiet,
    )?;
    let mut readers = Vec::new();
    let mut pollers = Vec::new();
    match &options.ready {
        Ready::Stdout(r) | Ready::Stderr(r) => {
            let from =
                stopped.stdout.take().or_else(|| stopped.stderr.take()).expect("piped output");
            readers.push(ready::watch_output(from, pipe_err, Some(r.clone()), signal.clone()));
        }
        Ready::Fd => {
            let (r, w) = fd_pipe.expect("fd pipe");
            drop(w);
            readers.push(ready::watch_fd(std::fs::File::from(r), signal.clone()));
        }
        other => pollers.extend(ready::watch_polled(other, signal.clone())),
    }
    Ok(Launched { stopped, signal, ready_read, readers, pollers })
}

/// A finished profile, and the program's output when it runs on.
pub struct Recording {
    /// The profile.
    pub profile: Profile,
    /// The tracer that ran ([`Tracer::Audit`] or [`Tracer::Ptrace`]).
    pub tracer: Tracer,
    /// Why `auto` chose ptrace, when it did (one line for the user).
    pub notice: Option<String>,
    forwarding: Vec<std::thread::JoinHandle<()>>,
}

impl Recording {
    /// Whether the program was detached at an output readiness signal and runs on with its
    /// output flowing through this process (its output was a pipe to find the signal).
    pub fn forwarding_output(&self) -> bool {
        !self.forwarding.is_empty()
    }

    /// Keep forwarding the program's output until it closes it, so a program that runs on
    /// after profiling does not lose its output (or die of `SIGPIPE`).
    pub fn wait_for_output(self) {
        for r in self.forwarding {
            let _ = r.join();
        }
    }
}

/// Profile one start-up of `options.command`: functions always, file pages with
/// `options.pages` (in a separate run before the function run).
///
/// While [`coldstart_process::cancel::catch`] is in force, `SIGINT`, `SIGTERM` and `SIGHUP` end it within a
/// second (the loops look every 100 ms at most) with [`ProfileError::Interrupted`], the
/// program killed and everything the profile set up removed.
pub fn profile(options: &ProfileOptions) -> Result<Recording, ProfileError> {
    let path = check_program(options)?;
    remove_stale(&std::env::temp_dir());
    tree::block_sigchld();
    let mut warnings = Vec::new();
    // The page run also samples where the program's CPU time goes: it has no breakpoints,
    // and a sampler in the function run slowed its traps (a perf event on the process made
    // the 20,000-function profile 10% slower under the audit tracer, twice as slow under
    // ptrace).
    let (page_profile, page_cpu) = if options.pages {
        let run = page_run::record(options, &path)?;
        warnings.extend(run.warnings);
        (Some(run.pages), run.cpu)
    } else {
        (None, None)
    };
    let (tracer, notice) = choose_tracer(options.tracer, &path)?;
    interrupt::check()?;
    let (traced, mut launched, agent_ran) = match tracer {
        Tracer::Audit => audit::run(options, &path)?,
        _ => run_ptrace(options, &path).map(|(t, l)| (t, l, true))?,
    };
    let (mut traced, mut tracer, mut notice) = (traced, tracer, notice);
    if options.tracer == Tracer::Auto {
        if let Some(message) =
            again_with_ptrace(options, &path, &mut traced, &mut launched, agent_ran)?
        {
            tracer = Tracer::Ptrace;
            warnings.push(message.clone());
            notice = Some(message);
        }
    }
    // The program may run on; its output keeps flowing while coldstart lives. When it was
    // killed or has exited, wait for the forwarding threads to drain.
    if !matches!(traced.stop, Stop::Ready { killed: false, .. }) {
        for r in launched.readers.drain(..) {
            let _ = r.join();
        }
    }
    warnings.extend(traced.warnings);
    warnings.extend(unsymbolized_share(&traced.unsymbolized, page_cpu.as_ref(), options.pages));
    let mut page_profile = page_profile;
    if let Some(pages) = page_profile.as_mut() {
        warnings.extend(name_page_files(pages, &traced.modules, &path));
    }
    let profile = Profile {
        format: format::FORMAT.into(),
        version: format::VERSION,
        workload: options.workload.clone(),
        command: options.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        created_unix: coldstart_units::now_unix(),
        duration_ns: traced.duration_ns,
        stop: traced.stop,
        modules: traced.modules,
        pages: page_profile,
        warnings,
        images: traced.images,
        workloads: Vec::new(),
    };
    Ok(Recording { profile, tracer, notice, forwarding: std::mem::take(&mut launched.readers) })
}

/// The tracer to profile `path` with, as `asked`, and why `auto` chose ptrace (a line for
/// the user); an error when the audit tracer was asked for and cannot run it.
fn choose_tracer(asked: Tracer, path: &Path) -> Result<(Tracer, Option<String>), ProfileError> {
    Ok(match (asked, audit::unsupported(path)) {
        (Tracer::Ptrace, _) => (Tracer::Ptrace, None),
        (Tracer::Audit, Some(reason)) => return Err(ProfileError::AuditUnsupported { reason }),
        (Tracer::Audit | Tracer::Auto, None) => (Tracer::Audit, None),
        (Tracer::Auto, Some(reason)) => {
            (Tracer::Ptrace, Some(format!("{reason}: profiling with the ptrace tracer")))
        }
    })
}

/// Under `auto`, what the audit tracer could not do is done again with ptrace: the loader
/// may refuse the agent, and a crash under the agent may be the agent's doing (a program
/// that gets around its hold on SIGTRAP with a raw system call). Whether it was is told by
/// the ptrace run: a program that crashes there too crashes on its own. When it ran again,
/// `traced` and `launched` are the ptrace run's, and the line returned says why.
fn again_with_ptrace(
    options: &ProfileOptions,
    path: &Path,
    traced: &mut modules::Traced,
    launched: &mut Launched,
    agent_ran: bool,
) -> Result<Option<String>, ProfileError> {
    let audit_crash = match &traced.stop {
        Stop::Crash { signal, .. } => Some(signal.clone()),
        _ => None,
    };
    let why = match &audit_crash {
        Some(signal) => format!("the program crashed ({signal}) under the audit tracer"),
        None if !agent_ran => "the loader did not run the audit agent".to_string(),
        None => return Ok(None),
    };
    interrupt::check()?;
    for r in launched.readers.drain(..) {
        let _ = r.join();
    }
    (*traced, *launched) = run_ptrace(options, path)?;
    Ok(Some(match (&audit_crash, &traced.stop) {
        (Some(_), Stop::Crash { signal, .. }) => format!(
            "{why}; profiled again with the ptrace tracer, it crashed there too ({signal}): the crash is the program's"
        ),
        (Some(_), _) => format!(
            "{why} but not under the ptrace tracer: the profiler caused that crash, not the program; profiled again with the ptrace tracer"
        ),
        (None, _) => format!("{why}: profiled again with the ptrace tracer"),
    }))
}

/// Name the files of the page profile by the modules of the function run, the program, and
/// the loader and its cache; a warning counts those named by device and inode only.
fn name_page_files(
    pages: &mut PageProfile,
    modules: &[format::Module],
    path: &Path,
) -> Option<String> {
    let mut candidates: Vec<PathBuf> = modules.iter().map(|m| m.path.clone()).collect();
    candidates.push(path.to_path_buf());
    // The loader and its cache: every dynamic program's start-up reads them, but the loader
    // is not a module of the audit tracer's run.
    if pages.files.iter().any(|f| f.path.as_os_str().is_empty()) {
        if let Some(interp) =
            audit::interpreter(path).flatten().filter(|i| !i.as_os_str().is_empty())
        {
            // Named as the kernel names the mapping (the link resolved), as a snapshot of
            // the maps would have named it.
            candidates.push(std::fs::canonicalize(&interp).unwrap_or(interp));
            candidates.push(PathBuf::from("/etc/ld.so.cache"));
        }
    }
    let unnamed = page_files::resolve_with(pages, &candidates);
    (unnamed > 0).then(|| {
        format!(
            "{unnamed} files in the page trace were closed before readiness and are named by device and inode only"
        )
    })
}

/// The file pages of one start-up, and what the user should know about them.
#[derive(Debug, Clone)]
pub struct PageRecording {
    /// The pages, in first-touch order.
    pub pages: PageProfile,
    /// Warnings that name a remedy.
    pub warnings: Vec<String>,
}

/// Record the file pages of one start-up of `options.command` alone, by
/// `options.page_method`, without the function run (what `coldstart prefetch record`
/// needs): files are named as [`profile`] names them, from the opens, the program and its
/// loader.
pub fn profile_pages(options: &ProfileOptions) -> Result<PageRecording, ProfileError> {
    let path = check_program(options)?;
    remove_stale(&std::env::temp_dir());
    tree::block_sigchld();
    let run = page_run::record(options, &path)?;
    let (mut pages, mut warnings) = (run.pages, run.warnings);
    let mut candidates = vec![path.clone()];
    if let Some(interp) = audit::interpreter(&path).flatten().filter(|i| !i.as_os_str().is_empty())
    {
        candidates.push(std::fs::canonicalize(&interp).unwrap_or(interp));
        candidates.push(PathBuf::from("/etc/ld.so.cache"));
    }
    let unnamed = page_files::resolve_with(&mut pages, &candidates);
    if unnamed > 0 {
        warnings.push(format!(
            "{unnamed} files in the page trace were closed before readiness and are named by device and inode only"
        ));
    }
    Ok(PageRecording { pages, warnings })
}

/// The summary of the modules without function symbols, which are profiled at page level
/// only, with the share of the program's CPU time they ran (sampled in the page run).
fn unsymbolized_share(
    bare: &[modules::Unsymbolized],
    cpu: Option<&cpu::CpuSamples>,
    pages: bool,
) -> Option<String> {
    if bare.is_empty() {
        return None;
    }
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let names: Vec<String> = bare
        .iter()
        .map(|u| {
            format!(
                "{} ({} for {} of code)",
                u.path.display(),
                coldstart_units::count(u.functions as u64, "function"),
                coldstart_units::bytes(u.code)
            )
        })
        .collect();
    let share = match cpu {
        Some(c) => {
            let total = c.total;
            let paths: Vec<PathBuf> = bare.iter().map(|u| canonical(&u.path)).collect();
            let inside: u64 = c
                .by_file
                .iter()
                .filter(|(p, _)| paths.contains(&canonical(p)))
                .map(|(_, n)| n)
                .sum();
            if total == 0 {
                "no CPU time was sampled".to_string()
            } else {
                format!(
                    "they ran {:.0}% of the program's CPU time in user space ({inside} of {total} samples, one per {} µs)",
                    inside as f64 * 100.0 / total as f64,
                    cpu::PERIOD_NS / 1000
                )
            }
        }
        None if !pages => "profile with --pages for their pages and the share of start-up's CPU time they ran (sampled in the page run)".to_string(),
        None => "their share of CPU time is unknown (perf events not allowed: /proc/sys/kernel/perf_event_paranoid)".to_string(),
    };
    Some(format!(
        "{} without function symbols (stripped, or symbols for under 1% of the code) {} profiled at page level only: {}; {share}",
        if bare.len() == 1 { "1 module".to_string() } else { format!("{} modules", bare.len()) },
        if bare.len() == 1 { "is" } else { "are" },
        names.join(", ")
    ))
}

/// One run under the ptrace tracer.
fn run_ptrace(
    options: &ProfileOptions,
    path: &Path,
) -> Result<(modules::Traced, Launched), ProfileError> {
    use std::os::fd::AsRawFd;
    let mut launched = launch(options, path, true, &[], None)?;
    let pid = launched.stopped.pid;
    let mut guard = tree::TreeGuard { pgid: pid, armed: true };
    let trace_options = trace::TraceOptions {
        follow_forks: options.follow_forks,
        follow_exec: options.follow_exec,
        kill_at_ready: options.kill_at_ready,
        symbols: &options.symbols,
        ready_label: options.ready.to_string(),
        timeout: options.timeout,
    };
    let tracer = trace::Tracer::start(trace_options, pid, &mut launched.stopped.errors, path)?;
    let traced = tracer.run(launched.signal.flag(), Some(launched.ready_read.as_raw_fd()));
    launched.stop_pollers();
    let traced = traced?;
    guard.armed = false;
    Ok((traced, launched))
}

/// Remove what a coldstart killed before it could clean up left behind: the audit agent's
/// temporary directories under `tmp` (named `coldstart-audit-PID-*`) of processes that are
/// gone, and their tracefs instances (see [`crate::pages`]).
fn remove_stale(tmp: &Path) {
    crate::audit::remove_stale_workspaces(tmp);
    crate::pages::remove_stale_tracing();
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::ProfileError, crate::pages::PagesError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_header_check_refuses_what_cannot_be_profiled() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        assert!(check_elf_header(Path::new("/bin/true")).is_ok());
        let text = file("script", b"echo hello\n");
        assert!(matches!(check_elf_header(&text), Err(coldstart_elf::ElfError::NotElf { .. })));
        let mut elf32 = b"\x7fELF\x01\x01\x01".to_vec();
        elf32.resize(52, 0);
        assert!(matches!(
            check_elf_header(&file("elf32", &elf32)),
            Err(coldstart_elf::ElfError::Unsupported32Bit { .. })
        ));
        let short = std::fs::read("/bin/true").unwrap()[..20].to_vec();
        assert!(matches!(
            check_elf_header(&file("short", &short)),
            Err(coldstart_elf::ElfError::Malformed { .. })
        ));
        let mut zeroed = b"\x7fELF\x02\x01\x01".to_vec();
        zeroed.resize(256, 0);
        let err = check_elf_header(&file("zeroed", &zeroed)).unwrap_err().to_string();
        assert!(err.contains("malformed") && err.contains("e_type"), "{err}");
        let mut no_headers = std::fs::read("/bin/true").unwrap();
        no_headers.truncate(64);
        let err = check_elf_header(&file("no-headers", &no_headers)).unwrap_err().to_string();
        assert!(err.contains("program header"), "{err}");
    }
}
