//! Every duration, size, bandwidth and count of the command line is checked against the range
//! its flag accepts before anything runs: out of range is bad input (exit 2) that names the
//! flag and the range, never a panic (exit 101) or a wait without end.

mod common;
use common::faults::{bounded, tools};
use common::{require_root, serve};

use std::process::Command;
use std::time::Duration;

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// A number no duration, size or count of coldstart may be: 2^64 - 1.
const HUGE: &str = "18446744073709551615";

/// `gate --baseline {d}/b.json FLAG VALUE -- true`.
fn gate_with<'a>(flag: &'a str, value: &'a str) -> Vec<&'a str> {
    vec!["gate", "--baseline", "{d}/b.json", flag, value, "--", "true"]
}

/// `experiment {d} -o {d}/e.json FLAG VALUE -- true`.
fn experiment_with<'a>(flag: &'a str, value: &'a str) -> Vec<&'a str> {
    vec!["experiment", "{d}", "-o", "{d}/e.json", flag, value, "--", "true"]
}

/// Every value flag that takes a number, with a value out of its range: the arguments (`{b}`
/// is a bundle directory, `{d}` an empty directory), the flag the error must name and what
/// it must say of the range.
fn cases() -> Vec<(Vec<String>, &'static str, &'static str)> {
    let link = format!("1mbit/{HUGE}s");
    let link = link.as_str();
    let raw: Vec<(Vec<&str>, &str, &str)> = vec![
        // Links: a latency of 2^64 s (the float seconds of a `Duration` panicked).
        (vec!["serve", "{b}", "--link", link], "--link", "0 s to 1 minute"),
        (vec!["run", "{b}", "--link-hint", link, "--", "true"], "--link-hint", "0 s to 1 minute"),
        (vec!["predict", "{b}", "--link-hint", link], "--link-hint", "0 s to 1 minute"),
        (vec!["serve", "{b}", "--link", "1bit/1ms"], "--link", "1 kbit/s to 1 Tbit/s"),
        (experiment_with("--link", link), "--link", "0 s to 1 minute"),
        (experiment_with("--link", "1mbit/1ms:4294967295"), "--link", "1 to 1000"),
        // Timeouts and waits.
        (vec!["measure", "--timeout", HUGE, "--", "true"], "--timeout", "1 ms to 1 day"),
        (gate_with("--timeout", HUGE), "--timeout", "1 ms to 1 day"),
        (
            vec!["profile", "-o", "{d}/p.json", "--timeout", HUGE, "--", "true"],
            "--timeout",
            "0 s to 1 day",
        ),
        (vec!["timeline", "--timeout", HUGE, "--", "true"], "--timeout", "1 ms to 1 day"),
        (
            vec!["prefetch", "record", "-o", "{d}/db", "--timeout", HUGE, "--", "true"],
            "--timeout",
            "0 s to 1 day",
        ),
        (
            vec!["launch", "--prefetch", "{d}/db", "--hold", HUGE, "--", "true"],
            "--hold",
            "0 s to 1 day",
        ),
        (vec!["run", "{b}", "--timeout", HUGE, "--", "true"], "--timeout", "1 ms to 1 day"),
        (vec!["mount", "{b}", "{d}", "--timeout", "0"], "--timeout", "1 ms to 1 day"),
        (vec!["predict", "{b}", "--timeout", "1e400"], "--timeout", "not a duration"),
        (vec!["publish", "{b}", "s3://bucket/x", "--timeout", HUGE], "--timeout", "1 ms to 1 day"),
        (vec!["predict", "{b}", "--local-ms", "1e300"], "--local-ms", "0 to 86400000"),
        // Counts: 0 where nothing would happen (or a wait for ever), 2^64 - 1 everywhere.
        (vec!["run", "{b}", "--connections", "0", "--", "true"], "--connections", "from 1 to 256"),
        (vec!["predict", "{b}", "--connections", HUGE], "--connections", "from 1 to 256"),
        (
            vec!["publish", "{b}", "s3://bucket/x", "--connections", "0"],
            "--connections",
            "from 1 to 256",
        ),
        (vec!["run", "{b}", "--retries", HUGE, "--", "true"], "--retries", "from 0 to 10"),
        (vec!["measure", "--runs", "0", "--", "true"], "--runs", "from 1 to 10000"),
        (vec!["measure", "--warmup", HUGE, "--", "true"], "--warmup", "from 0 to 10000"),
        (gate_with("--batch", "0"), "--batch", "from 1 to 10000"),
        (gate_with("--max-runs", HUGE), "--max-runs", "from 1 to 10000"),
        (gate_with("--page-profiles", HUGE), "--page-profiles", "from 0 to 100"),
        (gate_with("--min-effect", "1e309"), "--min-effect", "0 to 1000"),
        (experiment_with("--runs", "0"), "--runs", "from 1 to 1000"),
        (
            vec!["prefetch", "record", "-o", "{d}/db", "--runs", HUGE, "--", "true"],
            "--runs",
            "from 1 to 10000",
        ),
        (vec!["demo", "--runs", "0"], "--runs", "from 1 to 10000"),
        (
            vec!["launch", "--prefetch", "{d}/db", "--jobs", "0", "--", "true"],
            "--jobs",
            "from 1 to 64",
        ),
        (vec!["sample", "-o", "{d}/s", "--functions", HUGE], "--functions", "from 40 to 1000000"),
        // Sizes and rates.
        (vec!["run", "{b}", "--min-rate", "0", "--", "true"], "--min-rate", "1 B to 1 GiB"),
        (vec!["pack", "{d}", "-o", "{d}/x", "--chunk-size", "1g"], "--chunk-size", "1 B to 64 MiB"),
        (experiment_with("--chunk-size", "0"), "--chunk-size", "1 B to 64 MiB"),
        (vec!["analyze", "/usr/bin/true", "--page-size", "0"], "--page-size", "512 B to 1 GiB"),
        (vec!["order", "{d}/p.json", "--readahead", "99999999g"], "--readahead", "0 B to 1 GiB"),
        (
            vec!["verify", "/usr/bin/true", "--order", "{d}/o", "--page-size", "1t"],
            "--page-size",
            "not a size",
        ),
        (
            vec!["launch", "--prefetch", "{d}/db", "--gap", "2g", "--", "true"],
            "--gap",
            "0 B to 1 GiB",
        ),
        (
            vec!["measure", "--storage", "custom:readahead=1g", "--", "true"],
            "--storage",
            "1 B to 256 MiB",
        ),
    ];
    raw.into_iter()
        .map(|(args, flag, range)| (args.iter().map(|a| a.to_string()).collect(), flag, range))
        .collect()
}

