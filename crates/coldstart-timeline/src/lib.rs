//! Where the start-up time of one run goes, on one time axis (`coldstart timeline`).
//!
//! One run of the program, cold (the page cache dropped) or hot, traced by the kernel:
//!
//! - its **phases** (`exec`, the loader mapping libraries, relocation, constructors, `main`,
//!   readiness), read off its system calls (`execve`, `mmap`, `mprotect`) and two uprobes,
//!   at the executable's entry point and at `main` (module `phases` says how);
//! - every **page** it faulted, mapped by fault-around, or had read into the page cache, with
//!   the file (the `filemap` tracepoints; files named as they are opened, through fanotify);
//! - the **block requests** it caused, issue to completion (`block_rq_issue`,
//!   `block_rq_complete`, matched to the bios it queued);
//! - the time its threads were **blocked** (`sched_switch` into uninterruptible sleep, until
//!   the thread runs again), and on which file each wait followed a page event;
//! - each module's **first and last function touch**, from a function profile of the same
//!   command recorded with the profiler's public API in a run of its own (breakpoints copy
//!   the text pages they patch, which would hide those pages from the traced run), placed on
//!   this run's axis at the entry point and `main`.
//!
//! [`from_profile`] draws the same picture, without the kernel's parts, from a profile.
//! Tracing needs root (tracefs, uprobes, fanotify, `drop_caches`). While
//! [`coldstart_process::cancel::catch`] is in force, `SIGINT`, `SIGTERM` and `SIGHUP` end a
//! recording within a millisecond of the next wait with [`TimelineError::Interrupted`], the
//! program killed and the tracing (and an emulated device) removed.

mod names;
mod phases;
mod run;
mod trace;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use coldstart_error::Category;
use coldstart_formats::{ModuleSpan, PageEvent, Phase, Timeline, TimelineFile};
use coldstart_profile_format::Profile;

use coldstart_ready::Ready;

/// Why a timeline could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    #[error(
        "tracing a start-up needs root (tracefs, uprobes, fanotify, drop_caches): run as root"
    )]
    /// Not run as root.
    NotRoot,
    /// No command after `--`.
    #[error("no command given: put it after `--`")]
    NoCommand,
    #[error(
        "command `{command}` {why}: give the program to run after `--` (a file, or a name in PATH)"
    )]
    /// The command is not a file, nor a name in `PATH`.
    CommandNotFound {
        /// The command as given.
        command: String,
        /// Why it was not found.
        why: &'static str,
    },
    /// The command cannot be run (not executable, say).
    #[error("cannot run the command: {why}")]
    BadCommand {
        /// Why.
        why: String,
    },
    #[error("the readiness signal `{ready}` is not supported by timeline: use exit, stdout:, stderr:, tcp:, file: or fd")]
    /// A readiness signal timeline does not wait on.
    Unsupported {
        /// The signal as given.
        ready: String,
    },
    /// A tracefs file could not be written or read.
    #[error("{path}: {message}")]
    Tracefs {
        /// The file.
        path: PathBuf,
        /// What failed, and what to do.
        message: String,
    },
    /// The program could not be started.
    #[error("cannot start the program: {why}")]
    Spawn {
        /// Why.
        why: String,
    },
    /// The page cache could not be dropped for a cold run.
    #[error("cannot drop the page cache: {0}")]
    DropCaches(std::io::Error),
    /// The program exited before its readiness signal.
    #[error("the program exited before it was ready{said}")]
    ExitedBeforeReady {
        /// The end of the message: its last lines on standard error, or that it wrote none.
        said: String,
    },
    /// The program was not ready within the timeout.
    #[error("the program was not ready after {0:?}: raise --timeout or check --ready")]
    Timeout(Duration),
    /// The trace holds no `execve` of the program.
    #[error("the trace shows no execve of the program: tracing did not start in time")]
    NoExec,
    /// The function profile failed.
    #[error("function profile: {0}")]
    Profile(#[from] coldstart_profile::ProfileError),
    /// The emulated storage could not be set up or torn down.
    #[error("emulated storage: {0}")]
    Storage(#[from] coldstart_storage::StorageError),
    #[error("interrupted by {}: the program was killed, the tracing removed and nothing was written", coldstart_profile::interrupt::signal_name(*signal))]
    /// A signal ended the timeline.
    Interrupted {
        /// Its number.
        signal: i32,
    },
}

impl From<coldstart_sys::tracefs::TraceError> for TimelineError {
    fn from(e: coldstart_sys::tracefs::TraceError) -> Self {
        TimelineError::Tracefs { path: e.path, message: e.message }
    }
}

impl TimelineError {
    /// The signal that interrupted the timeline (or its function profile), if one did.
    pub fn interrupted(&self) -> Option<i32> {
        match self {
            TimelineError::Interrupted { signal }
            | TimelineError::Profile(coldstart_profile::ProfileError::Interrupted { signal }) => {
                Some(*signal)
            }
            _ => None,
        }
    }

    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            TimelineError::NotRoot => Category::Privilege,
            TimelineError::NoCommand
            | TimelineError::CommandNotFound { .. }
            | TimelineError::BadCommand { .. }
            | TimelineError::Unsupported { .. }
            | TimelineError::ExitedBeforeReady { .. }
            | TimelineError::Timeout(_) => Category::Usage,
            TimelineError::Tracefs { .. }
            | TimelineError::Spawn { .. }
            | TimelineError::DropCaches(_)
            | TimelineError::NoExec
            | TimelineError::Interrupted { .. } => Category::Environment,
            TimelineError::Profile(e) => e.category(),
            TimelineError::Storage(e) => e.category(),
        }
    }
}

