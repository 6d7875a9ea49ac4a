//! A miss brings the cold pieces after it, as far as the paper's Eq. 3 says they pay, piece
//! by piece.
//!
//! A program that misses outside the hot set misses again soon, sometimes just after: code
//! the profiled workload never ran may lie together in the file (a source file's functions, a
//! library's tables). One piece more costs its bytes on the link, `t = stored / rate`; if
//! the program reads it, it saves a round trip, `l`. With `p` the chance that the program
//! reads the piece `k` places after a miss, the piece pays when `p (l + t) > t`. `p` is
//! counted as the mount goes, for each place `k` apart: pieces fetched at `k` and how many
//! of them the program read (starting from one of two). Of the [`MAX_AHEAD`] places after
//! the missed piece, the window leaves out those cached, in flight or still coming with the
//! hot stream, and takes the others while the next one pays. Each run of pieces stored one
//! after the other in one object (a file's cold pieces are, in its cold object) is one
//! `Range` of it, the runs at once, so the window costs one round trip whatever its length. The link's latency and
//! rate are the hot stream's (`HotState::link`), the round trip the shortest miss's once one
//! has been measured; without a hot stream that has measured the link (`paged`, a hot set
//! that took under 50 ms) a miss fetches its own piece alone, as before.
//!
//! The program waits only for its own piece, the first of its response; the others follow on
//! the same connection or another, and a reader of one of them waits for it like any shared
//! fetch.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use coldstart_bundle::{Chunk, Sha256Hex};

use super::read::Flight;
use super::{Engine, EngineError};

/// The most pieces a miss brings after its own.
pub(super) const MAX_AHEAD: usize = 16;

/// What the windows have brought, and what the program read of it.
pub(super) struct Ahead {
    /// Each piece's place in the window that brought it (1 to [`MAX_AHEAD`]), until the
    /// program reads it; 0 otherwise. Indexed like `Engine::verified`.
    place: Vec<AtomicU8>,
    /// Pieces brought at each place, and those of them the program read.
    fetched: [AtomicU64; MAX_AHEAD],
    used: [AtomicU64; MAX_AHEAD],
    /// Requests under way for runs without a missed piece.
    runs: AtomicUsize,
}

impl Ahead {
    pub(super) fn new(manifest: &coldstart_bundle::Manifest) -> Ahead {
        let pieces: usize = manifest.files.iter().map(|e| e.chunks.len()).sum();
        Ahead {
            place: (0..pieces).map(|_| AtomicU8::new(0)).collect(),
            fetched: Default::default(),
            used: Default::default(),
            runs: AtomicUsize::new(0),
        }
    }

    /// The chance that the program reads a piece brought at `place` (1-based): the share
    /// read so far, starting from one of two.
    fn chance(&self, place: usize) -> f64 {
        let fetched = self.fetched[place - 1].load(Ordering::Relaxed) as f64;
        let used = self.used[place - 1].load(Ordering::Relaxed) as f64;
        (used + 1.0) / (fetched + 2.0)
    }

    /// Pieces brought ahead of a miss, and those the program read.
    pub(super) fn counts(&self) -> (u64, u64) {
        let sum = |a: &[AtomicU64; MAX_AHEAD]| a.iter().map(|x| x.load(Ordering::Relaxed)).sum();
        (sum(&self.fetched), sum(&self.used))
    }
}

/// Whether one more piece of `stored` bytes, read with chance `p`, pays on a link of
/// `latency` seconds and `rate` bytes per second: Eq. 3, `p (l + t) > t`.
pub(super) fn pays(p: f64, stored: u64, latency: f64, rate: f64) -> bool {
    let t = stored as f64 / rate;
    p * (latency + t) > t
}

