//! `coldstart experiment`: the paper's grid, run for real. Every link x cache state x
//! strategy, N starts each of a held-out workload (the hot set is recorded from another), each
//! measured (start-up, bytes, requests, time stalled on misses) beside the model's prediction.
//!
//! It drives the network stage through its public API, as `coldstart pack`, `serve`, `run`
//! and `predict` do: [`coldstart_bundle::pack()`], [`coldstart_serve::serve()`] with an emulated
//! [`Link`](coldstart_serve::Link), [`coldstart_lazyfs::mount()`] and [`coldstart_lazyfs::predict()`].
//!
//! The result ([`Experiment`], format `coldstart-experiment`) is written after every cell, so
//! an interrupted experiment keeps what it measured; given the same file again, it measures
//! only the cells that are missing.
//!
//! Cache states (the paper's, for a program fetched over a network):
//! - `cold`: the local chunk cache empty, and the server's copy of the bundle evicted from its
//!   page cache (a server that has not served it lately);
//! - `warm-remote`: the local chunk cache empty, the bundle in the server's page cache (the
//!   paper's warm-remote: the program on a file server whose cache holds it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use coldstart_bundle::{HotList, PackOptions};
use coldstart_formats::{Cell, CellRun, Document, Experiment, HotSet, LinkSpec};
use coldstart_lazyfs::history::{HeldOutRun, History};
use coldstart_lazyfs::model::{Choice, LinkEstimate};
use coldstart_lazyfs::Strategy;
use coldstart_lazyfs::{NetworkRequest, PredictOptions, StrategyOrAuto};

mod error;
mod options;
mod start;
use error::io;
pub use error::ExperimentError;
pub use options::{
    default_chunk_size, default_links, default_strategies, grid_link, CacheState,
    ExperimentOptions, GridLink, GridStrategy, Progress, Quiet, DEFAULT_CACHES, DEFAULT_RUNS,
    MAX_RUNS,
};
use start::{request, start};

/// Regular files under `dir` and their bytes.
fn files(dir: &Path) -> (u64, u64, Vec<PathBuf>) {
    let mut out = (0, 0, Vec::new());
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.path().symlink_metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                out.0 += 1;
                out.1 += m.len();
                out.2.push(e.path());
            }
        }
    }
    out
}

/// Drop a directory's files from the page cache (the server's copy, `cold`), or read them
/// into it (`warm-remote`).
fn server_cache(files: &[PathBuf], state: CacheState) {
    for f in files {
        let Ok(file) = std::fs::File::open(f) else { continue };
        match state {
            CacheState::Cold => {
                let _ = coldstart_sys::file::drop_cached(&file);
            }
            CacheState::WarmRemote => {
                let _ = std::io::copy(&mut std::io::BufReader::new(file), &mut std::io::sink());
            }
        }
    }
}

/// What the runs measured so far missed outside the hot set, oldest first, as a mount's
/// history keeps it (runs of a file from before the misses were kept are left out). A run
/// stored without its other bytes started from an empty chunk cache: a hot-set strategy
/// fetched the whole start object, `start_bytes`, besides them.
fn held_out_runs<'a>(
    cells: impl IntoIterator<Item = (&'a str, &'a [CellRun])>,
    start_bytes: u64,
) -> Vec<HeldOutRun> {
    let mut out = Vec::new();
    for (strategy, runs) in cells {
        for r in runs {
            let name = r.chosen.as_deref().unwrap_or(strategy);
            let (Ok(strategy), Some(misses), Some(bytes)) =
                (name.parse::<Strategy>(), r.held_out_misses, r.held_out_bytes)
            else {
                continue;
            };
            let other_bytes = r.other_bytes.unwrap_or_else(|| match strategy.uses_hot_set() {
                true => r.bytes_fetched.saturating_sub(start_bytes),
                false => bytes,
            });
            out.push(HeldOutRun { strategy, misses, bytes, other_bytes });
        }
    }
    out
}

