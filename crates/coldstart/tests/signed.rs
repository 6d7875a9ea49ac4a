//! Signed bundles end to end: `coldstart key new`, `pack --sign`, and `run`/`predict` with
//! `--trust` against a bundle served by `coldstart serve` (started here): a bundle whose
//! signature does not verify, is by another key or is missing is refused (exit code 4, naming
//! the signature's URL and the key) before the program runs; a signed bundle runs with or
//! without `--trust`.
//!
//! The runs that mount need root (FUSE), as CI has; the refusals happen before any mount.

mod common;
use common::{check, require_root, serve};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// A program's tree of two files, `bin/x` and `share/data`.
fn tree(root: &Path) -> PathBuf {
    let app = root.join("app");
    std::fs::create_dir_all(app.join("bin")).unwrap();
    std::fs::create_dir_all(app.join("share")).unwrap();
    std::fs::write(app.join("bin/x"), b"the publisher's bytes\n").unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(app.join("share/data"), data).unwrap();
    app
}

/// `coldstart key new -o ROOT/NAME`: the private key and the public key.
fn key(root: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = root.join(name);
    check(&coldstart().args(["key", "new", "-o"]).arg(&private).output().unwrap());
    (private.clone(), root.join(format!("{name}.pub")))
}

/// `coldstart pack` of the tree, with a hot list of `bin/x` (so the start object has a hot
/// part), signed with `sign` if given.
fn pack(root: &Path, out: &str, sign: Option<&Path>) -> PathBuf {
    let hot = root.join("hot.json");
    std::fs::write(
        &hot,
        r#"{"format":"coldstart-hot-list","version":1,"touches":[{"path":"bin/x","offset":0,"length":22}]}"#,
    )
    .unwrap();
    let bundle = root.join(out);
    let mut cmd = coldstart();
    cmd.arg("pack").arg(root.join("app")).arg("--hot-list").arg(&hot).arg("-o").arg(&bundle);
    if let Some(k) = sign {
        cmd.arg("--sign").arg(k);
    }
    let said = check(&cmd.output().unwrap());
    assert_eq!(said.contains("signed with"), sign.is_some(), "{said}");
    bundle
}

/// `coldstart run URL --strategy S [--trust K]... -- cat {root}/bin/x`.
fn run(root: &Path, url: &str, strategy: &str, trust: &[&Path]) -> Output {
    let mut cmd = coldstart();
    cmd.args(["run", url, "--strategy", strategy, "--cache-dir"]).arg(root.join("cache"));
    for k in trust {
        cmd.arg("--trust").arg(k);
    }
    cmd.args(["--", "cat", "{root}/bin/x"]).output().unwrap()
}

/// Asserts `out` is a refusal under `--trust`: exit code 4, a message naming the signature's
/// URL and saying `why`, and nothing of the program's output.
fn refused(out: &Output, url: &str, why: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains(&format!("{url}signature.json")), "names the signature: {stderr}");
    assert!(stderr.contains(why), "says {why:?}: {stderr}");
    assert!(out.stdout.is_empty(), "the program did not run: {:?}", out.stdout);
    stderr
}

/// Rewrites every copy of the manifest a client may read (manifest.json, its zstd copy and
/// the start object), keeping them consistent with each other: only the signature can tell.
fn tamper(bundle: &Path, edit: impl Fn(&str) -> String) {
    let path = bundle.join("manifest.json");
    let good = std::fs::read_to_string(&path).unwrap();
    let bad = edit(&good);
    assert_ne!(bad, good, "the fixture changed");
    let hot = hot_part(bundle, &good);
    let (bad, start) = coldstart_bundle::start::rebuild(bad.as_bytes(), &hot).unwrap();
    coldstart_bundle::Manifest::parse(&bad).expect("still a valid manifest");
    std::fs::write(&path, &bad).unwrap();
    let zst = coldstart_bundle::start::compress_manifest(&bad);
    std::fs::write(bundle.join("manifest.json.zst"), zst).unwrap();
    std::fs::write(bundle.join("start"), start).unwrap();
}

/// The hot part of `bundle`'s start object, whose manifest is `json`.
fn hot_part(bundle: &Path, json: &str) -> Vec<u8> {
    let m = coldstart_bundle::Manifest::parse(json.as_bytes()).unwrap();
    let start = std::fs::read(bundle.join("start")).unwrap();
    start[m.hot.offset as usize..].to_vec()
}

