//! One run of [`LinuxExecutor`](super::LinuxExecutor), in four steps: prepare what the child
//! needs, spawn it, wait for readiness, collect the figures and clean the tree up.

use std::path::Path;

use super::counters;
use super::discovery::Discovery;
use super::spawn::{self, Launched};
use super::wait::{self, Waited};
use super::{LaunchError, RunOutput, RunSpec};
use crate::cgroup::RunCgroup;
use coldstart_formats::measure::Outcome;
use coldstart_ready::{self as ready, Ready};

/// Start `spec` in `cgroup` (with the emulated storage's `enter` hook and device), wait for
/// readiness, and return its figures.
pub(super) fn run_one(
    spec: &RunSpec,
    cgroup: Option<&RunCgroup>,
    enter: Option<&coldstart_storage::EnterHook>,
    device_stat: Option<&Path>,
    watch: Option<&ready::x11::WindowWatch>,
    perf_supported: &mut Option<bool>,
) -> Result<RunOutput, LaunchError> {
    let prepared = spawn::prepare(spec, cgroup)?;
    let mut discovery = spec.discover_files.then(|| Discovery::start(cgroup));
    let mut child = prepared.spawn(spec, enter, device_stat, perf_supported)?;
    let waited = wait::until_ready(spec, cgroup, watch, &mut child, discovery.as_mut())?;
    collect(spec, cgroup, device_stat, child, waited, discovery)
}

/// At readiness: read the clock and the counters, sample the files a last time, then kill the
/// whole tree and reap the root.
fn collect(
    spec: &RunSpec,
    cgroup: Option<&RunCgroup>,
    device_stat: Option<&Path>,
    mut child: Launched,
    waited: Waited,
    mut discovery: Option<Discovery>,
) -> Result<RunOutput, LaunchError> {
    let end_ns = waited.ready_at.unwrap_or_else(coldstart_sys::monotonic_ns);
    // A root that exited right after signalling readiness is a zombie now: its /proc figures
    // read as zero, so reap it and count its rusage instead.
    let _ = child.held.try_wait();
    let wall_s = end_ns.saturating_sub(child.start_ns) as f64 / 1e9;
    let members = members(cgroup, &mut child);
    let counters = counters::at_readiness(
        wall_s,
        &members,
        child.held.exit().as_ref().map(|e| e.rusage()),
        &child.before,
        device_stat,
        cgroup,
        child.perf.as_ref(),
    );
    if let Some(d) = &mut discovery {
        d.sample(&members);
    }
    child.kill_tree(cgroup)?;
    let (files, touched) = discovery.map(Discovery::finish).unwrap_or_default();

    let mut outcome = waited.outcome;
    if outcome.is_none() && matches!(spec.ready, Ready::Exit) {
        let (code, signal) = child.code_signal();
        if code != Some(0) {
            outcome = Some(Outcome::Failed { code, signal });
        }
    }
    // Why a run failed is in its standard error: keep its end (not read for a good run).
    let stderr_tail = match (&outcome, &child.stderr_file) {
        (None, _) => Vec::new(),
        (Some(_), _) if !waited.stderr_tail.is_empty() => {
            coldstart_sys::stderr::last_lines(&waited.stderr_tail)
        }
        (Some(_), Some(f)) => f.last_lines(),
        (Some(_), None) => Vec::new(),
    };
    Ok(RunOutput {
        outcome: Some(outcome.unwrap_or(Outcome::Ready)),
        counters,
        files,
        touched,
        stderr_tail,
    })
}

/// The processes whose `/proc` figures count at readiness: the cgroup's members, or without a
/// cgroup the root while it is not reaped.
fn members(cgroup: Option<&RunCgroup>, child: &mut Launched) -> Vec<u32> {
    match cgroup {
        Some(cg) => {
            let members = cg.pids();
            if !child.held.reaped() && !members.contains(&(child.pid as u32)) {
                // Left the cgroup: exiting, a moment from being a zombie. Wait for that (briefly:
                // a program that moved itself to another cgroup is not waited for).
                let _ = child.held.wait_timeout(std::time::Duration::from_millis(100));
            }
            members
        }
        None if !child.held.reaped() => vec![child.pid as u32],
        None => Vec::new(),
    }
}
