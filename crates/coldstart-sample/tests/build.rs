//! Integration tests: generate, build with the real clang-19 and lld-19, run the program and
//! check the truth manifest against the built binaries.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use coldstart_sample::{build, Access, Config, Module, Role, Sample};
use object::{Object, ObjectSymbol, SymbolKind};

/// One small sample per test process, built once, under Cargo's per-target temp dir.
fn small() -> &'static Sample {
    static SAMPLE: OnceLock<Sample> = OnceLock::new();
    SAMPLE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("coldstart-sample-small");
        coldstart_sample::build_cached(&Config::default(), &dir).expect("build the small sample")
    })
}

/// A fresh directory for a test's own build, removed when the test ends (even on failure).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("coldstart-sample-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child killed and reaped when the test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_ok(sample: &Sample, args: &[&str]) -> String {
    let out = Command::new(sample.exe()).args(args).output().expect("run the sample");
    assert!(
        out.status.success(),
        "sample {args:?} failed: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Defined function symbols (name -> size) of an ELF file's .symtab.
fn function_symbols(path: &Path) -> HashMap<String, u64> {
    let bytes = std::fs::read(path).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    file.symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .map(|s| (s.name().unwrap().to_string(), s.size()))
        .collect()
}

#[test]
fn every_function_of_the_truth_is_a_symbol_of_its_module() {
    let sample = small();
    let mut names = HashSet::new();
    for f in &sample.functions {
        assert!(names.insert(&f.name), "{} listed twice", f.name);
    }
    for module in Module::ALL {
        let symbols = function_symbols(&sample.module_path(module));
        for f in sample.functions.iter().filter(|f| f.module == module) {
            let size = symbols.get(&f.name);
            assert!(size.is_some(), "{} missing from {}", f.name, module.file());
            assert!(*size.unwrap() > 0, "{} has size 0", f.name);
        }
    }
    // The libraries export their work functions (the executable calls them).
    let bytes = std::fs::read(sample.module_path(Module::Liba)).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let exported: HashSet<String> =
        file.dynamic_symbols().map(|s| s.name().unwrap().to_string()).collect();
    assert!(exported.contains("cs_liba_f00000"));
}

#[test]
fn work_functions_are_distinct_code() {
    // No two work functions have the same bytes, so no linker or BOLT can fold them.
    let sample = small();
    let bytes = std::fs::read(sample.exe()).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let text = object::ObjectSection::data(&file.section_by_name(".text").unwrap()).unwrap();
    let text_addr = object::ObjectSection::address(&file.section_by_name(".text").unwrap());
    let mut seen = HashSet::new();
    for s in file.symbols().filter(|s| s.name().unwrap_or("").starts_with("cs_exe_f")) {
        let start = (s.address() - text_addr) as usize;
        let code = &text[start..start + s.size() as usize];
        assert!(seen.insert(code.to_vec()), "{} duplicates another function", s.name().unwrap());
    }
    assert!(seen.len() > 50);
}

/// Generated functions each function of `path` calls, in call order, without repeats, from
/// one disassembly of the whole file.
fn call_graph(path: &Path, generated: &HashMap<&str, Module>) -> HashMap<String, Vec<String>> {
    let out = Command::new("llvm-objdump-19")
        .args(["-d", "--no-show-raw-insn"])
        .arg(path)
        .output()
        .expect("run llvm-objdump-19 (Debian package llvm-19)");
    assert!(out.status.success());
    let mut graph: HashMap<String, Vec<String>> = HashMap::new();
    let mut current = String::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(name) = line.strip_suffix(">:").and_then(|l| l.split_once(" <")) {
            current = name.1.to_string();
            graph.entry(current.clone()).or_default();
            continue;
        }
        if !line.contains("call") {
            continue;
        }
        if let (Some(a), Some(b)) = (line.rfind('<'), line.rfind('>')) {
            let target = line[a + 1..b].trim_end_matches("@plt");
            let calls = graph.get_mut(&current).unwrap();
            if generated.contains_key(target) && !calls.iter().any(|c| c == target) {
                calls.push(target.to_string());
            }
        }
    }
    graph
}