#[test]
fn every_number_of_the_command_line_out_of_range_is_bad_input_naming_flag_and_range() {
    let d = tempfile::tempdir().unwrap();
    let bundle = d.path().join("bundle");
    std::fs::create_dir(&bundle).unwrap();
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let mut failed = Vec::new();
    for (args, flag, range) in cases() {
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                a.replace("{b}", &bundle.display().to_string())
                    .replace("{d}", &empty.display().to_string())
            })
            .collect();
        let what = args.join(" ");
        let (out, _) = bounded(coldstart().args(&args), Duration::from_secs(10));
        let Some(out) = out else {
            failed.push(format!("{what}: still running after 10 s"));
            continue;
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        if code != Some(2) || !stderr.contains(flag) || !stderr.contains(range) {
            failed.push(format!(
                "{what}: exit {code:?}, wanted 2 naming {flag} and `{range}`: {stderr}"
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// `run --connections 1` (what 0 was taken as) with `--strategy auto` choosing `original`:
/// the start object's request held the one connection while `original` waited for it, and
/// the run never ended.
#[test]
fn run_with_one_connection_ends_when_auto_chooses_original() {
    if !require_root("FUSE") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let t = tools(d.path());
    // Without a hot set, on a fast link, `auto` downloads the files whole.
    let bundle = d.path().join("whole");
    let out = coldstart().arg("pack").arg(&t.app).arg("-o").arg(&bundle).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (_server, url) = serve(&bundle, &[]);
    let report = d.path().join("report.json");
    let mut cmd = coldstart();
    cmd.env("TMPDIR", d.path())
        .args(["run", &url, "--connections", "1", "--link-hint", "10gbit/1ms", "--cache-dir"])
        .arg(d.path().join("cache"))
        .arg("--export-json")
        .arg(&report)
        .args(["--", "{root}/bin/sum", "{root}/data.bin"]);
    let (out, took) = bounded(&mut cmd, Duration::from_secs(30));
    let out = out.unwrap_or_else(|| panic!("still running after {took:?}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&t.data_sha256));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["report"]["strategy"], "original", "auto chose another: {r}");
}

/// A URL whose port no socket can have (`:99999`, `:0`) is bad input, said before anything is
/// tried: `run` connected (to port 80) and exited 70.
#[test]
fn a_url_whose_port_no_socket_can_have_is_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let mnt = d.path().display().to_string();
    for url in ["http://127.0.0.1:99999/app/", "http://127.0.0.1:0/app/"] {
        for args in [vec!["run", url, "--", "true"], vec!["predict", url], vec!["mount", url, &mnt]]
        {
            let what = args.join(" ");
            let mut cmd = coldstart();
            cmd.env("TMPDIR", d.path()).args(&args);
            let (out, _) = bounded(&mut cmd, Duration::from_secs(30));
            let out = out.unwrap_or_else(|| panic!("{what}: still running after 30 s"));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
            assert!(stderr.contains(&format!("bad bundle URL `{url}`")), "{what}: {stderr}");
            assert!(!stderr.contains("connect"), "{what}: {stderr}");
        }
    }
}
