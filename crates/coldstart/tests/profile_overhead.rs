//! Profiling overhead on a program with 20,000 functions, on the benchmark-size sample
//! program, on Debian's python3, and on two runtimes with a JIT (Node.js, OpenJDK), with each
//! tracer (audit, the default, and ptrace).
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
    coldstart_testkit::compile_c(dir, "many", &src, &["-g0", "-fuse-ld=lld"])
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

/// A profiled run's figures (medians).
struct Profiled {
    /// The whole `coldstart profile` command: start-up under the tracer, then reading the
    /// modules' symbols and writing the profile.
    command: Duration,
    /// The program's own run under the tracer (the profile's `duration_ns`: from its exec
    /// to its exit).
    program: Duration,
    size: u64,
    functions: usize,
}

fn time_profiled(dir: &Path, tracer: &Tracer, cmd: &[&str], runs: usize) -> Profiled {
    let out = dir.join("p.json");
    let mut times = Vec::new();
    let mut programs = Vec::new();
    let mut functions = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let st = Command::cargo_bin("coldstart")
            .unwrap()
            .args(["profile", "--tracer", tracer.tracer, "-o"])
            .arg(&out)
            .arg("--")
            .args(cmd)
            .envs(tracer.env.iter().copied())
            .output()
            .unwrap();
        times.push(t.elapsed());
        assert!(st.status.code().is_some());
        let p: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        programs.push(Duration::from_nanos(p["duration_ns"].as_u64().unwrap()));
        functions = p["modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["functions"].as_array().unwrap().len())
            .sum();
    }
    Profiled {
        command: median(times),
        program: median(programs),
        size: std::fs::metadata(&out).unwrap().len(),
        functions,
    }
}

/// A tracer as benchmarked: `--tracer` and the environment it runs with.
struct Tracer {
    label: &'static str,
    tracer: &'static str,
    env: &'static [(&'static str, &'static str)],
}

const TRACERS: &[Tracer] = &[
    Tracer { label: "audit", tracer: "audit", env: &[] },
    // The audit agent copying text in 4 KiB pages, as it did before huge-page copies.
    Tracer { label: "audit, 4 KiB copies", tracer: "audit", env: &[("COLDSTART_AUDIT_HUGE", "0")] },
    Tracer { label: "ptrace", tracer: "ptrace", env: &[] },
];

