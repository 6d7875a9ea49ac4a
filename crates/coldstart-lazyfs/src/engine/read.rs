//! The read path: what FUSE calls for every read of a chunk. A cached chunk is one cache
//! lookup; a miss waits for the hot stream if it is bringing the chunk, or fetches it,
//! sharing one fetch among all readers of the chunk. Every read of a running program comes
//! through here, so nothing may be added to it per read (no allocation, lock or indirection).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use coldstart_bundle::remote::{get_chunk_while, POLL};
use coldstart_bundle::{Chunk, Entry, Touch};

use super::{Engine, EngineError};

/// One fetch of a chunk under way; the readers that found it in flight wait on `cv`.
pub(super) struct Flight {
    pub(super) done: Mutex<Option<Result<Arc<Vec<u8>>, EngineError>>>,
    pub(super) cv: Condvar,
}

/// The granularity of `--record`: the page, what the kernel reads and maps.
pub(super) const PAGE: u64 = 4096;

impl Engine {
    /// The bytes of `[offset, offset + size)` of manifest file `file`, clipped at its end: what
    /// a program's read gets. Its pages are recorded (`--record`) in the order they are first
    /// read.
    pub fn read(&self, file: usize, offset: u64, size: u32) -> Result<Vec<u8>, EngineError> {
        let entry = self.manifest.files.get(file).ok_or(EngineError::NoChunk)?;
        let start = offset.min(entry.size);
        let end = start.saturating_add(size as u64).min(entry.size);
        let mut out = Vec::with_capacity((end - start) as usize);
        let first = entry.chunks.partition_point(|c| c.offset + c.length <= start);
        let last = entry.chunks.partition_point(|c| c.offset < end);
        if first >= last {
            return Ok(out);
        }
        self.record(file, entry, start, end);
        let datas = self.read_chunks(file, first..last)?;
        for (c, data) in entry.chunks[first..last].iter().zip(datas) {
            let from = start.max(c.offset) - c.offset;
            let to = end.min(c.offset + c.length) - c.offset;
            out.extend_from_slice(&data[from as usize..to as usize]);
        }
        Ok(out)
    }