/// The miss history a start on link `label` would find after the first `upto` cells: their
/// runs on that link (a user's link is the one they start from), or, before any there, every
/// run.
fn history_before(e: &Experiment, upto: usize, label: &str, start_bytes: u64) -> Vec<HeldOutRun> {
    let cells = &e.cells[..upto.min(e.cells.len())];
    let runs = |same: bool| {
        held_out_runs(
            cells
                .iter()
                .filter(|c| !same || c.link.label == label)
                .map(|c| (c.strategy.as_str(), &c.runs[..])),
            start_bytes,
        )
    };
    let same = runs(true);
    if same.is_empty() {
        runs(false)
    } else {
        same
    }
}

/// A chunk cache directory `dir`, emptied, holding the miss history of `runs` for the bundle
/// whose manifest has SHA-256 `manifest`: a user's cache after those starts, its chunks
/// evicted.
fn fresh_cache(
    dir: &Path,
    manifest: &[u8; 32],
    runs: &[HeldOutRun],
) -> Result<(), ExperimentError> {
    let _ = std::fs::remove_dir_all(dir);
    if runs.is_empty() {
        return Ok(());
    }
    let path = coldstart_lazyfs::history::path(dir, manifest);
    History::new(runs).write(&path).map_err(io(format!("the miss history {}", path.display())))
}

