//! How to mount, and how what a user gives becomes it: the defaults (the chunk cache's
//! directory, the read-ahead), the network's bounds (timeouts, the slowest rate accepted,
//! retries) and the settings derived from others (how long a read may wait) are decided here,
//! once, for every front end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use coldstart_bundle::remote::MAX_RETRIES;
use coldstart_bundle::sign::TrustedKey;
use coldstart_bundle::{Cancel, FetchOptions, Manifest};

use crate::error::MountError;
use crate::model::LinkEstimate;
use crate::strategy::{Strategy, StrategyOrAuto};

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// The strategy.
    pub strategy: Strategy,
    /// The chunk cache directory (shared by mounts).
    pub cache_dir: PathBuf,
    /// Write what was read, in first-touch order, here at unmount.
    pub record: Option<PathBuf>,
    /// This start's learn record will be written ([`crate::Mount::learner`]): every read goes
    /// through the mount (no FUSE passthrough), so that the record sees the reads of cached
    /// files too (all of them under `original`).
    pub learn: bool,
    /// How to fetch from the bundle's origin.
    pub fetch: FetchOptions,
    /// Bound on a read waiting for a chunk another fetch (or the hot stream) is bringing;
    /// `None`: [`read_timeout`] of the fetch options and the manifest.
    pub read_timeout: Option<Duration>,
    /// The kernel's read-ahead (and page-fault read-around) in bytes: how far past a read it
    /// asks for more. Larger helps sequential reads of cached data; smaller keeps a page
    /// fault from fetching neighbouring chunks the program never touches. `None`: the mount
    /// chooses ([`default_readahead`]).
    pub readahead: Option<u32>,
    /// Choose the strategy with the model ([`crate::model`]) instead of `strategy`.
    pub auto: Option<AutoOptions>,
    /// Told how far `original`'s downloads of whole objects before start have come (stored bytes
    /// brought, and in all).
    pub progress: Option<coldstart_bundle::Progress>,
    /// Public keys of which one must have signed the bundle (`--trust`); empty: a bundle is
    /// mounted signed or not, and its signature is not fetched.
    pub trust: Vec<TrustedKey>,
    /// Empty directories the mount's watchdog removes, in order, if this process dies from the
    /// start of [`crate::mount()`] on (a temporary mount point and its parent).
    pub remove_on_death: Vec<PathBuf>,
}

/// What `--strategy auto` is told.
#[derive(Debug, Clone, Default)]
pub struct AutoOptions {
    /// The link, given instead of measured.
    pub link: Option<LinkEstimate>,
    /// The program's start-up time with every byte local, if known.
    pub local: Option<Duration>,
}

/// The kernel's own default read-ahead, 128 KiB: what a mount uses when a read cannot cause
/// a fetch ([`default_readahead`]).
pub const DEFAULT_READAHEAD: u32 = 128 * 1024;

/// One page: the read-ahead a mount uses when a read may cause a fetch
/// ([`default_readahead`]).
pub const PAGE_READAHEAD: u32 = 4096;

/// The read-ahead a mount uses unless told ([`MountOptions::readahead`]), from the strategy,
/// whether it records and whether the chunk cache already holds every chunk of the bundle.
///
/// - Recording (`--record`): one page, so that the record holds the pages the program
///   touched and not the neighbours the kernel would have asked for with them.
/// - A strategy that fetches on a read (every one but `original`), with chunks still to
///   fetch: one page. The kernel's default (128 KiB of read-ahead, and as much read-around
///   a page fault) would fetch neighbours nobody touches: on a slow link, bytes and waits
///   for nothing. The bundle's pieces already hold what is worth fetching together (a run of
///   touched pages is one piece; cold data is in whole chunks), and a kernel read asking for
///   more than a page (a `read` of a large buffer) still gets it in one request.
/// - Otherwise (`original`, which fetches every file before the program starts; every chunk
///   cached): the kernel's default, [`DEFAULT_READAHEAD`], as no read can wait on the network.
pub fn default_readahead(strategy: Strategy, recording: bool, all_cached: bool) -> u32 {
    if recording {
        PAGE_READAHEAD
    } else if strategy == Strategy::Original || all_cached {
        DEFAULT_READAHEAD
    } else {
        PAGE_READAHEAD
    }
}

