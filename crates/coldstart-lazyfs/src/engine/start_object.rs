//! The start object ([`coldstart_bundle::start`]): one `GET` brings the manifest and then the
//! hot set. The mount waits only for the manifest (with `--strategy auto` and no link given,
//! also for enough of the hot part to measure the link on), makes its engine from it and hands
//! the request over; the engine takes the hot chunks as they arrive while the program runs, and
//! after a failure resumes with a Range from the first chunk not yet received.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use coldstart_bundle::remote::POLL;
use coldstart_bundle::start::{StartHeader, HEADER_LEN, START_OBJECT};
use coldstart_bundle::{decode_chunk, Chunk, FetchError, Manifest, ManifestError, Remote, Span};

use super::stream::HotPlan;
use super::{Engine, EngineError};
use crate::model::{self, LinkEstimate, Probe, PROBE_ENOUGH};
use crate::strategy::Strategy;

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
    /// `manifest.json.zst` or `manifest.json` instead, then the hot part with a Range.
    Fallback(String),
    /// Its manifest matched its digest but is not a valid manifest: the bundle is rejected.
    Invalid(ManifestError),
    /// The origin refused the request as it would refuse any ([`FetchError::refuses_origin`]:
    /// its certificate, its proxy): no other file is asked for.
    Refused(FetchError),
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
    /// The manifest the object carries.
    pub manifest: Manifest,
    /// Bytes of the object before its hot part: the header, the stored manifest and the
    /// zeros after it.
    pub manifest_bytes: u64,
    /// The SHA-256 of `manifest.json` (the header's, checked against the decoded manifest).
    pub manifest_sha256: [u8; 32],
    /// With [`StartFetch::begin`]'s `sample`: the link as the object's own arrival measured
    /// it, and the hot chunks that arrived meanwhile, verified.
    pub sample: Option<Probe>,
}

