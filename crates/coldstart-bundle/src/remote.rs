//! Getting a bundle's bytes: over HTTP/1.1 with Range requests, or from a local directory.
//!
//! [`HttpRemote`] keeps a pool of keep-alive connections and lets several requests be in
//! flight at once (one per connection, up to [`FetchOptions::connections`]). [`DirRemote`]
//! reads a bundle on local disk through the same trait: the fake for unit tests, and the way
//! to mount a bundle that is already on this machine.
//!
//! # Bounds
//!
//! Every fetch ends, whatever the server does. They are properties of [`FetchOptions`] and of
//! each request's [`Span`], which any [`Remote`] honours:
//!
//! - connecting: at most [`FetchOptions::connect_timeout`];
//! - the response's head (status line and headers, at most 64 KiB): complete within
//!   [`FetchOptions::io_timeout`] of sending the request;
//! - the body: a byte at least every `io_timeout`, and at least
//!   [`FetchOptions::min_rate`]` x io_timeout` bytes in every `io_timeout`; so a body of `n`
//!   bytes arrives within `2 x io_timeout + n / min_rate` or fails;
//! - its length: at most what the span asks for ([`Span::Whole`]'s `max`, a range's length):
//!   more is an error as soon as the server says or sends it, so the memory of a fetch is
//!   bounded by the span, and a manifest's sizes are themselves bounded
//!   ([`crate::manifest::MAX_CHUNK_SIZE`], [`crate::start::MAX_MANIFEST`]);
//! - retries: [`with_retries`] tries at most `1 + retries` times ([`MAX_RETRIES`] at most),
//!   with a back-off from [`FetchOptions::backoff`] doubling to at most 5 s; a failure no
//!   attempt can mend (a certificate refused, the wrong scheme, a 404, a proxy's 4xx) is
//!   returned as it is, after the one attempt;
//! - cancellation: [`FetchOptions::cancel`] stops every fetch made with those options
//!   (connecting, waiting for bytes, backing off) within [`POLL`], with
//!   [`FetchError::Cancelled`].
//!
//! So one attempt of a fetch of `n` bytes takes at most `connect_timeout + 2 x io_timeout +
//! n / min_rate`, and [`get`] and [`get_chunk`] at most `1 + retries` of those plus the
//! back-off. [`get_chunk`] accepts only bytes whose SHA-256 matches the manifest.

mod dir;
mod http;
pub(crate) mod redact;
mod tcp;
mod tls;
mod x509;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coldstart_error::Category;

pub use dir::DirRemote;
pub(crate) use http::{agent, fetch_error, io_error, says_https_port, split_url, S3_HTTPS};
pub use http::{parse_response, HttpRemote};
pub use redact::redact_url;
pub use tls::{Peer, TlsProblem, TlsRefusal};

use crate::decode_chunk;
use crate::manifest::{Chunk, Manifest, ManifestError};

/// The most retries [`FetchOptions::retries`] may ask for.
pub const MAX_RETRIES: u32 = 10;
/// The default of [`FetchOptions::min_rate`]: 1 KiB/s, below a 56 kbit/s modem's share of
/// four connections.
pub const DEFAULT_MIN_RATE: u64 = 1024;
/// The most redirects one request follows.
pub const MAX_REDIRECTS: u32 = 5;
/// How often every wait of a fetch looks at its deadlines and at [`FetchOptions::cancel`].
pub const POLL: Duration = Duration::from_millis(100);

/// How to fetch.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Requests in flight at most (keep-alive connections in the pool).
    pub connections: usize,
    /// Retries after a failed attempt (at most [`MAX_RETRIES`]).
    pub retries: u32,
    /// Wait before the first retry; doubled for each further one, up to 5 s.
    pub backoff: Duration,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// Bound on waiting for a response's head after sending the request, and on every wait
    /// for the body's next bytes.
    pub io_timeout: Duration,
    /// The slowest body accepted, in bytes per second: one that brings fewer than
    /// `min_rate x io_timeout` bytes in an `io_timeout` fails (a server that drips).
    pub min_rate: u64,
    /// Stops every fetch made with these options ([`FetchError::Cancelled`]).
    pub cancel: Cancel,
    /// Certificates (PEM) trusted for https besides the system's roots: as authorities, and
    /// each as a server's own certificate too, as curl trusts its `--cacert` (docs/network.md,
    /// "Origins").
    pub ca_file: Option<PathBuf>,
    /// Where a remote says what the user should know but that does not stop it (an origin
    /// that ignores Range), once each.
    pub warn: Warn,
}

