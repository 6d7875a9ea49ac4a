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

/// A profile of `module` in which start-up (`workload`) touched `names` in this order, one
/// every `step_ns`: what the profiler records, less the addresses and sizes (0), which
/// `coldstart order --binary` fills in from the binary.
pub fn touch_profile(
    workload: &str,
    module: &std::path::Path,
    names: &[String],
    step_ns: u64,
) -> coldstart_profile::Profile {
    use coldstart_profile::{Module, Profile, Stop, Touch};
    let functions = names
        .iter()
        .enumerate()
        .map(|(i, n)| Touch {
            address: 0,
            size: 0,
            names: vec![n.clone()],
            first_touch_ns: step_ns * i as u64,
            pid: 1,
            tid: 1,
            ordinal: i as u64,
            workloads: vec![],
        })
        .collect();
    Profile {
        format: "coldstart-profile".into(),
        version: 1,
        workload: workload.into(),
        command: vec![],
        created_unix: 0,
        duration_ns: 1,
        stop: Stop::Exit { code: 0 },
        modules: vec![Module {
            path: module.to_owned(),
            build_id: None,
            size: 0,
            mtime: 0,
            load_bias: 0,
            symbols: "symtab".into(),
            functions_total: names.len(),
            functions,
        }],
        pages: None,
        warnings: vec![],
        images: Vec::new(),
        workloads: vec![],
    }
}

pub mod faults;
pub mod leftovers;

/// Asserts that a hot run of a measure report read nothing from storage and took no major
/// fault. On a machine that reclaims idle page-cache pages on its own (`environment.
/// page_reclaim`: a DAMON `pageout` scheme, which samples memory by regions and can take a
/// page used a moment ago), a few pages may have to come back: at most 64 faults and 256 KiB,
/// far below what a cold run of any fixture reads.
pub fn assert_hot(report: &serde_json::Value, run: &serde_json::Value) {
    let counter = |name: &str| run["counters"][name].as_u64().unwrap_or(u64::MAX);
    let (faults, bytes) = (counter("major_faults"), counter("read_bytes"));
    if report["environment"]["page_reclaim"].is_null() {
        assert_eq!((faults, bytes), (0, 0), "a hot run faulted or read: {run}");
    } else {
        assert!(
            faults <= 64 && bytes <= 256 << 10,
            "a hot run faulted or read more than {} could take back: {run}",
            report["environment"]["page_reclaim"]
        );
    }
}
