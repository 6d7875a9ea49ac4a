//! Sockets as std does not make them: a TCP connect that can be cancelled while it waits, and
//! a listener's backlog.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Why [`connect`] gave no stream.
#[derive(Debug)]
pub enum Connect {
    /// `cancelled` said so while the connection was under way.
    Cancelled,
    /// No answer within the timeout.
    TimedOut,
    /// The connection failed (refused, unreachable, ...).
    Failed(io::Error),
}

/// Connects to `addr` within `timeout`, asking `cancelled` at least every `poll`: a
/// non-blocking `connect` and `poll`, as `TcpStream::connect_timeout` does, but cancellable.
/// The stream returned is blocking.
pub fn connect(
    addr: &SocketAddr,
    timeout: Duration,
    poll: Duration,
    cancelled: &dyn Fn() -> bool,
) -> Result<TcpStream, Connect> {
    let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: a plain socket call; the descriptor is owned at once below.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(Connect::Failed(io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    set_nonblocking(fd, true);
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a socket address of `len` bytes.
    let r = unsafe { libc::connect(fd, &storage as *const _ as *const libc::sockaddr, len) };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(Connect::Failed(e));
        }
        wait_writable(fd, Instant::now() + timeout, poll, cancelled)?;
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
    // Back to blocking: reads are bounded by their timeout.
    set_nonblocking(fd, false);
    Ok(TcpStream::from(owned))
}

/// Waits until the connecting socket `fd` is writable (connected or failed), until `end`.
fn wait_writable(
    fd: RawFd,
    end: Instant,
    poll: Duration,
    cancelled: &dyn Fn() -> bool,
) -> Result<(), Connect> {
    loop {
        if cancelled() {
            return Err(Connect::Cancelled);
        }
        let now = Instant::now();
        if now >= end {
            return Err(Connect::TimedOut);
        }
        let wait = (end - now).min(poll).as_millis().max(1) as libc::c_int;
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
            return Ok(());
        }
    }
}

fn set_nonblocking(fd: RawFd, on: bool) {
    // SAFETY: fcntl on a descriptor the caller owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        let flags = if on { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
        libc::fcntl(fd, libc::F_SETFL, flags);
    }
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

/// Sets the backlog of a listening socket (std listens with 128): how many connections the
/// kernel queues before `accept`.
pub fn set_backlog(listener: &TcpListener, backlog: i32) -> io::Result<()> {
    // SAFETY: listen on a socket that is already listening only changes its backlog.
    if unsafe { libc::listen(listener.as_raw_fd(), backlog) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connects_to_a_listener_and_is_refused_by_a_closed_port() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        set_backlog(&l, 512).unwrap();
        let addr = l.local_addr().unwrap();
        let s = connect(&addr, Duration::from_secs(5), Duration::from_millis(50), &|| false);
        assert!(s.is_ok(), "{s:?}");
        drop(l);
        let r = connect(&addr, Duration::from_secs(5), Duration::from_millis(50), &|| false);
        assert!(matches!(r, Err(Connect::Failed(_))), "{r:?}");
    }
}
