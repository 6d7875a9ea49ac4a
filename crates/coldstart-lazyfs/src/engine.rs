//! Chunks to verified bytes: cache, hot-set stream, demand fetch; the strategies and the
//! statistics.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use coldstart_bundle::remote::{get_chunk_while, with_retries};
use coldstart_bundle::start::{StartHeader, HEADER_LEN, START_OBJECT};
use coldstart_bundle::{
    decode_chunk, Chunk, ChunkCache, EntryKind, FetchError, HotList, Manifest, ManifestError,
    Remote, Sha256Hex, Touch,
};
use coldstart_error::Category;
use serde::Serialize;

use crate::strategy::Strategy;

/// How the engine works.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub strategy: Strategy,
    /// Bound on how long one read waits for a chunk another fetch is bringing.
    pub read_timeout: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { strategy: Strategy::Paged, read_timeout: Duration::from_secs(60) }
    }
}

/// Why a chunk could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Fetch(String),
    #[error("timed out after {0:?} waiting for a chunk")]
    Timeout(Duration),
    #[error("no such chunk")]
    NoChunk,
}

impl EngineError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            EngineError::Fetch(_) | EngineError::Timeout(_) | EngineError::NoChunk => {
                Category::Environment
            }
        }
    }
}

/// What a mount did, for the report at unmount.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
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
    /// Chunk reads that failed (EIO to the program).
    pub errors: u64,
    /// Time the program waited on misses: total, longest and median.
    pub miss_wait_total_ms: f64,
    pub miss_wait_max_ms: f64,
    pub miss_wait_median_ms: f64,
    /// Time spent in the strategy's work before the mount was ready.
    pub prefetch_ms: f64,
    /// Chunks fetched by the hot-set stream and by background work.
    pub hot_chunks: u64,
    pub background_chunks: u64,
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
}

/// How long no miss must have been waiting before background work starts a fetch.
const QUIET: Duration = Duration::from_millis(100);

struct HotPlan {
    chunks: Vec<(u64, Chunk)>,
    first: usize,
    last: usize,
}

/// Where the start object's hot part has got to.
#[derive(Default)]
struct HotCursor {
    /// The next hot chunk expected.
    idx: usize,
    /// Bytes of it received so far.
    buf: Vec<u8>,
    /// A chunk did not match its SHA-256.
    corrupt: bool,
}

/// Why the start object gave no manifest.
#[derive(Debug)]
pub enum StartFailure {
    /// It cannot be used (the server does not have it, it is not a start object or of another
    /// version, or it was damaged or cut short before the manifest's end): read
    /// `manifest.json.zst` or `manifest.json` and the hot blob instead.
    Fallback(String),
    /// Its manifest matched its digest but is not a valid manifest: the bundle is rejected.
    Invalid(ManifestError),
}

/// A `GET` of the bundle's start object under way ([`coldstart_bundle::start`]): first its
/// manifest ([`StartFetch::manifest`]), then, handed to an engine ([`Engine::start_from`]), its
/// hot chunks, received into the cache while the program runs.
pub struct StartFetch {
    manifest: mpsc::Receiver<Result<StartHead, StartFailure>>,
    engine: mpsc::Sender<(Arc<Engine>, Option<HotPlan>)>,
    thread: std::thread::JoinHandle<()>,
}

/// What the start object's first bytes gave.
#[derive(Debug)]
pub struct StartHead {
    pub manifest: Manifest,
    /// Bytes of the stored manifest in the object.
    pub manifest_bytes: u64,
    /// With [`StartFetch::begin`]'s `sample`: the link as the object's own arrival measured
    /// it, and the hot chunks that arrived meanwhile, verified.
    pub sample: Option<crate::model::Probe>,
}

/// A link sample ends once this much of the object has arrived after its first bytes and
/// [`crate::model::PROBE_ENOUGH`] has passed ...
const SAMPLE_BYTES: usize = 16 * 1024;
/// ... or this much, however fast.
const SAMPLE_MAX_BYTES: usize = 512 * 1024;

