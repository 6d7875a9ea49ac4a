//! The [`Runner`] that measures on this machine: `coldstart-measure` for the runs (one
//! measurement per batch, each with its own discovery and, with `--storage`, its own emulated
//! device), `coldstart-profile` for the page and function profiles, and a calibration loop between runs.

use std::ffi::OsString;
use std::time::Instant;

use coldstart_measure::launch::LinuxExecutor;
use coldstart_measure::measure::{Progress as MeasureProgress, StorageOptions};
use coldstart_measure::{CacheState, MeasureOptions};
use coldstart_profile::{ProfileError, ProfileOptions};

use crate::error::GateError;
use crate::functions;
use crate::instructions::{self, InstructionCounts};
use crate::pages::pages_touched;
use crate::run::{Batch, FunctionProfiles, PageCounts, Plan, Runner, StateRuns};

/// Rounds of the calibration loop: about 10 ms on a current CPU in a release build, longer
/// than a scheduler's time slice, so that it is shared with the machine's other work as a
/// start-up is (a loop of 0.4 ms mostly ran whole between two preemptions, and showed a
/// machine under two parallel test suites 17% slower while start-ups took 40% longer).
pub const CALIBRATION_ROUNDS: u64 = crate::baseline::CALIBRATION_ROUNDS;

/// The loop's copies that run at once: one a CPU this process may use.
pub fn calibration_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Time a fixed loop of multiplications, one copy on each CPU at once
/// ([`calibration_threads`]), until the last is done: how fast the machine runs a fixed amount
/// of work right now (slower when other work shares its CPUs). On every CPU, because a
/// start-up with threads loses more to other work than one thread does: on the project's
/// 2-core machine with one other job spinning, one copy ran 1.2 times slower, two copies 2.3
/// times, and the hot start of a Node.js script (several threads) up to 1.5 times; one copy's
/// slowdown left its gates SLOWER on hot time (+37% against a machine allowance of +25%).
pub fn calibrate() -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 1..calibration_threads() {
            s.spawn(multiply);
        }
        multiply();
    });
    start.elapsed().as_secs_f64()
}

fn multiply() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..CALIBRATION_ROUNDS {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    std::hint::black_box(x);
}

/// A profile of the plan's command, as the gate takes them: quiet, to readiness, then killed.
fn profile_options(plan: &Plan) -> ProfileOptions {
    let mut o = ProfileOptions::new(plan.command.iter().map(OsString::from).collect());
    o.ready = plan.ready.clone();
    o.kill_at_ready = true;
    o.quiet = true;
    o.timeout = Some(plan.timeout);
    o
}

/// Ctrl-C and the like stop a profile and reach the gate as [`GateError::Interrupted`] while
/// the returned guard lives.
fn catch_signals() -> Result<coldstart_process::cancel::Catch, GateError> {
    coldstart_process::cancel::catch()
        .map_err(|e| GateError::Invalid(format!("cannot install the signal handlers: {e}")))
}

/// Measures with the Linux executor.
#[derive(Default)]
pub struct LinuxRunner {
    /// Told each run and each step of the measurement (`cold: run 3 of 31: 812.3 ms`).
    on_step: Option<Box<dyn FnMut(String)>>,
}

impl std::fmt::Debug for LinuxRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinuxRunner").finish_non_exhaustive()
    }
}

impl LinuxRunner {
    pub fn new() -> LinuxRunner {
        LinuxRunner::default()
    }

    /// A runner that tells `on_step` each run and each step of its measurements.
    pub fn with_steps(on_step: impl FnMut(String) + 'static) -> LinuxRunner {
        LinuxRunner { on_step: Some(Box::new(on_step)) }
    }
}

fn measure_options(
    plan: &Plan,
    states: &[CacheState],
    runs: usize,
    emulate: bool,
) -> MeasureOptions {
    MeasureOptions {
        commands: vec![plan.command.clone()],
        caches: states.to_vec(),
        ready: plan.ready.clone(),
        runs,
        // A cold run drops every cache before it starts: a warm-up before it is a cold start
        // not counted (a read per 10 ms on the emulated disk). Hot runs keep their one.
        warmup: 0,
        timeout: plan.timeout,
        storage: plan.storage.clone().filter(|_| emulate).map(|profile| StorageOptions {
            profile,
            app_dir: None,
            work_dir: plan.storage_dir.clone(),
        }),
        strict: false,
        launchers: Vec::new(),
        change: None,
    }
}