/// A callback for warnings; none by default (the library prints nothing itself).
#[derive(Clone, Default)]
pub struct Warn(Option<Arc<WarnFn>>);

type WarnFn = dyn Fn(&str) + Send + Sync;

impl Warn {
    pub fn new(f: impl Fn(&str) + Send + Sync + 'static) -> Warn {
        Warn(Some(Arc::new(f)))
    }

    /// Hands `message` to the callback, if there is one.
    pub fn say(&self, message: &str) {
        if let Some(f) = &self.0 {
            f(message)
        }
    }
}

impl std::fmt::Debug for Warn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Warn(set)" } else { "Warn(none)" })
    }
}

/// What [`FetchOptions::default`] takes for [`FetchOptions::ca_file`] and
/// [`FetchOptions::warn`], once [`set_defaults`] has set them.
static DEFAULTS: std::sync::OnceLock<(Option<PathBuf>, Warn)> = std::sync::OnceLock::new();

/// Sets, once per process, the CA file and the warning callback every [`FetchOptions`] made
/// by `default()` starts with: for a program whose options are built in several places. Later
/// calls change nothing.
pub fn set_defaults(ca_file: Option<PathBuf>, warn: Warn) {
    let _ = DEFAULTS.set((ca_file, warn));
}

/// What [`open`] takes for an `s3://` URL's endpoint and region over the environment's, once
/// [`set_s3_defaults`] has set them.
static S3_DEFAULTS: std::sync::OnceLock<crate::s3::S3Settings> = std::sync::OnceLock::new();

/// Sets, once per process, the endpoint and region [`open`] uses for `s3://` URLs over the
/// environment's (`--endpoint`, `--region`). Later calls change nothing.
pub fn set_s3_defaults(settings: crate::s3::S3Settings) {
    let _ = S3_DEFAULTS.set(settings);
}

impl Default for FetchOptions {
    fn default() -> Self {
        let (ca_file, warn) = DEFAULTS.get().cloned().unwrap_or_default();
        FetchOptions {
            connections: 4,
            retries: 3,
            backoff: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(10),
            min_rate: DEFAULT_MIN_RATE,
            cancel: Cancel::default(),
            ca_file,
            warn,
        }
    }
}

impl FetchOptions {
    /// The back-off before retry `n` (0-based): [`FetchOptions::backoff`] doubled `n` times,
    /// at most 5 s.
    pub fn backoff_before(&self, n: u32) -> Duration {
        self.backoff.saturating_mul(1u32 << n.min(20)).min(Duration::from_secs(5))
    }

    /// The longest one attempt to fetch `bytes` may take: connecting, the head, and the body
    /// at the slowest rate accepted (see the module's bounds).
    pub fn attempt_bound(&self, bytes: u64) -> Duration {
        let body = Duration::from_secs_f64(bytes as f64 / self.min_rate.max(1) as f64);
        self.connect_timeout + self.io_timeout * 2 + body
    }

    /// The longest a fetch of `bytes` with every retry may take.
    pub fn fetch_bound(&self, bytes: u64) -> Duration {
        let retries = self.retries.min(MAX_RETRIES);
        let backoff: Duration = (0..retries).map(|n| self.backoff_before(n)).sum();
        self.attempt_bound(bytes) * (retries + 1) + backoff
    }
}

