//! `coldstart profile` on programs built here with clang-19 and on Debian's own programs.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use coldstart_testkit::compile_c;
use serde_json::Value;

fn coldstart() -> Command {
    Command::cargo_bin("coldstart").unwrap()
}

/// A temporary directory holding a test's programs, compiled there with clang-19 (no debug
/// information, as Debian ships programs), and `coldstart profile` run on them.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture { dir: tempfile::tempdir().unwrap() }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Compile the C `source` into DIR/NAME (`-O1 -fno-inline`, linked with lld) with `args`.
    fn program(&self, name: &str, source: &str, args: &[&str]) -> PathBuf {
        let flags = [&["-g0", "-fno-inline", "-fuse-ld=lld"][..], args].concat();
        compile_c(self.path(), name, source, &flags)
    }

    /// Compile the C `source` into the shared library DIR/FILE (`-O1 -fPIC`, linked with lld)
    /// with `args`.
    fn library(&self, file: &str, source: &str, args: &[&str]) -> PathBuf {
        let flags = [&["-g0", "-shared", "-fPIC", "-fuse-ld=lld"][..], args].concat();
        compile_c(self.path(), file, source, &flags)
    }

    /// Run `coldstart profile FLAGS -o DIR/p.json -- PROGRAM ARGS`.
    fn profile(&self, flags: &[&str], program: &Path, args: &[&str]) -> Profiled {
        let out = self.path().join("p.json");
        let _ = std::fs::remove_file(&out);
        let cmd = std::iter::once(program.as_os_str()).chain(args.iter().map(OsStr::new));
        let result = common::profile_to(flags, &out, cmd);
        Profiled {
            run: format!("{flags:?} {} {args:?}", program.display()),
            code: result.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&result.stderr).into_owned(),
            profile: std::fs::read_to_string(&out).ok().map(|t| serde_json::from_str(&t).unwrap()),
        }
    }
}

/// What a `coldstart profile` run left: its exit code, its standard error and the profile.
struct Profiled {
    /// The flags, program and arguments, for messages.
    run: String,
    code: i32,
    stderr: String,
    profile: Option<Value>,
}

impl Profiled {
    /// The profile of a run that exited 0, and its standard error.
    fn ok(self) -> (Value, String) {
        let (stderr, profile) = self.exited(0);
        (profile.expect("a profile is written"), stderr)
    }

    /// The standard error and the profile (if one was written) of a run that exited `code`.
    fn exited(self, code: i32) -> (String, Option<Value>) {
        assert_eq!(self.code, code, "{}: {}", self.run, self.stderr);
        (self.stderr, self.profile)
    }
}

