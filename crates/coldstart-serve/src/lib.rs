//! Serving bundles over HTTP, and emulating the network in between.
//!
//! A bundle is static files, so any HTTP server with `Range` support can serve it; this crate
//! is the one coldstart ships so that a start over a network can be tried and measured without
//! setting anything else up:
//!
//! - [`serve`]: an HTTP/1.1 file server for one directory with keep-alive, `Range` (single,
//!   and several as `multipart/byteranges`), `ETag`/`If-None-Match`/`If-Range`, `HEAD`, `416`
//!   for unsatisfiable ranges, and nothing reachable outside the directory.
//! - [`Link`]: the paper's network, bandwidth and per-request latency, applied to what the
//!   server sends. Both the server and [`proxy`] (a TCP proxy in front of another server,
//!   such as nginx) use the same [`Pacer`], so experiments can compare servers on one link.
//!
//! Plain threads: one per connection. The workloads are a handful of connections.
//!
//! ```no_run
//! let server = coldstart_serve::serve(
//!     "app.bundle".as_ref(),
//!     "127.0.0.1:0",
//!     Some("1mbit/100ms".parse().unwrap()),
//! )?;
//! println!("{}", server.url());
//! server.wait();
//! # Ok::<(), coldstart_serve::ServeError>(())
//! ```

mod http;
mod link;
mod proxy;

pub use http::serve;
pub use link::{Link, LinkParseError, Pacer};
pub use proxy::proxy;

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use coldstart_error::Category;

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}; choose another --addr")]
    Bind { addr: String, source: std::io::Error },
    #[error("{path} is not a directory: give the bundle directory written by `coldstart pack`")]
    NotADirectory { path: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

impl ServeError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ServeError::Bind { .. } | ServeError::NotADirectory { .. } => Category::Usage,
            ServeError::Io { .. } => Category::Environment,
        }
    }
}

/// Counters of a running server or proxy.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Requests answered (the proxy counts client reads forwarded).
    pub requests: AtomicU64,
    /// Bytes sent to clients (headers included).
    pub bytes_sent: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
}

/// A running server or proxy. Dropping it stops it and closes its connections.
pub struct Running {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    stats: Arc<ServerStats>,
    accept: Option<JoinHandle<()>>,
}

impl Running {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/`, the URL of the served directory.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// What it has done so far.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// Blocks until stopped (forever, for a server run from the command line).
    pub fn wait(mut self) {
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }

    /// Stops accepting and closes every open connection (as a crashed server would).
    pub fn stop(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wake the blocking accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The accept loop shared by the server and the proxy.
pub(crate) fn start(
    listener: std::net::TcpListener,
    handle: impl Fn(TcpStream, Arc<ServerStats>) + Send + Sync + 'static,
) -> std::io::Result<Running> {
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    let stats: Arc<ServerStats> = Arc::default();
    let handle = Arc::new(handle);
    let accept = {
        let (stop, conns, stats) = (stop.clone(), conns.clone(), stats.clone());
        std::thread::Builder::new().name("coldstart-accept".into()).spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                stats.connections.fetch_add(1, Ordering::Relaxed);
                if let Ok(c) = conn.try_clone() {
                    let mut list = conns.lock().unwrap();
                    // Forget connections that have closed.
                    list.retain(|c| c.peer_addr().is_ok());
                    list.push(c);
                }
                let (handle, stats) = (handle.clone(), stats.clone());
                let _ = std::thread::Builder::new()
                    .name("coldstart-conn".into())
                    .spawn(move || handle(conn, stats));
            }
        })?
    };
    Ok(Running { addr, stop, conns, stats, accept: Some(accept) })
}
