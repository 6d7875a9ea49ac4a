//! What the unit tests of several modules share: a small bundle on disk, an engine over it,
//! and a remote whose bytes arrive slowly.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coldstart_bundle::{
    pack, ChunkCache, Compression, DirRemote, FetchError, FetchOptions, FetchStats, HotList,
    Manifest, PackOptions, Remote, Sink, Span, Touch,
};

use crate::engine::{Engine, EngineError, EngineOptions, Report};
use crate::Strategy;

/// A small bundle packed into a temporary directory, with an empty chunk cache beside it.
pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub(crate) bundle: PathBuf,
    pub(crate) cache: PathBuf,
    /// Each file's path in the bundle and its bytes.
    pub(crate) files: Vec<(String, Vec<u8>)>,
}

pub(crate) fn fixture() -> Fixture {
    fixture_with(Compression::None)
}

/// Two files in chunks of 8 KiB; the hot set is one chunk of each, `lib/b`'s first.
pub(crate) fn fixture_with(compression: Compression) -> Fixture {
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
    let opts = PackOptions { chunk_size: 8192, compression, level: 3, ..PackOptions::default() };
    pack(&src, &hot, &opts, &bundle).unwrap();
    let cache = dir.path().join("cache");
    Fixture { bundle, cache, files: vec![("app".into(), a), ("lib/b".into(), b)], _dir: dir }
}

/// Fetch options for tests: a retry follows at once.
pub(crate) fn quick() -> FetchOptions {
    FetchOptions { backoff: Duration::from_millis(1), ..Default::default() }
}

/// An engine over the fixture's bundle, read from `manifest.json` (not the start object).
pub(crate) fn engine(f: &Fixture, strategy: Strategy) -> Arc<Engine> {
    let manifest =
        Manifest::parse(&std::fs::read(f.bundle.join("manifest.json")).unwrap()).unwrap();
    let remote = Arc::new(DirRemote::new(&f.bundle, quick()));
    let cache = ChunkCache::open(&f.cache).unwrap();
    Engine::new(manifest, remote, cache, EngineOptions { strategy, ..Default::default() })
}

/// Every chunk of the file at `path`, in order, through the read path.
pub(crate) fn read_all(e: &Engine, path: &str) -> Result<Vec<u8>, EngineError> {
    let i = e.manifest().files.iter().position(|x| x.path == path).unwrap();
    let mut out = Vec::new();
    for k in 0..e.manifest().files[i].chunks.len() {
        out.extend_from_slice(&e.read_chunk(i, k)?);
    }
    Ok(out)
}

/// Reads every file of the fixture through `e`'s read path and checks its bytes, then stops
/// `e`'s background work; returns its report. `what` names the case in a failure.
pub(crate) fn read_back(e: &Engine, f: &Fixture, what: &str) -> Report {
    for (path, data) in &f.files {
        assert_eq!(&read_all(e, path).unwrap(), data, "{what}: {path}");
    }
    e.shutdown();
    e.report()
}

/// A bundle on disk whose answers to the requests `slow` picks come as over a slow link: after
/// `latency`, at `bytes_per_second`, handed over `piece` bytes at a time as they arrive. It
/// notes whether such a transfer began and whether its reader stopped it.
pub(crate) struct Slow {
    pub(crate) inner: DirRemote,
    pub(crate) slow: fn(&str) -> bool,
    pub(crate) latency: Duration,
    pub(crate) bytes_per_second: u64,
    pub(crate) piece: usize,
    pub(crate) started: AtomicBool,
    pub(crate) aborted: AtomicBool,
}

impl Slow {
    pub(crate) fn new(root: &std::path::Path, slow: fn(&str) -> bool) -> Slow {
        Slow {
            inner: DirRemote::new(root, FetchOptions::default()),
            slow,
            latency: Duration::ZERO,
            bytes_per_second: 1 << 20,
            piece: 64 * 1024,
            started: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
        }
    }
}

impl Remote for Slow {
    fn fetch(&self, path: &str, span: Span, sink: Sink<'_>) -> Result<u64, FetchError> {
        if !(self.slow)(path) {
            return self.inner.fetch(path, span, sink);
        }
        let t0 = Instant::now();
        let body = coldstart_bundle::remote::get(&self.inner, path, span)?;
        self.started.store(true, Ordering::SeqCst);
        let mut sent = 0u64;
        for piece in body.chunks(self.piece) {
            sent += piece.len() as u64;
            // Due when its last byte would have arrived: paced from the request, so that
            // the sleeps' own delays do not add up.
            let due = t0
                + self.latency
                + Duration::from_nanos(sent * 1_000_000_000 / self.bytes_per_second);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
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

    fn stats(&self) -> &FetchStats {
        self.inner.stats()
    }

    fn describe(&self, path: &str) -> String {
        self.inner.describe(path)
    }
}
