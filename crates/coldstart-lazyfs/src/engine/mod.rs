//! Chunks to verified bytes, for one mount: the engine owns the chunk cache's use, the fetches
//! and the strategy's work, and counts what happened for the report. It needs no FUSE; its
//! unit tests use a bundle on local disk as the remote.
//!
//! - `read`: the read path (cache, hot stream, demand fetch), what FUSE calls;
//! - `prefetch`: what each strategy does before the program starts;
//! - `stream`: the hot set in one request and `stream`'s background work;
//! - `start_object`: the manifest and the hot set from the start object's one request.

mod ahead;
mod local;
mod prefetch;
mod read;
mod start_object;
mod stream;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use coldstart_bundle::{ChunkCache, HotList, Manifest, Remote, Sha256Hex, Touch};
use coldstart_error::Category;
use serde::Serialize;

use crate::strategy::Strategy;
use read::Flight;
pub use start_object::{StartFailure, StartFetch, StartHead};
use stream::HotState;

/// How the engine works.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The strategy the mount runs.
    pub strategy: Strategy,
    /// Bound on how long one read waits for a chunk another fetch is bringing.
    pub read_timeout: Duration,
    /// Told of the stored bytes `original` has brought and will bring in all, as its whole
    /// files arrive (no other strategy fetches before start for long).
    pub progress: Option<coldstart_bundle::Progress>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            strategy: Strategy::Paged,
            read_timeout: Duration::from_secs(60),
            progress: None,
        }
    }
}

/// Why a chunk could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// A fetch failed; its message.
    #[error("{0}")]
    Fetch(String),
    /// A read waited past its bound for a chunk another fetch was bringing.
    #[error("timed out after {0:?} waiting for a chunk")]
    Timeout(Duration),
    /// The manifest names no such chunk.
    #[error("no such chunk")]
    NoChunk,
    /// Stopped: coldstart was interrupted.
    #[error("stopped: coldstart was interrupted")]
    Cancelled,
}

impl EngineError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            EngineError::Fetch(_)
            | EngineError::Timeout(_)
            | EngineError::NoChunk
            | EngineError::Cancelled => Category::Environment,
        }
    }
}

/// What a mount did, for the report at unmount.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// The strategy the mount ran.
    pub strategy: String,
    /// Body bytes received from the server.
    pub bytes_fetched: u64,
    /// Requests sent, retries included.
    pub requests: u64,
    /// Attempts that failed.
    pub failed_attempts: u64,
    /// Chunk reads served from the local cache.
    pub cache_hits: u64,
    /// Chunk reads that had to wait for the network.
    pub misses: u64,
    /// Of `misses`, reads of chunks outside the hot set (a workload the hot set was not
    /// recorded from), and those chunks' bytes on the wire: what the mount's history keeps for
    /// the model ([`crate::history`]).
    pub held_out_misses: u64,
    /// Those chunks' bytes on the wire.
    pub held_out_bytes: u64,
    /// Body bytes of the hot set's request (the start object's after its manifest, or the
    /// hot blob's); the rest of `bytes_fetched` but the manifest's is what misses, what they
    /// brought ahead and background work fetched.
    pub hot_request_bytes: u64,
    /// `bytes_fetched` less the manifest's and the hot request's bytes (what the miss history
    /// keeps of this start besides its misses).
    pub other_bytes: u64,
    /// Chunk reads that failed (EIO to the program).
    pub errors: u64,
    /// Time the program waited on misses: total, longest and median.
    pub miss_wait_total_ms: f64,
    /// The longest wait on one miss.
    pub miss_wait_max_ms: f64,
    /// The median wait on a miss.
    pub miss_wait_median_ms: f64,
    /// Time spent in the strategy's work before the mount was ready.
    pub prefetch_ms: f64,
    /// Chunks fetched by the hot-set stream and by background work.
    pub hot_chunks: u64,
    /// Chunks fetched by background work.
    pub background_chunks: u64,
    /// Chunks a miss brought after its own in the same request (the paper's Eq. 3 said they
    /// pay), and those of them the program read.
    pub ahead_chunks: u64,
    /// Of `ahead_chunks`, those the program read.
    pub ahead_read: u64,
    /// The last error of a read, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The last error of background work, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background_error: Option<String>,
    /// What `--strategy auto` predicted and chose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<crate::model::Choice>,
    /// The bundle file the manifest was read from: `start` (with the hot set, one request),
    /// `manifest.json.zst` or `manifest.json`.
    pub manifest_source: String,
    /// Why a preferred copy of the manifest was not used (an older bundle, a damaged copy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest_fallback: Option<String>,
    /// The kernel's read-ahead on the mount, in bytes (as given, or as the mount chose it).
    pub readahead: u32,
    /// Regular files the program opened on the mount: 0 means it read nothing from the
    /// bundle (a command that names the host's program instead of `{root}/...`).
    pub opens: u64,
    /// Files handed to the kernel as a verified local copy (FUSE passthrough): their reads
    /// do not reach the mount, and are in no other figure of the report.
    pub passthrough: u64,
    /// Time spent checking the content of cached copies before handing them over (each
    /// copy once per mount; none for a copy the mount wrote itself).
    pub passthrough_check_ms: f64,
}