impl Engine {
    /// The program read piece `global` (first read in this mount): if a window brought it,
    /// its place counts as read.
    pub(super) fn note_read(&self, global: usize) {
        let place = self.ahead.place[global].swap(0, Ordering::Relaxed) as usize;
        if place > 0 {
            self.ahead.used[place - 1].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A demand fetch of `stored` bytes took `took` to bring them: the shortest so far
    /// bounds how long a read waits for the hot stream, and its time less its bytes at the
    /// hot stream's rate is a round trip.
    pub(super) fn note_miss_time(&self, took: Duration, stored: u64) {
        let mut fastest = self.fastest_miss.lock().unwrap();
        *fastest = Some(fastest.map_or(took, |f| f.min(took)));
        drop(fastest);
        if let Some((_, rate)) = self.hot.lock().unwrap().link() {
            let rt = (took.as_secs_f64() - stored as f64 / rate).max(0.0);
            let mut best = self.round_trip.lock().unwrap();
            *best = Some(best.map_or(rt, |b| b.min(rt)));
        }
    }

    /// The pieces after piece `index` of file `file` that a miss of it should bring: each of
    /// the next [`MAX_AHEAD`] places that is not cached, in flight or coming with the hot
    /// stream, while the next such piece pays.
    fn window(&self, file: usize, index: usize) -> Vec<usize> {
        let Some((hot_latency, rate)) = self.hot.lock().unwrap().link() else { return Vec::new() };
        // The hot stream's latency is nothing when it came right behind the manifest (the
        // start object): a miss's own round trip, once one has been measured, says more.
        let latency = self.round_trip.lock().unwrap().unwrap_or(hot_latency);
        let entry = &self.manifest.files[file];
        let mut out = Vec::new();
        for place in 1..=MAX_AHEAD {
            let Some(c) = entry.chunks.get(index + place) else { break };
            if self.hot.lock().unwrap().pending.contains_key(&c.sha256)
                || self.inflight.lock().unwrap().contains_key(&c.sha256)
                || self.cache.contains(&c.sha256)
            {
                continue;
            }
            if !pays(self.ahead.chance(place), c.stored_len(), latency, rate) {
                break;
            }
            out.push(index + place);
        }
        out
    }

    /// A program's miss of piece `index` of file `file`: fetched with the pieces after it
    /// that pay ([`Engine::window`]), each run of pieces stored one after the other in one
    /// object in one request (the runs at once), or alone. A hot piece (one the hot stream
    /// was too far from) comes alone: it says the program reads the hot set in another
    /// order, not that it reads the cold pieces after it, and a window of them would take
    /// the link from the hot stream the program is waiting on.
    pub(super) fn demand_fetch(
        &self,
        file: usize,
        index: usize,
        chunk: &Chunk,
    ) -> Result<Arc<Vec<u8>>, EngineError> {
        let entry = &self.manifest.files[file];
        let outside = chunk.object.is_some();
        let more = if outside { self.window(file, index) } else { Vec::new() };
        let Some(me) = self.me.upgrade().filter(|_| !more.is_empty()) else {
            return self.shared_fetch(chunk, true);
        };
        // Lead a flight for the missed piece and each piece of the window that nobody else
        // is bringing by now.
        let mut runs: Vec<Vec<Piece>> = Vec::new();
        {
            let mut map = self.inflight.lock().unwrap();
            if map.contains_key(&chunk.sha256) {
                drop(map);
                return self.shared_fetch(chunk, true);
            }
            let slots = self.ahead_slots();
            for i in std::iter::once(index).chain(more) {
                let c = &entry.chunks[i];
                if map.contains_key(&c.sha256) {
                    continue;
                }
                let flight = Arc::new(Flight { done: Mutex::new(None), cv: Condvar::new() });
                map.insert(c.sha256.clone(), flight.clone());
                let global = self.first_chunk[file] + i;
                let (object, at) = self.manifest.locate(c);
                let piece =
                    Piece { object, at, chunk: c.clone(), flight, global, place: i - index };
                let follows = runs.last().and_then(|run| run.last()).is_some_and(|p| {
                    p.object == piece.object && p.at + p.chunk.stored_len() == piece.at
                });
                if follows {
                    runs.last_mut().unwrap().push(piece);
                } else if runs.is_empty() || runs.len() <= slots {
                    runs.push(vec![piece]);
                } else {
                    // A run of its own takes a connection: at most `connections - 2` such
                    // requests at once, so that the hot stream and the next miss have theirs.
                    map.remove(&c.sha256);
                    break;
                }
            }
        }
        let own = runs[0][0].flight.clone();
        for run in runs {
            let demand = run[0].place == 0;
            if demand {
                self.demand.fetch_add(1, Ordering::SeqCst);
            } else {
                self.ahead.runs.fetch_add(1, Ordering::SeqCst);
            }
            let (me, blob) = (me.clone(), run[0].object.clone());
            let flights: Vec<(Sha256Hex, Arc<Flight>)> =
                run.iter().map(|p| (p.chunk.sha256.clone(), p.flight.clone())).collect();
            let spawned = std::thread::Builder::new()
                .name("coldstart-ahead".into())
                .spawn(move || me.fetch_run(&blob, run));
            if let Err(e) = spawned {
                // Never led: end every flight of the run.
                let err = EngineError::Fetch(format!("cannot start a fetch: {e}"));
                for (sha, f) in &flights {
                    self.land(sha, f, Err(err.clone()));
                }
                if demand {
                    self.demand.fetch_sub(1, Ordering::SeqCst);
                } else {
                    self.ahead.runs.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
        self.wait_flight(&own)
    }

    /// Brings a run of pieces stored one after the other in object `blob` in one request,
    /// each to its readers as soon as it has arrived; the run that holds a missed piece (at
    /// place 0) is a demand fetch.
    fn fetch_run(&self, blob: &str, run: Vec<Piece>) {
        let t = Instant::now();
        let demand = run[0].place == 0;
        let pieces: Vec<(u64, Chunk)> = run.iter().map(|p| (p.at, p.chunk.clone())).collect();
        let mut landed = 0;
        let span = (0, pieces.len() - 1);
        let result = self.stream_chunks(blob, &pieces, span, false, |c, data| {
            let _ = self.cache.put(&c.sha256, data);
            let p = &run[landed];
            if p.place == 0 {
                self.note_miss_time(t.elapsed(), c.stored_len());
            } else {
                self.ahead.place[p.global].store(p.place as u8, Ordering::Relaxed);
                self.ahead.fetched[p.place - 1].fetch_add(1, Ordering::Relaxed);
            }
            self.land(&c.sha256, &p.flight, Ok(Arc::new(data.to_vec())));
            landed += 1;
        });
        let err = match result {
            Ok(()) => EngineError::Fetch("the response ended early".into()),
            Err(e) if e.is_cancelled() => EngineError::Cancelled,
            Err(e) => EngineError::Fetch(e.to_string()),
        };
        let skip = if demand { landed.max(1) } else { landed };
        for p in &run[skip..] {
            self.land(&p.chunk.sha256, &p.flight, Err(err.clone()));
        }
        if demand && landed == 0 {
            // The request failed before the missed piece arrived: the missed piece alone,
            // as without a window.
            let p = &run[0];
            self.inflight.lock().unwrap().remove(&p.chunk.sha256);
            let r = match err {
                EngineError::Cancelled => Err(err),
                _ => self.shared_fetch(&p.chunk, true),
            };
            self.land(&p.chunk.sha256, &p.flight, r);
        }
        if demand {
            *self.demand_cv.0.lock().unwrap() = Some(Instant::now());
            self.demand.fetch_sub(1, Ordering::SeqCst);
            self.demand_cv.1.notify_all();
        } else {
            self.ahead.runs.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// How many more runs without a missed piece may start now.
    fn ahead_slots(&self) -> usize {
        let limit = self.remote.options().connections.saturating_sub(2).max(1);
        limit.saturating_sub(self.ahead.runs.load(Ordering::SeqCst))
    }
}

/// One piece a window brings: where it is (its object and offset there), its flight, its
/// index among all the bundle's pieces and its place after the miss (0: the missed piece).
struct Piece {
    object: String,
    at: u64,
    chunk: Chunk,
    flight: Arc<Flight>,
    global: usize,
    place: usize,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use coldstart_bundle::{pack, ChunkCache, DirRemote, HotList, Manifest, PackOptions, Touch};

    use super::*;
    use crate::engine::EngineOptions;
    use crate::strategy::Strategy;
    use crate::testing::{quick, Slow};

    /// A 256 KiB file whose first 128 KiB are hot (pieces of 16 KiB) and the rest eight cold
    /// chunks of 16 KiB, served over a link of `latency` at 1 MiB/s; its hot stream has
    /// arrived. Returns the engine and the file's bytes.
    fn after_hot_stream(dir: &std::path::Path, latency: Duration) -> (Arc<Engine>, Vec<u8>) {
        after_hot_stream_with(dir, latency, &[])
    }

    /// [`after_hot_stream`] with these pages of the cold half hot as well.
    fn after_hot_stream_with(
        dir: &std::path::Path,
        latency: Duration,
        also_hot: &[u64],
    ) -> (Arc<Engine>, Vec<u8>) {
        let src = dir.join("src");
        std::fs::create_dir(&src).unwrap();
        let data: Vec<u8> = (0..64 * 4096u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(src.join("f"), &data).unwrap();
        let mut touches = vec![Touch { path: "f".into(), offset: 0, length: 32 * 4096 }];
        touches.extend(also_hot.iter().map(|p| Touch {
            path: "f".into(),
            offset: p * 4096,
            length: 4096,
        }));
        let hot = HotList { touches, ..HotList::default() };
        let bundle = dir.join("bundle");
        let opts = PackOptions { chunk_size: 16384, ..PackOptions::default() };
        pack(&src, &hot, &opts, &bundle).unwrap();
        let manifest =
            Manifest::parse(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
        let remote = Arc::new(Slow {
            inner: DirRemote::new(&bundle, quick()),
            latency,
            bytes_per_second: 1 << 20,
            piece: 4096,
            ..Slow::new(&bundle, |_| true)
        });
        let cache = ChunkCache::open(&dir.join("cache")).unwrap();
        let opts = EngineOptions { strategy: Strategy::ReorderedPaged, ..Default::default() };
        let e = Engine::new(manifest, remote, cache, opts);
        e.start().unwrap();
        assert_eq!(&e.read(0, 31 * 4096, 4096).unwrap()[..], &data[31 * 4096..32 * 4096]);
        let t = Instant::now();
        while e.hot.lock().unwrap().running && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(e.report().requests, 1, "the hot set came in one request");
        (e, data)
    }

    #[test]
    fn a_miss_brings_the_pieces_after_it_in_the_same_request() {
        let dir = tempfile::tempdir().unwrap();
        // A round trip (100 ms) costs more than six cold chunks' bytes (16 ms each).
        let (e, data) = after_hot_stream(dir.path(), Duration::from_millis(100));
        assert_eq!(&e.read(0, 32 * 4096, 4096).unwrap()[..], &data[32 * 4096..33 * 4096]);
        // The seven cold chunks after it came with it: the program reads them without a
        // round trip of their own.
        for page in 33..64 {
            let at = page as usize * 4096;
            assert_eq!(&e.read(0, at as u64, 4096).unwrap()[..], &data[at..at + 4096]);
        }
        let r = e.report();
        assert_eq!(r.requests, 2, "{r:?}");
        assert_eq!((r.ahead_chunks, r.ahead_read), (7, 7), "{r:?}");
        e.shutdown();
    }

    #[test]
    fn a_miss_brings_the_pieces_after_it_around_those_already_cached() {
        let dir = tempfile::tempdir().unwrap();
        // Pages 40 and 48 came with the hot stream: the window leaves them out and brings
        // the cold pieces between and after them, which the file's cold object holds back
        // to back (the hot ones are not there): one request.
        let (e, data) = after_hot_stream_with(dir.path(), Duration::from_millis(100), &[40, 48]);
        for page in 32..64 {
            let at = page as usize * 4096;
            assert_eq!(&e.read(0, at as u64, 4096).unwrap()[..], &data[at..at + 4096]);
        }
        let r = e.report();
        let cold = e.manifest().files[0].chunks.len() as u64 - r.hot_chunks;
        assert_eq!(r.requests, 1 + 1, "one run: {r:?}");
        assert_eq!((r.ahead_chunks, r.ahead_read), (cold - 1, cold - 1), "{r:?}");
        e.shutdown();
    }

    #[test]
    fn a_miss_brings_its_piece_alone_where_bytes_cost_more_than_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        // No latency: a piece more is never worth its bytes.
        let (e, data) = after_hot_stream(dir.path(), Duration::ZERO);
        for page in 32..64 {
            let at = page as usize * 4096;
            assert_eq!(&e.read(0, at as u64, 4096).unwrap()[..], &data[at..at + 4096]);
        }
        let r = e.report();
        assert_eq!(r.requests, 1 + 8, "one request per cold chunk: {r:?}");
        assert_eq!(r.ahead_chunks, 0, "{r:?}");
        e.shutdown();
    }

    #[test]
    fn a_miss_windows_bytes_are_not_counted_as_the_hot_requests() {
        let dir = tempfile::tempdir().unwrap();
        let (e, _) = after_hot_stream(dir.path(), Duration::from_millis(100));
        // A miss and the seven cold pieces its window brought.
        for page in 32..64 {
            e.read(0, page * 4096, 4096).unwrap();
        }
        let r = e.report();
        assert_eq!((r.requests, r.ahead_chunks), (2, 7), "{r:?}");
        // The hot request brought the hot part, no more; the window's bytes are apart.
        assert_eq!(r.hot_request_bytes, e.manifest().hot.size, "{r:?}");
        e.shutdown();
    }

    #[test]
    fn a_hot_piece_the_stream_is_far_from_is_fetched_alone_without_a_window() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let data: Vec<u8> = (0..64 * 4096u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(src.join("f"), &data).unwrap();
        // The first 192 KiB hot, then page 56, last in the stream; the rest cold, in chunks
        // of 16 KiB.
        let touches = vec![
            Touch { path: "f".into(), offset: 0, length: 48 * 4096 },
            Touch { path: "f".into(), offset: 56 * 4096, length: 4096 },
        ];
        let bundle = dir.path().join("bundle");
        let opts = PackOptions { chunk_size: 16384, ..PackOptions::default() };
        pack(&src, &HotList { touches, ..HotList::default() }, &opts, &bundle).unwrap();
        let manifest =
            Manifest::parse(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
        // 256 KiB/s and 100 ms: a cold piece of 16 KiB (62 ms) pays after a miss (Eq. 3 at
        // the window's first chance, one half), and page 56, 196 KiB down the stream, is
        // farther than a request of its own (two round trips, counted from the request to
        // the first chunk: about 90 KiB).
        let remote = Arc::new(Slow {
            inner: DirRemote::new(&bundle, quick()),
            latency: Duration::from_millis(100),
            bytes_per_second: 256 << 10,
            piece: 4096,
            ..Slow::new(&bundle, |_| true)
        });
        let cache = ChunkCache::open(&dir.path().join("cache")).unwrap();
        let opts = EngineOptions { strategy: Strategy::ReorderedPaged, ..Default::default() };
        let e = Engine::new(manifest, remote, cache, opts);
        e.start().unwrap();
        assert_eq!(&e.read(0, 0, 4096).unwrap()[..], &data[..4096]);
        std::thread::sleep(Duration::from_millis(60));
        // Read before the stream reaches it: its own request, and nothing after it.
        assert_eq!(&e.read(0, 56 * 4096, 4096).unwrap()[..], &data[56 * 4096..57 * 4096]);
        let t = Instant::now();
        while e.hot.lock().unwrap().running && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(300));
        let r = e.report();
        assert_eq!((r.requests, r.ahead_chunks, r.held_out_misses), (2, 0, 0), "{r:?}");
        e.shutdown();
    }

    #[test]
    fn eq3_weighs_a_round_trip_against_the_bytes() {
        // 64 KiB at 2.5 MB/s is 26 ms: worth it next to a 40 ms round trip when read at
        // least 40% of the time.
        assert!(pays(0.5, 65536, 0.040, 2.5e6));
        assert!(!pays(0.3, 65536, 0.040, 2.5e6));
        // The same piece compressed to 14 KiB is worth it from 12%.
        assert!(pays(0.15, 14000, 0.040, 2.5e6));
    }
}
