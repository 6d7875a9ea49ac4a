//! The HTTP/1.1 file server.
//!
//! Request paths are resolved only by joining normal components (`..`, `.` and NUL are
//! refused before touching the file system) and the result must still lie inside the served
//! directory after symbolic links are resolved, so nothing outside it can be reached.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::link::{Link, Pacer};
use crate::{start, Running, ServeError, ServerStats};

/// How long an idle keep-alive connection is kept open.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
const BOUNDARY: &str = "coldstart-byteranges-7d1f3a";

/// Serves the directory `root` over HTTP/1.1 on `addr` (port 0: any free port), through the
/// emulated `link` if given. Returns once listening.
pub fn serve(root: &Path, addr: &str, link: Option<Link>) -> Result<Running, ServeError> {
    let root = root
        .canonicalize()
        .map_err(|source| ServeError::Io { path: root.display().to_string(), source })?;
    if !root.is_dir() {
        return Err(ServeError::NotADirectory { path: root.display().to_string() });
    }
    let listener = TcpListener::bind(addr)
        .map_err(|source| ServeError::Bind { addr: addr.to_owned(), source })?;
    let pacer = Arc::new(Pacer::new(link));
    let root = Arc::new(root);
    start(listener, move |conn, stats| {
        let _ = connection(conn, &root, &pacer, &stats);
    })
    .map_err(|source| ServeError::Bind { addr: addr.to_owned(), source })
}

struct Request {
    method: String,
    target: String,
    close: bool,
    range: Option<String>,
    if_range: Option<String>,
    if_none_match: Option<String>,
}

fn connection(
    mut conn: TcpStream,
    root: &Path,
    pacer: &Pacer,
    stats: &ServerStats,
) -> io::Result<()> {
    conn.set_read_timeout(Some(IDLE_TIMEOUT))?;
    conn.set_write_timeout(Some(IDLE_TIMEOUT))?;
    let _ = conn.set_nodelay(true);
    let mut buf = Vec::new();
    loop {
        let req = match read_request(&mut conn, &mut buf)? {
            Some(Ok(r)) => r,
            Some(Err(status)) => {
                let mut out = Vec::new();
                head(&mut out, status, reason(status), &[("Connection", "close".into())], 0);
                send(&mut conn, pacer, stats, &out)?;
                return Ok(());
            }
            None => return Ok(()),
        };
        stats.requests.fetch_add(1, Ordering::Relaxed);
        pacer.request_latency();
        respond(&mut conn, root, pacer, stats, &req)?;
        if req.close {
            return Ok(());
        }
    }
}

fn send(conn: &mut TcpStream, pacer: &Pacer, stats: &ServerStats, data: &[u8]) -> io::Result<()> {
    stats.bytes_sent.fetch_add(data.len() as u64, Ordering::Relaxed);
    pacer.write_all(conn, data)
}

/// Reads one request head (lines ended by CRLF, or by LF alone as RFC 9112 allows), then
/// discards a small body. `None`: the client closed, or took longer than [`IDLE_TIMEOUT`] to
/// send the head; `Some(Err(status))`: a bad request.
fn read_request(
    conn: &mut impl Read,
    buf: &mut Vec<u8>,
) -> io::Result<Option<Result<Request, u16>>> {
    let mut tmp = [0u8; 4096];
    let started = std::time::Instant::now();
    let (end, body_at) = loop {
        if let Some(e) = head_end(buf) {
            break e;
        }
        if buf.len() > MAX_HEAD {
            return Ok(Some(Err(431)));
        }
        if started.elapsed() > IDLE_TIMEOUT {
            return Ok(None);
        }
        let n = match conn.read(&mut tmp) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let rest = buf.split_off(body_at);
    let head = std::mem::replace(buf, rest);
    let (req, body) = match parse_request(&head[..end]) {
        Ok(r) => r,
        Err(status) => return Ok(Some(Err(status))),
    };
    while buf.len() < body {
        let n = conn.read(&mut tmp)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    buf.drain(..body);
    Ok(Some(Ok(req)))
}

/// The longest request head taken.
const MAX_HEAD: usize = 16 * 1024;

/// Where the head in `buf` ends (before its blank line) and the body starts.
fn head_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, i + 2));
    let crlf = buf.windows(3).position(|w| w == b"\n\r\n").map(|i| (i, i + 3));
    let (i, at) = match (lf, crlf) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b)?,
    };
    // The head without the last line's end.
    let end = if i > 0 && buf[i - 1] == b'\r' { i - 1 } else { i };
    Some((end, at))
}