#[test]
fn a_new_private_key_is_mode_0600_and_never_replaced() {
    let d = tempfile::tempdir().unwrap();
    let (private, public) = key(d.path(), "k");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(std::fs::read_to_string(&public).unwrap().starts_with("-----BEGIN PUBLIC KEY-----"));
    let before = std::fs::read(&private).unwrap();
    let out = coldstart().args(["key", "new", "-o"]).arg(&private).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    assert_eq!(std::fs::read(&private).unwrap(), before);
    // A private key given as a trusted one is named as the mistake it is.
    tree(d.path());
    let bundle = pack(d.path(), "b", Some(&private));
    let out = run(d.path(), bundle.to_str().unwrap(), "stream", &[&private]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("private key"));
}

#[test]
fn a_tampered_manifest_under_trust_is_refused_before_the_program_runs() {
    let d = tempfile::tempdir().unwrap();
    tree(d.path());
    let (private, public) = key(d.path(), "k");
    let bundle = pack(d.path(), "bundle", Some(&private));
    // The origin serves bin/x with another mode: a valid manifest, not the one signed.
    tamper(&bundle, |m| m.replacen("\"mode\": 420", "\"mode\": 511", 1));
    let (_server, url) = serve(&bundle, &[]);
    // From the start object (stream) and from the compressed manifest (original).
    for strategy in ["stream", "original"] {
        let out = run(d.path(), &url, strategy, &[&public]);
        let stderr = refused(&out, &url, "not the one signed");
        assert!(stderr.contains(&public.display().to_string()), "names the key: {stderr}");
    }
    let out = coldstart()
        .args(["predict", &url, "--link-hint", "20mbit/40ms", "--trust"])
        .arg(&public)
        .output()
        .unwrap();
    refused(&out, &url, "not the one signed");
}

#[test]
fn a_bundle_signed_with_another_key_is_refused() {
    let d = tempfile::tempdir().unwrap();
    tree(d.path());
    let (other, _) = key(d.path(), "other");
    let (_, public) = key(d.path(), "mine");
    let bundle = pack(d.path(), "bundle", Some(&other));
    let (_server, url) = serve(&bundle, &[]);
    let out = run(d.path(), &url, "stream", &[&public]);
    let stderr = refused(&out, &url, "none of the trusted keys");
    assert!(stderr.contains(&public.display().to_string()), "names the key: {stderr}");
}

#[test]
fn an_unsigned_bundle_under_trust_is_refused() {
    let d = tempfile::tempdir().unwrap();
    tree(d.path());
    let (_, public) = key(d.path(), "k");
    let bundle = pack(d.path(), "bundle", None);
    let (_server, url) = serve(&bundle, &[]);
    for strategy in ["stream", "paged"] {
        let out = run(d.path(), &url, strategy, &[&public]);
        refused(&out, &url, "not signed");
    }
}

#[test]
fn an_altered_signature_file_is_refused() {
    let d = tempfile::tempdir().unwrap();
    tree(d.path());
    let (private, public) = key(d.path(), "k");
    let bundle = pack(d.path(), "bundle", Some(&private));
    // Claim the digest of a tampered manifest, keeping the signature.
    tamper(&bundle, |m| m.replacen("\"mode\": 420", "\"mode\": 511", 1));
    let sig_path = bundle.join("signature.json");
    let mut sig: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&sig_path).unwrap()).unwrap();
    let digest =
        coldstart_bundle::sign::digest(&std::fs::read(bundle.join("manifest.json")).unwrap());
    sig["manifest_sha256"] = digest.iter().map(|b| format!("{b:02x}")).collect::<String>().into();
    std::fs::write(&sig_path, serde_json::to_vec(&sig).unwrap()).unwrap();
    let (_server, url) = serve(&bundle, &[]);
    let out = run(d.path(), &url, "stream", &[&public]);
    refused(&out, &url, "does not verify");
}

#[test]
fn a_signed_bundle_runs_with_its_key_among_several_and_without_trust() {
    if !require_root("FUSE mounts") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    tree(d.path());
    let (old, old_public) = key(d.path(), "old");
    let (_, new_public) = key(d.path(), "new");
    let bundle = pack(d.path(), "bundle", Some(&old));
    let (_server, url) = serve(&bundle, &[]);
    // Rotating: readers trust the new key and the old one until every bundle is re-signed.
    for strategy in ["stream", "original"] {
        let out = run(d.path(), &url, strategy, &[&new_public, &old_public]);
        assert_eq!(check(&out), "the publisher's bytes\n");
    }
    // Without --trust a signed bundle mounts as any other, and nothing is said of it.
    let out = run(d.path(), &url, "stream", &[]);
    assert_eq!(check(&out), "the publisher's bytes\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("sign"), "{stderr}");
}