/// Names of the touched functions of the module whose path ends with `suffix`, in order.
fn touched(p: &Value, suffix: &str) -> Vec<String> {
    p["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["path"].as_str().unwrap().ends_with(suffix))
        .flat_map(|m| m["functions"].as_array().unwrap().iter())
        .map(|f| f["names"][0].as_str().unwrap().to_owned())
        .collect()
}

fn ordinal_of(p: &Value, name: &str) -> u64 {
    p["modules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["functions"].as_array().unwrap().iter())
        .find(|f| f["names"].as_array().unwrap().iter().any(|n| n == name))
        .unwrap_or_else(|| panic!("{name} not recorded"))["ordinal"]
        .as_u64()
        .unwrap()
}

/// No process of ours runs `exe` any more.
fn assert_no_process_runs(exe: &Path) {
    std::thread::sleep(std::time::Duration::from_millis(50));
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(target) = std::fs::read_link(entry.path().join("exe")) {
            assert_ne!(target, exe, "process {:?} still runs {}", entry.file_name(), exe.display());
        }
    }
}

const LIB: &str = include_str!("fixtures/profile/lib.c");

const MAIN: &str = include_str!("fixtures/profile/main.c");

/// The program `prog` (MAIN) linked with its library `libt.so` (LIB), found by its rpath.
fn build_with_library(f: &Fixture) -> PathBuf {
    f.library("libt.so", LIB, &["-fno-inline"]);
    let rpath = format!("-Wl,-rpath,{}", f.path().display());
    let libdir = format!("-L{}", f.path().display());
    f.program("prog", MAIN, &[&libdir, "-lt", &rpath])
}

#[test]
fn records_functions_of_the_executable_and_its_library_in_call_order() {
    let f = Fixture::new();
    let prog = build_with_library(&f);
    let (p, _) = f.profile(&["--workload", "w1"], &prog, &[]).ok();
    assert_eq!(p["format"], "coldstart-profile");
    assert_eq!(p["version"], 1);
    assert_eq!(p["workload"], "w1");
    assert_eq!(p["stop"]["kind"], "exit");
    assert_eq!(touched(&p, "/prog"), ["_start", "main", "second", "first"]);
    assert_eq!(touched(&p, "/libt.so"), ["lib_two", "lib_one"]);
    assert!(ordinal_of(&p, "first") < ordinal_of(&p, "lib_two"));
    // The loader and libc are profiled too, and every module names its build.
    assert!(!touched(&p, "libc.so.6").is_empty());
    for m in p["modules"].as_array().unwrap() {
        assert!(m["size"].as_u64().unwrap() > 0);
        if m["path"].as_str().unwrap().ends_with("/prog") {
            assert!(m["build_id"].as_str().is_some_and(|b| b.len() >= 16));
            assert!(m["load_bias"].as_u64().unwrap() > 0, "PIE is loaded at a bias");
        }
    }
    // Timestamps grow with the ordinal in a single thread.
    let all: Vec<(u64, u64)> = p["modules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["functions"].as_array().unwrap().iter())
        .map(|f| (f["ordinal"].as_u64().unwrap(), f["first_touch_ns"].as_u64().unwrap()))
        .collect();
    let mut sorted = all.clone();
    sorted.sort();
    assert!(sorted.windows(2).all(|w| w[0].1 <= w[1].1 && w[0].0 < w[1].0));
}

#[test]
fn threads_are_all_recorded() {
    let f = Fixture::new();
    let prog = f.program("threads", include_str!("fixtures/profile/threads.c"), &["-pthread"]);
    let (p, _) = f.profile(&[], &prog, &[]).ok();
    let funcs: Vec<&Value> = p["modules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["functions"].as_array().unwrap().iter())
        .collect();
    let tid =
        |name: &str| funcs.iter().find(|f| f["names"][0] == name).unwrap()["tid"].as_i64().unwrap();
    let main_tid = tid("main");
    let (a, b) = (tid("in_thread_a"), tid("in_thread_b"));
    assert_ne!(a, main_tid);
    assert_ne!(b, main_tid);
    assert_ne!(a, b);
}

#[test]
fn dlopened_library_is_covered() {
    let f = Fixture::new();
    let plug = f.library(
        "libplug.so",
        "int plug_entry(int x) { return x * 5; }\nint plug_idle(void) { return 0; }\n",
        &[],
    );
    let source =
        include_str!("fixtures/profile/dl.c").replace("@PATH@", &plug.display().to_string());
    let prog = f.program("dl", &source, &["-ldl"]);
    let (p, _) = f.profile(&[], &prog, &[]).ok();
    assert_eq!(p["stop"]["code"], 0, "the program itself succeeded");
    assert_eq!(touched(&p, "/libplug.so"), ["plug_entry"]);
}

#[test]
fn crash_mid_start_up_keeps_the_profile_and_reports_the_signal() {
    let f = Fixture::new();
    let prog = f.program("crash", include_str!("fixtures/profile/crash.c"), &[]);
    let (stderr, p) = f.profile(&[], &prog, &[]).exited(1);
    assert!(stderr.contains("crashed") && stderr.contains("SIGSEGV"), "{stderr}");
    assert!(stderr.contains("crashes"), "the fault is located: {stderr}");
    let p = p.unwrap();
    assert_eq!(p["stop"]["kind"], "crash");
    assert_eq!(p["stop"]["signal"], "SIGSEGV");
    assert_eq!(touched(&p, "/crash"), ["_start", "main", "before_crash", "crashes"]);
    assert_no_process_runs(&prog);
}

#[test]
fn readiness_on_stdout_then_kill() {
    let f = Fixture::new();
    let prog = f.program("server", include_str!("fixtures/profile/server.c"), &[]);
    let (p, _) = f.profile(&["--ready", "stdout:^listening$", "--kill-at-ready"], &prog, &[]).ok();
    assert_eq!(p["stop"]["kind"], "ready");
    assert_eq!(p["stop"]["killed"], true);
    assert!(touched(&p, "/server").contains(&"setup".to_string()));
    assert_no_process_runs(&prog);
}

#[test]
fn detached_program_runs_on_without_breakpoints_and_forks_survive() {
    let f = Fixture::new();
    let marker = f.path().join("done");
    let source =
        include_str!("fixtures/profile/runs_on.c").replace("@PATH@", &marker.display().to_string());
    let prog = f.program("runs_on", &source, &[]);
    let (p, _) = f.profile(&["--ready", "stdout:ready"], &prog, &[]).ok();
    assert_eq!(p["stop"]["killed"], false);
    for _ in 0..100 {
        if marker.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ok", "program ran on after detach");
}

#[test]
fn followed_fork_records_the_child() {
    let f = Fixture::new();
    let prog = f.program("forks", include_str!("fixtures/profile/forks.c"), &[]);
    let (p, _) = f.profile(&["--no-follow-forks"], &prog, &[]).ok();
    assert_eq!(p["stop"]["code"], 0, "the unfollowed child did not trip on a breakpoint");
    assert!(!touched(&p, "/forks").contains(&"only_in_child".to_string()));

    for follow in [&[][..], &["--follow-forks"]] {
        let (p, _) = f.profile(follow, &prog, &[]).ok();
        assert_eq!(p["stop"]["code"], 0);
        assert!(touched(&p, "/forks").contains(&"only_in_child".to_string()), "{follow:?}");
    }
}

#[test]
fn not_elf_and_32_bit_are_refused_before_running() {
    let f = Fixture::new();
    let text = f.path().join("notes.txt");
    std::fs::write(&text, "plain text\n").unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&text).status().unwrap();
    let (stderr, p) = f.profile(&[], &text, &[]).exited(2);
    assert!(stderr.contains("not an ELF file"), "{stderr}");
    assert!(p.is_none());

    let elf32 = f.path().join("elf32");
    let mut header = vec![0u8; 52];
    header[..7].copy_from_slice(b"\x7fELF\x01\x01\x01");
    header[16] = 2;
    header[18] = 3;
    header[20] = 1;
    std::fs::write(&elf32, header).unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&elf32).status().unwrap();
    let (stderr, _) = f.profile(&[], &elf32, &[]).exited(2);
    assert!(stderr.contains("32-bit"), "{stderr}");

    let (stderr, _) = f.profile(&[], Path::new("/nonexistent/program"), &[]).exited(2);
    assert!(stderr.contains("`/nonexistent/program` does not exist"), "{stderr}");
}

#[test]
fn debian_python3_start_up_reaches_py_initialize() {
    let f = Fixture::new();
    let (p, _) = f.profile(&[], Path::new("/usr/bin/python3"), &["-c", "pass"]).ok();
    let python = touched(&p, "python3.11");
    let python = if python.is_empty() { touched(&p, "python3") } else { python };
    assert!(python.iter().any(|n| n.starts_with("Py_Initialize")), "{python:?}");
    assert!(python.iter().any(|n| n == "Py_BytesMain"));
}

#[test]
fn debian_cpp_program_records_mangled_libstdcxx_functions() {
    let f = Fixture::new();
    let input = f.path().join("t.tbl");
    std::fs::write(&input, ".TS\nl.\na\n.TE\n").unwrap();
    let (p, _) = f.profile(&[], Path::new("/usr/bin/tbl"), &[input.to_str().unwrap()]).ok();
    let stdcxx: Vec<String> = p["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["path"].as_str().unwrap().contains("libstdc++.so"))
        .flat_map(|m| m["functions"].as_array().unwrap().iter())
        .map(|f| f["names"][0].as_str().unwrap().to_owned())
        .collect();
    assert!(!stdcxx.is_empty(), "libstdc++ functions recorded");
    assert!(stdcxx.iter().all(|n| n.starts_with("_Z")), "mangled C++ names kept raw: {stdcxx:?}");
}

#[test]
fn merge_keeps_workloads_and_refuses_unknown_versions() {
    let f = Fixture::new();
    let prog = build_with_library(&f);
    let a = f.path().join("a.json");
    let b = f.path().join("b.json");
    for (label, out) in [("one", &a), ("two", &b)] {
        let st = coldstart()
            .args(["profile", "--workload", label, "-o"])
            .arg(out)
            .arg("--")
            .arg(&prog)
            .arg("x")
            .status()
            .unwrap();
        assert!(st.success());
    }
    let m = f.path().join("m.json");
    let st =
        coldstart().args(["profile", "merge"]).arg(&a).arg(&b).arg("-o").arg(&m).status().unwrap();
    assert!(st.success());
    let merged: Value = serde_json::from_str(&std::fs::read_to_string(&m).unwrap()).unwrap();
    assert_eq!(merged["workload"], "merged");
    let labels: Vec<&str> = merged["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workload"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["one", "two"]);
    assert_eq!(touched(&merged, "/prog"), ["_start", "main", "second", "first"]);

    let text = std::fs::read_to_string(&a).unwrap().replacen("\"version\": 1", "\"version\": 9", 1);
    std::fs::write(&a, text).unwrap();
    let out =
        coldstart().args(["profile", "merge"]).arg(&a).arg(&b).arg("-o").arg(&m).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("version 9"));
}

#[test]
fn stripped_binary_page_profile_names_its_pages() {
    let f = Fixture::new();
    // More than a page of code, so that it is worth a warning when stripped.
    let mut source = String::from("volatile int sink;\n");
    for i in 0..200 {
        source.push_str(&format!(
            "void f{i}(int x) {{ for (int k = 0; k < x; k++) sink += k * {i}; }}\n"
        ));
    }
    // And it spends its start-up in its own (stripped) code.
    source.push_str(
        "int main(void) { f0(3); f1(4); for (volatile long i = 0; i < 200000000; i++) sink += 1; return 0; }\n",
    );
    let prog = f.program("stripped", &source, &["-s", "-Wl,--build-id"]);
    let mounted_before = std::fs::read_to_string("/proc/mounts").unwrap().contains(" tracefs ");
    let (p, stderr) = f.profile(&["--pages"], &prog, &[]).ok();
    let warning = format!("{} has no function symbols", prog.display());
    assert!(
        stderr.contains(&warning) && stderr.contains("-dbgsym") && stderr.contains("debuginfod"),
        "{stderr}"
    );
    // The summary says how much of start-up ran where no function can be seen.
    let share = stderr
        .lines()
        .find(|l| l.contains("1 module without function symbols"))
        .and_then(|l| l.split("they ran ").nth(1))
        .and_then(|rest| rest.split('%').next())
        .and_then(|pct| pct.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no share of CPU time in: {stderr}"));
    assert!(share >= 50, "the busy loop in the stripped program is most of its time: {share}%");
    let pages = &p["pages"];
    assert_eq!(pages["source"], "exact");
    assert_eq!(pages["sampled"], false);
    let files = pages["files"].as_array().unwrap();
    let index = files
        .iter()
        .position(|f| f["path"] == prog.to_str().unwrap())
        .expect("the binary's pages are named");
    assert!(files[index]["build_id"].as_str().is_some_and(|b| !b.is_empty()));
    assert_eq!(files[index]["size"], std::fs::metadata(&prog).unwrap().len());
    let read = coldstart_profile_format::Profile::read(&f.path().join("p.json")).unwrap();
    let sections = coldstart_profile::pages::section_pages(read.pages.as_ref().unwrap());
    let text = sections[index].iter().find(|s| s.name == ".text").expect(".text listed");
    assert!(
        text.touched >= 1 && text.touched <= text.pages,
        "code pages attributed to .text: {text:?}"
    );
    assert!(pages["accesses"].as_array().unwrap().iter().any(|a| a["file"] == index));
    assert!(files.iter().any(|f| f["path"].as_str().unwrap().ends_with("libc.so.6")));
    // Tracefs is left as it was found, with no instance of ours behind.
    let mounted_after = std::fs::read_to_string("/proc/mounts").unwrap().contains(" tracefs ");
    assert_eq!(mounted_before, mounted_after);
    if mounted_after {
        // (Instances of coldstarts still running, other tests', are theirs.)
        let left = std::fs::read_dir("/sys/kernel/tracing/instances")
            .unwrap()
            .flatten()
            .filter_map(|e| {
                e.file_name().to_string_lossy().strip_prefix("coldstart-")?.parse::<u32>().ok()
            })
            .any(|pid| !common::pid_alive(pid));
        assert!(!left, "a tracefs instance of a coldstart that has ended is left");
    }

    // A tracefs mounted by someone else stays mounted, and an instance left by a coldstart
    // that was killed is removed.
    struct Unmount(bool);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir("/sys/kernel/tracing/instances/coldstart-999999999");
            if self.0 {
                let _ = Command::new("umount").arg("/sys/kernel/tracing").status();
            }
        }
    }
    let _unmount = Unmount(!mounted_after);
    if !mounted_after {
        assert!(Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status()
            .unwrap()
            .success());
    }
    let stale = Path::new("/sys/kernel/tracing/instances/coldstart-999999999");
    std::fs::create_dir(stale).unwrap();
    f.profile(&["--pages"], &prog, &[]).ok();
    assert!(!stale.exists(), "stale instance removed");
    assert!(
        std::fs::read_to_string("/proc/mounts").unwrap().contains(" tracefs "),
        "not unmounted"
    );
}

const PLAIN: &str = include_str!("fixtures/profile/plain.c");

#[test]
fn non_pie_and_static_executables() {
    let f = Fixture::new();
    for (name, flags) in [("nopie", &["-no-pie"][..]), ("static", &["-static"][..])] {
        let prog = f.program(name, PLAIN, flags);
        let (p, stderr) = f.profile(&[], &prog, &[]).ok();
        let funcs = touched(&p, &format!("/{name}"));
        let main = funcs.iter().position(|n| n == "main").expect("main recorded");
        assert_eq!(funcs[main + 1..main + 3], ["step_one", "step_two"], "{name}: {funcs:?}");
        let module = p["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["path"].as_str().unwrap().ends_with(name))
            .unwrap();
        assert_eq!(module["load_bias"], 0, "{name} is loaded where it was linked");
        let fell_back = stderr.contains("statically linked") && stderr.contains("ptrace tracer");
        assert_eq!(fell_back, name == "static", "{name}: the fallback is announced: {stderr}");
        if name == "static" {
            assert_eq!(
                p["modules"].as_array().unwrap().len(),
                1,
                "a static program has no other module"
            );
        }
    }
}

#[test]
fn audit_tracer_asked_for_on_a_static_program_is_a_usage_error() {
    let f = Fixture::new();
    let prog = f.program("static_only", PLAIN, &["-static"]);
    let (stderr, p) = f.profile(&["--tracer", "audit"], &prog, &[]).exited(2);
    assert!(stderr.contains("statically linked") && stderr.contains("--tracer ptrace"), "{stderr}");
    assert!(p.is_none());
    let (stderr, _) = f.profile(&["--tracer", "strace"], &prog, &[]).exited(2);
    assert!(stderr.contains("auto, audit or ptrace"), "{stderr}");
}

#[test]
fn agent_refused_by_the_loader_is_profiled_again_with_ptrace() {
    // A temporary directory mounted noexec: the loader cannot map the agent.
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let f = Fixture::new();
    let prog = f.program("plain_noexec", PLAIN, &[]);
    let tmp = f.path().join("noexec");
    std::fs::create_dir(&tmp).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "noexec,size=64m", "tmpfs"])
        .arg(&tmp)
        .status()
        .unwrap();
    assert!(mounted.success(), "mounting a tmpfs (tests run as root)");
    let _unmount = Unmount(tmp.clone());
    let out = f.path().join("p.json");
    let o = coldstart()
        .env("TMPDIR", &tmp)
        .args(["profile", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("did not run the audit agent") && stderr.contains("ptrace tracer"),
        "{stderr}"
    );
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(touched(&p, "/plain_noexec"), ["_start", "main", "step_one", "step_two"]);
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "the agent's directory is removed");
}

