//! Orchestration of a measurement: discovery, warm-up, cache preparation, runs, statistics.
//!
//! For each cache state asked for (in the order given) and each command:
//!
//! 1. **Discovery** (`warm`, `selective`, `cold`): one run that collects the files the tree
//!    opens and maps ([`crate::launch`]), and which pages it uses of the files other processes
//!    map. The files split into the program's *own* files ([`cache::warm_set`]: the
//!    executable, its non-system libraries, its data; minus the system-wide data under
//!    [`SYSTEM_SHARED_DIRS`]) and the *shared* system files (the rest of
//!    [`cache::selective_set`]: system libraries, `/etc/ld.so.cache`, locales). `warm` evicts
//!    its own files, `selective` both, `cold` drops every cache and evicts both again (pages
//!    another process read back since the drop).
//! 2. **Warm-up**: `warmup` runs that are not recorded (at least one for `hot`, whose point is
//!    a warm cache). What the warm-up left cached is then *held* through the measured runs of a
//!    `warm` (its shared files) or `hot` series (every file its first warm-up run opened):
//!    [`cache::ResidentHold`] locks exactly those pages, so a proactive reclaimer or memory
//!    pressure cannot turn a hot run into a partly cold one.
//! 3. **Measured runs**: `runs` per command, interleaved when there are two (A B A B ...), so
//!    a drift of the machine affects both alike. Before every run the cache is prepared and
//!    the eviction verified page by page; the [`EvictionReport`] of the own files is kept with
//!    the run, and the pages of own and shared files that processes outside the run hold
//!    (they map them: a shell maps libc, the locale archive, the gconv cache and its own
//!    binary) in [`RunRecord::held_by_others`].
//!
//! A run is *excluded* from the statistics, with the reason, when its eviction failed (a page
//! of the program's own files stayed cached that no other process maps, or a file could not be
//! verified; with [`MeasureOptions::strict`], any page of them that stayed cached), when it did
//! not become ready in time, or when it failed. Held pages do not exclude a run: they are
//! inherent on a running system, and counted with it. Shared system files never exclude a
//! run: any process that starts on the machine reads `/etc/ld.so.cache` and libc back a moment
//! after they were evicted; what of them stayed cached is reported. Comparisons use `wall_s`.
//!
//! With [`MeasureOptions::storage`] (`--storage`) the program's files are first copied onto an
//! emulated slow device (`coldstart-storage`): one discovery run on the host finds them (or
//! `--app-dir` names them), every later run executes in the emulation (mount namespace,
//! throttled run cgroup), `cold` also drops the device's caches, and `warm`/`selective` evict the
//! copies, where the host sees them under the mount point. The device is torn down at the end,
//! on an error, and on an interrupt (a signal ends the run's wait with
//! [`MeasureError::Interrupted`], and the emulation is dropped on the way out).
//!
//! Each (state, command) gets its own [`CommandResult`], labelled with the cache state (or
//! `A`/`B` when comparing). Several states at once (`--cache cold,hot`) give several; when
//! `hot` is among them, [`MeasureReport::io_share`] holds each colder state's median minus the
//! hot median: the time start-up waits for storage.
//!
//! Here is the orchestration; the options and their validation are in `options`, the
//! emulated storage's life in `emulation`, the split of discovered files in `files`, and what
//! the runs become in the report (records, warnings, I/O share, environment) in `report`.

mod emulation;
mod files;
mod options;
mod report;

use std::path::PathBuf;

use coldstart_sys::is_root;

use crate::cache::pages::TouchedPages;
use crate::cache::{self, CacheError, CacheState, Verify};
use crate::launch::{Executor, RunSpec};
use crate::metric::Metric;
use crate::stats;
use coldstart_formats::measure::EvictionReport;
use coldstart_formats::measure::{
    CommandResult, Comparison, MeasureReport, ResidentHoldInfo, RunRecord, FORMAT_NAME,
    FORMAT_VERSION,
};
use emulation::{start_emulation, Emulation};
pub use files::SYSTEM_SHARED_DIRS;
use files::{device_files, executable, own_files};
pub use options::{MeasureError, MeasureOptions, StorageOptions};
pub use report::environment;
use report::{held_by_others, io_share, record, warnings, SharedKept};