/// Parses a request head (without the blank line): the request and the length of its body,
/// or the status that refuses it.
fn parse_request(head: &[u8]) -> Result<(Request, usize), u16> {
    let head = std::str::from_utf8(head).map_err(|_| 400u16)?;
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let mut first = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (first.next(), first.next(), first.next(), first.next())
    else {
        return Err(400);
    };
    if !version.starts_with("HTTP/1.") {
        return Err(505);
    }
    let mut req = Request {
        method: method.to_owned(),
        target: target.to_owned(),
        close: version == "HTTP/1.0",
        range: None,
        if_range: None,
        if_none_match: None,
    };
    let mut body = 0usize;
    let mut host = false;
    for line in lines {
        let Some((k, v)) = line.split_once(':') else { return Err(400) };
        let v = v.trim().to_owned();
        match k.trim().to_ascii_lowercase().as_str() {
            "host" => host = true,
            "connection" => {
                if v.eq_ignore_ascii_case("close") {
                    req.close = true;
                } else if v.eq_ignore_ascii_case("keep-alive") {
                    req.close = false;
                }
            }
            "range" => req.range = Some(v),
            "if-range" => req.if_range = Some(v),
            "if-none-match" => req.if_none_match = Some(v),
            "content-length" => body = v.parse().unwrap_or(usize::MAX),
            "transfer-encoding" => return Err(501),
            _ => {}
        }
    }
    // HTTP/1.1 requires Host (RFC 9112, 3.2).
    if version == "HTTP/1.1" && !host {
        return Err(400);
    }
    // A body on GET or HEAD is meaningless here; discard a small one, refuse a large one.
    if body > 64 * 1024 {
        return Err(413);
    }
    Ok((req, body))
}

