//! What the runs become in the report: each run's record and why it is excluded, the I/O
//! share, the warnings with their remedies, and the facts about the machine.

use coldstart_sys::is_root;
use std::path::Path;

use super::options::MeasureOptions;
use crate::cache::{page_size, CacheState};
use crate::launch::RunOutput;
use crate::metric::Metric;
use coldstart_formats::measure::Summary;
use coldstart_formats::measure::{
    Environment, HeldByOthers, HeldFile, IoShare, MeasureReport, Outcome, RunRecord,
};
use coldstart_formats::measure::{EvictionReport, Holder};
use coldstart_units as units;

/// Held pages that start-up uses are worth a warning from this share of what start-up would
/// read from storage after a fresh boot (the bytes it read plus those pages) on: the cold
/// figures are then a tenth or more short of a fresh boot's I/O, the same relative error at
/// which the report calls a median's confidence interval too wide.
pub const HELD_SHARE_WARNING: f64 = 0.10;

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
        page_reclaim: page_reclaim(Path::new("/sys")),
    }
}

/// What reclaims idle page-cache pages without memory pressure under `sys`: a DAMON kdamond
/// that is on with a `pageout` scheme, or the DAMON_RECLAIM module enabled.
fn page_reclaim(sys: &Path) -> Option<String> {
    let read = |p: &Path| std::fs::read_to_string(p).map(|s| s.trim().to_string()).ok();
    let kdamonds = sys.join("kernel/mm/damon/admin/kdamonds");
    let mut found = Vec::new();
    for k in std::fs::read_dir(&kdamonds).into_iter().flatten().flatten() {
        if read(&k.path().join("state")).as_deref() != Some("on") {
            continue;
        }
        let contexts = std::fs::read_dir(k.path().join("contexts")).into_iter().flatten().flatten();
        let pageout = contexts.into_iter().any(|c| {
            let schemes = std::fs::read_dir(c.path().join("schemes")).into_iter().flatten();
            schemes.flatten().any(|s| read(&s.path().join("action")).as_deref() == Some("pageout"))
        });
        if pageout {
            found.push(format!("DAMON pageout (kdamond {})", k.file_name().to_string_lossy()));
        }
    }
    if read(&sys.join("module/damon_reclaim/parameters/enabled")).as_deref() == Some("Y") {
        found.push("DAMON_RECLAIM".into());
    }
    (!found.is_empty()).then(|| found.join(", "))
}

/// The record of measured run `index`: excluded, with the reason, when its eviction failed
/// (see [`eviction_failed`]), it did not become ready in time, or it failed.
pub(super) fn record(
    index: usize,
    out: RunOutput,
    eviction: Option<EvictionReport>,
    held_by_others: Option<HeldByOthers>,
    opts: &MeasureOptions,
) -> RunRecord {
    let outcome = out.outcome();
    let excluded = match (&outcome, &eviction) {
        (_, Some(e)) if eviction_failed(e, opts.strict) => Some(eviction_reason(e, opts.strict)),
        (Outcome::Ready, _) => None,
        (Outcome::Timeout, _) => {
            Some(format!("not ready within the timeout ({}s)", opts.timeout.as_secs_f64()))
        }
        (Outcome::ExitedBeforeReady { code, signal }, _) => {
            Some(format!("exited before the readiness signal ({})", status_text(*code, *signal)))
        }
        (Outcome::Failed { code, signal }, _) => {
            Some(format!("failed ({})", status_text(*code, *signal)))
        }
    };
    RunRecord {
        index,
        outcome,
        counters: out.counters,
        eviction,
        held_by_others,
        excluded,
        stderr_tail: out.stderr_tail,
    }
}

/// Whether the eviction of the program's own files failed: a page stayed cached that no
/// process outside the run maps, or a file could not be verified; with `strict`, any page that
/// stayed cached.
pub(super) fn eviction_failed(e: &EvictionReport, strict: bool) -> bool {
    if strict {
        !e.held
    } else {
        !e.held_except_mapped()
    }
}