/// What the orchestration is doing, for a progress bar.
#[derive(Debug, Clone)]
pub enum Progress {
    /// A new phase: `total` runs (discovery, warm-up and measured) lie ahead in it.
    Phase {
        /// The cache state of the phase.
        cache: CacheState,
        /// The runs ahead in it.
        total: usize,
    },
    /// One run of the phase ended (`measured` is `false` for discovery and warm-up).
    Run {
        /// The command's label.
        label: String,
        /// Whether the run is a measured one.
        measured: bool,
        /// Its wall time, seconds.
        wall_s: f64,
    },
    /// Everything measured so far, after each cache state: a caller can write it out so a
    /// later failure loses nothing.
    Snapshot(Box<MeasureReport>),
    /// A step that is not a run begins (`copying 12 files onto the emulated hdd`).
    Step(String),
}

/// Discovery runs per command: one with root (fanotify sees every open), three without.
fn discovery_runs() -> usize {
    if is_root() {
        1
    } else {
        3
    }
}

/// Run a measurement. Only errors that prevent measuring at all are returned; runs that fail
/// or time out are recorded and excluded.
///
/// With [`MeasureOptions::storage`] the emulated device is created first and torn down at the
/// end, on an error too (and on an interrupt: [`MeasureError::Interrupted`], see
/// [`coldstart_process::cancel`]).
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

/// The run of command `i` of `opts`, collecting the files it reads when `discover`.
fn run_spec(opts: &MeasureOptions, i: usize, discover: bool) -> RunSpec {
    let launcher = opts.launchers.get(i).filter(|_| !discover).cloned().unwrap_or_default();
    RunSpec {
        argv: launcher.into_iter().chain(opts.commands[i].iter().cloned()).collect(),
        env: Vec::new(),
        cwd: None,
        ready: opts.ready.clone(),
        timeout: opts.timeout,
        discover_files: discover,
    }
}

/// The files `measure --storage` copies onto the emulated device for `command` when no
/// directory is named, found as `measure` finds them: discovery runs on this machine's disk,
/// then the program's own files of what they read, and its executable. For a stage that runs a
/// program on emulated storage without measuring it (`timeline --storage`).
pub fn storage_files(
    command: &[String],
    ready: coldstart_ready::Ready,
    timeout: std::time::Duration,
) -> Result<Vec<PathBuf>, MeasureError> {
    let opts =
        MeasureOptions { commands: vec![command.to_vec()], ready, timeout, ..Default::default() };
    opts.validate()?;
    let mut exec = crate::launch::LinuxExecutor::new();
    let found = discover(&opts, &mut exec, &mut |_| {}, 0, "")?;
    Ok(device_files(&found.files, command)?)
}

/// What discovery runs of one command found: the files it reads, and the pages it uses of the
/// files other processes map.
#[derive(Debug, Clone, Default)]
struct Discovered {
    files: Vec<PathBuf>,
    touched: TouchedPages,
}

/// The files command `i` reads, from discovery runs on the host.
fn discover(
    opts: &MeasureOptions,
    exec: &mut dyn Executor,
    progress: &mut dyn FnMut(Progress),
    i: usize,
    label: &str,
) -> Result<Discovered, MeasureError> {
    let mut found = Discovered::default();
    for _ in 0..discovery_runs() {
        let out = exec.run(&run_spec(opts, i, true))?;
        progress(Progress::Run {
            label: label.to_string(),
            measured: false,
            wall_s: out.counters.wall_s,
        });
        found.files.extend(out.files);
        found.touched.merge(&out.touched);
    }
    found.files.sort();
    found.files.dedup();
    Ok(found)
}