/// The median of several local starts of the command from the program's directory (warm).
fn local_start(o: &ExperimentOptions) -> Option<f64> {
    let mut times = Vec::new();
    for _ in 0..11 {
        let t = Instant::now();
        let s = Command::new(o.dir.join(&o.command[0]))
            .args(&o.command[1..])
            .current_dir(&o.dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        if !s.success() {
            return None;
        }
        times.push(t.elapsed().as_secs_f64());
    }
    coldstart_formats::stats::checked_median(&times)
}

/// A start's estimated time, for the progress bar only: Eq. 1 with the bytes a strategy
/// moves, a few latencies, and a mount.
fn estimate(e: &Experiment, link: &LinkSpec, strategy: &str) -> f64 {
    let bytes = match strategy {
        "original" => e.program.bytes,
        _ => e.used_bytes.or(e.hot_set.as_ref().map(|h| h.bytes)).unwrap_or(e.program.bytes),
    } as f64;
    let requests = match strategy {
        "paged" => e.hot_set.as_ref().map_or(20, |h| h.chunks).max(1) as f64 / 4.0,
        "original" => e.program.files as f64,
        _ => 3.0,
    };
    bytes * 8.0 / link.bits_per_second + requests * link.latency_s + e.local_s.unwrap_or(0.0) + 0.2
}

/// Record a hot list of `command`'s start from a bundle directory (paged, so every read is
/// seen), returning its bytes and chunks.
fn record(
    o: &ExperimentOptions,
    bundle: &Path,
    command: &[String],
    out: &Path,
    n: usize,
) -> Result<HotList, ExperimentError> {
    let cache = o.work.join(format!("cache-record-{n}"));
    let _ = std::fs::remove_dir_all(&cache);
    let req = request(
        o,
        GridStrategy::Mount(StrategyOrAuto::Fixed(coldstart_lazyfs::Strategy::Paged)),
        None,
        &cache,
        Some(out.to_owned()),
    );
    start(o, &bundle.display().to_string(), req, command, n)?;
    let _ = std::fs::remove_dir_all(&cache);
    HotList::read(out).map_err(|source| ExperimentError::HotList { path: out.to_owned(), source })
}

/// Check that `e` (read from the output file) is this experiment, so its cells can be kept.
fn same(e: &Experiment, o: &ExperimentOptions) -> Result<(), String> {
    let dir = o.dir.canonicalize().unwrap_or_else(|_| o.dir.clone());
    if e.program.dir != dir {
        return Err(format!("the program {} ", e.program.dir.display()));
    }
    if e.program.command != o.command || e.program.profiled != o.profiled {
        return Err("other commands".into());
    }
    if e.settings.chunk_size != o.chunk_size
        || e.settings.readahead != u64::from(o.readahead.unwrap_or(0))
    {
        return Err("another chunk size or read-ahead".into());
    }
    Ok(())
}

/// Run the grid (the cells the output does not hold yet). Cancelled, it ends with
/// [`ExperimentError::Interrupted`] whichever step it was in, every cell measured before kept.
pub fn run(
    o: &ExperimentOptions,
    progress: &mut dyn Progress,
) -> Result<Experiment, ExperimentError> {
    match grid(o, progress) {
        Err(_) if o.cancel.is_cancelled() => Err(ExperimentError::Interrupted),
        r => r,
    }
}

fn grid(o: &ExperimentOptions, progress: &mut dyn Progress) -> Result<Experiment, ExperimentError> {
    let o = &absolute_options(o)?;
    check_grid(o)?;
    let mut e = previous(o)?;
    describe(&mut e, o);
    let bundle = prepare_bundle(o, &mut e, progress)?;
    let todo = plan(o, &e, progress);
    if o.repredict {
        repredict(o, &mut e, &bundle)?;
        e.write(&o.output)?;
        return Ok(e);
    }
    let mut n = 2;
    for l in &o.links {
        if !todo.iter().any(|t| std::ptr::eq(t.0, l)) {
            continue;
        }
        let server = coldstart_serve::serve(&bundle.dir, "127.0.0.1:0", Some(l.link))?;
        let url = server.url();
        for c in &o.caches {
            let cells: Vec<GridStrategy> =
                todo.iter().filter(|t| std::ptr::eq(t.0, l) && t.1 == *c).map(|t| t.2).collect();
            if cells.is_empty() {
                continue;
            }
            server_cache(&bundle.server_files, *c);
            let history = history_before(&e, e.cells.len(), &l.label, bundle.start_bytes);
            let (choice, measured) = predictions(o, &mut e, &url, l, &bundle.manifest, &history)?;
            for s in cells {
                let site = Site { url: &url, link: l, cache: *c, bundle: &bundle };
                let runs = measure_cell(o, &mut e, &site, s, &mut n, progress)?;
                let mut cell = Cell {
                    link: spec(l),
                    strategy: s.name(),
                    cache: c.name().into(),
                    runs,
                    predicted_s: None,
                    predicted_choice: None,
                    predicted_measured_s: None,
                };
                predicted(&mut cell, choice.as_ref(), measured.as_ref());
                e.cells.push(cell);
                e.write(&o.output)?;
            }
        }
        drop(server);
    }
    e.write(&o.output)?;
    Ok(e)
}

/// The options with the program's directory and the work directory made absolute: the
/// commands run with their directory as the current one.
fn absolute_options(o: &ExperimentOptions) -> Result<ExperimentOptions, ExperimentError> {
    Ok(ExperimentOptions {
        dir: o
            .dir
            .canonicalize()
            .map_err(io(format!("the program's directory {}", o.dir.display())))?,
        work: std::path::absolute(&o.work).map_err(io(format!("the path {}", o.work.display())))?,
        ..o.clone()
    })
}

/// Refuse a grid that cannot run: a command missing or not a file in the program's
/// directory, or no links, strategies, cache states or runs.
fn check_grid(o: &ExperimentOptions) -> Result<(), ExperimentError> {
    if o.command.is_empty() || o.profiled.is_empty() {
        return Err(ExperimentError::Usage(
            "give the measured command and the profiled one".into(),
        ));
    }
    for c in [&o.command, &o.profiled] {
        if !o.dir.join(&c[0]).is_file() {
            return Err(ExperimentError::Usage(format!(
                "{} is not a file: the command's program is relative to the program's directory {}",
                o.dir.join(&c[0]).display(),
                o.dir.display()
            )));
        }
    }
    if o.runs == 0 || o.links.is_empty() || o.strategies.is_empty() || o.caches.is_empty() {
        return Err(ExperimentError::Usage(
            "the grid is empty: give links, strategies, cache states and runs".into(),
        ));
    }
    Ok(())
}

/// The experiment the output file holds (refused if it is another one), or a new one when
/// there is no such file.
fn previous(o: &ExperimentOptions) -> Result<Experiment, ExperimentError> {
    match Experiment::read(&o.output) {
        Ok(prev) => {
            same(&prev, o).map_err(|why| ExperimentError::Other { path: o.output.clone(), why })?;
            Ok(prev)
        }
        Err(coldstart_formats::ResultsError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(Experiment::new())
        }
        Err(err) => Err(err.into()),
    }
}

/// Write into `e` the machine, the program and the settings, adding this grid's links,
/// strategies and cache states to those of the cells it holds.
fn describe(e: &mut Experiment, o: &ExperimentOptions) {
    let (nfiles, nbytes, _) = files(&o.dir);
    e.created_unix = if e.created_unix == 0 { coldstart_units::now_unix() } else { e.created_unix };
    e.kernel =
        std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().into();
    e.cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    e.program.dir = o.dir.canonicalize().unwrap_or_else(|_| o.dir.clone());
    e.program.command = o.command.clone();
    e.program.profiled = o.profiled.clone();
    e.program.files = nfiles;
    e.program.bytes = nbytes;
    e.settings.chunk_size = o.chunk_size;
    e.settings.readahead = u64::from(o.readahead.unwrap_or(0));
    e.settings.runs = o.runs;
    for l in &o.links {
        let spec = spec(l);
        if !e.settings.links.iter().any(|x| x.label == spec.label) {
            e.settings.links.push(spec);
        }
    }
    for s in &o.strategies {
        let n = s.name();
        if !e.settings.strategies.contains(&n) {
            e.settings.strategies.push(n);
        }
    }
    for c in &o.caches {
        if !e.settings.caches.iter().any(|x| x == c.name()) {
            e.settings.caches.push(c.name().into());
        }
    }
}

/// The bundle the grid serves, and what a start needs to know of it.
struct Bundle {
    /// Its directory.
    dir: PathBuf,
    /// Its files, whose page cache the cache state sets.
    server_files: Vec<PathBuf>,
    /// The SHA-256 of its manifest, which names its miss histories.
    manifest: [u8; 32],
    /// The size of its start object.
    start_bytes: u64,
}

/// Pack the bundle: once without a hot set to record what each workload reads, then with the
/// profiled workload's reads as the hot set. Records in `e` the hot set, the measured
/// workload's bytes and the local start-up time.
fn prepare_bundle(
    o: &ExperimentOptions,
    e: &mut Experiment,
    progress: &mut dyn Progress,
) -> Result<Bundle, ExperimentError> {
    std::fs::create_dir_all(&o.work).map_err(io(format!("work directory {}", o.work.display())))?;
    let pack_opts = PackOptions {
        chunk_size: o.chunk_size,
        cancel: o.cancel.clone(),
        ..PackOptions::default()
    };
    let bundle0 = o.work.join("bundle0");
    let bundle = o.work.join("bundle");
    for b in [&bundle0, &bundle] {
        let _ = std::fs::remove_dir_all(b);
    }
    progress.message("packing the program");
    coldstart_bundle::pack(&o.dir, &HotList::default(), &pack_opts, &bundle0)
        .map_err(|source| ExperimentError::Pack { dir: o.dir.clone(), source })?;
    progress.message("recording the profiled workload's reads (the hot set)");
    let hot = record(o, &bundle0, &o.profiled, &o.work.join("hot-profiled.json"), 0)?;
    progress.message("recording the measured workload's reads (Eq. 1's bytes)");
    let used = record(o, &bundle0, &o.command, &o.work.join("hot-measured.json"), 1)?;
    e.hot_set = Some(HotSet {
        bytes: hot.touches.iter().map(|t| t.length).sum(),
        chunks: hot.touches.len() as u64,
    });
    e.used_bytes = Some(used.touches.iter().map(|t| t.length).sum());
    coldstart_bundle::pack(&o.dir, &hot, &pack_opts, &bundle)
        .map_err(|source| ExperimentError::Pack { dir: o.dir.clone(), source })?;
    let (_, _, server_files) = files(&bundle);
    progress.message("timing the local start-up");
    e.local_s = local_start(o);
    if e.local_s.is_none() {
        e.warnings
            .push("the measured command failed when run locally: no local start-up time".into());
    }
    let manifest = std::fs::read(bundle.join("manifest.json"))
        .map_err(io(format!("the bundle's manifest in {}", bundle.display())))?;
    let manifest = coldstart_bundle::sign::digest(&manifest);
    let start_bytes = std::fs::metadata(bundle.join(coldstart_bundle::start::START_OBJECT))
        .map_or(0, |m| m.len());
    Ok(Bundle { dir: bundle, server_files, manifest, start_bytes })
}

/// The cells `e` does not hold yet, in the order they run; starts the progress with the work
/// of the whole grid and of the cells already measured, in estimated seconds.
fn plan<'a>(
    o: &'a ExperimentOptions,
    e: &Experiment,
    progress: &mut dyn Progress,
) -> Vec<(&'a GridLink, CacheState, GridStrategy)> {
    let mut todo = Vec::new();
    let (mut total, mut done) = (0.0, 0.0);
    for l in &o.links {
        for c in &o.caches {
            for s in &o.strategies {
                let est = estimate(e, &spec(l), &s.name()) * l.runs.unwrap_or(o.runs) as f64;
                total += est;
                if e.cell(&l.label, &s.name(), c.name()).is_some() {
                    done += est;
                } else {
                    todo.push((l, *c, *s));
                }
            }
        }
    }
    progress.start(total, done);
    todo
}

