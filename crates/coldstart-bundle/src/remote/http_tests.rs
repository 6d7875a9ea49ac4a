use super::*;
use crate::manifest::{Chunk, Compression};
use crate::remote::{get, get_chunk, open};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A one-shot server answering each connection's requests with canned responses.
fn serve(responses: Vec<&'static [u8]>) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/b", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let mut requests = Vec::new();
        let (mut s, _) = l.accept().unwrap();
        for r in responses {
            // One request head, whatever writes it came in.
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(1) => head.push(b[0]),
                    _ => return requests,
                }
            }
            requests.push(String::from_utf8_lossy(&head).into_owned());
            s.write_all(r).unwrap();
        }
        requests
    });
    (url, h)
}

/// A server answering every request of every connection with `response`.
fn serve_each(response: &'static [u8]) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf), Ok(n) if n > 0) {
                    if s.write_all(response).is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
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
    assert!(reqs[0].to_ascii_lowercase().contains("range: bytes=2-4\r\n"), "{}", reqs[0]);
    assert!(reqs[1].to_ascii_lowercase().contains("range: bytes=7-8\r\n"), "{}", reqs[1]);
    assert_eq!(r.stats().requests.load(Ordering::Relaxed), 2);
}

#[test]
fn a_corrupt_chunk_is_retried_then_refused() {
    let (url, _h) = serve(vec![
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabX",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabY",
    ]);
    let opts = FetchOptions { retries: 1, backoff: Duration::from_millis(1), ..Default::default() };
    let r = HttpRemote::new(&url, opts).unwrap();
    let chunk = Chunk {
        offset: 0,
        length: 3,
        sha256: crate::sha256_hex(b"abc"),
        stored: None,
        object: None,
        at: 0,
    };
    let manifest = crate::Manifest {
        format: crate::FORMAT.into(),
        version: crate::VERSION,
        chunk_size: 3,
        compression: Compression::None,
        files: Vec::new(),
        objects: Vec::new(),
        hot: crate::HotSet { offset: 0, size: 3, chunks: Vec::new() },
    };
    let err = get_chunk(&r, &manifest, &chunk).unwrap_err();
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
    assert!(HttpRemote::new("https://example.invalid/b?x=1", FetchOptions::default()).is_ok());
    let ca = tempfile::NamedTempFile::new().unwrap();
    let opts = FetchOptions { ca_file: Some(ca.path().into()), ..Default::default() };
    let err = HttpRemote::new("https://h/", opts).unwrap_err();
    assert!(err.to_string().contains("no PEM certificate"), "{err}");
    assert!(matches!(HttpRemote::new("http://", FetchOptions::default()), Err(FetchError::Url(_))));
}

#[test]
fn a_user_and_password_in_the_url_are_never_shown() {
    assert_eq!(redact_url("https://u:p@h:1/b/?q=a@b"), "https://***@h:1/b/?...");
    assert_eq!(redact_url("http://h/b@c"), "http://h/b@c");
    let r = HttpRemote::new("http://user:secret@127.0.0.1:9/b/", FetchOptions::default()).unwrap();
    assert_eq!(r.describe("manifest.json"), "http://***@127.0.0.1:9/b/manifest.json");
    let err = HttpRemote::new("http://user:secret@h:x:y/", FetchOptions::default()).unwrap_err();
    assert!(!err.to_string().contains("secret"), "{err}");
}

#[test]
fn an_https_port_asked_in_plain_http_is_told_by_what_servers_answer() {
    let nginx = b"<html><center>The plain HTTP request was sent to HTTPS port</center></html>";
    assert!(says_https_port(nginx));
    assert!(says_https_port(b"Client sent an HTTP request to an HTTPS server.\n"));
    assert!(!says_https_port(b"<html>400 Bad Request</html>"));
    let url = serve_each(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 45\r\n\r\nThe plain HTTP request was sent to HTTPS port",
    );
    let r = HttpRemote::new(&url, FetchOptions::default()).unwrap();
    let err = get(&r, "m", WHOLE).unwrap_err();
    assert!(matches!(err, FetchError::HttpsPort { .. }), "{err}");
    assert!(err.to_string().contains(&url.replacen("http://", "use https://", 1)), "{err}");
    assert_eq!(r.stats().requests.load(Ordering::Relaxed), 1, "not retried");
}