/// A flag shared by everything that should stop together (a mount's fetches, a pack): once
/// set, it stays set. A [`child`](Cancel::child) stops with it, and can also be stopped alone.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    own: Arc<AtomicBool>,
    /// The flags of the `Cancel`s this one is a child of, nearest first.
    parents: Vec<Arc<AtomicBool>>,
}

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// A flag that is set when this one is, and that [`cancel`](Cancel::cancel) sets without
    /// setting this one: a mount stops its own fetches when it goes away, without telling its
    /// caller that the user asked to stop.
    pub fn child(&self) -> Cancel {
        let mut parents = vec![self.own.clone()];
        parents.extend(self.parents.iter().cloned());
        Cancel { own: Arc::new(AtomicBool::new(false)), parents }
    }

    /// Stops everything that watches this flag (and its children).
    pub fn cancel(&self) {
        self.own.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.own.load(Ordering::Relaxed) || self.parents.iter().any(|p| p.load(Ordering::Relaxed))
    }

    /// Sleeps `d`, waking every [`POLL`] to look at the flag; `true` if it was set.
    pub fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            if self.is_cancelled() {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            std::thread::sleep((end - now).min(POLL));
        }
    }
}

/// What part of a bundle file a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// The whole file, which may not be longer than `max` bytes.
    Whole { max: u64 },
    /// Bytes `start..end`.
    Range(u64, u64),
}

impl Span {
    /// The most bytes the body may bring.
    pub fn max_len(self) -> u64 {
        match self {
            Span::Whole { max } => max,
            Span::Range(s, e) => e.saturating_sub(s),
        }
    }
}

/// Counters of what was fetched.
#[derive(Debug, Default)]
pub struct FetchStats {
    /// Requests sent (attempts, including retries).
    pub requests: AtomicU64,
    /// Body bytes received.
    pub bytes: AtomicU64,
    /// Attempts that failed and were retried or given up.
    pub failures: AtomicU64,
}

/// Why bytes could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "bad bundle URL `{0}`: expected http[s]://HOST[:PORT][/PATH][?QUERY] (PORT from 1 to 65535), s3://BUCKET[/PREFIX] or a bundle directory"
    )]
    Url(String),
    #[error("--ca-file {path}: {detail}")]
    CaFile { path: String, detail: String },
    #[error("{url}: {source}")]
    Io { url: String, source: io::Error },
    #[error("{url}: {failure}")]
    Connect { url: String, failure: Box<ConnectFailure> },
    #[error("{url}: {refusal}")]
    Tls { url: String, refusal: Box<TlsRefusal> },
    #[error("{url}: {refusal}")]
    Proxy { url: String, refusal: Box<ProxyRefusal> },
    #[error("{url}: the server answers https, not http, on this port: {fix}")]
    HttpsPort { url: String, fix: String },
    #[error("{}", not_a_bundle(path, *why))]
    NotABundle { path: String, why: NotABundle },
    #[error("{path}: no such file in the bundle directory")]
    NoSuchFile { path: String },
    #[error("{url}: {what}")]
    Timeout { url: String, what: String },
    #[error("{url}: the server answered {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: the server redirects more than {MAX_REDIRECTS} times (last to `{}`); give the URL of the bundle itself", crate::manifest::shown(&redact_url(location)))]
    Redirect { url: String, location: String },
    #[error("{url}: malformed response: {detail}")]
    Protocol { url: String, detail: String },
    #[error("{url}: the bytes do not match their SHA-256 (corrupt or changed on the server)")]
    Corrupt { url: String },
    #[error("{what}: gave up after {}: {last}", coldstart_units::count(u64::from(*attempts), "attempt"))]
    GaveUp { what: String, attempts: u32, last: Box<FetchError> },
    #[error("{url}: the transfer was stopped by its reader")]
    Aborted { url: String },
    #[error("{url}: stopped: coldstart was interrupted")]
    Cancelled { url: String },
    #[error("manifest: {0}")]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    S3(Box<crate::s3::S3Error>),
}

/// Why a local path is not a bundle directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotABundle {
    /// Nothing is there.
    Missing,
    /// A file, not a directory.
    File,
    /// A directory without `manifest.json` (a program's directory, say).
    NoManifest,
}

