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
//! 3. wait for the readiness signal (`coldstart-ready`) or the timeout, draining any captured
//!    output so the program never blocks on a full pipe (standard error goes to a memory
//!    file, [`coldstart_sys::stderr`], whose last lines a failed run keeps);
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
//!   (plus the time a sample takes) during the run and once more at readiness: works without
//!   root, but misses a file that was opened, read and closed (or a process that lived) between
//!   two samples.
//!
//! The same samples read, for the files that other processes also map (found in `/proc/*/maps`
//! when the run starts), which of their pages the tree has in its page tables
//! (`/proc/PID/pagemap`): [`RunOutput::touched`]. Those are the pages a cold state may leave
//! cached, held by the other processes, and this says how many of them start-up uses. It is an
//! estimate at the kernel's fault-around granularity (a fault maps up to 16 neighbouring
//! cached pages), and misses pages read with `read(2)` rather than mapped.
//!
//! ## Where the code is
//!
//! [`LinuxExecutor`] below drives one run through `run` (prepare, spawn, wait, collect):
//! `spawn` starts the tree held before `exec` in its cgroup (with
//! [`coldstart_process::held`]: the go and exec-error pipes, the shared clock), `wait` is the
//! readiness loop, `counters` reads the figures, and `discovery` collects the files.

mod counters;
mod discovery;
mod run;
mod spawn;
mod wait;

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use coldstart_error::Category;
use coldstart_process::LookupError;

pub use discovery::mapped_files;

use crate::cgroup::Hierarchy;
use coldstart_formats::measure::{Counters, Outcome};
use coldstart_ready::{self as ready, Ready};

/// One run to start.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The command; `argv[0]` is looked up in `PATH` unless it contains a `/`.
    pub argv: Vec<String>,
    /// Variables added to (or replacing in) coldstart's environment.
    pub env: Vec<(String, String)>,
    /// Working directory; coldstart's own when `None`.
    pub cwd: Option<PathBuf>,
    /// When the run counts as started up.
    pub ready: Ready,
    /// The run is killed and reported as [`Outcome::Timeout`] when not ready by then.
    pub timeout: Duration,
    /// Collect the files the tree opens or maps (see the module docs).
    pub discover_files: bool,
}

/// What one run produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOutput {
    /// How it ended; `None` reads as ready ([`RunOutput::outcome`]).
    pub outcome: Option<Outcome>,
    /// Its figures.
    pub counters: Counters,
    /// Regular files the tree opened or mapped (only with [`RunSpec::discover_files`]),
    /// sorted and without duplicates.
    pub files: Vec<PathBuf>,
    /// Of the files other processes mapped when the run started, the pages the tree had in
    /// its page tables (only with [`RunSpec::discover_files`]; see the module docs).
    pub touched: crate::cache::pages::TouchedPages,
    /// The last lines of the program's standard error when the run failed, did not become
    /// ready or timed out (see [`coldstart_sys::stderr`]); empty for a run that became ready.
    pub stderr_tail: Vec<String>,
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
    /// No command was given.
    #[error("the command is empty")]
    EmptyCommand,
    /// The program is not in `PATH`.
    #[error("command `{0}` not found in PATH")]
    NotFound(String),
    /// A program name with spaces, as a shell command line would be: nothing runs it through a
    /// shell.
    #[error(
        "command `{0}` not found in PATH: the command runs directly, without a shell, so `{0}` \
         is taken as one program name; give its words separately (-- {words}) or run it through \
         a shell (-- sh -c '{0}')",
        words = .0.split_whitespace().collect::<Vec<_>>().join(" ")
    )]
    NotFoundNoShell(String),
    /// The program named is a directory.
    #[error("`{0}` is a directory, not a program")]
    IsDirectory(PathBuf),
    /// The program named may not be executed.
    #[error("`{0}` is not executable (chmod +x?)")]
    NotExecutable(PathBuf),
    /// `execve` of the program failed.
    #[error("cannot start `{path}`: {source}")]
    Exec {
        /// The program.
        path: PathBuf,
        /// The error of `execve`.
        source: io::Error,
    },
    /// Preparing the run failed before the program started.
    #[error("cannot prepare the run: {0}")]
    Setup(#[source] io::Error),
    /// The run's cgroup could not be made.
    #[error("{0}")]
    Cgroup(#[from] crate::cgroup::CgroupError),
    /// The emulated storage failed.
    #[error(transparent)]
    Storage(#[from] coldstart_storage::StorageError),
    /// Emulated storage needs a cgroup, and none is usable.
    #[error(
        "emulated storage needs a cgroup to throttle the runs' reads, and none is usable: {0}"
    )]
    StorageWithoutCgroup(String),
    /// `window:` readiness cannot watch the display.
    #[error(transparent)]
    Window(#[from] ready::x11::WindowError),
    /// A signal came ([`coldstart_process::cancel`]): the run was killed and its cgroup removed.
    #[error(transparent)]
    Interrupted(#[from] coldstart_process::cancel::Interrupted),
}

impl LaunchError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            LaunchError::EmptyCommand
            | LaunchError::NotFound(_)
            | LaunchError::NotFoundNoShell(_)
            | LaunchError::IsDirectory(_)
            | LaunchError::NotExecutable(_)
            | LaunchError::Exec { .. } => Category::Usage,
            LaunchError::Setup(_) | LaunchError::StorageWithoutCgroup(_) => Category::Environment,
            LaunchError::Cgroup(e) => e.category(),
            LaunchError::Storage(e) => e.category(),
            LaunchError::Window(e) => e.category(),
            LaunchError::Interrupted(e) => e.category(),
        }
    }
}

