//! Network start end to end: a C program with a shared library of its own, packed, served by
//! `coldstart serve` and by nginx, and run from a FUSE mount with every strategy.
//!
//! Needs root (FUSE), clang-19 and nginx, as CI has; every mount, server and nginx started
//! here is stopped by a guard even when an assertion fails.

mod common;
use common::{check, require_root, serve, KillOnDrop};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const STRATEGIES: [&str; 5] = ["original", "paged", "reordered-paged", "reordered", "stream"];

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// Asserts on drop that nothing is left mounted under the directory, and cleans up if it is.
struct NoStaleMounts(PathBuf);

/// A temporary directory to work in, checked for mounts left behind before it is removed.
struct Scratch {
    _mounts: NoStaleMounts,
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        Scratch { _mounts: NoStaleMounts(dir.path().to_path_buf()), dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Mount points under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let prefix = dir.canonicalize().unwrap().display().to_string();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

impl Drop for NoStaleMounts {
    fn drop(&mut self) {
        let stale = mounts_under(&self.0);
        for m in &stale {
            let _ = Command::new("fusermount3").args(["-u", "-z", m]).status();
        }
        if !std::thread::panicking() {
            assert!(stale.is_empty(), "stale mounts: {stale:?}");
        }
    }
}

/// The program: `bin/hello DATA` prints a greeting from `lib/libgreet.so` (found through
/// `$ORIGIN/../lib`) and a checksum of DATA; exits 1 with a message if DATA cannot be read.
fn build_program(root: &Path) {
    let src = root.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(root.join("app/bin")).unwrap();
    std::fs::create_dir_all(root.join("app/lib")).unwrap();
    std::fs::create_dir_all(root.join("app/share")).unwrap();
    std::fs::write(
        src.join("greet.c"),
        r#"
#include <stdio.h>
/* A large table so that the library spans many chunks. */
#define N 60000
static unsigned table[N] = {1, 2, 3};
unsigned greet_table(void) {
    unsigned s = 0;
    for (int i = 0; i < N; i += 1024) s = s * 31 + table[i];
    return s;
}
const char *greet(void) { return "hello from libgreet"; }
"#,
    )
    .unwrap();
    std::fs::write(
        src.join("main.c"),
        r#"
#include <stdio.h>
#include <string.h>
#include <errno.h>
const char *greet(void);
unsigned greet_table(void);
int main(int argc, char **argv) {
    printf("%s (%u)\n", greet(), greet_table());
    if (argc < 2) return 0;
    FILE *f = fopen(argv[1], "rb");
    if (!f) { fprintf(stderr, "hello: cannot open %s: %s\n", argv[1], strerror(errno)); return 1; }
    unsigned long sum = 0, n = 0;
    unsigned char buf[8192];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < k; i++) { sum = sum * 1099511628211UL + buf[i]; n++; }
    if (ferror(f)) { fprintf(stderr, "hello: cannot read %s: %s\n", argv[1], strerror(errno)); return 1; }
    printf("data: %lu bytes, checksum %lx\n", n, sum);
    return 0;
}
"#,
    )
    .unwrap();
    shared_library(root, "greet.c", "libgreet.so.1", &["-Wl,-soname,libgreet.so.1"]);
    std::os::unix::fs::symlink("libgreet.so.1", root.join("app/lib/libgreet.so")).unwrap();
    executable(root, "main.c", "greet", "hello");
    let data: Vec<u8> = (0..400_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    std::fs::write(root.join("app/share/data.bin"), data).unwrap();
}

/// ROOT/src/SRC compiled with clang-19 into the shared library ROOT/app/lib/OUT.
fn shared_library(root: &Path, src: &str, out: &str, extra: &[&str]) {
    clang(root, &["-shared", "-fPIC"], src, extra, &format!("app/lib/{out}"));
}

/// ROOT/src/SRC compiled with clang-19 into ROOT/app/bin/OUT, linked to `-lLIB` from
/// ROOT/app/lib and finding it at run time through `$ORIGIN/../lib`.
fn executable(root: &Path, src: &str, lib: &str, out: &str) {
    let libs = root.join("app/lib");
    let link = ["-L", libs.to_str().unwrap(), &format!("-l{lib}"), "-Wl,-rpath,$ORIGIN/../lib"];
    clang(root, &[], src, &link, &format!("app/bin/{out}"));
}

fn clang(root: &Path, before: &[&str], src: &str, after: &[&str], out: &str) {
    let out = Command::new("clang-19")
        .arg("-O1")
        .args(before)
        .arg(root.join("src").join(src))
        .args(after)
        .arg("-o")
        .arg(root.join(out))
        .output()
        .expect("clang-19 is installed");
    check(&out);
}

fn run_local(root: &Path) -> String {
    let app = root.join("app");
    check(&Command::new(app.join("bin/hello")).arg(app.join("share/data.bin")).output().unwrap())
}

/// A scratch directory with the program built in it, and what it prints run in place.
fn built_program() -> (Scratch, String) {
    let d = Scratch::new();
    build_program(d.path());
    let local = run_local(d.path());
    (d, local)
}

fn pack(root: &Path, out: &str, hot: Option<&Path>) -> PathBuf {
    pack_with(root, out, hot, &[]).0
}

/// `coldstart pack ROOT/app` in chunks of 16 KiB, with `extra` arguments; the bundle and what
/// pack printed.
fn pack_with(root: &Path, out: &str, hot: Option<&Path>, extra: &[&str]) -> (PathBuf, String) {
    let bundle = root.join(out);
    let mut cmd = coldstart();
    cmd.arg("pack").arg(root.join("app")).args(["--chunk-size", "16k"]).args(extra);
    cmd.arg("-o").arg(&bundle);
    if let Some(h) = hot {
        cmd.arg("--hot-list").arg(h);
    }
    let said = check(&cmd.output().unwrap());
    (bundle, said)
}

/// `coldstart serve --proxy UPSTREAM --link LINK` as a child; returns it and its URL.
fn proxy(upstream: &str, link: &str) -> (KillOnDrop, String) {
    let mut child = coldstart()
        .args(["serve", "--proxy", upstream, "--link", link])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    (KillOnDrop(child), line.trim().to_owned())
}

/// nginx serving `bundle` on 127.0.0.1, configured in `dir`, in the foreground.
fn nginx(dir: &Path, bundle: &Path) -> (KillOnDrop, String) {
    let (guard, port) = common::nginx(dir, |port| {
        format!(
            "        listen 127.0.0.1:{port};\n        root {};\n        location / {{ }}",
            bundle.display()
        )
    });
    (guard, format!("http://127.0.0.1:{port}/"))
}

/// `coldstart run URL --strategy S -- {root}/bin/hello {root}/share/data.bin`.
fn run_remote(url: &str, strategy: &str, cache: &Path, extra: &[&str]) -> Output {
    coldstart()
        .args(["run", url, "--strategy", strategy, "--cache-dir"])
        .arg(cache)
        .args(extra)
        .args(["--", "{root}/bin/hello", "{root}/share/data.bin"])
        .output()
        .unwrap()
}

#[test]
fn the_program_runs_from_the_mount_with_every_strategy_and_both_servers() {
    let (d, local) = built_program();
    assert!(local.starts_with("hello from libgreet"), "{local}");

    let (bundle, _) = recorded_bundle(d.path(), "bundle", &[], &local);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["hot"]["size"].as_u64().unwrap() > 0, "the recorded start gave a hot set");

    let (_server, served) = serve(&bundle, &[]);
    let (_nginx, nginx_url) = nginx(d.path(), &bundle);
    // The link emulator as a proxy in front of nginx.
    let nginx_addr = nginx_url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let (_proxy, proxied) = proxy(&nginx_addr, "200mbit/2ms");
    let out = run_remote(&proxied, "reordered", &d.path().join("cache-proxy"), &[]);
    assert_eq!(check(&out), local, "nginx behind the proxy");
    for (name, url) in [("coldstart serve", &served), ("nginx", &nginx_url)] {
        for s in STRATEGIES {
            let cache = d.path().join(format!("cache-{}-{s}", name.replace(' ', "-")));
            let out = run_remote(url, s, &cache, &["--json"]);
            assert_eq!(check(&out), local, "{name}, {s}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("\"bytes_fetched\""), "{name}, {s}: {stderr}");
            // The hot-set strategies read the manifest and the hot set in one request, the
            // others the compressed manifest: from nginx as from coldstart serve.
            let report = report_of(&out);
            let source =
                if ["original", "paged"].contains(&s) { "manifest.json.zst" } else { "start" };
            assert_eq!(report["manifest_source"], source, "{name}, {s}: {report:#}");
        }
    }
}

