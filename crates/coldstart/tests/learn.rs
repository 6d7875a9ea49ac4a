//! Hot sets learned from the users' starts (docs/learn.md), with real parts: `run --learn`
//! writes its record to a directory, to moto's S3 and to an HTTP server taking PUT (a Python
//! `http.server` started here, in its own process group); `pack --learn-from` reads them back
//! from each; a hostile record is refused and cannot grow a bundle; and end to end, the
//! sample program profiled on workload a learns workload b from three starts, after which b's
//! start misses fewer pieces outside the hot set, and every byte of the learned bundle reads
//! back as the program's.
//!
//! Needs root (FUSE); the S3 test needs moto_server, the HTTP test python3.

mod common;
use common::{
    check, free_port, moto_server, require_program, require_root, server_on_free_port, KillOnDrop,
};

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The `--json` report on a run's stderr (the first JSON value there).
fn report_of(out: &Output) -> serde_json::Value {
    let err = stderr(out);
    let at = err.find("{\n").unwrap_or_else(|| panic!("no report: {err}"));
    let mut de = serde_json::Deserializer::from_str(&err[at..]).into_iter::<serde_json::Value>();
    de.next().unwrap().unwrap()
}

/// A program of one 1 MiB file, `data.bin`, packed with an empty hot set in 64 KiB chunks.
fn data_bundle(dir: &Path) -> (PathBuf, PathBuf) {
    let app = dir.join("app");
    std::fs::create_dir_all(&app).unwrap();
    let data: Vec<u8> =
        (0..1u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(app.join("data.bin"), data).unwrap();
    let bundle = dir.join("plain.bundle");
    check(&coldstart().arg("pack").arg(&app).arg("-o").arg(&bundle).output().unwrap());
    (app, bundle)
}

/// `coldstart run BUNDLE --learn DEST -- sh -c 'head -c 200000 data.bin | wc -c'` (4 pieces
/// of 64 KiB outside the empty hot set), from a cache of its own; its output.
fn learning_run(dir: &Path, bundle: &Path, dest: &str, extra: &[&str]) -> Output {
    let out = coldstart()
        .arg("run")
        .arg(bundle)
        .args(["--cache-dir"])
        .arg(dir.join(format!("cache-{}", free_port())))
        .args(["--learn", dest])
        .args(extra)
        .args(if extra.contains(&"--strategy") { &[][..] } else { &["--strategy", "paged"][..] })
        .args(["--", "sh", "-c", "head -c 200000 {root}/data.bin | wc -c"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(check(&out).trim(), "200000", "{}", stderr(&out));
    out
}

/// The bundle's manifest as JSON.
fn manifest(bundle: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap()
}

/// The hot set's ranges of `data.bin` in a bundle: (offset, length) of each hot piece.
fn hot_ranges(bundle: &Path) -> Vec<(u64, u64)> {
    let m = manifest(bundle);
    let files = m["files"].as_array().unwrap();
    m["hot"]["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let e = files.iter().find(|e| e["path"] == r["path"]).unwrap();
            let c = &e["chunks"][r["index"].as_u64().unwrap() as usize];
            (c["offset"].as_u64().unwrap(), c["length"].as_u64().unwrap())
        })
        .collect()
}

/// `pack APP --learn-from SRC... -o OUT` with `extra`; what it said on stderr.
fn learned_pack(app: &Path, from: &[&str], out: &Path, extra: &[&str]) -> String {
    let mut cmd = coldstart();
    cmd.arg("pack").arg(app);
    for f in from {
        cmd.args(["--learn-from", f]);
    }
    let out = cmd.args(extra).arg("-o").arg(out).output().unwrap();
    check(&out);
    stderr(&out)
}

#[test]
fn records_go_to_a_directory_and_a_failure_to_write_one_is_a_warning() {
    if !require_root("FUSE mounts") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (app, bundle) = data_bundle(d.path());
    // Made at the first record.
    let learned = d.path().join("learned");
    for _ in 0..2 {
        let out = learning_run(d.path(), &bundle, learned.to_str().unwrap(), &[]);
        assert!(stderr(&out).contains("learn record of 4 pieces outside the hot set written to"));
    }
    let names: Vec<String> = std::fs::read_dir(&learned)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "one file per start, no temporary left: {names:?}");
    let text = std::fs::read_to_string(learned.join(&names[0])).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["format"], "coldstart-learn-record");
    assert_eq!(r["completed"], true);
    let offsets: Vec<u64> =
        r["pieces"].as_array().unwrap().iter().map(|p| p["offset"].as_u64().unwrap()).collect();
    assert_eq!(offsets, [0, 65536, 131072, 196608], "first-read order");
    assert!(!text.contains("data.bin"), "no path in a record: {text}");
    assert!(text.len() < 1024, "{} bytes", text.len());

    // Merged: the four pieces are the new hot set, the last as far as the program read it
    // (its first pages: up to 200,000, as the reads of `head` reached past it).
    let out = d.path().join("learned.bundle");
    let said = learned_pack(&app, &[learned.to_str().unwrap()], &out, &[]);
    assert!(said.contains("learn: 2 records of 2 starts"), "{said}");
    let hot = hot_ranges(&out);
    assert_eq!(hot[..3], [(0, 65536), (65536, 65536), (131072, 65536)], "{hot:?}");
    let (at, len) = hot[3];
    assert!(at == 196608 && at + len >= 200_000 && len < 65536 && len % 4096 == 0, "{hot:?}");

    // Under `original` every file is whole in the cache before the program starts; its reads
    // are seen all the same (no passthrough while learning).
    let original = d.path().join("original");
    let out =
        learning_run(d.path(), &bundle, original.to_str().unwrap(), &["--strategy", "original"]);
    // (With the 128 KiB read-ahead `original` mounts with, the kernel reads on past 200,000.)
    let err = stderr(&out);
    assert!(err.contains("learn record of 4 pieces") || err.contains("of 6 pieces"), "{err}");

    // A sampled-out start writes nothing; a directory that cannot be made is a warning only.
    learning_run(d.path(), &bundle, learned.to_str().unwrap(), &["--learn-rate", "0"]);
    assert_eq!(std::fs::read_dir(&learned).unwrap().count(), 2);
    let blocked = d.path().join("app/data.bin/learned");
    let out = learning_run(d.path(), &bundle, blocked.to_str().unwrap(), &[]);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "warning: the learn record was not written to --learn {}",
            blocked.display()
        )) && err.contains("the run is not affected")
            && err.contains("a directory this user may write"),
        "{err}"
    );
}

