//! Profiling overhead on a program with 20,000 functions, on the benchmark-size sample
//! program, and on Debian's python3, with each tracer (audit, the default, and ptrace).
//!
//! A benchmark, not a test of correctness: it is ignored by default. Run it with a release
//! build for meaningful figures:
//!
//! ```text
//! cargo test --release -p coldstart --test profile_overhead -- --ignored --nocapture --test-threads 1
//! ```

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;

const FUNCTIONS: usize = 20_000;

fn generate(dir: &Path) -> std::path::PathBuf {
    let mut src = String::from("volatile int sink;\n");
    for i in 0..FUNCTIONS {
        src.push_str(&format!(
            "__attribute__((noinline)) int f{i}(int x) {{ sink = x; return x ^ {i}; }}\n"
        ));
    }
    src.push_str("typedef int (*fn_t)(int);\nstatic fn_t table[] = {\n");
    for i in 0..FUNCTIONS {
        src.push_str(&format!("f{i},"));
    }
    src.push_str("};\nint main(void) { int acc = 0; for (unsigned i = 0; i < sizeof table / sizeof *table; i++) acc += table[i](i); return acc == 12345 ? 1 : 0; }\n");
    let c = dir.join("many.c");
    std::fs::write(&c, src).unwrap();
    let out = dir.join("many");
    assert!(Command::new("clang-19")
        .args(["-O1", "-fuse-ld=lld"])
        .arg(&c)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap()
        .success());
    out
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time_plain(cmd: &[&str], runs: usize) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                assert!(Command::new(cmd[0]).args(&cmd[1..]).status().unwrap().code().is_some());
                t.elapsed()
            })
            .collect(),
    )
}

fn time_profiled(dir: &Path, tracer: &str, cmd: &[&str], runs: usize) -> (Duration, u64, usize) {
    let out = dir.join("p.json");
    let mut times = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let st = Command::cargo_bin("coldstart")
            .unwrap()
            .args(["profile", "--tracer", tracer, "-o"])
            .arg(&out)
            .arg("--")
            .args(cmd)
            .output()
            .unwrap();
        times.push(t.elapsed());
        assert!(st.status.code().is_some());
    }
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let functions = p["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["functions"].as_array().unwrap().len())
        .sum();
    (median(times), std::fs::metadata(&out).unwrap().len(), functions)
}

/// Both tracers on `cmd`; returns the functions the audit tracer recorded.
fn report(label: &str, dir: &Path, cmd: &[&str]) -> usize {
    let plain = time_plain(cmd, 7);
    let mut recorded = 0;
    for tracer in ["audit", "ptrace"] {
        let (profiled, size, functions) = time_profiled(dir, tracer, cmd, 5);
        println!(
            "{label}, {tracer}: plain {:.1} ms, profiled {:.1} ms ({:.2}x, +{:.1} ms) for {functions} functions; profile {} KiB",
            plain.as_secs_f64() * 1e3,
            profiled.as_secs_f64() * 1e3,
            profiled.as_secs_f64() / plain.as_secs_f64(),
            (profiled.as_secs_f64() - plain.as_secs_f64()) * 1e3,
            size / 1024
        );
        if tracer == "audit" {
            recorded = functions;
        }
    }
    recorded
}

#[test]
#[ignore = "benchmark (builds a 20,000-function program, ~30 s); run with --ignored --nocapture"]
fn overhead_of_20000_functions_and_python3() {
    let dir = tempfile::tempdir().unwrap();
    let many = generate(dir.path());
    let functions = report("20,000 functions", dir.path(), &[many.to_str().unwrap()]);
    assert!(functions >= FUNCTIONS, "every generated function is recorded");
    report("python3 -c pass", dir.path(), &["/usr/bin/python3", "-c", "pass"]);
}

#[test]
#[ignore = "benchmark (builds the benchmark-size sample, minutes); run with --ignored --nocapture"]
fn overhead_on_the_bench_sample() {
    let dir = std::env::var_os("COLDSTART_BENCH_SAMPLE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("coldstart-bench-sample"));
    let config = coldstart_sample::Config::for_size(coldstart_sample::Size::Bench, 1);
    let sample = coldstart_sample::build_cached(&config, &dir).unwrap();
    let work = tempfile::tempdir().unwrap();
    for w in &sample.workloads {
        let exe = sample.exe();
        let mut cmd = vec![exe.to_str().unwrap()];
        cmd.extend(w.args.iter().map(String::as_str));
        let functions = report(&format!("bench sample, workload {}", w.name), work.path(), &cmd);
        assert!(functions >= w.startup.len());
    }
}
