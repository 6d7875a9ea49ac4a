//! Getting a bundle's bytes: over HTTP/1.1 with Range requests, or from a local directory.
//!
//! [`HttpRemote`] keeps a pool of keep-alive connections and lets several requests be in
//! flight at once (one per connection, up to [`FetchOptions::connections`]). Every wait is
//! bounded: connecting by [`FetchOptions::connect_timeout`], every read and write by
//! [`FetchOptions::io_timeout`]. [`get`] and [`get_chunk`] retry a failed attempt with
//! exponential back-off, at most [`FetchOptions::retries`] times, and [`get_chunk`] accepts
//! only bytes whose SHA-256 matches the manifest.
//!
//! [`DirRemote`] reads a bundle on local disk through the same trait: the fake for unit tests,
//! and the way to mount a bundle that is already on this machine.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use coldstart_error::Category;

use crate::manifest::{Chunk, Compression, Manifest, ManifestError};
use crate::{blob_path, decode_chunk};

/// How to fetch.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Requests in flight at most (keep-alive connections in the pool).
    pub connections: usize,
    /// Retries after a failed attempt.
    pub retries: u32,
    /// Wait before the first retry; doubled for each further one.
    pub backoff: Duration,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// Bound on each read or write of a connection.
    pub io_timeout: Duration,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            connections: 4,
            retries: 3,
            backoff: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(10),
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
    #[error("bad bundle URL `{0}`: expected http://HOST[:PORT][/PATH] or a bundle directory")]
    Url(String),
    #[error("{url}: {source}")]
    Io { url: String, source: io::Error },
    #[error("{url}: the server answered {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: malformed response: {detail}")]
    Protocol { url: String, detail: String },
    #[error("{url}: the bytes do not match their SHA-256 (corrupt or changed on the server)")]
    Corrupt { url: String },
    #[error("{what}: gave up after {attempts} attempts: {last}")]
    GaveUp { what: String, attempts: u32, last: Box<FetchError> },
    #[error("{url}: the transfer was stopped by its reader")]
    Aborted { url: String },
    #[error("manifest: {0}")]
    Manifest(#[from] ManifestError),
}

impl FetchError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            FetchError::Url(_) => Category::Usage,
            FetchError::Manifest(e) => e.category(),
            FetchError::Io { .. }
            | FetchError::Status { .. }
            | FetchError::Protocol { .. }
            | FetchError::Corrupt { .. }
            | FetchError::GaveUp { .. }
            | FetchError::Aborted { .. } => Category::Environment,
        }
    }
}

impl FetchError {
    /// Whether the server answered with an error status (the last attempt's, after retries):
    /// the file is not there, as opposed to a failed transfer.
    pub fn is_status(&self) -> bool {
        match self {
            FetchError::Status { .. } => true,
            FetchError::GaveUp { last, .. } => last.is_status(),
            _ => false,
        }
    }