/// Record what a start of the program under ROOT reads (a paged run from a plain bundle),
/// then pack ROOT/OUT with that as the hot set and `extra` arguments. `local`: the program's
/// output run locally. Returns the bundle and what pack printed.
fn recorded_bundle(root: &Path, out: &str, extra: &[&str], local: &str) -> (PathBuf, String) {
    let first = pack(root, &format!("{out}-plain"), None);
    let record = root.join(format!("{out}-hot.json"));
    let run = run_remote(
        &first.display().to_string(),
        "paged",
        &root.join(format!("cache-record-{out}")),
        &["--record", record.to_str().unwrap()],
    );
    assert_eq!(check(&run), local, "the recording run");
    pack_with(root, out, Some(&record), extra)
}

/// The `--json` report on a run's stderr.
fn report_of(out: &Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let at = err.find("{\n").unwrap_or_else(|| panic!("no report: {err}"));
    let mut de = serde_json::Deserializer::from_str(&err[at..]).into_iter::<serde_json::Value>();
    de.next().unwrap().unwrap()
}

#[test]
fn a_damaged_start_object_on_nginx_gives_the_right_bytes_or_falls_back_or_eio() {
    let (d, local) = built_program();
    let (bundle, _) = recorded_bundle(d.path(), "bundle", &[], &local);
    let start = bundle.join("start");
    let good = std::fs::read(&start).unwrap();
    // `coldstart serve` refuses a bundle whose start object does not match its manifest;
    // nginx serves whatever is there, as a damaged mirror would.
    let (_nginx, url) = nginx(d.path(), &bundle);
    let hot_offset = u64::from_le_bytes(good[72..80].try_into().unwrap()) as usize;
    let manifest_end = 80 + u64::from_le_bytes(good[16..24].try_into().unwrap()) as usize;
    // What the run gets: the right bytes from the start object, a fallback to
    // manifest.json.zst with the right bytes, or EIO for the hot pieces that are damaged or
    // gone (they are stored there alone), never wrong bytes.
    #[derive(PartialEq)]
    enum Then {
        Start,
        Fallback,
        FallbackEio,
    }
    for (what, damaged, then) in [
        ("a flipped byte in the hot part", flip(&good, good.len() - 100), Then::Start),
        ("cut in the hot part", good[..hot_offset + 1000].to_vec(), Then::Start),
        ("a flipped byte in the manifest", flip(&good, manifest_end - 10), Then::Fallback),
        ("cut in the manifest", good[..manifest_end - 10].to_vec(), Then::FallbackEio),
    ] {
        std::fs::write(&start, &damaged).unwrap();
        let refused = coldstart().arg("serve").arg(&bundle).output().unwrap();
        assert_eq!(refused.status.code(), Some(2), "{what}: serve refuses it");
        assert!(String::from_utf8_lossy(&refused.stderr).contains("start"), "{what}");
        let cache = d.path().join(format!("cache-{}", what.replace(' ', "-")));
        let out = run_remote(&url, "stream", &cache, &["--json", "--retries", "1"]);
        let report = report_of(&out);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let source = if then == Then::Start { "start" } else { "manifest.json.zst" };
        assert_eq!(report["manifest_source"], source, "{what}: {report:#}");
        if then == Then::Fallback {
            assert_eq!(check(&out), local, "{what}: the right bytes");
            assert_eq!(report["errors"], 0, "{what}: {report:#}");
            assert!(report["manifest_fallback"].as_str().unwrap().contains("start"), "{what}");
        } else if out.status.success() {
            assert_eq!(stdout.trim(), local.trim(), "{what}: the right bytes");
        } else {
            assert!(stderr.contains("Input/output error"), "{what}: {stderr}");
            assert!(!stdout.contains("checksum"), "{what}: no sum of wrong bytes");
            assert!(report["errors"].as_u64().unwrap() > 0, "{what}: {report:#}");
        }
        if then == Then::FallbackEio {
            assert!(!out.status.success(), "{what}: no hot piece can be had: {stderr}");
        }
    }
}

