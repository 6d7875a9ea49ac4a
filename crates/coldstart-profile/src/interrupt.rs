//! Ending a profile on `SIGINT`, `SIGTERM` or `SIGHUP` with nothing left behind.
//!
//! A profile owns things that outlive coldstart if it simply dies: the program's process
//! tree (in a process group of its own, which the terminal's `SIGINT` does not reach), the
//! tracefs instance of a page run with tracing on, and the audit agent's temporary
//! directory. Each is released by a guard's `Drop`, so the
//! signals are turned into an error ([`ProfileError::Interrupted`](crate::ProfileError)) that
//! the run returns through those guards: [`catch`] installs handlers that only note the
//! signal, and the loops of the tracers (which wake at least every 100 ms) look at
//! [`raised`]. What a coldstart killed with `SIGKILL` leaves is removed at the start of the next profile
//! (the crate's `remove_stale`).

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that asked the profile to end (0: none).
static RAISED: AtomicI32 = AtomicI32::new(0);

/// The signals that end a profile.
pub const SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn note(sig: i32) {
    RAISED.store(sig, Ordering::SeqCst);
}

/// While alive, `SIGINT`, `SIGTERM` and `SIGHUP` end the profile (see the module
/// documentation) instead of the process; dropping it restores what was there before, so a
/// program left running after the profile can be interrupted as usual.
pub struct Catch {
    previous: Vec<(i32, libc::sigaction)>,
}

/// Catch the signals that end a profile (see [`Catch`]).
pub fn catch() -> std::io::Result<Catch> {
    RAISED.store(0, Ordering::SeqCst);
    let mut previous = Vec::new();
    for sig in SIGNALS {
        // SAFETY: a handler that stores into an atomic (async-signal-safe); the old action is
        // kept to be restored.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = note as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &sa, &mut old) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            previous.push((sig, old));
        }
    }
    Ok(Catch { previous })
}

impl Drop for Catch {
    fn drop(&mut self) {
        for (sig, old) in &self.previous {
            // SAFETY: restoring the action saved by `catch`.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}

/// The signal that asked the profile to end, if one came.
pub fn raised() -> Option<i32> {
    Some(RAISED.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

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
