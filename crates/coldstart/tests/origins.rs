//! Real origins, each started here: nginx over https with a CA this test makes (directly and
//! through a redirect), and a server that ignores Range (Python's `http.server`). A bundle of
//! one data file is run from each with `sha256sum`, whose digest must be the file's.
//!
//! Needs root (FUSE), nginx, openssl and Debian's python3, as `scripts/setup.sh` installs
//! them; every server started here is stopped by a guard even when an assertion fails.

mod common;
use common::{
    certificates, check, free_port, listening, require_program, require_root, KillOnDrop,
};

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn wait_for(port: u16, what: &str) {
    let t = Instant::now();
    while !listening(port) {
        assert!(t.elapsed() < Duration::from_secs(10), "{what} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `dir/www/bundle`: a bundle of `data.bin` (1 MiB of varied bytes); returns its SHA-256.
fn bundle(dir: &Path) -> String {
    let app = dir.join("app");
    std::fs::create_dir_all(&app).unwrap();
    let data: Vec<u8> =
        (0..1u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(app.join("data.bin"), &data).unwrap();
    std::fs::create_dir_all(dir.join("www")).unwrap();
    check(
        &coldstart().arg("pack").arg(&app).arg("-o").arg(dir.join("www/bundle")).output().unwrap(),
    );
    let out = check(&Command::new("sha256sum").arg(app.join("data.bin")).output().unwrap());
    out.split_whitespace().next().unwrap().to_owned()
}

/// nginx serving `dir/www` over https on 127.0.0.1, with `/moved/X` redirected to
/// `/bundle/X`; returns its guard and `https://127.0.0.1:PORT/`.
fn nginx_tls(dir: &Path) -> (KillOnDrop, String) {
    let (guard, port) = common::nginx(dir, |port| {
        format!(
            "        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {root};
        location /moved/ {{ rewrite ^/moved/(.*)$ /bundle/$1 redirect; }}
        location / {{ }}",
            cert = dir.join("server.pem").display(),
            key = dir.join("server.key").display(),
            root = dir.join("www").display(),
        )
    });
    (guard, format!("https://127.0.0.1:{port}/"))
}

/// `coldstart run URL [EXTRA] -- sha256sum {root}/data.bin`.
fn run(url: &str, dir: &Path, extra: &[&str]) -> Output {
    coldstart()
        .args(["run", url, "--retries", "0", "--timeout", "5", "--cache-dir"])
        .arg(dir.join(format!("cache-{}", free_port())))
        .args(extra)
        .args(["--", "sha256sum", "{root}/data.bin"])
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn https_with_a_private_ca_and_a_redirect() {
    if !require_root("FUSE mounts") || !require_program("nginx", "nginx-light") {
        return;
    }
    if !require_program("openssl", "openssl") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let digest = bundle(d.path());
    let ca = certificates(d.path());
    let (_nginx, base) = nginx_tls(d.path());
    let ca_arg = ca.to_str().unwrap();
    for path in ["bundle/", "moved/"] {
        for strategy in ["paged", "stream", "original"] {
            let out = run(
                &format!("{base}{path}"),
                d.path(),
                &["--strategy", strategy, "--ca-file", ca_arg],
            );
            let got = check(&out);
            assert!(got.starts_with(&digest), "{path} {strategy}: {got} {}", stderr(&out));
        }
    }
    // Without the CA the server is not trusted: refused, saying why, nothing run.
    let out = run(&format!("{base}bundle/"), d.path(), &[]);
    assert_eq!(out.status.code(), Some(70), "{}", stderr(&out));
    assert!(stderr(&out).to_lowercase().contains("certificate"), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    // A CA file that holds no certificate is bad input, named.
    let empty = d.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let out = run(&format!("{base}bundle/"), d.path(), &["--ca-file", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--ca-file"), "{}", stderr(&out));
}

#[test]
fn a_server_without_range_works_and_is_warned_about_once_and_run_exports_its_report() {
    if !require_root("FUSE mounts") || !require_program("/usr/bin/python3", "python3") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let digest = bundle(d.path());
    let port = free_port();
    // Python's http.server answers every Range request with the whole file (200).
    let server = Command::new("/usr/bin/python3")
        .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory"])
        .arg(d.path().join("www"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = KillOnDrop(server);
    wait_for(port, "http.server");
    let url = format!("http://127.0.0.1:{port}/bundle/");
    let export = d.path().join("report.json");
    let export_arg = export.to_str().unwrap();
    let out = run(&url, d.path(), &["--strategy", "paged", "--export-json", export_arg]);
    let got = check(&out);
    assert!(got.starts_with(&digest), "{got} {}", stderr(&out));
    // `predict` measures the link with Range requests: warned about, once.
    let out = coldstart().args(["predict", &url, "--retries", "0"]).output().unwrap();
    check(&out);
    let warnings = stderr(&out).matches("ignores Range").count();
    assert_eq!(warnings, 1, "{}", stderr(&out));
    // --export-json: the command's status and the fetch statistics, in a file of their own.
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&export).unwrap()).unwrap();
    assert_eq!(json["exit_status"], 0, "{json}");
    assert!(json["elapsed_ms"].as_f64().unwrap() > 0.0, "{json}");
    assert!(json["report"]["bytes_fetched"].as_u64().unwrap() >= 1 << 20, "{json}");
    // A report file in a directory that does not exist: refused before anything runs.
    let nowhere = d.path().join("no/such/dir/r.json");
    let out = run(&url, d.path(), &["--export-json", nowhere.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--export-json"), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "the command ran");
}