impl StartFetch {
    /// Sends the request, on a thread of its own. With `sample`, the manifest is handed over
    /// only once enough of the hot part has arrived to measure the link on it (the time to
    /// the first bytes, then bytes over time): what `--strategy auto` needs to choose, at
    /// the price of a wait the hot-set strategies spend receiving chunks they need anyway.
    pub fn begin(remote: Arc<dyn Remote>, sample: bool) -> std::io::Result<StartFetch> {
        let (mtx, manifest) = mpsc::channel();
        let (engine, erx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("coldstart-start".into())
            .spawn(move || start_thread(remote.as_ref(), sample, mtx, erx))?;
        Ok(StartFetch { manifest, engine, thread })
    }

    /// Waits for the manifest: bounded by the fetcher's timeouts, as the request is.
    /// Dropping the `StartFetch` instead of handing it to an engine stops the request.
    pub fn manifest(&self) -> Result<StartHead, StartFailure> {
        self.manifest.recv().unwrap_or_else(|_| {
            Err(StartFailure::Fallback("the start object's reader stopped".into()))
        })
    }
}

/// Reads the start object: the header and manifest (sent on `mtx`; with `sample`, once enough
/// of the hot part has arrived to measure the link on it), then, once an engine has been made
/// from that manifest (received on `erx`), the hot chunks; after a failure in the hot part, the
/// engine resumes with a Range from the first chunk not yet received.
fn start_thread(
    remote: &dyn Remote,
    sample: bool,
    mtx: mpsc::Sender<Result<StartHead, StartFailure>>,
    erx: mpsc::Receiver<(Arc<Engine>, Option<HotPlan>)>,
) {
    let mut mtx = Some(mtx);
    let mut head: Vec<u8> = Vec::new();
    let mut header: Option<StartHeader> = None;
    let mut failure: Option<StartFailure> = None;
    let mut got: Option<(Arc<Engine>, Option<HotPlan>)> = None;
    let mut cursor = HotCursor::default();
    // The parsed manifest, until it is handed over.
    let mut ready: Option<Manifest> = None;
    let t0 = Instant::now();
    let mut first: Option<(Instant, usize)> = None;
    let mut received = 0usize;
    // Hands the manifest (and the sample) over, waits for the engine and gives it the hot
    // bytes received so far. Returns whether to go on receiving.
    let mut hand_over = |head: &mut Vec<u8>,
                         h: &StartHeader,
                         manifest: Manifest,
                         first: Option<(Instant, usize)>,
                         received: usize,
                         cursor: &mut HotCursor,
                         got: &mut Option<(Arc<Engine>, Option<HotPlan>)>|
     -> bool {
        let end = h.hot_offset() as usize;
        let mut from = end;
        let probe = first.filter(|_| sample).map(|(t1, n1)| {
            let (probe, boundary, k) = sampled(&manifest, &head[end..], t0, t1, n1, received - n1);
            cursor.idx = k;
            from = end + boundary;
            probe
        });
        let info = StartHead { manifest, manifest_bytes: h.manifest_stored, sample: probe };
        if mtx.take().expect("sent once").send(Ok(info)).is_err() {
            return false;
        }
        // The mount makes an engine and plans the hot set; or gives up (the sender dropped).
        let Ok(g) = erx.recv() else { return false };
        let rest = head.split_off(from);
        let (engine, plan) = got.insert(g);
        engine.feed_hot(plan.as_ref(), cursor, &rest)
    };
    let result = remote.fetch(START_OBJECT, None, &mut |bytes| {
        if let Some((engine, plan)) = &got {
            return engine.feed_hot(plan.as_ref(), &mut cursor, bytes);
        }
        first.get_or_insert((Instant::now(), bytes.len()));
        received += bytes.len();
        head.extend_from_slice(bytes);
        if ready.is_none() {
            match parse_head(&head, &mut header) {
                Ok(None) => return true,
                Ok(Some(m)) => ready = Some(m),
                Err(e) => {
                    failure = Some(e);
                    return false;
                }
            }
        }
        let h = header.clone().expect("parsed with the manifest");
        if sample {
            let (t1, n1) = first.expect("set above");
            let after = received - n1;
            let complete = head.len() as u64 >= h.total_len();
            let enough = after >= SAMPLE_BYTES && t1.elapsed() >= crate::model::PROBE_ENOUGH;
            if !(enough || after >= SAMPLE_MAX_BYTES || complete) {
                return true;
            }
        }
        let manifest = ready.take().expect("parsed above");
        hand_over(&mut head, &h, manifest, first, received, &mut cursor, &mut got)
    });
    // A short object can end before the sample did: hand over what there is.
    if let (Some(manifest), Some(h), Ok(_)) = (ready.take(), header.clone(), &result) {
        hand_over(&mut head, &h, manifest, first, received, &mut cursor, &mut got);
    }
    if let Some(tx) = mtx {
        let why = failure.unwrap_or_else(|| {
            StartFailure::Fallback(match result {
                Err(e) => e.to_string(),
                Ok(_) => "it ended before its manifest did".into(),
            })
        });
        let _ = tx.send(Err(why));
        return;
    }
    let Some((engine, plan)) = got else { return };
    let base = header.map_or(0, |h| h.hot_offset());
    engine.finish_start(plan, cursor, base, result.is_err());
}

/// The header and manifest from the start object's first bytes: `None` until they are all
/// there; an error if they cannot be used.
fn parse_head(
    head: &[u8],
    header: &mut Option<StartHeader>,
) -> Result<Option<Manifest>, StartFailure> {
    if header.is_none() {
        let Some(h) = head.get(..HEADER_LEN) else { return Ok(None) };
        let h = StartHeader::parse(h.try_into().expect("HEADER_LEN bytes"))
            .map_err(|e| StartFailure::Fallback(e.to_string()))?;
        *header = Some(h);
    }
    let h = header.as_ref().expect("parsed above");
    let end = h.hot_offset() as usize;
    if head.len() < end {
        return Ok(None);
    }
    let json = h
        .decode_manifest(&head[HEADER_LEN..end])
        .map_err(|e| StartFailure::Fallback(e.to_string()))?;
    let manifest = Manifest::parse(&json).map_err(StartFailure::Invalid)?;
    if manifest.hot.size != h.hot_len {
        let e = coldstart_bundle::start::StartError::HotLength {
            got: h.hot_len,
            want: manifest.hot.size,
        };
        return Err(StartFailure::Fallback(e.to_string()));
    }
    Ok(Some(manifest))
}

/// The link measured on the start object's arrival (requested at `t0`, first bytes, `n1` of
/// them, at `t1`, `after` more since) and the hot chunks wholly in `hot` (the hot part received
/// so far), verified. Also the end of the last whole chunk in `hot` and the count of chunks.
fn sampled(
    manifest: &Manifest,
    hot: &[u8],
    t0: Instant,
    t1: Instant,
    n1: usize,
    after: usize,
) -> (crate::model::Probe, usize, usize) {
    let took = t1.elapsed().as_secs_f64();
    let bps = if after > 0 && took > 1e-4 {
        after as f64 / took
    } else {
        // Too little or too fast to tell: as fast as the sample allows (at least 1 Gbit/s).
        (after as f64 / 1e-4).max(125e6)
    };
    let latency = ((t1 - t0).as_secs_f64() - n1 as f64 / bps).max(0.0);
    let link = crate::model::LinkEstimate {
        bytes_per_second: bps,
        latency_ms: latency * 1e3,
        bandwidth_estimated: true,
        latency_estimated: true,
    };
    let mut chunks = Vec::new();
    let (mut boundary, mut k) = (0, 0);
    for (o, c) in manifest.hot_chunks() {
        let end = (o + c.stored_len()) as usize;
        let Some(stored) = hot.get(o as usize..end) else { break };
        // One that fails its check is left to the hot stream's end: readers fetch it then.
        if let Some(data) = decode_chunk(manifest.compression, c, stored) {
            chunks.push((c.clone(), data));
        }
        (boundary, k) = (end, k + 1);
    }
    (crate::model::Probe { link, chunks }, boundary, k)
}

struct Flight {
    done: Mutex<Option<Result<Arc<Vec<u8>>, EngineError>>>,
    cv: Condvar,
}

#[derive(Default)]
struct HotState {
    /// Hashes the hot stream will still bring.
    pending: HashSet<Sha256Hex>,
    running: bool,
}

#[derive(Default)]
struct Counters {
    cache_hits: AtomicU64,
    misses: AtomicU64,
    errors: AtomicU64,
    hot_chunks: AtomicU64,
    background_chunks: AtomicU64,
    waits: Mutex<Vec<Duration>>,
    prefetch: Mutex<Duration>,
    background_error: Mutex<Option<String>>,
    last_error: Mutex<Option<String>>,
}

#[derive(Default)]
struct Recorder {
    seen: HashSet<(usize, usize)>,
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
}

impl Engine {
    /// An engine over a validated manifest.
    pub fn new(
        manifest: Manifest,
        remote: Arc<dyn Remote>,
        cache: ChunkCache,
        opts: EngineOptions,
    ) -> Arc<Engine> {
        Arc::new(Engine {
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

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Runs the strategy's start-up work: blocking for `original` and `reordered`, background
    /// threads for `reordered-paged` and `stream`.
    pub fn start(self: &Arc<Self>) -> Result<(), EngineError> {
        let t = Instant::now();
        let result = match self.opts.strategy {
            Strategy::Paged => Ok(()),
            Strategy::Original => self.fetch_all(),
            Strategy::Reordered => {
                let plan = self.plan_hot();
                self.load_hot(plan)
            }
            Strategy::ReorderedPaged | Strategy::Stream => {
                // Plan before returning, so that a read right after the mount waits for the
                // stream instead of fetching the same chunk again.
                let plan = self.plan_hot();
                let me = self.clone();
                let h = std::thread::Builder::new()
                    .name("coldstart-hot".into())
                    .spawn(move || {
                        if let Err(e) = me.load_hot(plan) {
                            *me.counters.background_error.lock().unwrap() = Some(e.to_string());
                        }
                        if me.opts.strategy == Strategy::Stream {
                            me.stream_rest();
                        }
                    })
                    .map_err(|e| EngineError::Fetch(e.to_string()))?;
                self.background.lock().unwrap().push(h);
                Ok(())
            }
        };
        *self.counters.prefetch.lock().unwrap() = t.elapsed();
        result
    }

    /// Runs the strategy's start-up work with the hot set from the start object whose manifest
    /// this engine was made from (`reordered`, `reordered-paged` and `stream`; blocking for
    /// `reordered`, like [`Engine::start`]).
    pub fn start_from(self: &Arc<Self>, fetch: StartFetch) -> Result<(), EngineError> {
        let t = Instant::now();
        let plan = self.plan_hot();
        let planned = plan.is_some();
        if fetch.engine.send((self.clone(), plan)).is_err() && planned {
            self.end_hot(Err("the start object's reader stopped".into()));
        }
        self.background.lock().unwrap().push(fetch.thread);
        let mut result = Ok(());
        if self.opts.strategy == Strategy::Reordered {
            let mut hot = self.hot.lock().unwrap();
            while hot.running {
                hot = self.hot_cv.wait(hot).unwrap();
            }
            if let Some(e) = self.counters.background_error.lock().unwrap().clone() {
                result = Err(EngineError::Fetch(e));
            }
        }
        *self.counters.prefetch.lock().unwrap() = t.elapsed();
        result
    }

    /// Takes the start object's bytes after the manifest: each hot chunk verified and stored
    /// as soon as its bytes have arrived. Returns whether to go on receiving.
    fn feed_hot(&self, plan: Option<&HotPlan>, cur: &mut HotCursor, bytes: &[u8]) -> bool {
        let Some(plan) = plan else { return false };
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        cur.buf.extend_from_slice(bytes);
        // Whole chunks from the front of the buffer; the bytes they took go in one drain.
        let mut used = 0;
        while cur.idx <= plan.last {
            let c = &plan.chunks[cur.idx].1;
            let len = c.stored_len() as usize;
            let Some(stored) = cur.buf.get(used..used + len) else { break };
            // Chunks before the first missing one were cached when the plan was made.
            if cur.idx >= plan.first {
                let Some(data) = decode_chunk(self.manifest.compression, c, stored) else {
                    cur.corrupt = true;
                    return false;
                };
                self.hot_done(c, &data);
            }
            used += len;
            cur.idx += 1;
        }
        cur.buf.drain(..used);
        // Past the last chunk not cached: stop, unless the body ends there anyway (then the
        // connection stays reusable).
        cur.idx <= plan.last || plan.last + 1 == plan.chunks.len()
    }

    /// After the start object's request: resumes the hot part if it is not complete (a Range
    /// of the start object from the first chunk not received, with retries), ends the hot
    /// stream, then starts `stream`'s background work.
    fn finish_start(&self, plan: Option<HotPlan>, cur: HotCursor, base: u64, failed: bool) {
        let mut result = Ok(());
        if let Some(plan) = plan {
            if cur.corrupt || (failed && cur.idx <= plan.last) {
                self.remote.stats().failures.fetch_add(1, Ordering::Relaxed);
            }
            if cur.idx <= plan.last && !self.stop.load(Ordering::SeqCst) {
                let shifted: Vec<(u64, Chunk)> =
                    plan.chunks.iter().map(|(o, c)| (o + base, c.clone())).collect();
                result = self
                    .stream_chunks(START_OBJECT, &shifted, cur.idx, plan.last, |c, data| {
                        self.hot_done(c, data)
                    })
                    .map_err(|e| e.to_string());
            }
            self.end_hot(result);
        }
        if self.opts.strategy == Strategy::Stream && !self.stop.load(Ordering::SeqCst) {
            self.stream_rest();
        }
    }

    /// A hot chunk has arrived, verified: into the cache, and readers waiting on it go on.
    fn hot_done(&self, c: &Chunk, data: &[u8]) {
        let _ = self.cache.put(&c.sha256, data);
        self.counters.hot_chunks.fetch_add(1, Ordering::Relaxed);
        let mut state = self.hot.lock().unwrap();
        state.pending.remove(&c.sha256);
        self.hot_cv.notify_all();
    }

    /// The hot stream is over: readers still waiting on a hot chunk fetch it themselves.
    fn end_hot(&self, result: Result<(), String>) {
        if let Err(e) = result {
            *self.counters.background_error.lock().unwrap() = Some(e);
        }
        let mut hot = self.hot.lock().unwrap();
        hot.running = false;
        hot.pending.clear();
        self.hot_cv.notify_all();
    }

    /// Stops background work and waits for it (bounded by the fetcher's timeouts).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.demand_cv.1.notify_all();
        for h in self.background.lock().unwrap().drain(..) {
            let _ = h.join();
        }
    }

    /// The verified bytes of chunk `index` of file `file` (an index into the manifest).
    pub fn read_chunk(&self, file: usize, index: usize) -> Result<Arc<Vec<u8>>, EngineError> {
        let entry = self.manifest.files.get(file).ok_or(EngineError::NoChunk)?;
        let chunk = entry.chunks.get(index).ok_or(EngineError::NoChunk)?;
        {
            let mut r = self.recorder.lock().unwrap();
            if r.seen.insert((file, index)) {
                r.touches.push(Touch {
                    path: entry.path.clone(),
                    offset: chunk.offset,
                    length: chunk.length,
                });
            }
        }
        if let Some(data) = self.cache.get(chunk) {
            self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Arc::new(data));
        }
        let t = Instant::now();
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        let result = self.wait_for_hot(chunk).map_or_else(|| self.shared_fetch(chunk, true), Ok);
        self.counters.waits.lock().unwrap().push(t.elapsed());
        if let Err(e) = &result {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
            *self.counters.last_error.lock().unwrap() = Some(format!("{}: {e}", entry.path));
        }
        result
    }

    /// The verified bytes of several chunks of one file (one kernel read spans several
    /// chunks): the missing ones are fetched in parallel, so their latencies overlap.
    pub fn read_chunks(
        &self,
        file: usize,
        indices: std::ops::Range<usize>,
    ) -> Result<Vec<Arc<Vec<u8>>>, EngineError> {
        let entry = self.manifest.files.get(file).ok_or(EngineError::NoChunk)?;
        let missing = indices
            .clone()
            .filter(|&i| entry.chunks.get(i).is_some_and(|c| !self.cache.contains(&c.sha256)))
            .count();
        if missing <= 1 {
            return indices.map(|i| self.read_chunk(file, i)).collect();
        }
        // Record in order before the parallel part, so the first-touch order stays exact.
        for i in indices.clone() {
            if let Some(c) = entry.chunks.get(i) {
                let mut r = self.recorder.lock().unwrap();
                if r.seen.insert((file, i)) {
                    r.touches.push(Touch {
                        path: entry.path.clone(),
                        offset: c.offset,
                        length: c.length,
                    });
                }
            }
        }
        std::thread::scope(|s| {
            let handles: Vec<_> =
                indices.map(|i| s.spawn(move || self.read_chunk(file, i))).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or(Err(EngineError::Fetch("a fetch thread panicked".into())))
                })
                .collect()
        })
    }

