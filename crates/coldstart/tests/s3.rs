//! A private bucket on an S3-compatible server (moto) started here, behind nginx over https
//! with a CA this test makes: `coldstart publish` then `coldstart run` from the bucket with
//! SigV4, a publish that finds everything there, a publish that fails half-way (readers keep
//! the previous bundle), wrong credentials, a bucket that does not exist.
//!
//! moto checks SigV4 signatures only once its IAM is switched on (`/moto-api/reset-auth`),
//! and then answers requests without any with 500; so the bucket is first used with IAM off,
//! where moto refuses an unsigned read of a private object (403) but takes any signature, and
//! then with IAM on, where only the signature of the user's key and secret passes.
//!
//! Needs root (FUSE), moto_server, nginx and openssl, as `scripts/setup.sh` installs them;
//! every server started here is stopped by a guard even when an assertion fails.

mod common;
use common::{
    certificates, check, free_port, moto_server, require_program, require_root, KillOnDrop,
};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BUCKET: &str = "coldstart-private";

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// One HTTP/1.1 request to 127.0.0.1:`port`; the status and the body.
fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

fn between(text: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let start = text.find(&open).unwrap_or_else(|| panic!("no <{tag}> in {text}")) + open.len();
    text[start..start + text[start..].find('<').unwrap()].to_owned()
}

/// moto's server on a free port, and an IAM user's access key allowed everything on S3.
struct Moto {
    _guard: KillOnDrop,
    port: u16,
    key: String,
    secret: String,
    /// A key that may read and write the bucket's objects but not list them (no
    /// s3:ListBucket), as CI upload keys often are.
    put_only: (String, String),
}

impl Moto {
    fn start(dir: &Path) -> Moto {
        let (guard, port) = moto_server(dir);
        // Without IAM checks yet: the service is named by the Authorization header's scope.
        let iam = [(
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=setup/20250101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0",
        )];
        let form = [("Content-Type", "application/x-www-form-urlencoded"), iam[0]];
        let call = |body: &str| {
            let (status, text) = http(port, "POST", "/", &form, body.as_bytes());
            assert_eq!(status, 200, "{body}: {text}");
            text
        };
        call("Action=CreateUser&UserName=publisher&Version=2010-05-08");
        let keys = call("Action=CreateAccessKey&UserName=publisher&Version=2010-05-08");
        let policy = "%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%7B%22Effect%22%3A%22Allow%22%2C%22Action%22%3A%22s3%3A*%22%2C%22Resource%22%3A%22*%22%7D%5D%7D";
        call(&format!(
            "Action=PutUserPolicy&UserName=publisher&PolicyName=s3&PolicyDocument={policy}&Version=2010-05-08"
        ));
        call("Action=CreateUser&UserName=uploader&Version=2010-05-08");
        let put_only = call("Action=CreateAccessKey&UserName=uploader&Version=2010-05-08");
        let objects_only = format!("%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%7B%22Effect%22%3A%22Allow%22%2C%22Action%22%3A%5B%22s3%3APutObject%22%2C%22s3%3AGetObject%22%5D%2C%22Resource%22%3A%22arn%3Aaws%3As3%3A%3A%3A{BUCKET}%2F%2A%22%7D%5D%7D");
        call(&format!(
            "Action=PutUserPolicy&UserName=uploader&PolicyName=objects&PolicyDocument={objects_only}&Version=2010-05-08"
        ));
        let s3 = [(
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=setup/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0",
        )];
        let (status, text) = http(port, "PUT", &format!("/{BUCKET}"), &s3, b"");
        assert_eq!(status, 200, "create bucket: {text}");
        Moto {
            _guard: guard,
            port,
            key: between(&keys, "AccessKeyId"),
            secret: between(&keys, "SecretAccessKey"),
            put_only: (between(&put_only, "AccessKeyId"), between(&put_only, "SecretAccessKey")),
        }
    }

    /// From now on every request must carry a valid signature of a key moto knows.
    fn check_signatures(&self) {
        let plain = [("Content-Type", "text/plain")];
        let (status, text) = http(self.port, "POST", "/moto-api/reset-auth", &plain, b"0");
        assert_eq!(status, 200, "{text}");
    }
}

