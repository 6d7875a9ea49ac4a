//! The server and the link emulator over real sockets.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use coldstart_bundle::remote::{get, HttpRemote};
use coldstart_bundle::{FetchOptions, Span};
use coldstart_serve::{proxy, serve, Link};

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 253) as u8).collect()
}

fn root() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("bundle")).unwrap();
    std::fs::write(d.path().join("bundle/file"), data(1000)).unwrap();
    std::fs::write(d.path().join("secret"), b"outside").unwrap();
    d
}

/// One response: status, headers (lower-case names), body.
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

fn exchange(conn: &mut TcpStream, request: &str, head_only: bool) -> Resp {
    conn.write_all(request.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(conn.read(&mut byte).unwrap(), 1, "closed mid-headers");
        buf.push(byte[0]);
    }
    let text = String::from_utf8(buf).unwrap();
    let mut lines = text.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize =
        headers.iter().find(|(k, _)| k == "content-length").unwrap().1.parse().unwrap();
    let mut body = vec![0u8; if head_only { 0 } else { len }];
    conn.read_exact(&mut body).unwrap();
    Resp { status, headers, body }
}

fn get_req(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n")
}

#[test]
fn keep_alive_ranges_etag_head_and_416() {
    let d = root();
    let server = serve(&d.path().join("bundle"), "127.0.0.1:0", None).unwrap();
    let mut c = TcpStream::connect(server.addr()).unwrap();
    let whole = exchange(&mut c, &get_req("/file", ""), false);
    assert_eq!((whole.status, whole.body.clone()), (200, data(1000)));
    let etag = whole.header("etag").unwrap().to_owned();

    let part = exchange(&mut c, &get_req("/file", "Range: bytes=10-19\r\n"), false);
    assert_eq!(part.status, 206);
    assert_eq!(part.header("content-range"), Some("bytes 10-19/1000"));
    assert_eq!(part.body, data(1000)[10..20]);

    let tail = exchange(&mut c, &get_req("/file", "Range: bytes=-5\r\n"), false);
    assert_eq!(tail.body, data(1000)[995..]);

    let multi = exchange(&mut c, &get_req("/file", "Range: bytes=0-1,998-\r\n"), false);
    assert_eq!(multi.status, 206);
    let ct = multi.header("content-type").unwrap();
    let boundary = ct.strip_prefix("multipart/byteranges; boundary=").unwrap();
    let body = String::from_utf8_lossy(&multi.body).into_owned();
    assert_eq!(body.matches(&format!("--{boundary}")).count(), 3);
    assert!(body.contains("Content-Range: bytes 0-1/1000"));
    assert!(body.contains("Content-Range: bytes 998-999/1000"));

    let bad = exchange(&mut c, &get_req("/file", "Range: bytes=1000-\r\n"), false);
    assert_eq!(bad.status, 416);
    assert_eq!(bad.header("content-range"), Some("bytes */1000"));

    let not_modified =
        exchange(&mut c, &get_req("/file", &format!("If-None-Match: {etag}\r\n")), false);
    assert_eq!(not_modified.status, 304);
    // A stale If-Range gets the whole file.
    let stale =
        exchange(&mut c, &get_req("/file", "Range: bytes=0-0\r\nIf-Range: \"old\"\r\n"), false);
    assert_eq!((stale.status, stale.body.len()), (200, 1000));

    let head = exchange(&mut c, "HEAD /file HTTP/1.1\r\nHost: x\r\n\r\n", true);
    assert_eq!((head.status, head.header("content-length")), (200, Some("1000")));
    let post =
        exchange(&mut c, "POST /file HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", false);
    assert_eq!(post.status, 405);
    // All of the above on one connection.
    assert_eq!(server.stats().connections.load(Ordering::Relaxed), 1);
}

#[test]
fn nothing_outside_the_bundle_is_reachable() {
    let d = root();
    std::os::unix::fs::symlink("../secret", d.path().join("bundle/escape")).unwrap();
    let server = serve(&d.path().join("bundle"), "127.0.0.1:0", None).unwrap();
    let mut c = TcpStream::connect(server.addr()).unwrap();
    for path in ["/../secret", "/%2e%2e/secret", "/file/../../secret", "/escape", "//secret", "/"] {
        let r = exchange(&mut c, &get_req(path, ""), false);
        assert_eq!(r.status, 404, "{path}");
        assert!(!String::from_utf8_lossy(&r.body).contains("outside"));
    }
}