/// The page-cache state the traced run starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cache {
    /// `sync` and `drop_caches`: what `measure --cache cold` starts from.
    Cold,
    /// After one untraced run.
    Hot,
}

/// Where the module touches come from.
#[derive(Debug, Clone)]
pub enum Functions {
    /// A function profile recorded after the traced run (the profiler's default tracer).
    Record,
    /// This profile.
    From(Box<Profile>),
    /// None.
    Skip,
}

/// What to trace.
#[derive(Debug, Clone)]
pub struct TimelineOptions {
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// When start-up ends.
    pub ready: Ready,
    /// The page cache's state before the run.
    pub cache: Cache,
    /// The function profile the phases are lined up with.
    pub functions: Functions,
    /// How long to wait for readiness.
    pub timeout: Duration,
    /// Run on an emulated slow device instead of this machine's own disk.
    pub storage: Option<StorageSetup>,
}

/// The traced run on emulated slow storage (as `measure --storage` runs): `paths` copied onto
/// a loop device of `profile`, seen by the run at their own paths, its reads throttled; the
/// copy's caches dropped too for a cold run. Torn down when the timeline is recorded.
#[derive(Debug, Clone)]
pub struct StorageSetup {
    /// The kind of device.
    pub profile: coldstart_storage::StorageProfile,
    /// Files and directories to copy (directories whole).
    pub paths: Vec<PathBuf>,
    /// Where the device's backing file goes (a disk file system).
    pub work_dir: PathBuf,
}

/// The emulated device of a traced run and the throttled cgroup its processes join.
struct Emulated {
    storage: coldstart_storage::EmulatedStorage,
    cgroup: coldstart_storage::ScratchCgroup,
    enter: run::Enter,
}

impl Emulated {
    fn start(setup: &StorageSetup) -> Result<Emulated, TimelineError> {
        let storage = coldstart_storage::EmulatedStorage::create(
            &setup.profile,
            &setup.paths,
            &setup.work_dir,
        )?;
        let cgroup = coldstart_storage::ScratchCgroup::create()?;
        storage.throttle(cgroup.paths())?;
        let procs = cgroup.paths().dir.join("cgroup.procs");
        let join = std::fs::OpenOptions::new().write(true).open(&procs).map_err(|source| {
            coldstart_storage::StorageError::Io { path: procs.clone(), what: "open".into(), source }
        })?;
        let enter = run::Enter { hook: storage.enter_hook()?, join };
        Ok(Emulated { storage, cgroup, enter })
    }

    fn close(self) -> Result<(), TimelineError> {
        let unthrottled = self.storage.unthrottle(self.cgroup.paths());
        let removed = self.cgroup.remove();
        self.storage.close()?;
        unthrottled?;
        removed?;
        Ok(())
    }
}