/// Both tracers on `cmd`; returns the functions the audit tracer recorded.
fn report(label: &str, dir: &Path, cmd: &[&str]) -> usize {
    let plain = time_plain(cmd, 7);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut recorded = 0;
    for tracer in TRACERS {
        let p = time_profiled(dir, tracer, cmd, 5);
        println!(
            "{label}, {}: plain {:.1} ms; program under the tracer {:.1} ms ({:.2}x, +{:.1} ms); whole command {:.1} ms ({:.2}x, +{:.1} ms); {} functions; profile {} KiB",
            tracer.label,
            ms(plain),
            ms(p.program),
            ms(p.program) / ms(plain),
            ms(p.program) - ms(plain),
            ms(p.command),
            ms(p.command) / ms(plain),
            ms(p.command) - ms(plain),
            p.functions,
            p.size / 1024
        );
        if tracer.label == "audit" {
            recorded = p.functions;
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

#[test]
#[ignore = "benchmark (Node.js and OpenJDK, about a minute); run with --ignored --nocapture"]
fn overhead_on_nodejs_and_openjdk() {
    let dir = tempfile::tempdir().unwrap();
    let node = coldstart_testkit::which("node").expect("node (apt-get install nodejs)");
    let node = node.to_str().unwrap();
    report("node -e 'require(\"http\")'", dir.path(), &[node, "-e", "require(\"http\")"]);
    report("node -e 1", dir.path(), &[node, "-e", "1"]);
    breakdown("node -e 1", &[node, "-e", "1"]);
    let java =
        coldstart_testkit::which("java").expect("java (apt-get install openjdk-17-jre-headless)");
    report("java -version", dir.path(), &[java.to_str().unwrap(), "-version"]);
}

/// Where the audit tracer's time in the program goes: the agent's own timing
/// (`COLDSTART_AUDIT_TIMING`), summed over the modules of each run, medians of 5 runs, with
/// text copied into huge pages (the default) and in 4 KiB pages.
fn breakdown(label: &str, cmd: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let plain = time_plain(cmd, 7);
    println!("{label}: plain {:.1} ms", plain.as_secs_f64() * 1e3);
    let phases = ["symbols_ms", "filter_ms", "mprotect_ms", "populate_ms", "write_ms", "unmap_ms"];
    for (config, huge) in [("huge pages", "1"), ("4 KiB pages", "0")] {
        let mut runs: Vec<Vec<f64>> = Vec::new();
        let mut text_kib = 0.0;
        for i in 0..5 {
            let timing = dir.path().join(format!("timing-{huge}-{i}"));
            let st = Command::cargo_bin("coldstart")
                .unwrap()
                .args(["profile", "--tracer", "audit", "-o"])
                .arg(dir.path().join("p.json"))
                .arg("--")
                .args(cmd)
                .env("COLDSTART_AUDIT_TIMING", &timing)
                .env("COLDSTART_AUDIT_HUGE", huge)
                .output()
                .unwrap();
            assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
            let text = std::fs::read_to_string(&timing).unwrap();
            let field = |line: &str, key: &str| -> f64 {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
                    .map_or(0.0, |v| v.parse().unwrap())
            };
            // Per run: each phase summed over modules, then arming, traps, in the program.
            let mut row = vec![0.0; phases.len() + 4];
            text_kib = 0.0;
            for line in text.lines() {
                if line.starts_with("arm ") {
                    for (k, p) in phases.iter().enumerate() {
                        row[k] += field(line, p);
                    }
                    text_kib += field(line, "text_kib");
                } else if line.starts_with("exit ") && row[phases.len() + 3] == 0.0 {
                    row[phases.len()] = field(line, "arm_ms");
                    row[phases.len() + 1] = field(line, "traps");
                    row[phases.len() + 2] = field(line, "trap_handler_ms");
                    row[phases.len() + 3] = field(line, "since_init_ms");
                }
            }
            runs.push(row);
        }
        let med = |k: usize| {
            let mut v: Vec<f64> = runs.iter().map(|r| r[k]).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let n = phases.len();
        println!(
            "{label}, text in {config}: in the program {:.1} ms, of which arming {:.1} ms for {:.1} MiB of text ({}), {:.0} traps (handler's own time {:.2} ms)",
            med(n + 3),
            med(n),
            text_kib / 1024.0,
            phases
                .iter()
                .enumerate()
                .map(|(k, p)| format!("{} {:.2}", p.trim_end_matches("_ms"), med(k)))
                .collect::<Vec<_>>()
                .join(", "),
            med(n + 1),
            med(n + 2),
        );
    }
}

#[test]
#[ignore = "benchmark (builds a 20,000-function program, needs the benchmark-size sample); run with --ignored --nocapture"]
fn audit_arming_breakdown() {
    let generated = tempfile::tempdir().unwrap();
    let many = generate(generated.path());
    breakdown("20,000 functions", &[many.to_str().unwrap()]);
    breakdown("python3 -c pass", &["/usr/bin/python3", "-c", "pass"]);
    let dir = std::env::var_os("COLDSTART_BENCH_SAMPLE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("coldstart-bench-sample"));
    let config = coldstart_sample::Config::for_size(coldstart_sample::Size::Bench, 1);
    let sample = coldstart_sample::build_cached(&config, &dir).unwrap();
    let w = &sample.workloads[0];
    let exe = sample.exe();
    let mut cmd = vec![exe.to_str().unwrap()];
    cmd.extend(w.args.iter().map(String::as_str));
    breakdown(&format!("bench sample, workload {}", w.name), &cmd);
}
