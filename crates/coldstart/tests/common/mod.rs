//! Helpers shared by the integration tests of the `coldstart` binary.
//!
//! Each test file is its own crate and uses a part of this module, so the rest is dead code
//! there.
#![allow(dead_code)]

use std::fs;
use std::os::fd::AsRawFd;
use std::process::{Child, Output};

/// Whether the tests run as root (cgroups, `drop_caches`, fanotify, FUSE, tracefs need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Held while a test drops or depends on the page cache: such tests run one at a time, across
/// test binaries and concurrent `cargo test` processes too (an exclusive `flock` on one file).
pub struct CacheLock(fs::File);

/// Take the page-cache lock; released when the guard drops.
pub fn cache_lock() -> CacheLock {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("coldstart-measure-tests.lock"))
        .unwrap();
    // SAFETY: flock on our own fd; released when the file is closed.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    CacheLock(f)
}

impl Drop for CacheLock {
    fn drop(&mut self) {
        // SAFETY: unlocking our own fd.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The command's standard output, after asserting it succeeded (its output in the message).
pub fn check(out: &Output) -> String {
    assert!(
        out.status.success(),
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Kills a child process on drop.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `coldstart serve BUNDLE [ARGS]` as a child; returns it and the URL it printed.
pub fn serve(bundle: &std::path::Path, extra: &[&str]) -> (KillOnDrop, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .arg("serve")
        .arg(bundle)
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (KillOnDrop(child), url)
}