fn flip(bytes: &[u8], at: usize) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at] ^= 0x5a;
    b
}

#[test]
fn a_corrupt_blob_fails_the_program_with_eio_and_says_so() {
    let d = Scratch::new();
    build_program(d.path());
    let bundle = pack(d.path(), "bundle", None);
    // Damage one chunk of the data file.
    damage_blob(&bundle, &data_chunks(&bundle)[5], |_| 7);
    let stderr = fails_with_eio(d.path(), &bundle);
    assert!(stderr.contains("SHA-256"), "{stderr}");
    assert!(stderr.contains("failed"), "the failure is reported: {stderr}");
}

/// The chunks of `share/data.bin` in the bundle's manifest.
fn data_chunks(bundle: &Path) -> Vec<serde_json::Value> {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    let file = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "share/data.bin")
        .unwrap();
    file["chunks"].as_array().unwrap().clone()
}

/// Flips bits of one byte of the stored form of `chunk` (an entry of the manifest) in its
/// object, at `at(stored length)`.
fn damage_blob(bundle: &Path, chunk: &serde_json::Value, at: impl FnOnce(usize) -> usize) {
    let manifest =
        coldstart_bundle::Manifest::parse(&std::fs::read(bundle.join("manifest.json")).unwrap())
            .unwrap();
    let chunk: coldstart_bundle::Chunk = serde_json::from_value(chunk.clone()).unwrap();
    let (object, offset) = manifest.locate(&chunk);
    let blob = bundle.join(object);
    let mut bytes = std::fs::read(&blob).unwrap();
    let i = offset as usize + at(chunk.stored_len() as usize);
    bytes[i] ^= 0x55;
    std::fs::write(&blob, bytes).unwrap();
}

/// Runs the program from `bundle` (served by `coldstart serve`, `paged`, one retry) and checks
/// that it failed on EIO without printing a checksum of wrong bytes, and that the report says
/// so; returns its stderr.
fn fails_with_eio(root: &Path, bundle: &Path) -> String {
    let (_server, url) = serve(bundle, &[]);
    fails_with_eio_from(root, &url)
}

/// [`fails_with_eio`] with the bundle at `url` (a directory: `serve` refuses a bundle whose
/// start object is damaged).
fn fails_with_eio_from(root: &Path, url: &str) -> String {
    let out = run_remote(url, "paged", &root.join("cache"), &["--retries", "1"]);
    assert_eq!(out.status.code(), Some(1), "the program fails");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("checksum"), "no checksum of wrong bytes: {stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains("Input/output error"), "the program saw EIO: {stderr}");
    assert!(stderr.contains("reads failed with EIO"), "{stderr}");
    stderr
}

/// `coldstart pack --compress zstd` of the program, with the hot set of one recorded start.
fn pack_compressed(root: &Path, local: &str) -> PathBuf {
    let (bundle, said) = recorded_bundle(root, "bundle-z", &["--compress", "zstd"], local);
    assert!(said.contains("stored with zstd"), "{said}");
    bundle
}

#[test]
fn a_compressed_bundle_gives_identical_bytes_with_every_strategy() {
    let (d, local) = built_program();
    let bundle = pack_compressed(d.path(), &local);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["compression"], "zstd");
    let (_server, url) = serve(&bundle, &[]);
    for s in STRATEGIES {
        let cache = d.path().join(format!("cache-{s}"));
        let out = run_remote(&url, s, &cache, &[]);
        assert_eq!(check(&out), local, "{s}");
        // Every file, byte for byte, against the original.
        for f in ["bin/hello", "lib/libgreet.so.1", "share/data.bin"] {
            let out = coldstart()
                .args(["run", &url, "--strategy", s, "--cache-dir"])
                .arg(&cache)
                .args(["--", "cmp", &format!("{{root}}/{f}")])
                .arg(d.path().join("app").join(f))
                .output()
                .unwrap();
            check(&out);
        }
    }
}