#[test]
fn error_statuses_are_not_retried_forever() {
    let (url, _h) = serve(vec![b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"]);
    let r = HttpRemote::new(&url, FetchOptions::default()).unwrap();
    let err = get(&r, "nope", WHOLE).unwrap_err();
    // Said as the server said it, after the one attempt: no "gave up".
    assert!(matches!(err, FetchError::Status { status: 404, .. }), "{err}");
    assert_eq!(r.stats().requests.load(Ordering::Relaxed), 1);
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
    fails_within_a_second(&url, "no answer within 0.3 s");
}

/// A whole-object fetch from `url` with a 0.3 s timeout fails within a second, with an error
/// that says `why`.
fn fails_within_a_second(url: &str, why: &str) {
    let r = HttpRemote::new(url, once(300)).unwrap();
    let t = Instant::now();
    let err = get(&r, "m", WHOLE).unwrap_err();
    assert!(err.to_string().contains(why), "{err}");
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
    // The head at once, then one window of 0.3 s.
    fails_within_a_second(&url, "slower than the 1024 bytes/s");
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
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4611686018427387904\r\n\r\nabc");
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
fn a_redirect_is_followed_within_its_bound() {
    // To another server: followed, the Range kept.
    let (target, h) =
        serve(vec![b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 1-2/5\r\nContent-Length: 2\r\n\r\nbc"]);
    let location = format!("{target}/x");
    let url = misbehave(move |mut s| {
        let r = format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n");
        let _ = s.write_all(r.as_bytes());
    });
    let r = HttpRemote::new(&url, FetchOptions::default()).unwrap();
    assert_eq!(get(&r, "m", Span::Range(1, 3)).unwrap(), b"bc");
    let reqs = h.join().unwrap();
    assert!(reqs[0].starts_with("GET /b/x HTTP/1.1\r\n"), "{}", reqs[0]);
    assert!(reqs[0].to_ascii_lowercase().contains("range: bytes=1-2\r\n"), "{}", reqs[0]);
    // To itself, for ever: refused after MAX_REDIRECTS, not retried.
    let url = serve_each(b"HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n");
    let r = HttpRemote::new(&url, FetchOptions::default()).unwrap();
    let err = get(&r, "m", WHOLE).unwrap_err();
    assert!(matches!(&err, FetchError::Redirect { .. }), "{err}");
    assert!(err.to_string().contains("redirects more than 5 times"), "{err}");
}

#[test]
fn a_query_string_follows_the_files_path() {
    let (url, h) = serve(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]);
    let signed = format!("{url}/prefix?X-Amz-Signature=abc&X-Amz-Date=1");
    let r = HttpRemote::new(&signed, FetchOptions::default()).unwrap();
    assert_eq!(get(&r, "manifest.json", WHOLE).unwrap(), b"ok");
    let reqs = h.join().unwrap();
    assert!(
        reqs[0].starts_with(
            "GET /b/prefix/manifest.json?X-Amz-Signature=abc&X-Amz-Date=1 HTTP/1.1\r\n"
        ),
        "{}",
        reqs[0]
    );
    // The signature is not shown in messages.
    assert!(!r.describe("manifest.json").contains("abc"), "{}", r.describe("manifest.json"));
}

#[test]
fn chunked_responses_are_read() {
    let (url, _h) = serve(vec![
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
    ]);
    let r = HttpRemote::new(&url, FetchOptions { retries: 0, ..Default::default() }).unwrap();
    assert_eq!(get(&r, "x", WHOLE).unwrap(), b"abcdefg");
    // Longer than the span allows: refused.
    let err = get(&r, "x", Span::Whole { max: 5 }).unwrap_err();
    assert!(err.to_string().contains("longer than the 5"), "{err}");
}

#[test]
fn an_origin_that_ignores_range_is_said_once() {
    let url = serve_each(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcdefghij");
    let said = Arc::new(Mutex::new(Vec::<String>::new()));
    let to = said.clone();
    let warn = crate::remote::Warn::new(move |m| to.lock().unwrap().push(m.to_owned()));
    let r = HttpRemote::new(&url, FetchOptions { warn, ..Default::default() }).unwrap();
    assert_eq!(get(&r, "x", Span::Range(2, 4)).unwrap(), b"cd");
    assert_eq!(get(&r, "x", Span::Range(1, 2)).unwrap(), b"b");
    let said = said.lock().unwrap();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("ignores Range"), "{said:?}");
}

#[test]
fn a_cancel_stops_a_fetch_waiting_on_the_server() {
    let url = misbehave(|s| {
        std::thread::sleep(Duration::from_secs(5));
        drop(s);
    });
    cancelled_within_600_ms(&url, FetchOptions::default());
    // A connect to an address that does not answer is cancelled the same way.
    let (_full, addr) = unanswering();
    let opts = FetchOptions { connect_timeout: Duration::from_secs(30), ..once(30_000) };
    cancelled_within_600_ms(&format!("http://{addr}/"), opts);
}

/// A whole-object fetch from `url` with `opts`, cancelled after 200 ms, ends cancelled within
/// 600 ms.
fn cancelled_within_600_ms(url: &str, opts: FetchOptions) {
    let cancel = opts.cancel.clone();
    let r = HttpRemote::new(url, opts).unwrap();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        cancel.cancel();
    });
    let t = Instant::now();
    let err = get(&r, "m", WHOLE).unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    assert!(t.elapsed() < Duration::from_millis(600), "{:?}", t.elapsed());
}

/// An address on loopback that never completes a connection: a listener with a backlog of
/// none whose one place is taken (the guard holds both), so the kernel drops every further
/// SYN and a client waits, as for a host that does not answer.
fn unanswering() -> ((std::os::fd::OwnedFd, TcpStream), std::net::SocketAddr) {
    use std::os::fd::OwnedFd;
    let bound = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = bound.local_addr().unwrap();
    coldstart_sys::net::set_backlog(&bound, 0).unwrap();
    let fd = OwnedFd::from(bound);
    let taken = TcpStream::connect(addr).unwrap();
    ((fd, taken), addr)
}

#[test]
fn responses_parse_as_a_server_sends_them() {
    let body = parse_response(b"HTTP/1.1 200 OK\nContent-Length: 3\n\nabc", WHOLE).unwrap();
    assert_eq!(body, b"abc", "LF-only lines");
    let body = parse_response(b"HTTP/1.0 200 OK\r\n\r\nabcdef", Span::Range(2, 4)).unwrap();
    assert_eq!(body, b"cd", "a server that ignores Range");
    for bad in [
        &b"HTTP/1.1 206 Partial\r\nContent-Range: bytes 3-4/10\r\nContent-Length: 2\r\n\r\nde"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
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