    /// The verified bytes of chunk `index` of file `file` (an index into the manifest).
    pub fn read_chunk(&self, file: usize, index: usize) -> Result<Arc<Vec<u8>>, EngineError> {
        let entry = self.manifest.files.get(file).ok_or(EngineError::NoChunk)?;
        let chunk = entry.chunks.get(index).ok_or(EngineError::NoChunk)?;
        let verified = &self.verified[self.first_chunk[file] + index];
        // Checked once per mount: after that, a cached copy is only checked for its length.
        let cached = if verified.load(Ordering::Relaxed) {
            self.cache.get_verified_before(chunk)
        } else {
            self.cache.get(chunk)
        };
        if let Some(data) = cached {
            if !verified.swap(true, Ordering::Relaxed) {
                self.note_read(self.first_chunk[file] + index);
            }
            if chunk.object.is_some() {
                self.note_outside(self.first_chunk[file] + index);
            }
            self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Arc::new(data));
        }
        let t = Instant::now();
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        // Outside the hot set: its stored form is in a cold object, not the start object's
        // hot part (each piece is stored once, so the hot set's bytes are only there).
        if chunk.object.is_some() {
            self.counters.held_out_misses.fetch_add(1, Ordering::Relaxed);
            self.counters.held_out_bytes.fetch_add(chunk.stored_len(), Ordering::Relaxed);
        }
        let result =
            self.wait_for_hot(chunk).map_or_else(|| self.demand_fetch(file, index, chunk), Ok);
        self.counters.waits.lock().unwrap().push(t.elapsed());
        if result.is_ok() {
            verified.store(true, Ordering::Relaxed);
            self.note_read(self.first_chunk[file] + index);
            if chunk.object.is_some() {
                self.note_outside(self.first_chunk[file] + index);
            }
        }
        if let Err(e) = &result {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
            let path = coldstart_bundle::manifest::shown(&entry.path);
            *self.counters.last_error.lock().unwrap() = Some(format!("{path}: {e}"));
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

    /// Notes the first touch of each page of `[start, end)` of `file` (`entry`), for the
    /// `--record` list: a page read right after the one before it in the same file extends
    /// that touch. Pages, not chunks: the record says what the program read, whatever the
    /// bundle's chunk size (at the read-ahead the mount records with, one page).
    fn record(&self, file: usize, entry: &Entry, start: u64, end: u64) {
        let mut r = self.recorder.lock().unwrap();
        for page in start / PAGE..end.div_ceil(PAGE) {
            if !r.seen.insert((file, page)) {
                continue;
            }
            let from = page * PAGE;
            let to = (from + PAGE).min(entry.size);
            match r.touches.last_mut() {
                Some(t) if t.path == entry.path && t.offset + t.length == from => {
                    t.length = to - t.offset
                }
                _ => r.touches.push(Touch {
                    path: entry.path.clone(),
                    offset: from,
                    length: to - from,
                }),
            }
        }
    }

    /// If the hot stream is bringing this chunk, waits for it (bounded, no longer once the
    /// engine is cancelled, and not at all when the stream is so far from it that a fetch
    /// of its own is faster).
    fn wait_for_hot(&self, chunk: &Chunk) -> Option<Arc<Vec<u8>>> {
        let deadline = Instant::now() + self.opts.read_timeout;
        let mut hot = self.hot.lock().unwrap();
        while hot.running && hot.pending.contains_key(&chunk.sha256) {
            let now = Instant::now();
            if now >= deadline || self.cancelled() || self.hot_is_behind(&hot, chunk) {
                return None;
            }
            hot = self.hot_cv.wait_timeout(hot, (deadline - now).min(POLL)).unwrap().0;
        }
        drop(hot);
        self.cache.get(chunk).map(Arc::new)
    }

    /// Fetches a chunk; concurrent readers of the same chunk (and background work) share one
    /// fetch. `demand`: a program is waiting, so background work pauses meanwhile.
    pub(super) fn shared_fetch(
        &self,
        chunk: &Chunk,
        demand: bool,
    ) -> Result<Arc<Vec<u8>>, EngineError> {
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
                    let t = Instant::now();
                    let got = get_chunk_while(self.remote.as_ref(), &self.manifest, chunk, &|| {
                        demand || !self.stop.load(Ordering::Relaxed)
                    });
                    if demand && got.is_ok() {
                        self.note_miss_time(t.elapsed(), chunk.stored_len());
                    }
                    got
                }
            };
            let result = result
                .map(|data| {
                    let _ = self.cache.put(&chunk.sha256, &data);
                    Arc::new(data)
                })
                .map_err(|e| {
                    if e.is_cancelled() {
                        EngineError::Cancelled
                    } else {
                        EngineError::Fetch(e.to_string())
                    }
                });
            if demand {
                *self.demand_cv.0.lock().unwrap() = Some(Instant::now());
                self.demand.fetch_sub(1, Ordering::SeqCst);
                self.demand_cv.1.notify_all();
            }
            self.land(&chunk.sha256, &flight, result.clone());
            return result;
        }
        self.wait_flight(&flight)
    }

    /// Ends a fetch this thread leads: its readers get `result`, and the chunk is no longer
    /// in flight (unless another flight has taken its place).
    pub(super) fn land(
        &self,
        sha: &coldstart_bundle::Sha256Hex,
        flight: &Arc<Flight>,
        result: Result<Arc<Vec<u8>>, EngineError>,
    ) {
        *flight.done.lock().unwrap() = Some(result);
        flight.cv.notify_all();
        let mut map = self.inflight.lock().unwrap();
        if map.get(sha).is_some_and(|f| Arc::ptr_eq(f, flight)) {
            map.remove(sha);
        }
    }

    /// Waits for a fetch another thread leads (bounded, and not once the engine is
    /// cancelled).
    pub(super) fn wait_flight(&self, flight: &Flight) -> Result<Arc<Vec<u8>>, EngineError> {
        let deadline = Instant::now() + self.opts.read_timeout;
        let mut done = flight.done.lock().unwrap();
        loop {
            if let Some(r) = done.as_ref() {
                return r.clone();
            }
            let now = Instant::now();
            if self.cancelled() {
                return Err(EngineError::Cancelled);
            }
            if now >= deadline {
                return Err(EngineError::Timeout(self.opts.read_timeout));
            }
            done = flight.cv.wait_timeout(done, (deadline - now).min(POLL)).unwrap().0;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{engine, fixture, read_back};
    use crate::Strategy;

    #[test]
    fn a_corrupt_blob_is_an_error_not_wrong_bytes() {
        let f = fixture();
        let e = engine(&f, Strategy::Paged);
        let c = &e.manifest().files[0].chunks[1];
        let (object, at) = e.manifest().locate(c);
        let blob = f.bundle.join(object);
        let mut bytes = std::fs::read(&blob).unwrap();
        bytes[at as usize + 10] ^= 1;
        std::fs::write(&blob, bytes).unwrap();
        assert!(e.read_chunk(0, 0).is_ok());
        let err = e.read_chunk(0, 1).unwrap_err();
        assert!(err.to_string().contains("SHA-256"), "{err}");
        assert_eq!(e.report().errors, 1);
    }

    #[test]
    fn recording_lists_the_pages_read_in_first_touch_order() {
        let f = fixture();
        let e = engine(&f, Strategy::Paged);
        // lib/b (30,000 bytes, in 8 KiB chunks): a read within page 4, then pages 5-6.
        e.read(2, 16384 + 100, 10).unwrap();
        e.read(0, 0, 1).unwrap();
        e.read(2, 16384, 4096).unwrap();
        // Pages 5 and 6, read after app's: a touch of their own, page 7 clipped at the end.
        e.read(2, 20480, 8192).unwrap();
        e.read(2, 28672, 5000).unwrap();
        let rec = e.recorded();
        let got: Vec<(&str, u64, u64)> =
            rec.touches.iter().map(|t| (t.path.as_str(), t.offset, t.length)).collect();
        assert_eq!(
            got,
            vec![("lib/b", 16384, 4096), ("app", 0, 4096), ("lib/b", 20480, 30_000 - 20480)]
        );
        assert_eq!(e.read(2, 29_990, 100).unwrap().len(), 10);
        assert!(e.read(2, 40_000, 100).unwrap().is_empty());
    }

    #[test]
    fn a_cached_chunk_is_checked_once_per_mount() {
        let f = fixture();
        let e = engine(&f, Strategy::Paged);
        let c = e.manifest().files[0].chunks[0].clone();
        let first = e.read_chunk(0, 0).unwrap();
        assert_eq!(e.report().misses, 1);
        // The copy in the cache changes under the mount (same length): this mount verified it
        // already and reads it as it is now; a new mount checks it and fetches it again.
        let path = f.cache.join("sha256").join(&c.sha256.as_str()[..2]).join(c.sha256.as_str());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(*e.read_chunk(0, 0).unwrap(), bytes);
        assert_eq!(e.report().cache_hits, 1);
        let fresh = engine(&f, Strategy::Paged);
        assert_eq!(fresh.read_chunk(0, 0).unwrap(), first);
        assert_eq!((fresh.report().cache_hits, fresh.report().misses), (0, 1));
    }

    #[test]
    fn a_read_outside_the_hot_set_is_noted_with_the_pages_of_its_piece_it_read() {
        let f = fixture();
        let e = engine(&f, Strategy::Paged);
        // app (50,000 bytes in 8 KiB pieces; its hot piece holds 40,000): 10 bytes of the
        // piece at 16 KiB (its first page), then all of the piece at 8 KiB, then the hot one.
        e.read(0, 16384 + 100, 10).unwrap();
        e.read(0, 8192, 8192).unwrap();
        e.read(0, 40_000, 10).unwrap();
        let got: Vec<_> =
            e.outside_reads().into_iter().map(|(f, p, _, read)| (f, p, read)).collect();
        assert_eq!(got, [(0, 2, Some((16384, 20480))), (0, 1, Some((8192, 16384)))]);
    }

    #[test]
    fn misses_outside_the_hot_set_are_counted_apart() {
        let f = fixture();
        let e = engine(&f, Strategy::Paged);
        let m = e.manifest().clone();
        let hot: Vec<_> = m.hot_chunks().into_iter().map(|(_, c)| c.sha256.clone()).collect();
        assert!(!hot.is_empty());
        // The hot chunks first: misses, none outside the hot set.
        for (fi, entry) in m.files.iter().enumerate() {
            for (k, c) in entry.chunks.iter().enumerate() {
                if hot.contains(&c.sha256) {
                    e.read_chunk(fi, k).unwrap();
                }
            }
        }
        let r = e.report();
        assert_eq!((r.misses, r.held_out_misses, r.held_out_bytes), (hot.len() as u64, 0, 0));
        // Then every chunk: the rest are misses outside the hot set, with their bytes.
        let report = read_back(&e, &f, "paged");
        let cold: Vec<_> =
            m.files.iter().flat_map(|x| &x.chunks).filter(|c| !hot.contains(&c.sha256)).collect();
        assert!(!cold.is_empty());
        assert_eq!(report.held_out_misses, cold.len() as u64);
        assert_eq!(report.held_out_bytes, cold.iter().map(|c| c.stored_len()).sum::<u64>());
        assert_eq!(report.misses, (hot.len() + cold.len()) as u64);
    }
}
