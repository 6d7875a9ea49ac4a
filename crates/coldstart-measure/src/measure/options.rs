//! What a measurement is asked to do, checked before anything runs, and why it can fail as a
//! whole.

use std::path::PathBuf;
use std::time::Duration;

use coldstart_error::Category;
use coldstart_sys::is_root;

use crate::cache::CacheState;
use crate::launch::{resolve_program, LaunchError};
use coldstart_ready::Ready;
use coldstart_storage::{StorageError, StorageProfile};

/// Everything a measurement needs, validated by [`MeasureOptions::validate`].
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    /// The command (argv) to measure; a second one when comparing.
    pub commands: Vec<Vec<String>>,
    /// The cache states to measure, in order (usually one; `cold` and `hot` together give the
    /// I/O share).
    pub caches: Vec<CacheState>,
    /// When a run counts as started up.
    pub ready: Ready,
    /// Measured runs per command and state.
    pub runs: usize,
    /// Unrecorded runs before the measured ones (per command and state).
    pub warmup: usize,
    /// Bound of each run.
    pub timeout: Duration,
    /// Run every run on emulated slow storage (`coldstart-storage`); `None`: on this machine's
    /// own disk.
    pub storage: Option<StorageOptions>,
    /// Exclude a run when any page of the program's own files stayed cached, even one that a
    /// process outside the run maps (`--strict`: a perfectly cold state, as on a dedicated
    /// benchmark machine). By default such held pages are counted and reported, and only pages
    /// no other process maps exclude a run.
    pub strict: bool,
    /// Per command, a launcher its measured and warm-up runs start it through (argv prefix,
    /// empty for none), such as `coldstart launch --prefetch DB --`: part of each timed run,
    /// inside its cgroup, after its cache state is set. Discovery runs the command alone, so
    /// the files found, evicted and copied onto emulated storage are the program's own; the
    /// launcher's own binary stays on this machine's disk.
    pub launchers: Vec<Vec<String>>,
    /// With two commands compared: what the first has that the second lacks, when the first
    /// is the change and the second the base (`measure --prefetch DB --compare`: "the
    /// prefetch"); see [`Comparison::change`](coldstart_formats::measure::Comparison::change).
    pub change: Option<String>,
}

/// Where and how to emulate slow storage for a measurement (`--storage`).
///
/// The program's files are copied onto one emulated device per measurement: the directory
/// `app_dir` when given, else the program's own files found by a discovery run on the host
/// (the executable, its non-system libraries, its data: [`cache::warm_set`](crate::cache::warm_set)). Every run (the
/// warm-up runs too) then executes in a mount namespace where the copies are bind-mounted over
/// the originals, in a cgroup whose reads of the device are throttled to the profile.
#[derive(Debug, Clone)]
pub struct StorageOptions {
    /// The device to emulate.
    pub profile: StorageProfile,
    /// Copy this directory instead of the discovered files.
    pub app_dir: Option<PathBuf>,
    /// Where the session directory with the backing file goes
    /// ([`coldstart_storage::DEFAULT_WORK_DIR`] by default).
    pub work_dir: PathBuf,
}

impl Default for MeasureOptions {
    fn default() -> Self {
        MeasureOptions {
            commands: Vec::new(),
            caches: vec![CacheState::Hot],
            ready: Ready::Exit,
            runs: 10,
            warmup: 1,
            timeout: Duration::from_secs(60),
            storage: None,
            strict: false,
            launchers: Vec::new(),
            change: None,
        }
    }
}

/// Why a measurement could not be done (as opposed to runs that failed, which are reported).
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The options contradict each other or the machine (the message says how).
    #[error("{0}")]
    Invalid(String),
    /// The command cannot be started at all.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// `--cache cold` without root.
    #[error(
        "--cache cold needs root: dropping the page cache writes /proc/sys/vm/drop_caches, which needs \
         CAP_SYS_ADMIN; run as root, or use --cache selective (evicts only the program's files, no root needed)"
    )]
    NeedsRoot,
    /// A cache state could not be prepared.
    #[error("cannot prepare the {state} cache state: {source}")]
    Cache {
        /// The state.
        state: CacheState,
        /// What failed.
        source: std::io::Error,
    },
    /// The emulated storage could not be set up.
    #[error("emulated storage: {0}")]
    Storage(#[from] StorageError),
    /// A signal ended the measurement ([`coldstart_process::cancel`]): the run in progress was
    /// killed, its cgroup and the emulated storage removed; nothing was reported.
    #[error(transparent)]
    Interrupted(#[from] coldstart_process::cancel::Interrupted),
}

impl MeasureError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            MeasureError::Invalid(_) => Category::Usage,
            MeasureError::Launch(e) => e.category(),
            MeasureError::NeedsRoot => Category::Privilege,
            MeasureError::Cache { .. } => Category::Environment,
            MeasureError::Interrupted(e) => e.category(),
            MeasureError::Storage(e) => e.category(),
        }
    }
}

impl MeasureOptions {
    /// Check the options and the commands (exist, are programs) before anything runs.
    pub fn validate(&self) -> Result<(), MeasureError> {
        if self.commands.is_empty() || self.commands.len() > 2 {
            return Err(MeasureError::Invalid(format!(
                "give one command, or two to compare (got {})",
                self.commands.len()
            )));
        }
        for c in &self.commands {
            resolve_program(c)?;
        }
        if self.launchers.len() > self.commands.len() {
            return Err(MeasureError::Invalid(format!(
                "{} launchers for {} commands",
                self.launchers.len(),
                self.commands.len()
            )));
        }
        for l in self.launchers.iter().filter(|l| !l.is_empty()) {
            resolve_program(l)?;
        }
        if self.runs == 0 {
            return Err(MeasureError::Invalid("--runs must be at least 1".into()));
        }
        if self.timeout.is_zero() {
            return Err(MeasureError::Invalid("--timeout must be positive".into()));
        }
        if self.caches.is_empty() {
            return Err(MeasureError::Invalid("--cache needs at least one state".into()));
        }
        for (i, c) in self.caches.iter().enumerate() {
            if self.caches[..i].contains(c) {
                return Err(MeasureError::Invalid(format!("--cache lists `{c}` twice")));
            }
        }
        if self.commands.len() == 2 && self.caches.len() > 1 {
            return Err(MeasureError::Invalid(
                "a comparison runs both commands in one cache state; give a single --cache".into(),
            ));
        }
        if self.caches.contains(&CacheState::Cold) && !is_root() {
            return Err(MeasureError::NeedsRoot);
        }
        if let Some(s) = &self.storage {
            coldstart_storage::require_root()?;
            if let Some(d) = &s.app_dir {
                if !d.is_dir() {
                    return Err(MeasureError::Invalid(format!(
                        "--app-dir {}: not a directory; give the directory holding the program's files",
                        d.display()
                    )));
                }
            }
            if !s.work_dir.is_dir() {
                return Err(MeasureError::Invalid(format!(
                    "--storage-dir {}: not a directory; give an existing directory on a disk file \
                     system (the emulated device's backing file goes there)",
                    s.work_dir.display()
                )));
            }
        }
        Ok(())
    }
}