    /// If the hot stream is bringing this chunk, waits for it (bounded).
    fn wait_for_hot(&self, chunk: &Chunk) -> Option<Arc<Vec<u8>>> {
        let deadline = Instant::now() + self.opts.read_timeout;
        let mut hot = self.hot.lock().unwrap();
        while hot.running && hot.pending.contains(&chunk.sha256) {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            hot = self.hot_cv.wait_timeout(hot, deadline - now).unwrap().0;
        }
        drop(hot);
        self.cache.get(chunk).map(Arc::new)
    }

    /// Fetches a chunk; concurrent readers of the same chunk (and background work) share one
    /// fetch. `demand`: a program is waiting, so background work pauses meanwhile.
    fn shared_fetch(&self, chunk: &Chunk, demand: bool) -> Result<Arc<Vec<u8>>, EngineError> {
        let (flight, leader) = {
            let mut map = self.inflight.lock().unwrap();
            match map.get(&chunk.sha256) {
                Some(f) => (f.clone(), false),
                None => {
                    let f = Arc::new(Flight { done: Mutex::new(None), cv: Condvar::new() });
                    map.insert(chunk.sha256.clone(), f.clone());
                    (f, true)
                }
            }
        };
        if leader {
            if demand {
                self.demand.fetch_add(1, Ordering::SeqCst);
            }
            // Another fetch may have stored it between our cache miss and now.
            let result = match self.cache.get(chunk) {
                Some(data) => Ok(data),
                // Background work stops at unmount, mid-transfer: the program is gone.
                None => {
                    get_chunk_while(self.remote.as_ref(), self.manifest.compression, chunk, &|| {
                        demand || !self.stop.load(Ordering::Relaxed)
                    })
                }
            };
            let result = result
                .map(|data| {
                    let _ = self.cache.put(&chunk.sha256, &data);
                    Arc::new(data)
                })
                .map_err(|e| EngineError::Fetch(e.to_string()));
            if demand {
                *self.demand_cv.0.lock().unwrap() = Some(Instant::now());
                self.demand.fetch_sub(1, Ordering::SeqCst);
                self.demand_cv.1.notify_all();
            }
            *flight.done.lock().unwrap() = Some(result.clone());
            flight.cv.notify_all();
            self.inflight.lock().unwrap().remove(&chunk.sha256);
            return result;
        }
        let deadline = Instant::now() + self.opts.read_timeout;
        let mut done = flight.done.lock().unwrap();
        loop {
            if let Some(r) = done.as_ref() {
                return r.clone();
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(EngineError::Timeout(self.opts.read_timeout));
            }
            done = flight.cv.wait_timeout(done, deadline - now).unwrap().0;
        }
    }