impl MountOptions {
    /// Options to mount with `strategy` and the chunk cache in `cache_dir`; the defaults otherwise.
    pub fn new(strategy: Strategy, cache_dir: PathBuf) -> MountOptions {
        MountOptions {
            strategy,
            cache_dir,
            record: None,
            learn: false,
            fetch: FetchOptions::default(),
            read_timeout: None,
            readahead: None,
            auto: None,
            trust: Vec::new(),
            progress: None,
            remove_on_death: Vec::new(),
        }
    }
}

/// What a user asked of a mount (`coldstart mount` and `run`), as given;
/// [`MountRequest::options`] checks it and derives the rest.
#[derive(Debug, Clone)]
pub struct MountRequest {
    /// A strategy, or `auto`.
    pub strategy: StrategyOrAuto,
    /// The link for `auto`, given instead of measured; only with `auto`.
    pub link_hint: Option<LinkEstimate>,
    /// The chunk cache, shared by mounts; `None`: [`default_cache_dir`].
    pub cache_dir: Option<PathBuf>,
    /// At unmount, write what was read, in first-touch order, as a hot list for `pack`.
    pub record: Option<PathBuf>,
    /// How to fetch.
    pub network: NetworkRequest,
    /// The kernel's read-ahead in bytes ([`readahead`] checks a value); `None`: the mount
    /// chooses ([`default_readahead`]).
    pub readahead: Option<u32>,
}

/// How a user asked the network to be used (`mount`, `run` and `predict`), as given;
/// [`NetworkRequest::fetch_options`] checks it.
#[derive(Debug, Clone)]
pub struct NetworkRequest {
    /// Retries of a failed fetch before a read fails with `EIO` (at most [`MAX_RETRIES`]).
    pub retries: u32,
    /// Bound in seconds on connecting, on waiting for an answer and on each wait for more
    /// bytes; positive.
    pub timeout: f64,
    /// The slowest transfer accepted, in bytes per second; at least 1.
    pub min_rate: u64,
    /// Requests in flight at most (0 is taken as 1).
    pub connections: usize,
    /// Stops every fetch (a signal): set by the caller, watched by the fetcher and the engine.
    pub cancel: Cancel,
    /// Public key files (PEM) of which one must have signed the bundle; empty: any bundle.
    pub trust: Vec<PathBuf>,
}

impl Default for NetworkRequest {
    fn default() -> Self {
        let f = FetchOptions::default();
        NetworkRequest {
            retries: f.retries,
            timeout: f.io_timeout.as_secs_f64(),
            min_rate: f.min_rate,
            connections: f.connections,
            cancel: Cancel::default(),
            trust: Vec::new(),
        }
    }
}

impl NetworkRequest {
    /// The keys of [`NetworkRequest::trust`], read; a usage error naming a file that is not
    /// an ed25519 public key.
    pub fn trusted_keys(&self) -> Result<Vec<TrustedKey>, MountError> {
        self.trust.iter().map(|p| TrustedKey::read(p).map_err(MountError::Key)).collect()
    }

    /// The fetcher's options; a usage error for a timeout that is not a positive number, more
    /// retries than [`MAX_RETRIES`] or a rate of 0.
    pub fn fetch_options(&self) -> Result<FetchOptions, MountError> {
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout < 1e6) {
            return Err(MountError::Timeout);
        }
        if self.retries > MAX_RETRIES {
            return Err(MountError::Retries(self.retries));
        }
        if self.min_rate == 0 {
            return Err(MountError::MinRate);
        }
        let timeout = Duration::from_secs_f64(self.timeout);
        Ok(FetchOptions {
            retries: self.retries,
            connections: self.connections.max(1),
            connect_timeout: timeout,
            io_timeout: timeout,
            min_rate: self.min_rate,
            // The mount's own: it stops its fetches when it goes away, and the caller's flag
            // stays as the caller left it.
            cancel: self.cancel.child(),
            ..FetchOptions::default()
        })
    }
}