#[test]
fn compiled_calls_match_the_truth() {
    // The machine code, not just the C, calls exactly the functions the manifest lists, in
    // first-touch order; work functions call nothing.
    let sample = small();
    let generated = sample.function_modules();
    let exe = call_graph(&sample.exe(), &generated);
    let plugin = call_graph(&sample.module_path(Module::Plugin), &generated);
    for w in &sample.workloads {
        let mut expect = vec!["main".to_string(), format!("cs_startup_{}", w.name)];
        let mut groups_start = None;
        for f in exe[&format!("cs_startup_{}", w.name)].clone() {
            let is_group = f.starts_with("cs_group_");
            if is_group && groups_start.is_none() {
                groups_start = Some(expect.len());
            }
            if is_group {
                expect.push(f.clone());
                expect.extend(exe[&f].iter().cloned());
            } else {
                expect.push(f.clone());
            }
            if f == "cs_load_plugin" {
                let entry = format!("cs_plugin_startup_{}", w.name);
                expect.push(entry.clone());
                expect.extend(plugin[&entry].iter().cloned());
            }
        }
        assert_eq!(w.startup, expect, "workload {}", w.name);
        assert_eq!(&w.startup[..groups_start.unwrap()], &w.main_thread[..]);
    }
    for module in Module::ALL {
        let graph = call_graph(&sample.module_path(module), &generated);
        for f in sample.functions.iter().filter(|f| f.role == Role::Work && f.module == module) {
            assert!(graph[&f.name].is_empty(), "{} calls {:?}", f.name, graph[&f.name]);
        }
    }
}

#[test]
fn workloads_overlap_as_configured_and_hot_code_is_scattered() {
    let sample = small();
    let overlap = sample.overlap("a", "b").unwrap();
    assert!((overlap - 0.8).abs() <= 0.05, "overlap {overlap}");
    assert_ne!(sample.workload("a").unwrap().startup, sample.workload("b").unwrap().startup);
    for want in [0.7, 0.9] {
        let c = Config { overlap: want, functions: 2000, ..Config::default() };
        let ws = coldstart_sample::workloads(&c).unwrap();
        let set = |i: usize| -> HashSet<&String> {
            ws[i].startup.iter().filter(|n| n.contains("_f0")).collect()
        };
        let (a, b) = (set(0), set(1));
        assert_eq!(a.len(), b.len());
        let got = a.intersection(&b).count() as f64 / a.len() as f64;
        assert!((got - want).abs() <= 0.02, "configured {want}, got {got}");
    }
    // Hot functions are spread among cold ones in source (and link) order.
    let hot = sample.workload("a").unwrap().startup_set();
    let exe: Vec<&str> = sample
        .functions
        .iter()
        .filter(|f| f.module == Module::Exe && f.role == Role::Work)
        .map(|f| f.name.as_str())
        .collect();
    let positions: Vec<usize> =
        exe.iter().enumerate().filter(|(_, n)| hot.contains(*n)).map(|(i, _)| i).collect();
    assert!(positions.len() >= 10);
    let span = positions.last().unwrap() - positions.first().unwrap();
    assert!(span > exe.len() / 2, "hot functions bunched: span {span} of {}", exe.len());
    let adjacent = positions.windows(2).filter(|p| p[1] == p[0] + 1).count();
    assert!(
        adjacent < positions.len() / 2,
        "{adjacent} of {} hot functions adjacent",
        positions.len()
    );
    // No work function outside a workload's hot set runs in it, and each hot one runs once.
    for w in &sample.workloads {
        let mut seen = HashSet::new();
        for f in &w.startup {
            assert!(seen.insert(f), "{f} listed twice in {}", w.name);
        }
    }
}

