//! The signals that end a command (SIGINT, SIGTERM, SIGHUP), for the commands that must clean
//! up before they exit (`mount`, `run`, `predict`, `pack`): blocked in every thread and waited
//! for on a thread of their own. While the command is starting they cancel its work at once
//! (every fetch and wait stops within [`coldstart_bundle::remote::POLL`]); afterwards they are
//! only reported, and the command decides (`run` forwards them to its command).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use coldstart_bundle::Cancel;

/// Signals received, as they arrive.
pub struct Signals {
    rx: mpsc::Receiver<i32>,
    first: Arc<AtomicI32>,
    cancelling: Arc<AtomicBool>,
}

impl Signals {
    /// Blocks the signals in this thread and those it starts afterwards (call it before
    /// starting any), and waits for them on a thread of its own. Until
    /// [`Signals::report_only`], a signal also cancels `cancel`.
    pub fn start(cancel: Cancel) -> Signals {
        let set = block();
        let (tx, rx) = mpsc::channel();
        let first = Arc::new(AtomicI32::new(0));
        let cancelling = Arc::new(AtomicBool::new(true));
        let (f, c) = (first.clone(), cancelling.clone());
        let _ = std::thread::Builder::new().name("coldstart-signals".into()).spawn(move || loop {
            if let Some(s) = wait(&set, Duration::from_millis(500)) {
                let _ = f.compare_exchange(0, s, Ordering::SeqCst, Ordering::SeqCst);
                if c.load(Ordering::SeqCst) {
                    cancel.cancel();
                }
                if tx.send(s).is_err() {
                    return;
                }
            }
        });
        Signals { rx, first, cancelling }
    }

    /// The first signal received, if any.
    pub fn first(&self) -> Option<i32> {
        Some(self.first.load(Ordering::SeqCst)).filter(|&s| s != 0)
    }

    /// From now on a signal no longer cancels: it is only reported ([`Signals::next`]).
    pub fn report_only(&self) {
        self.cancelling.store(false, Ordering::SeqCst);
    }

    /// The next signal, waiting up to `timeout` for it.
    pub fn next(&self, timeout: Duration) -> Option<i32> {
        self.rx.recv_timeout(timeout).ok()
    }
}

/// The exit code of a command that ended on `signal`: 128 + its number, as a shell says it.
pub fn exit_code(signal: i32) -> ExitCode {
    ExitCode::from((128 + signal).clamp(0, 255) as u8)
}

/// `SIGTERM` and the like, by name.
pub fn name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and the threads it starts afterwards).
fn block() -> libc::sigset_t {
    // SAFETY: plain signal-mask calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits up to `timeout` for one of `set`; returns it.
fn wait(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid set and timespec; no siginfo wanted.
    let s = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (s > 0).then_some(s)
}