/// The pages of `own` and `shared` (the evictions before one run) that processes outside the
/// run map; `None` when there are none.
pub(super) fn held_by_others(
    own: Option<&EvictionReport>,
    shared: Option<&EvictionReport>,
) -> Option<HeldByOthers> {
    let mut held = HeldByOthers::default();
    let mut pids: Vec<u32> = Vec::new();
    for (report, own) in [(own, true), (shared, false)] {
        let Some(report) = report else { continue };
        let mut files = Vec::new();
        for r in &report.still_resident {
            let pages = r.held_pages.unwrap_or(0);
            if pages == 0 {
                continue;
            }
            held.files += 1;
            held.pages += pages;
            held.touched_pages += r.touched_held_pages.unwrap_or(pages);
            held.by_file.push(HeldFile {
                path: r.path.clone(),
                pages,
                touched_pages: r.touched_held_pages,
                own,
            });
            files.push(&r.path);
        }
        for h in report.holders.iter().filter(|h| h.mapped && files.contains(&&h.path)) {
            if pids.contains(&h.pid) {
                continue;
            }
            pids.push(h.pid);
            if held.holders.len() < HeldByOthers::MAX_HOLDERS {
                held.holders.push(h.clone());
            } else {
                held.holders_omitted += 1;
            }
        }
        held.holders_omitted += report.holders_omitted;
    }
    if held.pages == 0 {
        return None;
    }
    held.by_file.sort_by(|a, b| b.pages.cmp(&a.pages).then_with(|| a.path.cmp(&b.path)));
    held.bytes = held.pages * page_size();
    held.touched_bytes = held.touched_pages * page_size();
    Some(held)
}

/// What the runs of `c` that did not become ready say: those that timed out point at
/// `--ready` and `--timeout`; those that exited on their own at the program's error, with the
/// last lines it wrote to standard error (`launched`: each run started through a launcher,
/// whose own errors count as the program's).
fn not_ready_warnings(
    c: &coldstart_formats::measure::CommandResult,
    launched: bool,
) -> Vec<String> {
    let mut w = Vec::new();
    let timeouts = c.runs.iter().filter(|r| r.outcome == Outcome::Timeout).count();
    if timeouts > 0 {
        w.push(format!(
            "{}: {timeouts} of {} did not become ready within the timeout; check --ready and \
             --timeout",
            c.label,
            units::count(c.runs.len() as u64, "run"),
        ));
    }
    let exited: Vec<&RunRecord> = c
        .runs
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Failed { .. } | Outcome::ExitedBeforeReady { .. }))
        .collect();
    if let Some(last) = exited.last() {
        let (code, signal, what) = match last.outcome {
            Outcome::Failed { code, signal } => (code, signal, "failed"),
            Outcome::ExitedBeforeReady { code, signal } => {
                (code, signal, "exited before the readiness signal")
            }
            _ => (None, None, ""),
        };
        let mut msg = format!(
            "{}: {} of {} {what}: the {} exited with its own error ({})",
            c.label,
            exited.len(),
            units::count(c.runs.len() as u64, "run"),
            if launched { "program or its launcher" } else { "program" },
            status_text(code, signal)
        );
        msg.push_str(&coldstart_sys::stderr::said(&last.stderr_tail));
        w.push(msg);
    }
    w
}

fn status_text(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown status".into(),
    }
}

