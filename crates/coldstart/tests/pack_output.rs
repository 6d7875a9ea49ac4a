//! What `coldstart pack` says: the origin's size beside the program's (checked against the
//! bundle on disk), and no progress bar when stderr is not a terminal.

mod common;
use common::check;

use std::path::Path;
use std::process::Command;

/// Bytes of the regular files under `dir`.
fn tree_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for item in std::fs::read_dir(dir).unwrap() {
        let item = item.unwrap();
        let meta = item.metadata().unwrap();
        total += if meta.is_dir() { tree_bytes(&item.path()) } else { meta.len() };
    }
    total
}

#[test]
fn pack_reports_the_origins_size_and_draws_no_progress_into_a_pipe() {
    let d = tempfile::tempdir().unwrap();
    let app = d.path().join("app");
    std::fs::create_dir(&app).unwrap();
    let data: Vec<u8> =
        (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    std::fs::write(app.join("a"), &data).unwrap();
    std::fs::write(app.join("b"), &data[..1000]).unwrap();
    let bundle = d.path().join("bundle");
    let out = Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .arg("pack")
        .arg(&app)
        .arg("-o")
        .arg(&bundle)
        .output()
        .unwrap();
    let said = check(&out);
    assert!(out.stderr.is_empty(), "stderr is a pipe: {}", String::from_utf8_lossy(&out.stderr));
    let line = said.lines().find(|l| l.starts_with("origin: ")).expect(&said);
    let origin = tree_bytes(&bundle);
    assert!(
        line.starts_with(&format!("origin: {} in ", coldstart_units::bytes(origin))),
        "the origin's size is what the bundle holds ({origin}): {line}"
    );
    assert!(line.contains("for a program of 293.9 KiB"), "{line}");
    let ratio = origin as f64 / 301_000.0;
    assert!(line.contains(&format!("{ratio:.2}x")), "{line}");
}
