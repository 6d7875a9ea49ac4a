//! Orchestration of a measurement: discovery, warm-up, cache preparation, runs, statistics.
//!
//! For each cache state asked for (in the order given) and each command:
//!
//! 1. **Discovery** (`warm`, `selective`, `cold`): one run that collects the files the tree
//!    opens and maps ([`crate::launch`]). They split into the program's *own* files
//!    ([`cache::warm_set`]: the executable, its non-system libraries, its data; minus the
//!    system-wide data under [`SYSTEM_SHARED_DIRS`]) and the *shared* system files (the rest
//!    of [`cache::selective_set`]: system libraries, `/etc/ld.so.cache`, locales). `warm` evicts its own
//!    files, `selective` both, `cold` drops every cache. Eviction of the own files must hold,
//!    or the run is excluded. Shared libraries mapped by other processes (every shell maps
//!    libc) cannot leave the cache on a running system: their residency is reported as a
//!    warning instead, since excluding every run for it would make the states unusable.
//! 2. **Warm-up**: `warmup` runs that are not recorded (at least one for `hot`, whose point is
//!    a warm cache).
//! 3. **Measured runs**: `runs` per command, interleaved when there are two (A B A B ...), so
//!    a drift of the machine affects both alike. Before every run the cache is prepared and
//!    the eviction verified; the [`EvictionReport`](crate::cache::EvictionReport) is kept with
//!    the run.
//!
//! A run is *excluded* from the statistics, with the reason, when its eviction did not hold,
//! when it did not become ready in time, or when it failed. Comparisons use `wall_s`.
//!
//! With [`MeasureOptions::storage`] (`--storage`) the program's files are first copied onto an
//! emulated slow device ([`crate::storage`]): one discovery run on the host finds them (or
//! `--app-dir` names them), every later run executes in the emulation (mount namespace,
//! throttled run cgroup), `cold` also drops the device's caches, and `warm`/`selective` evict the
//! copies, where the host sees them under the mount point. The device is torn down at the end,
//! on an error, and on an interrupt (through [`crate::cgroup::register_interrupt_hook`]).
//!
//! Each (state, command) gets its own [`CommandResult`], labelled with the cache state (or
//! `A`/`B` when comparing). Several states at once (`--cache cold,hot`) give several; when `hot` is among them, [`MeasureReport::io_share`] holds each colder
//! state's median minus the hot median: the time start-up waits for storage.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coldstart_error::Category;
use coldstart_sys::is_root;

use crate::cache::{self, CacheError, CacheState};
use crate::launch::{resolve_program, Executor, LaunchError, RunOutput, RunSpec, RunStorage};
use crate::metric::Metric;
use crate::result::{
    CommandResult, Environment, IoShare, MeasureReport, Outcome, RunRecord, StorageInfo,
    FORMAT_NAME, FORMAT_VERSION,
};
use crate::stats::{self, Summary};
use crate::storage::{EmulatedStorage, StorageError, StorageProfile};
use crate::Ready;

/// Everything a measurement needs, validated by [`MeasureOptions::validate`].
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    /// The command (argv) to measure; a second one when comparing.
    pub commands: Vec<Vec<String>>,
    /// The cache states to measure, in order (usually one; `cold` and `hot` together give the
    /// I/O share).
    pub caches: Vec<CacheState>,
    pub ready: Ready,
    /// Measured runs per command and state.
    pub runs: usize,
    /// Unrecorded runs before the measured ones (per command and state).
    pub warmup: usize,
    /// Bound of each run.
    pub timeout: Duration,
    /// Run every run on emulated slow storage ([`crate::storage`]); `None`: on this machine's
    /// own disk.
    pub storage: Option<StorageOptions>,
}

/// Where and how to emulate slow storage for a measurement (`--storage`).
///
/// The program's files are copied onto one emulated device per measurement: the directory
/// `app_dir` when given, else the program's own files found by a discovery run on the host
/// (the executable, its non-system libraries, its data: [`cache::warm_set`]). Every run (the
/// warm-up runs too) then executes in a mount namespace where the copies are bind-mounted over
/// the originals, in a cgroup whose reads of the device are throttled to the profile.
#[derive(Debug, Clone)]
pub struct StorageOptions {
    pub profile: StorageProfile,
    /// Copy this directory instead of the discovered files.
    pub app_dir: Option<PathBuf>,
    /// Where the session directory with the backing file goes
    /// ([`crate::storage::DEFAULT_WORK_DIR`] by default).
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
        }
    }
}

/// Why a measurement could not be done (as opposed to runs that failed, which are reported).
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(
        "--cache cold needs root: dropping the page cache writes /proc/sys/vm/drop_caches, which needs \
         CAP_SYS_ADMIN; run as root, or use --cache selective (evicts only the program's files, no root needed)"
    )]
    NeedsRoot,
    #[error("cannot prepare the {state} cache state: {source}")]
    Cache { state: CacheState, source: std::io::Error },
    #[error("emulated storage: {0}")]
    Storage(#[from] StorageError),
    #[error("interrupted: the emulated storage was torn down")]
    Interrupted,
}

