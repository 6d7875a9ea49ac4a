//! What `coldstart pack` says: the origin's size beside the program's (checked against the
//! bundle on disk), and no progress bar when stderr is not a terminal.

mod common;
use common::check;

use std::path::Path;
use std::process::{Command, Stdio};

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

fn pack(app: &Path, out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_coldstart"));
    c.arg("pack").arg(app).arg("-o").arg(out);
    c
}

/// An app of `mb` megabytes of data that does not compress.
fn app(dir: &Path, mb: usize) -> std::path::PathBuf {
    let app = dir.join("app");
    std::fs::create_dir_all(app.join("lib")).unwrap();
    let data: Vec<u8> =
        (0..mb * 1_000_000).map(|i| ((i as u64).wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(app.join("lib/big"), &data).unwrap();
    std::fs::write(app.join("run"), b"#!/bin/sh\n").unwrap();
    app
}

/// What is beside `out` but `out` itself: temporary directories, lock files.
fn beside(out: &Path) -> Vec<String> {
    let name = out.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.contains(&name) && *f != name)
        .collect()
}

/// Four packs into one output at once: one writes it, the others are refused at once with a
/// message naming the pack that is writing it, and nothing else is left beside it.
#[test]
fn concurrent_packs_into_one_output_leave_one_bundle_and_nothing_else() {
    let d = tempfile::tempdir().unwrap();
    let app = app(d.path(), 5);
    let out = d.path().join("bundle");
    let children: Vec<_> = (0..4)
        .map(|_| pack(&app, &out).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap())
        .collect();
    let outs: Vec<_> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    let won = outs.iter().filter(|o| o.status.success()).count();
    assert_eq!(won, 1, "one pack writes the bundle");
    for o in outs.iter().filter(|o| !o.status.success()) {
        let said = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{said}");
        assert!(
            said.contains("another pack") || said.contains("already exists"),
            "refused without saying why: {said}"
        );
    }
    assert!(out.join("manifest.json").is_file());
    assert_eq!(beside(&out), Vec::<String>::new(), "left beside the bundle");
}

/// A pack killed (SIGKILL) leaves its temporary directory and lock; the next pack of the same
/// output removes them, whether it succeeds or not.
#[test]
fn the_pack_after_a_killed_one_leaves_nothing_of_it() {
    let d = tempfile::tempdir().unwrap();
    let app = app(d.path(), 40);
    let out = d.path().join("bundle");
    let mut child = pack(&app, &out).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t = std::time::Instant::now();
    while !beside(&out).iter().any(|f| f.contains(".tmp-")) {
        assert!(t.elapsed().as_secs() < 20, "the pack never started writing");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!beside(&out).is_empty(), "the killed pack left nothing to clean");
    check(&pack(&app, &out).output().unwrap());
    assert_eq!(beside(&out), Vec::<String>::new(), "left beside the bundle");
}

/// `pack DIR -o DIR/bundle`: the bundle (and its temporary directory) is not part of what it
/// packs.
#[test]
fn pack_leaves_its_own_output_out_of_the_input() {
    let d = tempfile::tempdir().unwrap();
    let app = app(d.path(), 1);
    let out = app.join("bundle");
    check(&pack(&app, &out).output().unwrap());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let paths: Vec<&str> =
        manifest["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["lib", "lib/big", "run"], "the output is not in its own input");
    // Packed again elsewhere, the bundle now in the directory is input like any file.
    let again = d.path().join("again");
    check(&pack(&app, &again).output().unwrap());
    let manifest = std::fs::read_to_string(again.join("manifest.json")).unwrap();
    assert!(manifest.contains("\"bundle/manifest.json\""), "{manifest}");
}

/// `pack` onto a full file system named its input file (`app/lib/big: No space left on
/// device`); it names the output now, exits 70, and leaves nothing there.
#[test]
fn pack_on_a_full_disk_names_the_output_and_leaves_nothing() {
    if !common::require_root("mounting a small tmpfs") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let app = app(d.path(), 5);
    let small = common::SmallFs::mount(&d.path().join("small"), 4096);
    let out = small.0.join("bundle");
    let o = pack(&app, &out).output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{said}");
    assert!(said.contains(&format!("cannot write the bundle {}", out.display())), "{said}");
    assert!(said.contains("No space left on device") && !said.contains("lib/big"), "{said}");
    assert_eq!(small.contents(), Vec::<String>::new(), "left on the full file system");
    // Full before it starts: the same.
    small.fill();
    let o = pack(&app, &out).output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{said}");
    assert!(said.contains(&format!("cannot write the bundle {}", out.display())), "{said}");
    assert_eq!(small.contents(), Vec::<String>::new(), "left on the full file system");
}

/// An input file the user may not read made `pack` exit 70; a missing permission is exit 3
/// (README, "Exit codes"), and the message names the file.
#[test]
fn pack_of_a_file_the_user_may_not_read_is_a_missing_privilege() {
    if !common::require_root("running as another user") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let app = app(d.path(), 1);
    std::fs::write(app.join("secret"), b"root's").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(app.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let outdir = d.path().join("out");
    std::fs::create_dir(&outdir).unwrap();
    for p in [d.path(), &outdir] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let as_nobody = |out: &Path| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", "nobody", "--regid", "nogroup", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_coldstart"))
            .arg("pack")
            .arg(&app)
            .arg("-o")
            .arg(out);
        c.output().unwrap()
    };
    let o = as_nobody(&outdir.join("bundle"));
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{said}");
    assert!(said.contains("secret") && said.contains("Permission denied"), "{said}");
    // An output directory it may not write: the same.
    let o = as_nobody(&app.join("lib/bundle"));
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{said}");
    assert!(said.contains("cannot write the bundle"), "{said}");
}