fn measure_with(
    opts: &MeasureOptions,
    exec: &mut dyn Executor,
    progress: &mut dyn FnMut(Progress),
    emulation_slot: &mut Option<Emulation>,
) -> Result<MeasureReport, MeasureError> {
    let compare = opts.commands.len() == 2;
    // Labels: `A`/`B` when comparing (one state), else the command line; a command's result
    // is labelled `A`/`B` or its cache state, its command line in `CommandResult::command`.
    let cmd_label = |i: usize| -> String {
        if compare {
            ["A", "B"][i].to_string()
        } else {
            opts.commands[i].join(" ")
        }
    };
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
        resident_holds: Vec::new(),
    };

    // Emulated storage: discover the program's files once, on the host, before they are
    // copied; every cache state reuses this discovery (inside the mount namespace the files
    // would be reported by their paths on the copy).
    let mut upfront: Option<Vec<Discovered>> = None;
    if let Some(so) = &opts.storage {
        let needed = so.app_dir.is_none() || opts.caches.iter().any(|c| *c != CacheState::Hot);
        let mut found = vec![Discovered::default(); opts.commands.len()];
        if needed {
            for (i, f) in found.iter_mut().enumerate() {
                *f = discover(opts, exec, progress, i, &cmd_label(i))?;
            }
        }
        let files: Vec<Vec<PathBuf>> = found.iter().map(|f| f.files.clone()).collect();
        progress(Progress::Step(match &so.app_dir {
            Some(d) => format!("copying {} onto the emulated {}", d.display(), so.profile.name),
            None => format!(
                "copying the program's files onto the emulated {} ({} found)",
                so.profile.name,
                coldstart_units::count(files.iter().map(Vec::len).sum::<usize>() as u64, "file")
            ),
        }));
        let (emulation, info, fidelity) = start_emulation(opts, so, &files, exec)?;
        *emulation_slot = Some(emulation);
        report.storage = Some(info);
        state_warnings.extend(fidelity);
        upfront = Some(found);
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
        let result_label = |i: usize| if compare { cmd_label(i) } else { state.to_string() };

        // 1. Discovery: the program's own files (whose eviction must hold) and the shared
        // system libraries it uses (evicted too for `selective`, but pages other processes
        // map cannot leave the cache; that is reported, not excluded).
        let mut own: Vec<Vec<PathBuf>> = vec![Vec::new(); n];
        let mut shared: Vec<Vec<PathBuf>> = vec![Vec::new(); n];
        let mut touched: Vec<TouchedPages> = vec![TouchedPages::new(); n];
        if needs_discovery {
            for i in 0..n {
                let found = match &upfront {
                    Some(found) => found[i].clone(),
                    None => discover(opts, exec, progress, i, &cmd_label(i))?,
                };
                touched[i] = found.touched;
                let files = found.files;
                let exe = executable(&opts.commands[i])?;
                own[i] = own_files(&files, &exe);
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
        let mut shared_kept = SharedKept::default();

        // 2. Warm-up. A hot series learns the files it reads from its first warm-up run (no
        // run of its own), to hold them below.
        let mut learned: Vec<PathBuf> = Vec::new();
        for round in 0..warmup {
            for i in 0..n {
                let learn = state == CacheState::Hot && round == 0;
                let out = exec.run(&run_spec(opts, i, learn))?;
                progress(Progress::Run {
                    label: cmd_label(i),
                    measured: false,
                    wall_s: out.counters.wall_s,
                });
                if learn {
                    learned.extend(out.files);
                }
            }
        }

        // What the warm-up left cached is the state the runs start from: hold it there.
        let _hold = match state {
            CacheState::Hot => {
                learned.extend(upfront.iter().flatten().flat_map(|d| d.files.iter().cloned()));
                let files = match emulation {
                    Some(e) => e.on_copy(&learned)?,
                    None => learned,
                };
                Some(hold_series(state, files, &mut report))
            }
            CacheState::Warm => {
                // Not a file another command evicts before its runs.
                let evicted: Vec<&PathBuf> = own.iter().flatten().collect();
                let files =
                    shared.iter().flatten().filter(|f| !evicted.contains(f)).cloned().collect();
                Some(hold_series(state, files, &mut report))
            }
            CacheState::Cold | CacheState::Selective => None,
        };

        // 3. Measured runs, interleaved.
        let mut runs: Vec<Vec<RunRecord>> = vec![Vec::new(); n];
        for index in 0..opts.runs {
            for i in 0..n {
                let prepared = prepare_cache(state, &own[i], &shared[i], &touched[i], emulation)?;
                if let Some(r) = &prepared.shared {
                    shared_kept.note(i, r);
                }
                let held = held_by_others(prepared.own.as_ref(), prepared.shared.as_ref());
                let out = exec.run(&run_spec(opts, i, false))?;
                progress(Progress::Run {
                    label: cmd_label(i),
                    measured: true,
                    wall_s: out.counters.wall_s,
                });
                runs[i].push(record(index, out, prepared.own, held, opts));
            }
        }
        state_warnings.extend(shared_kept.warnings(result_label));

        for (i, r) in runs.into_iter().enumerate() {
            report.commands.push(CommandResult {
                label: result_label(i),
                command: opts
                    .launchers
                    .get(i)
                    .into_iter()
                    .flatten()
                    .chain(&opts.commands[i])
                    .cloned()
                    .collect(),
                summaries: stats::summarize_runs(&r),
                runs: r,
            });
        }
        progress(Progress::Snapshot(Box::new(report.clone())));
    }

    if compare {
        report.comparison = stats::compare(&report.commands[0], &report.commands[1], Metric::Wall)
            .map(|c| Comparison { change: opts.change.clone(), ..c });
    }
    report.io_share = io_share(opts, &report);
    report.warnings = warnings(opts, &report, &exec.warnings());
    report.warnings.extend(state_warnings);
    Ok(report)
}

/// Hold the cached pages of `files` through a `state` series, and say so in `report`.
fn hold_series(
    state: CacheState,
    mut files: Vec<PathBuf>,
    report: &mut MeasureReport,
) -> cache::ResidentHold {
    files.sort();
    files.dedup();
    let hold = cache::ResidentHold::take(&files, cache::default_hold_budget());
    report.resident_holds.push(ResidentHoldInfo {
        cache: state.to_string(),
        files: hold.files,
        bytes: hold.bytes,
        incomplete: hold.incomplete.clone(),
    });
    hold
}

/// The verified evictions before one run: of the command's own files (`None` for `hot`) and
/// of the shared system files (`None` when there are none, or the state keeps them).
#[derive(Debug, Default)]
struct Prepared {
    own: Option<EvictionReport>,
    shared: Option<EvictionReport>,
}

/// Put the page cache in `state` before a run of a command whose own files are `own` and
/// shared files `shared` (see the module docs), and verify it; `touched` are the pages start-up
/// uses of files other processes map, to count the held ones it would read.
fn prepare_cache(
    state: CacheState,
    own: &[PathBuf],
    shared: &[PathBuf],
    touched: &TouchedPages,
    emulation: Option<&Emulation>,
) -> Result<Prepared, MeasureError> {
    // The measured tree does not exist yet: every live process may hold pages.
    let verify = Verify { exclude_pids: &[], touched: Some(touched) };
    let cache_err = |source| MeasureError::Cache { state, source };
    let evict_shared = |shared: &[PathBuf]| -> Result<Option<EvictionReport>, MeasureError> {
        if shared.is_empty() {
            return Ok(None);
        }
        Ok(Some(cache::evict_with(shared, verify).map_err(cache_err)?))
    };
    Ok(match state {
        CacheState::Hot => Prepared::default(),
        CacheState::Cold => {
            if let Some(e) = emulation {
                // The copy's pages, inodes and directories, and the device's buffers.
                e.with(|s| s.drop_caches())?;
            }
            cache::drop_all_caches().map_err(|e| match e {
                CacheError::NotRoot => MeasureError::NeedsRoot,
                other => {
                    MeasureError::Cache { state, source: std::io::Error::other(other.to_string()) }
                }
            })?;
            // After the drop, eviction only has work where another process read pages back.
            let shared = evict_shared(shared)?;
            Prepared { own: Some(cache::evict_with(own, verify).map_err(cache_err)?), shared }
        }
        CacheState::Selective => {
            let shared = evict_shared(shared)?;
            Prepared { own: Some(cache::evict_with(own, verify).map_err(cache_err)?), shared }
        }
        CacheState::Warm => {
            Prepared { own: Some(cache::evict_with(own, verify).map_err(cache_err)?), shared: None }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::{FakeExecutor, RunOutput};
    use coldstart_formats::measure::{Counters, Outcome};
    use coldstart_storage::{StorageError, StorageProfile};

    fn out(wall: f64, outcome: Outcome) -> RunOutput {
        RunOutput {
            outcome: Some(outcome),
            counters: Counters { wall_s: wall, major_faults: Some(0), ..Counters::default() },
            ..RunOutput::default()
        }
    }

    /// Runs that became ready after these wall times.
    fn ready(walls: &[f64]) -> Vec<RunOutput> {
        walls.iter().map(|&wall| out(wall, Outcome::Ready)).collect()
    }

    /// A discovery run that found one data file of `len` bytes (in the returned directory).
    fn discovery_of_a_data_file(len: usize) -> (tempfile::TempDir, RunOutput) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data.bin");
        std::fs::write(&data, vec![1u8; len]).unwrap();
        let mut discovery = out(1.0, Outcome::Ready);
        discovery.files = vec![data];
        (dir, discovery)
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
        // One warm-up (forced for hot), four measured runs; the warm-up is not recorded. The
        // warm-up names the files to hold through the runs; no measured run collects files.
        assert_eq!(exec.calls.len(), 5);
        assert!(exec.calls[0].discover_files);
        assert!(exec.calls[1..].iter().all(|c| !c.discover_files));
        assert_eq!(r.resident_holds.len(), 1);
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
        assert!(r.warnings.iter().any(|w| w.contains("1 of 4 runs did not become ready")));
        assert!(r.warnings.iter().any(|w| w.contains("1 of 4 runs failed")));
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
        let (_dir, discovery) = discovery_of_a_data_file(8192);
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
    fn a_launcher_starts_the_measured_runs_but_not_discovery() {
        let (_dir, discovery) = discovery_of_a_data_file(8192);
        let mut exec = FakeExecutor::new(vec![discovery, out(1.0, Outcome::Ready)]);
        let mut o = opts(vec![vec!["true"]], CacheState::Selective, 2);
        o.launchers = vec![vec!["env".into(), "X=1".into()]];
        let r = measure(&o, &mut exec, &mut |_| {}).unwrap();
        let d = discovery_runs();
        assert!(exec.calls[..d].iter().all(|c| c.argv == ["true"]));
        assert!(exec.calls[d..].iter().all(|c| c.argv == ["env", "X=1", "true"]));
        assert_eq!(r.commands[0].command, ["env", "X=1", "true"]);
        // The files evicted are the command's, not the launcher's.
        assert_eq!(r.commands[0].runs[0].eviction.as_ref().unwrap().files, 2);
    }

    #[test]
    fn io_share_is_the_difference_of_medians() {
        let (_dir, discovery) = discovery_of_a_data_file(4096);
        // selective: discovery, 3 runs of 0.5 s; hot: warm-up, 3 runs of 0.1 s.
        let mut script = vec![discovery; discovery_runs()];
        script.extend(ready(&[0.5, 0.5, 0.5, 0.1, 0.1, 0.1, 0.1]));
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
        // A warm-up, then the measured runs.
        let script = ready(&[1.0, 5.0, 1.0, 1.0, 1.0]);
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
        // A warm-up, then the measured runs.
        let script = ready(&[1.0, 1.0, 3.0, 1.5, 4.0, 2.0]);
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
}
