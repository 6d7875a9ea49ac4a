//! Helpers shared by the integration tests of the `coldstart` binary.
//!
//! Each test file is its own crate and uses a part of this module, so the rest is dead code
//! there.
#![allow(dead_code)]

use std::process::{Child, Output};

#[allow(unused_imports)]
pub use coldstart_testkit::{cache_lock, is_root, require, require_program, require_root};

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

pub mod faults;
pub mod leftovers;
