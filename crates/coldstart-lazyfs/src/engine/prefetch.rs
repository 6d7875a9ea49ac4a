//! What each strategy does before the program starts: nothing for `paged`, every file whole
//! for `original`, the hot set for `reordered` (the program waits for it), and for
//! `reordered-paged` and `stream` the hot set on a thread of its own while the program runs
//! (then, for `stream`, the rest). A mount on the start object does the same from the start
//! object's request instead ([`Engine::start_from`]).
//!
//! When the hot set's request fails for good (a damaged or cut start object), every strategy
//! fetches the hot pieces still missing one by one (Range requests of the start object):
//! `reordered` before start ([`Engine::fall_back_hot`]), the others on first use.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use coldstart_bundle::start::START_OBJECT;
use coldstart_bundle::{object_path, Chunk};

use super::{Engine, EngineError};
use crate::strategy::{whole_objects, Strategy};

impl Engine {
    /// Runs the strategy's start-up work: blocking for `original` and `reordered`, background
    /// threads for `reordered-paged` and `stream`.
    pub fn start(self: &Arc<Self>) -> Result<(), EngineError> {
        let t = Instant::now();
        let result = match self.opts.strategy {
            Strategy::Paged => Ok(()),
            Strategy::Original => self.fetch_all(),
            Strategy::Reordered => {
                let plan = self.plan_hot();
                match self.load_hot(plan) {
                    Err(EngineError::Cancelled) => Err(EngineError::Cancelled),
                    Err(e) => {
                        *self.counters.background_error.lock().unwrap() = Some(e.to_string());
                        self.fall_back_hot()
                    }
                    Ok(()) => Ok(()),
                }
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

    /// `reordered` after its hot set's request failed for good: the hot chunks still missing,
    /// each alone (as many at once as there are connections), before start. The
    /// first that cannot be had ends it, noted as the background error: a read fetches it
    /// again on first use, or fails with `EIO`. Fails only when cancelled.
    pub(super) fn fall_back_hot(&self) -> Result<(), EngineError> {
        let todo: Vec<&Chunk> = self
            .manifest
            .hot_chunks()
            .into_iter()
            .map(|(_, c)| c)
            .filter(|c| !self.cache.contains(&c.sha256))
            .collect();
        let next = AtomicUsize::new(0);
        let failed = std::sync::Mutex::new(None);
        let workers = self.remote.options().connections.clamp(1, 8);
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| {
                    while failed.lock().unwrap().is_none() {
                        let Some(c) = todo.get(next.fetch_add(1, Ordering::SeqCst)) else {
                            return;
                        };
                        match self.shared_fetch(c, false) {
                            Ok(_) => {
                                self.counters.hot_chunks.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => *failed.lock().unwrap() = Some(e),
                        }
                    }
                });
            }
        });
        match failed.into_inner().unwrap() {
            None => Ok(()),
            Some(EngineError::Cancelled) => Err(EngineError::Cancelled),
            Some(e) => {
                let mut b = self.counters.background_error.lock().unwrap();
                let before = b.take().map_or(String::new(), |b| format!("{b}; "));
                *b = Some(format!("{before}then piece by piece: {e}"));
                Ok(())
            }
        }
    }

    /// `original`: what downloading the program does. Each object whole, one request per
    /// object, one request at a time: the start object's hot part, then the cold objects in
    /// manifest order (each file's cold pieces); every piece is still verified as it arrives
    /// and the files are rebuilt from the pieces. An object whose pieces are all cached is
    /// skipped.
    fn fetch_all(&self) -> Result<(), EngineError> {
        let progress = self.opts.progress.as_ref();
        let total: u64 = match progress {
            Some(_) => whole_objects(&self.manifest, |h| self.cache.contains(h))
                .map(|(_, pieces)| pieces.iter().map(|c| c.stored_len()).sum::<u64>())
                .sum(),
            None => 0,
        };
        let done = std::cell::Cell::new(0u64);
        // Lazily: an object whose pieces the objects before it brought is skipped.
        for (object, pieces) in whole_objects(&self.manifest, |h| self.cache.contains(h)) {
            let (path, base) = match object {
                Some(i) => (object_path(&self.manifest.objects[i].sha256), 0),
                None => (START_OBJECT.to_owned(), self.manifest.hot.offset),
            };
            let pieces: Vec<(u64, Chunk)> =
                pieces.into_iter().map(|c| (base + c.at, c.clone())).collect();
            // Counted as the hot request's: what `original` fetches before start.
            self.stream_chunks(&path, &pieces, (0, pieces.len() - 1), true, |c, data| {
                let _ = self.cache.put(&c.sha256, data);
                if let Some(p) = progress {
                    done.set(done.get() + c.stored_len());
                    (p.0)(done.get(), total.max(done.get()));
                }
            })
            .map_err(|err| {
                // Named by the first file it holds pieces of, which a user knows.
                let holder = self
                    .manifest
                    .files
                    .iter()
                    .find(|e| e.chunks.iter().any(|c| c.object == object))
                    .map_or(String::new(), |e| {
                        format!(" (pieces of {})", coldstart_bundle::manifest::shown(&e.path))
                    });
                EngineError::Fetch(format!("{path}{holder}: {err}"))
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use coldstart_bundle::{Chunk, Compression};

    use crate::testing::{engine, fixture, fixture_with, read_all, read_back};
    use crate::Strategy;

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
            let r = read_back(&e, &f, s.name());
            assert_eq!(r.errors, 0);
            match s {
                Strategy::Original => {
                    assert_eq!(r.misses, 0, "{s}: everything was fetched before start");
                    let objects = 1 + e.manifest().objects.len() as u64;
                    assert_eq!(r.requests, objects, "{s}: one request per object, hot part too");
                    let total: u64 = e
                        .manifest()
                        .files
                        .iter()
                        .flat_map(|x| &x.chunks)
                        .map(Chunk::stored_len)
                        .sum();
                    assert_eq!(r.bytes_fetched, total, "{s}: each piece once");
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
    fn original_refuses_a_corrupt_object_and_skips_cached_ones() {
        let f = fixture();
        let e = engine(&f, Strategy::Original);
        let c = e.manifest().files[2].chunks.iter().rfind(|c| c.object.is_some()).unwrap();
        let (object, at) = e.manifest().locate(c);
        let blob = f.bundle.join(object);
        let good = std::fs::read(&blob).unwrap();
        let mut bad = good.clone();
        bad[at as usize + 100] ^= 1;
        std::fs::write(&blob, bad).unwrap();
        let err = e.start().unwrap_err();
        assert!(err.to_string().contains("lib/b"), "{err}");
        assert!(err.to_string().contains("SHA-256"), "{err}");
        std::fs::write(&blob, good).unwrap();
        // The hot part and `app`'s object are cached now: only lib/b's is fetched again.
        let again = engine(&f, Strategy::Original);
        again.start().unwrap();
        assert_eq!(again.report().requests, 1);
        assert_eq!(read_all(&again, "lib/b").unwrap(), f.files[1].1);
    }
}
