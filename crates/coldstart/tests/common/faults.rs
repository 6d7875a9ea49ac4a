//! A web server that misbehaves on purpose: it serves a bundle directory like any static file
//! server (keep-alive, one `Range` at a time), and answers the requests it is told to pick
//! with one [`Fault`]: it hangs, drips, floods, cuts, corrupts, resets, redirects or lies about
//! lengths. The network-facing commands are run against it to check that they end within
//! their bounds, deliver no wrong byte and leave nothing behind.
//!
//! It listens on 127.0.0.1 on a free port and stops (closing every connection) on drop.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the server misbehaves on the requests it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answers correctly.
    None,
    /// Reads the request and never answers.
    Hang,
    /// Sends the right response one byte every [`DRIP_EVERY`].
    Drip,
    /// Sends a head without a length, then bytes without end, as fast as the client takes them.
    Flood,
    /// Sends the right head and half the body, then closes the connection.
    Cut,
    /// Sends the right head and a body of the right length with some bytes changed.
    Corrupt,
    /// Reads the request and resets the connection (RST).
    Reset,
    /// Redirects to the same URL, for ever.
    Redirect,
    /// Says the body is 2^62 bytes, sends the real body, and goes silent.
    LieLonger,
    /// Says the body is half as long as it is, and sends all of it.
    LieShorter,
}

impl Fault {
    /// Every way of misbehaving.
    pub const ALL: [Fault; 9] = [
        Fault::Hang,
        Fault::Drip,
        Fault::Flood,
        Fault::Cut,
        Fault::Corrupt,
        Fault::Reset,
        Fault::Redirect,
        Fault::LieLonger,
        Fault::LieShorter,
    ];
}

/// The gap between two bytes of [`Fault::Drip`].
pub const DRIP_EVERY: Duration = Duration::from_millis(100);

/// Which requests misbehave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The manifest's copies: `start` from its first byte, `manifest.json.zst`,
    /// `manifest.json`.
    Manifest,
    /// Everything else: the cold objects, and `Range`s of `start` that begin past its first
    /// byte (hot pieces).
    Data,
    /// Every request.
    All,
}

impl Target {
    fn picks(self, path: &str, range: Option<(u64, Option<u64>)>) -> bool {
        let from_start = range.is_none_or(|(a, _)| a == 0);
        let manifest = matches!(path, "manifest.json.zst" | "manifest.json")
            || (path == "start" && from_start);
        match self {
            Target::Manifest => manifest,
            Target::Data => !manifest,
            Target::All => true,
        }
    }
}

/// The running server.
pub struct FaultServer {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Conns,
    /// Requests it has read.
    pub requests: Arc<AtomicU64>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl FaultServer {
    /// Serves `bundle`, answering the requests `target` picks with `fault`.
    pub fn start(bundle: &Path, fault: Fault, target: Target) -> FaultServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Conns = Arc::default();
        let requests = Arc::new(AtomicU64::new(0));
        let root = bundle.to_path_buf();
        let accept = {
            let (stop, conns, requests) = (stop.clone(), conns.clone(), requests.clone());
            std::thread::spawn(move || {
                let mut next = 0u64;
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let Ok(clone) = conn.try_clone() else { continue };
                    next += 1;
                    let id = next;
                    conns.lock().unwrap().insert(id, clone);
                    let (root, stop, requests) = (root.clone(), stop.clone(), requests.clone());
                    let conns = conns.clone();
                    std::thread::spawn(move || {
                        let _ = connection(conn, &root, fault, target, &stop, &requests, &|| {
                            conns.lock().unwrap().remove(&id);
                        });
                        conns.lock().unwrap().remove(&id);
                    });
                }
            })
        };
        FaultServer { addr, stop, conns, requests, accept: Some(accept) }
    }

    /// `http://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        for (_, c) in self.conns.lock().unwrap().drain() {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