/// An HTTP server that stores each PUT under its directory and lists it on GET (Python's
/// `http.server`), in a process group of its own; its guard and URL of `learn/`.
fn put_server(dir: &Path) -> (KillOnDrop, String) {
    let script = r#"
import http.server, os, sys
root = sys.argv[2]
class H(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=root, **k)
    def do_PUT(self):
        path = os.path.join(root, self.path.lstrip('/').split('?')[0])
        if '..' in path: self.send_error(400); return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        n = int(self.headers['Content-Length'])
        with open(path + '.tmp', 'wb') as f: f.write(self.rfile.read(n))
        os.rename(path + '.tmp', path)
        self.send_response(201); self.send_header('Content-Length', '0'); self.end_headers()
http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
"#;
    let root = dir.join("www");
    std::fs::create_dir_all(root.join("learn")).unwrap();
    let put = |port: u16| {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", script, &port.to_string()])
            .arg(&root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        cmd
    };
    let (guard, port) = server_on_free_port(put, Duration::from_secs(30), "the PUT server");
    (guard, format!("http://127.0.0.1:{port}/learn/"))
}

#[test]
fn records_go_to_an_http_server_taking_put_and_are_read_back_from_its_listing() {
    if !require_root("FUSE mounts") || !require_program("python3", "python3") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (app, bundle) = data_bundle(d.path());
    let (_server, url) = put_server(d.path());
    for _ in 0..3 {
        let out = learning_run(d.path(), &bundle, &url, &[]);
        assert!(stderr(&out).contains(&format!("written to {url}")), "{}", stderr(&out));
    }
    let stored = std::fs::read_dir(d.path().join("www/learn")).unwrap().count();
    assert_eq!(stored, 3);
    let out = d.path().join("learned.bundle");
    let said = learned_pack(&app, &[&url], &out, &[]);
    assert!(said.contains("learn: 3 records of 3 starts (0 refused"), "{said}");
    assert_eq!(hot_ranges(&out).len(), 4);
    // A server that refuses the PUT (501 from a plain GET server) is a warning.
    let (_plain, plain_url) = {
        let get = |port: u16| {
            let mut cmd = Command::new("python3");
            cmd.args(["-m", "http.server", "-b", "127.0.0.1", &port.to_string()])
                .current_dir(d.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0);
            cmd
        };
        let (g, port) = server_on_free_port(get, Duration::from_secs(30), "the GET server");
        (g, format!("http://127.0.0.1:{port}/learn/"))
    };
    let out = learning_run(d.path(), &bundle, &plain_url, &["--retries", "0"]);
    let err = stderr(&out);
    assert!(err.contains("the learn record was not written") && err.contains("501"), "{err}");
    assert!(err.contains("takes PUT"), "{err}");
}

/// moto's S3 server on a free port with a bucket `learn-records`, signatures not checked.
fn moto(dir: &Path) -> (KillOnDrop, u16) {
    let (guard, port) = moto_server(dir);
    let out = Command::new("curl")
        .args(["-sf", "-X", "PUT", &format!("http://127.0.0.1:{port}/learn-records")])
        .args(["-H", "Authorization: AWS4-HMAC-SHA256 Credential=setup/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0"])
        .output()
        .unwrap();
    check(&out);
    (guard, port)
}

#[test]
fn records_go_to_s3_with_the_credentials_publish_uses_and_are_listed_back() {
    if !require_root("FUSE mounts")
        || !require_program("moto_server", "moto[server] (pip)")
        || !require_program("curl", "curl")
    {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (app, bundle) = data_bundle(d.path());
    let (_moto, port) = moto(d.path());
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = |c: &mut Command| {
        for (k, _) in std::env::vars() {
            if k.starts_with("AWS_") {
                c.env_remove(k);
            }
        }
        c.env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
            .env("AWS_CONFIG_FILE", "/nonexistent/config")
            .env("AWS_ACCESS_KEY_ID", "AKIALEARNTEST")
            .env("AWS_SECRET_ACCESS_KEY", "secret");
    };
    let dest = "s3://learn-records/app/v1/";
    for _ in 0..2 {
        let mut cmd = coldstart();
        env(&mut cmd);
        let out = cmd
            .arg("run")
            .arg(&bundle)
            .args(["--strategy", "paged", "--cache-dir"])
            .arg(d.path().join(format!("cache-{}", free_port())))
            .args(["--learn", dest, "--endpoint", &endpoint])
            .args(["--", "sh", "-c", "head -c 200000 {root}/data.bin | wc -c"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(check(&out).trim(), "200000");
        assert!(stderr(&out).contains("written to s3://learn-records/app/v1/"), "{}", stderr(&out));
    }
    let out = d.path().join("learned.bundle");
    let mut cmd = coldstart();
    env(&mut cmd);
    let done = cmd
        .arg("pack")
        .arg(&app)
        .args(["--learn-from", dest, "--endpoint", &endpoint, "-o"])
        .arg(&out)
        .output()
        .unwrap();
    check(&done);
    assert!(stderr(&done).contains("learn: 2 records of 2 starts"), "{}", stderr(&done));
    assert_eq!(hot_ranges(&out).len(), 4);
}

#[test]
fn a_hostile_record_is_refused_and_none_can_make_a_bundle_larger_than_its_program() {
    // No mount: records written by hand, as a hostile machine would send them.
    let d = tempfile::tempdir().unwrap();
    let (app, bundle) = data_bundle(d.path());
    let m = manifest(&bundle);
    let file = m["files"].as_array().unwrap().iter().find(|e| e["path"] == "data.bin").unwrap();
    let sha = file["sha256"].as_str().unwrap().to_owned();
    let bundle_id = "ab".repeat(32);
    let record = |pieces: &str| {
        format!(
            r#"{{"format":"coldstart-learn-record","version":1,"bundle":"{bundle_id}","strategy":"paged","completed":true,"files":[{{"sha256":"{sha}","size":1048576}}],"pieces":[{pieces}]}}"#
        )
    };
    let hostile = d.path().join("hostile");
    std::fs::create_dir(&hostile).unwrap();
    // Beyond the file, and more than its size.
    let beyond = r#"{"file":0,"offset":1040000,"length":65536,"stored":65536,"ms":1}"#;
    std::fs::write(hostile.join("beyond.json"), record(beyond)).unwrap();
    std::fs::write(hostile.join("big.json"), vec![b' '; (2 << 20) + 1]).unwrap();
    let out = d.path().join("refused.bundle");
    let said = learned_pack(&app, &[hostile.to_str().unwrap()], &out, &[]);
    assert!(
        said.contains(
            "beyond.json: refused: piece 0 (1040000+65536) lies beyond its file's 1048576 bytes"
        ),
        "{said}"
    );
    assert!(said.contains("big.json: refused: 2097153 bytes, over the 2097152"), "{said}");
    assert!(said.contains("learn: 0 records of 0 starts (2 refused"), "{said}");
    assert!(hot_ranges(&out).is_empty());

    // Valid but greedy: every page of the file, one piece each, read by every start. The
    // hot set is the program (no byte more), in no more pieces than its chunks.
    let greedy = d.path().join("greedy");
    std::fs::create_dir(&greedy).unwrap();
    std::fs::write(greedy.join("all.json"), record(&page_pieces(256, 4096))).unwrap();
    let out = d.path().join("greedy.bundle");
    learned_pack(&app, &[greedy.to_str().unwrap()], &out, &[]);
    let hot = hot_ranges(&out);
    assert_eq!(hot.iter().map(|h| h.1).sum::<u64>(), 1 << 20, "the hot set is the program");
    assert_eq!(hot.len(), 16, "no more pieces than 64 KiB chunks");
    let size = |b: &Path| {
        let out = Command::new("du").args(["-sb"]).arg(b).output().unwrap();
        check(&out).split_whitespace().next().unwrap().parse::<u64>().unwrap()
    };
    assert!(size(&out) <= size(&bundle) + 4096, "{} against {}", size(&out), size(&bundle));
    // Every other page: 128 runs in a file of 16 chunks, widened to the chunks instead.
    let sparse = d.path().join("sparse");
    std::fs::create_dir(&sparse).unwrap();
    std::fs::write(sparse.join("r.json"), record(&page_pieces(128, 8192))).unwrap();
    let out = d.path().join("sparse.bundle");
    learned_pack(&app, &[sparse.to_str().unwrap()], &out, &[]);
    let m = manifest(&out);
    let pieces = m["files"][0]["chunks"].as_array().unwrap().len();
    assert_eq!(pieces, 16, "no more pieces than chunks");
    // A record of another program's file adds nothing.
    let other = d.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let text = record(r#"{"file":0,"offset":0,"length":4096,"stored":4096,"ms":1}"#)
        .replace(&sha, &"cd".repeat(32));
    std::fs::write(other.join("r.json"), text).unwrap();
    let out = d.path().join("other.bundle");
    let said = learned_pack(&app, &[other.to_str().unwrap()], &out, &[]);
    assert!(said.contains("1 piece of files not in"), "{said}");
    assert!(hot_ranges(&out).is_empty());
}

#[test]
fn the_sample_learns_workload_b_from_three_starts_and_then_misses_less() {
    use coldstart_sample::{build, Config, Size};
    if !require_root("FUSE mounts") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let app = d.path().join("app");
    build(&Config::for_size(Size::Small, 7), &app).unwrap();
    let local = |w: &str| {
        check(&Command::new(app.join("sample")).args(["--workload", w]).output().unwrap())
    };
    let pack = |name: &str, extra: &[&str]| {
        let out = d.path().join(name);
        let done = coldstart()
            .arg("pack")
            .arg(&app)
            .args(["--chunk-size", "16k"])
            .args(extra)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        check(&done);
        (out, stderr(&done))
    };
    let run = |bundle: &Path, w: &str, extra: &[&str]| {
        let out = coldstart()
            .arg("run")
            .arg(bundle)
            .args(["--strategy", "reordered-paged", "--json", "--cache-dir"])
            .arg(d.path().join(format!("cache-{}", free_port())))
            .args(extra)
            .args(["--", "{root}/sample", "--workload", w])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(check(&out), local(w), "{}", stderr(&out));
        out
    };
    // Workload a's hot list, recorded from a paged start.
    let (plain, _) = pack("plain", &[]);
    let hot_a = d.path().join("hot-a.json");
    let out = coldstart()
        .arg("run")
        .arg(&plain)
        .args(["--strategy", "paged", "--cache-dir"])
        .arg(d.path().join("cache-rec"))
        .args(["--record", hot_a.to_str().unwrap(), "--", "{root}/sample", "--workload", "a"])
        .output()
        .unwrap();
    check(&out);
    let (first, _) = pack("first", &["--hot-list", hot_a.to_str().unwrap()]);
    // Three starts of b learn.
    let learned = d.path().join("learned");
    std::fs::create_dir(&learned).unwrap();
    let mut before = Vec::new();
    for _ in 0..3 {
        let out = run(&first, "b", &["--learn", learned.to_str().unwrap()]);
        before.push(report_of(&out));
    }
    let (second, said) = pack(
        "second",
        &["--hot-list", hot_a.to_str().unwrap(), "--learn-from", learned.to_str().unwrap()],
    );
    assert!(said.contains("learn: 3 records of 3 starts"), "{said}");
    let after = report_of(&run(&second, "b", &[]));
    let a_after = report_of(&run(&second, "a", &[]));
    let misses = |r: &serde_json::Value| r["held_out_misses"].as_u64().unwrap();
    let fetched = |r: &serde_json::Value| r["other_bytes"].as_u64().unwrap();
    let b_misses = misses(&before[0]);
    eprintln!(
        "workload b outside the hot set: {} misses, {} bytes besides the hot request before; {} misses, {} bytes after",
        b_misses,
        fetched(&before[0]),
        misses(&after),
        fetched(&after)
    );
    assert!(b_misses > 0, "workload b read outside a's hot set: {:#}", before[0]);
    assert!(misses(&after) * 4 <= b_misses, "{} misses of {b_misses}", misses(&after));
    assert!(fetched(&after) < fetched(&before[0]));
    assert_eq!(misses(&a_after), 0, "a still starts from its hot set alone");

    // Every byte of the learned bundle reads back as the program's, checked as any other.
    let sums = |root: &str| format!("cd {root} && find . -type f | sort | xargs sha256sum");
    let want =
        check(&Command::new("sh").args(["-c", &sums(app.to_str().unwrap())]).output().unwrap());
    let out = coldstart()
        .arg("run")
        .arg(&second)
        .args(["--strategy", "original", "--cache-dir"])
        .arg(d.path().join("cache-sums"))
        .args(["--", "sh", "-c", &sums("{root}")])
        .output()
        .unwrap();
    assert_eq!(check(&out), want);
}

#[test]
fn a_mount_writes_its_record_when_it_is_unmounted() {
    if !require_root("FUSE mounts") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (_, bundle) = data_bundle(d.path());
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let learned = d.path().join("learned");
    let child = coldstart()
        .arg("mount")
        .arg(&bundle)
        .arg(&mnt)
        .args(["--strategy", "paged", "--cache-dir"])
        .arg(d.path().join("cache"))
        .arg("--learn")
        .arg(&learned)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut guard = KillOnDrop(child);
    let t = Instant::now();
    while !mnt.join("data.bin").exists() {
        assert!(t.elapsed() < Duration::from_secs(30), "not mounted");
        std::thread::sleep(Duration::from_millis(50));
    }
    let script = format!("head -c 70000 {} | wc -c", mnt.join("data.bin").display());
    let head = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert_eq!(check(&head).trim(), "70000");
    let pid = guard.0.id().to_string();
    check(&Command::new("kill").args(["-INT", &pid]).output().unwrap());
    let status = guard.0.wait().unwrap();
    // Ended by SIGINT, as every command a signal ends: 128 + 2.
    assert_eq!(status.code(), Some(130), "{status}");
    let names: Vec<PathBuf> =
        std::fs::read_dir(&learned).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(names.len(), 1);
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&names[0]).unwrap()).unwrap();
    let offsets: Vec<u64> =
        r["pieces"].as_array().unwrap().iter().map(|p| p["offset"].as_u64().unwrap()).collect();
    assert_eq!(offsets, [0, 65536]);
    assert_eq!(r["completed"], true);
}

/// A record's pieces: `n` pages of file 0, `stride` bytes apart, each read one millisecond
/// after the one before.
fn page_pieces(n: u64, stride: u64) -> String {
    let pages: Vec<String> = (0..n)
        .map(|i| {
            format!(r#"{{"file":0,"offset":{},"length":4096,"stored":4096,"ms":{i}}}"#, i * stride)
        })
        .collect();
    pages.join(",")
}
