//! The HTTP client: [ureq] (HTTP/1.1, keep-alive, chunked bodies, redirects, proxies from the
//! environment) over a TCP transport of our own that keeps the bounds of the module above
//! ([`super::tcp`]), with TLS of our own on it ([`super::tls`]).
//!
//! ureq's own timeouts are off: every wait for the server is one of the transport's, and only
//! time spent waiting for the server counts (the reader's time with the bytes does not). The
//! body's length is bounded here, by the span, as it arrives.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{ConnectProxyConnector, Connector};

use super::tcp::{Limits, PollingTcp, Stop};
use super::tls::{Peer, TlsConnector, TlsRefusal};
use super::{redact_url, ConnectFailure, FetchError, FetchOptions, FetchStats, ProxyRefusal};
use super::{Remote, Sink, Span, MAX_REDIRECTS, POLL};

/// The longest response head read.
const MAX_HEAD: usize = 64 * 1024;

/// A bundle served over HTTP or HTTPS.
pub struct HttpRemote {
    agent: ureq::Agent,
    /// `scheme://host[:port]/path/`, ending in `/`.
    base: String,
    /// The query string, without `?`, put after every file's path (a signed URL prefix).
    query: Option<String>,
    /// The bucket and key prefix of an `s3://` URL: each request is signed for it.
    s3: Option<(crate::s3::Bucket, String)>,
    opts: FetchOptions,
    stats: FetchStats,
    range_warned: AtomicBool,
    in_flight: Mutex<usize>,
    slot_freed: Condvar,
}

impl std::fmt::Debug for HttpRemote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpRemote").field("base", &redact_url(&self.base)).finish_non_exhaustive()
    }
}

/// `url` split into the base every file's path is put after (ending in `/`) and the query.
pub(crate) fn split_url(url: &str) -> Option<(String, Option<String>)> {
    let (scheme, rest) = url.split_once("://")?;
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    let rest = rest.split_once('#').map_or(rest, |(a, _)| a);
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q.to_owned()).filter(|q| !q.is_empty())),
        None => (rest, None),
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let bad = |c: char| c.is_control() || c == ' ';
    if host.is_empty()
        || !port_ok(host)
        || path.chars().any(bad)
        || query.as_deref().is_some_and(|q| q.chars().any(bad))
    {
        return None;
    }
    let mut base = format!("{scheme}://{host}{path}");
    if !base.ends_with('/') {
        base.push('/');
    }
    base.parse::<ureq::http::Uri>().ok()?;
    Some((base, query))
}

