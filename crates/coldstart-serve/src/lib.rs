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

pub use http::{request_status, serve};
pub use link::{Link, LinkParseError, Pacer};
pub use proxy::proxy;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use coldstart_error::Category;

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}; choose another --addr")]
    Bind {
        /// The address asked for (`--addr`).
        addr: String,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// What was to be served is not a directory.
    #[error("{path} is not a directory: give the bundle directory written by `coldstart pack`")]
    NotADirectory {
        /// The path given.
        path: String,
    },
    /// Reading what was to be served failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// Why reading it failed.
        source: std::io::Error,
    },
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

/// The open connections of a server, by number: each is forgotten (and so closed) as soon as
/// its thread is done with it, and the rest are shut down when the server stops.
type Connections = Arc<Mutex<HashMap<u64, TcpStream>>>;

/// A running server or proxy. Dropping it stops it and closes its connections.
pub struct Running {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Connections,
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
        for (_, c) in self.conns.lock().unwrap().drain() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How many connections may wait to be accepted.
const BACKLOG: i32 = 1024;

/// The accept loop shared by the server and the proxy: a thread per connection, which closes
/// it when done (the copy kept to stop the server is dropped then too). When accepting fails
/// (out of descriptors) it waits a little instead of spinning.
pub(crate) fn start(
    listener: std::net::TcpListener,
    handle: impl Fn(TcpStream, Arc<ServerStats>) + Send + Sync + 'static,
) -> std::io::Result<Running> {
    let addr = listener.local_addr()?;
    // std listens with a backlog of 128; many clients at once need more.
    let _ = coldstart_sys::net::set_backlog(&listener, BACKLOG);
    let stop = Arc::new(AtomicBool::new(false));
    let conns: Connections = Arc::default();
    let stats: Arc<ServerStats> = Arc::default();
    let handle = Arc::new(handle);
    let accept = {
        let (stop, conns, stats) = (stop.clone(), conns.clone(), stats.clone());
        std::thread::Builder::new().name("coldstart-accept".into()).spawn(move || {
            let mut next = 0u64;
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let conn = match conn {
                    Ok(c) => c,
                    Err(_) => {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        continue;
                    }
                };
                stats.connections.fetch_add(1, Ordering::Relaxed);
                next += 1;
                let id = next;
                if let Ok(c) = conn.try_clone() {
                    conns.lock().unwrap().insert(id, c);
                }
                let (handle, stats, mine) = (handle.clone(), stats.clone(), conns.clone());
                let spawned =
                    std::thread::Builder::new().name("coldstart-conn".into()).spawn(move || {
                        handle(conn, stats);
                        mine.lock().unwrap().remove(&id);
                    });
                if spawned.is_err() {
                    // The connection was dropped with the closure: forget its copy too.
                    conns.lock().unwrap().remove(&id);
                }
            }
        })?
    };
    Ok(Running { addr, stop, conns, stats, accept: Some(accept) })
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::ServeError)
}