/// A link sample ends once this much of the object has arrived after its first bytes and
/// [`PROBE_ENOUGH`] has passed ...
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
        let info = StartHead {
            manifest,
            manifest_bytes: h.hot_offset(),
            manifest_sha256: h.manifest_sha256,
            sample: probe,
        };
        if mtx.take().expect("sent once").send(Ok(info)).is_err() {
            return false;
        }
        // The mount makes an engine and plans the hot set; or gives up (the sender dropped).
        let Ok(g) = erx.recv() else { return false };
        let rest = head.split_off(from);
        let (engine, plan) = got.insert(g);
        if let Some((t1, _)) = first {
            engine.note_start_round_trip(t1 - t0);
        }
        // The hot chunks the sample took arrived in the hot request too.
        engine.counters.hot_request_bytes.fetch_add((from - end) as u64, Ordering::Relaxed);
        engine.feed_hot(plan.as_ref(), cursor, &rest)
    };
    // Every byte of the object so far: no more than its header says is taken.
    let mut taken = 0u64;
    let result = remote.fetch(START_OBJECT, Span::Whole { max: u64::MAX }, &mut |bytes| {
        taken += bytes.len() as u64;
        if header.as_ref().is_some_and(|h| taken > h.total_len()) {
            if failure.is_none() && got.is_none() {
                let why = "it is longer than its header says".to_owned();
                failure = Some(StartFailure::Fallback(why));
            }
            return false;
        }
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
            let enough = after >= SAMPLE_BYTES && t1.elapsed() >= PROBE_ENOUGH;
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
        let why = failure.unwrap_or_else(|| match result {
            Err(e) if e.refuses_origin() => StartFailure::Refused(e),
            Err(e) => StartFailure::Fallback(e.to_string()),
            Ok(_) => StartFailure::Fallback("it ended before its manifest did".into()),
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
    // The manifest, and the few zeros after it, up to the hot part.
    if head.len() < h.hot_offset() as usize {
        return Ok(None);
    }
    let json = h
        .decode_manifest(&head[HEADER_LEN..h.manifest_end() as usize])
        .map_err(|e| StartFailure::Fallback(e.to_string()))?;
    let manifest = Manifest::parse(&json).map_err(StartFailure::Invalid)?;
    use coldstart_bundle::start::StartError;
    if manifest.hot.size != h.hot_len {
        let e = StartError::HotLength { got: h.hot_len, want: manifest.hot.size };
        return Err(StartFailure::Fallback(e.to_string()));
    }
    if manifest.hot.offset != h.hot_offset() {
        let e = StartError::HotOffset { got: h.hot_offset(), want: manifest.hot.offset };
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
) -> (Probe, usize, usize) {
    let bps = model::bandwidth(after as u64, t1.elapsed().as_secs_f64());
    let latency = ((t1 - t0).as_secs_f64() - n1 as f64 / bps).max(0.0);
    // One that fails its check is left to the hot stream's end: readers fetch it then.
    let (chunks, boundary, k) = model::whole_hot_chunks(manifest, hot);
    (Probe { link: LinkEstimate::measured(bps, latency), chunks }, boundary, k)
}

impl Engine {
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
            while hot.running && !self.cancelled() {
                hot = self.hot_cv.wait_timeout(hot, POLL).unwrap().0;
            }
            drop(hot);
            let failed = self.counters.background_error.lock().unwrap().is_some();
            if self.cancelled() {
                result = Err(EngineError::Cancelled);
            } else if failed {
                // As after a failed hot stream: each missing hot piece alone, before start.
                result = self.fall_back_hot();
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
        self.counters.hot_request_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
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
                    .stream_chunks(START_OBJECT, &shifted, (cur.idx, plan.last), true, |c, data| {
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
}

#[cfg(test)]
mod tests {
    use coldstart_bundle::{ChunkCache, Compression, DirRemote};

    use super::*;
    use crate::engine::EngineOptions;
    use crate::testing::{fixture, fixture_with, quick, read_back, Fixture};

    /// An engine made the way a mount of a hot-set strategy makes it: from the start object.
    fn engine_from_start(f: &Fixture, strategy: Strategy) -> Result<Arc<Engine>, StartFailure> {
        let remote: Arc<dyn Remote> = Arc::new(DirRemote::new(&f.bundle, quick()));
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
                let r = read_back(&e, &f, s.name());
                assert_eq!((r.errors, r.hot_chunks, r.failed_attempts), (0, 2, 0), "{s}");
            }
        }
    }

    #[test]
    fn a_sampled_start_object_hands_over_the_link_and_the_hot_chunks_it_brought() {
        let f = fixture();
        let remote: Arc<dyn Remote> = Arc::new(DirRemote::new(&f.bundle, quick()));
        let fetch = StartFetch::begin(remote.clone(), true).unwrap();
        let head = fetch.manifest().unwrap();
        let before_hot = head.manifest_bytes;
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
        let r = read_back(&e, &f, "sampled");
        assert_eq!((r.errors, r.failed_attempts, r.hot_chunks), (0, 0, 0), "{r:?}");
        // Every byte of the object is the manifest's or the hot request's, the sampled hot
        // chunks too: none is counted as fetched besides them (the miss history's other bytes).
        e.shutdown();
        let object = std::fs::metadata(f.bundle.join(START_OBJECT)).unwrap().len();
        assert_eq!(before_hot + e.report().hot_request_bytes, object);
    }

    #[test]
    fn a_read_a_little_ahead_of_the_start_objects_hot_part_waits_for_it() {
        use crate::testing::Slow;
        use coldstart_bundle::{pack, HotList, PackOptions, Touch};
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let data: Vec<u8> = (0..64 * 4096u32).map(|i| (i % 247) as u8).collect();
        std::fs::write(src.join("f"), &data).unwrap();
        // The whole file hot, in file order, in pieces of 16 KiB.
        let touches = vec![Touch { path: "f".into(), offset: 0, length: 64 * 4096 }];
        let bundle = dir.path().join("bundle");
        let opts = PackOptions { chunk_size: 16384, ..PackOptions::default() };
        pack(&src, &HotList { touches, ..HotList::default() }, &opts, &bundle).unwrap();
        // The start object after 200 ms, at 256 KiB/s: a request of a piece's own is two
        // round trips and its bytes, about 120 KiB of the stream.
        let remote: Arc<dyn Remote> = Arc::new(Slow {
            inner: DirRemote::new(&bundle, quick()),
            latency: Duration::from_millis(200),
            bytes_per_second: 256 << 10,
            piece: 4096,
            ..Slow::new(&bundle, |path| path == START_OBJECT)
        });
        let fetch = StartFetch::begin(remote.clone(), false).unwrap();
        let manifest = fetch.manifest().unwrap().manifest;
        let cache = ChunkCache::open(&dir.path().join("cache")).unwrap();
        let opts = EngineOptions { strategy: Strategy::ReorderedPaged, ..Default::default() };
        let e = Engine::new(manifest, remote, cache, opts);
        e.start_from(fetch).unwrap();
        assert_eq!(&e.read(0, 0, 4096).unwrap()[..], &data[..4096]);
        std::thread::sleep(Duration::from_millis(60));
        // About 80 KiB ahead of the stream: nearer than a request of its own, waited for.
        let at = 24 * 4096;
        assert_eq!(&e.read(0, at as u64, 4096).unwrap()[..], &data[at..at + 4096]);
        assert_eq!(e.report().requests, 1, "{:?}", e.report());
        // The last page, about 150 KiB ahead: fetched alone.
        let at = 63 * 4096;
        assert_eq!(&e.read(0, at as u64, 4096).unwrap()[..], &data[at..]);
        assert_eq!(e.report().requests, 2, "{:?}", e.report());
        e.shutdown();
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
        let end = h.manifest_end() as usize;
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
        // In the hot part: the hot stream gives up after its retries, the reads fetch their
        // pieces alone; a piece cut off or damaged is refused, never used.
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
            // A damaged hot piece is stored nowhere else: its reads fail with EIO, the rest
            // read back right.
            let flipped = h.total_len() - 3 - h.hot_offset();
            let damaged: Vec<_> = e
                .manifest()
                .hot_chunks()
                .into_iter()
                .filter(|(at, c)| {
                    let end = at + c.stored_len();
                    if cut {
                        end > 100
                    } else {
                        *at <= flipped && flipped < end
                    }
                })
                .map(|(_, c)| c.sha256.clone())
                .collect();
            assert!(!damaged.is_empty());
            for (i, (path, data)) in f.files.iter().enumerate() {
                let file = e.manifest().files.iter().position(|x| &x.path == path).unwrap();
                let entry = &e.manifest().files[file];
                for (k, c) in entry.chunks.iter().enumerate() {
                    let got = e.read_chunk(file, k);
                    if damaged.contains(&c.sha256) {
                        assert!(got.is_err(), "cut {cut}: file {i} chunk {k} read");
                    } else {
                        let want = &data[c.offset as usize..(c.offset + c.length) as usize];
                        assert_eq!(&got.unwrap()[..], want, "cut {cut}: file {i} chunk {k}");
                    }
                }
            }
            let r = e.report();
            assert!(r.failed_attempts > 0 && r.background_error.is_some(), "cut {cut}: {r:?}");
        }
    }

    #[test]
    fn an_invalid_manifest_with_a_good_digest_is_refused_not_fallen_back_from() {
        let f = fixture();
        let json = std::fs::read_to_string(f.bundle.join("manifest.json")).unwrap();
        let bad = json.replacen("\"app\"", "\"../app\"", 1);
        assert_ne!(bad, json);
        let m = Manifest::parse(json.as_bytes()).unwrap();
        let old = std::fs::read(f.bundle.join(START_OBJECT)).unwrap();
        let hot = &old[m.hot.offset as usize..];
        let o = coldstart_bundle::start::encode(bad.as_bytes(), hot, m.hot.offset);
        std::fs::write(f.bundle.join(START_OBJECT), o).unwrap();
        match engine_from_start(&f, Strategy::Stream) {
            Err(StartFailure::Invalid(e)) => assert!(e.to_string().contains(".."), "{e}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}