/// The file offsets of the executable's entry point and of `main`, where it has them.
fn probe_offsets(path: &Path) -> Vec<(&'static str, u64)> {
    let Ok(info) = coldstart_elf::ElfInfo::open(path, &coldstart_elf::SymbolOptions::default())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(o) = info.vaddr_to_offset(info.entry) {
        out.push((phases::ENTRY, o));
    }
    if let Some(o) = coldstart_elf::find_symbol(path, "main")
        .ok()
        .flatten()
        .and_then(|a| info.vaddr_to_offset(a))
    {
        out.push((phases::MAIN, o));
    }
    out
}

fn drop_caches() -> Result<(), TimelineError> {
    coldstart_sys::file::sync_all();
    std::fs::write("/proc/sys/vm/drop_caches", "3").map_err(TimelineError::DropCaches)
}

/// The program the command's process runs in the end: the file of its last `exec`, seen in
/// one run with only the exec events kept (`None` if it was not seen).
fn executed(
    tracing: &trace::Tracing,
    program: &Path,
    options: &TimelineOptions,
) -> Result<Option<PathBuf>, TimelineError> {
    let mut child = run::Child::fork(program, &options.command, &options.ready, None)?;
    tracing.program.write("set_event_pid", &child.pid.to_string())?;
    tracing.program.write("tracing_on", "1")?;
    child.go();
    let ready = child.wait_ready(&options.ready, options.timeout, |_| {});
    tracing.program.write("tracing_on", "0")?;
    let root = child.pid;
    drop(child);
    let text = tracing.program.read()?;
    // Empty the buffer and the pid filter for the traced run.
    tracing.program.write("trace", "")?;
    tracing.program.write("set_event_pid", "")?;
    if ready?.is_none() {
        return Err(TimelineError::Timeout(options.timeout));
    }
    let last = text.lines().filter_map(trace::exec_filename).rfind(|(p, _)| *p == root);
    Ok(last.map(|(_, f)| {
        let f = PathBuf::from(f);
        if f.is_absolute() {
            f
        } else {
            std::env::current_dir().map(|d| d.join(&f)).unwrap_or(f)
        }
    }))
}

/// Trace one start-up of `options.command`.
pub fn record(options: &TimelineOptions) -> Result<Timeline, TimelineError> {
    let emulated = match &options.storage {
        Some(setup) => {
            if !coldstart_sys::is_root() {
                return Err(TimelineError::NotRoot);
            }
            let mut e = Emulated::start(setup)?;
            if options.cache == Cache::Cold {
                // Before the run forks: its namespace keeps the mount it binds from. (Only
                // the traced run uses the copy; the runs before it use the host's files.)
                if let Err(err) = e.storage.drop_caches() {
                    let _ = e.close();
                    return Err(err.into());
                }
            }
            Some(e)
        }
        None => None,
    };
    let result = record_on(options, emulated.as_ref());
    let closed = emulated.map_or(Ok(()), Emulated::close);
    let mut timeline = result?;
    closed?;
    if let Some(setup) = &options.storage {
        timeline.storage = Some(setup.profile.name.clone());
        timeline.warnings.insert(
            0,
            format!(
                "ran on emulated `{}` storage: {} copied onto a loop device",
                setup.profile.name,
                copied(&setup.paths)
            ),
        );
    }
    Ok(timeline)
}

/// What went onto the device, in a line: a few paths by name, the rest counted.
fn copied(paths: &[PathBuf]) -> String {
    const NAMED: usize = 3;
    let mut s =
        paths.iter().take(NAMED).map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    if paths.len() > NAMED {
        s += &format!(" and {} more", paths.len() - NAMED);
    }
    s
}