/// Whether the authority `host` names no port or one a socket can have (1 to 65535): a URL
/// with `:99999` is bad input, not a server that cannot be reached.
fn port_ok(host: &str) -> bool {
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    match host.rsplit_once(':') {
        Some((_, port)) if !host.ends_with(']') => {
            port.is_empty() || port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        _ => true,
    }
}

/// An HTTP client whose every request keeps the bounds of `opts` (its transport's): what
/// [`HttpRemote`] and `coldstart publish` send their requests with.
pub(crate) fn agent(opts: &FetchOptions, https: bool) -> Result<ureq::Agent, FetchError> {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(MAX_REDIRECTS)
        .max_redirects_will_error(true)
        .max_response_header_size(MAX_HEAD)
        .max_idle_connections_per_host(opts.connections.max(1))
        .max_idle_connections(opts.connections.max(1))
        .user_agent("coldstart")
        .timeout_global(None)
        .timeout_connect(None)
        .timeout_recv_response(None)
        .timeout_recv_body(None)
        .timeout_send_request(None);
    let connector =
        ().chain(ConnectProxyConnector::default())
            .chain(PollingTcp(Limits::of(opts)))
            .chain(TlsConnector::new(opts.ca_file.as_deref(), https)?);
    Ok(ureq::Agent::with_parts(config.build(), connector, DefaultResolver::default()))
}

impl HttpRemote {
    /// A remote for `http[s]://HOST[:PORT][/PATH][?QUERY]`, the URL of the bundle directory;
    /// the query, if any, follows every file's path (`.../PATH/manifest.json?QUERY`).
    pub fn new(url: &str, opts: FetchOptions) -> Result<HttpRemote, FetchError> {
        let (base, query) = split_url(url).ok_or_else(|| FetchError::Url(redact_url(url)))?;
        let agent = agent(&opts, base.starts_with("https://"))?;
        Ok(HttpRemote::with(agent, base, query, None, opts))
    }

    /// A remote for the bundle under `url`'s prefix in `bucket`, every request signed with
    /// the bucket's credentials (SigV4), if it has any.
    pub fn s3(
        url: &crate::s3::S3Url,
        bucket: crate::s3::Bucket,
        opts: FetchOptions,
    ) -> Result<HttpRemote, FetchError> {
        let agent = agent(&opts, bucket.https())?;
        let base = url.to_string();
        Ok(HttpRemote::with(agent, base, None, Some((bucket, url.prefix.clone())), opts))
    }

    fn with(
        agent: ureq::Agent,
        base: String,
        query: Option<String>,
        s3: Option<(crate::s3::Bucket, String)>,
        opts: FetchOptions,
    ) -> HttpRemote {
        HttpRemote {
            agent,
            base,
            query,
            s3,
            opts,
            stats: FetchStats::default(),
            range_warned: AtomicBool::new(false),
            in_flight: Mutex::new(0),
            slot_freed: Condvar::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        match &self.query {
            Some(q) => format!("{}{path}?{q}", self.base),
            None => format!("{}{path}", self.base),
        }
    }

    /// The error for an answer `status` with `body` from an https port asked in plain http,
    /// if it is one: nginx, Apache and Go answer 400 and say so.
    fn https_port(&self, url: &str, status: u16, body: &[u8]) -> Option<FetchError> {
        let plain = match &self.s3 {
            Some((bucket, _)) => !bucket.https(),
            None => self.base.starts_with("http://"),
        };
        if !(plain && status == 400 && says_https_port(body)) {
            return None;
        }
        let fix = match &self.s3 {
            Some(_) => S3_HTTPS.into(),
            None => format!("use {}", self.describe("").replacen("http://", "https://", 1)),
        };
        Some(FetchError::HttpsPort { url: url.to_owned(), fix })
    }

    /// Waits for a free slot (at most [`FetchOptions::connections`] requests in flight);
    /// `false` if the fetches were cancelled meanwhile.
    fn acquire_slot(&self) -> bool {
        let mut n = self.in_flight.lock().unwrap();
        while *n >= self.opts.connections.max(1) {
            if self.opts.cancel.is_cancelled() {
                return false;
            }
            n = self.slot_freed.wait_timeout(n, POLL).unwrap().0;
        }
        *n += 1;
        true
    }

    fn release_slot(&self) {
        *self.in_flight.lock().unwrap() -= 1;
        self.slot_freed.notify_one();
    }

    fn exchange(
        &self,
        url: &str,
        path: &str,
        span: Span,
        sink: Sink<'_>,
    ) -> Result<u64, FetchError> {
        let proto = |detail: String| FetchError::Protocol { url: url.to_owned(), detail };
        let mut req = match &self.s3 {
            Some((bucket, prefix)) => {
                let key = format!("{prefix}{path}");
                let signed = bucket.request("GET", &key, &[], &[], crate::s3::sigv4::EMPTY_SHA256);
                let mut req = self.agent.get(signed.url);
                for (k, v) in signed.headers {
                    req = req.header(k, v);
                }
                req
            }
            None => self.agent.get(self.url(path)),
        };
        if let Span::Range(s, e) = span {
            if e <= s {
                return Ok(0);
            }
            req = req.header("Range", format!("bytes={}-{}", s, e - 1));
        }
        let resp = match req.call() {
            Ok(r) => r,
            Err(e) => {
                if !matches!(stop_of(&e), Some(Stop::NotConnected(..))) {
                    self.stats.requests.fetch_add(1, Ordering::Relaxed);
                }
                return Err(fetch_error(url, e));
            }
        };
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let status = resp.status().as_u16();
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok());
        let length = match header("content-length") {
            Some(v) => Some(
                v.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|_| v.trim().bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| proto("bad Content-Length".into()))?,
            ),
            None => None,
        };
        let max = span.max_len();
        // What part of the body the caller wants: skip `skip` bytes, hand over `want`.
        let (skip, want) = match (status, span) {
            (206, Span::Range(s, e)) => {
                let cr = header("content-range")
                    .ok_or_else(|| proto("206 without Content-Range".into()))?
                    .to_owned();
                let (first, last) = cr
                    .strip_prefix("bytes ")
                    .and_then(|r| r.split('/').next())
                    .and_then(|r| r.split_once('-'))
                    .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
                    .ok_or_else(|| {
                        proto(format!("bad Content-Range `{}`", crate::manifest::shown(&cr)))
                    })?;
                if first != s || last < first || last + 1 < e {
                    return Err(proto(format!(
                        "asked for bytes {s}-{}, got `{}`",
                        e - 1,
                        crate::manifest::shown(&cr)
                    )));
                }
                (0, e - s)
            }
            (200, Span::Range(s, e)) => {
                if !self.range_warned.swap(true, Ordering::Relaxed) {
                    self.opts.warn.say(&format!(
                        "{}: the origin ignores Range requests and sends whole files: every \
                         read brings the file from its start up to the bytes wanted; serve \
                         the bundle with a server that supports Range (nginx, S3, `coldstart \
                         serve`)",
                        self.describe("")
                    ));
                }
                (s, e - s)
            }
            (200, Span::Whole { .. }) => (0, max),
            (206, Span::Whole { .. }) => {
                return Err(proto("206 to a request without Range".into()))
            }
            (301 | 400..=407 | 409..=428 | 430..=499, _) if self.s3.is_some() => {
                let (bucket, prefix) = self.s3.as_ref().expect("an S3 remote");
                let mut body = Vec::new();
                let _ = resp.into_body().into_reader().take(16 << 10).read_to_end(&mut body);
                if let Some(e) = self.https_port(url, status, &body) {
                    return Err(e);
                }
                return Err(FetchError::from(bucket.refusal(
                    &format!("{prefix}{path}"),
                    status,
                    &body,
                )));
            }
            (400, _) => {
                let mut body = Vec::new();
                let _ = resp.into_body().into_reader().take(16 << 10).read_to_end(&mut body);
                let status = FetchError::Status { url: url.to_owned(), status };
                return Err(self.https_port(url, 400, &body).unwrap_or(status));
            }
            (301 | 302 | 303 | 307 | 308, _) => {
                let location = header("location").unwrap_or_default().to_owned();
                return Err(FetchError::Redirect { url: url.to_owned(), location });
            }
            (status, _) => return Err(FetchError::Status { url: url.to_owned(), status }),
        };
        if let (Span::Whole { max }, Some(l)) = (span, length) {
            if l > max {
                return Err(proto(format!(
                    "a body of {l} bytes, more than the {max} a reader takes"
                )));
            }
        }
        let end = skip.saturating_add(want);
        if let (Span::Range(..), Some(l)) = (span, length) {
            if l < end - if status == 206 { skip } else { 0 } {
                return Err(proto(format!("a body of {l} bytes, wanted {want}")));
            }
        }
        let mut body = resp.into_body().into_reader();
        let mut buf = vec![0u8; 64 * 1024];
        let (mut pos, mut given) = (0u64, 0u64);
        // Read no further than needed: one byte past a whole span's `max` says it is too long.
        let until = if matches!(span, Span::Whole { .. }) { end.saturating_add(1) } else { end };
        while pos < until {
            let cap = (until - pos).min(buf.len() as u64) as usize;
            let n = body.read(&mut buf[..cap]).map_err(|e| io_error(url, e))?;
            if n == 0 {
                break;
            }
            self.stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
            let chunk = &buf[..n];
            let from = skip.saturating_sub(pos).min(n as u64) as usize;
            let to = end.saturating_sub(pos).min(n as u64) as usize;
            pos += n as u64;
            if pos > end {
                if let Span::Whole { max } = span {
                    return Err(proto(format!(
                        "a body longer than the {max} bytes a reader takes"
                    )));
                }
            }
            if from < to {
                given += (to - from) as u64;
                if !sink(&chunk[from..to]) {
                    return Err(FetchError::Aborted { url: url.to_owned() });
                }
            }
        }
        if length == Some(pos) {
            // Every byte the server said it would send has come: the reader knows the body
            // is over without reading, and this read lets the connection go back to the pool.
            // Any other body stops here with what was wanted, its connection closed (a
            // failure now would make a reader with every byte retry).
            let _ = body.read(&mut buf[..1]);
        }
        if let Span::Range(s, e) = span {
            if given != e - s {
                return Err(FetchError::Io {
                    url: url.to_owned(),
                    source: io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("connection closed after {given} of {} bytes", e - s),
                    ),
                });
            }
        }
        Ok(given)
    }
}

