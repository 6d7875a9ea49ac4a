//! Readiness while profiling: the signals of `coldstart measure --ready`
//! ([`coldstart_ready::Ready`], the same syntax), watched without disturbing the program.
//!
//! Each watcher raises a shared flag and writes one byte to a wake pipe the tracer polls, so
//! the tracer stops as soon as start-up is over. Output signals (`stdout:`, `stderr:`) read a
//! pipe that carries the program's output (forwarded to coldstart's own output); `fd` reads the
//! pipe named in `COLDSTART_READY_FD`; `tcp:`, `file:` and `window:` are polled.

use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

pub(crate) use coldstart_ready::READY_FD_ENV;
use coldstart_ready::{Ready, POLL_INTERVAL, WINDOW_POLL_INTERVAL};

/// Raised once, from any watcher thread.
#[derive(Clone)]
pub(crate) struct Signal {
    flag: Arc<AtomicBool>,
    wake: Arc<std::sync::Mutex<Option<File>>>,
    /// Set when the watchers should give up (the run is over).
    pub(crate) done: Arc<AtomicBool>,
}

impl Signal {
    /// A signal and the read end of its wake pipe.
    pub(crate) fn new() -> std::io::Result<(Signal, File)> {
        let (r, w) = pipe(libc::O_CLOEXEC | libc::O_NONBLOCK)?;
        let signal = Signal {
            flag: Arc::new(AtomicBool::new(false)),
            wake: Arc::new(std::sync::Mutex::new(Some(File::from(w)))),
            done: Arc::new(AtomicBool::new(false)),
        };
        Ok((signal, File::from(r)))
    }

    pub(crate) fn raise(&self) {
        self.flag.store(true, Ordering::SeqCst);
        if let Some(mut w) = self.wake.lock().ok().and_then(|mut g| g.take()) {
            let _ = w.write_all(b"r");
        }
    }

    pub(crate) fn is_raised(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    pub(crate) fn flag(&self) -> &AtomicBool {
        &self.flag
    }
}

pub(crate) use coldstart_sys::pipe;

/// Forward the program's output and raise readiness on the first line that matches.
pub(crate) fn watch_output(
    mut from: File,
    to_stderr: bool,
    regex: Option<regex::Regex>,
    signal: Signal,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        let mut line = Vec::new();
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let chunk = &buf[..n];
            let _ = if to_stderr {
                std::io::stderr().write_all(chunk)
            } else {
                std::io::stdout().write_all(chunk).and_then(|()| std::io::stdout().flush())
            };
            let Some(re) = &regex else { continue };
            if signal.is_raised() {
                continue;
            }
            for &b in chunk {
                if b == b'\n' {
                    if re.is_match(&String::from_utf8_lossy(&line)) {
                        signal.raise();
                    }
                    line.clear();
                } else {
                    line.push(b);
                }
            }
            if !line.is_empty() && re.is_match(&String::from_utf8_lossy(&line)) {
                signal.raise();
            }
        }
    })
}

/// Raise readiness on the first byte written to the `fd` pipe.
pub(crate) fn watch_fd(mut from: File, signal: Signal) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut b = [0u8; 64];
        if matches!(from.read(&mut b), Ok(n) if n > 0) {
            signal.raise();
        }
    })
}

/// Poll `tcp:`, `file:` or `window:` until it holds or the run is over.
pub(crate) fn watch_polled(ready: &Ready, signal: Signal) -> Option<JoinHandle<()>> {
    let check: Box<dyn FnMut() -> bool + Send> = match ready {
        Ready::Tcp(port) => {
            let port = *port;
            Box::new(move || coldstart_ready::tcp_accepts(port))
        }
        Ready::File(path) => {
            let marker = coldstart_ready::FileMarker::before(path);
            Box::new(move || marker.appeared())
        }
        Ready::Window(name) => {
            let name = name.clone();
            let mut watch: Option<coldstart_ready::x11::WindowWatch> = None;
            Box::new(move || {
                // No display yet (or it went away): keep trying until the run is over.
                if watch.is_none() {
                    watch = coldstart_ready::x11::WindowWatch::connect().ok();
                }
                match watch.as_ref().map(|w| w.mapped(&name)) {
                    Some(Ok(found)) => found,
                    Some(Err(_)) => {
                        watch = None;
                        false
                    }
                    None => false,
                }
            })
        }
        _ => return None,
    };
    let interval =
        if matches!(ready, Ready::Window(_)) { WINDOW_POLL_INTERVAL } else { POLL_INTERVAL };
    let mut check = check;
    Some(std::thread::spawn(move || {
        while !signal.done.load(Ordering::SeqCst) {
            if check() {
                signal.raise();
                return;
            }
            std::thread::sleep(interval);
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::Ready;

    #[test]
    fn the_measure_syntax_is_shared() {
        assert!(matches!("exit".parse::<Ready>().unwrap(), Ready::Exit));
        assert!(matches!("stdout:^ready$".parse::<Ready>().unwrap(), Ready::Stdout(_)));
        assert!(matches!("tcp:8080".parse::<Ready>().unwrap(), Ready::Tcp(8080)));
        assert!("bogus".parse::<Ready>().is_err());
    }
}