/// `coldstart ARGS` with only the AWS settings given here: the machine's own (variables,
/// ~/.aws) are left out.
fn aws(key: &str, secret: &str) -> Command {
    let mut c = coldstart();
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            c.env_remove(k);
        }
    }
    c.env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        .env("AWS_CONFIG_FILE", "/nonexistent/config")
        .env("AWS_ACCESS_KEY_ID", key)
        .env("AWS_SECRET_ACCESS_KEY", secret);
    c
}

/// A bundle of `data.bin` (1 MiB made from `seed`) at `dir/NAME.bundle`; its SHA-256.
fn bundle(dir: &Path, name: &str, seed: u32) -> (PathBuf, String) {
    let app = dir.join(name);
    std::fs::create_dir_all(&app).unwrap();
    let data: Vec<u8> =
        (0..1u32 << 20).map(|i| ((i ^ seed).wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(app.join("data.bin"), &data).unwrap();
    let out = dir.join(format!("{name}.bundle"));
    check(&coldstart().arg("pack").arg(&app).arg("-o").arg(&out).output().unwrap());
    let sum = check(&Command::new("sha256sum").arg(app.join("data.bin")).output().unwrap());
    (out, sum.split_whitespace().next().unwrap().to_owned())
}

/// The content-addressed blobs of a bundle, as keys under `blobs/`.
fn blobs(bundle: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(bundle.join("blobs/cold")).unwrap() {
        for f in std::fs::read_dir(e.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            out.push(p.strip_prefix(bundle).unwrap().to_str().unwrap().to_owned());
        }
    }
    out.sort();
    out
}

/// PUT requests nginx logged for keys containing `part`, once the log has not grown for
/// 100 ms (nginx writes a request's line as it finishes it, a moment after its answer).
fn puts(log: &Path, part: &str) -> usize {
    let size = || std::fs::metadata(log).map_or(0, |m| m.len());
    let mut last = size();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = size();
        if now == last {
            break;
        }
        last = now;
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter(|l| l.contains("\"PUT /") && l.contains(part)).count()
}

#[test]
fn a_private_bucket_behind_nginx_with_tls_publish_run_and_refusals() {
    if !require_root("FUSE mounts")
        || !require_program("moto_server", "moto[server] (pip)")
        || !require_program("nginx", "nginx-light")
        || !require_program("openssl", "openssl")
    {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (a, digest_a) = bundle(d.path(), "a", 1);
    let (b, _) = bundle(d.path(), "b", 2);
    // A blob only the second bundle has: nginx refuses its upload (503), so that publish
    // fails half-way.
    let only_b = blobs(&b).into_iter().find(|k| !blobs(&a).contains(k)).unwrap();
    let moto = Moto::start(d.path());
    let ca = certificates(d.path());
    let log = d.path().join("access.log");
    let (_nginx, port) = common::nginx(d.path(), |port| {
        let upstream = format!(
            "proxy_pass http://127.0.0.1:{}; proxy_set_header Host $http_host; \
             proxy_http_version 1.1; client_max_body_size 0;",
            moto.port
        );
        format!(
            "        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        access_log {log};
        location = /{BUCKET}/app/{only_b} {{
            if ($request_method = PUT) {{ return 503; }}
            {upstream}
        }}
        location / {{ {upstream} }}",
            cert = d.path().join("server.pem").display(),
            key = d.path().join("server.key").display(),
            log = log.display(),
        )
    });
    let endpoint = format!("https://127.0.0.1:{port}");
    let url = format!("s3://{BUCKET}/app");
    let ca_arg = ca.to_str().unwrap();
    let s3_flags = ["--endpoint", &endpoint, "--ca-file", ca_arg, "--retries", "0"];
    let publish = |bundle: &Path, key: &str, secret: &str| {
        aws(key, secret).arg("publish").arg(bundle).arg(&url).args(s3_flags).output().unwrap()
    };
    let run = |key: &str, secret: &str| {
        let cache = d.path().join(format!("cache-{}", free_port()));
        aws(key, secret)
            .args(["run", &url, "--cache-dir"])
            .arg(cache)
            .args(s3_flags)
            .args(["--", "sha256sum", "{root}/data.bin"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };

    // Publish, then run from the bucket.
    let out = publish(&a, &moto.key, &moto.secret);
    check(&out);
    let uploaded = puts(&log, "/app/");
    assert_eq!(uploaded, walk_count(&a), "one PUT per object: {}", stderr(&out));
    let got = check(&run(&moto.key, &moto.secret));
    assert!(got.starts_with(&digest_a), "{got}");
    // The bucket is private: the same object without a signature is refused.
    let (status, _) = http(moto.port, "GET", &format!("/{BUCKET}/app/manifest.json"), &[], b"");
    assert_eq!(status, 403, "an unsigned read of the private bucket");

    // Published again: nothing is uploaded.
    let out = publish(&a, &moto.key, &moto.secret);
    check(&out);
    assert_eq!(puts(&log, "/app/"), uploaded, "{}", stderr(&out));

    // A publish that fails on one blob: nothing readers start from was replaced, so they run
    // the first bundle, whole.
    let out = publish(&b, &moto.key, &moto.secret);
    assert_eq!(out.status.code(), Some(70), "{}", stderr(&out));
    assert!(stderr(&out).contains(&only_b), "{}", stderr(&out));
    assert_eq!(puts(&log, &only_b), 1);
    for entry in ["app/manifest.json ", "app/manifest.json.zst ", "app/start "] {
        assert_eq!(puts(&log, entry), 1, "{entry} replaced by the failed publish");
    }
    let got = check(&run(&moto.key, &moto.secret));
    assert!(got.starts_with(&digest_a), "{got}");

    // A bucket that does not exist: bad input, named.
    let out = aws(&moto.key, &moto.secret)
        .arg("publish")
        .arg(&a)
        .arg("s3://no-such-bucket/app")
        .args(s3_flags)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("`no-such-bucket` does not exist"), "{}", stderr(&out));

    // With moto checking signatures: the right secret still reads the bundle; a wrong one is
    // refused, saying which key was used, never the secret.
    moto.check_signatures();
    let got = check(&run(&moto.key, &moto.secret));
    assert!(got.starts_with(&digest_a), "{got}");
    // The same key from a profile of a credentials file, as `aws configure` writes it.
    let creds = d.path().join("credentials");
    std::fs::write(
        &creds,
        format!(
            "[default]\naws_access_key_id = NOTTHISONE\naws_secret_access_key = nope\n\
             [ci]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            moto.key, moto.secret
        ),
    )
    .unwrap();
    let cache = d.path().join("cache-profile");
    let out = aws(&moto.key, &moto.secret)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("AWS_PROFILE", "ci")
        .env("AWS_SHARED_CREDENTIALS_FILE", &creds)
        .args(["run", &url, "--cache-dir"])
        .arg(cache)
        .args(s3_flags)
        .args(["--", "sha256sum", "{root}/data.bin"])
        .output()
        .unwrap();
    assert!(check(&out).starts_with(&digest_a), "{}", stderr(&out));
    // A key that may not list the bucket publishes with a HEAD per object: nothing again for
    // the bundle already there, everything for a new prefix, which then runs.
    let (put_key, put_secret) = (&moto.put_only.0, &moto.put_only.1);
    let before = puts(&log, "/app/");
    let out = publish(&a, put_key, put_secret);
    let e = stderr(&out);
    assert!(out.status.success() && e.contains("no s3:ListBucket"), "{e}");
    assert_eq!(puts(&log, "/app/"), before, "{e}");
    let other = format!("s3://{BUCKET}/other");
    let out = aws(put_key, put_secret)
        .arg("publish")
        .arg(&a)
        .arg(&other)
        .args(s3_flags)
        .output()
        .unwrap();
    check(&out);
    assert_eq!(puts(&log, "/other/"), walk_count(&a), "{}", stderr(&out));
    let out = aws(put_key, put_secret)
        .args(["run", &other, "--cache-dir"])
        .arg(d.path().join("cache-put-only"))
        .args(s3_flags)
        .args(["--", "sha256sum", "{root}/data.bin"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(check(&out).starts_with(&digest_a), "{}", stderr(&out));
    let wrong = "WRONGsecretWRONGsecretWRONGsecret0000000";
    for out in [publish(&a, &moto.key, wrong), run(&moto.key, wrong)] {
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        let e = stderr(&out);
        assert!(e.contains("access denied") && e.contains(&moto.key), "{e}");
        assert!(e.contains("AWS_ACCESS_KEY_ID") && !e.contains(wrong), "{e}");
        assert!(out.stdout.is_empty(), "the command ran");
    }
}

/// The files of a bundle directory.
fn walk_count(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        n += if p.is_dir() { walk_count(&p) } else { 1 };
    }
    n
}
