//! The HTTP/1.1 client: a pool of keep-alive connections, Range requests, and the bounds of
//! the module above (deadlines, lengths, cancellation), kept by reading in slices of
//! [`POLL`] and looking at the clock and the cancel flag between them.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{Cancel, FetchError, FetchOptions, FetchStats, Remote, Span, POLL};

/// The longest response head read.
const MAX_HEAD: usize = 64 * 1024;

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
        if hostport.is_empty() || path.chars().any(|c| c.is_control() || c == ' ') {
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
            match connect(a, self.opts.connect_timeout, &self.opts.cancel) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    s.set_read_timeout(Some(POLL))
                        .and_then(|_| s.set_write_timeout(Some(self.opts.io_timeout)))
                        .map_err(|source| FetchError::Io { url: url.to_owned(), source })?;
                    return Ok(s);
                }
                Err(Connect::Cancelled) => {
                    return Err(FetchError::Cancelled { url: url.to_owned() })
                }
                Err(Connect::TimedOut) => {
                    last = Some(FetchError::Timeout {
                        url: url.to_owned(),
                        what: format!(
                            "could not connect within {}",
                            secs(self.opts.connect_timeout)
                        ),
                    })
                }
                Err(Connect::Failed(source)) => {
                    last = Some(FetchError::Io { url: url.to_owned(), source })
                }
            }
        }
        Err(last.expect("at least one address"))
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
}

/// Seconds, as a message says them: `10 s`, `0.5 s`.
fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
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

/// The deadlines of one exchange: the head within `io_timeout` of the request, then a byte
/// at least every `io_timeout` and `min_rate x io_timeout` bytes in every `io_timeout`. Only
/// time spent waiting for the server counts: the time the reader spends with the bytes
/// between two reads (storing a chunk, a mount being made) does not.
struct Watch<'a> {
    opts: &'a FetchOptions,
    url: &'a str,
    sent: Instant,
    head: bool,
    last: Instant,
    window: (Instant, u64),
    /// When the last read returned.
    returned: Instant,
}

impl<'a> Watch<'a> {
    fn new(opts: &'a FetchOptions, url: &'a str) -> Watch<'a> {
        let now = Instant::now();
        Watch { opts, url, sent: now, head: false, last: now, window: (now, 0), returned: now }
    }

    fn timeout(&self, what: String) -> FetchError {
        FetchError::Timeout { url: self.url.to_owned(), what }
    }

    fn check(&mut self) -> Result<(), FetchError> {
        if self.opts.cancel.is_cancelled() {
            return Err(FetchError::Cancelled { url: self.url.to_owned() });
        }
        let s = self.opts.io_timeout;
        let now = Instant::now();
        if !self.head {
            if now - self.sent >= s {
                return Err(self.timeout(format!("no answer within {}", secs(s))));
            }
            return Ok(());
        }
        if now - self.last >= s {
            return Err(self.timeout(format!("no bytes for {}", secs(s))));
        }
        let (start, bytes) = self.window;
        if now - start >= s {
            let need = ((self.opts.min_rate as f64 * s.as_secs_f64()) as u64).max(1);
            if bytes < need {
                return Err(self.timeout(format!(
                    "{bytes} bytes in {}, slower than the {} bytes/s accepted",
                    secs(now - start),
                    self.opts.min_rate
                )));
            }
            self.window = (now, 0);
        }
        Ok(())
    }

    fn got(&mut self, n: usize) {
        if n > 0 {
            self.last = Instant::now();
            self.window.1 += n as u64;
        }
    }

    fn head_done(&mut self) {
        let now = Instant::now();
        self.head = true;
        self.last = now;
        self.window = (now, 0);
    }

    /// One read of `stream`, waiting within the deadlines.
    fn read(&mut self, stream: &mut dyn Read, buf: &mut [u8]) -> Result<usize, FetchError> {
        // The reader's own time since the last read moves every clock forward.
        let away = self.returned.elapsed();
        self.sent += away;
        self.last += away;
        self.window.0 += away;
        loop {
            self.check()?;
            match stream.read(buf) {
                Ok(n) => {
                    self.got(n);
                    self.returned = Instant::now();
                    return Ok(n);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(source) => return Err(FetchError::Io { url: self.url.to_owned(), source }),
            }
        }
    }
}

/// A response's head.
struct Head {
    status: u16,
    length: Option<u64>,
    close: bool,
    content_range: Option<String>,
    location: Option<String>,
}