    /// `original`: what downloading the program does. Each regular file whole, one request
    /// per distinct file, one request at a time, in manifest order (sorted by path); every
    /// chunk is still verified as it arrives. A file whose chunks are all cached is skipped.
    fn fetch_all(&self) -> Result<(), EngineError> {
        let mut seen = HashSet::new();
        for e in self.manifest.files.iter().filter(|e| e.kind == EntryKind::File) {
            let Some(sha) = &e.sha256 else { continue };
            if e.chunks.is_empty() || !seen.insert(sha) {
                continue;
            }
            if e.chunks.iter().all(|c| self.cache.contains(&c.sha256)) {
                continue;
            }
            let mut offset = 0;
            let pieces: Vec<(u64, Chunk)> = e
                .chunks
                .iter()
                .map(|c| {
                    let o = offset;
                    offset += c.stored_len();
                    (o, c.clone())
                })
                .collect();
            let blob = coldstart_bundle::file_blob_path(sha);
            self.stream_chunks(&blob, &pieces, 0, pieces.len() - 1, |c, data| {
                let _ = self.cache.put(&c.sha256, data);
            })
            .map_err(|err| EngineError::Fetch(format!("{}: {err}", e.path)))?;
        }
        Ok(())
    }

    /// The hot chunks with their offsets in the hot blob, and the first and last index not
    /// yet in the cache; marks those as pending.
    fn plan_hot(&self) -> Option<HotPlan> {
        let chunks: Vec<(u64, Chunk)> =
            self.manifest.hot_chunks().into_iter().map(|(o, c)| (o, c.clone())).collect();
        let missing: Vec<usize> =
            (0..chunks.len()).filter(|&i| !self.cache.contains(&chunks[i].1.sha256)).collect();
        let (&first, &last) = (missing.first()?, missing.last()?);
        let mut state = self.hot.lock().unwrap();
        state.running = true;
        state.pending = missing.iter().map(|&i| chunks[i].1.sha256.clone()).collect();
        Some(HotPlan { chunks, first, last })
    }