/// Record the timeline of one start of the command (on the emulated device when `emulated`):
/// check it can be, probe the program, run it traced, read the trace, derive the phases and
/// costs, and line the functions up with them.
fn record_on(
    options: &TimelineOptions,
    emulated: Option<&Emulated>,
) -> Result<Timeline, TimelineError> {
    let enter = emulated.map(|e| &e.enter);
    let program = recordable(options)?;
    let mut warnings = Vec::new();
    let mut tracing = trace::Tracing::create()?;
    warnings.extend(probe_program(&mut tracing, &program, options)?);
    if options.cache == Cache::Hot {
        run::warm(&program, &options.command, &options.ready, options.timeout, enter)?;
    }
    let run = traced_run(&tracing, &program, options, enter, &mut warnings)?;
    let (events, block) = read_trace(&tracing, &mut warnings)?;
    drop(tracing);
    let ready_ns = match options.ready {
        Ready::Exit => exit_of(&events, run.root).unwrap_or(run.ready_ns),
        _ => run.ready_ns,
    };
    let skip: Vec<(u32, u32)> = coldstart_process::shared_memory_device().into_iter().collect();
    let mut d = phases::derive(&events, &block, run.root, ready_ns, &run.names, &skip);
    name_block_devices(&mut d.files, Path::new("/sys/dev/block"));
    if d.phases.is_empty() {
        return Err(TimelineError::NoExec);
    }
    if let Some(status) = run.exit_status {
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) != 0 {
            warnings.push(format!(
                "the program exited with status {}{}",
                libc::WEXITSTATUS(status),
                run.said
            ));
        }
    }
    let (entry_s, main_s) = (d.entry_s, d.main_s);
    let mut t = timeline_of(options, d);
    if let Some(p) = functions(options)? {
        let (spans, note) = align(&p, &program, entry_s, main_s, t.wall_s);
        t.modules = spans;
        t.modules_note = Some(note);
    }
    t.warnings = warnings;
    Ok(t)
}

/// The program the command runs, once it is clear a timeline of it can be recorded: as
/// root, with a command found on PATH, ready other than by a window.
fn recordable(options: &TimelineOptions) -> Result<PathBuf, TimelineError> {
    if !coldstart_sys::is_root() {
        return Err(TimelineError::NotRoot);
    }
    let first = options.command.first().ok_or(TimelineError::NoCommand)?;
    let program = coldstart_process::find_program(first)
        .map_err(|e| TimelineError::CommandNotFound { command: e.subject(), why: e.reason() })?;
    if matches!(options.ready, Ready::Window(_)) {
        return Err(TimelineError::Unsupported { ready: options.ready.to_string() });
    }
    Ok(program)
}

/// Place uprobes at the entry point and `main` of the program the command ends up running (a
/// shell script or a shim such as pyenv's executes another, found by a run beforehand); the
/// warnings say what could not be probed.
fn probe_program(
    tracing: &mut trace::Tracing,
    program: &Path,
    options: &TimelineOptions,
) -> Result<Vec<String>, TimelineError> {
    let mut warnings = Vec::new();
    let probed = executed(tracing, program, options)?.unwrap_or_else(|| program.to_path_buf());
    let probes = probe_offsets(&probed);
    if !probes.iter().any(|(n, _)| *n == phases::MAIN) {
        warnings.push(format!(
            "{} has no `main` symbol (stripped, or a script): the phases after the loader are one",
            probed.display()
        ));
    }
    let refused = tracing.probe(&probed, &probes)?;
    warnings.extend(refused.into_iter().map(|r| format!("uprobe not placed: {r}")));
    Ok(warnings)
}

/// What a traced run of the program left.
struct TracedRun {
    /// The program's pid, the root of its process tree.
    root: i32,
    /// When readiness was seen (trace clock, ns).
    ready_ns: u64,
    /// Its wait status, when it exited, and what it said.
    exit_status: Option<i32>,
    said: String,
    /// The files it opened or mapped, by device and inode.
    names: std::collections::HashMap<coldstart_process::FileKey, String>,
}

