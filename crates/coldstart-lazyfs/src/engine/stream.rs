//! The hot stream and the background stream: the hot set in one request, each chunk stored
//! as soon as it has arrived and been verified while readers wait on exactly the chunks still
//! to come; then, for `stream`, the rest of the bundle behind the program's own misses.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use coldstart_bundle::remote::with_retries;
use coldstart_bundle::start::START_OBJECT;
use coldstart_bundle::{decode_chunk, Chunk, FetchError, Sha256Hex, Span};

use super::{Engine, EngineError};

/// How long no miss must have been waiting before background work starts a fetch.
const QUIET: Duration = Duration::from_millis(100);

/// The hot chunks with their offsets in the hot part, and the first and last of them not
/// cached when the plan was made.
pub(super) struct HotPlan {
    pub(super) chunks: Vec<(u64, Chunk)>,
    pub(super) first: usize,
    pub(super) last: usize,
}

/// What the hot stream has still to bring; readers of those chunks wait for it, unless it is
/// so far behind that fetching the chunk alone is faster ([`HotState::behind`]).
#[derive(Default)]
pub(super) struct HotState {
    /// Hashes the hot stream will still bring, each with where it ends in the hot part.
    pub(super) pending: HashMap<Sha256Hex, u64>,
    pub(super) running: bool,
    /// Where in the hot part the stream is: the end of the last chunk received.
    received: u64,
    /// When the stream was planned (its request sent at the latest then) ...
    planned: Option<Instant>,
    /// ... and when its first chunk arrived, with `received` then.
    first: Option<(Instant, u64)>,
    /// The link as the stream measured it, kept when the stream ends ([`HotState::link`]).
    measured: Option<(f64, f64)>,
    /// For a hot part that follows the manifest in the start object's response: the time
    /// from that request to its first bytes, a round trip. The stream is planned once the
    /// manifest has arrived, its first chunk right behind it: the time from `planned` to
    /// `first` is no round trip then.
    round_trip: Option<Duration>,
}

impl HotState {
    /// The rate the hot stream has come at so far, in bytes per second (once it has come for
    /// 50 ms).
    pub(super) fn rate(&self) -> Option<f64> {
        let (t0, b0) = self.first?;
        let elapsed = t0.elapsed().as_secs_f64();
        (elapsed >= 0.05 && self.received > b0).then(|| (self.received - b0) as f64 / elapsed)
    }

    /// The link as the hot stream saw it: the latency (the time from its request to its
    /// first chunk, less that chunk's bytes at the rate: one round trip, in seconds) and the
    /// rate (bytes per second); after the stream ended, what it last measured.
    pub(super) fn link(&self) -> Option<(f64, f64)> {
        if self.measured.is_some() {
            return self.measured;
        }
        let (planned, (t0, b0), rate) = (self.planned?, self.first?, self.rate()?);
        let to_first = t0.duration_since(planned).as_secs_f64();
        Some(((to_first - b0 as f64 / rate).max(0.0), rate))
    }

    /// Whether a reader of the pending chunk ending at `end` (`len` bytes stored) should
    /// fetch it itself instead of waiting: the stream, at the rate it has come so far, would
    /// take longer to reach it than a request of its own, counted as twice `latency` (the
    /// shortest demand fetch so far, or the stream's own round trip: the start object's time
    /// to its first bytes, else the time from the stream's request to its first chunk: each
    /// at least one round trip) and the chunk's bytes. A held-out workload reads hot chunks
    /// in another order than the one they were recorded in: without this, a read of a chunk
    /// far back in the stream waits for everything before it (seconds on a slow link).
    fn behind(&self, end: u64, len: u64, latency: Option<Duration>) -> bool {
        let (Some(planned), Some((t0, _)), Some(rate)) = (self.planned, self.first, self.rate())
        else {
            return false;
        };
        let own = self.round_trip.unwrap_or_else(|| t0.duration_since(planned));
        let latency = latency.map_or(own, |l| l.min(own)).as_secs_f64();
        let ahead = end.saturating_sub(self.received) as f64;
        ahead > 2.0 * latency * rate + len as f64
    }
}

