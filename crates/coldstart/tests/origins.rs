//! Real origins, each started here: nginx over https with a CA this test makes (directly and
//! through a redirect) and with the quickest self-signed certificate, and a server that
//! ignores Range (Python's `http.server`). A bundle of one data file is run from each with
//! `sha256sum`, whose digest must be the file's. And origins set up wrong, as users do (a
//! certificate not trusted, expired or for another name, the wrong scheme or port, a web
//! server as the proxy): each is said in one line with what to do, and not retried.
//!
//! Needs root (FUSE), nginx, openssl and Debian's python3, as `scripts/setup.sh` installs
//! them; every server started here is stopped by a guard even when an assertion fails.

mod common;
use common::{
    certificates, check, free_port, require_program, require_root, server_on_free_port, KillOnDrop,
};

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
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

/// Whether root (FUSE), nginx and openssl are there, as the https tests need.
fn https_ready() -> bool {
    require_root("FUSE mounts")
        && require_program("nginx", "nginx-light")
        && require_program("openssl", "openssl")
}

#[test]
fn https_with_a_private_ca_and_a_redirect() {
    if !https_ready() {
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
    // Without the CA the server is not trusted: refused, saying why and what to do (bad
    // input: the command line mends it), nothing run.
    let out = run(&format!("{base}bundle/"), d.path(), &[]);
    refused(&out, 2, &["does not trust", "--ca-file FILE"]);
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
    // Python's http.server answers every Range request with the whole file (200).
    // In a process group of its own: no signal another test sends to its group reaches it.
    let http_server = |port: u16| {
        let mut cmd = Command::new("/usr/bin/python3");
        cmd.args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory"])
            .arg(d.path().join("www"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        cmd
    };
    let (_server, port) = server_on_free_port(http_server, Duration::from_secs(10), "http.server");
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
    // The start-up ends with the command: the unmount after it is reported apart.
    let ms = |k: &str| json[k].as_f64().unwrap_or_else(|| panic!("{k}: {json}"));
    assert!(ms("startup_ms") > 0.0 && ms("teardown_ms") >= 0.0, "{json}");
    assert!(ms("startup_ms") + ms("teardown_ms") <= ms("elapsed_ms"), "{json}");
    assert!(json["report"]["bytes_fetched"].as_u64().unwrap() >= 1 << 20, "{json}");
    // A report file in a directory that does not exist: refused before anything runs.
    let nowhere = d.path().join("no/such/dir/r.json");
    let out = run(&url, d.path(), &["--export-json", nowhere.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--export-json"), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "the command ran");
}

/// `dir/NAME.pem` and `dir/NAME.key`: the quickest self-signed certificate for `ip`, as users
/// make it (`openssl req -x509` makes it a CA certificate, `CA:TRUE`).
fn self_signed(dir: &Path, name: &str, ip: &str) -> (String, String) {
    let (cert, key) = (format!("{name}.pem"), format!("{name}.key"));
    let (subject, san) = (format!("/CN={ip}"), format!("subjectAltName=IP:{ip}"));
    common::openssl(
        dir,
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", &subject, "-addext", &san,
            "-keyout", &key, "-out", &cert, "-days", "30",
        ],
    );
    let path = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    (path(&cert), path(&key))
}

/// `dir/expired.pem` and `.key`: a self-signed certificate for 127.0.0.1 valid in January
/// 2020 only (`openssl ca`, the one OpenSSL 3.0 command that takes dates).
fn expired(dir: &Path) -> (String, String) {
    let ca = dir.join("expired-ca");
    std::fs::create_dir_all(&ca).unwrap();
    std::fs::write(ca.join("index.txt"), "").unwrap();
    std::fs::write(ca.join("serial"), "01\n").unwrap();
    std::fs::write(
        ca.join("ca.cnf"),
        "[ca]\ndefault_ca = own\n[own]\ndatabase = index.txt\nnew_certs_dir = .\n\
         serial = serial\ndefault_md = sha256\npolicy = any\ncopy_extensions = copy\n\
         [any]\ncommonName = supplied\n",
    )
    .unwrap();
    common::openssl(
        &ca,
        &[
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            "../expired.key",
            "-out",
            "expired.csr",
        ],
    );
    common::openssl(
        &ca,
        &[
            "ca",
            "-batch",
            "-config",
            "ca.cnf",
            "-selfsign",
            "-keyfile",
            "../expired.key",
            "-in",
            "expired.csr",
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200201000000Z",
            "-out",
            "../expired.pem",
        ],
    );
    let path = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    (path("expired.pem"), path("expired.key"))
}

/// nginx serving `www` on 127.0.0.1, over https with `tls` (certificate, key) if given,
/// configured in `dir`: every request logged to `dir/nginx/access.log`, and at `info` to
/// `dir/nginx/server.log` (each failed TLS handshake among it). Returns its guard and port.
fn origin(dir: &Path, www: &Path, tls: Option<&(String, String)>) -> (KillOnDrop, u16) {
    std::fs::create_dir_all(dir).unwrap();
    let logs = dir.join("nginx");
    common::nginx(dir, |port| {
        let ssl = match tls {
            Some((cert, key)) => {
                format!(" ssl;\n        ssl_certificate {cert};\n        ssl_certificate_key {key}")
            }
            None => String::new(),
        };
        format!(
            "        listen 127.0.0.1:{port}{ssl};
        error_log {server} info;
        access_log {access};
        root {root};
        location / {{ }}",
            server = logs.join("server.log").display(),
            access = logs.join("access.log").display(),
            root = www.display(),
        )
    })
}

/// How many lines of `dir/nginx/NAME` hold `what`, once nginx has written what it saw: the
/// log is read until it has a line with `what` (at most 5 s) and then once more, 300 ms on.
fn logged(dir: &Path, name: &str, what: &str) -> usize {
    let count = || {
        let log = std::fs::read(dir.join("nginx").join(name)).unwrap_or_default();
        String::from_utf8_lossy(&log).lines().filter(|l| l.contains(what)).count()
    };
    let t = Instant::now();
    while count() == 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    count()
}

/// `coldstart ARGS` with the default retries and no proxy from the environment.
fn plain(args: &[&str]) -> Command {
    let mut c = coldstart();
    c.args(args);
    for var in ["ALL_PROXY", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"] {
        c.env_remove(var).env_remove(var.to_lowercase());
    }
    c
}

/// `coldstart run URL --cache-dir CACHE [EXTRA] -- sha256sum {root}/data.bin`, with the
/// default retries and no proxy from the environment.
fn run_once(url: &str, cache: &str, extra: &[&str]) -> Output {
    plain(&["run", url, "--cache-dir", cache])
        .args(extra)
        .args(["--", "sha256sum", "{root}/data.bin"])
        .output()
        .unwrap()
}

/// Asserts that `out` failed with `code`, ran nothing, and said one line holding each of
/// `words`; returns the line.
fn refused(out: &Output, code: i32, words: &[&str]) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(out.stdout.is_empty(), "the command ran: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("coldstart: error: "), "{err}");
    for w in words {
        assert!(lines[0].contains(w), "`{w}` not in: {err}");
    }
    lines[0].to_owned()
}

#[test]
fn the_quickest_self_signed_certificate_is_trusted_with_ca_file_and_refused_at_once_without() {
    if !https_ready() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let digest = bundle(d.path());
    let www = d.path().join("www");
    let quick = self_signed(d.path(), "quick", "127.0.0.1");
    let at = d.path().join("quick-origin");
    let (_nginx, port) = origin(&at, &www, Some(&quick));
    let url = format!("https://127.0.0.1:{port}/bundle/");
    // With --ca-file, as curl --cacert: the program runs from it.
    for strategy in ["auto", "original"] {
        let out = run(&url, d.path(), &["--strategy", strategy, "--ca-file", &quick.0]);
        let got = check(&out);
        assert!(got.starts_with(&digest), "{strategy}: {got} {}", stderr(&out));
    }
    // Without: refused at the first handshake, never retried, in one line saying what to do.
    let cache = d.path().join("cache-refused");
    let cache = cache.to_str().unwrap();
    let before = logged(&at, "server.log", "SSL_do_handshake() failed");
    let out = run_once(&url, cache, &[]);
    refused(&out, 2, &[&url, "CA certificate", "--ca-file FILE"]);
    let after = logged(&at, "server.log", "SSL_do_handshake() failed");
    assert_eq!(after - before, 1, "one handshake, no retry: see {}", at.display());
    // Another certificate in the file: this one is still refused.
    let other = self_signed(d.path(), "other", "127.0.0.1");
    let out = run_once(&url, cache, &["--ca-file", &other.0]);
    refused(&out, 2, &["CA certificate", "--ca-file"]);
    // Given with --ca-file, a certificate for another name, or expired, is still refused.
    let wrong = self_signed(d.path(), "wrong", "127.0.0.2");
    let (_wrong_origin, wrong_port) = origin(&d.path().join("wrong-origin"), &www, Some(&wrong));
    let wrong_url = format!("https://127.0.0.1:{wrong_port}/bundle/");
    let out = run_once(&wrong_url, cache, &["--ca-file", &wrong.0]);
    refused(&out, 2, &["not valid for 127.0.0.1 (it is for 127.0.0.2)"]);
    let old = expired(d.path());
    let (_old_origin, old_port) = origin(&d.path().join("expired-origin"), &www, Some(&old));
    let old_url = format!("https://127.0.0.1:{old_port}/bundle/");
    let out = run_once(&old_url, cache, &["--ca-file", &old.0]);
    refused(&out, 70, &["expired on 2020-02-01 00:00 UTC", "renew it"]);
}

#[test]
fn a_misconfigured_origin_is_said_in_one_line_with_what_to_do_and_not_retried() {
    if !https_ready() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    bundle(d.path());
    let www = d.path().join("www");
    let quick = self_signed(d.path(), "quick", "127.0.0.1");
    let (_tls, tls) = origin(&d.path().join("tls-origin"), &www, Some(&quick));
    let web = d.path().join("plain-origin");
    let (_plain, port) = origin(&web, &www, None);
    let cache = d.path().join("cache");
    let cache = cache.to_str().unwrap();
    let run = |url: &str, extra: &[&str]| run_once(url, cache, extra);
    // http:// to the https port, and https:// to the http port.
    let url = format!("http://127.0.0.1:{tls}/bundle/");
    let https = format!("use https://127.0.0.1:{tls}/bundle/");
    refused(&run(&url, &[]), 2, &[&url, "answers https, not http", &https]);
    let url = format!("https://127.0.0.1:{port}/bundle/");
    let said = format!("127.0.0.1:{port} does not speak TLS");
    refused(&run(&url, &[]), 2, &[&url, &said, "use http://"]);
    // A port nobody listens on: retried (a server may be restarting), within 0.7 s.
    let free = free_port();
    let url = format!("http://127.0.0.1:{free}/bundle/");
    let said = format!("cannot connect to 127.0.0.1:{free}");
    refused(&run(&url, &[]), 70, &[&url, &said, "is the server running"]);
    // A user and password in the URL are never shown: `***@` stands for them.
    let url = format!("https://user:secret@127.0.0.1:{tls}/bundle/");
    let line = refused(&run(&url, &[]), 2, &[&format!("https://***@127.0.0.1:{tls}/bundle/")]);
    assert!(!line.contains("secret"), "{line}");
    // A web server named as the proxy: it refuses CONNECT, once.
    let url = format!("https://127.0.0.1:{tls}/bundle/");
    let proxy = format!("http://127.0.0.1:{port}");
    let before = logged(&web, "access.log", "\"CONNECT ");
    let out = plain(&["run", &url, "--cache-dir", cache, "--ca-file", &quick.0])
        .args(["--", "sha256sum", "{root}/data.bin"])
        .env("HTTPS_PROXY", &proxy)
        .output()
        .unwrap();
    let said = format!("the proxy 127.0.0.1:{port} (HTTPS_PROXY)");
    refused(&out, 2, &[&said, "CONNECT with 400", "NO_PROXY"]);
    assert_eq!(logged(&web, "access.log", "\"CONNECT ") - before, 1, "one CONNECT, no retry");
    // publish, to an S3 endpoint given with the wrong scheme or without its certificate.
    let publish = |endpoint: &str, extra: &[&str]| {
        let none = d.path().join("no-aws-file");
        plain(&["publish", www.join("bundle").to_str().unwrap(), "s3://bucket/app"])
            .args(["--endpoint", endpoint, "--retries", "3"])
            .args(extra)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_CONFIG_FILE", &none)
            .env("AWS_SHARED_CREDENTIALS_FILE", &none)
            .output()
            .unwrap()
    };
    let out = publish(&format!("http://127.0.0.1:{tls}"), &[]);
    refused(&out, 2, &["answers https, not http", "give the endpoint as https://"]);
    let out = publish(&format!("https://127.0.0.1:{tls}"), &[]);
    refused(&out, 2, &["CA certificate", "--ca-file FILE"]);
}

#[test]
fn pack_learns_from_an_https_origin_whose_self_signed_certificate_is_given_with_ca_file() {
    if !https_ready() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let digest = bundle(d.path());
    // A record written by hand: the one start read data.bin's first page outside its hot set.
    let www = d.path().join("www");
    std::fs::create_dir_all(www.join("learn")).unwrap();
    let record = format!(
        r#"{{"format":"coldstart-learn-record","version":1,"bundle":"{}","strategy":"paged","completed":true,"files":[{{"sha256":"{digest}","size":1048576}}],"pieces":[{{"file":0,"offset":0,"length":4096,"stored":4096,"ms":1}}]}}"#,
        "ab".repeat(32)
    );
    std::fs::write(www.join("learn/r.json"), record).unwrap();
    let quick = self_signed(d.path(), "quick", "127.0.0.1");
    let (_nginx, port) = origin(&d.path().join("learn-origin"), &www, Some(&quick));
    let url = format!("https://127.0.0.1:{port}/learn/r.json");
    let app = d.path().join("app");
    let pack = |out: &str, extra: &[&str]| {
        let app = app.to_str().unwrap();
        let out = d.path().join(out);
        plain(&["pack", app, "--learn-from", &url, "-o", out.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap()
    };
    // With --ca-file, as curl --cacert: the record is read and its page joins the hot set.
    let out = pack("learned", &["--ca-file", &quick.0]);
    check(&out);
    assert!(stderr(&out).contains("learn: 1 record of 1 start"), "{}", stderr(&out));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.path().join("learned/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(m["hot"]["chunks"].as_array().map(Vec::len), Some(1), "{}", m["hot"]);
    // Without it the server is not trusted: said, with what to do, and nothing packed.
    let out = pack("untrusted", &[]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("--ca-file"), "{}", stderr(&out));
    assert!(!d.path().join("untrusted").exists());
}