/// What the report counts, as reads and fetches happen.
#[derive(Default)]
struct Counters {
    cache_hits: AtomicU64,
    misses: AtomicU64,
    held_out_misses: AtomicU64,
    held_out_bytes: AtomicU64,
    hot_request_bytes: AtomicU64,
    errors: AtomicU64,
    hot_chunks: AtomicU64,
    background_chunks: AtomicU64,
    opens: AtomicU64,
    passthrough: AtomicU64,
    passthrough_check_ns: AtomicU64,
    waits: Mutex<Vec<Duration>>,
    prefetch: Mutex<Duration>,
    background_error: Mutex<Option<String>>,
    last_error: Mutex<Option<String>>,
}

/// The pages read so far, each once, in first-touch order (`--record`); consecutive pages of
/// one file read one after the other are one touch.
#[derive(Default)]
struct Recorder {
    seen: HashSet<(usize, u64)>,
    touches: Vec<Touch>,
}

/// Gets chunks of one bundle for one mount.
pub struct Engine {
    manifest: Manifest,
    remote: Arc<dyn Remote>,
    cache: ChunkCache,
    opts: EngineOptions,
    inflight: Mutex<HashMap<Sha256Hex, Arc<Flight>>>,
    hot: Mutex<HotState>,
    hot_cv: Condvar,
    demand: AtomicUsize,
    /// When the last demand fetch ended, and a signal when one does.
    demand_cv: (Mutex<Option<Instant>>, Condvar),
    stop: AtomicBool,
    counters: Counters,
    recorder: Mutex<Recorder>,
    background: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The shortest demand fetch so far: at least one round trip.
    fastest_miss: Mutex<Option<Duration>>,
    /// The shortest round trip a demand fetch took, in seconds (its time less its bytes at
    /// the hot stream's rate).
    round_trip: Mutex<Option<f64>>,

    /// Where each file's chunks start in `verified`.
    first_chunk: Vec<usize>,
    /// What misses brought ahead of the program ([`ahead`]).
    ahead: ahead::Ahead,
    /// This engine, for the threads a miss starts.
    me: std::sync::Weak<Engine>,
    /// Whether this mount has checked the chunk's cached copy against its SHA-256 (or
    /// fetched and verified it): a cached chunk is checked once per mount, not on every read.
    verified: Vec<AtomicBool>,
    /// Whether the program has read the piece outside the hot set (indexed like `verified`),
    /// and those pieces in first-read order with the time of that read since `born`: what a
    /// learn record holds (`--learn`).
    outside_read: Vec<AtomicBool>,
    outside: Mutex<Vec<(usize, u64)>>,
    born: Instant,
}

impl Engine {
    /// An engine over a validated manifest.
    pub fn new(
        manifest: Manifest,
        remote: Arc<dyn Remote>,
        cache: ChunkCache,
        opts: EngineOptions,
    ) -> Arc<Engine> {
        let mut first_chunk = Vec::with_capacity(manifest.files.len());
        let mut chunks = 0;
        for e in &manifest.files {
            first_chunk.push(chunks);
            chunks += e.chunks.len();
        }
        let verified = (0..chunks).map(|_| AtomicBool::new(false)).collect();
        let outside_read = (0..chunks).map(|_| AtomicBool::new(false)).collect();
        let ahead = ahead::Ahead::new(&manifest);
        Arc::new_cyclic(|me| Engine {
            outside_read,
            outside: Mutex::default(),
            born: Instant::now(),
            ahead,
            me: me.clone(),
            fastest_miss: Mutex::default(),
            round_trip: Mutex::default(),
            first_chunk,
            verified,
            manifest,
            remote,
            cache,
            opts,
            inflight: Mutex::default(),
            hot: Mutex::default(),
            hot_cv: Condvar::new(),
            demand: AtomicUsize::new(0),
            demand_cv: (Mutex::new(None), Condvar::new()),
            stop: AtomicBool::new(false),
            counters: Counters::default(),
            recorder: Mutex::default(),
            background: Mutex::default(),
        })
    }

    /// The bundle's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The strategy it carries out.
    pub fn strategy(&self) -> Strategy {
        self.opts.strategy
    }

    /// Stops every fetch at once ([`coldstart_bundle::FetchOptions::cancel`]): reads that need
    /// the network fail instead of waiting, waits for other fetches end, background work
    /// stops. Cached chunks still read.
    pub fn cancel(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.remote.options().cancel.cancel();
        self.hot_cv.notify_all();
        self.demand_cv.1.notify_all();
    }

    /// Whether [`Engine::cancel`] (or the fetcher's cancel flag) stopped everything.
    fn cancelled(&self) -> bool {
        self.remote.options().cancel.is_cancelled()
    }

