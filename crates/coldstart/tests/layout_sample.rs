//! End to end on the generated sample program: profile workload a, order, relink with lld
//! through `coldstart link` (verify passes), and check that held-out workload b touches
//! fewer code pages than under the default layout, as `order --evaluate` predicted.

use std::path::{Path, PathBuf};

use assert_cmd::Command as Cli;
use coldstart_sample::Config;

mod common;

fn coldstart() -> Cli {
    Cli::cargo_bin("coldstart").unwrap()
}

/// A directory removed when the test ends, even when it fails.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn touched_pages(binary: &Path, profile: &Path) -> u64 {
    let out = coldstart()
        .arg("analyze")
        .arg(binary)
        .arg("--profile")
        .arg(profile)
        .args(["--readahead", "0", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["utilization"]["code_pages_touched"].as_u64().unwrap()
}

#[test]
fn sample_profiled_on_a_relinked_with_lld_touches_fewer_pages_on_held_out_b() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("layout-sample-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let scratch = Scratch(dir.clone());
    let sample = coldstart_sample::build(&Config::default(), &scratch.0.join("sample"))
        .expect("build the sample");
    let exe = sample.exe();
    let a = dir.join("a.json");
    let b = dir.join("b.json");
    common::sample_profile(&sample, "a", &a);
    common::sample_profile(&sample, "b", &b);

    let default_pages = touched_pages(&exe, &b);
    let order = dir.join("order.txt");
    let eval = common::order_for(&a, &exe)
        .arg("--evaluate")
        .arg(&b)
        .args(["--readahead", "0", "--json", "-o"])
        .arg(&order)
        .output()
        .unwrap();
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let e: serde_json::Value = serde_json::from_slice(&eval.stdout).unwrap();
    let predicted = |layout: &str| {
        e["rows"].as_array().unwrap().iter().find(|r| r["layout"] == layout).unwrap()["cost"]
            ["pages_touched"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(predicted("default"), default_pages);
    let best = e["best"].as_str().unwrap();
    assert!(predicted(best) < default_pages, "{e}");

    // Relink in place through the sample's own Makefile; `link` verifies the result.
    common::link_with(&order, &exe)
        .args(["--", "make", "-s", "-C"])
        .arg(sample.dir.join("src"))
        .args(["-B", "-j2"])
        .assert()
        .success();
    coldstart().arg("verify").arg(&exe).arg("--profile").arg(&a).assert().success();
    let run = std::process::Command::new(&exe).args(["--workload", "b"]).output().unwrap();
    assert!(run.status.success(), "the relinked sample runs");

    // Workload b, profiled again on the relinked build, touches fewer code pages.
    let b2 = dir.join("b-relinked.json");
    common::sample_profile(&sample, "b", &b2);
    let after = touched_pages(&exe, &b2);
    assert!(
        after < default_pages,
        "b touched {after} code pages after relinking, {default_pages} before"
    );
    assert!(after <= predicted(best) + 1, "prediction {} vs {after}", predicted(best));
}
