//! Readiness signals: when is a program "started"?
//!
//! Process exit is the right end of start-up for a command-line tool, but not for a server, an
//! editor or a browser: those are started when they answer, draw or write a marker. The paper
//! measured "the reply to a message sent to the last window drawn"; here each signal is a
//! condition the launcher polls or reads while the program runs:
//!
//! | signal | ready when | resolution |
//! | --- | --- | --- |
//! | `exit` | the root process exits (the default) | exact (`waitid`) |
//! | `stdout:REGEX` / `stderr:REGEX` | a line of that stream matches REGEX | exact (the pipe is read as data arrives, and drained to the end so the program never blocks on a full pipe) |
//! | `tcp:PORT` | a TCP connection to 127.0.0.1:PORT is accepted | polled every [`POLL_INTERVAL`] |
//! | `file:PATH` | PATH appears, or is replaced or touched if it existed before the run (an earlier run's marker does not count) | polled every [`POLL_INTERVAL`] |
//! | `window:REGEX` | an X11 window whose name matches REGEX is mapped (viewable) on `$DISPLAY` | watched by an X11 client of coldstart's own ([`crate::x11`]): a window created, mapped or reparented wakes the launcher, which walks the window tree at once (one pipelined batch of requests per tree level, on a local socket, instead of starting `xwininfo` processes); a walk every [`WINDOW_POLL_INTERVAL`] also catches a window renamed after it was mapped |
//! | `fd` | the program writes anything to the file descriptor named in `COLDSTART_READY_FD` | exact (a pipe) |
//!
//! This crate is the signals' syntax and the checks that need no process of their own
//! ([`tcp_accepts`], [`FileMarker`], [`x11::WindowWatch`]); `measure` and `profile` each wait
//! for them in their own loop, measure beside its counters and profile beside its tracer.

pub mod x11;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use regex::Regex;

/// How often polled signals (`tcp:`, `file:`) are checked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(1);

/// How often `window:` walks the window tree when no X event woke it (a window renamed after
/// it was mapped sends no event to the root window).
pub const WINDOW_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The environment variable naming the readiness file descriptor for [`Ready::Fd`].
pub const READY_FD_ENV: &str = "COLDSTART_READY_FD";

/// The signal that ends the start-up of one run.
#[derive(Debug, Clone, Default)]
pub enum Ready {
    /// The process (the root of the tree) exits.
    #[default]
    Exit,
    /// A line of the program's standard output matches.
    Stdout(Regex),
    /// A line of the program's standard error matches.
    Stderr(Regex),
    /// A TCP connection to 127.0.0.1 on this port succeeds.
    Tcp(u16),
    /// This path exists.
    File(PathBuf),
    /// An X11 window whose name (`WM_NAME`) matches is mapped on `$DISPLAY`.
    Window(Regex),
    /// The program writes to the file descriptor named in `COLDSTART_READY_FD`.
    Fd,
}

impl PartialEq for Ready {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

/// Whether a TCP connection to 127.0.0.1 on `port` is accepted now (`tcp:PORT`).
pub fn tcp_accepts(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(50)).is_ok()
}

/// `file:PATH`: the path as it was before the run, so that a marker an earlier run left
/// does not count, while one created, replaced or touched since does.
#[derive(Debug, Clone)]
pub struct FileMarker {
    path: PathBuf,
    before: Option<(u64, u64, i64, i64)>,
}

impl FileMarker {
    /// Remember how `path` is now (or that it is absent).
    pub fn before(path: &Path) -> FileMarker {
        FileMarker { path: path.to_owned(), before: signature(path) }
    }

    /// Whether the path appeared, or was replaced or touched, since [`FileMarker::before`].
    pub fn appeared(&self) -> bool {
        match signature(&self.path) {
            Some(now) => self.before != Some(now),
            None => false,
        }
    }
}

/// Device, inode and modification time: a file replaced by rename has another inode, one
/// rewritten in place another time.
fn signature(p: &Path) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec()))
}