    /// Stops background work and waits for it (bounded by the fetcher's timeouts).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.demand_cv.1.notify_all();
        for h in self.background.lock().unwrap().drain(..) {
            let _ = h.join();
        }
    }

    /// The statistics so far.
    pub fn report(&self) -> Report {
        let stats = self.remote.stats();
        let mut waits: Vec<f64> =
            self.counters.waits.lock().unwrap().iter().map(|d| d.as_secs_f64() * 1e3).collect();
        waits.sort_by(|a, b| a.total_cmp(b));
        Report {
            strategy: self.opts.strategy.to_string(),
            bytes_fetched: stats.bytes.load(Ordering::Relaxed),
            requests: stats.requests.load(Ordering::Relaxed),
            failed_attempts: stats.failures.load(Ordering::Relaxed),
            cache_hits: self.counters.cache_hits.load(Ordering::Relaxed),
            misses: self.counters.misses.load(Ordering::Relaxed),
            held_out_misses: self.counters.held_out_misses.load(Ordering::Relaxed),
            held_out_bytes: self.counters.held_out_bytes.load(Ordering::Relaxed),
            hot_request_bytes: self.counters.hot_request_bytes.load(Ordering::Relaxed),
            other_bytes: 0,
            errors: self.counters.errors.load(Ordering::Relaxed),
            miss_wait_total_ms: waits.iter().fold(0.0, |a, b| a + b),
            miss_wait_max_ms: waits.last().copied().unwrap_or(0.0),
            miss_wait_median_ms: waits.get(waits.len() / 2).copied().unwrap_or(0.0),
            prefetch_ms: self.counters.prefetch.lock().unwrap().as_secs_f64() * 1e3,
            hot_chunks: self.counters.hot_chunks.load(Ordering::Relaxed),
            background_chunks: self.counters.background_chunks.load(Ordering::Relaxed),
            ahead_chunks: self.ahead.counts().0,
            ahead_read: self.ahead.counts().1,
            background_error: self.counters.background_error.lock().unwrap().clone(),
            auto: None,
            last_error: self.counters.last_error.lock().unwrap().clone(),
            manifest_source: String::new(),
            manifest_fallback: None,
            readahead: 0,
            opens: self.counters.opens.load(Ordering::Relaxed),
            passthrough: self.counters.passthrough.load(Ordering::Relaxed),
            passthrough_check_ms: self.counters.passthrough_check_ns.load(Ordering::Relaxed) as f64
                / 1e6,
        }
    }

    /// Counts a regular file opened by the program (the report's `opens`).
    pub fn note_open(&self) {
        self.counters.opens.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a file handed to the kernel with passthrough (the report's `passthrough`).
    pub fn note_passthrough(&self) {
        self.counters.passthrough.fetch_add(1, Ordering::Relaxed);
    }

    /// What was read, page by page in first-touch order, as a hot list for `pack`.
    pub fn recorded(&self) -> HotList {
        HotList { touches: self.recorder.lock().unwrap().touches.clone(), ..HotList::default() }
    }

    /// The pieces outside the hot set the program has read, each once, in the order of
    /// their first read: `(file, piece, milliseconds since the engine started, part read)`,
    /// the file an index into the manifest's files, the piece into its chunks, and the part
    /// read the file offsets from its first page read to the end of its last (what
    /// [`coldstart_bundle::learn::Record::of_reads`] takes). A file handed to the kernel with
    /// passthrough (every piece of it cached) is read past the engine: a mount for a learn
    /// record has none ([`crate::MountOptions::learn`]).
    pub fn outside_reads(&self) -> Vec<coldstart_bundle::learn::PieceRead> {
        let outside = self.outside.lock().unwrap().clone();
        let recorder = self.recorder.lock().unwrap();
        outside
            .iter()
            .map(|&(global, ms)| {
                let file = self.first_chunk.partition_point(|&f| f <= global) - 1;
                // Empty files share their start with the next: the last file starting there.
                let piece = global - self.first_chunk[file];
                let c = &self.manifest.files[file].chunks[piece];
                let end = c.offset + c.length;
                let mut pages = (c.offset / read::PAGE..end.div_ceil(read::PAGE))
                    .filter(|&p| recorder.seen.contains(&(file, p)));
                let first = pages.next();
                let read = first.map(|first| {
                    let last = pages.next_back().unwrap_or(first);
                    ((first * read::PAGE).max(c.offset), ((last + 1) * read::PAGE).min(end))
                });
                (file, piece, ms, read)
            })
            .collect()
    }

    /// Notes a read of piece `global` outside the hot set (the first one only).
    fn note_outside(&self, global: usize) {
        if self.outside_read[global].load(Ordering::Relaxed)
            || self.outside_read[global].swap(true, Ordering::Relaxed)
        {
            return;
        }
        let mut outside = self.outside.lock().unwrap();
        // Taken under the lock: the list's times never go back.
        outside.push((global, self.born.elapsed().as_millis() as u64));
    }

    /// Writes [`Engine::recorded`] to `path`.
    pub fn write_record(&self, path: &Path) -> Result<(), coldstart_bundle::HotListError> {
        self.recorded().write(path)
    }
}
