//! What `run`, `mount` and `predict` say when what they are given cannot be used, in one line
//! with what to do: a local path that is not a bundle directory (bad input, exit 2, before
//! anything), and a FUSE this user may not mount (a missing privilege, exit 3, before any
//! fetch).
//!
//! The FUSE cases run `coldstart` as nobody (`setpriv`) in a mount namespace of their own
//! (`unshare`), where `/dev/fuse` is a node of the test's making bind-mounted over the real
//! one, and `FUSERMOUNT_PATH` names a copy of `fusermount3` that is not setuid, or nothing:
//! the machine's own device and helper are untouched. Needs root and util-linux, as
//! `scripts/setup.sh` installs them.

mod common;
use common::{check, require_program, require_root};

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// Asserts that `out` failed with `code`, ran nothing, and said one line holding each of
/// `words`.
fn refused(what: &str, out: &Output, code: i32, words: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{what}: {err}");
    assert!(out.stdout.is_empty(), "{what}: the command ran: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
    for w in words {
        assert!(err.contains(w), "{what}: `{w}` not in: {err}");
    }
}

/// `dir/app` (a program's directory: one executable script) and `dir/bundle`, its bundle.
fn app_and_bundle(dir: &Path) -> (String, String) {
    let app = dir.join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(app.join("hello"), "#!/bin/sh\necho hello\n").unwrap();
    std::fs::set_permissions(app.join("hello"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bundle = dir.join("bundle");
    check(&coldstart().arg("pack").arg(&app).arg("-o").arg(&bundle).output().unwrap());
    (app.to_str().unwrap().to_owned(), bundle.to_str().unwrap().to_owned())
}

#[test]
fn a_local_path_that_is_not_a_bundle_directory_is_named_with_what_to_do() {
    let d = tempfile::tempdir().unwrap();
    let (app, bundle) = app_and_bundle(d.path());
    // A bundle directory is read where it is, given as a path or as file://.
    for url in [bundle.clone(), format!("file://{bundle}")] {
        let out = coldstart().args(["predict", &url, "--link-hint", "20mbit/40ms"]).output();
        check(&out.unwrap());
    }
    let missing = d.path().join("nothing").to_str().unwrap().to_owned();
    let file = format!("{app}/hello");
    let pack = format!("`coldstart pack {app} -o BUNDLE`");
    let cases: [(&str, &str, &[&str]); 4] = [
        ("a program's directory", &app, &["is a directory but not a bundle", &pack]),
        ("a path that does not exist", &missing, &["no such directory", "s3:// URL"]),
        ("a file", &file, &["is a file, not a bundle directory"]),
        ("a URL without its scheme", "127.0.0.1:8080/app", &["write http://127.0.0.1:8080/app"]),
    ];
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let cache = d.path().join("cache");
    for (what, path, words) in cases {
        let out = coldstart().args(["predict", path]).output().unwrap();
        refused(&format!("predict {what}"), &out, 2, words);
        let out = coldstart()
            .args(["run", path, "--cache-dir"])
            .arg(&cache)
            .args(["--", "{root}/hello"])
            .output()
            .unwrap();
        refused(&format!("run {what}"), &out, 2, words);
        let out = coldstart().args(["mount", path]).arg(&mnt).output().unwrap();
        refused(&format!("mount {what}"), &out, 2, words);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("server answered") && !err.contains("404"), "{what}: {err}");
    }
}

/// `coldstart ARGS` as nobody in a mount namespace where /dev/fuse is a node of mode `mode`
/// (made in `dir/dev`, a tmpfs of the namespace), with `env` (`VAR=VALUE`...) set.
fn as_nobody(dir: &Path, mode: &str, env: &[String], args: &[&str]) -> Output {
    let dev = dir.join("dev");
    std::fs::create_dir_all(&dev).unwrap();
    let script = format!(
        r#"set -e
mount -t tmpfs -o mode=0755 coldstart-test {dev}
mknod -m {mode} {dev}/fuse c 10 229
cp "$(command -v fusermount3)" {dev}/fusermount3-plain
chmod 0755 {dev}/fusermount3-plain
mount --bind {dev}/fuse /dev/fuse
exec setpriv --reuid=65534 --regid=65534 --clear-groups -- env TMPDIR=/tmp "$@""#,
        dev = dev.display(),
    );
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c", &script, "sh"])
        .args(env)
        .arg(env!("CARGO_BIN_EXE_coldstart"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_user_who_may_not_mount_fuse_is_told_why_and_what_to_do_with_exit_3() {
    if !require_root("a mount namespace and another user") {
        return;
    }
    if !require_program("setpriv", "util-linux") || !require_program("unshare", "util-linux") {
        return;
    }
    if !require_program("fusermount3", "fuse3") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, bundle) = app_and_bundle(d.path());
    // Directories nobody may write: the chunk cache and a mount point.
    let own = |name: &str| {
        let p = d.path().join(name);
        std::fs::create_dir(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let (cache, mnt) = (own("cache"), own("mnt"));
    let real = std::fs::metadata("/dev/fuse").map(|m| m.permissions().mode()).ok();
    let plain = format!("FUSERMOUNT_PATH={}/dev/fusermount3-plain", d.path().display());
    let missing = format!("FUSERMOUNT_PATH={}/dev/no-such-helper", d.path().display());
    let run = ["run", &bundle, "--cache-dir", &cache, "--", "{root}/hello"];
    let cases: [(&str, &str, Vec<String>, &[&str]); 3] = [
        ("/dev/fuse not readable", "0600", vec![], &["/dev/fuse cannot be opened", "uid 65534"]),
        ("fusermount3 not setuid", "0666", vec![plain], &["is not setuid root", "chmod u+s"]),
        ("no fusermount3", "0666", vec![missing], &["fusermount3, which is not installed"]),
    ];
    for (what, mode, env, words) in cases {
        let out = as_nobody(d.path(), mode, &env, &run);
        refused(&format!("run: {what}"), &out, 3, words);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("run as root"), "{what}: {err}");
    }
    // With the device usable and fusermount3 setuid, as Debian installs them, nobody may.
    let out = as_nobody(d.path(), "0666", &[], &run);
    assert_eq!(check(&out), "hello\n", "{}", String::from_utf8_lossy(&out.stderr));
    let out = as_nobody(d.path(), "0600", &[], &["mount", &bundle, &mnt, "--cache-dir", &cache]);
    refused("mount: /dev/fuse not readable", &out, 3, &["/dev/fuse cannot be opened"]);
    // The machine's own device is as it was.
    assert_eq!(std::fs::metadata("/dev/fuse").map(|m| m.permissions().mode()).ok(), real);
}