fn not_a_bundle(path: &str, why: NotABundle) -> String {
    let give = "give the directory `coldstart pack -o` wrote, or the bundle's http[s]:// or \
                s3:// URL";
    match why {
        // `HOST:PORT/PATH`: a URL without its scheme, most likely.
        NotABundle::Missing if path.split('/').next().is_some_and(|h| h.contains(':')) => {
            format!("{path}: no such directory, and not a URL: for a server, write http://{path}")
        }
        NotABundle::Missing => format!("{path}: no such directory, and not a URL: {give}"),
        NotABundle::File => format!("{path} is a file, not a bundle directory: {give}"),
        NotABundle::NoManifest => format!(
            "{path} is a directory but not a bundle (no manifest.json in it): {give}; to make \
             one of a program's directory, `coldstart pack {path} -o BUNDLE`"
        ),
    }
}

/// No connection could be made to the server, or to the proxy.
#[derive(Debug)]
pub struct ConnectFailure {
    pub peer: Peer,
    /// The environment variable that names `peer` as the proxy, when it is the proxy.
    pub proxy: Option<&'static str>,
    pub source: io::Error,
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (peer, e) = (&self.peer, &self.source);
        match self.proxy {
            Some(var) => write!(
                f,
                "cannot connect to {peer} (the proxy of {var}): {e}; is the proxy running? fix \
                 or unset {var}, or list the host in NO_PROXY"
            ),
            None => write!(
                f,
                "cannot connect to {peer}: {e}; is the server running, and are the URL's host \
                 and port its own?"
            ),
        }
    }
}

/// The proxy of the environment would not open a tunnel (`CONNECT`) to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRefusal {
    pub peer: Peer,
    /// The environment variable it comes from.
    pub var: &'static str,
    /// Its answer to `CONNECT`, if it gave one.
    pub status: Option<u16>,
    /// What happened, in words.
    pub detail: String,
}

impl ProxyRefusal {
    /// Whether another attempt may pass: not when the proxy answered 4xx.
    fn retriable(&self) -> bool {
        !self.status.is_some_and(|s| (400..500).contains(&s))
    }
}

impl std::fmt::Display for ProxyRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (peer, var) = (&self.peer, self.var);
        write!(f, "the proxy {peer} ({var}) did not open a tunnel to the server: {}", self.detail)?;
        match self.status {
            Some(407) => write!(
                f,
                "; give the proxy's user and password in {var} (http://USER:PASSWORD@HOST:PORT)"
            ),
            Some(400..=499) => write!(
                f,
                "; is it a proxy that answers CONNECT? fix or unset {var}, or list the host in \
                 NO_PROXY"
            ),
            _ => Ok(()),
        }
    }
}

impl From<crate::s3::S3Error> for FetchError {
    fn from(e: crate::s3::S3Error) -> Self {
        FetchError::S3(Box::new(e))
    }
}

impl FetchError {
    /// What kind of failure this is (the exit code follows from it). A URL that cannot name a
    /// bundle (malformed, redirected elsewhere, or a server that has no such file) is bad
    /// input; a server or network that misbehaves is the environment.
    pub fn category(&self) -> Category {
        match self {
            FetchError::Url(_)
            | FetchError::CaFile { .. }
            | FetchError::Redirect { .. }
            | FetchError::HttpsPort { .. }
            | FetchError::NotABundle { .. }
            | FetchError::NoSuchFile { .. } => Category::Usage,
            FetchError::Tls { refusal, .. } => refusal.problem.category(),
            FetchError::Proxy { refusal, .. } if !refusal.retriable() => Category::Usage,
            FetchError::Status { status: 404 | 410, .. } => Category::Usage,
            FetchError::Manifest(e) => e.category(),
            FetchError::S3(e) => e.category(),
            FetchError::GaveUp { last, .. } => last.category(),
            FetchError::Io { .. }
            | FetchError::Connect { .. }
            | FetchError::Proxy { .. }
            | FetchError::Timeout { .. }
            | FetchError::Status { .. }
            | FetchError::Protocol { .. }
            | FetchError::Corrupt { .. }
            | FetchError::Aborted { .. }
            | FetchError::Cancelled { .. } => Category::Environment,
        }
    }