#[test]
fn a_corrupt_compressed_chunk_fails_the_program_with_eio() {
    let (d, local) = built_program();
    let bundle = pack_compressed(d.path(), &local);
    // The last chunk of the data (hot: stored in the start object, which `serve` would
    // refuse damaged; the program reads it from the directory).
    let chunks = data_chunks(&bundle);
    let chunk = chunks.last().unwrap();
    assert!(chunk["stored"].as_u64().unwrap() > 0);
    damage_blob(&bundle, chunk, |len| len / 2);
    fails_with_eio_from(d.path(), bundle.to_str().unwrap());
}

#[test]
fn a_server_killed_mid_start_gives_eio_within_the_bound() {
    let d = Scratch::new();
    build_program(d.path());
    let bundle = pack(d.path(), "bundle", None);
    // 400 kB of data at 1 Mbit/s takes over 3 s: kill the server well before that.
    let (mut server, url) = serve(&bundle, &["--link", "1mbit/5ms"]);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        let _ = server.0.kill();
        let _ = server.0.wait();
    });
    let t = Instant::now();
    let out =
        run_remote(&url, "paged", &d.path().join("cache"), &["--retries", "2", "--timeout", "1"]);
    let took = t.elapsed();
    killer.join().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Input/output error") || stderr.contains("reads failed"), "{stderr}");
    // 3 attempts with 1 s bounds and 100 + 200 ms back-off, after at most 1 s of waiting on
    // the dying transfer: well inside 10 s.
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn a_malformed_manifest_is_rejected_before_mounting() {
    let d = Scratch::new();
    build_program(d.path());
    let bundle = pack(d.path(), "bundle", None);
    let path = bundle.join("manifest.json");
    let good = std::fs::read_to_string(&path).unwrap();
    let m = coldstart_bundle::Manifest::parse(good.as_bytes()).unwrap();
    let hot = std::fs::read(bundle.join("start")).unwrap()[m.hot.offset as usize..].to_vec();
    for (what, bad) in [
        ("dot-dot", good.replacen("\"bin/hello\"", "\"bin/../../hello\"", 1)),
        ("absolute", good.replacen("\"bin/hello\"", "\"/bin/hello\"", 1)),
        ("version", good.replacen("\"version\": 4", "\"version\": 9", 1)),
        // A bundle of the layout before each byte was stored once.
        ("version 3", good.replacen("\"version\": 4", "\"version\": 3", 1)),
        ("size", good.replacen("\"size\": 400000", "\"size\": 400001", 1)),
        ("overlap", good.replacen("\"offset\": 16384", "\"offset\": 16000", 1)),
    ] {
        assert_ne!(bad, good, "{what}: the fixture changed");
        // In every copy a client may read.
        let (bad, start) = coldstart_bundle::start::rebuild(bad.as_bytes(), &hot).unwrap();
        std::fs::write(&path, &bad).unwrap();
        let zst = coldstart_bundle::start::compress_manifest(&bad);
        std::fs::write(bundle.join("manifest.json.zst"), zst).unwrap();
        std::fs::write(bundle.join("start"), start).unwrap();
        let out = mount_cmd(d.path(), &bundle).0.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("manifest"), "{what}: {stderr}");
        if what.starts_with("version") {
            assert!(stderr.contains("re-pack"), "{what}: says what to do: {stderr}");
        }
        let served = coldstart().arg("serve").arg(&bundle).output().unwrap();
        assert_eq!(served.status.code(), Some(2), "{what}: serve refuses it too");
    }
}

/// `coldstart mount BUNDLE ROOT/mnt --cache-dir ROOT/cache`, and the mount point (created).
fn mount_cmd(root: &Path, bundle: &Path) -> (Command, PathBuf) {
    let mnt = root.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut cmd = coldstart();
    cmd.arg("mount").arg(bundle).arg(&mnt).arg("--cache-dir").arg(root.join("cache"));
    (cmd, mnt)
}

/// A bundle of one file, `x`: `content`.
fn one_file_bundle(root: &Path) -> PathBuf {
    std::fs::create_dir(root.join("app")).unwrap();
    std::fs::write(root.join("app/x"), b"content").unwrap();
    pack(root, "bundle", None)
}

