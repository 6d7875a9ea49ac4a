//! The HTTP client: [ureq] (HTTP/1.1, keep-alive, chunked bodies, redirects, proxies from the
//! environment, https through rustls) over a TCP transport of our own that keeps the bounds of
//! the module above: it connects and reads in slices of [`POLL`], looking at the clock and the
//! cancel flag between them.
//!
//! ureq's own timeouts are off: every wait for the server is one of the transport's, and only
//! time spent waiting for the server counts (the reader's time with the bytes does not). The
//! body's length is bounded here, by the span, as it arrives.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
    RustlsConnector, Transport,
};

use super::{
    redact_url, Cancel, FetchError, FetchOptions, FetchStats, Remote, Span, MAX_REDIRECTS, POLL,
};

/// The longest response head read.
const MAX_HEAD: usize = 64 * 1024;

/// Files tried, in order, for the system's trusted roots (after `SSL_CERT_FILE`).
const SYSTEM_ROOTS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

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
fn split_url(url: &str) -> Option<(String, Option<String>)> {
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

/// The trusted roots: the system's (`SSL_CERT_FILE`, or the first of [`SYSTEM_ROOTS`]; the
/// roots built into the client when there is none) and `ca_file`'s.
fn roots(ca_file: Option<&Path>) -> Result<ureq::tls::RootCerts, FetchError> {
    use ureq::tls::{parse_pem, Certificate, PemItem, RootCerts};
    let certs = |pem: &[u8]| -> Vec<Certificate<'static>> {
        parse_pem(pem)
            .filter_map(|i| match i {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect()
    };
    let system = std::env::var_os("SSL_CERT_FILE")
        .map(std::path::PathBuf::from)
        .into_iter()
        .chain(SYSTEM_ROOTS.iter().map(std::path::PathBuf::from))
        .find_map(|p| std::fs::read(p).ok());
    let mut all = system.as_deref().map(certs).unwrap_or_default();
    if let Some(p) = ca_file {
        let err = |detail: String| FetchError::CaFile { path: p.display().to_string(), detail };
        let pem = std::fs::read(p)
            .map_err(|e| err(format!("{e}; give a PEM file of CA certificates")))?;
        let mine = certs(&pem);
        if mine.is_empty() {
            return Err(err("no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into()));
        }
        all.extend(mine);
    }
    if all.is_empty() {
        return Ok(RootCerts::WebPki);
    }
    Ok(RootCerts::new_with_certs(&all))
}

/// An HTTP client whose every request keeps the bounds of `opts` (its transport's): what
/// [`HttpRemote`] and `coldstart publish` send their requests with.
pub(crate) fn agent(opts: &FetchOptions, https: bool) -> Result<ureq::Agent, FetchError> {
    let mut config = ureq::Agent::config_builder()
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
    if https || opts.ca_file.is_some() {
        let tls = ureq::tls::TlsConfig::builder().root_certs(roots(opts.ca_file.as_deref())?);
        config = config.tls_config(tls.build());
    }
    let connector =
        ().chain(ConnectProxyConnector::default())
            .chain(PollingTcp(Limits::of(opts)))
            .chain(RustlsConnector::default());
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
        sink: &mut dyn FnMut(&[u8]) -> bool,
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
                if !matches!(stop_of(&e), Some(Stop::NotConnected(_))) {
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
                return Err(FetchError::from(bucket.refusal(
                    &format!("{prefix}{path}"),
                    status,
                    &body,
                )));
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

/// Why the transport stopped a request; carried through ureq inside an [`io::Error`].
#[derive(Debug)]
enum Stop {
    Cancelled,
    Timeout(String),
    /// Connecting failed: nothing was sent.
    NotConnected(io::Error),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Cancelled => f.write_str("stopped: coldstart was interrupted"),
            Stop::Timeout(what) => f.write_str(what),
            Stop::NotConnected(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Stop {}

fn stop(s: Stop) -> ureq::Error {
    let kind = match &s {
        Stop::NotConnected(e) => e.kind(),
        Stop::Timeout(_) => io::ErrorKind::TimedOut,
        Stop::Cancelled => io::ErrorKind::Interrupted,
    };
    ureq::Error::Io(io::Error::new(kind, s))
}

/// The [`Stop`] inside `e`, if the transport made it.
fn stop_of<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Stop> {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(s) = e.downcast_ref::<Stop>() {
            return Some(s);
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if let Some(s) = io.get_ref().and_then(|i| i.downcast_ref::<Stop>()) {
                return Some(s);
            }
        }
        if let Some(ureq::Error::Io(io)) = e.downcast_ref::<ureq::Error>() {
            if let Some(s) = io.get_ref().and_then(|i| i.downcast_ref::<Stop>()) {
                return Some(s);
            }
        }
        cur = e.source();
    }
    None
}

fn from_stop(url: &str, s: &Stop) -> Option<FetchError> {
    let url = url.to_owned();
    Some(match s {
        Stop::Cancelled => FetchError::Cancelled { url },
        Stop::Timeout(what) => FetchError::Timeout { url, what: what.clone() },
        Stop::NotConnected(_) => return None,
    })
}

/// A ureq error as the fetcher says it.
pub(crate) fn fetch_error(url: &str, e: ureq::Error) -> FetchError {
    if let Some(f) = stop_of(&e).and_then(|s| from_stop(url, s)) {
        return f;
    }
    let url = url.to_owned();
    match e {
        ureq::Error::Io(source) => match source.into_inner() {
            Some(inner) => match inner.downcast::<Stop>() {
                Ok(s) => match *s {
                    Stop::NotConnected(source) => FetchError::Io { url, source },
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
        e @ (ureq::Error::Tls(_) | ureq::Error::Rustls(_)) => {
            FetchError::Io { url, source: io::Error::other(format!("TLS: {e}")) }
        }
        e => FetchError::Protocol { url, detail: e.to_string() },
    }
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

/// The bounds the transport keeps.
#[derive(Debug, Clone)]
struct Limits {
    connect: Duration,
    io: Duration,
    min_rate: u64,
    cancel: Cancel,
}

impl Limits {
    fn of(o: &FetchOptions) -> Limits {
        Limits {
            connect: o.connect_timeout,
            io: o.io_timeout,
            min_rate: o.min_rate,
            cancel: o.cancel.clone(),
        }
    }
}

/// Seconds, as a message says them: `10 s`, `0.5 s`.
fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Opens TCP connections that keep [`Limits`].
#[derive(Debug)]
struct PollingTcp(Limits);

impl<In: Transport> Connector<In> for PollingTcp {
    type Out = Either<In, PollingTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if chained.is_some() {
            return Ok(chained.map(Either::A));
        }
        let mut last = None;
        for a in details.addrs.iter() {
            match connect(a, self.0.connect, &self.0.cancel) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    s.set_read_timeout(Some(POLL))
                        .and_then(|_| s.set_write_timeout(Some(self.0.io)))
                        .map_err(|e| stop(Stop::NotConnected(e)))?;
                    let buffers = LazyBuffers::new(
                        details.config.input_buffer_size(),
                        details.config.output_buffer_size(),
                    );
                    return Ok(Some(Either::B(PollingTransport {
                        stream: s,
                        buffers,
                        limits: self.0.clone(),
                        clock: Clock::default(),
                    })));
                }
                Err(Connect::Cancelled) => return Err(stop(Stop::Cancelled)),
                Err(Connect::TimedOut) => {
                    last = Some(Stop::Timeout(format!(
                        "could not connect within {}",
                        secs(self.0.connect)
                    )))
                }
                Err(Connect::Failed(e)) => last = Some(Stop::NotConnected(e)),
            }
        }
        Err(stop(last.unwrap_or_else(|| {
            Stop::NotConnected(io::Error::new(io::ErrorKind::NotFound, "no address"))
        })))
    }
}

/// Time spent waiting for the server since the request (or the last byte), and the current
/// rate window.
#[derive(Debug, Default)]
struct Clock {
    /// Any byte since the request was sent.
    answered: bool,
    since_byte: Duration,
    window: Duration,
    window_bytes: u64,
}

#[derive(Debug)]
struct PollingTransport {
    stream: TcpStream,
    buffers: LazyBuffers,
    limits: Limits,
    clock: Clock,
}

impl PollingTransport {
    fn check(&mut self) -> Result<(), ureq::Error> {
        let l = &self.limits;
        if l.cancel.is_cancelled() {
            return Err(stop(Stop::Cancelled));
        }
        let c = &mut self.clock;
        if c.since_byte >= l.io {
            let what = if c.answered { "no bytes for" } else { "no answer within" };
            return Err(stop(Stop::Timeout(format!("{what} {}", secs(l.io)))));
        }
        if c.answered && c.window >= l.io {
            let need = ((l.min_rate as f64 * l.io.as_secs_f64()) as u64).max(1);
            if c.window_bytes < need {
                return Err(stop(Stop::Timeout(format!(
                    "{} bytes in {}, slower than the {} bytes/s accepted",
                    c.window_bytes,
                    secs(c.window),
                    l.min_rate
                ))));
            }
            c.window = Duration::ZERO;
            c.window_bytes = 0;
        }
        Ok(())
    }
}

impl Transport for PollingTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, _: NextTimeout) -> Result<(), ureq::Error> {
        if self.limits.cancel.is_cancelled() {
            return Err(stop(Stop::Cancelled));
        }
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output).map_err(|e| {
            if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
                stop(Stop::Timeout(format!("could not send within {}", secs(self.limits.io))))
            } else {
                ureq::Error::Io(e)
            }
        })?;
        // A request went out: the wait for its answer starts.
        self.clock = Clock::default();
        Ok(())
    }

    fn await_input(&mut self, _: NextTimeout) -> Result<bool, ureq::Error> {
        loop {
            self.check()?;
            let t = Instant::now();
            let r = self.stream.read(self.buffers.input_append_buf());
            let waited = t.elapsed();
            let c = &mut self.clock;
            c.since_byte += waited;
            c.window += waited;
            match r {
                Ok(n) => {
                    if n > 0 {
                        if !c.answered {
                            // The rate is measured from the answer's first bytes on.
                            c.answered = true;
                            c.window = Duration::ZERO;
                        }
                        c.since_byte = Duration::ZERO;
                        c.window_bytes += n as u64;
                    }
                    self.buffers.input_appended(n);
                    return Ok(n > 0);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(ureq::Error::Io(e)),
            }
        }
    }

    fn is_open(&mut self) -> bool {
        // Open if nothing is waiting to be read and the peer has not closed.
        if self.stream.set_nonblocking(true).is_err() {
            return false;
        }
        let mut b = [0u8];
        let open =
            matches!(self.stream.read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        open && self.stream.set_nonblocking(false).is_ok()
    }
}

enum Connect {
    Cancelled,
    TimedOut,
    Failed(io::Error),
}

/// Connects to `addr` within `timeout`, looking at `cancel` every [`POLL`]: a non-blocking
/// `connect` and `poll`, as `TcpStream::connect_timeout` does, but cancellable.
fn connect(addr: &SocketAddr, timeout: Duration, cancel: &Cancel) -> Result<TcpStream, Connect> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: a plain socket call; the descriptor is owned at once.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(Connect::Failed(io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fcntl on our descriptor.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a socket address of `len` bytes.
    let r = unsafe { libc::connect(fd, &storage as *const _ as *const libc::sockaddr, len) };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(Connect::Failed(e));
        }
        let end = Instant::now() + timeout;
        loop {
            if cancel.is_cancelled() {
                return Err(Connect::Cancelled);
            }
            let now = Instant::now();
            if now >= end {
                return Err(Connect::TimedOut);
            }
            let wait = (end - now).min(POLL).as_millis().max(1) as libc::c_int;
            let mut pfd = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, wait) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Connect::Failed(e));
            }
            if n > 0 {
                break;
            }
        }
        let mut err: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: SO_ERROR into an int of the size given.
        unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                &mut err as *mut _ as *mut libc::c_void,
                &mut len,
            );
        }
        if err != 0 {
            return Err(Connect::Failed(io::Error::from_raw_os_error(err)));
        }
    }
    // SAFETY: fcntl on our descriptor: back to blocking, reads bounded by their timeout.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    Ok(TcpStream::from(owned))
}

/// `addr` as a C socket address and its length.
fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
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
    fn fetch(
        &self,
        path: &str,
        span: Span,
        sink: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<u64, FetchError> {
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

    /// The file's URL, redacted ([`redact_url`]).
    fn describe(&self, path: &str) -> String {
        redact_url(&self.url(path))
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
