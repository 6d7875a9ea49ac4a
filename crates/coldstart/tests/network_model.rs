//! `coldstart predict` and `--strategy auto` on links emulated by `coldstart serve --link`:
//! the model's choice where the answer is obvious (not its timings, which belong in the
//! benchmarks), and `run --strategy auto` recording its choice in the report.
//!
//! The `run` test needs root (FUSE); every server started here is stopped by a guard.

mod common;
use common::{check, require_root, serve};

use std::path::Path;
use std::process::Command;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// Bytes that do not repeat (so that chunks do not deduplicate).
fn noise(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// `coldstart predict URL --json` with an empty cache: the chosen strategy and the JSON.
fn predict(url: &str, cache: &Path) -> (String, serde_json::Value) {
    let out =
        coldstart().args(["predict", url, "--json", "--cache-dir"]).arg(cache).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&check(&out)).unwrap();
    (v["chosen"].as_str().unwrap().to_owned(), v)
}

#[test]
fn tiny_bundle_without_a_hot_set_on_a_fast_link_predicts_original() {
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(app.join("data"), noise(40_000, 1)).unwrap();
    let bundle = dir.path().join("bundle");
    check(
        &coldstart()
            .arg("pack")
            .arg(&app)
            .args(["--chunk-size", "4k", "-o"])
            .arg(&bundle)
            .output()
            .unwrap(),
    );
    // Ten chunks on demand take three round trips (four in flight); the file whole, one.
    let (_server, url) = serve(&bundle, &["--link", "100mbit/20ms"]);
    let (chosen, v) = predict(&url, &dir.path().join("cache"));
    assert_eq!(chosen, "original", "{v:#}");
    assert_eq!(v["link"]["latency_estimated"], true);
    assert_eq!(v["link"]["bandwidth_estimated"], true);
    let lat = v["link"]["latency_ms"].as_f64().unwrap();
    assert!((15.0..200.0).contains(&lat), "latency {lat} ms measured on a 20 ms link");
}

/// A 2 MB program whose start-up reads one 64 KiB chunk, packed with that chunk as its hot set.
fn big_bundle_small_hot_set(dir: &Path) -> std::path::PathBuf {
    let app = dir.join("app");
    std::fs::create_dir_all(&app).unwrap();
    for i in 0..4 {
        std::fs::write(app.join(format!("lib{i}.so")), noise(500_000, i + 2)).unwrap();
    }
    let hot = dir.join("hot.json");
    std::fs::write(
        &hot,
        r#"{"format": "coldstart-hot-list", "version": 1, "touches": [{"path": "lib2.so", "offset": 0, "length": 65536}]}"#,
    )
    .unwrap();
    let bundle = dir.join("bundle");
    let out = coldstart()
        .arg("pack")
        .arg(&app)
        .arg("--hot-list")
        .arg(&hot)
        .arg("-o")
        .arg(&bundle)
        .output()
        .unwrap();
    check(&out);
    bundle
}

#[test]
fn big_bundle_with_a_small_hot_set_on_a_slow_far_link_predicts_a_hot_set_strategy() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = big_bundle_small_hot_set(dir.path());
    let (_server, url) = serve(&bundle, &["--link", "2mbit/150ms"]);
    let (chosen, v) = predict(&url, &dir.path().join("cache"));
    assert!(["stream", "reordered-paged"].contains(&chosen.as_str()), "{v:#}");
    // And given the link, nothing is measured.
    let out = coldstart()
        .args(["predict", &url, "--link-hint", "2mbit/150ms", "--cache-dir"])
        .arg(dir.path().join("cache"))
        .output()
        .unwrap();
    let table = check(&out);
    assert!(table.contains("(given)") && !table.contains("estimated"), "{table}");
    assert!(table.contains("stream") && table.contains("<- auto"), "{table}");
}