/// Where a cell's starts run: the bundle served at `url` over `link`, in cache state `cache`.
struct Site<'a> {
    url: &'a str,
    link: &'a GridLink,
    cache: CacheState,
    bundle: &'a Bundle,
}

/// The runs of one cell: the link's number of starts of the measured command with strategy
/// `s`, each from a chunk cache holding the miss history of the starts before it. `n` numbers
/// the starts' mount points. A failed start is a warning in `e`.
fn measure_cell(
    o: &ExperimentOptions,
    e: &mut Experiment,
    site: &Site,
    s: GridStrategy,
    n: &mut usize,
    progress: &mut dyn Progress,
) -> Result<Vec<CellRun>, ExperimentError> {
    let (l, c, bundle) = (site.link, site.cache, site.bundle);
    let name = s.name();
    let est = estimate(e, &spec(l), &name);
    let mut runs = Vec::new();
    let n_runs = l.runs.unwrap_or(o.runs);
    for i in 0..n_runs {
        if o.cancel.is_cancelled() {
            return Err(ExperimentError::Interrupted);
        }
        progress.message(&format!("{} {} {name}: run {} of {}", l.label, c.name(), i + 1, n_runs));
        // The user's cache after the starts so far: their miss history, no chunk.
        let cache = o.work.join("cache");
        let mut history = history_before(e, e.cells.len(), &l.label, bundle.start_bytes);
        history.extend(held_out_runs([(name.as_str(), &runs[..])], bundle.start_bytes));
        fresh_cache(&cache, &bundle.manifest, &history)?;
        server_cache(&bundle.server_files, c);
        *n += 1;
        let req = request(o, s, Some(l), &cache, None);
        let (r, said) = start(o, site.url, req, &o.command, *n)?;
        if r.exit_code != Some(0) {
            let status = match r.exit_code {
                Some(code) => format!("exit code {code}"),
                None => "killed by a signal".into(),
            };
            e.warnings.push(format!(
                "{} {} {name}: the command failed ({status}){said}",
                l.label,
                c.name(),
            ));
        }
        runs.push(r);
        progress.advance(est);
    }
    Ok(runs)
}