impl MeasureError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            MeasureError::Invalid(_) => Category::Usage,
            MeasureError::Launch(e) => e.category(),
            MeasureError::NeedsRoot => Category::Privilege,
            MeasureError::Cache { .. } | MeasureError::Interrupted => Category::Environment,
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
            crate::storage::require_root()?;
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

/// What the orchestration is doing, for a progress bar.
#[derive(Debug, Clone)]
pub enum Progress {
    /// A new phase: `total` runs (discovery, warm-up and measured) lie ahead in it.
    Phase { cache: CacheState, total: usize },
    /// One run of the phase ended (`measured` is `false` for discovery and warm-up).
    Run { label: String, measured: bool, wall_s: f64 },
    /// Everything measured so far, after each cache state: a caller can write it out so a
    /// later failure loses nothing.
    Snapshot(Box<MeasureReport>),
}

/// Discovery runs per command: one with root (fanotify sees every open), three without.
fn discovery_runs() -> usize {
    if is_root() {
        1
    } else {
        3
    }
}

/// The environment facts of the report.
pub fn environment(accounting: &str) -> Environment {
    Environment {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        cgroup: accounting.to_string(),
        cpu_governor: std::fs::read_to_string(
            "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
        )
        .ok()
        .map(|s| s.trim().to_string()),
        is_root: is_root(),
    }
}

/// The emulated storage of a measurement, shared with the interrupt handler: an interrupt
/// ends the process with `exit`, so the handler takes the emulation out and drops it (which
/// unmounts, detaches the loop device and deletes the backing file) after killing the runs.
struct Emulation {
    storage: Arc<Mutex<Option<EmulatedStorage>>>,
    hook: u64,
}

impl Emulation {
    /// Create the emulation with the interrupt hook already registered: an interrupt during
    /// the creation (mkfs, the copy) waits for it to end, successfully or not, and then tears
    /// down what was made.
    fn create(so: &StorageOptions, paths: &[PathBuf]) -> Result<Emulation, StorageError> {
        let storage = Arc::new(Mutex::new(None));
        let shared = Arc::clone(&storage);
        let mut slot = storage.lock().unwrap_or_else(|e| e.into_inner());
        let hook = crate::cgroup::register_interrupt_hook(move || {
            drop(shared.lock().unwrap_or_else(|e| e.into_inner()).take());
        });
        match EmulatedStorage::create(&so.profile, paths, &so.work_dir) {
            Ok(created) => *slot = Some(created),
            Err(e) => {
                drop(slot);
                crate::cgroup::unregister_interrupt_hook(hook);
                return Err(e);
            }
        }
        drop(slot);
        Ok(Emulation { storage, hook })
    }

    /// Work with the emulation; an error once an interrupt has torn it down (the process is
    /// about to exit then).
    fn with<R>(
        &self,
        f: impl FnOnce(&mut EmulatedStorage) -> Result<R, StorageError>,
    ) -> Result<R, MeasureError> {
        let mut guard = self.storage.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some(s) => Ok(f(s)?),
            None => Err(MeasureError::Interrupted),
        }
    }

    /// `files` as the host sees the copies: a file under a copied entry is evicted and
    /// checked at its place under the mount point (the same inode the run sees through the
    /// bind mount), any other file where it is.
    fn on_copy(&self, files: &[PathBuf]) -> Result<Vec<PathBuf>, MeasureError> {
        self.with(|s| {
            Ok(files
                .iter()
                .map(|f| {
                    if s.entries().iter().any(|e| f.starts_with(e)) {
                        s.emulated_path(f)
                    } else {
                        f.clone()
                    }
                })
                .collect())
        })
    }

    fn close(self) -> Result<(), StorageError> {
        crate::cgroup::unregister_interrupt_hook(self.hook);
        let taken = self.storage.lock().unwrap_or_else(|e| e.into_inner()).take();
        taken.map_or(Ok(()), EmulatedStorage::close)
    }
}