/// The status `coldstart serve` would give a request with this head (without the blank
/// line) for a file of 1000 bytes, before looking at any file: 200 when it parses (206 or 416
/// with a `Range`), else the status refusing it. For fuzzing the parser of what clients send.
pub fn request_status(head: &[u8]) -> u16 {
    match parse_request(head) {
        Err(status) => status,
        Ok((req, _)) => match req.range.as_deref().and_then(|r| parse_ranges(r, 1000)) {
            Some(r) if r.is_empty() => 416,
            Some(_) => 206,
            None => 200,
        },
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        304 => "Not Modified",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

fn head(out: &mut Vec<u8>, status: u16, reason: &str, headers: &[(&str, String)], len: u64) {
    out.extend_from_slice(format!("HTTP/1.1 {status} {reason}\r\n").as_bytes());
    out.extend_from_slice(b"Server: coldstart\r\n");
    for (k, v) in headers {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(format!("Content-Length: {len}\r\n\r\n").as_bytes());
}

/// Maps a request target to a file under `root`, or `None` (404).
pub(crate) fn resolve(root: &Path, target: &str) -> Option<PathBuf> {
    let path = target.split(['?', '#']).next()?;
    if !path.starts_with('/') {
        return None;
    }
    let decoded = percent_decode(path)?;
    let mut full = root.to_path_buf();
    for part in decoded.split('/') {
        match part {
            "" => {}
            "." | ".." => return None,
            p if p.contains('\0') || p.contains('\\') => return None,
            p => full.push(p),
        }
    }
    let real = full.canonicalize().ok()?;
    (real.starts_with(root) && real.is_file()).then_some(real)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The most ranges one request may ask for; a request with more is answered as if it had no
/// `Range` (the whole file), as nginx answers above its `max_ranges`. coldstart's own fetcher
/// asks for one range per request.
pub const MAX_RANGES: usize = 100;

/// Parses a `Range` header against a file of `size` bytes.
///
/// `None`: the header is not a byte-range set, or asks for more than [`MAX_RANGES`] ranges
/// (ignored: the whole file is sent); `Some(empty)`: no range is satisfiable (416); otherwise
/// the ranges, end exclusive, in order and with those that overlap or touch merged (RFC 9110
/// allows a server to coalesce them), so that they add up to the file's size at most.
pub(crate) fn parse_ranges(header: &str, size: u64) -> Option<Vec<(u64, u64)>> {
    let spec = header.trim().strip_prefix("bytes=")?;
    let mut out = Vec::new();
    for (i, part) in spec.split(',').map(str::trim).filter(|p| !p.is_empty()).enumerate() {
        if i == MAX_RANGES {
            return None;
        }
        let (a, b) = part.split_once('-')?;
        let (a, b) = (a.trim(), b.trim());
        if a.is_empty() {
            let n: u64 = b.parse().ok()?;
            if n > 0 && size > 0 {
                out.push((size - n.min(size), size));
            }
        } else {
            let start: u64 = a.parse().ok()?;
            let end = if b.is_empty() {
                size
            } else {
                let last: u64 = b.parse().ok()?;
                if last < start {
                    return None;
                }
                last.saturating_add(1).min(size)
            };
            if start < size {
                out.push((start, end));
            }
        }
    }
    out.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(out.len());
    for (s, e) in out {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    Some(merged)
}

fn respond(
    conn: &mut TcpStream,
    root: &Path,
    pacer: &Pacer,
    stats: &ServerStats,
    req: &Request,
) -> io::Result<()> {
    let is_head = req.method == "HEAD";
    let mut out = Vec::new();
    let keep = if req.close { "close" } else { "keep-alive" };
    if req.method != "GET" && !is_head {
        let h = [("Allow", "GET, HEAD".into()), ("Connection", keep.into())];
        head(&mut out, 405, reason(405), &h, 0);
        return send(conn, pacer, stats, &out);
    }
    let Some(path) = resolve(root, &req.target) else {
        head(&mut out, 404, reason(404), &[("Connection", keep.into())], 0);
        return send(conn, pacer, stats, &out);
    };
    let mut file = File::open(&path)?;
    let meta = file.metadata()?;
    let size = meta.len();
    let etag =
        format!("\"{:x}-{:x}-{:x}.{:x}\"", meta.ino(), size, meta.mtime(), meta.mtime_nsec());
    let common = vec![
        ("ETag", etag.clone()),
        ("Accept-Ranges", "bytes".to_owned()),
        ("Connection", keep.to_owned()),
    ];
    if req
        .if_none_match
        .as_deref()
        .is_some_and(|v| v == "*" || v.split(',').any(|t| t.trim() == etag))
    {
        head(&mut out, 304, reason(304), &common, 0);
        // 304 has no body; Content-Length 0 is harmless for clients.
        return send(conn, pacer, stats, &out);
    }
    let ranges = match (&req.range, &req.if_range) {
        (Some(_), Some(ir)) if *ir != etag => None,
        (Some(r), _) => parse_ranges(r, size),
        (None, _) => None,
    };
    // Parts whose headers would make the answer longer than the file: the file, as nginx
    // does when the ranges add up to more than it.
    let ranges = ranges.filter(|r| r.len() < 2 || multipart(r, size).2 <= size);
    match ranges {
        None => {
            let mut h = common.clone();
            h.push(("Content-Type", "application/octet-stream".into()));
            head(&mut out, 200, reason(200), &h, size);
            send(conn, pacer, stats, &out)?;
            if !is_head {
                copy(&mut file, conn, pacer, stats, 0, size)?;
            }
        }
        Some(r) if r.is_empty() => {
            let mut h = common.clone();
            h.push(("Content-Range", format!("bytes */{size}")));
            head(&mut out, 416, reason(416), &h, 0);
            send(conn, pacer, stats, &out)?;
        }
        Some(r) if r.len() == 1 => {
            let (s, e) = r[0];
            let mut h = common.clone();
            h.push(("Content-Type", "application/octet-stream".into()));
            h.push(("Content-Range", format!("bytes {}-{}/{size}", s, e - 1)));
            head(&mut out, 206, reason(206), &h, e - s);
            send(conn, pacer, stats, &out)?;
            if !is_head {
                copy(&mut file, conn, pacer, stats, s, e)?;
            }
        }
        Some(r) => {
            let (parts, closing, len) = multipart(&r, size);
            let mut h = common.clone();
            h.push(("Content-Type", format!("multipart/byteranges; boundary={BOUNDARY}")));
            head(&mut out, 206, reason(206), &h, len);
            send(conn, pacer, stats, &out)?;
            if !is_head {
                for (p, (s, e)) in parts.iter().zip(&r) {
                    send(conn, pacer, stats, p.as_bytes())?;
                    copy(&mut file, conn, pacer, stats, *s, *e)?;
                }
                send(conn, pacer, stats, closing.as_bytes())?;
            }
        }
    }
    Ok(())
}

/// A multipart answer's part headers, its closing line and its whole length.
fn multipart(ranges: &[(u64, u64)], size: u64) -> (Vec<String>, String, u64) {
    let parts: Vec<String> = ranges
        .iter()
        .map(|(s, e)| {
            format!(
                "\r\n--{BOUNDARY}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes {}-{}/{size}\r\n\r\n",
                s,
                e - 1
            )
        })
        .collect();
    let closing = format!("\r\n--{BOUNDARY}--\r\n");
    let len = parts.iter().map(|p| p.len() as u64).sum::<u64>()
        + ranges.iter().map(|(s, e)| e - s).sum::<u64>()
        + closing.len() as u64;
    (parts, closing, len)
}

fn copy(
    file: &mut File,
    conn: &mut TcpStream,
    pacer: &Pacer,
    stats: &ServerStats,
    start: u64,
    end: u64,
) -> io::Result<()> {
    file.seek(SeekFrom::Start(start))?;
    let mut left = end - start;
    let mut buf = vec![0u8; 64 * 1024];
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = file.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while served"));
        }
        send(conn, pacer, stats, &buf[..n])?;
        left -= n as u64;
    }
    conn.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_like_rfc_9110() {
        assert_eq!(parse_ranges("bytes=0-9", 100), Some(vec![(0, 10)]));
        assert_eq!(parse_ranges("bytes=90-", 100), Some(vec![(90, 100)]));
        assert_eq!(parse_ranges("bytes=-10", 100), Some(vec![(90, 100)]));
        assert_eq!(parse_ranges("bytes=-500", 100), Some(vec![(0, 100)]));
        assert_eq!(parse_ranges("bytes=95-200", 100), Some(vec![(95, 100)]));
        assert_eq!(parse_ranges("bytes=0-0, 5-6", 100), Some(vec![(0, 1), (5, 7)]));
        assert_eq!(parse_ranges("bytes=100-", 100), Some(vec![]), "unsatisfiable");
        assert_eq!(parse_ranges("bytes=-0", 100), Some(vec![]), "unsatisfiable");
        assert_eq!(parse_ranges("bytes=5-1", 100), None, "invalid: ignored");
        assert_eq!(parse_ranges("items=0-1", 100), None, "other unit: ignored");
    }

    #[test]
    fn ranges_that_overlap_or_touch_are_merged_and_too_many_are_ignored() {
        assert_eq!(parse_ranges("bytes=10-19,0-9,5-7,30-", 100), Some(vec![(0, 20), (30, 100)]));
        assert_eq!(
            parse_ranges(&format!("bytes={}", ["0-99"; 99].join(",")), 100),
            Some(vec![(0, 100)])
        );
        let spread: Vec<String> = (0..=MAX_RANGES).map(|i| format!("{0}-{0}", 2 * i)).collect();
        assert_eq!(parse_ranges(&format!("bytes={}", spread.join(",")), 1000), None);
        assert_eq!(
            parse_ranges(&format!("bytes={}", spread[1..].join(",")), 1000).unwrap().len(),
            MAX_RANGES
        );
    }

    #[test]
    fn traversal_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a"), b"x").unwrap();
        std::fs::write(d.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink("../secret", root.join("link")).unwrap();
        let root = root.canonicalize().unwrap();
        assert!(resolve(&root, "/a").is_some());
        assert!(resolve(&root, "/a?x=1").is_some());
        for bad in
            ["/../secret", "/%2e%2e/secret", "/a/../../secret", "/link", "secret", "/", "/%00"]
        {
            assert_eq!(resolve(&root, bad), None, "{bad} must not resolve");
        }
    }
}