    /// Whether the server answered with an error status (the last attempt's, after retries):
    /// the file is not there, as opposed to a failed transfer.
    pub fn is_status(&self) -> bool {
        match self {
            FetchError::Status { .. } | FetchError::S3(_) | FetchError::NoSuchFile { .. } => true,
            FetchError::GaveUp { last, .. } => last.is_status(),
            _ => false,
        }
    }

    /// Whether the server said the file is not there (404 or 410, the last attempt's).
    pub fn is_not_found(&self) -> bool {
        match self {
            FetchError::Status { status, .. } => matches!(status, 404 | 410),
            FetchError::NoSuchFile { .. } => true,
            FetchError::S3(e) => e.is_not_found(),
            FetchError::GaveUp { last, .. } => last.is_not_found(),
            _ => false,
        }
    }

    /// Whether it was stopped by [`FetchOptions::cancel`].
    pub fn is_cancelled(&self) -> bool {
        match self {
            FetchError::Cancelled { .. } => true,
            FetchError::GaveUp { last, .. } => last.is_cancelled(),
            _ => false,
        }
    }

    /// Whether the failure is the origin's as a whole, whatever file was asked for (its TLS,
    /// its proxy, its scheme): asking it for another file would fail the same way.
    pub fn refuses_origin(&self) -> bool {
        match self {
            FetchError::Tls { .. } | FetchError::HttpsPort { .. } => true,
            FetchError::Proxy { .. } => !self.retriable(),
            FetchError::GaveUp { last, .. } => last.refuses_origin(),
            _ => false,
        }
    }