#[test]
fn run_with_strategy_auto_reports_its_choice() {
    if !require_root("FUSE mounts") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bundle = big_bundle_small_hot_set(dir.path());
    let (_server, url) = serve(&bundle, &["--link", "20mbit/40ms"]);
    let out = coldstart()
        .args(["run", &url, "--strategy", "auto", "--json", "--cache-dir"])
        .arg(dir.path().join("cache"))
        .args(["--", "/bin/sh", "-c", "head -c 65536 {root}/lib2.so | wc -c"])
        .output()
        .unwrap();
    assert_eq!(check(&out).trim(), "65536");
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.contains("auto chose")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("estimated") && line.contains("original"), "{line}");
    // The report is the first JSON value on stderr; a line may follow it (a CI run once saw
    // one: "trailing characters"), which is no part of the report. No read may have failed,
    // which is what such a line would say ("reads failed with EIO").
    let json = &err[err.find('{').unwrap()..];
    let mut values = serde_json::Deserializer::from_str(json).into_iter::<serde_json::Value>();
    let report = values.next().unwrap().unwrap();
    let after = &json[values.byte_offset()..];
    assert_eq!(report["errors"], 0, "{report:#}\nafter the report: {after}");
    assert!(!after.contains("EIO") && !after.contains("error"), "after the report: {after}");
    let chosen = report["auto"]["chosen"].as_str().unwrap();
    assert_eq!(report["strategy"], chosen, "{report:#}");
    assert_eq!(report["auto"]["predictions"].as_array().unwrap().len(), 5);
}

/// `coldstart predict URL --json --link-hint LINK` with the chunk cache `cache`.
fn predict_given(url: &str, cache: &Path, link: &str) -> serde_json::Value {
    let out = coldstart()
        .args(["predict", url, "--json", "--link-hint", link, "--cache-dir"])
        .arg(cache)
        .output()
        .unwrap();
    serde_json::from_str(&check(&out)).unwrap()
}

fn ms(v: &serde_json::Value, strategy: &str) -> f64 {
    let p = v["predictions"].as_array().unwrap();
    p.iter().find(|p| p["strategy"] == strategy).unwrap()["ms"].as_f64().unwrap()
}

#[test]
fn reads_outside_the_hot_set_are_kept_and_counted_by_the_next_prediction() {
    if !require_root("FUSE mounts") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bundle = big_bundle_small_hot_set(dir.path());
    let (_server, url) = serve(&bundle, &["--link", "20mbit/40ms"]);
    let cache = dir.path().join("cache");
    let before = predict_given(&url, &cache, "20mbit/100ms");
    assert_eq!(before["held_out"].as_array().unwrap().len(), 0, "{before:#}");
    // The hot chunk, then a page of each 64 KiB chunk of lib0.so, which is not in the hot set.
    let script = "head -c 65536 {root}/lib2.so >/dev/null; for i in 0 17 34 51 68 85 102; \
                  do dd if={root}/lib0.so bs=4096 skip=$i count=1 status=none; done | wc -c";
    let out = coldstart()
        .args(["run", &url, "--strategy", "reordered", "--json", "--cache-dir"])
        .arg(&cache)
        .args(["--", "/bin/sh", "-c", script])
        .output()
        .unwrap();
    assert_eq!(check(&out).trim(), "28672");
    let err = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = serde_json::from_str(&err[err.find('{').unwrap()..]).unwrap();
    let misses = report["held_out_misses"].as_u64().unwrap();
    let bytes = report["held_out_bytes"].as_u64().unwrap();
    let other = report["other_bytes"].as_u64().unwrap();
    assert!(misses >= 1 && bytes >= 65536 && other >= bytes, "{report:#}");
    // The chunks evicted, the history kept: the bundle's shape is as before the start, and
    // each of its misses is one more round trip of the next prediction (the link given), and
    // the bytes it fetched besides the hot request are on the link.
    std::fs::remove_dir_all(cache.join("sha256")).unwrap();
    let after = predict_given(&url, &cache, "20mbit/100ms");
    let held = after["held_out"].as_array().unwrap();
    let reordered = held.iter().find(|h| h["strategy"] == "reordered").unwrap();
    assert_eq!(
        (reordered["misses"].as_f64(), reordered["runs"].as_u64()),
        (Some(misses as f64), Some(1))
    );
    let extra = misses as f64 * 100.0 + other as f64 / 2.5e6 * 1e3;
    let grew = ms(&after, "reordered") - ms(&before, "reordered");
    assert!((grew - extra).abs() < 1e-3, "{grew} ms more, {extra} expected: {after:#}");
    assert_eq!(ms(&after, "original"), ms(&before, "original"));
    assert!(held.iter().all(|h| h["strategy"] != "original"), "{after:#}");
    // The table says what it counted.
    let out = coldstart()
        .args(["predict", &url, "--link-hint", "20mbit/100ms", "--cache-dir"])
        .arg(&cache)
        .output()
        .unwrap();
    let table = check(&out);
    assert!(table.contains(&format!("reordered {misses} (1 start)")), "{table}");
}
