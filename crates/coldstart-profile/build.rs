//! Builds the in-process tracer (`agent/*.c`, an rtld-audit library) with the system's C
//! compiler; the binary embeds it and writes it out at profile time (`src/audit.rs`).

use std::path::PathBuf;
use std::process::Command;

/// The agent's sources, compiled and linked in one command; `HEADERS` only trigger a rebuild.
const SOURCES: [&str; 3] = ["agent/agent.c", "agent/signals.c", "agent/symbols.c"];
const HEADERS: [&str; 3] = ["agent/signals.h", "agent/symbols.h", "agent/sys.h"];

fn main() {
    for file in SOURCES.iter().chain(&HEADERS) {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = out.join("coldstart-audit-agent.so");
    let candidates: Vec<String> = match std::env::var("CC") {
        Ok(cc) if !cc.trim().is_empty() => vec![cc],
        _ => ["clang-19", "clang", "cc", "gcc"].iter().map(|s| s.to_string()).collect(),
    };
    let mut tried = Vec::new();
    for cc in &candidates {
        let mut parts = cc.split_whitespace();
        let program = parts.next().unwrap_or("cc");
        let result = Command::new(program)
            .args(parts)
            .args(["-std=gnu11", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"])
            .args(["-fno-stack-protector", "-Wl,-z,now", "-Wl,-z,noexecstack", "-o"])
            .arg(&target)
            .args(SOURCES)
            .output();
        match result {
            Ok(o) if o.status.success() => return,
            Ok(o) => {
                panic!(
                    "building the audit agent (crates/coldstart-profile/agent/) with {cc} failed:\n{}",
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            Err(e) => tried.push(format!("{cc}: {e}")),
        }
    }
    panic!(
        "no C compiler to build the audit agent (crates/coldstart-profile/agent/): tried {}; \
         install clang-19 (apt-get install clang-19, as scripts/setup.sh does) or set CC",
        tried.join(", ")
    );
}