    /// Whether another attempt may succeed.
    fn retriable(&self) -> bool {
        match self {
            FetchError::Proxy { refusal, .. } => refusal.retriable(),
            FetchError::Io { .. }
            | FetchError::Connect { .. }
            | FetchError::Timeout { .. }
            | FetchError::Protocol { .. }
            | FetchError::Corrupt { .. } => true,
            FetchError::Status { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            _ => false,
        }
    }
}

/// Where a fetch hands the body as it arrives; it returns `false` to stop the fetch.
pub type Sink<'a> = &'a mut dyn FnMut(&[u8]) -> bool;

/// A source of a bundle's bytes. Every implementation keeps the bounds of the module
/// documentation: its waits end, it never hands over more than `span` allows, and it stops
/// within [`POLL`] of [`FetchOptions::cancel`].
pub trait Remote: Send + Sync {
    /// One attempt to read `span` of the bundle file `path`, handing the body to `sink` as it
    /// arrives (`sink` returns `false` to stop: [`FetchError::Aborted`]). Returns the body
    /// length.
    fn fetch(&self, path: &str, span: Span, sink: Sink<'_>) -> Result<u64, FetchError>;
    /// The options this remote was made with.
    fn options(&self) -> &FetchOptions;
    /// What it has fetched.
    fn stats(&self) -> &FetchStats;
    /// A human-readable name of `path` (its URL).
    fn describe(&self, path: &str) -> String;
}

/// Runs `attempt` until it succeeds, fails for good, the retries run out, or the fetches are
/// cancelled (then [`FetchError::Cancelled`], not wrapped).
pub fn with_retries<T>(
    opts: &FetchOptions,
    stats: &FetchStats,
    what: &str,
    mut attempt: impl FnMut() -> Result<T, FetchError>,
) -> Result<T, FetchError> {
    let cancelled = || FetchError::Cancelled { url: what.to_owned() };
    let mut attempts = 0;
    loop {
        if opts.cancel.is_cancelled() {
            return Err(cancelled());
        }
        attempts += 1;
        match attempt() {
            Ok(v) => return Ok(v),
            Err(e) if e.is_cancelled() => return Err(e),
            Err(e) => {
                // A transfer its reader stopped did not fail.
                if !matches!(e, FetchError::Aborted { .. }) {
                    stats.failures.fetch_add(1, Ordering::Relaxed);
                }
                // A failure no attempt can mend, at the first: nothing was given up.
                if !e.retriable() && attempts == 1 {
                    return Err(e);
                }
                if !e.retriable() || attempts > opts.retries.min(MAX_RETRIES) {
                    return Err(FetchError::GaveUp {
                        what: what.to_owned(),
                        attempts,
                        last: Box::new(e),
                    });
                }
                if opts.cancel.sleep(opts.backoff_before(attempts - 1)) {
                    return Err(cancelled());
                }
            }
        }
    }
}

/// Reads `span` of `path` whole, with retries.
pub fn get(remote: &dyn Remote, path: &str, span: Span) -> Result<Vec<u8>, FetchError> {
    with_retries(remote.options(), remote.stats(), &remote.describe(path), || {
        let mut body = Vec::new();
        remote.fetch(path, span, &mut |b| {
            body.extend_from_slice(b);
            true
        })?;
        Ok(body)
    })
}

/// A manifest and where it came from.
#[derive(Debug, Clone)]
pub struct FetchedManifest {
    pub manifest: Manifest,
    /// The bundle file it was read from: `start`, `manifest.json.zst` or `manifest.json`.
    pub source: &'static str,
    /// Why a preferred copy was not used, if one was not.
    pub fallback: Option<String>,
    /// Body bytes the manifest's requests received (failed copies included).
    pub bytes: u64,
    /// The SHA-256 of `manifest.json`'s bytes as fetched (decoded), what a signature covers.
    pub sha256: [u8; 32],
}

/// Fetches and validates the bundle's manifest: `manifest.json.zst` (one zstd frame), or
/// `manifest.json` when the server does not have it (a bundle packed before it) or it does not
/// decode. A compressed manifest that decodes but is not valid is refused like `manifest.json`.
/// Each copy may be at most [`crate::start::MAX_MANIFEST`] bytes.
pub fn get_manifest(remote: &dyn Remote) -> Result<FetchedManifest, FetchError> {
    use crate::start::{decode_compressed_manifest, MANIFEST_ZST};
    let whole = Span::Whole { max: crate::start::MAX_MANIFEST };
    let before = remote.stats().bytes.load(Ordering::Relaxed);
    let bytes = |r: &dyn Remote| r.stats().bytes.load(Ordering::Relaxed) - before;
    let fallback = match get(remote, MANIFEST_ZST, whole) {
        Ok(z) => match decode_compressed_manifest(&z) {
            Ok(json) => {
                let manifest = Manifest::parse(&json)?;
                let bytes = bytes(remote);
                return Ok(FetchedManifest {
                    manifest,
                    source: MANIFEST_ZST,
                    fallback: None,
                    bytes,
                    sha256: <sha2::Sha256 as sha2::Digest>::digest(&json).into(),
                });
            }
            Err(e) => format!("{MANIFEST_ZST}: {e}"),
        },
        Err(e) if e.is_status() => e.to_string(),
        Err(e) => return Err(e),
    };
    let json = get(remote, crate::start::MANIFEST_JSON, whole)?;
    Ok(FetchedManifest {
        manifest: Manifest::parse(&json)?,
        source: crate::start::MANIFEST_JSON,
        fallback: Some(fallback),
        bytes: bytes(remote),
        sha256: <sha2::Sha256 as sha2::Digest>::digest(&json).into(),
    })
}

/// Fetches one chunk of `manifest` (a `Range` of its object: [`Manifest::locate`]),
/// accepting only bytes that match its SHA-256. The bytes are decoded first if the bundle is
/// compressed.
pub fn get_chunk(
    remote: &dyn Remote,
    manifest: &Manifest,
    chunk: &Chunk,
) -> Result<Vec<u8>, FetchError> {
    get_chunk_while(remote, manifest, chunk, &|| true)
}

/// [`get_chunk`], given up (an [`FetchError::Aborted`], not retried) as soon as `go` returns
/// `false` while the body arrives: background work that is no longer wanted. The response
/// may bring no more than the chunk's stored length.
pub fn get_chunk_while(
    remote: &dyn Remote,
    manifest: &Manifest,
    chunk: &Chunk,
    go: &dyn Fn() -> bool,
) -> Result<Vec<u8>, FetchError> {
    let compression = manifest.compression;
    let (path, at) = manifest.locate(chunk);
    let url = remote.describe(&path);
    let span = Span::Range(at, at + chunk.stored_len());
    with_retries(remote.options(), remote.stats(), &url, || {
        let mut body = Vec::with_capacity(chunk.stored_len() as usize);
        remote.fetch(&path, span, &mut |b| {
            body.extend_from_slice(b);
            go()
        })?;
        decode_chunk(compression, chunk, &body)
            .ok_or_else(|| FetchError::Corrupt { url: url.clone() })
    })
}

/// Opens the right remote for `url`: `http://...` or `https://...`, `s3://BUCKET/PREFIX`
/// (its settings from the environment under those of [`set_s3_defaults`]: see
/// [`crate::s3`]), or a path to a bundle directory.
pub fn open(url: &str, opts: FetchOptions) -> Result<Box<dyn Remote>, FetchError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(Box::new(HttpRemote::new(url, opts)?))
    } else if url.starts_with("s3://") {
        use crate::s3::{Bucket, ProcessEnv, S3Url};
        let s3 = S3Url::parse(url)?;
        let settings = S3_DEFAULTS.get().cloned().unwrap_or_default();
        let bucket = Bucket::resolve(&s3, &settings, &ProcessEnv)?;
        Ok(Box::new(HttpRemote::s3(&s3, bucket, opts)?))
    } else if url.contains("://") && !url.starts_with("file://") {
        Err(FetchError::Url(redact_url(url)))
    } else {
        let dir = Path::new(url.strip_prefix("file://").unwrap_or(url));
        let why = match std::fs::metadata(dir) {
            Err(_) => Some(NotABundle::Missing),
            Ok(m) if !m.is_dir() => Some(NotABundle::File),
            Ok(_) => {
                let names = [crate::start::MANIFEST_JSON, crate::start::MANIFEST_ZST];
                (!names.iter().any(|n| dir.join(n).is_file())).then_some(NotABundle::NoManifest)
            }
        };
        match why {
            Some(why) => Err(FetchError::NotABundle { path: dir.display().to_string(), why }),
            None => Ok(Box::new(DirRemote::new(dir, opts))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_cancel_stops_with_its_parent_and_alone_without_it() {
        let parent = Cancel::new();
        let child = parent.child();
        let grandchild = child.child();
        child.cancel();
        assert!(child.is_cancelled() && grandchild.is_cancelled());
        assert!(!parent.is_cancelled(), "a child does not stop its parent");
        let other = parent.child();
        assert!(!other.is_cancelled());
        parent.cancel();
        assert!(other.is_cancelled() && parent.clone().is_cancelled());
    }

    #[test]
    fn retries_back_off_and_stop_when_cancelled() {
        let opts = FetchOptions { retries: 50, ..FetchOptions::default() };
        assert_eq!(opts.backoff_before(0), Duration::from_millis(100));
        assert_eq!(opts.backoff_before(3), Duration::from_millis(800));
        assert_eq!(opts.backoff_before(30), Duration::from_secs(5));
        // More retries than the cap are not made.
        let stats = FetchStats::default();
        let quick = FetchOptions { retries: 50, backoff: Duration::ZERO, ..Default::default() };
        let mut n = 0;
        let err = with_retries(&quick, &stats, "x", || -> Result<(), _> {
            n += 1;
            Err(FetchError::Corrupt { url: "x".into() })
        })
        .unwrap_err();
        assert_eq!(n, MAX_RETRIES + 1, "{err}");
        // A cancel during the back-off ends it within a poll.
        let cancel = opts.cancel.clone();
        let t = Instant::now();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            cancel.cancel();
        });
        let slow = FetchOptions { backoff: Duration::from_secs(60), ..opts };
        let err = with_retries(&slow, &stats, "x", || -> Result<(), _> {
            Err(FetchError::Corrupt { url: "x".into() })
        })
        .unwrap_err();
        h.join().unwrap();
        assert!(err.is_cancelled(), "{err}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    #[test]
    fn the_bound_of_a_fetch_adds_every_attempt_and_back_off() {
        let o = FetchOptions {
            retries: 2,
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(2),
            min_rate: 1000,
            ..FetchOptions::default()
        };
        assert_eq!(o.attempt_bound(10_000), Duration::from_secs(15));
        assert_eq!(o.fetch_bound(10_000), Duration::from_millis(45_300));
    }

    #[test]
    fn a_local_file_longer_than_the_span_allows_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), vec![1u8; 100]).unwrap();
        let r = DirRemote::new(d.path(), FetchOptions::default());
        assert_eq!(get(&r, "f", Span::Whole { max: 100 }).unwrap().len(), 100);
        let err = get(&r, "f", Span::Whole { max: 99 }).unwrap_err();
        assert!(err.to_string().contains("more than the 99"), "{err}");
        assert_eq!(get(&r, "f", Span::Range(10, 20)).unwrap(), vec![1u8; 10]);
    }

