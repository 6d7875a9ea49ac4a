//! The TCP transport under ureq that keeps the bounds of the fetcher (the module above): it
//! connects and reads in slices of [`POLL`], looking at the clock and the cancel flag between
//! them, and stops a request with a [`Stop`] that says why.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
};

use super::tls::Peer;
use super::{Cancel, FetchOptions, POLL};

/// Why the transport stopped a request; carried through ureq inside an [`io::Error`].
#[derive(Debug)]
pub(super) enum Stop {
    Cancelled,
    Timeout(String),
    /// Connecting to the peer failed: nothing was sent.
    NotConnected(Peer, io::Error),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Cancelled => f.write_str("stopped: coldstart was interrupted"),
            Stop::Timeout(what) => f.write_str(what),
            Stop::NotConnected(peer, e) => write!(f, "cannot connect to {peer}: {e}"),
        }
    }
}

impl std::error::Error for Stop {}

pub(super) fn stop(s: Stop) -> ureq::Error {
    let kind = match &s {
        Stop::NotConnected(_, e) => e.kind(),
        Stop::Timeout(_) => io::ErrorKind::TimedOut,
        Stop::Cancelled => io::ErrorKind::Interrupted,
    };
    ureq::Error::Io(io::Error::new(kind, s))
}

/// The bounds the transport keeps.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    connect: Duration,
    io: Duration,
    min_rate: u64,
    cancel: Cancel,
}

impl Limits {
    pub(super) fn of(o: &FetchOptions) -> Limits {
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
pub(super) struct PollingTcp(pub(super) Limits);

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
        let peer = Peer::of(details.uri);
        let mut last = None;
        for a in details.addrs.iter() {
            match connect(a, self.0.connect, &self.0.cancel) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    s.set_read_timeout(Some(POLL))
                        .and_then(|_| s.set_write_timeout(Some(self.0.io)))
                        .map_err(|e| stop(Stop::NotConnected(peer.clone(), e)))?;
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
                        "could not connect to {peer} within {}",
                        secs(self.0.connect)
                    )))
                }
                Err(Connect::Failed(e)) => last = Some(Stop::NotConnected(peer.clone(), e)),
            }
        }
        Err(stop(last.unwrap_or_else(|| {
            Stop::NotConnected(peer, io::Error::new(io::ErrorKind::NotFound, "no address"))
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
pub(super) struct PollingTransport {
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