    /// Streams the hot blob in one request (resuming with a Range after a failure), storing
    /// each chunk as soon as its bytes have arrived and been verified.
    fn load_hot(&self, plan: Option<HotPlan>) -> Result<(), EngineError> {
        let result = match plan {
            Some(plan) => self.load_hot_inner(plan),
            None => Ok(()),
        };
        let mut hot = self.hot.lock().unwrap();
        hot.running = false;
        hot.pending.clear();
        self.hot_cv.notify_all();
        result.map_err(|e| EngineError::Fetch(e.to_string()))
    }

    fn load_hot_inner(&self, plan: HotPlan) -> Result<(), FetchError> {
        let HotPlan { chunks, first, last } = plan;
        self.stream_chunks(&self.manifest.hot.blob, &chunks, first, last, |c, data| {
            self.hot_done(c, data)
        })
    }

    /// Reads `chunks[first..=last]` (each with its offset in `blob`, stored back to back) in
    /// one request, handing each decoded and verified chunk to `done` as soon as its bytes
    /// have arrived; after a failure, resumes with a Range from the first chunk not yet
    /// received.
    fn stream_chunks(
        &self,
        blob: &str,
        chunks: &[(u64, Chunk)],
        first: usize,
        last: usize,
        mut done: impl FnMut(&Chunk, &[u8]),
    ) -> Result<(), FetchError> {
        let end = chunks[last].0 + chunks[last].1.stored_len();
        let compression = self.manifest.compression;
        let mut idx = first;
        let url = self.remote.describe(blob);
        with_retries(self.remote.options(), self.remote.stats(), &url, || {
            let mut buf: Vec<u8> = Vec::new();
            let mut corrupt = false;
            let start = chunks[idx].0;
            let result = self.remote.fetch(blob, Some((start, end)), &mut |bytes| {
                if self.stop.load(Ordering::Relaxed) {
                    return false;
                }
                buf.extend_from_slice(bytes);
                while idx <= last && buf.len() as u64 >= chunks[idx].1.stored_len() {
                    let c = &chunks[idx].1;
                    let rest = buf.split_off(c.stored_len() as usize);
                    let Some(data) = decode_chunk(compression, c, &buf) else {
                        corrupt = true;
                        return false;
                    };
                    done(c, &data);
                    buf = rest;
                    idx += 1;
                }
                true
            });
            if corrupt {
                return Err(FetchError::Corrupt { url: url.clone() });
            }
            result.map(|_| ())
        })
    }