#[test]
fn each_workload_runs_and_prints_ready() {
    let sample = small();
    for w in &sample.workloads {
        let out = run_ok(sample, &w.args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(out, "ready\n", "workload {}", w.name);
    }
    assert_eq!(run_ok(sample, &["--workload", "all"]), "ready\n");
    assert!(run_ok(sample, &["--help"]).contains("--workload a|b|all"));
    let bad = Command::new(sample.exe()).args(["--workload", "zzz"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown workload"));
}

#[test]
fn threads_run_the_groups_and_the_truth_splits_them() {
    let sample = small();
    for n in 1..=sample.threads.groups {
        assert_eq!(run_ok(sample, &["--workload", "b", "--threads", &n.to_string()]), "ready\n");
    }
    let too_many = (sample.threads.groups + 1).to_string();
    let out = Command::new(sample.exe()).args(["--threads", &too_many]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));

    let w = sample.workload("a").unwrap();
    let per_thread = w.threads(&sample.threads, 2).unwrap();
    assert_eq!(per_thread.len(), 3);
    assert_eq!(per_thread[0], w.main_thread);
    assert_eq!(per_thread[1][0], "cs_thread_entry_0");
    assert_eq!(per_thread[1][1], "cs_group_a_0");
    assert!(per_thread[1].contains(&"cs_group_a_2".to_string()));
    assert!(per_thread[2].contains(&"cs_group_a_3".to_string()));
    // Every start-up function runs on exactly one thread.
    let mut all: Vec<&String> = per_thread.iter().flatten().collect();
    let entries = all.iter().filter(|f| f.starts_with("cs_thread_entry_")).count();
    assert_eq!(entries, 2);
    all.retain(|f| !f.starts_with("cs_thread_entry_"));
    let unique: HashSet<&String> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len());
    assert_eq!(unique, w.startup.iter().collect());
    assert!(w.threads(&sample.threads, 0).is_err());
}

#[test]
fn readiness_fd_and_file() {
    let sample = small();
    let scratch = Scratch::new("ready");
    std::fs::create_dir_all(&scratch.0).unwrap();
    let file = scratch.0.join("ready-marker");
    // Without O_CLOEXEC: the sample inherits the write end.
    let (r, w) = coldstart_sys::pipe(0).unwrap();
    let status = Command::new(sample.exe())
        .env("COLDSTART_READY_FD", std::os::fd::AsRawFd::as_raw_fd(&w).to_string())
        .env("COLDSTART_READY_FILE", &file)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    // Our copy of the write end closed, the read sees the byte the child wrote, then the end.
    drop(w);
    let mut buf = Vec::new();
    let n = std::io::Read::read_to_end(&mut std::fs::File::from(r), &mut buf).unwrap();
    assert_eq!(n, 1, "one byte on COLDSTART_READY_FD");
    assert!(file.exists(), "COLDSTART_READY_FILE created");
}

#[test]
fn stay_and_listen_wait_until_killed() {
    let sample = small();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = Running(
        Command::new(sample.exe())
            .args(["--workload", "a", "--stay", "--listen", &port.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // The port accepts once ready was printed.
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("port accepts");
    let mut rest = Vec::new();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = conn.read_to_end(&mut rest);
    // Still running a moment later.
    let until = Instant::now() + Duration::from_millis(200);
    while Instant::now() < until {
        assert!(child.0.try_wait().unwrap().is_none(), "--stay exited");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn data_reads_match_the_files() {
    let sample = small();
    let sizes: HashMap<&str, u64> =
        sample.data_files.iter().map(|d| (d.path.as_str(), d.size)).collect();
    for d in &sample.data_files {
        let len = std::fs::metadata(sample.dir.join(&d.path)).unwrap().len();
        assert_eq!(len, d.size, "{}", d.path);
    }
    for w in &sample.workloads {
        assert!(w.data.iter().any(|d| d.access == Access::Read));
        let mapped = w.data.iter().find(|d| d.access == Access::Mmap).unwrap();
        let pages = sizes[mapped.path.as_str()].div_ceil(sample.page_size);
        assert!(mapped.pages.iter().all(|&p| p < pages));
        // Scattered: not in file order.
        let mut sorted = mapped.pages.clone();
        sorted.sort();
        assert_ne!(sorted, mapped.pages);
    }
    let pa: HashSet<u64> = sample.workloads[0].data.last().unwrap().pages.iter().copied().collect();
    let pb: HashSet<u64> = sample.workloads[1].data.last().unwrap().pages.iter().copied().collect();
    assert!(pa != pb && pa.intersection(&pb).count() * 2 > pa.len());
}

#[test]
fn manifest_round_trips() {
    let sample = small();
    let loaded = Sample::load(&sample.dir).unwrap();
    assert_eq!(&loaded, sample);
}

#[test]
fn more_functions_more_text_and_rebuild_replaces() {
    let scratch = Scratch::new("scale");
    let small = Config { functions: 100, ..Config::default() };
    let first = build(&small, &scratch.0).unwrap();
    let bigger = Config { functions: 400, ..Config::default() };
    let second = build(&bigger, &scratch.0).unwrap();
    assert!(
        second.text_bytes() > first.text_bytes() * 3,
        "{} vs {}",
        second.text_bytes(),
        first.text_bytes()
    );
    assert_eq!(Sample::load(&scratch.0).unwrap().config.functions, 400);
    let leftovers: Vec<_> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".cs-build-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary build directory left behind");
}

#[test]
fn build_cached_reuses_a_matching_build_only() {
    let scratch = Scratch::new("cached");
    let config = Config { functions: 60, ..Config::default() };
    let first = coldstart_sample::build_cached(&config, &scratch.0).unwrap();
    let built_at = std::fs::metadata(first.exe()).unwrap().modified().unwrap();
    let again = coldstart_sample::build_cached(&config, &scratch.0).unwrap();
    assert_eq!(again, first);
    assert_eq!(std::fs::metadata(again.exe()).unwrap().modified().unwrap(), built_at, "rebuilt");
    let other = Config { seed: 99, ..config };
    let rebuilt = coldstart_sample::build_cached(&other, &scratch.0).unwrap();
    assert_eq!(rebuilt.config.seed, 99);
    assert_ne!(rebuilt.build.sources_digest, first.build.sources_digest);
}

#[test]
fn build_cached_from_two_threads_at_once_builds_one_sample_both_can_use() {
    // Two tests of one binary asked for the same cached sample at once: one's build removed
    // the sources the other was compiling ("no such file or directory: 'main.c'").
    let scratch = Scratch::new("cached-twice");
    let config = Config { functions: 60, ..Config::default() };
    let samples: Vec<_> = std::thread::scope(|s| {
        let a = s.spawn(|| coldstart_sample::build_cached(&config, &scratch.0));
        let b = s.spawn(|| coldstart_sample::build_cached(&config, &scratch.0));
        [a.join().unwrap(), b.join().unwrap()]
    })
    .into_iter()
    .map(|r| r.expect("both callers get the sample"))
    .collect();
    assert_eq!(samples[0], samples[1]);
    assert!(samples[0].exe().is_file());
}

#[test]
fn refuses_a_directory_that_is_not_a_sample() {
    let scratch = Scratch::new("foreign");
    std::fs::create_dir_all(&scratch.0).unwrap();
    std::fs::write(scratch.0.join("precious.txt"), "keep me").unwrap();
    let err = build(&Config { functions: 60, ..Config::default() }, &scratch.0).unwrap_err();
    assert!(err.to_string().contains("not empty"), "{err}");
    assert!(scratch.0.join("precious.txt").exists());
}

#[test]
fn makefile_rebuilds_with_extra_ldflags() {
    // The layout tools rebuild the sample through its Makefile with an ordering file.
    let scratch = Scratch::new("make");
    let sample = build(&Config { functions: 80, ..Config::default() }, &scratch.0).unwrap();
    let order = ["cs_exe_f00030", "cs_exe_f00002", "cs_exe_f00017"];
    let order_file = scratch.0.join("order.txt");
    std::fs::write(&order_file, order.join("\n") + "\n").unwrap();
    // As `coldstart link` runs a build: flags in the environment.
    let status = Command::new("make")
        .args(["-s", "-C"])
        .arg(scratch.0.join("src"))
        .arg("-B")
        .env("LDFLAGS_EXE", format!("-Wl,--symbol-ordering-file={}", order_file.display()))
        .env("CFLAGS", "-DCS_EXTRA_FLAG_SEEN=1")
        .status()
        .expect("run make");
    assert!(status.success());
    let bytes = std::fs::read(sample.exe()).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let addr: HashMap<String, u64> =
        file.symbols().map(|s| (s.name().unwrap().to_string(), s.address())).collect();
    assert!(addr[order[0]] < addr[order[1]] && addr[order[1]] < addr[order[2]]);
    assert_eq!(run_ok(&sample, &["--workload", "a"]), "ready\n");
    let dry = Command::new("make")
        .args(["-n", "-B", "-C"])
        .arg(scratch.0.join("src"))
        .env("CFLAGS", "-DCS_EXTRA_FLAG_SEEN=1")
        .env("CC", "my-cc-wrapper")
        .output()
        .unwrap();
    let dry = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.contains("my-cc-wrapper -O1"), "CC from the environment: {dry}");
    assert!(dry.contains("-fPIE -DCS_EXTRA_FLAG_SEEN=1 -c exe_000.c"), "{dry}");
}

/// Hooks for `-finstrument-functions`: record the first entry of every function, per thread,
/// and write `THREAD NAME` lines to `$CS_TRACE` at exit.
const TRACE_HOOK: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>
#define NI __attribute__((no_instrument_function))
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *seen[1 << 16];
static long tids[1 << 16];
static int n;
NI void __cyg_profile_func_enter(void *fn, void *site) {
    (void)site;
    pthread_mutex_lock(&lock);
    int known = 0;
    for (int i = 0; i < n; i++)
        if (seen[i] == fn) { known = 1; break; }
    if (!known && n < (1 << 16)) { seen[n] = fn; tids[n] = syscall(SYS_gettid); n++; }
    pthread_mutex_unlock(&lock);
}
NI void __cyg_profile_func_exit(void *fn, void *site) { (void)fn; (void)site; }
NI __attribute__((destructor)) static void dump(void) {
    FILE *f = fopen(getenv("CS_TRACE"), "w");
    if (!f) return;
    for (int i = 0; i < n; i++) {
        Dl_info info;
        if (dladdr(seen[i], &info) && info.dli_sname)
            fprintf(f, "%ld %s\n", tids[i], info.dli_sname);
    }
    fclose(f);
}
"#;

/// First-touch order per thread (in order of each thread's first function), generated
/// functions only.
fn traced(sample: &Sample, trace_file: &Path, args: &[&str]) -> Vec<Vec<String>> {
    let out = Command::new(sample.exe()).args(args).env("CS_TRACE", trace_file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let generated = sample.function_modules();
    let mut threads: Vec<(String, Vec<String>)> = Vec::new();
    for line in std::fs::read_to_string(trace_file).unwrap().lines() {
        let (tid, name) = line.split_once(' ').unwrap();
        if !generated.contains_key(name) {
            continue;
        }
        match threads.iter_mut().find(|(t, _)| t == tid) {
            Some((_, names)) => names.push(name.to_string()),
            None => threads.push((tid.to_string(), vec![name.to_string()])),
        }
    }
    threads.into_iter().map(|(_, names)| names).collect()
}

#[test]
fn the_running_program_enters_exactly_the_truth() {
    // Rebuild a sample with -finstrument-functions (the calls among generated functions stay
    // the same) and record which functions really run, per thread, including the plugin.
    let scratch = Scratch::new("trace");
    let sample = build(&Config { functions: 120, ..Config::default() }, &scratch.0).unwrap();
    let src = scratch.0.join("src");
    std::fs::write(src.join("trace_hook.c"), TRACE_HOOK).unwrap();
    let hook = Command::new("clang-19")
        .args(["-O1", "-fPIC", "-shared", "-o", "../libtrace_hook.so", "trace_hook.c", "-ldl"])
        .current_dir(&src)
        .status()
        .unwrap();
    assert!(hook.success());
    let status = Command::new("make")
        .args(["-s", "-B", "-j2", "-C"])
        .arg(&src)
        .env("CFLAGS", "-finstrument-functions")
        .env(
            "LDFLAGS",
            format!("-L{} -ltrace_hook -Wl,-rpath,{}", scratch.0.display(), scratch.0.display()),
        )
        .env("LDFLAGS_EXE", "-rdynamic")
        .status()
        .unwrap();
    assert!(status.success());
    let trace = scratch.0.join("trace.txt");
    for w in &sample.workloads {
        let args: Vec<&str> = w.args.iter().map(String::as_str).collect();
        let seen = traced(&sample, &trace, &args);
        assert_eq!(seen.len(), 1, "one thread without --threads");
        assert_eq!(seen[0], w.startup, "workload {}", w.name);

        let mut threaded_args = args.clone();
        threaded_args.extend(["--threads", "2"]);
        let seen = traced(&sample, &trace, &threaded_args);
        let expect = w.threads(&sample.threads, 2).unwrap();
        assert_eq!(seen[0], expect[0], "main thread of workload {}", w.name);
        let mut workers: Vec<Vec<String>> = seen[1..].to_vec();
        workers.sort();
        let mut expect_workers = expect[1..].to_vec();
        expect_workers.sort();
        assert_eq!(workers, expect_workers, "worker threads of workload {}", w.name);
    }
}
