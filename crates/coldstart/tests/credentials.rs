//! The credentials of a bundle's URL (`http://user:password@host/`) and its query string (a
//! signed URL's signature) are never printed: not in errors, warnings, progress lines or JSON,
//! on any channel, whether the command works or fails.

mod common;
use common::faults::{bounded, tools, Fault, FaultServer, Target};
use common::{require_root, serve};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SECRETS: [&str; 2] = ["secretpw", "secretsig"];

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// `http://127.0.0.1:PORT/` with a user, a password and a signature in it.
fn with_credentials(url: &str) -> String {
    format!("{}?sig=secretsig", url.replacen("http://", "http://user:secretpw@", 1))
}

/// Runs `cmd` (10 s at most) and returns what it printed on both channels and in `json`, if
/// it wrote that file.
fn printed(cmd: &mut Command, json: Option<&Path>) -> (Option<i32>, String) {
    let (out, took) = bounded(cmd, Duration::from_secs(20));
    let out = out.unwrap_or_else(|| panic!("{cmd:?}: still running after {took:?}"));
    let mut all = String::from_utf8_lossy(&out.stdout).into_owned();
    all.push_str(&String::from_utf8_lossy(&out.stderr));
    if let Some(j) = json {
        all.push_str(&std::fs::read_to_string(j).unwrap_or_default());
    }
    (out.status.code(), all)
}

#[test]
fn the_credentials_of_a_url_are_never_printed() {
    if !require_root("FUSE") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let t = tools(d.path());
    // A bundle without its start object: its hot pieces cannot be read, and the JSON's
    // `last_error` names the start object's URL.
    let no_start = d.path().join("no-start");
    std::fs::create_dir(&no_start).unwrap();
    for f in std::fs::read_dir(&t.bundle).unwrap() {
        let f = f.unwrap();
        if f.file_name() != "start" {
            let to = no_start.join(f.file_name());
            let ok = Command::new("cp").arg("-r").arg(f.path()).arg(&to).status().unwrap();
            assert!(ok.success());
        }
    }
    let (_good, good) = serve(&t.bundle, &[]);
    // (`serve` refuses a bundle without its start object; this server does not read queries.)
    let fallback = FaultServer::start(&no_start, Fault::None, Target::All);
    let fallback = fallback.url().replacen("http://", "http://user:secretpw@", 1);
    let redirect = FaultServer::start(&t.bundle, Fault::Redirect, Target::Manifest);
    let run = |url: &str, json: &Path, extra: &[&str]| {
        let mut c = coldstart();
        c.env("TMPDIR", d.path())
            .args(["run", url, "--retries", "0", "--json", "--export-json"])
            .arg(json)
            .args(extra)
            .arg("--cache-dir")
            .arg(d.path().join(format!("cache-{}", json.display().to_string().len())))
            .args(["--", "{root}/bin/sum", "{root}/data.bin"]);
        c
    };
    let mut seen = Vec::new();
    // Works: the report on stderr (--json) and in the file.
    let json = d.path().join("good.json");
    let (code, all) = printed(&mut run(&with_credentials(&good), &json, &[]), Some(&json));
    assert_eq!(code, Some(0), "{all}");
    seen.push(("run, a server that works", all));
    let json = d.path().join("fallback.json");
    let (code, all) = printed(&mut run(&fallback, &json, &["--strategy", "paged"]), Some(&json));
    assert_ne!(code, Some(0), "{all}");
    assert!(all.contains("\"last_error\": \"bin/sum: http://***@127.0.0.1:"), "{all}");
    seen.push(("run, no start object", all));
    // Fails: refused, redirected for ever, a port no socket has.
    for (what, url) in [
        ("run, connection refused", "http://user:secretpw@127.0.0.1:1/?sig=secretsig".into()),
        ("run, redirected for ever", with_credentials(&redirect.url())),
        ("run, port 99999", "http://user:secretpw@127.0.0.1:99999/?sig=secretsig".into()),
    ] {
        let json = d.path().join("failed.json");
        let (code, all) = printed(&mut run(&url, &json, &[]), Some(&json));
        assert!(matches!(code, Some(2 | 70)), "{what}: {code:?}: {all}");
        assert!(all.contains("***@"), "{what}: the URL is not shown at all: {all}");
        seen.push((what, all));
    }
    // predict, in words and in JSON.
    for extra in [&[][..], &["--json"][..]] {
        let mut c = coldstart();
        c.args(["predict", &with_credentials(&good)]).args(extra);
        c.arg("--cache-dir").arg(d.path().join("cache-predict"));
        let (code, all) = printed(&mut c, None);
        assert_eq!(code, Some(0), "{all}");
        seen.push(("predict", all));
    }
    seen.push(("mount", mount(d.path(), &with_credentials(&good))));
    for (what, all) in seen {
        for secret in SECRETS {
            assert!(!all.contains(secret), "{what} printed `{secret}`: {all}");
        }
    }
}

/// `mount URL DIR` until mounted, then SIGINT: what it printed.
fn mount(dir: &Path, url: &str) -> String {
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let log = dir.join("mount.log");
    let mut child = coldstart()
        .args(["mount", url])
        .arg(&mnt)
        .arg("--cache-dir")
        .arg(dir.join("cache-mount"))
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.join("mount.err")).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !coldstart_lazyfs::is_mount_point(&mnt) {
        assert!(child.try_wait().unwrap().is_none(), "mount ended");
        assert!(t.elapsed() < Duration::from_secs(20), "not mounted after 20 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    common::signal(child.id(), libc::SIGINT);
    // Ended by SIGINT, as every command a signal ends: 128 + 2.
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let said = std::fs::read_to_string(dir.join("mount.err")).unwrap();
    assert!(said.contains("mounted http://***@127.0.0.1:"), "{said}");
    said + &std::fs::read_to_string(log).unwrap()
}