/// The open connections, by a number, so that each is closed when its thread ends (and
/// every one when the server stops).
type Conns = Arc<Mutex<std::collections::HashMap<u64, TcpStream>>>;

/// One request: the path (without the leading `/`) and the range asked for.
struct Request {
    path: String,
    range: Option<(u64, Option<u64>)>,
}

fn read_request(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Request> {
    let mut tmp = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = conn.read(&mut tmp).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end + 4);
    let mut lines = head.split("\r\n");
    let target = lines.next()?.split(' ').nth(1)?.to_owned();
    let mut range = None;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else { continue };
        if k.trim().eq_ignore_ascii_case("range") {
            let spec = v.trim().strip_prefix("bytes=")?;
            let (a, b) = spec.split_once('-')?;
            range = Some((a.parse().ok()?, b.parse().ok()));
        }
    }
    Some(Request { path: target.trim_start_matches('/').to_owned(), range })
}

fn connection(
    mut conn: TcpStream,
    root: &Path,
    fault: Fault,
    target: Target,
    stop: &AtomicBool,
    requests: &AtomicU64,
    forget: &dyn Fn(),
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut conn, &mut buf) {
        requests.fetch_add(1, Ordering::SeqCst);
        let file: PathBuf = root.join(&req.path);
        let Ok(data) = std::fs::read(&file).map_err(|_| ()).and_then(|d| {
            if req.path.contains("..") {
                Err(())
            } else {
                Ok(d)
            }
        }) else {
            conn.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        };
        let size = data.len() as u64;
        let (status, body, content_range) = match req.range {
            Some((a, b)) if a < size => {
                let end = b.map_or(size, |b| (b + 1).min(size));
                let cr = format!("Content-Range: bytes {a}-{}/{size}\r\n", end - 1);
                ("206 Partial Content", data[a as usize..end as usize].to_vec(), cr)
            }
            Some(_) => {
                let h = format!("HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{size}\r\nContent-Length: 0\r\n\r\n");
                conn.write_all(h.as_bytes())?;
                continue;
            }
            None => ("200 OK", data, String::new()),
        };
        let head = |len: &str| format!("HTTP/1.1 {status}\r\n{content_range}{len}\r\n");
        let right = head(&format!("Content-Length: {}\r\n", body.len()));
        let picked = target.picks(&req.path, req.range) && fault != Fault::None;
        if !picked {
            conn.write_all(right.as_bytes())?;
            conn.write_all(&body)?;
            continue;
        }
        match fault {
            Fault::None => unreachable!(),
            Fault::Hang => {
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                return Ok(());
            }
            Fault::Drip => {
                for b in right.as_bytes().iter().chain(&body) {
                    if stop.load(Ordering::SeqCst) {
                        return Ok(());
                    }
                    conn.write_all(&[*b])?;
                    std::thread::sleep(DRIP_EVERY);
                }
            }
            Fault::Flood => {
                conn.write_all(format!("HTTP/1.1 {status}\r\n{content_range}\r\n").as_bytes())?;
                let junk = vec![0x5au8; 64 * 1024];
                while !stop.load(Ordering::SeqCst) {
                    conn.write_all(&junk)?;
                }
                return Ok(());
            }
            Fault::Cut => {
                conn.write_all(right.as_bytes())?;
                conn.write_all(&body[..body.len() / 2])?;
                return Ok(());
            }
            Fault::Corrupt => {
                let mut bad = body.clone();
                for i in (0..bad.len()).step_by(997) {
                    bad[i] ^= 0x20;
                }
                conn.write_all(right.as_bytes())?;
                conn.write_all(&bad)?;
            }
            Fault::Reset => {
                // The last descriptor of the socket closes with a reset.
                forget();
                reset(conn);
                return Ok(());
            }
            Fault::Redirect => {
                let h = format!(
                    "HTTP/1.1 302 Found\r\nLocation: /{}\r\nContent-Length: 0\r\n\r\n",
                    req.path
                );
                conn.write_all(h.as_bytes())?;
            }
            Fault::LieLonger => {
                conn.write_all(head("Content-Length: 4611686018427387904\r\n").as_bytes())?;
                conn.write_all(&body)?;
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                return Ok(());
            }
            Fault::LieShorter => {
                conn.write_all(
                    head(&format!("Content-Length: {}\r\n", body.len() / 2)).as_bytes(),
                )?;
                conn.write_all(&body)?;
            }
        }
    }
    Ok(())
}