/// Fetches `count` files of `size` bytes one after the other over one keep-alive connection.
fn timed_fetches(url: &str, count: usize) -> Duration {
    let remote =
        HttpRemote::new(url, FetchOptions { connections: 1, ..Default::default() }).unwrap();
    let t = Instant::now();
    for _ in 0..count {
        get(&remote, "big", Span::Whole { max: 1 << 20 }).unwrap();
    }
    t.elapsed()
}

fn assert_matches_model(measured: Duration, link: Link, bytes: u64, requests: u64) {
    let model = link.predict(bytes, requests).as_secs_f64();
    let m = measured.as_secs_f64();
    assert!((m - model).abs() <= 0.10 * model, "measured {m:.3} s, model {model:.3} s");
}

#[test]
fn served_transfer_matches_the_link_model() {
    let d = root();
    let size = 100_000;
    std::fs::write(d.path().join("bundle/big"), data(size)).unwrap();
    let link: Link = "8mbit/50ms".parse().unwrap();
    let server = serve(&d.path().join("bundle"), "127.0.0.1:0", Some(link)).unwrap();
    let measured = timed_fetches(&server.url(), 8);
    // Bytes on the wire include the response headers.
    let sent = server.stats().bytes_sent.load(Ordering::Relaxed);
    assert!(sent >= 8 * size as u64);
    assert_matches_model(measured, link, sent, 8);
}

#[test]
fn the_proxy_applies_the_same_link_to_another_server() {
    let d = root();
    let size = 100_000;
    std::fs::write(d.path().join("bundle/big"), data(size)).unwrap();
    let upstream = serve(&d.path().join("bundle"), "127.0.0.1:0", None).unwrap();
    let link: Link = "8mbit/50ms".parse().unwrap();
    let p = proxy("127.0.0.1:0", &upstream.addr().to_string(), Some(link)).unwrap();
    let measured = timed_fetches(&p.url(), 8);
    let sent = p.stats().bytes_sent.load(Ordering::Relaxed);
    assert_eq!(p.stats().requests.load(Ordering::Relaxed), 8);
    assert_matches_model(measured, link, sent, 8);
}

/// Sockets of the server on `port` in CLOSE-WAIT: the client closed, the server did not.
fn close_wait(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && f[3] == "08" {
                n += 1;
            }
        }
    }
    n
}

/// Waits up to 2 s for the server on `port` to have no socket in CLOSE-WAIT; returns how
/// many are left.
fn settled_close_wait(port: u16) -> usize {
    let t = Instant::now();
    loop {
        let n = close_wait(port);
        if n == 0 || t.elapsed() > Duration::from_secs(2) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `request` on a new connection and reads until the server closes it (within 2 s).
fn until_closed(addr: std::net::SocketAddr, request: &str) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).expect("the server closes the connection it said it would close");
    all
}

/// Regression: the accept loop kept a copy of every connection, so a connection the
/// server was done with never closed: `Connection: close` was sent but the socket stayed
/// open, and every connection a client closed stayed in CLOSE-WAIT.
#[test]
fn serve_closes_every_connection_it_is_done_with() {
    let d = root();
    let server = serve(&d.path().join("bundle"), "127.0.0.1:0", None).unwrap();
    for _ in 0..200 {
        let r = until_closed(server.addr(), &get_req("/file", "Connection: close\r\n"));
        assert!(r.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(r.ends_with(&data(1000)));
    }
    // Clients that close first.
    for _ in 0..50 {
        let mut c = TcpStream::connect(server.addr()).unwrap();
        exchange(&mut c, &get_req("/file", ""), false);
    }
    assert_eq!(settled_close_wait(server.addr().port()), 0);
}

/// Regression: a request with LF-only line ends hung until the idle timeout, and one
/// without `Host` was served.
#[test]
fn serve_reads_lf_only_requests_and_refuses_one_without_host() {
    let d = root();
    let server = serve(&d.path().join("bundle"), "127.0.0.1:0", None).unwrap();
    let r = until_closed(server.addr(), "GET /file HTTP/1.1\nHost: x\nConnection: close\n\n");
    assert!(r.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&r));
    let r = until_closed(server.addr(), "GET /file HTTP/1.1\r\nRange: bytes=0-1\r\n\r\n");
    assert!(r.starts_with(b"HTTP/1.1 400 "), "{}", String::from_utf8_lossy(&r));
    // HTTP/1.0 has no Host.
    let r = until_closed(server.addr(), "GET /file HTTP/1.0\r\n\r\n");
    assert!(r.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&r));
    assert_eq!(coldstart_serve::request_status(b"GET / HTTP/1.1"), 400);
    assert_eq!(coldstart_serve::request_status(b"GET / HTTP/1.1\nHost: x\nRange: bytes=5-"), 206);
}

