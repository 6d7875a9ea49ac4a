//! `coldstart pack DIR --profile P`: a page profile of a real start is the hot-set input.
//!
//! A C program with a shared library of its own (clang-19) is profiled with `coldstart profile
//! --pages` (tracefs: root), packed from that profile, served by `coldstart serve` and run from
//! the mount with `--strategy reordered` (FUSE: root). Without root the test says so and passes.

mod common;
use common::{check, require_root, KillOnDrop};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// Lazily unmounts anything left under the directory on drop, and fails the test if there was.
struct NoStaleMounts(PathBuf);

impl Drop for NoStaleMounts {
    fn drop(&mut self) {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let prefix = self.0.canonicalize().unwrap_or_else(|_| self.0.clone());
        let prefix = prefix.display().to_string();
        let stale: Vec<&str> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        for m in &stale {
            let _ = Command::new("fusermount3").args(["-u", "-z", m]).status();
        }
        if !std::thread::panicking() {
            assert!(stale.is_empty(), "stale mounts: {stale:?}");
        }
    }
}

/// `app/bin/hello` calling `app/lib/libgreet.so.1` (through `$ORIGIN/../lib`), which is big
/// enough to span several 16 KiB chunks.
fn build_program(root: &Path) -> PathBuf {
    let app = root.join("app");
    std::fs::create_dir_all(app.join("bin")).unwrap();
    std::fs::create_dir_all(app.join("lib")).unwrap();
    std::fs::write(
        root.join("greet.c"),
        "#define N 60000\nstatic unsigned table[N] = {1, 2, 3};\n\
         unsigned greet_table(void) { unsigned s = 0; for (int i = 0; i < N; i += 1024) s = s * 31 + table[i]; return s; }\n\
         const char *greet(void) { return \"hello from libgreet\"; }\n",
    )
    .unwrap();
    std::fs::write(
        root.join("main.c"),
        "#include <stdio.h>\nconst char *greet(void);\nunsigned greet_table(void);\n\
         int main(void) { printf(\"%s (%u)\\n\", greet(), greet_table()); return 0; }\n",
    )
    .unwrap();
    let cc = |args: &[&str]| {
        check(&Command::new("clang-19").args(args).output().expect("clang-19 is installed"));
    };
    let lib = app.join("lib/libgreet.so.1");
    cc(&[
        "-O1",
        "-shared",
        "-fPIC",
        "-Wl,--build-id",
        "-Wl,-soname,libgreet.so.1",
        root.join("greet.c").to_str().unwrap(),
        "-o",
        lib.to_str().unwrap(),
    ]);
    std::os::unix::fs::symlink("libgreet.so.1", app.join("lib/libgreet.so")).unwrap();
    cc(&[
        "-O1",
        "-Wl,--build-id",
        root.join("main.c").to_str().unwrap(),
        "-L",
        app.join("lib").to_str().unwrap(),
        "-lgreet",
        "-Wl,-rpath,$ORIGIN/../lib",
        "-o",
        app.join("bin/hello").to_str().unwrap(),
    ]);
    app
}