/// Closes `conn` with a reset: `SO_LINGER` of zero, then close.
fn reset(conn: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: a valid socket and a `linger` of the size given.
    unsafe {
        libc::setsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(conn);
}

/// A bundle of real programs nobody here wrote: `bin/sum` (`sha256sum`), `bin/nap`
/// (`sleep`) and `data.bin` (200 kB), in chunks of 16 KiB, with `sum` and the start of the
/// data as the hot set.
pub struct Tools {
    /// The packed directory.
    pub app: PathBuf,
    /// The bundle.
    pub bundle: PathBuf,
    /// The SHA-256 of `data.bin`, as `sha256sum` prints it.
    pub data_sha256: String,
}

/// The ground of a test of the network-facing commands: root for `root_for` (without it,
/// `None`: the test skips), a scratch directory, and the [`Tools`] packed in it.
pub fn scratch_with_tools(root_for: &str) -> Option<(super::Scratch, Tools)> {
    if !super::require_root(root_for) {
        return None;
    }
    let d = super::Scratch::new();
    let t = tools(d.path());
    Some((d, t))
}

/// Packs [`Tools`] under `dir` with `coldstart pack`.
pub fn tools(dir: &Path) -> Tools {
    let app = dir.join("app");
    std::fs::create_dir_all(app.join("bin")).unwrap();
    std::fs::copy("/usr/bin/sha256sum", app.join("bin/sum")).unwrap();
    std::fs::copy("/usr/bin/sleep", app.join("bin/nap")).unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2654435761) >> 9) as u8).collect();
    std::fs::write(app.join("data.bin"), &data).unwrap();
    let out = std::process::Command::new("sha256sum").arg(app.join("data.bin")).output().unwrap();
    let data_sha256 = String::from_utf8_lossy(&out.stdout)[..64].to_owned();
    let sum_len = std::fs::metadata(app.join("bin/sum")).unwrap().len();
    let hot = dir.join("hot.json");
    std::fs::write(
        &hot,
        format!(
            r#"{{"format": "coldstart-hot-list", "version": 1, "touches": [
                {{"path": "bin/sum", "offset": 0, "length": {sum_len}}},
                {{"path": "data.bin", "offset": 0, "length": 40000}}]}}"#
        ),
    )
    .unwrap();
    let bundle = dir.join("bundle");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .arg("pack")
        .arg(&app)
        .args(["--chunk-size", "16k", "--hot-list"])
        .arg(&hot)
        .arg("-o")
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Tools { app, bundle, data_sha256 }
}

/// A child's output, or `None` if it was still running after `limit` (it is then killed),
/// and how long it ran. Output written after the child ended (by a process it left behind)
/// is waited for one second at most.
pub fn bounded(
    cmd: &mut std::process::Command,
    limit: Duration,
) -> (Option<std::process::Output>, Duration) {
    use std::process::Stdio;
    let t = std::time::Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let collect = |mut r: Box<dyn Read + Send>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            let _ = tx.send(v);
        });
        rx
    };
    let o = collect(Box::new(child.stdout.take().unwrap()));
    let e = collect(Box::new(child.stderr.take().unwrap()));
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let took = t.elapsed();
            let wait = Duration::from_secs(1);
            let stdout = o.recv_timeout(wait).unwrap_or_default();
            let stderr = e.recv_timeout(wait).unwrap_or_default();
            return (Some(std::process::Output { status, stdout, stderr }), took);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return (None, t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