/// The model's figures for link `l` and an empty chunk cache holding the miss history of
/// `history`: with the link given, and (if asked) with the link measured by `predict`;
/// interrupted, [`ExperimentError::Interrupted`]. A failed prediction is a warning in `e`
/// and no figure.
fn predictions(
    o: &ExperimentOptions,
    e: &mut Experiment,
    url: &str,
    l: &GridLink,
    manifest: &[u8; 32],
    history: &[HeldOutRun],
) -> Result<(Option<Choice>, Option<Choice>), ExperimentError> {
    let empty = o.work.join("cache-empty");
    let predict = |e: &mut Experiment, given: bool| -> Result<Option<Choice>, ExperimentError> {
        fresh_cache(&empty, manifest, history)?;
        let choice = coldstart_lazyfs::predict(
            url,
            &PredictOptions {
                link_hint: given
                    .then(|| LinkEstimate::given(l.link.bits_per_second, l.link.latency)),
                cache_dir: Some(empty.clone()),
                network: NetworkRequest {
                    cancel: o.cancel.clone(),
                    min_rate: 1,
                    ..NetworkRequest::default()
                },
                // What the mount chooses for a strategy that fetches while it runs.
                readahead: o.readahead.unwrap_or_else(|| {
                    coldstart_lazyfs::default_readahead(
                        coldstart_lazyfs::Strategy::Stream,
                        false,
                        false,
                    )
                }),
                local_ms: e.local_s.map(|s| s * 1e3),
            },
        );
        let _ = std::fs::remove_dir_all(&empty);
        match choice {
            Ok(c) => Ok(Some(c)),
            Err(_) if o.cancel.is_cancelled() => Err(ExperimentError::Interrupted),
            Err(err) => {
                e.warnings.push(format!("predict on {}: {err}", l.label));
                Ok(None)
            }
        }
    };
    let choice = predict(e, true)?;
    let measured = if o.predict_measured { predict(e, false)? } else { None };
    Ok((choice, measured))
}

