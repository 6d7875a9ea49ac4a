//! The signals that end a command (SIGINT, SIGTERM, SIGHUP), for the commands that stop their
//! work with a [`coldstart_bundle::Cancel`] token (`mount`, `run`, `predict`, `pack`,
//! `publish`, `experiment`): the one cancellation model of [`coldstart_process::cancel`] notes
//! the signal, and a thread of its own turns it into a cancelled token. While the command is
//! starting a signal cancels its work at once (every fetch and wait stops within
//! [`coldstart_bundle::remote::POLL`]); afterwards it is only reported, and the command
//! decides (`run` forwards it to its command).

use std::cell::Cell;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use coldstart_bundle::Cancel;
use coldstart_process::cancel;

/// Signals received, as they arrive.
pub struct Signals {
    _caught: cancel::Catch,
    cancelling: Arc<AtomicBool>,
    /// Signals already returned by [`Signals::next`].
    seen: Cell<u64>,
}

impl Signals {
    /// Catches the signals ([`cancel::catch`]) and watches for them on a thread of its own.
    /// Until [`Signals::report_only`], a signal also cancels `cancel`.
    pub fn start(token: Cancel) -> anyhow::Result<Signals> {
        let caught = cancel::catch().context("cannot install the signal handler")?;
        let cancelling = Arc::new(AtomicBool::new(true));
        let c = cancelling.clone();
        std::thread::Builder::new()
            .name("coldstart-signals".into())
            .spawn(move || loop {
                if cancel::wait(Duration::from_secs(3600)).is_some() {
                    if c.load(Ordering::SeqCst) {
                        token.cancel();
                    }
                    return;
                }
            })
            .context("cannot start the thread that watches for signals")?;
        Ok(Signals { _caught: caught, cancelling, seen: Cell::new(0) })
    }

    /// The first signal received, if any.
    pub fn first(&self) -> Option<i32> {
        cancel::raised()
    }

    /// From now on a signal no longer cancels: it is only reported ([`Signals::next`]).
    pub fn report_only(&self) {
        self.cancelling.store(false, Ordering::SeqCst);
    }

    /// The next signal not returned yet, waiting up to `timeout` for it.
    pub fn next(&self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            let (count, last) = cancel::received();
            if count > self.seen.get() {
                self.seen.set(count);
                return last;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            std::thread::sleep(left.min(Duration::from_millis(5)));
        }
    }
}

/// The exit code of a command that ended on `signal`: 128 + its number, as a shell says it.
pub fn exit_code(signal: i32) -> ExitCode {
    ExitCode::from(cancel::exit_code(signal))
}

/// `SIGTERM` and the like, by name.
pub fn name(signal: i32) -> &'static str {
    cancel::name(signal)
}