    #[test]
    fn a_url_that_names_no_bundle_is_bad_input_and_a_failing_server_the_environment() {
        let status = |s| FetchError::Status { url: "u".into(), status: s };
        let gave_up = |e| FetchError::GaveUp { what: "u".into(), attempts: 1, last: Box::new(e) };
        assert_eq!(gave_up(status(404)).category(), Category::Usage);
        assert_eq!(gave_up(status(503)).category(), Category::Environment);
        let timeout = FetchError::Timeout { url: "u".into(), what: "w".into() };
        assert_eq!(gave_up(timeout).category(), Category::Environment);
        let redirect = FetchError::Redirect { url: "u".into(), location: "/x".into() };
        assert_eq!(redirect.category(), Category::Usage);
    }

    #[test]
    fn credentials_and_queries_of_a_url_are_never_shown() {
        for (url, shown) in [
            ("http://user:secretpw@127.0.0.1:1/", "http://***@127.0.0.1:1/"),
            ("https://token@h/app/manifest.json?sig=abc#x", "https://***@h/app/manifest.json?..."),
            ("http://a@b@h:8080?q", "http://***@h:8080?..."),
            ("http://h/p@q", "http://h/p@q"),
            ("s3://bucket/prefix", "s3://bucket/prefix"),
            ("/srv/b@x", "/srv/b@x"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
        // What a failed fetch says: a connection refused, a malformed URL, a redirect away.
        let opts = FetchOptions { retries: 0, ..FetchOptions::default() };
        let r = open("http://user:secretpw@127.0.0.1:1/b/?sig=secretsig", opts.clone()).unwrap();
        let e = get(r.as_ref(), "manifest.json", Span::Whole { max: 10 }).unwrap_err();
        let bad = open("http://user:secretpw@h:1:2/", opts.clone()).err().unwrap();
        let redirect = FetchError::Redirect {
            url: r.describe("x"),
            location: "http://user:secretpw@elsewhere/".into(),
        };
        let debug = format!("{:?}", HttpRemote::new("http://user:secretpw@h/", opts).unwrap());
        for said in [e.to_string(), bad.to_string(), redirect.to_string(), debug] {
            assert!(!said.contains("secret"), "{said}");
            assert!(said.contains("***@"), "{said}");
        }
    }

    #[test]
    fn a_port_no_socket_can_have_is_bad_input() {
        let opts = FetchOptions::default();
        for bad in
            ["http://127.0.0.1:99999/", "http://127.0.0.1:0/", "http://h:x/", "http://u:p@h:70000/"]
        {
            let e = open(bad, opts.clone()).err().unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(
                matches!(e, FetchError::Url(_)) && e.category() == Category::Usage,
                "{bad}: {e}"
            );
        }
        for good in [
            "http://127.0.0.1:8080/",
            "http://[::1]:8080/",
            "http://[::1]/",
            "http://h:/",
            "http://u:p@h/",
        ] {
            assert!(open(good, opts.clone()).is_ok(), "{good}");
        }
    }
}