/// A readiness signal that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid readiness signal `{given}`: {reason} (expected exit, stdout:REGEX, stderr:REGEX, tcp:PORT, file:PATH, window:REGEX or fd)")]
pub struct ParseReadyError {
    /// The signal as given.
    pub given: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FromStr for Ready {
    type Err = ParseReadyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| ParseReadyError { given: s.to_string(), reason };
        let regex = |r: &str| {
            if r.is_empty() {
                return Err(err("the regular expression is empty".into()));
            }
            Regex::new(r).map_err(|e| err(format!("bad regular expression: {e}")))
        };
        match s.split_once(':') {
            None => match s {
                "exit" => Ok(Ready::Exit),
                "fd" => Ok(Ready::Fd),
                _ => Err(err("unknown signal".into())),
            },
            Some(("stdout", r)) => Ok(Ready::Stdout(regex(r)?)),
            Some(("stderr", r)) => Ok(Ready::Stderr(regex(r)?)),
            Some(("window", r)) => Ok(Ready::Window(regex(r)?)),
            Some(("tcp", p)) => match p.parse::<u16>() {
                Ok(port) if port > 0 => Ok(Ready::Tcp(port)),
                _ => Err(err(format!("`{p}` is not a TCP port (1-65535)"))),
            },
            Some(("file", p)) if !p.is_empty() => Ok(Ready::File(PathBuf::from(p))),
            Some(("file", _)) => Err(err("the path is empty".into())),
            Some(_) => Err(err("unknown signal".into())),
        }
    }
}

impl fmt::Display for Ready {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ready::Exit => f.write_str("exit"),
            Ready::Stdout(r) => write!(f, "stdout:{}", r.as_str()),
            Ready::Stderr(r) => write!(f, "stderr:{}", r.as_str()),
            Ready::Tcp(p) => write!(f, "tcp:{p}"),
            Ready::File(p) => write!(f, "file:{}", p.display()),
            Ready::Window(r) => write!(f, "window:{}", r.as_str()),
            Ready::Fd => f.write_str("fd"),
        }
    }
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::x11::WindowError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_every_signal() {
        for s in [
            "exit",
            "fd",
            "stdout:listening on \\d+",
            "stderr:ready",
            "tcp:8080",
            "file:/tmp/x/ready",
            "window:^xmessage$",
        ] {
            let r: Ready = s.parse().unwrap();
            assert_eq!(r.to_string(), s);
        }
        assert_eq!(Ready::default(), Ready::Exit);
        assert!(matches!("tcp:80".parse::<Ready>(), Ok(Ready::Tcp(80))));
    }

    #[test]
    fn a_file_marker_counts_a_new_or_touched_file_not_an_old_one() {
        let dir = std::env::temp_dir().join(format!("coldstart-ready-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("marker");
        let absent = FileMarker::before(&path);
        assert!(!absent.appeared());
        std::fs::write(&path, b"x").unwrap();
        assert!(absent.appeared());
        let present = FileMarker::before(&path);
        assert!(!present.appeared(), "a marker left before the run does not count");
        std::fs::write(dir.join("new"), b"y").unwrap();
        std::fs::rename(dir.join("new"), &path).unwrap();
        assert!(present.appeared(), "a replaced marker counts");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tcp_accepts_only_a_listening_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(tcp_accepts(port));
        drop(l);
        assert!(!tcp_accepts(port));
    }

    #[test]
    fn rejects_bad_signals_with_the_reason() {
        for (s, reason) in [
            ("tcp:0", "TCP port"),
            ("tcp:99999", "TCP port"),
            ("stdout:(", "bad regular expression"),
            ("stdout:", "empty"),
            ("file:", "empty"),
            ("pipe", "unknown"),
            ("http:80", "unknown"),
        ] {
            let e = s.parse::<Ready>().unwrap_err();
            assert!(e.to_string().contains(reason), "{s}: {e}");
            assert!(e.to_string().contains(s));
        }
    }
}
