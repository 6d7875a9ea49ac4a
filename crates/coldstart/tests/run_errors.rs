//! What `run` and `mount` say when this user may not mount FUSE: a missing privilege (exit
//! 3), said before any fetch, in one line with what to do.
//!
//! The cases run `coldstart` as nobody (`setpriv`) in a mount namespace of their own
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