/// `coldstart serve` under load: 10,000 requests over keep-alive and closed
/// connections leave no socket in CLOSE-WAIT, and 500 clients at once are all answered.
#[test]
fn serve_under_load_answers_every_client_and_leaks_no_socket() {
    let d = root();
    let server = serve(&d.path().join("bundle"), "127.0.0.1:0", None).unwrap();
    let addr = server.addr();
    let t = Instant::now();
    std::thread::scope(|s| {
        // 5,000 over 50 keep-alive connections, 5,000 on connections of their own.
        for t in 0..50 {
            s.spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                for _ in 0..100 {
                    assert_eq!(exchange(&mut c, &get_req("/file", ""), false).body, data(1000));
                }
                if t % 2 == 0 {
                    drop(c);
                } else {
                    let _ = exchange(&mut c, &get_req("/file", "Connection: close\r\n"), false);
                }
            });
        }
        for _ in 0..10 {
            s.spawn(move || {
                for _ in 0..500 {
                    let mut c = TcpStream::connect(addr).unwrap();
                    assert_eq!(exchange(&mut c, &get_req("/file", ""), false).status, 200);
                }
            });
        }
    });
    let requests = server.stats().requests.load(Ordering::Relaxed);
    let took = t.elapsed();
    assert!(requests >= 10_000);
    let left = settled_close_wait(addr.port());
    let conns = server.stats().connections.load(Ordering::Relaxed);
    println!("{requests} requests on {conns} connections in {took:?}: {left} in CLOSE-WAIT");
    assert_eq!(left, 0);
    // 500 clients at once, each connected before any is answered.
    let barrier = std::sync::Barrier::new(500);
    let answered = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..500 {
            s.spawn(|| {
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                barrier.wait();
                if exchange(&mut c, &get_req("/file", "Connection: close\r\n"), false).body
                    == data(1000)
                {
                    answered.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    let left = settled_close_wait(addr.port());
    println!(
        "{} of 500 clients at once answered: {left} in CLOSE-WAIT",
        answered.load(Ordering::SeqCst)
    );
    assert_eq!(answered.load(Ordering::SeqCst), 500);
    assert_eq!(left, 0);
}

/// A `Range` of many overlapping or tiny ranges gets at most the object's bytes: overlapping
/// and adjacent ranges are merged, more than `MAX_RANGES` of them are ignored (the whole
/// object, as nginx's `max_ranges` does), and a multipart answer longer than the object is
/// replaced by the object.
#[test]
fn serve_never_answers_a_range_request_with_more_than_the_object() {
    let d = root();
    let big = data(4_000_000);
    std::fs::write(d.path().join("bundle/big"), &big).unwrap();
    let server = serve(&d.path().join("bundle"), "127.0.0.1:0", None).unwrap();
    let mut c = TcpStream::connect(server.addr()).unwrap();
    // 1,300 copies of the whole object in a 13 KB request.
    let many = vec!["0-3999999"; 1300].join(",");
    let r = exchange(&mut c, &get_req("/big", &format!("Range: bytes={many}\r\n")), false);
    assert!(r.body.len() <= big.len(), "{} bytes answered for {} bytes", r.body.len(), big.len());
    // Overlapping and adjacent ranges, out of order: one part.
    let r = exchange(&mut c, &get_req("/file", "Range: bytes=15-19,0-9,5-14\r\n"), false);
    assert_eq!((r.status, r.header("content-range")), (206, Some("bytes 0-19/1000")));
    assert_eq!(r.body, data(1000)[..20]);
    // More ranges than allowed: the whole object.
    let spread: Vec<String> = (0..101).map(|i| format!("{0}-{0}", i * 9)).collect();
    let r = exchange(
        &mut c,
        &get_req("/file", &format!("Range: bytes={}\r\n", spread.join(","))),
        false,
    );
    assert_eq!((r.status, r.body.clone()), (200, data(1000)));
    // Within the cap, but the parts' headers would make the answer longer than the object.
    let spread: Vec<String> = (0..20).map(|i| format!("{0}-{0}", i * 9)).collect();
    let r = exchange(
        &mut c,
        &get_req("/file", &format!("Range: bytes={}\r\n", spread.join(","))),
        false,
    );
    assert_eq!((r.status, r.body.clone()), (200, data(1000)));
    // A few small parts still get a multipart answer.
    let r = exchange(&mut c, &get_req("/file", "Range: bytes=0-1,500-501,998-\r\n"), false);
    assert_eq!(r.status, 206);
    assert!(r.header("content-type").unwrap().starts_with("multipart/byteranges"));
}