/// The error of type `T` a connector or transport of ours made, inside `e` (ureq carries
/// them in an [`io::Error`]).
fn ours<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(s) = e.downcast_ref::<T>() {
            return Some(s);
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if let Some(s) = io.get_ref().and_then(|i| i.downcast_ref::<T>()) {
                return Some(s);
            }
        }
        if let Some(ureq::Error::Io(io)) = e.downcast_ref::<ureq::Error>() {
            if let Some(s) = io.get_ref().and_then(|i| i.downcast_ref::<T>()) {
                return Some(s);
            }
        }
        cur = e.source();
    }
    None
}

/// The [`Stop`] inside `e`, if the transport made it.
fn stop_of<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Stop> {
    ours::<Stop>(e)
}

fn from_stop(url: &str, s: &Stop) -> Option<FetchError> {
    let url = url.to_owned();
    Some(match s {
        Stop::Cancelled => FetchError::Cancelled { url },
        Stop::Timeout(what) => FetchError::Timeout { url, what: what.clone() },
        Stop::NotConnected(..) => return None,
    })
}

/// The proxy of the environment as ureq takes it (the first of `ALL_PROXY`, `HTTPS_PROXY`,
/// `HTTP_PROXY`, each also in lower case, that parses), with its variable's name.
fn env_proxy() -> Option<(&'static str, Peer)> {
    const VARS: [&str; 6] =
        ["ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"];
    VARS.iter().find_map(|&var| {
        let proxy = ureq::Proxy::new(&std::env::var(var).ok()?).ok()?;
        let host = proxy.host().trim_start_matches('[').trim_end_matches(']').to_owned();
        Some((var, Peer { host, port: proxy.port() }))
    })
}