impl Engine {
    /// The hot chunks with their offsets in the hot part, and the first and last index not
    /// yet in the cache; marks those as pending.
    pub(super) fn plan_hot(&self) -> Option<HotPlan> {
        let chunks: Vec<(u64, Chunk)> =
            self.manifest.hot_chunks().into_iter().map(|(o, c)| (o, c.clone())).collect();
        let missing: Vec<usize> =
            (0..chunks.len()).filter(|&i| !self.cache.contains(&chunks[i].1.sha256)).collect();
        let (&first, &last) = (missing.first()?, missing.last()?);
        let mut state = self.hot.lock().unwrap();
        state.running = true;
        state.pending = missing
            .iter()
            .map(|&i| (chunks[i].1.sha256.clone(), chunks[i].0 + chunks[i].1.stored_len()))
            .collect();
        state.planned = Some(Instant::now());
        Some(HotPlan { chunks, first, last })
    }

    /// Streams the hot part of the start object in one Range request (resuming with a Range
    /// after a failure), storing each chunk as soon as its bytes have arrived and been
    /// verified: for a mount whose manifest did not come from the start object.
    pub(super) fn load_hot(&self, plan: Option<HotPlan>) -> Result<(), EngineError> {
        let result = match plan {
            Some(plan) => self.load_hot_inner(plan),
            None => Ok(()),
        };
        // The caller decides where a failure goes (the mount's error, or the report's).
        self.end_hot(Ok(()));
        result.map_err(|e| {
            if e.is_cancelled() {
                EngineError::Cancelled
            } else {
                EngineError::Fetch(e.to_string())
            }
        })
    }

    fn load_hot_inner(&self, plan: HotPlan) -> Result<(), FetchError> {
        let HotPlan { chunks, first, last } = plan;
        let base = self.manifest.hot.offset;
        let shifted: Vec<(u64, Chunk)> = chunks.into_iter().map(|(o, c)| (o + base, c)).collect();
        self.stream_chunks(START_OBJECT, &shifted, (first, last), true, |c, data| {
            self.hot_done(c, data)
        })
    }

    /// A hot chunk has arrived, verified: into the cache, and readers waiting on it go on.
    pub(super) fn hot_done(&self, c: &Chunk, data: &[u8]) {
        let _ = self.cache.put(&c.sha256, data);
        self.counters.hot_chunks.fetch_add(1, Ordering::Relaxed);
        let mut state = self.hot.lock().unwrap();
        if let Some(end) = state.pending.remove(&c.sha256) {
            state.received = state.received.max(end);
            if state.first.is_none() {
                state.first = Some((Instant::now(), state.received));
            }
        }
        self.hot_cv.notify_all();
    }

    /// The start object's request took `took` to its first bytes: the hot stream's round
    /// trip, for [`HotState::behind`].
    pub(super) fn note_start_round_trip(&self, took: Duration) {
        self.hot.lock().unwrap().round_trip = Some(took);
    }

    /// Whether a reader of hot chunk `c` should fetch it itself rather than wait for the hot
    /// stream ([`HotState::behind`]).
    pub(super) fn hot_is_behind(&self, hot: &HotState, c: &Chunk) -> bool {
        let Some(&end) = hot.pending.get(&c.sha256) else { return false };
        hot.behind(end, c.stored_len(), *self.fastest_miss.lock().unwrap())
    }

    /// The hot stream is over: readers still waiting on a hot chunk fetch it themselves.
    pub(super) fn end_hot(&self, result: Result<(), String>) {
        if let Err(e) = result {
            *self.counters.background_error.lock().unwrap() = Some(e);
        }
        let mut hot = self.hot.lock().unwrap();
        if hot.running {
            hot.measured = hot.link();
        }
        hot.running = false;
        hot.pending.clear();
        self.hot_cv.notify_all();
    }