/// How long a read waits for a chunk another fetch (or the hot stream) is bringing, unless
/// told: every attempt of a fetch of the manifest's largest chunk
/// ([`FetchOptions::fetch_bound`]), and 10 s more.
pub fn read_timeout(fetch: &FetchOptions, manifest: &Manifest) -> Duration {
    let largest = manifest.files.iter().flat_map(|e| &e.chunks).map(|c| c.stored_len()).max();
    fetch.fetch_bound(largest.unwrap_or(0)) + Duration::from_secs(10)
}

impl MountRequest {
    /// The mount's options; a usage error for bad network settings
    /// ([`NetworkRequest::fetch_options`]), no home directory to put the cache in, a link
    /// hint without `auto`, or a `--record` file in a directory that is not there or cannot
    /// be written.
    ///
    /// Under `auto` the strategy is `stream` until the model has chosen.
    pub fn options(&self) -> Result<MountOptions, MountError> {
        let fetch = self.network.fetch_options()?;
        if let Some(r) = &self.record {
            check_record(r)?;
        }
        let cache = match &self.cache_dir {
            Some(d) => d.clone(),
            None => default_cache_dir()?,
        };
        let fixed = match self.strategy {
            StrategyOrAuto::Fixed(s) => s,
            StrategyOrAuto::Auto => Strategy::Stream,
        };
        if self.link_hint.is_some() && self.strategy != StrategyOrAuto::Auto {
            return Err(MountError::LinkHintWithoutAuto);
        }
        let mut o = MountOptions::new(fixed, cache);
        if self.strategy == StrategyOrAuto::Auto {
            o.auto = Some(AutoOptions { link: self.link_hint, local: None });
        }
        o.record = self.record.clone();
        o.readahead = self.readahead;
        o.fetch = fetch;
        o.trust = self.network.trusted_keys()?;
        Ok(o)
    }
}

/// Checks, before anything is mounted, that the hot list can be written at `path`: its
/// directory exists and may be written.
fn check_record(path: &Path) -> Result<(), MountError> {
    use std::os::unix::ffi::OsStrExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let refuse = |why: &str| MountError::RecordDir { path: path.to_path_buf(), why: why.into() };
    if !dir.is_dir() {
        return Err(refuse("its directory does not exist"));
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| refuse("its path holds a NUL byte"))?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(refuse("its directory cannot be written"));
    }
    Ok(())
}

/// The chunk cache's directory when none is given: `$XDG_CACHE_HOME/coldstart/chunks`, else
/// `~/.cache/coldstart/chunks`.
pub fn default_cache_dir() -> Result<PathBuf, MountError> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("coldstart/chunks"));
    }
    match std::env::var_os("HOME").filter(|x| !x.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache/coldstart/chunks")),
        None => Err(MountError::NoCacheDir),
    }
}