/// Sets a cell's predictions from `choice` (the link given) and `measured` (the link measured,
/// if asked): its strategy's figure, or for `auto` the figure of the strategy its runs chose
/// (predict's choice if they chose none).
fn predicted(cell: &mut Cell, choice: Option<&Choice>, measured: Option<&Choice>) {
    let figure = |cell: &Cell, ch: Option<&Choice>| {
        let ch = ch?;
        let pick = match cell.strategy.as_str() {
            "auto" | "auto-hint" => {
                cell.chosen().map(str::to_owned).unwrap_or_else(|| ch.chosen.to_string())
            }
            s => s.to_owned(),
        };
        ch.predictions.iter().find(|x| x.strategy.to_string() == pick).map(|x| x.ms / 1e3)
    };
    cell.predicted_s = figure(cell, choice);
    cell.predicted_measured_s = figure(cell, measured);
    cell.predicted_choice = choice.map(|ch| ch.chosen.to_string());
}

/// Predicts the stored cells of the grid's links and cache states again with the model as it
/// is now, measuring nothing: each (link, cache state) from the miss history of the runs
/// stored before its first cell ([`history_before`]), as the measurement did.
fn repredict(
    o: &ExperimentOptions,
    e: &mut Experiment,
    bundle: &Bundle,
) -> Result<(), ExperimentError> {
    for l in &o.links {
        let server = coldstart_serve::serve(&bundle.dir, "127.0.0.1:0", Some(l.link))?;
        for c in &o.caches {
            let Some(first) =
                e.cells.iter().position(|x| x.link.label == l.label && x.cache == c.name())
            else {
                continue;
            };
            server_cache(&bundle.server_files, *c);
            let history = history_before(e, first, &l.label, bundle.start_bytes);
            let url = server.url();
            let (choice, measured) = predictions(o, e, &url, l, &bundle.manifest, &history)?;
            for cell in
                e.cells.iter_mut().filter(|x| x.link.label == l.label && x.cache == c.name())
            {
                predicted(cell, choice.as_ref(), measured.as_ref());
            }
        }
    }
    Ok(())
}