    /// Reads `chunks[first..=last]` (each with its offset in `blob`, stored back to back) in
    /// one request, handing each decoded and verified chunk to `done` as soon as its bytes
    /// have arrived; after a failure, resumes with a Range from the first chunk not yet
    /// received. `hot_request`: its bytes are the hot request's (the report's
    /// `hot_request_bytes`), not what a miss brought.
    pub(super) fn stream_chunks(
        &self,
        blob: &str,
        chunks: &[(u64, Chunk)],
        (first, last): (usize, usize),
        hot_request: bool,
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
            let result = self.remote.fetch(blob, Span::Range(start, end), &mut |bytes| {
                if self.stop.load(Ordering::Relaxed) {
                    return false;
                }
                if hot_request {
                    let n = bytes.len() as u64;
                    self.counters.hot_request_bytes.fetch_add(n, Ordering::Relaxed);
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
    pub(super) fn stream_rest(&self) {
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
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use coldstart_bundle::{ChunkCache, Manifest};

    use super::*;
    use crate::engine::EngineOptions;
    use crate::strategy::Strategy;
    use crate::testing::{engine, fixture, read_back, Slow};

    #[test]
    fn unmounting_stops_a_background_transfer_midway() {
        let f = fixture();
        let manifest =
            Manifest::parse(&std::fs::read(f.bundle.join("manifest.json")).unwrap()).unwrap();
        // Cold objects arrive 256 bytes every 5 ms.
        let remote = Arc::new(Slow {
            bytes_per_second: 51_200,
            piece: 256,
            ..Slow::new(&f.bundle, |path| path.starts_with("blobs/cold/"))
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
        read_back(&engine(&f, Strategy::Paged), &f, "again");
    }

    #[test]
    fn a_read_far_behind_the_hot_stream_fetches_its_chunk_instead_of_waiting() {
        use coldstart_bundle::{pack, DirRemote, HotList, PackOptions, Touch};
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let data: Vec<u8> = (0..64 * 4096u32).map(|i| (i % 249) as u8).collect();
        std::fs::write(src.join("f"), &data).unwrap();
        // Every page hot, one piece each (chunks of 4 KiB), in file order.
        let hot = HotList {
            touches: (0..64)
                .map(|p| Touch { path: "f".into(), offset: p * 4096, length: 4096 })
                .collect(),
            ..HotList::default()
        };
        let bundle = dir.path().join("bundle");
        pack(&src, &hot, &PackOptions { chunk_size: 4096, ..PackOptions::default() }, &bundle)
            .unwrap();
        let manifest =
            Manifest::parse(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
        // The start object comes at 64 KiB/s (4 s in all), whatever the Range; nothing else
        // is slow (every piece is hot here, so a read's own fetch is a Range of it too: the
        // slow remote throttles each request on its own).
        let remote = Arc::new(Slow {
            inner: DirRemote::new(&bundle, crate::testing::quick()),
            bytes_per_second: 65_536,
            piece: 4096,
            latency: Duration::from_millis(20),
            ..Slow::new(&bundle, |path| path == START_OBJECT)
        });
        let cache = ChunkCache::open(&dir.path().join("cache")).unwrap();
        let opts = EngineOptions { strategy: Strategy::ReorderedPaged, ..Default::default() };
        let e = Engine::new(manifest, remote, cache, opts);
        e.start().unwrap();
        // The front of the stream: waited for, no request of its own.
        assert_eq!(&e.read(0, 0, 4096).unwrap()[..], &data[..4096]);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(e.report().requests, 1);
        // The last page, about 3.5 s of stream away: fetched alone.
        let t = Instant::now();
        assert_eq!(&e.read(0, 63 * 4096, 4096).unwrap()[..], &data[63 * 4096..]);
        assert!(t.elapsed() < Duration::from_secs(2), "waited {:?}", t.elapsed());
        assert_eq!(e.report().requests, 2);
        e.shutdown();
    }
}