#[test]
fn rust_program_keeps_mangled_names() {
    let f = Fixture::new();
    let src = f.path().join("hello.rs");
    std::fs::write(&src, "#[inline(never)] fn greet() -> usize { std::hint::black_box(42) }\nfn main() { std::process::exit((greet() != 42) as i32) }\n").unwrap();
    let out = f.path().join("hello");
    assert!(Command::new("rustc")
        .args(["-C", "opt-level=1", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let (p, _) = f.profile(&[], &out, &[]).ok();
    let names = touched(&p, "/hello");
    let greet = names
        .iter()
        .find(|n| coldstart_elf::demangle(n) == "hello::greet")
        .expect("greet recorded");
    assert!(greet.starts_with("_ZN") || greet.starts_with("_R"), "raw mangled name kept: {greet}");
}

/// Run coldstart as user `nobody` (the tests run as root).
fn as_nobody(args: &[&str]) -> std::process::Output {
    let bin = assert_cmd::cargo::cargo_bin("coldstart");
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(bin)
        .args(args)
        .output()
        .expect("setpriv (util-linux) is installed")
}

#[test]
fn setuid_and_unreadable_programs_are_refused_without_root() {
    let f = Fixture::new();
    std::process::Command::new("chmod").arg("755").arg(f.path()).status().unwrap();
    // A directory nobody may write into, so that what is refused is the program.
    let writable = f.path().join("out");
    std::fs::create_dir(&writable).unwrap();
    std::process::Command::new("chmod").arg("777").arg(&writable).status().unwrap();
    let out_path = writable.join("p.json");
    let out = out_path.to_str().unwrap();

    let o = as_nobody(&["profile", "-o", out, "--", "/usr/bin/passwd", "--help"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("setuid") && stderr.contains("root"), "{stderr}");

    let secret = f.path().join("secret");
    std::fs::copy("/usr/bin/true", &secret).unwrap();
    std::process::Command::new("chmod").arg("711").arg(&secret).status().unwrap();
    let o = as_nobody(&["profile", "-o", out, "--", secret.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot read") && stderr.contains("secret"), "{stderr}");
    assert!(!out_path.exists());
}

/// A seccomp filter that makes `ptrace` fail with EPERM, as some container runtimes do.
const NO_PTRACE: &str = include_str!("fixtures/profile/no_ptrace.c");

#[test]
fn a_program_that_cannot_be_traced_is_a_clear_error_and_leaves_nothing_behind() {
    let f = Fixture::new();
    let jail = f.program("no_ptrace", NO_PTRACE, &[]);
    let prog = f.program("victim", PLAIN, &[]);
    let out = f.path().join("p.json");
    let run = |tracer: &str| {
        Command::new(&jail)
            .arg(assert_cmd::cargo::cargo_bin("coldstart"))
            .args(["profile", "--tracer", tracer, "-o"])
            .arg(&out)
            .arg("--")
            .arg(&prog)
            .output()
            .unwrap()
    };
    let o = run("ptrace");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("cannot trace") && stderr.contains("CAP_SYS_PTRACE"), "{stderr}");
    assert!(!out.exists());
    assert_no_process_runs(&prog);
    // The audit tracer needs no ptrace: the default profiles the program in the same jail.
    let o = run("auto");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(touched(&p, "/victim"), ["_start", "main", "step_one", "step_two"]);
    assert_no_process_runs(&prog);
}

#[test]
fn without_root_pages_come_from_page_fault_samples_labelled_sampled() {
    let f = Fixture::new();
    std::process::Command::new("chmod").arg("777").arg(f.path()).status().unwrap();
    let prog = f.program("plain", PLAIN, &[]);
    let out = f.path().join("p.json");
    let o = as_nobody(&[
        "profile",
        "--pages",
        "-o",
        out.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("page-fault samples"), "{stderr}");
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(p["pages"]["source"], "perf");
    assert_eq!(p["pages"]["sampled"], true);
    let files = p["pages"]["files"].as_array().unwrap();
    let index = files
        .iter()
        .position(|f| f["path"] == prog.to_str().unwrap())
        .expect("the binary's pages are named");
    assert!(p["pages"]["accesses"].as_array().unwrap().iter().any(|a| a["file"] == index));
    assert_eq!(touched(&p, "/plain")[..], ["_start", "main", "step_one", "step_two"][..]);
    // Exact and traced pages need root: said before anything runs, with the remedy.
    for method in ["exact", "traced"] {
        let o = as_nobody(&[
            "profile",
            &format!("--pages={method}"),
            "-o",
            out.to_str().unwrap(),
            "--",
            prog.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{method}: {stderr}");
        assert!(
            stderr.contains(&format!("--pages={method} needs root"))
                && stderr.contains("--pages=sampled"),
            "{stderr}"
        );
    }
}

#[test]
fn busy_threads_are_stopped_restored_and_detached_at_readiness() {
    let f = Fixture::new();
    let marker = f.path().join("done");
    let source =
        include_str!("fixtures/profile/busy.c").replace("@PATH@", &marker.display().to_string());
    let prog = f.program("busy", &source, &["-pthread"]);
    let (p, _) = f.profile(&["--ready", "stdout:^ready"], &prog, &[]).ok();
    assert_eq!(p["stop"]["kind"], "ready");
    assert!(
        !touched(&p, "/busy").contains(&"late_only".to_string()),
        "nothing recorded after readiness"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ok", "threads ran on after detach");
}

#[test]
fn follow_exec_profiles_the_next_program() {
    let f = Fixture::new();
    let second = f.program("second_image", PLAIN, &[]);
    let source = include_str!("fixtures/profile/first_image.c")
        .replace("@PATH@", &second.display().to_string());
    let first = f.program("first_image", &source, &[]);

    // By default the program executed is profiled (a wrapper's program is the one wanted).
    let (p, _) = f.profile(&[], &first, &[]).ok();
    assert!(touched(&p, "/first_image").contains(&"before_exec".to_string()));
    assert_eq!(touched(&p, "/second_image"), ["_start", "main", "step_one", "step_two"]);
    let images: Vec<(&str, &str, bool)> = p["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["path"].as_str().unwrap(), i["via"].as_str().unwrap(), i["profiled"] == true))
        .collect();
    let (first_path, second_path) = (first.to_str().unwrap(), second.to_str().unwrap());
    assert_eq!(images, [(first_path, "start", true), (second_path, "exec", true)]);

    let run = f.profile(&["--no-follow-exec"], &first, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let p = run.profile.unwrap();
    assert!(touched(&p, "/first_image").contains(&"before_exec".to_string()));
    assert!(touched(&p, "/second_image").is_empty());
    assert_eq!(p["images"][1]["profiled"], false, "{}", p["images"]);
}

#[test]
fn posix_spawn_helpers_run_and_the_parent_is_profiled_on() {
    let f = Fixture::new();
    let prog = f.program("spawner", include_str!("fixtures/profile/spawner.c"), &[]);
    for flags in [&[][..], &["--follow-forks"][..], &["--follow-forks", "--follow-exec"][..]] {
        let (p, _) = f.profile(flags, &prog, &[]).ok();
        assert_eq!(p["stop"]["code"], 0, "{flags:?}: the helper ran and exited 0");
        assert!(touched(&p, "/spawner").contains(&"after_spawn".to_string()), "{flags:?}");
        if flags.contains(&"--follow-exec") {
            let paths: Vec<&str> = p["modules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["path"].as_str().unwrap())
                .collect();
            assert!(
                paths.iter().any(|m| m.ends_with("/true")),
                "the helper's image is profiled: {paths:?}"
            );
        }
    }
}

#[test]
fn vfork_child_with_every_signal_blocked_runs_under_the_default_tracer() {
    // What Python's subprocess does: block every signal, vfork, run code of its own in the
    // child, exec. A breakpoint the child reaches with SIGTRAP blocked would kill it.
    let f = Fixture::new();
    let prog = f.program("vforker", include_str!("fixtures/profile/vforker.c"), &[]);
    let (p, stderr) = f.profile(&[], &prog, &[]).ok();
    assert_eq!(p["stop"]["code"], 0, "the child ran and executed /bin/true: {stderr}");
    assert!(!stderr.contains("profiled again"), "no fallback was needed: {stderr}");
    let main = touched(&p, "/vforker");
    assert!(main.contains(&"after_child".to_string()), "{main:?}");
    assert!(!main.contains(&"in_child".to_string()), "the child is not followed: {main:?}");
}

#[test]
fn internal_function_of_the_c_library_run_with_every_signal_blocked_is_not_armed() {
    // Firefox's threads died of SIGTRAP now and then at exit: thread exit waits for a lock in
    // __lll_lock_wait_private with every signal blocked. The fixture calls it that way.
    let f = Fixture::new();
    let prog =
        f.program("private_blocked", include_str!("fixtures/profile/private_blocked.c"), &[]);
    let (p, stderr) = f.profile(&[], &prog, &[]).ok();
    assert_eq!(p["stop"]["code"], 0, "it ran to the end: {stderr}");
    assert!(!stderr.contains("profiled again"), "no fallback was needed: {stderr}");
    let main = touched(&p, "/private_blocked");
    assert!(main.contains(&"main".to_string()), "{main:?}");
}

#[test]
fn library_closed_and_opened_again_is_armed_again() {
    let f = Fixture::new();
    let plug = f.library(
        "libagain.so",
        "volatile int sink;\nvoid first_visit(void) { sink = 1; }\nvoid second_visit(void) { sink = 2; }\n",
        &[],
    );
    let source =
        include_str!("fixtures/profile/again.c").replace("@PATH@", &plug.display().to_string());
    let prog = f.program("again", &source, &["-ldl"]);
    let (p, _) = f.profile(&[], &prog, &[]).ok();
    assert_eq!(p["stop"]["code"], 0);
    let recorded = touched(&p, "/libagain.so");
    assert!(
        recorded.contains(&"first_visit".to_string())
            && recorded.contains(&"second_visit".to_string()),
        "{recorded:?}"
    );
}

#[test]
fn readiness_signals_of_measure_fd_file_and_tcp() {
    let f = Fixture::new();
    let marker = f.path().join("ready-marker");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let source = include_str!("fixtures/profile/signals.c")
        .replace("@PATH@", &marker.display().to_string())
        .replace("@PORT@", &port.to_string());
    let prog = f.program("signals", &source, &[]);
    let file_signal = format!("file:{}", marker.display());
    let tcp_signal = format!("tcp:{port}");
    for (mode, signal) in
        [("fd", "fd"), ("file", file_signal.as_str()), ("tcp", tcp_signal.as_str())]
    {
        let (p, _) = f
            .profile(&["--ready", signal, "--kill-at-ready", "--timeout", "20"], &prog, &[mode])
            .ok();
        assert_eq!(p["stop"]["kind"], "ready", "{mode}");
        assert_eq!(p["stop"]["signal"], signal);
        assert!(touched(&p, "/signals").contains(&"before_ready".to_string()), "{mode}");
        assert_no_process_runs(&prog);
    }
}

/// Whether the kernel can give transparent huge pages (the audit agent copies large text
/// segments into them; with `never` it keeps them file-backed).
fn huge_pages_possible() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|mode| !mode.contains("[never]"))
}

/// Several MiB of padding in the text (a function of its own), so that the audit agent
/// copies the segment into huge pages rather than writing into the file mapping.
const BIG_TEXT: &str = include_str!("fixtures/profile/big_text.c");

#[test]
fn large_text_copied_for_breakpoints_runs_and_records_every_thread_and_library() {
    let f = Fixture::new();
    let plug = f.library(
        "libbigplug.so",
        &format!("{BIG_TEXT}\nint plug_entry(int x) {{ return x * 5; }}\nint plug_idle(void) {{ return 0; }}\n"),
        &[],
    );
    let source = include_str!("fixtures/profile/big.c")
        .replace("@PATH@", &plug.display().to_string())
        .replace("@BIG_TEXT@", BIG_TEXT);
    let prog = f.program("big", &source, &["-ldl", "-pthread"]);
    let mut recorded = Vec::new();
    for (tracer, follow) in [("audit", false), ("ptrace", false), ("audit", true)] {
        let out = f.path().join(format!("{tracer}.json"));
        let result = coldstart()
            .args(["profile", "--tracer", tracer, "-o"])
            .arg(&out)
            .arg(if follow { "--follow-forks" } else { "--no-follow-forks" })
            .arg("--")
            .arg(&prog)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(0), "{tracer}: {stderr}");
        let stdout = String::from_utf8_lossy(&result.stdout);
        // The audit agent's private copy of the text (huge pages where the kernel has them)
        // replaces the file mapping; the ptrace tracer writes into the file mapping.
        let backing = if tracer == "audit" && huge_pages_possible() { "anonymous" } else { "file" };
        assert!(stdout.contains(&format!("text: {backing}")), "{tracer}: {stdout}");
        let p: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(p["stop"]["code"], 0, "{tracer}: the program itself succeeded");
        let mut exe = touched(&p, "/big");
        exe.sort();
        let mut expected = vec![
            "_start",
            "main",
            "run",
            "shared_by_all",
            "text_backing",
            "worker_0",
            "worker_1",
            "worker_2",
            "worker_3",
        ];
        if follow {
            // Recorded from the followed child.
            expected.insert(1, "in_child");
        }
        assert_eq!(exe, expected, "{tracer}: every thread's functions, each once");
        assert_eq!(touched(&p, "/libbigplug.so"), ["plug_entry"], "{tracer}");
        recorded.push(exe);
    }
    assert_eq!(recorded[0], recorded[1], "both tracers record the same functions");
}

#[test]
fn functions_run_by_destructors_at_exit_are_recorded_by_both_tracers() {
    let f = Fixture::new();
    f.library("libfini.so", include_str!("fixtures/profile/libfini.c"), &[]);
    // The executable's function runs from the library's destructor, after the loader has
    // begun closing objects at exit (the main program first).
    let source = include_str!("fixtures/profile/fini.c");
    let prog = f.program(
        "fini",
        source,
        &[
            &format!("-L{}", f.path().display()),
            "-lfini",
            &format!("-Wl,-rpath,{}", f.path().display()),
        ],
    );
    for tracer in ["audit", "ptrace"] {
        let (p, _) = f.profile(&["--tracer", tracer], &prog, &[]).ok();
        let exe = touched(&p, "/fini");
        assert!(exe.iter().any(|f| f == "called_at_unload"), "{tracer}: {exe:?}");
    }
}

/// What LLVM (`PrintStackTraceOnErrorSignal`) and Firefox's crash reporter do: install their
/// own `SIGTRAP` handler (LLVM's with `SA_NODEFER | SA_RESETHAND | SA_ONSTACK` on an
/// alternate stack), block `SIGTRAP` with the other signals, and list it in another handler's
/// mask. Each step calls a function of its own, which holds a breakpoint.
const OWN_SIGTRAP: &str = include_str!("fixtures/profile/own_sigtrap.c");

#[test]
fn breakpoints_never_reach_a_program_that_installs_its_own_sigtrap_handler_or_blocks_it() {
    let f = Fixture::new();
    let prog = f.program("own_sigtrap", OWN_SIGTRAP, &["-pthread"]);
    let plain = Command::new(&prog).output().unwrap();
    assert_eq!(plain.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "own traps 2, usr1 1\n");
    let out = f.path().join("p.json");
    let profiled = coldstart()
        .args(["profile", "--tracer", "audit", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&profiled.stderr);
    assert_eq!(profiled.status.code(), Some(0), "{stderr}");
    assert!(
        String::from_utf8_lossy(&profiled.stdout).starts_with("own traps 2, usr1 1\n"),
        "the program's own traps reach its handler, the agent's never do: {}",
        String::from_utf8_lossy(&profiled.stdout)
    );
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(p["stop"]["code"], 0);
    let functions = touched(&p, "/own_sigtrap");
    for f in ["after_own_handler", "while_blocked", "while_thread_blocked", "in_usr1"] {
        assert!(functions.contains(&f.to_string()), "{f} recorded: {functions:?}");
    }
}

#[test]
fn a_crash_the_audit_agent_causes_is_profiled_again_with_ptrace_and_blamed_on_the_profiler() {
    // A program that installs its SIGTRAP handler with the raw system call, which the agent
    // cannot see: under the agent its next breakpoint runs that handler, which crashes. It
    // never runs without a profiler, nor under ptrace, whose breakpoints are ptrace stops.
    let f = Fixture::new();
    let prog = f.program("raw_sigtrap", include_str!("fixtures/profile/raw_sigtrap.c"), &[]);
    assert_eq!(Command::new(&prog).output().unwrap().status.code(), Some(0));
    let (p, stderr) = f.profile(&[], &prog, &[]).ok();
    assert!(
        stderr.contains("under the audit tracer but not under the ptrace tracer")
            && stderr.contains("the profiler caused that crash"),
        "the crash is blamed on the profiler: {stderr}"
    );
    assert!(!stderr.contains("the program crashed during start-up"), "{stderr}");
    assert_eq!(p["stop"]["kind"], "exit");
    assert_eq!(p["stop"]["code"], 0);
    assert!(touched(&p, "/raw_sigtrap").contains(&"after_raw_handler".to_string()));
    let warnings = p["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str().unwrap().contains("the profiler caused that crash")),
        "the profile says so too: {warnings:?}"
    );
    // Asked for the audit tracer alone, the crash stays, and the report says what to try.
    let (stderr, _) = f.profile(&["--tracer", "audit"], &prog, &[]).exited(1);
    assert!(stderr.contains("--tracer ptrace"), "{stderr}");
}

/// Waits up to `limit` for `child` to exit; its exit code (a signal's number is 128 + it).
fn exit_within(child: &mut std::process::Child, limit: std::time::Duration) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Waits up to 20 s for a process running `exe`.
fn wait_for_process_running(exe: &Path) {
    for _ in 0..2000 {
        let running = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .any(|e| std::fs::read_link(e.path().join("exe")).is_ok_and(|t| t == exe));
        if running {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{} never ran", exe.display());
}

#[test]
fn an_interrupted_profile_kills_the_program_and_leaves_no_tracing_or_temporary_directory() {
    let f = Fixture::new();
    let prog = f.program(
        "sleeper",
        "#include <unistd.h>\nvoid nap(void) { sleep(120); }\nint main(void) { nap(); return 0; }\n",
        &[],
    );
    let tmp = f.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = f.path().join("p.json");
    let mut runs = vec![
        (&["--tracer", "audit"][..], libc::SIGTERM),
        (&["--tracer", "ptrace"][..], libc::SIGHUP),
    ];
    if coldstart_testkit::require_root("the page run's tracefs instance") {
        runs.push((&["--pages"][..], libc::SIGINT));
    }
    for (flags, signal) in runs {
        let mut child = coldstart()
            .arg("profile")
            .args(flags)
            .arg("-o")
            .arg(&out)
            .arg("--")
            .arg(&prog)
            .env("TMPDIR", &tmp)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let instance =
            PathBuf::from(format!("/sys/kernel/tracing/instances/coldstart-{}", child.id()));
        wait_for_process_running(&prog);
        if flags == ["--pages"] {
            assert!(instance.exists(), "the page run traces in {}", instance.display());
        }
        common::signal(child.id(), signal);
        let code = exit_within(&mut child, std::time::Duration::from_secs(10));
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert_eq!(code, Some(128 + signal), "{flags:?}: ended by the signal: {stderr}");
        assert!(stderr.contains("interrupted"), "{flags:?}: {stderr}");
        assert_no_process_runs(&prog);
        assert!(!instance.exists(), "{flags:?}: tracefs instance removed");
        let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.path()).collect();
        assert!(left.is_empty(), "{flags:?}: temporary files left: {left:?}");
        assert!(!out.exists(), "{flags:?}: no profile written");
    }
}

#[test]
fn a_killed_coldstarts_agent_directory_is_removed_at_the_next_start() {
    let f = Fixture::new();
    let prog = f.program("plain", PLAIN, &[]);
    let tmp = f.path().join("tmp");
    let stale = tmp.join("coldstart-audit-999999999-AbCdEf");
    let live = tmp.join(format!("coldstart-audit-{}-AbCdEf", std::process::id()));
    for d in [&stale, &live] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("coldstart-audit-agent.so"), b"x").unwrap();
    }
    let status = coldstart()
        .args(["profile", "-o"])
        .arg(f.path().join("p.json"))
        .arg("--")
        .arg(&prog)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    assert!(!stale.exists(), "the directory of a coldstart that is gone is removed");
    assert!(live.exists(), "the directory of a live process is kept");
}

#[test]
fn an_unwritable_output_is_refused_before_the_program_runs() {
    let f = Fixture::new();
    let marker = f.path().join("ran");
    let prog = f.program(
        "marks",
        &format!(
            "#include <stdio.h>\nint main(void) {{ FILE *f = fopen(\"{}\", \"w\"); return f == 0; }}\n",
            marker.display()
        ),
        &[],
    );
    for out in
        [f.path().join("no-such-dir/p.json"), PathBuf::from("/proc/p.json"), f.path().to_owned()]
    {
        let run =
            coldstart().args(["profile", "-o"]).arg(&out).arg("--").arg(&prog).output().unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{}: {stderr}", out.display());
        assert!(stderr.contains(&out.display().to_string()), "names the path: {stderr}");
        assert!(!marker.exists(), "{}: the program did not run", out.display());
    }
}

/// A parent that forks, makes a child with the raw clone system call (no fork handlers run,
/// as in Firefox's sandbox), executes itself again in a child (a browser's content process),
/// and runs another program in a child.
const FAMILY: &str = include_str!("fixtures/profile/family.c");

#[test]
fn children_running_their_parents_program_are_followed_by_default_and_others_are_listed() {
    let f = Fixture::new();
    let prog = f.program("family", FAMILY, &[]);
    let children = ["in_forked_child", "in_raw_clone_child", "in_reexecuted_child"];
    for tracer in ["audit", "ptrace"] {
        for follow in [None, Some("--no-follow-forks"), Some("--follow-forks")] {
            let flags: Vec<&str> = ["--tracer", tracer].into_iter().chain(follow).collect();
            let (p, stderr) = f.profile(&flags, &prog, &[]).ok();
            let functions: Vec<(String, i64)> = p["modules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["path"].as_str().unwrap().ends_with("/family"))
                .flat_map(|m| m["functions"].as_array().unwrap().iter())
                .map(|f| (f["names"][0].as_str().unwrap().to_owned(), f["pid"].as_i64().unwrap()))
                .collect();
            let pid_of = |name: &str| functions.iter().find(|(n, _)| n == name).map(|(_, p)| *p);
            let parent = pid_of("in_parent").expect("the parent is profiled");
            for child in children {
                match (follow, pid_of(child)) {
                    (Some("--no-follow-forks"), None) => {}
                    (Some("--no-follow-forks"), Some(_)) => {
                        panic!("{flags:?}: {child} recorded: {stderr}")
                    }
                    (_, Some(pid)) => assert_ne!(pid, parent, "{flags:?}: {child} is the child's"),
                    (_, None) => panic!("{flags:?}: {child} not recorded: {functions:?}"),
                }
            }
            let images = p["images"].as_array().unwrap();
            let true_image = images.iter().find(|i| i["path"].as_str().unwrap().ends_with("/true"));
            let Some(true_image) = true_image else {
                // The ptrace tracer lets a child it does not follow go at its fork.
                assert_eq!((tracer, follow), ("ptrace", Some("--no-follow-forks")), "{images:?}");
                continue;
            };
            assert_eq!(true_image["via"], "exec");
            assert_eq!(
                true_image["profiled"],
                follow == Some("--follow-forks"),
                "{flags:?}: another program is followed with --follow-forks only"
            );
        }
    }
}

#[test]
fn a_wrapper_is_not_ordered_silently() {
    // What `profile -- python3` gives through pyenv's shim: bash first, then the program it
    // executes, which touched far more functions.
    let f = Fixture::new();
    let module = |path: &str, names: &[&str], first: u64| {
        let functions: Vec<Value> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                serde_json::json!({"address": 4096 + 16 * i, "size": 16, "names": [n],
                    "first_touch_ns": first + i as u64, "pid": 1, "tid": 1, "ordinal": first + i as u64})
            })
            .collect();
        serde_json::json!({"path": path, "build_id": null, "size": 1, "mtime": 0, "load_bias": 0,
            "symbols": "symtab", "functions_total": names.len(), "functions": functions})
    };
    let many: Vec<String> = (0..40).map(|i| format!("py_{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let profile = serde_json::json!({
        "format": "coldstart-profile", "version": 1, "workload": "default", "command": ["python3"],
        "created_unix": 0, "duration_ns": 1, "stop": {"kind": "exit", "code": 0},
        "modules": [
            module("/usr/lib/x86_64-linux-gnu/libc.so.6", &["malloc", "free", "memcpy"], 0),
            module("/usr/bin/bash", &["main", "execute_command"], 3),
            module("/opt/python/bin/python3.11", &many, 5),
        ],
    });
    let path = f.path().join("p.json");
    std::fs::write(&path, profile.to_string()).unwrap();
    let run = coldstart().arg("order").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("ordered /usr/bin/bash") && stderr.contains("--module python3.11"),
        "says that bash was ordered and names the module that touched the most: {stderr}"
    );
    let run = coldstart().args(["order", "--module", "python3.11"]).arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!stderr.contains("touched the most"), "asked for: no wrapper warning: {stderr}");
}

/// Drop the page-cache pages of `path` (written pages first reach the disk).
fn evict(path: &Path) {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: advice on a descriptor we hold.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

#[test]
fn a_page_profile_names_files_opened_and_closed_and_says_when_they_were_cached() {
    if !coldstart_testkit::require_root("the page trace (tracefs) and open events (fanotify)") {
        return;
    }
    let f = Fixture::new();
    // Data files in a directory of their own, beside nothing the profile knows of, each read
    // whole with read(2) and closed long before the program ends (as Python reads .pyc files).
    let data = f.path().join("data/sub");
    std::fs::create_dir_all(&data).unwrap();
    let names = ["a.dat", "b.dat", "c.dat"];
    for (i, name) in names.iter().enumerate() {
        std::fs::write(data.join(name), vec![b'a' + i as u8; 3 * 4096]).unwrap();
    }
    let prog = f.program("reader", include_str!("fixtures/profile/reader.c"), &[]);
    let paths: Vec<PathBuf> = names.iter().map(|n| data.join(n)).collect();
    let args: Vec<&str> = paths.iter().map(|p| p.to_str().unwrap()).collect();
    paths.iter().for_each(|p| evict(p));
    let (p, stderr) = f.profile(&["--pages=traced"], &prog, &args).ok();
    let files = p["pages"]["files"].as_array().unwrap();
    let unnamed: Vec<&Value> = files.iter().filter(|f| f["path"] == "").collect();
    assert!(unnamed.is_empty(), "every file is named: {unnamed:?}");
    for path in &args {
        assert!(files.iter().any(|f| f["path"] == *path), "{path} in the page profile");
    }
    assert!(!stderr.contains("a.dat"), "evicted files are not called cached: {stderr}");

    // Read again, the files are in the page cache: no event names their pages, and the
    // profile says so.
    let (_, stderr) = f.profile(&["--pages=traced"], &prog, &args).ok();
    assert!(
        stderr.contains("already in the page cache") && stderr.contains("a.dat"),
        "the cached files are named in a warning: {stderr}"
    );
    // The exact profile reads private copies, cold: every page of each file, no warning.
    let (p, stderr) = f.profile(&["--pages"], &prog, &args).ok();
    assert!(!stderr.contains("already in the page cache"), "{stderr}");
    let pages = &p["pages"];
    let files = pages["files"].as_array().unwrap();
    for path in &args {
        let index = files.iter().position(|f| f["path"] == *path).unwrap();
        let mut got: Vec<u64> = pages["accesses"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["file"] == index)
            .flat_map(|a| {
                let first = a["page"].as_u64().unwrap();
                first..first + a["count"].as_u64().unwrap()
            })
            .collect();
        got.sort();
        assert_eq!(got, [0, 1, 2], "{path}");
    }
}