/// Run the program once with tracing on: start it held, drop the caches for a cold start,
/// trace its process tree from the moment it goes until it is ready (naming the files it
/// opens and maps meanwhile), then turn tracing off.
fn traced_run(
    tracing: &trace::Tracing,
    program: &Path,
    options: &TimelineOptions,
    enter: Option<&run::Enter>,
    warnings: &mut Vec<String>,
) -> Result<TracedRun, TimelineError> {
    let listener = names::Names::start();
    if listener.is_none() {
        warnings
            .push("fanotify is not available: files are named from the program's maps only".into());
    }
    let mut child = run::Child::fork(program, &options.command, &options.ready, enter)?;
    if options.cache == Cache::Cold {
        drop_caches()?;
    }
    tracing.program.write("set_event_pid", &child.pid.to_string())?;
    tracing.block.write("tracing_on", "1")?;
    tracing.program.write("tracing_on", "1")?;
    child.go();
    let mut names = std::collections::HashMap::new();
    let mut polls = 0u32;
    let ready = child.wait_ready(&options.ready, options.timeout, |pgid| {
        polls += 1;
        if polls.is_multiple_of(4) {
            names::snapshot(pgid, &mut names);
        }
    })?;
    let _ = tracing.program.write("tracing_on", "0");
    let _ = tracing.block.write("tracing_on", "0");
    names::snapshot(child.pid, &mut names);
    let root = child.pid;
    let exit_status = child.status();
    let said = child.said();
    drop(child);
    let Some(ready_ns) = ready else { return Err(TimelineError::Timeout(options.timeout)) };
    if let Some(l) = listener {
        for (k, v) in l.finish() {
            names.entry(k).or_insert(v);
        }
    }
    Ok(TracedRun { root, ready_ns, exit_status, said, names })
}

/// The events of the program's and the block instances; a warning for each that lost events.
fn read_trace(
    tracing: &trace::Tracing,
    warnings: &mut Vec<String>,
) -> Result<(Vec<trace::Event>, Vec<trace::Event>), TimelineError> {
    let probe_names = vec![phases::ENTRY.to_owned(), phases::MAIN.to_owned()];
    let text = tracing.program.read()?;
    let events: Vec<trace::Event> =
        text.lines().filter_map(|l| trace::parse(l, &probe_names)).collect();
    let btext = tracing.block.read()?;
    let block: Vec<trace::Event> = btext.lines().filter_map(|l| trace::parse(l, &[])).collect();
    for (what, lost) in [("program", tracing.program.lost()), ("block", tracing.block.lost())] {
        if lost > 0 {
            warnings.push(format!("the {what} trace lost {lost} events (ring buffer overrun): the timeline is incomplete"));
        }
    }
    Ok((events, block))
}

/// The root's exit event, with exit readiness the end of the start: exact, where the poll
/// is late.
fn exit_of(events: &[trace::Event], root: i32) -> Option<u64> {
    events
        .iter()
        .filter(|e| e.pid == root && e.kind == trace::Kind::Exit)
        .map(|e| e.ts_ns)
        .next_back()
}

/// The timeline of the command from what its events gave (`d`), without functions or
/// warnings.
fn timeline_of(options: &TimelineOptions, d: phases::Derived) -> Timeline {
    let command = options.command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    Timeline {
        created_unix: coldstart_units::now_unix(),
        cache: match options.cache {
            Cache::Cold => "cold".into(),
            Cache::Hot => "hot".into(),
        },
        ready: options.ready.to_string(),
        wall_s: d.wall_s,
        phases: d.phases,
        io_wait_s: d.io_wait_s,
        io_wait_wall_s: d.io_wait_wall_s,
        waits: d.waits,
        files: d.files,
        events: d.events,
        block: d.block,
        costs: d.costs,
        ..Timeline::new(command)
    }
}

/// The functions' profile the phases are lined up with: none, the one given, or one
/// recorded now (killed at readiness).
fn functions(options: &TimelineOptions) -> Result<Option<Profile>, TimelineError> {
    Ok(match &options.functions {
        Functions::Skip => None,
        Functions::From(p) => Some((**p).clone()),
        Functions::Record => {
            let mut o = coldstart_profile::ProfileOptions::new(options.command.clone());
            o.ready = options.ready.clone();
            o.kill_at_ready = true;
            o.timeout = Some(options.timeout);
            Some(coldstart_profile::profile(&o)?.profile)
        }
    })
}

/// A file system reads its metadata (directories, inode tables, the journal) through the
/// page cache of its block device, an inode of the kernel's `bdev` file system (a device of
/// major 0) numbered by the device it stands for (`major << 20 | minor`): named by its device
/// node, as `/sys/dev/block` lists it.
fn name_block_devices(files: &mut [TimelineFile], sys_block: &Path) {
    for f in files.iter_mut().filter(|f| f.path.is_empty() && f.dev.starts_with("0:")) {
        let (major, minor) = (f.ino >> 20, f.ino & 0xf_ffff);
        let Ok(uevent) = std::fs::read_to_string(sys_block.join(format!("{major}:{minor}/uevent")))
        else {
            continue;
        };
        if let Some(name) = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME=")) {
            f.path = format!("/dev/{name} (file system metadata)");
        }
    }
}

