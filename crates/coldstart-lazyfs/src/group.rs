//! A command running from a mount in a process group of its own ([`crate::Mount::spawn`]).

use std::process::Child;
use std::time::{Duration, Instant};

/// `pgid N\n` for the watchdog, written into `buf` without allocating (between fork and
/// exec); returns its length.
pub(crate) fn pgid_line(pid: i32, buf: &mut [u8; 32]) -> usize {
    let mut digits = [0u8; 12];
    let (mut n, mut k) = (pid.unsigned_abs(), 0);
    loop {
        digits[k] = b'0' + (n % 10) as u8;
        k += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf[..5].copy_from_slice(b"pgid ");
    for i in 0..k {
        buf[5 + i] = digits[k - 1 - i];
    }
    buf[5 + k] = b'\n';
    6 + k
}

/// A command running from a mount ([`crate::Mount::spawn`]) in a process group of its own: signals
/// reach every process of it, and what it leaves running can be ended. A process that starts
/// a session of its own (a daemon) leaves the group.
pub struct Group {
    pub(crate) child: Child,
    pub(crate) pgid: i32,
}

impl Group {
    /// The command's process id, which is the group's.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to every process of the group.
    pub fn signal(&self, signal: i32) {
        // SAFETY: a signal to the process group this value names, which we made.
        unsafe { libc::kill(-self.pgid, signal) };
    }

    /// The command's exit status, if it has ended.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    /// Whether any process of the group is still there.
    pub fn alive(&self) -> bool {
        // SAFETY: signal 0 only checks.
        unsafe { libc::kill(-self.pgid, 0) == 0 }
    }

    /// Ends every process left in the group once the command has ended: `SIGTERM`, then
    /// `SIGKILL` to what is still there after `grace`. Returns whether any was left.
    pub fn end(&mut self, grace: Duration) -> bool {
        if matches!(self.child.try_wait(), Ok(None)) || !self.alive() {
            return false;
        }
        self.signal(libc::SIGTERM);
        let t = Instant::now();
        while self.alive() && t.elapsed() < grace {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.alive() {
            self.signal(libc::SIGKILL);
        }
        true
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal(libc::SIGKILL);
            let _ = self.child.wait();
        }
        self.end(Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_group_line_is_written_without_allocating() {
        let mut buf = [0u8; 32];
        for pid in [1, 9, 10, 4_194_304, i32::MAX] {
            let n = pgid_line(pid, &mut buf);
            assert_eq!(&buf[..n], format!("pgid {pid}\n").as_bytes());
        }
    }
}
