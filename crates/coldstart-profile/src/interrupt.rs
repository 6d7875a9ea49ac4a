//! Ending a profile on `SIGINT`, `SIGTERM` or `SIGHUP` with nothing left behind, through the
//! one cancellation model of [`coldstart_process::cancel`].
//!
//! A profile owns things that outlive coldstart if it simply dies: the program's process
//! tree (in a process group of its own, which the terminal's `SIGINT` does not reach), the
//! tracefs instance of a page run with tracing on, and the audit agent's temporary
//! directory. Each is released by a guard's `Drop`, so the signals are turned into an error
//! ([`ProfileError::Interrupted`](crate::ProfileError)) that the run returns through those
//! guards: the caller installs the handler that only notes the signal
//! ([`coldstart_process::cancel::catch`]), and the loops of the tracers (which wake at least
//! every 100 ms) look at [`raised`]. What a coldstart killed with `SIGKILL` leaves is removed
//! at the start of the next profile (the crate's `remove_stale`).

use coldstart_process::cancel::raised;

/// A signal's name (`SIGINT`), for a message that says what ended the work.
pub fn signal_name(signal: i32) -> String {
    crate::tree::signal_name(signal)
}

/// `Err(Interrupted)` once a signal came.
pub(crate) fn check() -> Result<(), crate::ProfileError> {
    match raised() {
        Some(signal) => Err(crate::ProfileError::Interrupted { signal }),
        None => Ok(()),
    }
}