/// Parses a response head (without the blank line).
fn parse_head(head: &[u8], proto: &dyn Fn(String) -> FetchError) -> Result<Head, FetchError> {
    let head = std::str::from_utf8(head).map_err(|_| proto("the headers are not UTF-8".into()))?;
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let status_line = lines.next().unwrap_or("");
    let shown = || crate::manifest::shown(status_line);
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(proto(format!("bad status line `{}`", shown())));
    }
    let status: u16 = parts
        .next()
        .filter(|s| s.len() == 3)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| proto(format!("bad status line `{}`", shown())))?;
    let mut h = Head {
        status,
        length: None,
        close: version == "HTTP/1.0",
        content_range: None,
        location: None,
    };
    for line in lines {
        let Some((k, v)) = line.split_once(':') else { continue };
        let v = v.trim();
        match k.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                let n = v
                    .parse::<u64>()
                    .ok()
                    .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| proto("bad Content-Length".into()))?;
                if h.length.is_some_and(|l| l != n) {
                    return Err(proto("two different Content-Length headers".into()));
                }
                h.length = Some(n);
            }
            "connection" => h.close = v.eq_ignore_ascii_case("close"),
            "transfer-encoding" if !v.eq_ignore_ascii_case("identity") => {
                return Err(proto(format!(
                    "unsupported Transfer-Encoding `{}`",
                    crate::manifest::shown(v)
                )))
            }
            "content-range" => h.content_range = Some(v.to_owned()),
            "location" => h.location = Some(v.to_owned()),
            _ => {}
        }
    }
    Ok(h)
}

/// One request and its response on `stream`, within the deadlines of `watch`: the part of
/// the body `span` asks for is handed to `sink`. Returns the bytes handed over and whether
/// the connection may carry another request. `started` is set once any response byte has
/// arrived.
#[allow(clippy::too_many_arguments)]
fn exchange(
    stream: &mut (impl Read + Write),
    host: &str,
    target: &str,
    span: Span,
    sink: &mut dyn FnMut(&[u8]) -> bool,
    watch: &mut Watch,
    stats: &FetchStats,
    started: &mut bool,
) -> Result<(u64, bool), FetchError> {
    let url = watch.url.to_owned();
    let io = |source| FetchError::Io { url: url.clone(), source };
    let proto = |detail: String| FetchError::Protocol { url: url.clone(), detail };
    let mut req = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n");
    if let Span::Range(s, e) = span {
        if e <= s {
            return Ok((0, true));
        }
        req.push_str(&format!("Range: bytes={}-{}\r\n", s, e - 1));
    }
    req.push_str("User-Agent: coldstart\r\n\r\n");
    stream.write_all(req.as_bytes()).map_err(io)?;
    // The head.
    let mut buf = Vec::with_capacity(4096);
    let mut tmp = [0u8; 16 * 1024];
    let (head_end, body_at) = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break (i, i + 4);
        }
        if let Some(i) = find(&buf, b"\n\n") {
            break (i, i + 2);
        }
        if buf.len() > MAX_HEAD {
            return Err(proto("headers longer than 64 KiB".into()));
        }
        let n = watch.read(stream, &mut tmp)?;
        if n == 0 {
            return Err(io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the response",
            )));
        }
        *started = true;
        buf.extend_from_slice(&tmp[..n]);
    };
    watch.head_done();
    let h = parse_head(&buf[..head_end], &proto)?;
    let mut close = h.close;
    let max = span.max_len();
    // What part of the body the caller wants: skip `skip` bytes, hand over `want`.
    let (skip, want) = match (h.status, span) {
        (206, Span::Range(s, e)) => {
            let cr = h.content_range.ok_or_else(|| proto("206 without Content-Range".into()))?;
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
        (200, Span::Range(s, e)) => (s, e - s),
        (200, Span::Whole { .. }) => (0, max),
        (206, Span::Whole { .. }) => return Err(proto("206 to a request without Range".into())),
        (301 | 302 | 303 | 307 | 308, _) => {
            return Err(FetchError::Redirect { url, location: h.location.unwrap_or_default() })
        }
        (status, _) => return Err(FetchError::Status { url, status }),
    };
    if let (Span::Whole { max }, Some(l)) = (span, h.length) {
        if l > max {
            return Err(proto(format!("a body of {l} bytes, more than the {max} a reader takes")));
        }
    }
    let end = skip.saturating_add(want);
    // Read no further than the body (the connection's next response), nor than needed.
    let until = h.length.map_or(end, |l| l.min(end));
    if h.length.is_none() {
        close = true;
    }
    let mut pos = 0u64;
    let mut given = 0u64;
    let mut deliver = |chunk: &[u8], pos: &mut u64| -> Result<(), FetchError> {
        let from = skip.saturating_sub(*pos).min(chunk.len() as u64) as usize;
        let to = end.saturating_sub(*pos).min(chunk.len() as u64) as usize;
        *pos += chunk.len() as u64;
        if from < to {
            given += (to - from) as u64;
            if !sink(&chunk[from..to]) {
                return Err(FetchError::Aborted { url: url.clone() });
            }
        }
        Ok(())
    };
    let first = &buf[body_at..];
    let first = &first[..first.len().min(until as usize)];
    stats.bytes.fetch_add(first.len() as u64, Ordering::Relaxed);
    deliver(first, &mut pos)?;
    while pos < until {
        let cap = (until - pos).min(tmp.len() as u64) as usize;
        let n = watch.read(stream, &mut tmp[..cap])?;
        if n == 0 {
            if h.length.is_none() && matches!(span, Span::Whole { .. }) {
                break;
            }
            return Err(io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("connection closed after {pos} of {} body bytes", h.length.unwrap_or(end)),
            )));
        }
        stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
        deliver(&tmp[..n], &mut pos)?;
    }
    if let Span::Whole { max } = span {
        // Without a length, one byte more than allowed says the body is too long.
        if h.length.is_none() && pos >= max {
            let n = watch.read(stream, &mut tmp[..1])?;
            if n > 0 {
                return Err(proto(format!("a body longer than the {max} bytes a reader takes")));
            }
        }
    }
    if h.length.is_some_and(|l| pos < l) {
        // The rest of the body is not wanted: the connection cannot carry another request.
        close = true;
    }
    if let Span::Range(s, e) = span {
        if given != e - s {
            return Err(proto(format!("got {given} bytes, wanted {}", e - s)));
        }
    }
    Ok((given, !close))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The body a response's bytes give for `span`, as [`HttpRemote`] reads it from a server:
/// for fuzzing and testing the response parser without a socket.
pub fn parse_response(response: &[u8], span: Span) -> Result<Vec<u8>, FetchError> {
    struct Canned<'a>(&'a [u8]);
    impl Read for Canned<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.0.read(buf)
        }
    }
    impl Write for Canned<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let opts = FetchOptions::default();
    let mut watch = Watch::new(&opts, "response");
    let mut body = Vec::new();
    exchange(
        &mut Canned(response),
        "h",
        "/f",
        span,
        &mut |b| {
            body.extend_from_slice(b);
            true
        },
        &mut watch,
        &FetchStats::default(),
        &mut false,
    )?;
    Ok(body)
}

impl Remote for HttpRemote {
    fn fetch(
        &self,
        path: &str,
        span: Span,
        sink: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<u64, FetchError> {
        let url = self.describe(path);
        let target = format!("{}{}", self.prefix, path);
        if !self.acquire_slot() {
            return Err(FetchError::Cancelled { url });
        }
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
                let mut watch = Watch::new(&self.opts, &url);
                let r = exchange(
                    &mut stream,
                    &self.host,
                    &target,
                    span,
                    sink,
                    &mut watch,
                    &self.stats,
                    &mut started,
                );
                match r {
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
    use crate::manifest::{Chunk, Compression};
    use crate::remote::{get, get_chunk, open};
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

    const WHOLE: Span = Span::Whole { max: 1 << 20 };

    #[test]
    fn range_requests_reuse_one_connection() {
        let (url, h) = serve(vec![
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 2-4/10\r\nContent-Length: 3\r\n\r\ncde",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcdefghij",
        ]);
        let r = HttpRemote::new(&url, FetchOptions::default()).unwrap();
        assert_eq!(get(&r, "x", Span::Range(2, 5)).unwrap(), b"cde");
        // A server that ignores Range: the client takes the part it asked for.
        assert_eq!(get(&r, "x", Span::Range(7, 9)).unwrap(), b"hi");
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
        assert!(get(&r, "manifest.json", WHOLE).is_err());
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
        let err = get(&r, "nope", WHOLE).unwrap_err();
        assert!(matches!(err, FetchError::GaveUp { attempts: 1, .. }), "{err}");
    }

    /// A server that answers the first request of one connection by `behave`.
    fn misbehave(behave: impl FnOnce(TcpStream) + Send + 'static) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", l.local_addr().unwrap());
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            behave(s);
        });
        url
    }

    fn once(timeout_ms: u64) -> FetchOptions {
        FetchOptions {
            retries: 0,
            io_timeout: Duration::from_millis(timeout_ms),
            connect_timeout: Duration::from_millis(timeout_ms),
            ..FetchOptions::default()
        }
    }

    #[test]
    fn a_server_that_never_answers_is_a_timeout_within_the_bound() {
        let url = misbehave(|s| {
            std::thread::sleep(Duration::from_secs(3));
            drop(s);
        });
        let r = HttpRemote::new(&url, once(300)).unwrap();
        let t = Instant::now();
        let err = get(&r, "m", WHOLE).unwrap_err();
        assert!(err.to_string().contains("no answer within 0.3 s"), "{err}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }

    #[test]
    fn a_server_that_drips_is_too_slow_within_the_bound() {
        let url = misbehave(|mut s| {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
            for _ in 0..100 {
                if s.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let r = HttpRemote::new(&url, once(300)).unwrap();
        let t = Instant::now();
        let err = get(&r, "m", WHOLE).unwrap_err();
        assert!(err.to_string().contains("slower than the 1024 bytes/s"), "{err}");
        // The head at once, then one window of 0.3 s.
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }

    #[test]
    fn a_slow_reader_is_not_taken_for_a_slow_server() {
        let url = misbehave(|mut s| {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n");
            let _ = s.write_all(&vec![b'x'; 200_000]);
            std::thread::sleep(Duration::from_secs(2));
        });
        let r = HttpRemote::new(&url, once(300)).unwrap();
        let mut got = 0;
        r.fetch("m", WHOLE, &mut |b| {
            // The reader takes longer than the timeout with its first bytes.
            if got == 0 {
                std::thread::sleep(Duration::from_millis(700));
            }
            got += b.len();
            true
        })
        .unwrap();
        assert_eq!(got, 200_000);
    }

    #[test]
    fn a_body_longer_than_the_span_is_refused_without_reading_it() {
        // Said in the head: refused at once, nothing allocated for it.
        let url = misbehave(|mut s| {
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4611686018427387904\r\n\r\nabc");
            std::thread::sleep(Duration::from_secs(2));
        });
        let r = HttpRemote::new(&url, once(1000)).unwrap();
        let err = get(&r, "m", Span::Whole { max: 10 }).unwrap_err();
        assert!(err.to_string().contains("more than the 10"), "{err}");
        // Not said: read up to the limit, then refused.
        let url = misbehave(|mut s| {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\n");
            let junk = vec![b'z'; 64 * 1024];
            while s.write_all(&junk).is_ok() {}
        });
        let r = HttpRemote::new(&url, once(1000)).unwrap();
        let err = get(&r, "m", Span::Whole { max: 100_000 }).unwrap_err();
        assert!(err.to_string().contains("longer than the 100000"), "{err}");
        assert!(r.stats().bytes.load(Ordering::Relaxed) <= 100_000 + 16 * 1024);
    }

    #[test]
    fn a_redirect_is_named_and_not_followed() {
        let url = misbehave(|mut s| {
            let _ = s.write_all(
                b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n",
            );
        });
        let r = HttpRemote::new(&url, FetchOptions::default()).unwrap();
        let err = get(&r, "m", WHOLE).unwrap_err();
        assert!(matches!(&err, FetchError::GaveUp { attempts: 1, .. }), "{err}");
        assert!(err.to_string().contains("redirects to `/elsewhere`"), "{err}");
    }

    #[test]
    fn a_cancel_stops_a_fetch_waiting_on_the_server() {
        let url = misbehave(|s| {
            std::thread::sleep(Duration::from_secs(5));
            drop(s);
        });
        let opts = FetchOptions::default();
        let cancel = opts.cancel.clone();
        let r = HttpRemote::new(&url, opts).unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            cancel.cancel();
        });
        let t = Instant::now();
        let err = get(&r, "m", WHOLE).unwrap_err();
        assert!(err.is_cancelled(), "{err}");
        assert!(t.elapsed() < Duration::from_millis(600), "{:?}", t.elapsed());
        // A connect to an address that does not answer is cancelled the same way.
        let opts = FetchOptions { connect_timeout: Duration::from_secs(30), ..once(30_000) };
        let cancel = opts.cancel.clone();
        let r = HttpRemote::new("http://10.255.255.1:9/", opts).unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            cancel.cancel();
        });
        let t = Instant::now();
        let err = get(&r, "m", WHOLE).unwrap_err();
        assert!(err.is_cancelled() || matches!(err, FetchError::GaveUp { .. }), "{err}");
        assert!(t.elapsed() < Duration::from_millis(600), "{:?}", t.elapsed());
    }

    #[test]
    fn responses_parse_as_a_server_sends_them() {
        let body = parse_response(b"HTTP/1.1 200 OK\nContent-Length: 3\n\nabc", WHOLE).unwrap();
        assert_eq!(body, b"abc", "LF-only lines");
        let body = parse_response(b"HTTP/1.0 200 OK\r\n\r\nabcdef", Span::Range(2, 4)).unwrap();
        assert_eq!(body, b"cd", "a server that ignores Range");
        for bad in [
            &b"HTTP/1.1 206 Partial\r\nContent-Range: bytes 3-4/10\r\nContent-Length: 2\r\n\r\nde"
                [..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"SSH-2.0-OpenSSH\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
        ] {
            assert!(
                parse_response(bad, Span::Range(2, 4)).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