/// The hot set's chunks as (path, index).
fn hot_chunks(bundle: &Path) -> Vec<(String, u64)> {
    let m: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    m["hot"]["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["path"].as_str().unwrap().to_owned(), c["index"].as_u64().unwrap()))
        .collect()
}

/// `coldstart profile --pages` of `app/bin/hello`, written to `dir/p.json`; returns its path.
/// A page profile of `app/bin/hello`, which both tests need to have pages of `app`'s files.
/// When it has none, the failure shows what the profiler said and which files it named: an
/// empty profile, no warning, came in 2 of 65 runs of this file's two tests at once on a busy
/// machine without tracefs mounted beforehand, and in none of 60 runs of one test at a time.
fn page_profile(dir: &Path, app: &Path) -> PathBuf {
    let profile = dir.join("p.json");
    let out = common::profile_to(&["--pages"], &profile, [app.join("bin/hello")]);
    check(&out);
    let p: Value = serde_json::from_slice(&std::fs::read(&profile).unwrap()).unwrap();
    let files = p["pages"]["files"].as_array().unwrap();
    let touched_in_app = p["pages"]["accesses"].as_array().unwrap().iter().any(|a| {
        let file = &files[a["file"].as_u64().unwrap() as usize];
        file["path"].as_str().is_some_and(|f| Path::new(f).starts_with(app))
    });
    assert!(
        touched_in_app,
        "the page profile has no page of a file under {}; its files: {:?}\nstderr: {}",
        app.display(),
        files.iter().map(|f| f["path"].as_str().unwrap_or("?")).collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    profile
}

#[test]
fn a_page_profile_gives_the_hot_set_and_the_bundle_runs_reordered() {
    if !require_root("page profiles (tracefs) and FUSE mounts") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let _mounts = NoStaleMounts(d.path().to_path_buf());
    let app = build_program(d.path()).canonicalize().unwrap();
    let local = check(&Command::new(app.join("bin/hello")).output().unwrap());
    assert!(local.starts_with("hello from libgreet"), "{local}");

    let profile = page_profile(d.path(), &app);

    // The order the profile saw files under app/ first.
    let p: Value = serde_json::from_slice(&std::fs::read(&profile).unwrap()).unwrap();
    let files = p["pages"]["files"].as_array().unwrap();
    let mut profiled_order: Vec<String> = Vec::new();
    let mut outside = std::collections::BTreeSet::new();
    for a in p["pages"]["accesses"].as_array().unwrap() {
        let path = files[a["file"].as_u64().unwrap() as usize]["path"].as_str().unwrap();
        match Path::new(path).strip_prefix(&app) {
            Ok(rel) => {
                let rel = rel.display().to_string();
                if !profiled_order.contains(&rel) {
                    profiled_order.push(rel);
                }
            }
            Err(_) => {
                outside.insert(path.to_owned());
            }
        }
    }
    assert_eq!(profiled_order, ["bin/hello", "lib/libgreet.so.1"], "what start-up touched");
    assert!(!outside.is_empty(), "the profile names system libraries too");
    // Every file of the profile outside app/ (a file named by device and inode only counts
    // once each).
    let outside_files = files
        .iter()
        .filter(|f| Path::new(f["path"].as_str().unwrap()).strip_prefix(&app).is_err())
        .count();

    let bundle = d.path().join("bundle");
    let out = coldstart()
        .arg("pack")
        .arg(&app)
        .args(["--chunk-size", "16k", "--profile"])
        .arg(&profile)
        .arg("-o")
        .arg(&bundle)
        .output()
        .unwrap();
    check(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{outside_files} files outside it ignored")),
        "one summary line for the system libraries: {stderr}\nprofile files: {files:?}"
    );
    assert!(!stderr.contains("warning"), "same build, nothing left out: {stderr}");

    // The hot set names chunks of the executable, then of the library, in first-touch order.
    let hot = hot_chunks(&bundle);
    let mut hot_files: Vec<&str> = Vec::new();
    for (path, _) in &hot {
        if !hot_files.contains(&path.as_str()) {
            hot_files.push(path);
        }
    }
    assert_eq!(hot_files, profiled_order, "hot set {hot:?}");
    assert!(hot.contains(&("bin/hello".into(), 0)), "the ELF header chunk: {hot:?}");

    // The same hot set as packing with the converted hot list through --hot-list.
    let converted = coldstart_bundle::hot_list_from_profiles(
        &app,
        coldstart_bundle::read_profiles(std::slice::from_ref(&profile)).unwrap(),
        &coldstart_bundle::ProfileMapping::default(),
        &coldstart_bundle::RealFiles,
    )
    .unwrap();
    let list = d.path().join("hot.json");
    converted.hot.write(&list).unwrap();
    let bundle2 = d.path().join("bundle2");
    check(
        &coldstart()
            .arg("pack")
            .arg(&app)
            .args(["--chunk-size", "16k", "--hot-list"])
            .arg(&list)
            .arg("-o")
            .arg(&bundle2)
            .output()
            .unwrap(),
    );
    assert_eq!(
        std::fs::read(bundle.join("manifest.json")).unwrap(),
        std::fs::read(bundle2.join("manifest.json")).unwrap()
    );

    // Served and run from the mount with the hot set fetched first: the same output.
    let mut server = coldstart()
        .arg("serve")
        .arg(&bundle)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let _server = KillOnDrop(server);
    let mut url = String::new();
    BufReader::new(stdout).read_line(&mut url).unwrap();
    let url = url.trim();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let out = coldstart()
        .args(["run", url, "--strategy", "reordered", "--cache-dir"])
        .arg(d.path().join("cache"))
        .args(["--", "{root}/bin/hello"])
        .output()
        .unwrap();
    assert_eq!(check(&out), local);
}

#[test]
fn a_rebuilt_library_is_left_out_with_a_warning_and_profile_root_maps_a_copy() {
    if !require_root("page profiles (tracefs)") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let app = build_program(d.path()).canonicalize().unwrap();
    let profile = page_profile(d.path(), &app);

    // A copy elsewhere (plain `cp`: new mtimes, same builds), with the library rebuilt from
    // changed source (another build-id).
    let copy = d.path().join("copy");
    check(&Command::new("cp").arg("-r").arg(&app).arg(&copy).output().unwrap());
    std::fs::remove_file(copy.join("lib/libgreet.so.1")).unwrap();
    let source = std::fs::read_to_string(d.path().join("greet.c")).unwrap();
    std::fs::write(d.path().join("greet2.c"), source.replace("hello from", "hi from")).unwrap();
    check(
        &Command::new("clang-19")
            .args(["-O1", "-shared", "-fPIC", "-Wl,--build-id", "-Wl,-soname,libgreet.so.1"])
            .arg(d.path().join("greet2.c"))
            .arg("-o")
            .arg(copy.join("lib/libgreet.so.1"))
            .output()
            .unwrap(),
    );

    let pack = |root: Option<&Path>, out: &str| {
        let mut cmd = coldstart();
        cmd.arg("pack").arg(&copy).args(["--chunk-size", "16k", "--profile"]).arg(&profile);
        if let Some(r) = root {
            // Relative to the working directory, as people type it.
            cmd.current_dir(d.path()).arg("--profile-root").arg(r);
        }
        let out = cmd.arg("-o").arg(d.path().join(out)).output().unwrap();
        check(&out);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Without --profile-root nothing of the profile lies under the copy: said so.
    let stderr = pack(None, "b0");
    assert!(stderr.contains("--profile-root"), "{stderr}");
    assert!(hot_chunks(&d.path().join("b0")).is_empty());

    let stderr = pack(Some(Path::new("app")), "b1");
    assert!(
        stderr.contains("warning: lib/libgreet.so.1: build-id")
            && stderr.contains("different build"),
        "{stderr}"
    );
    let hot = hot_chunks(&d.path().join("b1"));
    assert!(!hot.is_empty() && hot.iter().all(|(p, _)| p == "bin/hello"), "{hot:?}");

    // An unknown profile version is refused with a usage error naming it.
    let text =
        std::fs::read_to_string(&profile).unwrap().replace("\"version\": 1", "\"version\": 9");
    let future = d.path().join("future.json");
    std::fs::write(&future, text).unwrap();
    let out = coldstart()
        .arg("pack")
        .arg(&copy)
        .arg("--profile")
        .arg(&future)
        .arg("-o")
        .arg(d.path().join("b2"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--profile") && stderr.contains("version 9"), "{stderr}");
    assert!(!d.path().join("b2").exists());
}