/// The first touch of a function named `name` in the module at `path` (else any), ns.
fn touch(p: &Profile, path: &Path, name: &str) -> Option<u64> {
    let has = |m: &coldstart_profile_format::Module| {
        m.functions.iter().find(|f| f.names.iter().any(|n| n == name)).map(|f| f.first_touch_ns)
    };
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    p.modules
        .iter()
        .filter(|m| m.path == canonical)
        .find_map(has)
        .or_else(|| p.modules.iter().find_map(has))
}

/// Each module's first and last function touch from `p`, put on a run's axis: piecewise
/// linearly between the anchors both runs share (exec, the entry point `_start`, `main`, the
/// end), since the profile's run (warm, with breakpoints) went at another pace.
pub fn align(
    p: &Profile,
    program: &Path,
    entry_s: Option<f64>,
    main_s: Option<f64>,
    wall_s: f64,
) -> (Vec<ModuleSpan>, String) {
    let end_p = p.duration_ns as f64 / 1e9;
    let mut anchors: Vec<(f64, f64)> = vec![(0.0, 0.0)];
    let mut used = Vec::new();
    for (name, here) in [("_start", entry_s), ("main", main_s)] {
        if let (Some(t), Some(h)) = (touch(p, program, name), here) {
            let t = t as f64 / 1e9;
            if t > anchors.last().unwrap().0 && h >= anchors.last().unwrap().1 {
                anchors.push((t, h));
                used.push(name);
            }
        }
    }
    if end_p > anchors.last().unwrap().0 {
        anchors.push((end_p, wall_s));
    }
    let map = |t: f64| {
        for w in anchors.windows(2) {
            let ((a, ah), (b, bh)) = (w[0], w[1]);
            if t <= b || std::ptr::eq(w, anchors.windows(2).last().unwrap()) {
                return if b > a { ah + (t - a) / (b - a) * (bh - ah) } else { ah };
            }
        }
        t
    };
    let mut spans: Vec<ModuleSpan> = p
        .modules
        .iter()
        .filter(|m| !m.functions.is_empty())
        .map(|m| {
            let first =
                m.functions.iter().map(|f| f.first_touch_ns).min().unwrap_or(0) as f64 / 1e9;
            let last = m.functions.iter().map(|f| f.first_touch_ns).max().unwrap_or(0) as f64 / 1e9;
            ModuleSpan {
                path: m.path.display().to_string(),
                first_s: map(first),
                last_s: map(last),
                functions: m.functions.len() as u64,
            }
        })
        .collect();
    spans.sort_by(|a, b| a.first_s.total_cmp(&b.first_s));
    let note = format!(
        "Module touches from a function profile of the same command (another run, warm, with \
         breakpoints: {} in all), placed on this run's axis between the points both runs share: \
         exec{}, and the end.",
        secs(end_p),
        used.iter().map(|u| format!(", {u}")).collect::<String>()
    );
    (spans, note)
}