    /// `stream`: everything not yet cached, files in order of their first hot chunk, then
    /// the rest; waits while any demand fetch is in flight.
    fn stream_rest(&self) {
        let index: HashMap<&str, usize> =
            self.manifest.files.iter().enumerate().map(|(i, e)| (e.path.as_str(), i)).collect();
        let mut order: Vec<usize> = Vec::new();
        let mut placed = HashSet::new();
        for r in &self.manifest.hot.chunks {
            if let Some(&i) = index.get(r.path.as_str()) {
                if placed.insert(i) {
                    order.push(i);
                }
            }
        }
        order.extend((0..self.manifest.files.len()).filter(|i| placed.insert(*i)));
        let mut seen = HashSet::new();
        let todo: Vec<&Chunk> = order
            .into_iter()
            .flat_map(|i| &self.manifest.files[i].chunks)
            .filter(|c| seen.insert(&c.sha256))
            .collect();
        // Two in flight keep a high-latency link busy; more would queue ahead of misses.
        let workers = self.remote.options().connections.saturating_sub(1).clamp(1, 2);
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| self.stream_worker(&todo, &next));
            }
        });
    }

    fn stream_worker(&self, todo: &[&Chunk], next: &AtomicUsize) {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let Some(c) = todo.get(next.fetch_add(1, Ordering::SeqCst)) else { return };
            if self.cache.contains(&c.sha256) {
                continue;
            }
            // Misses go first: wait while any is in flight, and until none has been for
            // QUIET, so that background transfers do not take the link from a program that
            // is still faulting.
            {
                let (lock, cv) = &self.demand_cv;
                let mut last = lock.lock().unwrap();
                loop {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let busy = self.demand.load(Ordering::SeqCst) > 0;
                    let quiet_for = last.map_or(QUIET, |t| t.elapsed());
                    if !busy && quiet_for >= QUIET {
                        break;
                    }
                    let wait = if busy { QUIET } else { QUIET - quiet_for };
                    last = cv.wait_timeout(last, wait).unwrap().0;
                }
            }
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            match self.shared_fetch(c, false) {
                Ok(_) => {
                    self.counters.background_chunks.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) if self.stop.load(Ordering::SeqCst) => return,
                Err(e) => {
                    *self.counters.background_error.lock().unwrap() = Some(e.to_string());
                    return;
                }
            }
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
            errors: self.counters.errors.load(Ordering::Relaxed),
            miss_wait_total_ms: waits.iter().fold(0.0, |a, b| a + b),
            miss_wait_max_ms: waits.last().copied().unwrap_or(0.0),
            miss_wait_median_ms: waits.get(waits.len() / 2).copied().unwrap_or(0.0),
            prefetch_ms: self.counters.prefetch.lock().unwrap().as_secs_f64() * 1e3,
            hot_chunks: self.counters.hot_chunks.load(Ordering::Relaxed),
            background_chunks: self.counters.background_chunks.load(Ordering::Relaxed),
            background_error: self.counters.background_error.lock().unwrap().clone(),
            auto: None,
            last_error: self.counters.last_error.lock().unwrap().clone(),
            manifest_source: String::new(),
            manifest_fallback: None,
        }
    }

    /// What was read, chunk by chunk in first-touch order, as a hot list for `pack`.
    pub fn recorded(&self) -> HotList {
        HotList { touches: self.recorder.lock().unwrap().touches.clone(), ..HotList::default() }
    }

    /// Writes [`Engine::recorded`] to `path`.
    pub fn write_record(&self, path: &Path) -> Result<(), coldstart_bundle::HotListError> {
        self.recorded().write(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_bundle::{pack, Compression, DirRemote, FetchOptions, PackOptions};

    struct Fixture {
        _dir: tempfile::TempDir,
        bundle: std::path::PathBuf,
        cache: std::path::PathBuf,
        files: Vec<(String, Vec<u8>)>,
    }

    fn fixture() -> Fixture {
        fixture_with(Compression::None)
    }

    fn fixture_with(compression: Compression) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("lib")).unwrap();
        let a: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let b: Vec<u8> = (0..30_000u32).map(|i| (i % 241) as u8).collect();
        std::fs::write(src.join("app"), &a).unwrap();
        std::fs::write(src.join("lib/b"), &b).unwrap();
        let hot = HotList {
            touches: vec![
                Touch { path: "lib/b".into(), offset: 0, length: 1 },
                Touch { path: "app".into(), offset: 40_000, length: 100 },
            ],
            ..HotList::default()
        };
        let bundle = dir.path().join("bundle");
        let opts = PackOptions { chunk_size: 8192, compression, level: 3 };
        pack(&src, &hot, &opts, &bundle).unwrap();
        let cache = dir.path().join("cache");
        Fixture { bundle, cache, files: vec![("app".into(), a), ("lib/b".into(), b)], _dir: dir }
    }

    fn engine(f: &Fixture, strategy: Strategy) -> Arc<Engine> {
        let manifest =
            Manifest::parse(&std::fs::read(f.bundle.join("manifest.json")).unwrap()).unwrap();
        let opts = FetchOptions { backoff: Duration::from_millis(1), ..Default::default() };
        let remote = Arc::new(DirRemote::new(&f.bundle, opts));
        let cache = ChunkCache::open(&f.cache).unwrap();
        Engine::new(manifest, remote, cache, EngineOptions { strategy, ..Default::default() })
    }

    fn read_all(e: &Engine, path: &str) -> Result<Vec<u8>, EngineError> {
        let i = e.manifest().files.iter().position(|x| x.path == path).unwrap();
        let mut out = Vec::new();
        for k in 0..e.manifest().files[i].chunks.len() {
            out.extend_from_slice(&e.read_chunk(i, k)?);
        }
        Ok(out)
    }

    #[test]
    fn every_strategy_reads_the_right_bytes() {
        for s in Strategy::ALL {
            every_strategy_case(s, Compression::None);
        }
    }

    #[test]
    fn every_strategy_reads_the_right_bytes_from_a_compressed_bundle() {
        for s in Strategy::ALL {
            every_strategy_case(s, Compression::Zstd);
        }
    }

    fn every_strategy_case(s: Strategy, compression: Compression) {
        {
            let f = fixture_with(compression);
            let e = engine(&f, s);
            e.start().unwrap();
            for (path, data) in &f.files {
                assert_eq!(&read_all(&e, path).unwrap(), data, "{s} {path}");
            }
            e.shutdown();
            let r = e.report();
            assert_eq!(r.errors, 0);
            match s {
                Strategy::Original => {
                    assert_eq!(r.misses, 0, "{s}: everything was fetched before start");
                    assert_eq!(r.requests, 2, "{s}: one request per file");
                    let total: u64 = e
                        .manifest()
                        .files
                        .iter()
                        .flat_map(|x| &x.chunks)
                        .map(Chunk::stored_len)
                        .sum();
                    assert_eq!(r.bytes_fetched, total, "{s}: each file once, whole");
                    if compression == Compression::Zstd {
                        let plain: usize = f.files.iter().map(|(_, d)| d.len()).sum();
                        assert!(total < plain as u64 / 2, "{s}: compressed on the wire");
                    }
                }
                Strategy::Paged => assert_eq!(r.cache_hits, 0, "{s}: nothing before start"),
                Strategy::Reordered => {
                    assert_eq!(r.hot_chunks, 2);
                    assert!(r.cache_hits >= 2, "{s}: the hot chunks were local");
                }
                _ => {}
            }
        }
    }

    #[test]
    fn the_hot_set_is_one_request_and_a_second_mount_is_all_hits() {
        let f = fixture();
        let e = engine(&f, Strategy::Reordered);
        e.start().unwrap();
        assert_eq!(e.report().requests, 1);
        read_all(&e, "app").unwrap();
        read_all(&e, "lib/b").unwrap();
        let again = engine(&f, Strategy::Paged);
        read_all(&again, "app").unwrap();
        read_all(&again, "lib/b").unwrap();
        let r = again.report();
        assert_eq!((r.requests, r.misses), (0, 0), "the cache persists across mounts");
    }

    #[test]
    fn a_corrupt_blob_is_an_error_not_wrong_bytes() {
        let f = fixture();
        let e = engine(&f, Strategy::Paged);
        let c = &e.manifest().files[0].chunks[1];
        let blob = f.bundle.join(coldstart_bundle::blob_path(&c.sha256));
        let mut bytes = std::fs::read(&blob).unwrap();
        bytes[10] ^= 1;
        std::fs::write(&blob, bytes).unwrap();
        assert!(e.read_chunk(0, 0).is_ok());
        let err = e.read_chunk(0, 1).unwrap_err();
        assert!(err.to_string().contains("SHA-256"), "{err}");
        assert_eq!(e.report().errors, 1);
    }

    #[test]
    fn original_refuses_a_corrupt_whole_file_and_skips_cached_files() {
        let f = fixture();
        let e = engine(&f, Strategy::Original);
        let sha = e.manifest().files[2].sha256.clone().unwrap();
        let blob = f.bundle.join(coldstart_bundle::file_blob_path(&sha));
        let good = std::fs::read(&blob).unwrap();
        let mut bad = good.clone();
        bad[20_000] ^= 1;
        std::fs::write(&blob, bad).unwrap();
        let err = e.start().unwrap_err();
        assert!(err.to_string().contains("lib/b"), "{err}");
        assert!(err.to_string().contains("SHA-256"), "{err}");
        std::fs::write(&blob, good).unwrap();
        // `app` is cached now: only lib/b is fetched again.
        let again = engine(&f, Strategy::Original);
        again.start().unwrap();
        assert_eq!(again.report().requests, 1);
        assert_eq!(read_all(&again, "lib/b").unwrap(), f.files[1].1);
    }

    #[test]
    fn recording_lists_first_touches_in_order() {
        let f = fixture();
        let e = engine(&f, Strategy::Paged);
        e.read_chunk(2, 2).unwrap();
        e.read_chunk(0, 0).unwrap();
        e.read_chunk(2, 2).unwrap();
        let rec = e.recorded();
        let got: Vec<(&str, u64)> =
            rec.touches.iter().map(|t| (t.path.as_str(), t.offset)).collect();
        assert_eq!(got, vec![("lib/b", 16384), ("app", 0)]);
    }

    /// An engine made the way a mount of a hot-set strategy makes it: from the start object.
    fn engine_from_start(f: &Fixture, strategy: Strategy) -> Result<Arc<Engine>, StartFailure> {
        let opts = FetchOptions { backoff: Duration::from_millis(1), ..Default::default() };
        let remote: Arc<dyn Remote> = Arc::new(DirRemote::new(&f.bundle, opts));
        let fetch = StartFetch::begin(remote.clone(), false).unwrap();
        let manifest = fetch.manifest()?.manifest;
        let cache = ChunkCache::open(&f.cache).unwrap();
        let e =
            Engine::new(manifest, remote, cache, EngineOptions { strategy, ..Default::default() });
        e.start_from(fetch).unwrap();
        Ok(e)
    }

    #[test]
    fn the_start_object_brings_the_manifest_and_the_hot_set_in_one_request() {
        for compression in [Compression::None, Compression::Zstd] {
            for s in [Strategy::Reordered, Strategy::ReorderedPaged, Strategy::Stream] {
                let f = fixture_with(compression);
                let e = engine_from_start(&f, s).unwrap();
                if s == Strategy::Reordered {
                    let r = e.report();
                    assert_eq!((r.requests, r.hot_chunks), (1, 2), "{s}: one request, both chunks");
                }
                for (path, data) in &f.files {
                    assert_eq!(&read_all(&e, path).unwrap(), data, "{s} {path}");
                }
                e.shutdown();
                let r = e.report();
                assert_eq!((r.errors, r.hot_chunks, r.failed_attempts), (0, 2, 0), "{s}");
            }
        }
    }

    #[test]
    fn a_sampled_start_object_hands_over_the_link_and_the_hot_chunks_it_brought() {
        let f = fixture();
        let opts = FetchOptions { backoff: Duration::from_millis(1), ..Default::default() };
        let remote: Arc<dyn Remote> = Arc::new(DirRemote::new(&f.bundle, opts));
        let fetch = StartFetch::begin(remote.clone(), true).unwrap();
        let head = fetch.manifest().unwrap();
        let p = head.sample.unwrap();
        assert!(p.link.bandwidth_estimated && p.link.latency_estimated);
        // The whole object arrived at once: both hot chunks, verified.
        assert_eq!(p.chunks.len(), 2);
        assert!(p.chunks.iter().all(|(c, d)| coldstart_bundle::verify_chunk(c, d)));
        // As a mount does: keep them, then let the engine take the rest of the request.
        let cache = ChunkCache::open(&f.cache).unwrap();
        for (c, d) in &p.chunks {
            cache.put(&c.sha256, d).unwrap();
        }
        let opts = EngineOptions { strategy: Strategy::ReorderedPaged, ..Default::default() };
        let e = Engine::new(head.manifest, remote, cache, opts);
        e.start_from(fetch).unwrap();
        for (path, data) in &f.files {
            assert_eq!(&read_all(&e, path).unwrap(), data, "{path}");
        }
        e.shutdown();
        let r = e.report();
        assert_eq!((r.errors, r.failed_attempts, r.hot_chunks), (0, 0, 0), "{r:?}");
    }

    #[test]
    fn a_warm_cache_stops_the_start_object_after_its_manifest() {
        let f = fixture();
        let e = engine_from_start(&f, Strategy::Reordered).unwrap();
        e.shutdown();
        let again = engine_from_start(&f, Strategy::Reordered).unwrap();
        again.shutdown();
        let r = again.report();
        assert_eq!((r.requests, r.hot_chunks, r.failed_attempts), (1, 0, 0));
    }

    /// The start object's parts: (header, manifest end).
    fn start_parts(f: &Fixture) -> (StartHeader, usize) {
        let o = std::fs::read(f.bundle.join(START_OBJECT)).unwrap();
        let h = StartHeader::parse(o[..HEADER_LEN].try_into().unwrap()).unwrap();
        let end = h.hot_offset() as usize;
        (h, end)
    }

    #[test]
    fn a_damaged_or_cut_start_object_falls_back_or_refetches_never_wrong_bytes() {
        let path = |f: &Fixture| f.bundle.join(START_OBJECT);
        // Before the manifest's end: fall back to manifest.json.
        for (what, damage) in [
            ("magic", &(|o: &mut Vec<u8>, _| o[0] ^= 1) as &dyn Fn(&mut Vec<u8>, usize)),
            ("version", &|o: &mut Vec<u8>, _| o[8] = 7),
            ("manifest byte", &|o: &mut Vec<u8>, end| o[end - 5] ^= 0x10),
            ("cut in the manifest", &|o: &mut Vec<u8>, end| o.truncate(end - 1)),
            ("cut in the header", &|o: &mut Vec<u8>, _| o.truncate(10)),
            ("empty", &|o: &mut Vec<u8>, _| o.clear()),
        ] {
            let f = fixture();
            let (_, end) = start_parts(&f);
            let mut o = std::fs::read(path(&f)).unwrap();
            damage(&mut o, end);
            std::fs::write(path(&f), o).unwrap();
            match engine_from_start(&f, Strategy::Reordered) {
                Err(StartFailure::Fallback(why)) => assert!(!why.is_empty(), "{what}"),
                Err(other) => panic!("{what}: {other:?}"),
                Ok(_) => panic!("{what}: used a damaged start object"),
            }
        }
        let f = fixture();
        std::fs::remove_file(path(&f)).unwrap();
        assert!(matches!(engine_from_start(&f, Strategy::Stream), Err(StartFailure::Fallback(_))));
        // In the hot part: the hot stream gives up after its retries, the reads fetch the
        // chunks' own blobs.
        for cut in [false, true] {
            let f = fixture();
            let (h, _) = start_parts(&f);
            let mut o = std::fs::read(path(&f)).unwrap();
            if cut {
                o.truncate(h.hot_offset() as usize + 100);
            } else {
                let at = h.total_len() as usize - 3;
                o[at] ^= 0x40;
            }
            std::fs::write(path(&f), o).unwrap();
            let e = engine_from_start(&f, Strategy::ReorderedPaged).unwrap();
            for (p, data) in &f.files {
                assert_eq!(&read_all(&e, p).unwrap(), data, "cut {cut}: {p}");
            }
            e.shutdown();
            let r = e.report();
            assert_eq!(r.errors, 0);
            assert!(r.failed_attempts > 0 && r.background_error.is_some(), "cut {cut}: {r:?}");
        }
    }

    #[test]
    fn an_invalid_manifest_with_a_good_digest_is_refused_not_fallen_back_from() {
        let f = fixture();
        let json = std::fs::read_to_string(f.bundle.join("manifest.json")).unwrap();
        let bad = json.replacen("\"app\"", "\"../app\"", 1);
        assert_ne!(bad, json);
        let hot = std::fs::read(f.bundle.join("blobs/hot")).unwrap();
        let o = coldstart_bundle::start::encode(bad.as_bytes(), &hot);
        std::fs::write(f.bundle.join(START_OBJECT), o).unwrap();
        match engine_from_start(&f, Strategy::Stream) {
            Err(StartFailure::Invalid(e)) => assert!(e.to_string().contains(".."), "{e}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    /// A bundle on disk whose chunk blobs arrive slowly, 256 bytes at a time.
    struct Trickle {
        inner: DirRemote,
        started: AtomicBool,
        aborted: AtomicBool,
    }

    impl Remote for Trickle {
        fn fetch(
            &self,
            path: &str,
            range: Option<(u64, u64)>,
            sink: &mut dyn FnMut(&[u8]) -> bool,
        ) -> Result<u64, FetchError> {
            if !path.starts_with("blobs/sha256/") {
                return self.inner.fetch(path, range, sink);
            }
            let body = coldstart_bundle::remote::get(&self.inner, path, range)?;
            self.started.store(true, Ordering::SeqCst);
            for piece in body.chunks(256) {
                std::thread::sleep(Duration::from_millis(5));
                if !sink(piece) {
                    self.aborted.store(true, Ordering::SeqCst);
                    return Err(FetchError::Aborted { url: path.into() });
                }
            }
            Ok(body.len() as u64)
        }
        fn options(&self) -> &FetchOptions {
            self.inner.options()
        }
        fn stats(&self) -> &coldstart_bundle::FetchStats {
            self.inner.stats()
        }
        fn describe(&self, path: &str) -> String {
            self.inner.describe(path)
        }
    }

    #[test]
    fn unmounting_stops_a_background_transfer_midway() {
        let f = fixture();
        let manifest =
            Manifest::parse(&std::fs::read(f.bundle.join("manifest.json")).unwrap()).unwrap();
        let remote = Arc::new(Trickle {
            inner: DirRemote::new(&f.bundle, FetchOptions::default()),
            started: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
        });
        let cache = ChunkCache::open(&f.cache).unwrap();
        let opts = EngineOptions { strategy: Strategy::Stream, ..Default::default() };
        let e = Engine::new(manifest, remote.clone(), cache, opts);
        e.start().unwrap();
        // Background work starts once no miss has been waiting for 100 ms.
        let t = Instant::now();
        while !remote.started.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(remote.started.load(Ordering::SeqCst), "background work began");
        e.shutdown();
        assert!(remote.aborted.load(Ordering::SeqCst), "the transfer in flight was stopped");
        let r = e.report();
        assert_eq!((r.failed_attempts, r.errors), (0, 0), "stopping is not a failure: {r:?}");
        assert_eq!(r.background_error, None);
        // Nothing half-received was kept: every cached chunk reads back whole.
        let again = engine(&f, Strategy::Paged);
        for (path, data) in &f.files {
            assert_eq!(&read_all(&again, path).unwrap(), data, "{path}");
        }
    }
}