fn spec(l: &GridLink) -> LinkSpec {
    LinkSpec {
        label: l.label.clone(),
        bits_per_second: l.link.bits_per_second,
        latency_s: l.link.latency.as_secs_f64(),
    }
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::ExperimentError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_follow_eq1() {
        let mut e = Experiment::new();
        e.program.bytes = 1_000_000;
        e.program.files = 2;
        e.used_bytes = Some(250_000);
        let link = LinkSpec { label: "1mbit/100ms".into(), bits_per_second: 1e6, latency_s: 0.1 };
        assert!((estimate(&e, &link, "original") - (8.0 + 0.2 + 0.2)).abs() < 1e-9);
        assert!((estimate(&e, &link, "reordered") - (2.0 + 0.3 + 0.2)).abs() < 1e-9);
    }

    #[test]
    fn the_default_grid_holds_the_papers_links_and_every_strategy() {
        let links = default_links();
        assert!(links.iter().any(|l| l.label == "56kbit/200ms" && l.link.bits_per_second == 56e3));
        assert!(links.iter().any(|l| l.label == "3mbit/10ms"));
        assert!(grid_link("1mbit").is_err());
        let slow = grid_link("56kbit/200ms:1").unwrap();
        assert_eq!((slow.label.as_str(), slow.runs), ("56kbit/200ms", Some(1)));
        assert_eq!(slow.link.bits_per_second, 56e3);
        assert_eq!(grid_link("3mbit/10ms").unwrap().runs, None);
        for bad in ["56kbit/200ms:0", "56kbit/200ms:x", "56kbit/200ms:", "1mbit/1ms:4294967295"] {
            assert!(grid_link(bad).unwrap_err().contains("whole number from 1 to 1000"), "{bad}");
        }
        let s = default_strategies();
        assert_eq!(s.len(), coldstart_lazyfs::Strategy::ALL.len() + 1);
        assert_eq!(s.last(), Some(&GridStrategy::Mount(StrategyOrAuto::Auto)));
        assert_eq!("auto-hint".parse::<GridStrategy>(), Ok(GridStrategy::AutoHint));
        assert_eq!(GridStrategy::AutoHint.name(), "auto-hint");
        assert!("fast".parse::<GridStrategy>().unwrap_err().contains("auto-hint"));
    }

    #[test]
    fn a_start_finds_the_miss_history_of_its_own_link_else_of_every_link() {
        let run = |misses, bytes_fetched| CellRun {
            wall_s: 1.0,
            bytes_fetched,
            requests: 1,
            stall_s: 0.0,
            exit_code: Some(0),
            chosen: None,
            teardown_s: None,
            held_out_misses: Some(misses),
            held_out_bytes: Some(misses * 100),
            other_bytes: None,
            auto_link: None,
        };
        let cell = |label: &str, strategy: &str, runs| Cell {
            link: LinkSpec { label: label.into(), bits_per_second: 1e6, latency_s: 0.01 },
            strategy: strategy.into(),
            cache: "cold".into(),
            runs,
            predicted_s: None,
            predicted_choice: None,
            predicted_measured_s: None,
        };
        let mut e = Experiment::new();
        e.cells.push(cell("a", "reordered", vec![run(20, 5000)]));
        e.cells.push(cell("b", "stream", vec![run(4, 7000), run(6, 7000)]));
        e.cells.push(cell("a", "original", vec![run(0, 9000)]));
        // Link b's runs, once there are some; before them, every run.
        let b = history_before(&e, 3, "b", 1000);
        assert_eq!(b.iter().map(|r| r.misses).collect::<Vec<_>>(), vec![4, 6]);
        assert_eq!(history_before(&e, 1, "b", 1000).len(), 1);
        let a = history_before(&e, 3, "a", 1000);
        assert_eq!(
            a.iter().map(|r| r.strategy).collect::<Vec<_>>(),
            vec![Strategy::Reordered, Strategy::Original]
        );
        // Stored without their other bytes: a hot-set strategy's are all but the start object.
        assert_eq!((a[0].other_bytes, a[1].other_bytes), (4000, 0));
    }

    #[test]
    fn another_experiment_in_the_output_is_not_resumed() {
        let mut e = Experiment::new();
        e.program.dir = PathBuf::from("/");
        e.program.command = vec!["a".into()];
        e.program.profiled = vec!["b".into()];
        e.settings.chunk_size = 16384;
        e.settings.readahead = 16384;
        let o = ExperimentOptions {
            dir: "/".into(),
            command: vec!["a".into()],
            profiled: vec!["b".into()],
            links: vec![],
            strategies: vec![],
            caches: vec![],
            runs: 1,
            chunk_size: 16384,
            readahead: Some(16384),
            work: "/tmp".into(),
            output: "/tmp/x.json".into(),
            repredict: false,
            predict_measured: false,
            cancel: coldstart_bundle::Cancel::new(),
        };
        assert!(same(&e, &o).is_ok());
        let o2 = ExperimentOptions { command: vec!["c".into()], ..o.clone() };
        assert!(same(&e, &o2).is_err());
        let o3 = ExperimentOptions { chunk_size: 4096, ..o };
        assert!(same(&e, &o3).is_err());
    }
}