/// A read-ahead of `bytes`, if it is one the mount takes: 4 KiB to 1 MiB.
pub fn readahead(bytes: u64) -> Result<u32, MountError> {
    if (4096..=1 << 20).contains(&bytes) {
        Ok(bytes as u32)
    } else {
        Err(MountError::Readahead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> MountRequest {
        MountRequest {
            strategy: StrategyOrAuto::Fixed(Strategy::Paged),
            link_hint: None,
            cache_dir: Some("/c".into()),
            record: None,
            network: NetworkRequest { connections: 0, ..NetworkRequest::default() },
            readahead: None,
        }
    }

    #[test]
    fn a_read_waits_for_every_attempt_of_a_fetch_of_the_largest_chunk() {
        let o = request().options().unwrap();
        assert_eq!(o.read_timeout, None);
        assert_eq!((o.fetch.connections, o.fetch.io_timeout), (1, Duration::from_secs(10)));
        assert!(o.auto.is_none());
        let m: Manifest = serde_json::from_str(
            r#"{"format": "coldstart-bundle", "version": 4, "chunk_size": 65536, "files": [
                {"path": "f", "kind": "file", "mode": 420, "size": 102400,
                 "sha256": "0000000000000000000000000000000000000000000000000000000000000000",
                 "chunks": [
                  {"offset": 0, "length": 65536, "sha256": "1111111111111111111111111111111111111111111111111111111111111111", "object": 0, "at": 0},
                  {"offset": 65536, "length": 36864, "sha256": "2222222222222222222222222222222222222222222222222222222222222222", "object": 0, "at": 65536}]}],
               "objects": [{"sha256": "3333333333333333333333333333333333333333333333333333333333333333", "size": 102400}],
               "hot": {"offset": 0, "size": 0, "chunks": []}}"#,
        )
        .unwrap();
        // 4 attempts of (10 s to connect, 10 s to the answer, 10 s more, 64 KiB at 1 KiB/s),
        // 0.1 + 0.2 + 0.4 s of back-off, and 10 s.
        let want = Duration::from_secs(4 * (30 + 64)) + Duration::from_millis(700 + 10_000);
        assert_eq!(read_timeout(&o.fetch, &m), want);
    }

    #[test]
    fn what_cannot_be_used_is_refused() {
        for t in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let network = NetworkRequest { timeout: t, ..NetworkRequest::default() };
            let r = MountRequest { network, ..request() };
            assert!(matches!(r.options(), Err(MountError::Timeout)), "{t}");
        }
        let network = NetworkRequest { retries: MAX_RETRIES + 1, ..NetworkRequest::default() };
        let r = MountRequest { network, ..request() };
        let err = r.options().unwrap_err();
        assert!(err.to_string().contains("--retries"), "{err}");
        let network = NetworkRequest { min_rate: 0, ..NetworkRequest::default() };
        assert!(matches!(
            MountRequest { network, ..request() }.options(),
            Err(MountError::MinRate)
        ));
        let d = tempfile::tempdir().unwrap();
        let r = MountRequest { record: Some(d.path().join("no/h.json")), ..request() };
        let err = r.options().unwrap_err();
        assert!(err.to_string().contains("--record"), "{err}");
        let r = MountRequest { record: Some(d.path().join("h.json")), ..request() };
        assert!(r.options().is_ok());
        let link = Some(LinkEstimate::given(1e6, Duration::from_millis(10)));
        let r = MountRequest { link_hint: link, ..request() };
        assert!(matches!(r.options(), Err(MountError::LinkHintWithoutAuto)));
        let r = MountRequest { link_hint: link, strategy: StrategyOrAuto::Auto, ..request() };
        let o = r.options().unwrap();
        assert_eq!((o.strategy, o.auto.unwrap().link), (Strategy::Stream, link));
        assert!(readahead(4095).is_err() && readahead((1 << 20) + 1).is_err());
        assert_eq!(readahead(4096).unwrap(), 4096);
    }

    #[test]
    fn the_read_ahead_is_a_page_whenever_a_read_may_fetch_or_a_record_is_taken() {
        for s in [Strategy::Paged, Strategy::ReorderedPaged, Strategy::Reordered, Strategy::Stream]
        {
            assert_eq!(default_readahead(s, false, false), PAGE_READAHEAD, "{s}");
            assert_eq!(default_readahead(s, true, true), PAGE_READAHEAD, "{s}");
            assert_eq!(default_readahead(s, false, true), DEFAULT_READAHEAD, "{s}");
        }
        assert_eq!(default_readahead(Strategy::Original, false, false), DEFAULT_READAHEAD);
        assert_eq!(default_readahead(Strategy::Original, true, false), PAGE_READAHEAD);
        let o = MountRequest { readahead: Some(65536), ..request() }.options().unwrap();
        assert_eq!(o.readahead, Some(65536));
        assert_eq!(request().options().unwrap().readahead, None);
    }
}