impl Runner for LinuxRunner {
    fn measure(
        &mut self,
        plan: &Plan,
        states: &[CacheState],
        runs: usize,
    ) -> Result<Batch, GateError> {
        let started = Instant::now();
        // Hot runs read nothing from storage: they run on this machine's files, without the
        // discovery and the copy an emulated device costs (a few seconds for a large program).
        let emulate = states.iter().any(|s| *s != CacheState::Hot);
        let opts = measure_options(plan, states, runs, emulate);
        let mut exec = LinuxExecutor::new();
        let mut calibration = Vec::new();
        let (mut phase, mut done, mut total) = (String::new(), 0, 0);
        let on_step = &mut self.on_step;
        let report = coldstart_measure::measure(&opts, &mut exec, &mut |p| match p {
            MeasureProgress::Run { measured, wall_s, .. } => {
                if measured {
                    calibration.push(calibrate());
                }
                done += 1;
                if let Some(f) = on_step.as_mut() {
                    let kind = if measured { "" } else { " (warm-up)" };
                    let ms = wall_s * 1e3;
                    f(match total {
                        0 => format!("finding the program's files: {ms:.1} ms"),
                        _ => format!("{phase}: run {done} of {total}{kind}: {ms:.1} ms"),
                    });
                }
            }
            MeasureProgress::Phase { cache, total: n } => {
                (phase, done, total) = (cache.to_string(), 0, n);
            }
            MeasureProgress::Step(s) => {
                if let Some(f) = on_step.as_mut() {
                    f(s);
                }
            }
            MeasureProgress::Snapshot(_) => {}
        })?;
        let states = report
            .commands
            .iter()
            .map(|c| StateRuns {
                counters: c
                    .runs
                    .iter()
                    .filter(|r| r.excluded.is_none())
                    .map(|r| r.counters.clone())
                    .collect(),
                // A failed run's reason ends with what the program said.
                excluded: c
                    .runs
                    .iter()
                    .filter_map(|r| {
                        let why = r.excluded.clone()?;
                        Some(match r.stderr_tail.is_empty() {
                            true => why,
                            false => {
                                format!("{why}{}", coldstart_sys::stderr::said(&r.stderr_tail))
                            }
                        })
                    })
                    .collect(),
            })
            .collect();
        Ok(Batch {
            states,
            calibration,
            calibration_threads: calibration_threads(),
            cgroup: report.environment.cgroup,
            warnings: report.warnings,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    fn pages(&mut self, plan: &Plan, profiles: usize) -> Result<PageCounts, GateError> {
        let started = Instant::now();
        // The profiles run on this machine's disk with the program's files cached: a hot run
        // first (the measured runs may have read the copies on an emulated device, or dropped
        // every cache).
        let warm = measure_options(plan, &[CacheState::Hot], 1, false);
        coldstart_measure::measure(&warm, &mut LinuxExecutor::new(), &mut |_| {})?;
        let caught = catch_signals()?;
        let mut out = PageCounts::default();
        for _ in 0..profiles {
            let mut o = profile_options(plan);
            o.pages = true;
            // The page run alone: a function profile beside it (breakpoints on every function
            // of a large program) took most of each profile's time, for nothing the gate reads.
            let pages = match coldstart_profile::profile_pages(&o) {
                Err(ProfileError::Interrupted { signal }) => {
                    return Err(GateError::Interrupted { signal })
                }
                other => other?.pages,
            };
            out.values.push(pages_touched(&pages) as f64);
            out.sampled |= pages.sampled;
            out.source = pages.source.clone();
            if pages.lost_events > 0 {
                out.warnings.push(format!(
                    "a page profile lost {} trace events: pages touched may be undercounted",
                    pages.lost_events
                ));
            }
        }
        drop(caught);
        out.seconds = started.elapsed().as_secs_f64();
        if out.sampled {
            out.warnings.push(
                "pages touched are not compared: without root the page profile samples faults (perf) instead of \
                 tracing every page"
                    .into(),
            );
        }
        Ok(out)
    }

    fn instructions(&mut self, plan: &Plan, runs: usize) -> Result<InstructionCounts, GateError> {
        if let Some(why) = instructions::unavailable(&plan.ready) {
            return Ok(InstructionCounts { warnings: vec![why], ..Default::default() });
        }
        let caught = catch_signals()?;
        let counts = instructions::count(&plan.command, runs);
        drop(caught);
        counts
    }

    fn functions(&mut self, plan: &Plan, profiles: usize) -> Result<FunctionProfiles, GateError> {
        let started = Instant::now();
        let caught = catch_signals()?;
        let mut out = FunctionProfiles::default();
        for _ in 0..profiles {
            let o = profile_options(plan);
            // Functions only: one-shot breakpoints on every function, no page run. A program
            // the tracer cannot profile loses this figure, not the gate.
            let recording = match coldstart_profile::profile(&o) {
                Err(ProfileError::Interrupted { signal }) => {
                    return Err(GateError::Interrupted { signal })
                }
                Err(e) => {
                    out.sets.clear();
                    out.warnings.push(format!(
                        "new functions run are not compared: a function profile failed: {e}"
                    ));
                    break;
                }
                Ok(r) => r,
            };
            let p = &recording.profile;
            if let Some(w) = unsymbolized(p) {
                if !out.warnings.contains(&w) {
                    out.warnings.push(w);
                }
            }
            out.sets.push(functions::set_of(p));
        }
        drop(caught);
        out.seconds = started.elapsed().as_secs_f64();
        Ok(out)
    }
}

/// A warning when a module of the profile has no symbols: its functions are not seen, so
/// new code there is not either.
fn unsymbolized(p: &coldstart_profile_format::Profile) -> Option<String> {
    let bare: Vec<String> = p
        .modules
        .iter()
        .filter(|m| m.symbols == "none")
        .map(|m| m.path.display().to_string())
        .collect();
    (!bare.is_empty()).then(|| {
        format!(
            "new functions run are not seen in {} (no symbols: neither a symbol table nor a debug file)",
            bare.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calibration_loop_takes_a_measurable_time() {
        let t = calibrate();
        assert!(t > 1e-5 && t < 5.0, "{t}");
    }
}
