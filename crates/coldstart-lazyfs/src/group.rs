//! A command running from a mount in a process group of its own ([`crate::Mount::spawn`]).

use std::time::{Duration, Instant};

use coldstart_process::held::Held;

/// A command running from a mount ([`crate::Mount::spawn`]) in a process group of its own: signals
/// reach every process of it, and what it leaves running can be ended. A process that starts
/// a session of its own (a daemon) leaves the group.
pub struct Group {
    pub(crate) held: Held,
}

impl Group {
    /// The command's process id, which is the group's.
    pub fn id(&self) -> u32 {
        self.held.pid() as u32
    }

    /// Sends `signal` to every process of the group.
    pub fn signal(&self, signal: i32) {
        self.held.signal_group(signal);
    }

    /// The command's exit status, if it has ended.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        Ok(self.held.try_wait()?.map(|e| e.status()))
    }

    /// Whether any process of the group is still there.
    pub fn alive(&self) -> bool {
        self.held.group_alive()
    }

    /// Ends every process left in the group once the command has ended: `SIGTERM`, then
    /// `SIGKILL` to what is still there after `grace`. Returns whether any was left.
    pub fn end(&mut self, grace: Duration) -> bool {
        if matches!(self.held.try_wait(), Ok(None)) || !self.alive() {
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
        if matches!(self.held.try_wait(), Ok(None)) {
            self.held.kill();
        }
        self.end(Duration::ZERO);
    }
}