/// The variable that names `peer` as the proxy, if it is the proxy.
fn proxy_var(peer: &Peer) -> Option<&'static str> {
    env_proxy().filter(|(_, p)| p == peer).map(|(var, _)| var)
}

/// A ureq error as the fetcher says it.
pub(crate) fn fetch_error(url: &str, e: ureq::Error) -> FetchError {
    if let Some(f) = stop_of(&e).and_then(|s| from_stop(url, s)) {
        return f;
    }
    if let Some(r) = ours::<TlsRefusal>(&e) {
        let refusal = TlsRefusal { proxy: proxy_var(&r.peer), ..r.clone() };
        return FetchError::Tls { url: url.to_owned(), refusal: Box::new(refusal) };
    }
    let url = url.to_owned();
    match e {
        ureq::Error::Io(source) => match source.into_inner() {
            Some(inner) => match inner.downcast::<Stop>() {
                Ok(s) => match *s {
                    Stop::NotConnected(peer, source) => {
                        let proxy = proxy_var(&peer);
                        let failure = Box::new(ConnectFailure { peer, proxy, source });
                        FetchError::Connect { url, failure }
                    }
                    s => FetchError::Io { url, source: io::Error::other(s.to_string()) },
                },
                Err(inner) => FetchError::Io { url, source: io::Error::other(inner) },
            },
            None => FetchError::Io { url, source: io::Error::other("connection failed") },
        },
        ureq::Error::TooManyRedirects => FetchError::Redirect { url, location: String::new() },
        ureq::Error::Timeout(t) => FetchError::Timeout { url, what: t.to_string() },
        ureq::Error::HostNotFound => FetchError::Io {
            url,
            source: io::Error::new(io::ErrorKind::NotFound, "host not found"),
        },
        ureq::Error::ConnectProxyFailed(reason) => match env_proxy() {
            Some((var, peer)) => {
                // "proxy server responded 400/400", or that it did not respond.
                let status = reason
                    .strip_prefix("proxy server responded ")
                    .and_then(|r| r.split('/').next()?.parse().ok());
                let detail = match status {
                    Some(s) => format!("it answered CONNECT with {s}"),
                    None => reason,
                };
                let refusal = Box::new(ProxyRefusal { peer, var, status, detail });
                FetchError::Proxy { url, refusal }
            }
            None => FetchError::Protocol { url, detail: format!("CONNECT proxy failed: {reason}") },
        },
        e @ (ureq::Error::Tls(_) | ureq::Error::Rustls(_)) => {
            FetchError::Io { url, source: io::Error::other(format!("TLS: {e}")) }
        }
        e => FetchError::Protocol { url, detail: e.to_string() },
    }
}