fn eviction_reason(e: &EvictionReport, strict: bool) -> String {
    let why = if strict { e.failure_reason() } else { e.unheld_reason() };
    let why = why.unwrap_or_else(|| "pages stayed cached".into());
    if strict && e.held_except_mapped() {
        format!("eviction did not hold: {why} (--strict: pages other processes map count too)")
    } else {
        format!("eviction did not hold: {why}")
    }
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

/// Read requests counted while the program read no byte from storage: the count is the whole
/// disk's (cgroup v1 attributes no page-cache read to a group), so it holds other processes'
/// reads; say so, and how to count the program's own.
fn foreign_reads_warning(c: &coldstart_formats::measure::CommandResult) -> Option<String> {
    let requests = c.summary(Metric::ReadRequests.name())?;
    let bytes = c.summary(Metric::ReadBytes.name())?;
    if requests.n == 0 || bytes.median > 0.0 || requests.median < 1.0 {
        return None;
    }
    Some(format!(
        "{}: {} (median) counted while the program read nothing from storage: read requests \
         are the whole disk's here (the cgroups count no page-cache reads per group), so other \
         processes' reads are in them; --storage counts the program's own exactly",
        c.label,
        units::count_f(requests.median, "read request")
    ))
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
    // Said only where something takes pages back on its own: elsewhere an incomplete hold
    // (a user's 8 MiB lock limit) loses nothing, and the JSON still says it.
    if let Some(r) = &report.environment.page_reclaim {
        for hold in &report.resident_holds {
            let Some(why) = &hold.incomplete else { continue };
            w.push(format!(
                "{}: not every cached page could be held through the runs ({why}): this \
                 machine reclaims idle page-cache pages on its own ({r}), so pages may leave \
                 the cache between runs and the state is not assured (major faults above 0 in \
                 its runs show it)",
                hold.cache
            ));
        }
    }
    for c in &report.commands {
        let failed: Vec<&EvictionReport> = c
            .runs
            .iter()
            .filter_map(|r| r.eviction.as_ref())
            .filter(|e| eviction_failed(e, opts.strict))
            .collect();
        if let Some(first) = failed.first() {
            w.push(eviction_warning(&c.label, &failed, first, c.runs.len(), opts.strict));
        }
        if let Some(held) = held_warning(c) {
            w.push(held);
        }
        if let Some(w2) = foreign_reads_warning(c) {
            w.push(w2);
        }
        w.extend(not_ready_warnings(c, !opts.launchers.is_empty()));
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

/// The warning about runs whose eviction failed, naming the processes involved and a remedy.
fn eviction_warning(
    label: &str,
    failed: &[&EvictionReport],
    first: &EvictionReport,
    runs: usize,
    strict: bool,
) -> String {
    let reason = if strict { first.failure_reason() } else { first.unheld_reason() };
    let reason = reason.unwrap_or_else(|| "pages stayed cached".into());
    if strict {
        let holders = holder_names(failed.iter().flat_map(|e| &e.holders).filter(|h| h.mapped));
        let by = if holders.is_empty() {
            reason
        } else {
            format!("pages are held by {}", holders.join(", "))
        };
        let remedy = if failed.iter().all(|e| e.held_except_mapped()) {
            "those runs are excluded (--strict): stop the holding processes, or drop --strict to \
             count the runs and report the held pages"
        } else {
            "those runs are excluded: stop the holding process or use --cache hot"
        };
        format!("{label}: eviction failed before {} of {runs} runs ({by}); {remedy}", failed.len())
    } else {
        let remedy = if first.unreadable.is_empty() {
            "those runs are excluded: a process reads those files back, or their pages are \
             locked or dirty and failing to write back; stop the process named, or use --cache hot"
        } else {
            "those runs are excluded: run as root to verify every file, or use --cache hot"
        };
        format!(
            "{label}: eviction failed before {} of {runs} runs ({reason}); {remedy}",
            failed.len()
        )
    }
}

/// The warning when the held pages start-up uses are a large share of what it would read
/// from storage after a fresh boot ([`HELD_SHARE_WARNING`]), over the counted runs.
fn held_warning(c: &coldstart_formats::measure::CommandResult) -> Option<String> {
    let counted: Vec<&RunRecord> = c.runs.iter().filter(|r| r.excluded.is_none()).collect();
    let touched: Vec<f64> = counted
        .iter()
        .map(|r| r.held_by_others.as_ref().map_or(0.0, |h| h.touched_bytes as f64))
        .collect();
    if touched.is_empty() {
        return None;
    }
    let touched_median = Summary::from_samples(&touched).median;
    if touched_median <= 0.0 {
        return None;
    }
    let read: Vec<f64> =
        counted.iter().filter_map(|r| r.counters.read_bytes).map(|b| b as f64).collect();
    let holders = holder_names(
        counted.iter().filter_map(|r| r.held_by_others.as_ref()).flat_map(|h| &h.holders),
    );
    let mut held_by = holders.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    if holders.len() > 3 {
        held_by.push_str(", ...");
    }
    let remedy = format!(
        "to measure without them, stop the processes that map them ({held_by}), or use a \
         dedicated machine with --strict"
    );
    let mib = |b: f64| b / (1024.0 * 1024.0);
    if read.len() < touched.len() {
        return Some(format!(
            "{}: {:.2} MiB that start-up uses stayed cached, held by other processes' mappings \
             (median of the counted runs); bytes read from storage are not counted here, so \
             their share of what a fresh boot reads is unknown; {remedy}",
            c.label,
            mib(touched_median)
        ));
    }
    let read_median = Summary::from_samples(&read).median;
    let share = touched_median / (touched_median + read_median);
    (share >= HELD_SHARE_WARNING).then(|| {
        format!(
            "{}: {:.2} MiB that start-up uses stayed cached, held by other processes' mappings: \
             {:.0}% of what it would read from storage after a fresh boot ({:.2} MiB read + {:.2} \
             MiB held; medians of the counted runs), so these figures understate a fresh boot's \
             I/O; {remedy}",
            c.label,
            mib(touched_median),
            share * 100.0,
            mib(read_median),
            mib(touched_median)
        )
    })
}

/// The worst residency of shared system files that no process mapped, seen per command in one
/// cache state, for one warning each: other processes read them back between eviction and the
/// run (any process that starts reads `/etc/ld.so.cache` and libc), which is reported, not
/// excluded. Their pages that processes map are in [`RunRecord::held_by_others`].
#[derive(Debug, Default)]
pub(super) struct SharedKept(Vec<(usize, u64, u64, String)>);

impl SharedKept {
    /// Keep `r`, the eviction of command `i`'s shared files, if it left more unmapped pages
    /// than before.
    pub(super) fn note(&mut self, i: usize, r: &EvictionReport) {
        let pages = r.unheld_pages();
        if pages == 0 {
            return;
        }
        let example = r
            .still_resident
            .iter()
            .max_by_key(|f| f.unheld_pages())
            .map(|f| f.path.display().to_string())
            .unwrap_or_default();
        match self.0.iter_mut().find(|k| k.0 == i) {
            Some(k) if k.1 >= pages => {}
            Some(k) => *k = (i, pages, r.total_pages, example),
            None => self.0.push((i, pages, r.total_pages, example)),
        }
    }

    /// One warning per command, `label` naming it.
    pub(super) fn warnings(&self, label: impl Fn(usize) -> String) -> Vec<String> {
        self.0
            .iter()
            .map(|(i, pages, total, example)| {
                format!(
                    "{}: up to {pages} of {total} pages of shared system files were cached again \
                     before a run, read back by other processes (none mapped them when checked), \
                     e.g. {example}; their I/O is not in these figures (inherent on a busy machine)",
                    label(*i),
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
    use coldstart_formats::measure::{Counters, Residency};

    #[test]
    fn an_incomplete_hold_is_worth_a_warning_only_where_pages_are_reclaimed() {
        let report = |reclaim: Option<&str>| -> MeasureReport {
            serde_json::from_value(serde_json::json!({
                "format": "coldstart-measure", "version": 2, "cache": "hot", "ready": "exit",
                "warmup": 1, "commands": [], "comparison": null, "warnings": [],
                "environment": { "kernel": "6.18", "cpus": 2, "cgroup": "v1",
                    "cpu_governor": null, "is_root": false, "page_reclaim": reclaim },
                "resident_holds": [{ "cache": "hot", "files": 3, "bytes": 8388608,
                    "incomplete": "locking /usr/lib/libc.so.6 in memory failed" }],
            }))
            .unwrap()
        };
        let opts = MeasureOptions::default();
        let held = |w: &Vec<String>| w.iter().any(|w| w.contains("not every cached page"));
        assert!(!held(&warnings(&opts, &report(None), &[])), "a lock limit alone loses nothing");
        let w = warnings(&opts, &report(Some("DAMON pageout (kdamond 0)")), &[]);
        assert!(held(&w) && w.iter().any(|w| w.contains("DAMON pageout")), "{w:?}");
    }

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
        let r = record(0, out, Some(e), None, &MeasureOptions::default());
        let why = r.excluded.unwrap();
        assert!(why.contains("pid 4242 (firefox)") && why.contains("libxul.so"), "{why}");
    }

    fn resident(path: &str, cached: u64, held: u64, touched: Option<u64>) -> Residency {
        Residency {
            path: path.into(),
            total_pages: 100,
            cached_pages: cached,
            held_pages: Some(held),
            touched_held_pages: touched,
            ..Residency::default()
        }
    }

    fn holder(pid: u32, path: &str) -> Holder {
        Holder { pid, comm: "bash".into(), path: path.into(), mapped: true }
    }

    fn evicted(files: Vec<Residency>, holders: Vec<Holder>) -> EvictionReport {
        EvictionReport {
            files: files.len(),
            resident_pages_after: files.iter().map(|f| f.cached_pages).sum(),
            held_pages: files.iter().filter_map(|f| f.held_pages).sum(),
            total_pages: 100 * files.len() as u64,
            held: files.is_empty(),
            still_resident: files,
            holders,
            method: "cachestat".into(),
            ..EvictionReport::default()
        }
    }

    fn ready_run(read_bytes: Option<u64>) -> RunOutput {
        RunOutput {
            outcome: Some(Outcome::Ready),
            counters: Counters { wall_s: 1.0, read_bytes, ..Counters::default() },
            ..RunOutput::default()
        }
    }

    #[test]
    fn held_pages_count_unless_strict() {
        let e = evicted(
            vec![resident("/usr/bin/bash", 270, 270, Some(200))],
            vec![holder(832, "/usr/bin/bash")],
        );
        let held = held_by_others(Some(&e), None);
        let r = record(
            0,
            ready_run(Some(1)),
            Some(e.clone()),
            held.clone(),
            &MeasureOptions::default(),
        );
        assert_eq!(r.excluded, None);
        assert_eq!(r.held_by_others.as_ref().unwrap().pages, 270);
        let strict = MeasureOptions { strict: true, ..MeasureOptions::default() };
        let r = record(0, ready_run(Some(1)), Some(e), held, &strict);
        let why = r.excluded.unwrap();
        assert!(why.contains("eviction did not hold") && why.contains("--strict"), "{why}");
        assert!(why.contains("pid 832 (bash)"), "{why}");
    }

    #[test]
    fn a_page_nobody_maps_excludes_the_run_even_beside_held_ones() {
        let e = evicted(
            vec![resident("/opt/app/data", 10, 4, None)],
            vec![holder(832, "/opt/app/data")],
        );
        let held = held_by_others(Some(&e), None);
        let r = record(0, ready_run(Some(1)), Some(e), held, &MeasureOptions::default());
        let why = r.excluded.unwrap();
        assert!(
            why.contains("6 page(s) of 1 file(s) stayed cached that no other process maps"),
            "{why}"
        );
    }

    #[test]
    fn held_by_others_sums_own_and_shared_files_and_names_each_process_once() {
        let own = evicted(
            vec![resident("/usr/bin/bash", 10, 10, Some(3)), resident("/opt/app/x", 5, 0, None)],
            vec![holder(832, "/usr/bin/bash"), holder(900, "/opt/app/x")],
        );
        let shared = evicted(
            vec![resident("/usr/lib/libc.so.6", 20, 20, None)],
            vec![holder(832, "/usr/lib/libc.so.6"), holder(833, "/usr/lib/libc.so.6")],
        );
        let h = held_by_others(Some(&own), Some(&shared)).unwrap();
        assert_eq!((h.files, h.pages), (2, 30));
        // A file start-up was not seen to map counts whole.
        assert_eq!(h.touched_pages, 3 + 20);
        assert_eq!(h.bytes, 30 * page_size());
        assert_eq!(h.by_file[0].path, std::path::PathBuf::from("/usr/lib/libc.so.6"));
        assert!(!h.by_file[0].own && h.by_file[1].own);
        let pids: Vec<u32> = h.holders.iter().map(|h| h.pid).collect();
        assert_eq!(pids, [832, 833], "900 holds no held page");
        assert_eq!(held_by_others(Some(&evicted(vec![], vec![])), None), None);
        assert_eq!(held_by_others(None, None), None);
    }

    /// A command whose counted runs read `read` bytes with `touched` bytes of held pages used.
    fn command(touched: u64, read: Option<u64>) -> coldstart_formats::measure::CommandResult {
        let e = evicted(
            vec![resident("/lib/libc.so.6", 1, 1, Some(1))],
            vec![holder(832, "/lib/libc.so.6")],
        );
        let mut held = held_by_others(Some(&e), None).unwrap();
        held.touched_bytes = touched;
        let runs = (0..3)
            .map(|i| {
                record(
                    i,
                    ready_run(read),
                    Some(e.clone()),
                    Some(held.clone()),
                    &MeasureOptions::default(),
                )
            })
            .collect();
        coldstart_formats::measure::CommandResult {
            label: "cold".into(),
            command: vec!["prog".into()],
            runs,
            summaries: Vec::new(),
        }
    }

    #[test]
    fn held_pages_are_worth_a_warning_only_as_a_large_share_of_what_start_up_reads() {
        const MIB: u64 = 1 << 20;
        assert_eq!(held_warning(&command(MIB, Some(20 * MIB))), None, "5%");
        let w = held_warning(&command(MIB, Some(4 * MIB))).expect("20%");
        assert!(w.starts_with("cold: ") && w.contains("20%") && w.contains("--strict"), "{w}");
        assert!(w.contains("pid 832 (bash)"), "{w}");
        assert_eq!(held_warning(&command(0, Some(MIB))), None, "nothing used");
        let unknown = held_warning(&command(MIB, None)).expect("share unknown");
        assert!(unknown.contains("unknown"), "{unknown}");
    }

    #[test]
    fn read_requests_without_bytes_read_are_said_to_be_other_processes() {
        let with = |bytes: u64, requests: u64| {
            let mut c = command(0, Some(bytes));
            for r in &mut c.runs {
                r.counters.read_requests = Some(requests);
            }
            c.summaries = crate::stats::summarize_runs(&c.runs);
            c
        };
        let w = foreign_reads_warning(&with(0, 13)).expect("13 requests, 0 bytes");
        assert!(
            w.starts_with("cold: 13 read requests (median) counted") && w.contains("--storage"),
            "{w}"
        );
        let one = foreign_reads_warning(&with(0, 1)).expect("1 request, 0 bytes");
        assert!(one.starts_with("cold: 1 read request (median) counted"), "{one}");
        assert_eq!(foreign_reads_warning(&with(4096, 13)), None, "the program read");
        assert_eq!(foreign_reads_warning(&with(0, 0)), None, "nothing read at all");
    }

    #[test]
    fn a_damon_pageout_scheme_is_found_and_an_idle_one_is_not() {
        let sys = tempfile::tempdir().unwrap();
        let k = sys.path().join("kernel/mm/damon/admin/kdamonds/0");
        let scheme = k.join("contexts/0/schemes/0");
        std::fs::create_dir_all(&scheme).unwrap();
        std::fs::write(scheme.join("action"), "pageout\n").unwrap();
        std::fs::write(k.join("state"), "off\n").unwrap();
        assert_eq!(page_reclaim(sys.path()), None, "a kdamond that is off");
        std::fs::write(k.join("state"), "on\n").unwrap();
        assert_eq!(page_reclaim(sys.path()).as_deref(), Some("DAMON pageout (kdamond 0)"));
        std::fs::write(scheme.join("action"), "stat\n").unwrap();
        assert_eq!(page_reclaim(sys.path()), None, "a scheme that only counts");
    }
}