/// What a run on emulated storage (`coldstart-storage`) needs from the executor: the hook that
/// puts the child in a mount namespace with the copies bind-mounted over the originals, and
/// the read limit for the run's cgroup on the emulated device.
#[derive(Debug, Clone)]
pub struct RunStorage {
    /// Run in the child between `fork` and `exec`.
    pub enter: coldstart_storage::EnterHook,
    /// Applied to each run's cgroup before the child joins it; `None` for an unthrottled
    /// profile.
    pub throttle: Option<coldstart_storage::ThrottleRule>,
    /// The emulated device's `/sys/block/NAME/stat`, whose completed reads during a run are
    /// [`Counters::storage_read_requests`](coldstart_formats::measure::Counters::storage_read_requests).
    pub device_stat: Option<PathBuf>,
}

impl RunStorage {
    /// The hook and the limit of `storage`.
    pub fn of(
        storage: &coldstart_storage::EmulatedStorage,
    ) -> Result<Self, coldstart_storage::StorageError> {
        let profile = storage.profile();
        Ok(RunStorage {
            enter: storage.enter_hook()?,
            throttle: profile.is_throttled().then(|| {
                coldstart_storage::ThrottleRule::for_profile(profile, storage.device().dev)
            }),
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
    coldstart_process::find_program(name).map_err(|e| match e {
        LookupError::IsDirectory(p) => LaunchError::IsDirectory(p),
        LookupError::NotExecutable(p) => LaunchError::NotExecutable(p),
        LookupError::Empty | LookupError::NotInPath(_) | LookupError::Missing(_)
            if name.trim().contains(char::is_whitespace) =>
        {
            LaunchError::NotFoundNoShell(name.clone())
        }
        LookupError::Empty | LookupError::NotInPath(_) | LookupError::Missing(_) => {
            LaunchError::NotFound(name.clone())
        }
    })
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
        // No run starts after a signal: the measurement ends through its guards.
        coldstart_process::cancel::check()?;
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
        let out = run::run_one(
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

/// An executor that replays scripted outputs, for unit tests of the orchestration.
#[derive(Debug, Default)]
pub struct FakeExecutor {
    /// Outputs returned in order; the last one repeats when the script runs out.
    pub script: Vec<RunOutput>,
    /// Every spec asked for, in order.
    pub calls: Vec<RunSpec>,
    /// What [`Executor::accounting`] returns.
    pub accounting: String,
    /// What [`Executor::warnings`] returns.
    pub warnings: Vec<String>,
    /// Every [`Executor::set_storage`], `true` for `Some`.
    pub storage_calls: Vec<bool>,
}

impl FakeExecutor {
    /// An executor that returns `script`'s outputs in order.
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
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

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
    fn a_command_line_in_one_word_says_there_is_no_shell() {
        let err = resolve_program(&["python3 -c pass".into()]).unwrap_err();
        assert!(matches!(err, LaunchError::NotFoundNoShell(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("without a shell"), "{msg}");
        assert!(
            msg.contains("-- python3 -c pass") && msg.contains("sh -c 'python3 -c pass'"),
            "{msg}"
        );
        // An existing path with a space is still found, and a plain missing name is not told
        // about shells.
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("my prog");
        fs::write(&prog, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&prog, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(resolve_program(&[prog.to_string_lossy().into_owned()]).unwrap(), prog);
        let plain = resolve_program(&["coldstart-no-such-program".into()]).unwrap_err();
        assert!(!plain.to_string().contains("shell"), "{plain}");
    }
}