    /// Whether another attempt may succeed.
    fn retriable(&self) -> bool {
        match self {
            FetchError::Io { .. } | FetchError::Protocol { .. } | FetchError::Corrupt { .. } => {
                true
            }
            FetchError::Status { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            _ => false,
        }
    }
}

/// A source of a bundle's bytes.
pub trait Remote: Send + Sync {
    /// One attempt to read `range` (start, end exclusive; whole file if `None`) of the bundle
    /// file `path`, handing the body to `sink` as it arrives. Returns the body length.
    fn fetch(
        &self,
        path: &str,
        range: Option<(u64, u64)>,
        sink: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<u64, FetchError>;
    /// The options this remote was made with.
    fn options(&self) -> &FetchOptions;
    /// What it has fetched.
    fn stats(&self) -> &FetchStats;
    /// A human-readable name of `path` (its URL).
    fn describe(&self, path: &str) -> String;
}

/// Runs `attempt` until it succeeds, fails for good, or the retries run out.
pub fn with_retries<T>(
    opts: &FetchOptions,
    stats: &FetchStats,
    what: &str,
    mut attempt: impl FnMut() -> Result<T, FetchError>,
) -> Result<T, FetchError> {
    let mut wait = opts.backoff;
    let mut attempts = 0;
    loop {
        attempts += 1;
        match attempt() {
            Ok(v) => return Ok(v),
            Err(e) => {
                // A transfer its reader stopped did not fail.
                if !matches!(e, FetchError::Aborted { .. }) {
                    stats.failures.fetch_add(1, Ordering::Relaxed);
                }
                if !e.retriable() || attempts > opts.retries {
                    return Err(FetchError::GaveUp {
                        what: what.to_owned(),
                        attempts,
                        last: Box::new(e),
                    });
                }
                std::thread::sleep(wait);
                wait = wait.saturating_mul(2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Reads `range` of `path` whole, with retries.
pub fn get(
    remote: &dyn Remote,
    path: &str,
    range: Option<(u64, u64)>,
) -> Result<Vec<u8>, FetchError> {
    with_retries(remote.options(), remote.stats(), &remote.describe(path), || {
        let mut body = Vec::new();
        remote.fetch(path, range, &mut |b| {
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
}

/// Fetches and validates the bundle's manifest: `manifest.json.zst` (one zstd frame), or
/// `manifest.json` when the server does not have it (a bundle packed before it) or it does not
/// decode. A compressed manifest that decodes but is not valid is refused like `manifest.json`.
pub fn get_manifest(remote: &dyn Remote) -> Result<FetchedManifest, FetchError> {
    use crate::start::{parse_compressed_manifest, CompressedManifestError, MANIFEST_ZST};
    let before = remote.stats().bytes.load(Ordering::Relaxed);
    let bytes = |r: &dyn Remote| r.stats().bytes.load(Ordering::Relaxed) - before;
    let fallback = match get(remote, MANIFEST_ZST, None) {
        Ok(z) => match parse_compressed_manifest(&z) {
            Ok(manifest) => {
                let bytes = bytes(remote);
                return Ok(FetchedManifest {
                    manifest,
                    source: MANIFEST_ZST,
                    fallback: None,
                    bytes,
                });
            }
            Err(CompressedManifestError::Manifest(e)) => return Err(e.into()),
            Err(CompressedManifestError::Start(e)) => format!("{MANIFEST_ZST}: {e}"),
        },
        Err(e) if e.is_status() => e.to_string(),
        Err(e) => return Err(e),
    };
    let json = get(remote, crate::start::MANIFEST_JSON, None)?;
    Ok(FetchedManifest {
        manifest: Manifest::parse(&json)?,
        source: crate::start::MANIFEST_JSON,
        fallback: Some(fallback),
        bytes: bytes(remote),
    })
}

/// Fetches one chunk's blob, accepting only bytes that match its SHA-256.
/// The bytes are decoded first if the bundle is compressed.
pub fn get_chunk(
    remote: &dyn Remote,
    compression: Compression,
    chunk: &Chunk,
) -> Result<Vec<u8>, FetchError> {
    get_chunk_while(remote, compression, chunk, &|| true)
}

/// [`get_chunk`], given up (an [`FetchError::Aborted`], not retried) as soon as `go` returns
/// `false` while the body arrives: background work that is no longer wanted.
pub fn get_chunk_while(
    remote: &dyn Remote,
    compression: Compression,
    chunk: &Chunk,
    go: &dyn Fn() -> bool,
) -> Result<Vec<u8>, FetchError> {
    let path = blob_path(&chunk.sha256);
    let url = remote.describe(&path);
    with_retries(remote.options(), remote.stats(), &url, || {
        let mut body = Vec::with_capacity(chunk.stored_len() as usize);
        remote.fetch(&path, None, &mut |b| {
            body.extend_from_slice(b);
            go()
        })?;
        decode_chunk(compression, chunk, &body)
            .ok_or_else(|| FetchError::Corrupt { url: url.clone() })
    })
}

/// Opens the right remote for `url`: `http://...`, or a path to a bundle directory.
pub fn open(url: &str, opts: FetchOptions) -> Result<Box<dyn Remote>, FetchError> {
    if url.starts_with("http://") {
        Ok(Box::new(HttpRemote::new(url, opts)?))
    } else if let Some(p) = url.strip_prefix("file://") {
        Ok(Box::new(DirRemote::new(Path::new(p), opts)))
    } else if url.contains("://") {
        Err(FetchError::Url(url.to_owned()))
    } else {
        Ok(Box::new(DirRemote::new(Path::new(url), opts)))
    }
}

/// A bundle in a local directory.
#[derive(Debug)]
pub struct DirRemote {
    root: PathBuf,
    opts: FetchOptions,
    stats: FetchStats,
}

impl DirRemote {
    pub fn new(root: &Path, opts: FetchOptions) -> DirRemote {
        DirRemote { root: root.to_path_buf(), opts, stats: FetchStats::default() }
    }
}

impl Remote for DirRemote {
    fn fetch(
        &self,
        path: &str,
        range: Option<(u64, u64)>,
        sink: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<u64, FetchError> {
        use std::io::{Seek, SeekFrom};
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let url = self.describe(path);
        if !crate::manifest::is_safe_path(path) {
            return Err(FetchError::Status { url, status: 404 });
        }
        let io = |source| FetchError::Io { url: url.clone(), source };
        let mut f = std::fs::File::open(self.root.join(path)).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                FetchError::Status { url: url.clone(), status: 404 }
            } else {
                io(e)
            }
        })?;
        let size = f.metadata().map_err(io)?.len();
        let (start, end) = range.unwrap_or((0, size));
        if start > end || end > size {
            return Err(FetchError::Status { url, status: 416 });
        }
        f.seek(SeekFrom::Start(start)).map_err(io)?;
        let mut left = end - start;
        let mut buf = vec![0u8; 64 * 1024];
        while left > 0 {
            let n = f.read(&mut buf[..left.min(65536) as usize]).map_err(io)?;
            if n == 0 {
                return Err(FetchError::Protocol { url, detail: "file shrank".into() });
            }
            self.stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
            if !sink(&buf[..n]) {
                return Err(FetchError::Aborted { url });
            }
            left -= n as u64;
        }
        Ok(end - start)
    }

    fn options(&self) -> &FetchOptions {
        &self.opts
    }

    fn stats(&self) -> &FetchStats {
        &self.stats
    }

    fn describe(&self, path: &str) -> String {
        self.root.join(path).display().to_string()
    }
}

/// A bundle served over HTTP/1.1.
#[derive(Debug)]
pub struct HttpRemote {
    host: String,
    addrs: Vec<SocketAddr>,
    prefix: String,
    opts: FetchOptions,
    stats: FetchStats,
    idle: Mutex<Vec<TcpStream>>,
    in_flight: Mutex<usize>,
    slot_freed: Condvar,
}

impl HttpRemote {
    /// A remote for `http://HOST[:PORT][/PATH]`, the URL of the bundle directory.
    pub fn new(url: &str, opts: FetchOptions) -> Result<HttpRemote, FetchError> {
        let bad = || FetchError::Url(url.to_owned());
        let rest = url.strip_prefix("http://").ok_or_else(bad)?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if hostport.is_empty() {
            return Err(bad());
        }
        let with_port = if hostport.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            hostport.to_owned()
        } else {
            format!("{hostport}:80")
        };
        let addrs: Vec<SocketAddr> = with_port
            .to_socket_addrs()
            .map_err(|source| FetchError::Io { url: url.to_owned(), source })?
            .collect();
        if addrs.is_empty() {
            return Err(bad());
        }
        let mut prefix = path.to_owned();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Ok(HttpRemote {
            host: hostport.to_owned(),
            addrs,
            prefix,
            opts,
            stats: FetchStats::default(),
            idle: Mutex::new(Vec::new()),
            in_flight: Mutex::new(0),
            slot_freed: Condvar::new(),
        })
    }

    fn connect(&self, url: &str) -> Result<TcpStream, FetchError> {
        let mut last = None;
        for a in &self.addrs {
            match TcpStream::connect_timeout(a, self.opts.connect_timeout) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    s.set_read_timeout(Some(self.opts.io_timeout))
                        .and_then(|_| s.set_write_timeout(Some(self.opts.io_timeout)))
                        .map_err(|source| FetchError::Io { url: url.to_owned(), source })?;
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(FetchError::Io { url: url.to_owned(), source: last.expect("at least one address") })
    }

    fn acquire_slot(&self) {
        let mut n = self.in_flight.lock().unwrap();
        while *n >= self.opts.connections.max(1) {
            n = self.slot_freed.wait(n).unwrap();
        }
        *n += 1;
    }

    fn release_slot(&self) {
        *self.in_flight.lock().unwrap() -= 1;
        self.slot_freed.notify_one();
    }

    fn exchange(
        &self,
        stream: &mut TcpStream,
        url: &str,
        target: &str,
        range: Option<(u64, u64)>,
        sink: &mut dyn FnMut(&[u8]) -> bool,
        started: &mut bool,
    ) -> Result<(u64, bool), FetchError> {
        let io = |source| FetchError::Io { url: url.to_owned(), source };
        let proto = |detail: String| FetchError::Protocol { url: url.to_owned(), detail };
        let mut req = format!("GET {target} HTTP/1.1\r\nHost: {}\r\n", self.host);
        if let Some((s, e)) = range {
            if e == s {
                return Ok((0, true));
            }
            req.push_str(&format!("Range: bytes={}-{}\r\n", s, e - 1));
        }
        req.push_str("User-Agent: coldstart\r\n\r\n");
        stream.write_all(req.as_bytes()).map_err(io)?;
        // Headers.
        let mut buf = Vec::with_capacity(4096);
        let mut tmp = [0u8; 16 * 1024];
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i;
            }
            if buf.len() > 64 * 1024 {
                return Err(proto("headers longer than 64 KiB".into()));
            }
            let n = stream.read(&mut tmp).map_err(io)?;
            if n == 0 {
                return Err(io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before the response",
                )));
            }
            *started = true;
            buf.extend_from_slice(&tmp[..n]);
        };
        let head = std::str::from_utf8(&buf[..head_end])
            .map_err(|_| proto("headers are not UTF-8".into()))?;
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or("");
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| proto(format!("bad status line `{status_line}`")))?;
        let mut length = None;
        let mut close = status_line.starts_with("HTTP/1.0");
        let mut content_range = None;
        for line in lines {
            let Some((k, v)) = line.split_once(':') else { continue };
            let v = v.trim();
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => {
                    length = Some(v.parse::<u64>().map_err(|_| proto("bad Content-Length".into()))?)
                }
                "connection" => close = v.eq_ignore_ascii_case("close"),
                "transfer-encoding" if !v.eq_ignore_ascii_case("identity") => {
                    return Err(proto(format!("unsupported Transfer-Encoding `{v}`")))
                }
                "content-range" => content_range = Some(v.to_owned()),
                _ => {}
            }
        }
        let body_start = buf.split_off(head_end + 4);
        // What part of the body the caller wants.
        let (skip, want) = match (status, range) {
            (206, Some((s, e))) => {
                let cr = content_range.ok_or_else(|| proto("206 without Content-Range".into()))?;
                let first: u64 = cr
                    .strip_prefix("bytes ")
                    .and_then(|r| r.split('-').next())
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| proto(format!("bad Content-Range `{cr}`")))?;
                if first != s {
                    return Err(proto(format!("asked for bytes from {s}, got `{cr}`")));
                }
                (0, e - s)
            }
            (200, Some((s, e))) => (s, e - s),
            (200, None) => (0, u64::MAX),
            _ => {
                // Drain a short error body so the connection could be reused; simpler to close.
                return Err(FetchError::Status { url: url.to_owned(), status });
            }
        };
        let total = match length {
            Some(l) => l,
            None => {
                close = true;
                u64::MAX
            }
        };
        // Stream the body: skip `skip` bytes, hand over `want`, read to `total`.
        let mut pos = 0u64;
        let mut given = 0u64;
        let mut deliver = |chunk: &[u8], pos: &mut u64| -> Result<(), FetchError> {
            let from = skip.saturating_sub(*pos).min(chunk.len() as u64) as usize;
            let until =
                (skip.saturating_add(want).saturating_sub(*pos)).min(chunk.len() as u64) as usize;
            *pos += chunk.len() as u64;
            if from < until {
                given += (until - from) as u64;
                if !sink(&chunk[from..until]) {
                    return Err(FetchError::Aborted { url: url.to_owned() });
                }
            }
            Ok(())
        };
        let first = &body_start[..body_start.len().min(total as usize)];
        self.stats.bytes.fetch_add(first.len() as u64, Ordering::Relaxed);
        deliver(first, &mut pos)?;
        while pos < total {
            let cap = (total - pos).min(tmp.len() as u64) as usize;
            let n = stream.read(&mut tmp[..cap]).map_err(io)?;
            if n == 0 {
                if length.is_none() {
                    break;
                }
                return Err(io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("connection closed after {pos} of {total} body bytes"),
                )));
            }
            self.stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
            deliver(&tmp[..n], &mut pos)?;
        }
        if let Some((s, e)) = range {
            if given != e - s {
                return Err(proto(format!("got {given} bytes, wanted {}", e - s)));
            }
        }
        Ok((given, !close))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Remote for HttpRemote {
    fn fetch(
        &self,
        path: &str,
        range: Option<(u64, u64)>,
        sink: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<u64, FetchError> {
        let url = self.describe(path);
        let target = format!("{}{}", self.prefix, path);
        self.acquire_slot();
        let result = (|| {
            // A pooled connection may have been closed by the server while idle: if it fails
            // before any response byte arrives, try once more on a fresh one.
            loop {
                let pooled = self.idle.lock().unwrap().pop();
                let reused = pooled.is_some();
                let mut stream = match pooled {
                    Some(s) => s,
                    None => self.connect(&url)?,
                };
                self.stats.requests.fetch_add(1, Ordering::Relaxed);
                let mut started = false;
                match self.exchange(&mut stream, &url, &target, range, sink, &mut started) {
                    Ok((n, keep)) => {
                        if keep {
                            self.idle.lock().unwrap().push(stream);
                        }
                        return Ok(n);
                    }
                    Err(FetchError::Io { .. }) if reused && !started => continue,
                    Err(e) => return Err(e),
                }
            }
        })();
        self.release_slot();
        result
    }

    fn options(&self) -> &FetchOptions {
        &self.opts
    }

    fn stats(&self) -> &FetchStats {
        &self.stats
    }

    fn describe(&self, path: &str) -> String {
        format!("http://{}{}{}", self.host, self.prefix, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server answering each connection's requests with canned responses.
    fn serve(responses: Vec<&'static [u8]>) -> (String, std::thread::JoinHandle<Vec<String>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/b", l.local_addr().unwrap());
        let h = std::thread::spawn(move || {
            let mut requests = Vec::new();
            let (mut s, _) = l.accept().unwrap();
            for r in responses {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).unwrap();
                requests.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                s.write_all(r).unwrap();
            }
            requests
        });
        (url, h)
    }

    #[test]
    fn range_requests_reuse_one_connection() {
        let (url, h) = serve(vec![
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 2-4/10\r\nContent-Length: 3\r\n\r\ncde",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcdefghij",
        ]);
        let r = HttpRemote::new(&url, FetchOptions::default()).unwrap();
        assert_eq!(get(&r, "x", Some((2, 5))).unwrap(), b"cde");
        // A server that ignores Range: the client takes the part it asked for.
        assert_eq!(get(&r, "x", Some((7, 9))).unwrap(), b"hi");
        let reqs = h.join().unwrap();
        assert!(reqs[0].starts_with("GET /b/x HTTP/1.1\r\n"), "{}", reqs[0]);
        assert!(reqs[0].contains("Range: bytes=2-4\r\n"));
        assert!(reqs[1].contains("Range: bytes=7-8\r\n"));
        assert_eq!(r.stats().requests.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_corrupt_chunk_is_retried_then_refused() {
        let (url, _h) = serve(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabX",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabY",
        ]);
        let opts =
            FetchOptions { retries: 1, backoff: Duration::from_millis(1), ..Default::default() };
        let r = HttpRemote::new(&url, opts).unwrap();
        let chunk = Chunk { offset: 0, length: 3, sha256: crate::sha256_hex(b"abc"), stored: None };
        let err = get_chunk(&r, Compression::None, &chunk).unwrap_err();
        assert!(matches!(err, FetchError::GaveUp { attempts: 2, .. }), "{err}");
        assert!(err.to_string().contains("SHA-256"), "{err}");
    }

    #[test]
    fn a_dead_server_fails_within_the_bound() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", l.local_addr().unwrap());
        drop(l);
        let opts =
            FetchOptions { retries: 2, backoff: Duration::from_millis(10), ..Default::default() };
        let r = HttpRemote::new(&url, opts).unwrap();
        let t = std::time::Instant::now();
        assert!(get(&r, "manifest.json", None).is_err());
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(r.stats().requests.load(Ordering::Relaxed), 0, "nothing was sent");
    }

    #[test]
    fn bad_urls_are_named() {
        assert!(matches!(open("ftp://x/", FetchOptions::default()), Err(FetchError::Url(_))));
        assert!(matches!(
            HttpRemote::new("http://", FetchOptions::default()),
            Err(FetchError::Url(_))
        ));
    }

    #[test]
    fn error_statuses_are_not_retried_forever() {
        let (url, _h) = serve(vec![b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"]);
        let r = HttpRemote::new(&url, FetchOptions::default()).unwrap();
        let err = get(&r, "nope", None).unwrap_err();
        assert!(matches!(err, FetchError::GaveUp { attempts: 1, .. }), "{err}");
    }
}
