//! The link emulator as a TCP proxy, so any server (nginx in the experiments) can be put
//! behind the same emulated link as `coldstart serve`.
//!
//! Each read from the client (a request, for HTTP/1.1 without pipelining) is delayed by the
//! link's latency before it is forwarded; everything the upstream sends back goes through the
//! shared [`Pacer`].

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::link::{Link, Pacer};
use crate::{start, Running, ServeError};

/// Listens on `addr` and forwards every connection to `upstream` through the emulated `link`.
pub fn proxy(addr: &str, upstream: &str, link: Option<Link>) -> Result<Running, ServeError> {
    let upstream: Vec<_> = upstream
        .to_socket_addrs()
        .map_err(|source| ServeError::Bind { addr: upstream.to_owned(), source })?
        .collect();
    let listener = TcpListener::bind(addr)
        .map_err(|source| ServeError::Bind { addr: addr.to_owned(), source })?;
    let pacer = Arc::new(Pacer::new(link));
    start(listener, move |client, stats| {
        let Ok(server) = TcpStream::connect_timeout(&upstream[0], Duration::from_secs(5)) else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(mut c_read), Ok(mut s_write)) = (client.try_clone(), server.try_clone()) else {
            return;
        };
        let up_pacer = pacer.clone();
        let up_stats = stats.clone();
        let upward = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match c_read.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        up_stats.requests.fetch_add(1, Ordering::Relaxed);
                        up_pacer.request_latency();
                        if s_write.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = s_write.shutdown(Shutdown::Write);
        });
        let (mut s_read, mut c_write) = (server, client);
        let mut buf = vec![0u8; 64 * 1024];
        let _: io::Result<()> = (|| loop {
            let n = s_read.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            stats.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
            pacer.write_all(&mut c_write, &buf[..n])?;
        })();
        let _ = c_write.shutdown(Shutdown::Both);
        let _ = s_read.shutdown(Shutdown::Both);
        let _ = upward.join();
    })
    .map_err(|source| ServeError::Bind { addr: addr.to_owned(), source })
}