fn secs(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

/// A timeline from a profile alone: its own run's times (breakpoints included), the phases
/// its function touches mark (before `_start`: exec, the loader, relocation and the
/// libraries' constructors; `_start` to `main`; `main` to the end), its module touches and,
/// when it has pages, its page events (from its page run).
pub fn from_profile(p: &Profile) -> Timeline {
    let mut t = Timeline::new(p.command.clone());
    t.created_unix = p.created_unix;
    t.cache = format!("profiled ({})", p.workload);
    t.ready = match &p.stop {
        coldstart_profile_format::Stop::Ready { signal, .. } => signal.clone(),
        _ => "exit".into(),
    };
    t.wall_s = p.duration_ns as f64 / 1e9;
    let program = p.command.first().map(PathBuf::from).unwrap_or_default();
    let start = touch(p, &program, "_start").map(|n| n as f64 / 1e9);
    let main = touch(p, &program, "main").map(|n| n as f64 / 1e9);
    let mut b = 0.0;
    for (name, at) in [("exec, loader, relocation", start), ("constructors", main)] {
        if let Some(at) = at.filter(|a| *a >= b) {
            t.phases.push(Phase { name: name.into(), start_s: b, end_s: at });
            b = at;
        }
    }
    t.phases.push(Phase {
        name: if main.is_some() { "main" } else { "program" }.into(),
        start_s: b,
        end_s: t.wall_s,
    });
    let (spans, _) = align(p, &program, start, main, t.wall_s);
    t.modules = spans;
    t.modules_note = Some(
        "From the profile's own run (breakpoints included); no block or scheduling events.".into(),
    );
    if let Some(pages) = &p.pages {
        t.files = pages
            .files
            .iter()
            .map(|f| TimelineFile {
                path: f.path.display().to_string(),
                dev: f.dev.clone(),
                ino: f.ino,
            })
            .collect();
        t.events = pages
            .accesses
            .iter()
            .map(|a| PageEvent {
                t_s: a.t_ns as f64 / 1e9,
                file: a.file,
                page: a.page,
                count: a.count,
                kind: a.event.clone(),
                pid: a.pid,
            })
            .collect();
        let mut costs: Vec<coldstart_formats::FileCost> = (0..t.files.len())
            .map(|file| coldstart_formats::FileCost { file, pages_read: 0, faults: 0, wait_s: 0.0 })
            .collect();
        for e in &t.events {
            match e.kind.as_str() {
                "read" => costs[e.file].pages_read += e.count,
                "fault" => costs[e.file].faults += 1,
                _ => {}
            }
        }
        costs.retain(|c| c.pages_read > 0 || c.faults > 0);
        costs.sort_by_key(|c| std::cmp::Reverse(c.pages_read));
        t.costs = costs;
        t.warnings.push("page events from the profile's page run, a run of their own".into());
    }
    t
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::TimelineError)
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_profile_format::{Module, Touch};

    fn profile(touches: &[(&str, &str, u64)], duration_ns: u64) -> Profile {
        let mut modules: Vec<Module> = Vec::new();
        for (i, (module, name, ns)) in touches.iter().enumerate() {
            let f = Touch {
                address: i as u64,
                size: 1,
                names: vec![(*name).into()],
                first_touch_ns: *ns,
                pid: 1,
                tid: 1,
                ordinal: i as u64,
                workloads: vec![],
            };
            match modules.iter_mut().find(|m| m.path == Path::new(module)) {
                Some(m) => m.functions.push(f),
                None => modules.push(Module {
                    path: (*module).into(),
                    build_id: None,
                    size: 0,
                    mtime: 0,
                    load_bias: 0,
                    symbols: "symtab".into(),
                    functions_total: 10,
                    functions: vec![f],
                }),
            }
        }
        Profile {
            command: vec!["/p".into()],
            duration_ns,
            ..coldstart_profile_format::testing::profile("a", modules)
        }
    }

    #[test]
    fn module_touches_are_placed_between_the_shared_anchors() {
        // Profile: _start at 4 ms, main at 6 ms, end at 10 ms; the traced run: 2, 3, 5 ms.
        let p = profile(
            &[
                ("/lib/libc.so", "init", 2_000_000),
                ("/p", "_start", 4_000_000),
                ("/p", "main", 6_000_000),
                ("/p", "work", 8_000_000),
            ],
            10_000_000,
        );
        let (spans, note) = align(&p, Path::new("/p"), Some(0.002), Some(0.003), 0.005);
        let exe = spans.iter().find(|s| s.path == "/p").unwrap();
        assert!(
            (exe.first_s - 0.002).abs() < 1e-12 && (exe.last_s - 0.004).abs() < 1e-12,
            "{exe:?}"
        );
        let libc = spans.iter().find(|s| s.path == "/lib/libc.so").unwrap();
        assert!((libc.first_s - 0.001).abs() < 1e-12, "{libc:?}");
        assert!(note.contains("_start") && note.contains("main"), "{note}");
    }

    #[test]
    fn a_profile_alone_gives_the_phases_its_touches_mark() {
        let p = profile(&[("/p", "_start", 4_000_000), ("/p", "main", 6_000_000)], 10_000_000);
        let t = from_profile(&p);
        let names: Vec<&str> = t.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["exec, loader, relocation", "constructors", "main"]);
        assert!((t.named_share() - 1.0).abs() < 1e-9);
    }
}