/// What to do when an S3 endpoint given as http:// answers https.
pub(crate) const S3_HTTPS: &str =
    "give the endpoint as https://... (--endpoint or AWS_ENDPOINT_URL)";

/// Whether the body of a 400 is a server's word that it speaks https on that port (nginx's,
/// Apache's and Go's).
pub(crate) fn says_https_port(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    [
        "plain HTTP request was sent to HTTPS port",
        "speaking plain HTTP to an SSL-enabled server port",
        "HTTP request to an HTTPS server",
    ]
    .iter()
    .any(|p| text.contains(p))
}

/// An error reading the body.
pub(crate) fn io_error(url: &str, e: io::Error) -> FetchError {
    if let Some(f) = stop_of(&e).and_then(|s| from_stop(url, s)) {
        return f;
    }
    match e.get_ref().and_then(|i| i.downcast_ref::<ureq::Error>()) {
        Some(_) => fetch_error(url, ureq::Error::from(e)),
        None => FetchError::Io { url: url.to_owned(), source: e },
    }
}

/// The body a response's bytes give for `span`, as [`HttpRemote`] reads it from a server:
/// for fuzzing and testing the response parser. The bytes are served once, on a loopback
/// socket, by a thread that closes the connection after them.
pub fn parse_response(response: &[u8], span: Span) -> Result<Vec<u8>, FetchError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|source| FetchError::Io { url: "response".into(), source })?;
    let addr = l.local_addr().expect("a bound socket");
    let url = format!("http://{addr}/");
    let response = response.to_vec();
    let server = std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut head = Vec::new();
        let mut b = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut b) {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&b[..n]),
            }
        }
        let _ = s.write_all(&response);
        let _ = s.shutdown(std::net::Shutdown::Write);
        // Until the client closes: a reset would lose bytes it has not read yet.
        while matches!(s.read(&mut b), Ok(n) if n > 0) {}
    });
    let opts = FetchOptions {
        retries: 0,
        connections: 1,
        io_timeout: Duration::from_secs(5),
        ..FetchOptions::default()
    };
    let r = HttpRemote::new(&url, opts)?;
    let mut body = Vec::new();
    let got = r.fetch("f", span, &mut |b| {
        body.extend_from_slice(b);
        true
    });
    drop(r);
    // An empty span sends no request: the server still waits for one.
    drop(TcpStream::connect(addr));
    let _ = server.join();
    got.map(|_| body)
}

impl Remote for HttpRemote {
    fn fetch(&self, path: &str, span: Span, sink: Sink<'_>) -> Result<u64, FetchError> {
        let url = self.describe(path);
        if !self.acquire_slot() {
            return Err(FetchError::Cancelled { url });
        }
        let result = self.exchange(&url, path, span, sink);
        self.release_slot();
        result
    }

    fn options(&self) -> &FetchOptions {
        &self.opts
    }

    fn stats(&self) -> &FetchStats {
        &self.stats
    }

    /// The file's URL as messages show it ([`redact_url`]): without a user and password, a
    /// query string (a signature) as `?...`.
    fn describe(&self, path: &str) -> String {
        redact_url(&self.url(path))
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