/// `coldstart mount` of [`one_file_bundle`] as a child with the stderr given, once `x` reads
/// back through the mount; and the mount point.
fn mounted(root: &Path, stderr: Stdio) -> (KillOnDrop, PathBuf) {
    let (mut cmd, mnt) = mount_cmd(root, &one_file_bundle(root));
    let child = KillOnDrop(cmd.stderr(stderr).spawn().unwrap());
    let t = Instant::now();
    while std::fs::read(mnt.join("x")).ok().as_deref() != Some(b"content".as_slice()) {
        assert!(t.elapsed() < Duration::from_secs(10), "the mount did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, mnt)
}

#[test]
fn mount_refuses_a_non_empty_mount_point() {
    let d = Scratch::new();
    let (mut cmd, mnt) = mount_cmd(d.path(), &one_file_bundle(d.path()));
    std::fs::write(mnt.join("file"), b"").unwrap();
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
}

#[test]
fn mount_unmounts_on_ctrl_c_and_reports() {
    let d = Scratch::new();
    let (mut child, mnt) = mounted(d.path(), Stdio::piped());
    common::signal(child.0.id(), libc::SIGINT);
    let status = child.0.wait().unwrap();
    // Ended by SIGINT, as every command a signal ends: 128 + 2.
    assert_eq!(status.code(), Some(130), "{status}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
    // The default strategy, auto, says what it chose; the report follows.
    assert!(stderr.contains("auto chose") && stderr.contains(": fetched"), "{stderr}");
    assert!(std::fs::read_dir(&mnt).unwrap().next().is_none(), "unmounted");
}

#[test]
fn a_killed_mount_leaves_no_mount_behind() {
    let d = Scratch::new();
    let (mut child, _mnt) = mounted(d.path(), Stdio::null());
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    // The mount's watchdog notices the death and unmounts.
    let t = Instant::now();
    while !mounts_under(d.path()).is_empty() {
        assert!(t.elapsed() < Duration::from_secs(5), "still mounted after the owner died");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A program about the size of the paper's applications (about 1 MB): `bin/app` linked to
/// `lib/libbig.so`, whose 1 MB table is read sparsely. Workload `a` and `b` touch overlapping
/// but different pages, so a hot set profiled on one is measured on the other.
fn build_bench_program(root: &Path) {
    let src = root.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(root.join("app/bin")).unwrap();
    std::fs::create_dir_all(root.join("app/lib")).unwrap();
    let mut table = String::from("const unsigned char big_table[1048576] = {");
    for i in 0..1_048_576u32 {
        table.push_str(&format!("{},", (i.wrapping_mul(2654435761) >> 24) & 0xff));
    }
    table.push_str("};\n");
    std::fs::write(src.join("big.c"), table).unwrap();
    std::fs::write(src.join("app.c"), include_str!("fixtures/two-workloads.c")).unwrap();
    shared_library(root, "big.c", "libbig.so", &[]);
    executable(root, "app.c", "big", "app");
}

/// Prints a Markdown table: every strategy on a few of the paper's links, profiled on
/// workload `a`, measured on workload `b`, against the bound of Eq. 1. Run with
/// `cargo test -p coldstart --test network -- --ignored --nocapture network_start_benchmark`.
#[test]
#[ignore = "benchmark: about a minute on emulated slow links"]
fn network_start_benchmark() {
    let d = Scratch::new();
    build_bench_program(d.path());
    let app = d.path().join("app/bin/app");
    let local = check(&Command::new(&app).arg("b").output().unwrap());
    let t = Instant::now();
    for _ in 0..20 {
        check(&Command::new(&app).arg("b").output().unwrap());
    }
    let local_secs = t.elapsed().as_secs_f64() / 20.0;
    let plain = pack(d.path(), "bundle0", None);
    let hot_a = d.path().join("hot-a.json");
    let hot_b = d.path().join("hot-b.json");
    for (w, hot) in [("a", &hot_a), ("b", &hot_b)] {
        let out = coldstart()
            .args(["run", plain.to_str().unwrap(), "--strategy", "paged", "--cache-dir"])
            .arg(d.path().join(format!("cache-rec-{w}")))
            .args(["--record", hot.to_str().unwrap(), "--", "{root}/bin/app", w])
            .output()
            .unwrap();
        check(&out);
    }
    let used: u64 = serde_json::from_slice::<serde_json::Value>(&std::fs::read(&hot_b).unwrap())
        .unwrap()["touches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["length"].as_u64().unwrap())
        .sum();
    let bundle = pack(d.path(), "bundle", Some(&hot_a));
    let total: u64 = walk_size(&d.path().join("app"));
    println!(
        "\nprogram {total} bytes; workload b uses {used} bytes; local start {:.1} ms",
        local_secs * 1e3
    );
    println!("\n| link | strategy | start (s) | before start (s) | waiting on misses (s) | bytes fetched | requests | Eq. 1 bound (s) | vs original |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for link in ["1mbit/100ms", "3mbit/50ms"] {
        let (_server, url) = serve(&bundle, &["--link", link]);
        let parsed: coldstart_serve::Link = link.parse().unwrap();
        let bound =
            used as f64 * 8.0 / parsed.bits_per_second + parsed.latency.as_secs_f64() + local_secs;
        let mut original = None;
        for s in STRATEGIES {
            let cache = d.path().join(format!("cache-{}-{s}", link.replace('/', "-")));
            let t = Instant::now();
            let out = coldstart()
                .args(["run", &url, "--strategy", s, "--json", "--cache-dir"])
                .arg(&cache)
                .args(["--", "{root}/bin/app", "b"])
                .output()
                .unwrap();
            let secs = t.elapsed().as_secs_f64();
            assert_eq!(check(&out), local);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let report: serde_json::Value =
                serde_json::from_str(&stderr[stderr.find('{').unwrap()..]).unwrap();
            let original_secs = *original.get_or_insert(secs);
            println!(
                "| {link} | {s} | {secs:.2} | {:.2} | {:.2} | {} | {} | {bound:.2} | {:+.0}% |",
                report["prefetch_ms"].as_f64().unwrap() / 1e3,
                report["miss_wait_total_ms"].as_f64().unwrap() / 1e3,
                report["bytes_fetched"],
                report["requests"],
                (secs / original_secs - 1.0) * 100.0
            );
        }
    }
}

fn walk_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.path().symlink_metadata().unwrap();
            if m.is_dir() {
                walk_size(&e.path())
            } else {
                m.len()
            }
        })
        .sum()
}

#[test]
fn the_sample_program_runs_from_the_mount_profiled_on_one_workload() {
    use coldstart_sample::{build, Config, Size};
    let d = Scratch::new();
    let dir = d.path().join("app");
    build(&Config::for_size(Size::Small, 7), &dir).unwrap();
    let local = |w: &str| {
        check(&Command::new(dir.join("sample")).args(["--workload", w]).output().unwrap())
    };
    let local_b = local("b");
    assert!(local_b.contains("ready"), "{local_b}");

    // Profile workload a by recording a paged start, pack with it, measure workload b.
    let plain = pack(d.path(), "bundle0", None);
    let hot = d.path().join("hot-a.json");
    let out = coldstart()
        .args(["run", plain.to_str().unwrap(), "--strategy", "paged", "--cache-dir"])
        .arg(d.path().join("cache-rec"))
        .args(["--record", hot.to_str().unwrap(), "--", "{root}/sample", "--workload", "a"])
        .output()
        .unwrap();
    assert_eq!(check(&out), local("a"));
    let bundle = pack(d.path(), "bundle", Some(&hot));
    let (_server, url) = serve(&bundle, &[]);
    for s in STRATEGIES {
        let out = coldstart()
            .args(["run", &url, "--strategy", s, "--cache-dir"])
            .arg(d.path().join(format!("cache-{s}")))
            .args(["--", "{root}/sample", "--workload", "b"])
            .output()
            .unwrap();
        assert_eq!(check(&out), local_b, "{s}");
    }
}

/// The pages of a hot list, per file, each once.
fn pages_of(hot: &Path) -> std::collections::BTreeSet<(String, u64)> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(hot).unwrap()).unwrap();
    let mut pages = std::collections::BTreeSet::new();
    for t in v["touches"].as_array().unwrap() {
        let (offset, length) = (t["offset"].as_u64().unwrap(), t["length"].as_u64().unwrap());
        for p in offset / 4096..(offset + length).div_ceil(4096) {
            pages.insert((t["path"].as_str().unwrap().to_owned(), p));
        }
    }
    pages
}

#[test]
fn a_recorded_start_is_page_exact_and_the_same_start_then_takes_one_request() {
    let (d, local) = built_program();
    let (bundle, _) = recorded_bundle(d.path(), "bundle", &[], &local);
    // With the default read-ahead the record is pages, not the bundle's 16 KiB chunks: every
    // touch starts on a page and is whole pages (but at a file's end).
    let record = d.path().join("bundle-hot.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let sizes: std::collections::HashMap<&str, u64> =
        [("bin/hello", 0), ("lib/libgreet.so.1", 0), ("share/data.bin", 400_000)].into();
    let touches = v["touches"].as_array().unwrap();
    assert!(!touches.is_empty());
    for t in touches {
        let (offset, length) = (t["offset"].as_u64().unwrap(), t["length"].as_u64().unwrap());
        assert_eq!(offset % 4096, 0, "{t}");
        let at_end = sizes.get(t["path"].as_str().unwrap()).is_some_and(|&s| offset + length == s);
        assert!(length % 4096 == 0 || at_end || t["path"] != "share/data.bin", "{t}");
    }
    // The hot set is exactly those pages: the manifest's hot pieces add up to them.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["version"], 4);
    let hot_bytes = manifest["hot"]["size"].as_u64().unwrap();
    let recorded: u64 = pages_of(&record)
        .iter()
        .map(|(p, page)| {
            let size = std::fs::metadata(d.path().join("app").join(p)).unwrap().len();
            (size - page * 4096).min(4096)
        })
        .sum();
    assert_eq!(hot_bytes, recorded);
    // The same start over the network: the start object, one request, nothing else.
    let (_server, url) = serve(&bundle, &[]);
    let start = std::fs::metadata(bundle.join("start")).unwrap().len();
    let out = run_remote(&url, "reordered-paged", &d.path().join("cache-again"), &["--json"]);
    assert_eq!(check(&out), local);
    let r = report_of(&out);
    assert_eq!((r["requests"].as_u64(), r["bytes_fetched"].as_u64()), (Some(1), Some(start)));
    assert_eq!(r["readahead"], 4096);
}

#[test]
fn the_read_ahead_is_a_page_while_reads_may_fetch() {
    let (d, local) = built_program();
    let bundle = pack(d.path(), "bundle", None);
    let url = bundle.display().to_string();
    let cache = d.path().join("cache");
    for (strategy, readahead) in [("original", 131072), ("stream", 131072), ("paged", 131072)] {
        // `original` fetched everything: from then on every chunk is cached.
        let out = run_remote(&url, strategy, &cache, &["--json"]);
        assert_eq!(check(&out), local);
        assert_eq!(report_of(&out)["readahead"], readahead, "{strategy}, all cached");
    }
    let out = run_remote(&url, "stream", &d.path().join("cache-empty"), &["--json"]);
    assert_eq!(report_of(&out)["readahead"], 4096);
    let out = run_remote(&url, "stream", &cache, &["--json", "--readahead", "64k"]);
    assert_eq!(report_of(&out)["readahead"], 65536, "--readahead overrides");
}

#[test]
fn the_mount_shows_each_files_mode_time_and_link_as_packed() {
    use std::os::unix::fs::MetadataExt;
    let d = Scratch::new();
    build_program(d.path());
    let when = std::time::UNIX_EPOCH + Duration::new(1_500_000_000, 987_654_321);
    std::fs::File::options()
        .write(true)
        .open(d.path().join("app/share/data.bin"))
        .unwrap()
        .set_modified(when)
        .unwrap();
    let bundle = pack(d.path(), "bundle", None);
    let (mut cmd, mnt) = mount_cmd(d.path(), &bundle);
    let mut child = KillOnDrop(cmd.stderr(Stdio::null()).spawn().unwrap());
    let t = Instant::now();
    while !mnt.join("share").exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "the mount did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in ["bin", "bin/hello", "lib/libgreet.so.1", "lib/libgreet.so", "share/data.bin"] {
        let local = std::fs::symlink_metadata(d.path().join("app").join(p)).unwrap();
        let mounted = std::fs::symlink_metadata(mnt.join(p)).unwrap();
        assert_eq!(
            (mounted.mtime(), mounted.mtime_nsec()),
            (local.mtime(), local.mtime_nsec()),
            "{p}"
        );
        assert_eq!(mounted.mode() & 0o7777, local.mode() & 0o7777, "{p}");
        assert_eq!(mounted.file_type().is_symlink(), local.file_type().is_symlink(), "{p}");
    }
    assert_eq!(
        std::fs::read_link(mnt.join("lib/libgreet.so")).unwrap(),
        Path::new("libgreet.so.1")
    );
    let data = std::fs::symlink_metadata(mnt.join("share/data.bin")).unwrap();
    assert_eq!((data.mtime(), data.mtime_nsec()), (1_500_000_000, 987_654_321));
    // It unmounts on SIGINT.
    common::signal(child.0.id(), libc::SIGINT);
    assert_eq!(child.0.wait().unwrap().code(), Some(130));
}

#[test]
fn python_uses_its_pyc_from_the_mount_instead_of_compiling_again() {
    let d = Scratch::new();
    let python = Path::new("/usr/bin/python3");
    let app = d.path().join("app");
    std::fs::create_dir_all(app.join("pkg")).unwrap();
    std::fs::write(app.join("pkg/__init__.py"), "from .mod import VALUE\n").unwrap();
    std::fs::write(app.join("pkg/mod.py"), "VALUE = 'from the bundle'\n").unwrap();
    check(
        &Command::new(python)
            .args(["-m", "compileall", "-q"])
            .arg(app.join("pkg"))
            .output()
            .unwrap(),
    );
    let bundle = pack(d.path(), "bundle", None);
    let out = coldstart()
        .args(["run", bundle.to_str().unwrap(), "--cache-dir"])
        .arg(d.path().join("cache"))
        .args(["--", "/usr/bin/python3", "-v", "-c"])
        .arg("import sys; sys.path.insert(0, '{root}'); import pkg; print(pkg.VALUE)")
        .output()
        .unwrap();
    assert_eq!(check(&out), "from the bundle\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // `-v` says "code object from ...pyc" for a .pyc it used, "bytecode is stale" when the
    // source's time (or size) does not match what the .pyc was compiled from.
    let used = stderr
        .lines()
        .filter(|l| l.contains("code object from") && l.contains("/pkg/__pycache__/"))
        .count();
    assert_eq!(used, 2, "both modules from their .pyc: {stderr}");
    assert!(!stderr.contains("bytecode is stale"), "{stderr}");
    assert!(!stderr.contains("read nothing from the bundle"), "{stderr}");
}

#[test]
fn run_warns_when_the_command_read_nothing_from_the_bundle() {
    let d = Scratch::new();
    let bundle = one_file_bundle(d.path());
    let out = coldstart()
        .args(["run", bundle.to_str().unwrap(), "--cache-dir"])
        .arg(d.path().join("cache"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    check(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`/bin/true` read nothing from the bundle"), "{stderr}");
    assert!(stderr.contains("{root}/"), "{stderr}");
    let out = coldstart()
        .args(["run", bundle.to_str().unwrap(), "--cache-dir"])
        .arg(d.path().join("cache"))
        .args(["--", "/bin/cat", "{root}/x"])
        .output()
        .unwrap();
    assert_eq!(check(&out), "content");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("read nothing"));
}

#[test]
fn a_fully_cached_file_is_handed_to_the_kernel_and_read_without_the_mount() {
    if !require_root("FUSE passthrough registers its backing files with CAP_SYS_ADMIN") {
        return;
    }
    let (d, local) = built_program();
    let bundle = pack(d.path(), "bundle", None);
    let url = bundle.display().to_string();
    let cache = d.path().join("cache");
    // `original` fetches every file before the program starts: each is then whole in the
    // cache when opened, and handed over.
    let out = run_remote(&url, "original", &cache, &["--json"]);
    assert_eq!(check(&out), local);
    let r = report_of(&out);
    assert_eq!(r["opens"], 3, "bin/hello, lib/libgreet.so.1, share/data.bin: {r:#}");
    assert_eq!(r["passthrough"], 3, "{r:#}");
    assert_eq!((r["cache_hits"].as_u64(), r["misses"].as_u64()), (Some(0), Some(0)), "{r:#}");
    // A later mount reuses the copies; recording reads through the mount instead.
    let out = run_remote(&url, "stream", &cache, &["--json"]);
    assert_eq!(check(&out), local);
    assert_eq!(
        (report_of(&out)["passthrough"].as_u64(), report_of(&out)["cache_hits"].as_u64()),
        (Some(3), Some(0))
    );
    let record = d.path().join("hot.json");
    let out = run_remote(&url, "stream", &cache, &["--json", "--record", record.to_str().unwrap()]);
    assert_eq!(check(&out), local);
    let r = report_of(&out);
    assert_eq!(r["passthrough"], 0, "{r:#}");
    assert!(r["cache_hits"].as_u64().unwrap() > 0, "{r:#}");
    assert!(!pages_of(&record).is_empty());
    // A copy changed behind coldstart's back is not used: it is written again.
    let data = std::fs::read(d.path().join("app/share/data.bin")).unwrap();
    let digest = coldstart_bundle::sha256_hex(&data);
    let copy = cache.join("files").join(&digest.as_str()[..2]).join(digest.as_str());
    let mut bytes = std::fs::read(&copy).unwrap();
    bytes[100] ^= 1;
    std::fs::remove_file(&copy).unwrap();
    std::fs::write(&copy, &bytes).unwrap();
    let out = run_remote(&url, "stream", &cache, &["--json"]);
    assert_eq!(check(&out), local, "the program read the right bytes");
    assert_eq!(std::fs::read(&copy).unwrap(), data);
}

#[test]
fn several_hot_lists_put_each_later_workloads_new_pages_after_the_earlier_ones() {
    let d = Scratch::new();
    let app = d.path().join("app");
    std::fs::create_dir_all(&app).unwrap();
    let data: Vec<u8> =
        (0..10 * 4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(app.join("f"), data).unwrap();
    let list = |name: &str, pages: &[u64]| {
        let touches: Vec<String> = pages
            .iter()
            .map(|p| format!(r#"{{"path": "f", "offset": {}, "length": 4096}}"#, p * 4096))
            .collect();
        let path = d.path().join(name);
        let text = format!(
            r#"{{"format": "coldstart-hot-list", "version": 1, "touches": [{}]}}"#,
            touches.join(", ")
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    let a = list("a.json", &[5, 1]);
    let b = list("b.json", &[1, 8, 3]);
    let bundle = d.path().join("bundle");
    check(
        &coldstart()
            .arg("pack")
            .arg(&app)
            .args(["--hot-list", a.to_str().unwrap(), "--hot-list", b.to_str().unwrap(), "-o"])
            .arg(&bundle)
            .output()
            .unwrap(),
    );
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    let chunks = m["files"][0]["chunks"].as_array().unwrap();
    let hot: Vec<u64> = m["hot"]["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| chunks[r["index"].as_u64().unwrap() as usize]["offset"].as_u64().unwrap() / 4096)
        .collect();
    // a's pages in a's order, then the pages b adds, in b's.
    assert_eq!(hot, vec![5, 1, 8, 3]);
}

#[test]
fn python_with_its_standard_library_from_a_fully_cached_bundle_compiles_no_pyc() {
    let d = Scratch::new();
    // Debian's standard library (its `.pyc` compiled at install), times kept, without the
    // static library and the tests.
    let lib = d.path().join("app/lib");
    std::fs::create_dir_all(&lib).unwrap();
    check(&Command::new("cp").arg("-a").arg("/usr/lib/python3.11").arg(&lib).output().unwrap());
    for skip in ["config-3.11-x86_64-linux-gnu", "test", "dist-packages", "site-packages"] {
        let _ = std::fs::remove_dir_all(lib.join("python3.11").join(skip));
    }
    let bundle = pack(d.path(), "bundle", None);
    let cache = d.path().join("cache");
    let python = |strategy: &str| {
        coldstart()
            .args(["run", bundle.to_str().unwrap(), "--strategy", strategy, "--json"])
            .arg("--cache-dir")
            .arg(&cache)
            .args(["--", "env", "PYTHONHOME={root}", "/usr/bin/python3", "-v", "-S", "-c"])
            .arg("import json, sys; print(json.dumps(sys.prefix.endswith('{root}')))")
            .output()
            .unwrap()
    };
    // `original` fetches every file: the chunk cache then holds the whole bundle.
    assert_eq!(check(&python("original")), "true\n");
    let out = python("stream");
    assert_eq!(check(&out), "true\n");
    let r = report_of(&out);
    // One request, the start object (the manifest: no hot set); no chunk fetched; every file
    // Python opened handed to the kernel whole.
    let start = std::fs::metadata(bundle.join("start")).unwrap().len();
    assert_eq!(
        (r["requests"].as_u64(), r["bytes_fetched"].as_u64()),
        (Some(1), Some(start)),
        "{r:#}"
    );
    assert_eq!(
        (r["misses"].as_u64(), r["background_chunks"].as_u64()),
        (Some(0), Some(0)),
        "{r:#}"
    );
    assert!(r["opens"].as_u64().unwrap() > 10, "{r:#}");
    if common::is_root() {
        assert_eq!(r["passthrough"], r["opens"], "FUSE passthrough needs CAP_SYS_ADMIN: {r:#}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    // `-v` says "code object from ...pyc" for a .pyc it used; "bytecode is stale" when the
    // source's time or size does not match what it was compiled from, "could not create" or
    // "created" when it compiled and tried to write one.
    let from_pyc: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("code object from") && l.contains("/__pycache__/"))
        .collect();
    for module in
        ["encodings/__pycache__/utf_8.", "json/__pycache__/decoder.", "/__pycache__/enum."]
    {
        assert!(from_pyc.iter().any(|l| l.contains(module)), "{module} from its .pyc: {stderr}");
    }
    assert!(from_pyc.iter().all(|l| !l.contains("/usr/lib/python3.11/")), "{stderr}");
    let compiled: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            (l.contains("code object from ") && l.ends_with(".py"))
                || l.contains("bytecode is stale")
                || l.contains("could not create")
                || l.starts_with("# created")
        })
        .collect();
    assert!(compiled.is_empty(), "compiled from source: {compiled:?}");
}
