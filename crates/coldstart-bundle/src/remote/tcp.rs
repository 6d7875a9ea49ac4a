//! The TCP transport under ureq that keeps the bounds of the fetcher (the module above): it
//! connects and reads in slices of [`POLL`], looking at the clock and the cancel flag between
//! them, and stops a request with a [`Stop`] that says why.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
};

use coldstart_sys::net::{connect, Connect};

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
            match connect(a, self.0.connect, POLL, &|| self.0.cancel.is_cancelled()) {
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
