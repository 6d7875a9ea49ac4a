//! What the runs become in the report: each run's record and why it is excluded, the I/O
//! share, the warnings with their remedies, and the facts about the machine.

use std::time::Duration;

use coldstart_sys::is_root;

use super::options::MeasureOptions;
use crate::cache::{CacheState, EvictionReport, Holder};
use crate::launch::RunOutput;
use crate::metric::Metric;
use crate::result::{Environment, IoShare, MeasureReport, Outcome, RunRecord};
use crate::stats::Summary;

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

/// The record of measured run `index`: excluded, with the reason, when its eviction did not
/// hold, it did not become ready in time, or it failed.
pub(super) fn record(
    index: usize,
    out: RunOutput,
    eviction: Option<EvictionReport>,
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

fn eviction_reason(e: &EvictionReport) -> String {
    let why = e.failure_reason().unwrap_or_else(|| "pages stayed cached".into());
    format!("eviction did not hold: {why}")
}

/// Each colder state's median wall time minus the hot one, per command, when `hot` was measured.
pub(super) fn io_share(opts: &MeasureOptions, report: &MeasureReport) -> Vec<IoShare> {
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

/// The warnings of the report, each naming a remedy: the executor's, then what the figures
/// show (frequency scaling, evictions that failed, runs not ready, high variance, a slow first
/// hot run).
pub(super) fn warnings(
    opts: &MeasureOptions,
    report: &MeasureReport,
    executor: &[String],
) -> Vec<String> {
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
            let holders =
                holder_names(failed.iter().flat_map(|r| &r.eviction.as_ref().unwrap().holders));
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

/// The worst residency of shared system files seen per command in one cache state, for one
/// warning each: pages other processes map cannot leave the cache, which is reported, not
/// excluded.
#[derive(Debug, Default)]
pub(super) struct SharedKept(Vec<(usize, u64, u64, Vec<String>)>);

impl SharedKept {
    /// Keep `r`, the eviction of command `i`'s shared files, if it left more pages than before.
    pub(super) fn note(&mut self, i: usize, r: &EvictionReport) {
        if r.resident_pages_after == 0 {
            return;
        }
        let mut holders = holder_names(r.holders.iter().take(3));
        if r.holders.len() > 3 {
            holders.push("...".into());
        }
        match self.0.iter_mut().find(|k| k.0 == i) {
            Some(k) if k.1 >= r.resident_pages_after => {}
            Some(k) => *k = (i, r.resident_pages_after, r.total_pages, holders),
            None => self.0.push((i, r.resident_pages_after, r.total_pages, holders)),
        }
    }

    /// One warning per command, `label` naming it.
    pub(super) fn warnings(&self, label: impl Fn(usize) -> String) -> Vec<String> {
        self.0
            .iter()
            .map(|(i, pages, total, holders)| {
                format!(
                    "{}: up to {pages} of {total} pages of shared system files stayed cached{}; \
                     their I/O is not in these figures (inherent on a running system; the program's own \
                     files were evicted)",
                    label(*i),
                    if holders.is_empty() {
                        String::new()
                    } else {
                        format!(" (mapped by {})", holders.join(", "))
                    }
                )
            })
            .collect()
    }
}

/// `pid 4242 (firefox)` of each holder, once each, in order.
fn holder_names<'a>(holders: impl IntoIterator<Item = &'a Holder>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for h in holders {
        let name = h.who();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Residency;
    use crate::result::Counters;

    #[test]
    fn eviction_reasons_name_the_holder() {
        let e = EvictionReport {
            files: 1,
            resident_pages_after: 3,
            total_pages: 4,
            still_resident: vec![Residency {
                path: "/usr/lib/libxul.so".into(),
                total_pages: 4,
                cached_pages: 3,
                dirty_pages: None,
                ..Residency::default()
            }],
            holders: vec![Holder {
                pid: 4242,
                comm: "firefox".into(),
                path: "/usr/lib/libxul.so".into(),
                mapped: true,
            }],
            held: false,
            method: "mincore".into(),
            ..Default::default()
        };
        let out = RunOutput {
            outcome: Some(Outcome::Ready),
            counters: Counters { wall_s: 1.0, major_faults: Some(0), ..Counters::default() },
            ..RunOutput::default()
        };
        let r = record(0, out, Some(e), Duration::from_secs(1));
        let why = r.excluded.unwrap();
        assert!(why.contains("pid 4242 (firefox)") && why.contains("libxul.so"), "{why}");
    }
}
