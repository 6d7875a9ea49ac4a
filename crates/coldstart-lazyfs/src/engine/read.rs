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
    done: Mutex<Option<Result<Arc<Vec<u8>>, EngineError>>>,
    cv: Condvar,
}

impl Engine {
    /// The verified bytes of chunk `index` of file `file` (an index into the manifest).
    pub fn read_chunk(&self, file: usize, index: usize) -> Result<Arc<Vec<u8>>, EngineError> {
        let entry = self.manifest.files.get(file).ok_or(EngineError::NoChunk)?;
        let chunk = entry.chunks.get(index).ok_or(EngineError::NoChunk)?;
        self.record(file, index, entry, chunk);
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
        // Record in order before the parallel part, so the first-touch order stays exact.
        for i in indices.clone() {
            if let Some(c) = entry.chunks.get(i) {
                self.record(file, i, entry, c);
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

    /// Notes the first touch of chunk `index` of `file` (`entry`), for the `--record` list.
    /// Inlined: it was written in place in the read path, and stays as cheap.
    #[inline]
    fn record(&self, file: usize, index: usize, entry: &Entry, chunk: &Chunk) {
        let mut r = self.recorder.lock().unwrap();
        if r.seen.insert((file, index)) {
            r.touches.push(Touch {
                path: entry.path.clone(),
                offset: chunk.offset,
                length: chunk.length,
            });
        }
    }

    /// If the hot stream is bringing this chunk, waits for it (bounded, and no longer once
    /// the engine is cancelled).
    fn wait_for_hot(&self, chunk: &Chunk) -> Option<Arc<Vec<u8>>> {
        let deadline = Instant::now() + self.opts.read_timeout;
        let mut hot = self.hot.lock().unwrap();
        while hot.running && hot.pending.contains(&chunk.sha256) {
            let now = Instant::now();
            if now >= deadline || self.cancelled() {
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
    use crate::testing::{engine, fixture};
    use crate::Strategy;

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
}