impl Drop for Emulation {
    fn drop(&mut self) {
        crate::cgroup::unregister_interrupt_hook(self.hook);
        drop(self.storage.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

/// Run a measurement. Only errors that prevent measuring at all are returned; runs that fail
/// or time out are recorded and excluded.
///
/// With [`MeasureOptions::storage`] the emulated device is created first and torn down at the
/// end, on an error too (and on an interrupt, through [`crate::cgroup::install_interrupt_cleanup`]).
pub fn measure(
    opts: &MeasureOptions,
    exec: &mut dyn Executor,
    progress: &mut dyn FnMut(Progress),
) -> Result<MeasureReport, MeasureError> {
    opts.validate()?;
    let mut emulation = None;
    let result = measure_with(opts, exec, progress, &mut emulation);
    let closed = match emulation {
        Some(e) => {
            let unset = exec.set_storage(None);
            let closed = e.close();
            unset.map_err(MeasureError::from).and(closed.map_err(MeasureError::from))
        }
        None => Ok(()),
    };
    let report = result?;
    closed?;
    Ok(report)
}

/// The program's own files of each command, from discovery runs on the host.
fn discover(
    opts: &MeasureOptions,
    exec: &mut dyn Executor,
    progress: &mut dyn FnMut(Progress),
    i: usize,
    label: &str,
) -> Result<Vec<PathBuf>, MeasureError> {
    let mut files: Vec<PathBuf> = Vec::new();
    for _ in 0..discovery_runs() {
        let out = exec.run(&RunSpec {
            argv: opts.commands[i].clone(),
            env: Vec::new(),
            cwd: None,
            ready: opts.ready.clone(),
            timeout: opts.timeout,
            discover_files: true,
        })?;
        progress(Progress::Run {
            label: label.to_string(),
            measured: false,
            wall_s: out.counters.wall_s,
        });
        files.extend(out.files);
    }
    files.sort();
    files.dedup();
    Ok(files)
}

/// Create the emulated device with the program's files and hand it to the executor.
fn start_emulation(
    opts: &MeasureOptions,
    so: &StorageOptions,
    discovered: &[Vec<PathBuf>],
    exec: &mut dyn Executor,
) -> Result<(Emulation, StorageInfo, Option<String>), MeasureError> {
    let paths: Vec<PathBuf> = match &so.app_dir {
        Some(d) => vec![d.clone()],
        None => {
            let mut all = Vec::new();
            for (i, files) in discovered.iter().enumerate() {
                let exe = resolve_program(&opts.commands[i])?;
                let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
                let mut own = own_files(cache::warm_set(files, &exe), &exe);
                if !own.contains(&exe) {
                    own.push(exe);
                }
                all.extend(own);
            }
            all.sort();
            all.dedup();
            all
        }
    };
    let emulation = Emulation::create(so, &paths)?;
    let (host_read_iops, run_storage, entries) = emulation.with(|s| {
        Ok::<_, StorageError>((
            s.host_random_read_iops(200)?,
            RunStorage::of(s)?,
            s.entries().to_vec(),
        ))
    })?;
    exec.set_storage(Some(run_storage))?;
    let fidelity =
        host_read_iops.and_then(|iops| crate::storage::fidelity_warning(&so.profile, iops));
    let info = StorageInfo {
        profile: so.profile.name.clone(),
        read_iops: so.profile.read_iops,
        read_bps: so.profile.read_bps,
        readahead_kb: so.profile.readahead_kb,
        paths: entries,
        host_read_iops,
        fidelity_warning: fidelity.clone(),
    };
    Ok((emulation, info, fidelity))
}

fn measure_with(
    opts: &MeasureOptions,
    exec: &mut dyn Executor,
    progress: &mut dyn FnMut(Progress),
    emulation_slot: &mut Option<Emulation>,
) -> Result<MeasureReport, MeasureError> {
    let compare = opts.commands.len() == 2;
    // Labels: `A`/`B` when comparing (one state), else the cache state; the command line is
    // in `CommandResult::command` beside it.
    let cmd_label = |i: usize| -> String {
        if compare {
            ["A", "B"][i].to_string()
        } else {
            opts.commands[i].join(" ")
        }
    };
    let own_pids = vec![std::process::id()];
    let mut state_warnings: Vec<String> = Vec::new();
    let mut report = MeasureReport {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        cache: opts.caches.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
        ready: opts.ready.to_string(),
        warmup: opts.warmup,
        environment: environment(&exec.accounting()),
        commands: Vec::new(),
        comparison: None,
        io_share: Vec::new(),
        warnings: Vec::new(),
        storage: None,
    };

    // Emulated storage: discover the program's files once, on the host, before they are
    // copied; every cache state reuses this discovery (inside the mount namespace the files
    // would be reported by their paths on the copy).
    let mut upfront: Option<Vec<Vec<PathBuf>>> = None;
    if let Some(so) = &opts.storage {
        let needed = so.app_dir.is_none() || opts.caches.iter().any(|c| *c != CacheState::Hot);
        let mut files = vec![Vec::new(); opts.commands.len()];
        if needed {
            for (i, f) in files.iter_mut().enumerate() {
                *f = discover(opts, exec, progress, i, &cmd_label(i))?;
            }
        }
        let (emulation, info, fidelity) = start_emulation(opts, so, &files, exec)?;
        *emulation_slot = Some(emulation);
        report.storage = Some(info);
        state_warnings.extend(fidelity);
        upfront = Some(files);
    }
    let emulation = emulation_slot.as_ref();

    for &state in &opts.caches {
        let needs_discovery = state != CacheState::Hot;
        // Without root discovery samples /proc, which a short program can slip through:
        // several runs, united, make that less likely.
        let discovery_runs =
            if needs_discovery && upfront.is_none() { discovery_runs() } else { 0 };
        let warmup = if state == CacheState::Hot { opts.warmup.max(1) } else { opts.warmup };
        let n = opts.commands.len();
        progress(Progress::Phase {
            cache: state,
            total: n * (warmup + opts.runs + discovery_runs),
        });
        let spec = |i: usize, discover: bool| RunSpec {
            argv: opts.commands[i].clone(),
            env: Vec::new(),
            cwd: None,
            ready: opts.ready.clone(),
            timeout: opts.timeout,
            discover_files: discover,
        };

        // 1. Discovery: the program's own files (whose eviction must hold) and the shared
        // system libraries it uses (evicted too for `selective`, but pages other processes
        // map cannot leave the cache; that is reported, not excluded).
        let mut own: Vec<Vec<PathBuf>> = vec![Vec::new(); n];
        let mut shared: Vec<Vec<PathBuf>> = vec![Vec::new(); n];
        if needs_discovery {
            for i in 0..n {
                let files = match &upfront {
                    Some(found) => found[i].clone(),
                    None => discover(opts, exec, progress, i, &cmd_label(i))?,
                };
                let exe = resolve_program(&opts.commands[i])?;
                let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
                own[i] = own_files(cache::warm_set(&files, &exe), &exe);
                shared[i] = cache::selective_set(&files)
                    .into_iter()
                    .filter(|f| !own[i].contains(f))
                    .collect();
                if let Some(e) = emulation {
                    // Evict and verify the pages the runs read: those of the copy.
                    own[i] = e.on_copy(&own[i])?;
                    shared[i] = e.on_copy(&shared[i])?;
                }
                if !files.iter().any(|f| f != &exe) {
                    state_warnings.push(format!(
                        "{}: the discovery run found no file but the executable{}; {state} evicts only it",
                        cmd_label(i),
                        if is_root() {
                            String::new()
                        } else {
                            " (without root, files are sampled from /proc and a program that exits \
                             within milliseconds escapes it: run as root, where fanotify sees every open)"
                                .to_string()
                        }
                    ));
                }
            }
        }
        let mut shared_kept: Vec<(usize, u64, u64, Vec<String>)> = Vec::new();

        // 2. Warm-up.
        for _ in 0..warmup {
            for i in 0..n {
                let out = exec.run(&spec(i, false))?;
                progress(Progress::Run {
                    label: cmd_label(i),
                    measured: false,
                    wall_s: out.counters.wall_s,
                });
            }
        }

        // 3. Measured runs, interleaved.
        let mut runs: Vec<Vec<RunRecord>> = vec![Vec::new(); n];
        for index in 0..opts.runs {
            for i in 0..n {
                let cache_err = |source| MeasureError::Cache { state, source };
                let eviction = match state {
                    CacheState::Hot => None,
                    CacheState::Cold => {
                        if let Some(e) = emulation {
                            // The copy's pages, inodes and directories, and the device's
                            // buffers.
                            e.with(|s| s.drop_caches())?;
                        }
                        cache::drop_all_caches().map_err(|e| match e {
                            CacheError::NotRoot => MeasureError::NeedsRoot,
                            other => MeasureError::Cache {
                                state,
                                source: std::io::Error::other(other.to_string()),
                            },
                        })?;
                        if !shared[i].is_empty() {
                            let r =
                                cache::verify_evicted(&shared[i], &own_pids).map_err(cache_err)?;
                            note_shared(&mut shared_kept, i, &r);
                        }
                        Some(cache::verify_evicted(&own[i], &own_pids).map_err(cache_err)?)
                    }
                    CacheState::Selective => {
                        if !shared[i].is_empty() {
                            let r = cache::evict(&shared[i], &own_pids).map_err(cache_err)?;
                            note_shared(&mut shared_kept, i, &r);
                        }
                        Some(cache::evict(&own[i], &own_pids).map_err(cache_err)?)
                    }
                    CacheState::Warm => Some(cache::evict(&own[i], &own_pids).map_err(cache_err)?),
                };
                let out = exec.run(&spec(i, false))?;
                progress(Progress::Run {
                    label: cmd_label(i),
                    measured: true,
                    wall_s: out.counters.wall_s,
                });
                runs[i].push(record(index, out, eviction, opts.timeout));
            }
        }

        for (i, pages, total, holders) in &shared_kept {
            let label = if compare { cmd_label(*i) } else { state.to_string() };
            state_warnings.push(format!(
                "{label}: up to {pages} of {total} pages of shared system files stayed cached{}; \
                 their I/O is not in these figures (inherent on a running system; the program's own \
                 files were evicted)",
                if holders.is_empty() { String::new() } else { format!(" (mapped by {})", holders.join(", ")) }
            ));
        }

        for (i, r) in runs.into_iter().enumerate() {
            let label = if compare { cmd_label(i) } else { state.to_string() };
            report.commands.push(CommandResult {
                label,
                command: opts.commands[i].clone(),
                summaries: stats::summarize_runs(&r),
                runs: r,
            });
        }
        progress(Progress::Snapshot(Box::new(report.clone())));
    }

    if compare {
        report.comparison = stats::compare(&report.commands[0], &report.commands[1], Metric::Wall);
    }
    report.io_share = io_share(opts, &report);
    report.warnings = warnings(opts, &report, &exec.warnings());
    report.warnings.extend(state_warnings);
    Ok(report)
}

/// Directories of configuration and data that every program on the system reads
/// (`/etc/ld.so.cache`, the locale archive, gconv modules, fonts, time zones).
pub const SYSTEM_SHARED_DIRS: [&str; 6] =
    ["/etc", "/usr/share", "/usr/lib/locale", "/var/cache", "/var/lib", "/run"];

/// The files whose eviction must hold for a run to count: the program's own files, without
/// the system-wide data every process reads. Any exec on the machine maps `/etc/ld.so.cache`
/// again a moment after it was evicted, so requiring it to stay out of the cache would
/// exclude runs at random on a busy machine; such files are evicted with the shared
/// libraries (for `selective`) and their residency is reported instead.
fn own_files(warm: Vec<PathBuf>, exe: &std::path::Path) -> Vec<PathBuf> {
    warm.into_iter()
        .filter(|f| f == exe || !SYSTEM_SHARED_DIRS.iter().any(|d| f.starts_with(d)))
        .collect()
}

/// Keep the worst residency of shared libraries seen per command (for one warning).
fn note_shared(
    kept: &mut Vec<(usize, u64, u64, Vec<String>)>,
    i: usize,
    r: &cache::EvictionReport,
) {
    if r.resident_pages_after == 0 {
        return;
    }
    let mut holders: Vec<String> = Vec::new();
    for h in r.holders.iter().take(3) {
        let s = format!("pid {} ({})", h.pid, h.comm);
        if !holders.contains(&s) {
            holders.push(s);
        }
    }
    if r.holders.len() > 3 {
        holders.push("...".into());
    }
    match kept.iter_mut().find(|k| k.0 == i) {
        Some(k) if k.1 >= r.resident_pages_after => {}
        Some(k) => *k = (i, r.resident_pages_after, r.total_pages, holders),
        None => kept.push((i, r.resident_pages_after, r.total_pages, holders)),
    }
}

fn record(
    index: usize,
    out: RunOutput,
    eviction: Option<cache::EvictionReport>,
    timeout: Duration,
) -> RunRecord {
    let outcome = out.outcome();
    let excluded = match (&outcome, &eviction) {
        (_, Some(e)) if !e.held => Some(eviction_reason(e)),
        (Outcome::Ready, _) => None,
        (Outcome::Timeout, _) => {
            Some(format!("not ready within the timeout ({}s)", timeout.as_secs_f64()))
        }
        (Outcome::ExitedBeforeReady { code, signal }, _) => {
            Some(format!("exited before the readiness signal ({})", status_text(*code, *signal)))
        }
        (Outcome::Failed { code, signal }, _) => {
            Some(format!("failed ({})", status_text(*code, *signal)))
        }
    };
    RunRecord { index, outcome, counters: out.counters, eviction, excluded }
}

fn status_text(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown status".into(),
    }
}

fn eviction_reason(e: &cache::EvictionReport) -> String {
    let why = e.failure_reason().unwrap_or_else(|| "pages stayed cached".into());
    format!("eviction did not hold: {why}")
}

fn io_share(opts: &MeasureOptions, report: &MeasureReport) -> Vec<IoShare> {
    let Some(hot_pos) = opts.caches.iter().position(|c| *c == CacheState::Hot) else {
        return Vec::new();
    };
    let n = opts.commands.len();
    let mut out = Vec::new();
    for (si, state) in opts.caches.iter().enumerate() {
        if si == hot_pos {
            continue;
        }
        for i in 0..n {
            let median =
                |at: usize| report.commands.get(at)?.summary(Metric::Wall.name()).map(|s| s.median);
            let (cold, hot) = (median(si * n + i), median(hot_pos * n + i));
            if let (Some(cold), Some(hot)) = (cold, hot) {
                out.push(IoShare {
                    label: opts.commands[i].join(" "),
                    cache: state.to_string(),
                    cold_median_s: cold,
                    hot_median_s: hot,
                    io_s: cold - hot,
                    fraction: if cold > 0.0 { (cold - hot) / cold } else { 0.0 },
                });
            }
        }
    }
    out
}

fn warnings(opts: &MeasureOptions, report: &MeasureReport, executor: &[String]) -> Vec<String> {
    let mut w: Vec<String> = executor.to_vec();
    if let Some(g) = &report.environment.cpu_governor {
        if g != "performance" {
            w.push(format!(
                "CPU frequency scaling is active (governor `{g}`): timings drift with the clock; \
                 set the `performance` governor (cpupower frequency-set -g performance)"
            ));
        }
    }
    for c in &report.commands {
        let failed: Vec<&RunRecord> =
            c.runs.iter().filter(|r| r.eviction.as_ref().is_some_and(|e| !e.held)).collect();
        if !failed.is_empty() {
            let mut holders: Vec<String> = Vec::new();
            for r in &failed {
                for h in &r.eviction.as_ref().unwrap().holders {
                    let s = format!("pid {} ({})", h.pid, h.comm);
                    if !holders.contains(&s) {
                        holders.push(s);
                    }
                }
            }
            let by = if holders.is_empty() {
                failed[0]
                    .eviction
                    .as_ref()
                    .and_then(|e| e.failure_reason())
                    .unwrap_or_else(|| "pages stayed cached".into())
            } else {
                format!("pages are held by {}", holders.join(", "))
            };
            let remedy = if holders.is_empty() {
                "those runs are excluded"
            } else {
                "those runs are excluded: stop the holding process or use --cache hot"
            };
            w.push(format!(
                "{}: eviction failed before {} of {} runs ({by}); {remedy}",
                c.label,
                failed.len(),
                c.runs.len()
            ));
        }
        let not_ready = c.runs.iter().filter(|r| r.outcome != Outcome::Ready).count();
        if not_ready > 0 {
            w.push(format!(
                "{}: {not_ready} of {} runs did not become ready (see each run's `excluded`); check \
                 --ready and --timeout",
                c.label,
                c.runs.len()
            ));
        }
        if let Some(s) = c.summary(Metric::Wall.name()) {
            if s.n >= 2 && s.median > 0.0 && (s.ci95.1 - s.ci95.0) > 0.1 * s.median {
                w.push(format!(
                    "{}: high variance (95% CI of the median {:.1}% of it wide); use more --runs or \
                     quiet the machine",
                    c.label,
                    100.0 * (s.ci95.1 - s.ci95.0) / s.median
                ));
            }
        }
        if opts.caches.len() == 1 && opts.caches[0] == CacheState::Hot {
            let walls: Vec<f64> =
                c.runs.iter().filter(|r| r.excluded.is_none()).map(|r| r.counters.wall_s).collect();
            if walls.len() >= 3 {
                let rest = Summary::from_samples(&walls[1..]).median;
                if rest > 0.0 && walls[0] > 2.0 * rest {
                    w.push(format!(
                        "{}: the first run was {:.1}x slower than the median of the others: caches \
                         were not warm yet; use more --warmup, or --cache cold for cold-start figures",
                        c.label,
                        walls[0] / rest
                    ));
                }
            }
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::FakeExecutor;
    use crate::result::Counters;

    fn out(wall: f64, outcome: Outcome) -> RunOutput {
        RunOutput {
            outcome: Some(outcome),
            counters: Counters { wall_s: wall, major_faults: Some(0), ..Counters::default() },
            files: Vec::new(),
        }
    }

    fn opts(commands: Vec<Vec<&str>>, cache: CacheState, runs: usize) -> MeasureOptions {
        MeasureOptions {
            commands: commands
                .into_iter()
                .map(|c| c.into_iter().map(String::from).collect())
                .collect(),
            caches: vec![cache],
            runs,
            warmup: 0,
            ..MeasureOptions::default()
        }
    }

    #[test]
    fn storage_options_are_checked_before_anything_runs() {
        let mut o = opts(vec![vec!["/bin/true"]], CacheState::Hot, 1);
        o.storage = Some(StorageOptions {
            profile: StorageProfile::hdd(),
            app_dir: Some(PathBuf::from("/nonexistent/app")),
            work_dir: PathBuf::from("/var/tmp"),
        });
        let mut exec = FakeExecutor::new(vec![out(1.0, Outcome::Ready)]);
        let err = measure(&o, &mut exec, &mut |_| {}).unwrap_err();
        if is_root() {
            assert!(err.to_string().contains("--app-dir /nonexistent/app"), "{err}");
        } else {
            assert!(matches!(err, MeasureError::Storage(StorageError::NotRoot)), "{err}");
        }
        assert!(exec.calls.is_empty() && exec.storage_calls.is_empty());
    }

    #[test]
    fn hot_runs_a_warmup_then_the_measured_runs() {
        let mut exec = FakeExecutor::new(vec![out(9.0, Outcome::Ready), out(1.0, Outcome::Ready)]);
        let r =
            measure(&opts(vec![vec!["true"]], CacheState::Hot, 4), &mut exec, &mut |_| {}).unwrap();
        // One warm-up (forced for hot), four measured runs; the warm-up is not recorded.
        assert_eq!(exec.calls.len(), 5);
        assert!(exec.calls.iter().all(|c| !c.discover_files));
        assert_eq!(r.commands.len(), 1);
        assert_eq!(r.commands[0].runs.len(), 4);
        assert!(r.commands[0]
            .runs
            .iter()
            .all(|r| r.counters.wall_s == 1.0 && r.eviction.is_none()));
        let (name, wall) = &r.commands[0].summaries[0];
        assert_eq!(name, "wall_s");
        assert_eq!(wall.n, 4);
        assert_eq!(wall.median, 1.0);
        assert_eq!(r.format, FORMAT_NAME);
        assert_eq!(r.cache, "hot");
    }

    #[test]
    fn timeouts_and_failures_are_recorded_but_excluded() {
        let script = vec![
            out(1.0, Outcome::Ready), // warm-up
            out(1.0, Outcome::Ready),
            out(5.0, Outcome::Timeout),
            out(1.0, Outcome::Failed { code: Some(3), signal: None }),
            out(2.0, Outcome::Ready),
        ];
        let mut exec = FakeExecutor::new(script);
        let r =
            measure(&opts(vec![vec!["true"]], CacheState::Hot, 4), &mut exec, &mut |_| {}).unwrap();
        let runs = &r.commands[0].runs;
        assert_eq!(runs.len(), 4);
        assert!(runs[0].excluded.is_none());
        assert!(runs[1].excluded.as_deref().unwrap().contains("not ready within the timeout"));
        assert!(runs[2].excluded.as_deref().unwrap().contains("exit code 3"));
        assert_eq!(r.commands[0].summaries[0].1.n, 2);
        assert!(r.warnings.iter().any(|w| w.contains("2 of 4 runs did not become ready")));
    }

    #[test]
    fn comparison_interleaves_a_and_b() {
        let mut script = vec![out(0.0, Outcome::Ready); 2]; // warm-ups
        for _ in 0..5 {
            script.push(out(1.0, Outcome::Ready));
            script.push(out(2.0, Outcome::Ready));
        }
        let mut exec = FakeExecutor::new(script);
        let o = opts(vec![vec!["true", "a"], vec!["false", "b"]], CacheState::Hot, 5);
        let r = measure(&o, &mut exec, &mut |_| {}).unwrap();
        let order: Vec<&str> = exec.calls.iter().map(|c| c.argv[1].as_str()).collect();
        assert_eq!(order, ["a", "b", "a", "b", "a", "b", "a", "b", "a", "b", "a", "b"]);
        assert_eq!(r.commands[0].label, "A");
        assert_eq!(r.commands[1].label, "B");
        let c = r.comparison.unwrap();
        assert_eq!(c.metric, "wall_s");
        assert!((c.ratio - 2.0).abs() < 1e-9);
        assert!(c.p_value >= 0.0 && c.p_value <= 1.0);
    }

    #[test]
    fn selective_discovers_then_evicts_before_every_run() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data.bin");
        std::fs::write(&data, vec![1u8; 8192]).unwrap();
        let mut discovery = out(1.0, Outcome::Ready);
        discovery.files = vec![data.clone()];
        let mut exec = FakeExecutor::new(vec![discovery, out(1.0, Outcome::Ready)]);
        let r =
            measure(&opts(vec![vec!["true"]], CacheState::Selective, 3), &mut exec, &mut |_| {})
                .unwrap();
        let d = discovery_runs();
        assert!(exec.calls[..d].iter().all(|c| c.discover_files));
        assert!(!exec.calls[d].discover_files);
        assert_eq!(exec.calls.len(), d + 3);
        for run in &r.commands[0].runs {
            let e = run.eviction.as_ref().expect("eviction recorded per run");
            // The data file and the executable itself.
            assert_eq!(e.files, 2);
        }
    }

    #[test]
    fn io_share_is_the_difference_of_medians() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data.bin");
        std::fs::write(&data, vec![1u8; 4096]).unwrap();
        let mut discovery = out(1.0, Outcome::Ready);
        discovery.files = vec![data];
        // selective: discovery, 3 runs of 0.5 s; hot: warm-up, 3 runs of 0.1 s.
        let mut script = vec![discovery; discovery_runs()];
        script.extend([
            out(0.5, Outcome::Ready),
            out(0.5, Outcome::Ready),
            out(0.5, Outcome::Ready),
            out(0.1, Outcome::Ready),
            out(0.1, Outcome::Ready),
            out(0.1, Outcome::Ready),
            out(0.1, Outcome::Ready),
        ]);
        let mut exec = FakeExecutor::new(script);
        let mut o = opts(vec![vec!["true"]], CacheState::Selective, 3);
        o.caches = vec![CacheState::Selective, CacheState::Hot];
        let r = measure(&o, &mut exec, &mut |_| {}).unwrap();
        assert_eq!(r.commands.len(), 2);
        assert_eq!(r.commands[0].label, "selective");
        assert_eq!(r.commands[1].label, "hot");
        assert_eq!(r.commands[1].command, ["true"]);
        assert_eq!(r.cache, "selective,hot");
        let s = &r.io_share[0];
        assert_eq!(s.cache, "selective");
        assert!((s.io_s - 0.4).abs() < 1e-9);
        assert!((s.fraction - 0.8).abs() < 1e-9);
    }

    #[test]
    fn first_slow_hot_run_is_warned_about() {
        let script = vec![
            out(1.0, Outcome::Ready), // warm-up
            out(5.0, Outcome::Ready),
            out(1.0, Outcome::Ready),
            out(1.0, Outcome::Ready),
            out(1.0, Outcome::Ready),
        ];
        let mut exec = FakeExecutor::new(script);
        let r =
            measure(&opts(vec![vec!["true"]], CacheState::Hot, 4), &mut exec, &mut |_| {}).unwrap();
        assert!(r
            .warnings
            .iter()
            .any(|w| w.contains("first run was 5.0x slower") && w.contains("--warmup")));
    }

    #[test]
    fn invalid_options_are_refused_before_running() {
        let mut exec = FakeExecutor::new(vec![]);
        for (o, msg) in [
            (opts(vec![], CacheState::Hot, 3), "give one command"),
            (opts(vec![vec!["true"]], CacheState::Hot, 0), "--runs"),
            (opts(vec![vec!["coldstart-no-such-program"]], CacheState::Hot, 1), "not found"),
            (opts(vec![vec![""]], CacheState::Hot, 1), "empty"),
        ] {
            let e = measure(&o, &mut exec, &mut |_| {}).unwrap_err();
            assert!(e.to_string().contains(msg), "{e}");
        }
        let mut o = opts(vec![vec!["true"], vec!["true"]], CacheState::Hot, 1);
        o.caches = vec![CacheState::Hot, CacheState::Warm];
        assert!(measure(&o, &mut exec, &mut |_| {})
            .unwrap_err()
            .to_string()
            .contains("single --cache"));
        assert!(exec.calls.is_empty());
    }

    #[test]
    fn warns_about_frequency_scaling_and_high_variance_with_remedies() {
        let script = vec![
            out(1.0, Outcome::Ready), // warm-up
            out(1.0, Outcome::Ready),
            out(3.0, Outcome::Ready),
            out(1.5, Outcome::Ready),
            out(4.0, Outcome::Ready),
            out(2.0, Outcome::Ready),
        ];
        let mut exec = FakeExecutor::new(script);
        exec.warnings = vec!["instructions are not counted: ...".into()];
        let o = opts(vec![vec!["true"]], CacheState::Hot, 5);
        let mut r = measure(&o, &mut exec, &mut |_| {}).unwrap();
        assert!(
            r.warnings.iter().any(|w| w.contains("high variance") && w.contains("--runs")),
            "{:?}",
            r.warnings
        );
        assert!(r.warnings.iter().any(|w| w.starts_with("instructions are not counted")));
        r.environment.cpu_governor = Some("powersave".into());
        let w = warnings(&o, &r, &[]);
        assert!(w.iter().any(|w| w.contains("`powersave`") && w.contains("performance")), "{w:?}");
        r.environment.cpu_governor = Some("performance".into());
        assert!(!warnings(&o, &r, &[]).iter().any(|w| w.contains("frequency")));
    }

    #[test]
    fn progress_reports_phases_runs_and_a_snapshot() {
        let mut exec = FakeExecutor::new(vec![out(1.0, Outcome::Ready)]);
        let mut seen = Vec::new();
        measure(&opts(vec![vec!["true"]], CacheState::Hot, 2), &mut exec, &mut |p| seen.push(p))
            .unwrap();
        assert!(matches!(seen[0], Progress::Phase { cache: CacheState::Hot, total: 3 }));
        let measured =
            seen.iter().filter(|p| matches!(p, Progress::Run { measured: true, .. })).count();
        assert_eq!(measured, 2);
        assert!(
            matches!(seen.last(), Some(Progress::Snapshot(r)) if r.commands[0].runs.len() == 2)
        );
    }

    #[test]
    fn eviction_reasons_name_the_holder() {
        let e = cache::EvictionReport {
            files: 1,
            resident_pages_after: 3,
            total_pages: 4,
            still_resident: vec![cache::Residency {
                path: "/usr/lib/libxul.so".into(),
                total_pages: 4,
                cached_pages: 3,
                dirty_pages: None,
            }],
            holders: vec![cache::Holder {
                pid: 4242,
                comm: "firefox".into(),
                path: "/usr/lib/libxul.so".into(),
                mapped: true,
            }],
            held: false,
            method: "mincore".into(),
            ..Default::default()
        };
        let r = record(0, out(1.0, Outcome::Ready), Some(e), Duration::from_secs(1));
        let why = r.excluded.unwrap();
        assert!(why.contains("pid 4242 (firefox)") && why.contains("libxul.so"), "{why}");
    }
}
