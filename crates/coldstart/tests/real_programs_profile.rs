//! `coldstart profile` on Debian's programs, which nobody here wrote: Python, clang, Perl, git,
//! Node.js and OpenJDK (runtimes with a JIT), Firefox and Python through a version manager's
//! shim.
//!
//! Each must pass two checks. With the default tracer, profiling neither crashes the program
//! nor changes its exit status or its output, and the audit agent handles it without falling
//! back to ptrace. With `--pages` (root), every file of the page profile is named, by the
//! path that has its device and inode. A program that fails is a failure, not a skip; one
//! that is not installed is skipped (`COLDSTART_TESTS_NO_SKIP=1` makes that a failure too).
//! Python through a shim runs Debian's python3 through a pyenv-like wrapper script the test
//! writes, so it runs wherever Debian's python3 is.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

/// One program and how to run it.
struct Program {
    command: Vec<String>,
    /// Extra environment (Firefox's profile directory).
    env: Vec<(String, PathBuf)>,
    dir: tempfile::TempDir,
}

impl Program {
    fn new(command: &[&str]) -> Program {
        Program {
            command: command.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn label(&self) -> String {
        self.command.join(" ")
    }

    /// Run it without coldstart: exit status and standard output.
    fn plain(&self) -> (Option<i32>, String) {
        let out = Command::new(&self.command[0])
            .args(&self.command[1..])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `coldstart profile FLAGS -o DIR/NAME.json -- COMMAND`: exit status, standard output,
    /// standard error and the profile.
    fn profile(&self, flags: &[&str], name: &str) -> (Option<i32>, String, String, Value) {
        let out = self.dir.path().join(format!("{name}.json"));
        let run = Command::cargo_bin("coldstart")
            .unwrap()
            .args(["profile", "--timeout", "120"])
            .args(flags)
            .arg("-o")
            .arg(&out)
            .arg("--")
            .args(&self.command)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        let text = std::fs::read_to_string(&out)
            .unwrap_or_else(|e| panic!("{}: no profile ({e}): {stderr}", self.label()));
        (run.status.code(), stdout, stderr, serde_json::from_str(&text).unwrap())
    }

    /// The default tracer neither crashes the program nor changes its exit status or output,
    /// and needs no fallback. Returns the profile.
    fn check_default_tracer(&self) -> Value {
        let (plain_code, plain_stdout) = self.plain();
        let (code, stdout, stderr, p) = self.profile(&[], "functions");
        let label = self.label();
        assert_eq!(code, Some(0), "{label}: coldstart profile: {stderr}");
        assert_eq!(p["stop"]["kind"], "exit", "{label}: {}", p["stop"]);
        assert_eq!(
            p["stop"]["code"].as_i64().map(|c| c as i32),
            plain_code,
            "{label}: exit status"
        );
        // The program's output comes first; coldstart's summary follows it.
        let program_output = stdout.split("profile `default`:").next().unwrap_or_default();
        assert_eq!(program_output, plain_stdout, "{label}: the program's output is unchanged");
        assert!(
            !stderr.contains("profiled again with the ptrace tracer"),
            "{label}: the default tracer handled it without falling back: {stderr}"
        );
        let functions: usize = p["modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["functions"].as_array().unwrap().len())
            .sum();
        assert!(functions > 50, "{label}: start-up functions recorded: {functions}");
        p
    }

    /// The regular files the program opens, from `strace`.
    fn opened_files(&self) -> Vec<PathBuf> {
        let log = self.dir.path().join("strace.log");
        let status = Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=open,openat,openat2", "-e", "status=successful", "-o"])
            .arg(&log)
            .arg("--")
            .args(&self.command)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap()
            .status;
        assert!(status.code().is_some(), "strace ran {}", self.label());
        let text = std::fs::read_to_string(&log).unwrap();
        let mut files: Vec<PathBuf> = text
            .lines()
            .filter_map(|l| l.split('"').nth(1))
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p.is_file())
            .collect();
        files.sort();
        files.dedup();
        files
    }

    /// `--pages` names every file of the page profile, by a path with its device and inode,
    /// in a run whose files were evicted from the page cache first (what the traced method
    /// needed to see what the program reads with `read(2)`: Python's `.pyc` files), and the
    /// profile is exact: each page once, every file the program read on the private copy.
    fn check_pages_named(&self) -> Option<Value> {
        if !coldstart_testkit::require_root("the page trace (tracefs) and open events (fanotify)")
            || !coldstart_testkit::require_program("strace", "strace")
        {
            return None;
        }
        let label = self.label();
        let _cache = coldstart_testkit::cache_lock();
        let opened = self.opened_files();
        assert!(!opened.is_empty(), "{label}: strace saw the files it opens");
        for f in &opened {
            evict(f);
        }
        let (code, _, stderr, p) = self.profile(&["--pages"], "pages");
        assert_eq!(code, Some(0), "{label}: coldstart profile --pages: {stderr}");
        let files = p["pages"]["files"].as_array().unwrap();
        assert!(files.len() > 3, "{label}: files in the page profile: {files:?}");
        for f in files {
            let path = Path::new(f["path"].as_str().unwrap());
            assert!(!path.as_os_str().is_empty(), "{label}: a file named by inode only: {f}");
            // The name is right: that path is the file the trace saw (unless the program
            // has replaced it since, as Firefox rewrites its session files).
            if let Ok(meta) = std::fs::metadata(path) {
                let dev = format!("{}:{}", libc::major(meta.dev()), libc::minor(meta.dev()));
                if dev == f["dev"] && f["mtime"] == meta.mtime() {
                    assert_eq!(meta.ino(), f["ino"].as_u64().unwrap(), "{label}: {f}");
                }
            }
        }
        assert!(
            !stderr.contains("named by device and inode only"),
            "{label}: every file named: {stderr}"
        );
        // Exact: each page once, and every file it read was on the private copy.
        assert_eq!(p["pages"]["source"], "exact", "{label}");
        let mut seen = std::collections::HashSet::new();
        for a in p["pages"]["accesses"].as_array().unwrap() {
            let first = a["page"].as_u64().unwrap();
            for page in first..first + a["count"].as_u64().unwrap() {
                assert!(seen.insert((a["file"].as_u64(), page)), "{label}: {a} twice");
            }
        }
        assert!(!stderr.contains("not on the private copy"), "{label}: {stderr}");
        Some(p)
    }
}

/// Drop the page-cache pages of `path` that no process maps.
fn evict(path: &Path) {
    if let Ok(file) = std::fs::File::open(path) {
        let _ = coldstart_sys::file::drop_cached(&file);
    }
}

/// The installed program, or `None` (after [`coldstart_testkit::require_program`]).
fn installed(program: &str, package: &str) -> Option<PathBuf> {
    coldstart_testkit::require_program(program, package)
        .then(|| coldstart_testkit::which(program))?
}

#[test]
fn debian_python3_runs_unchanged_under_the_profiler_and_every_page_file_is_named() {
    let python = Path::new("/usr/bin/python3");
    if !coldstart_testkit::require(
        python.exists(),
        "Debian's /usr/bin/python3 (apt-get install python3)",
    ) {
        return;
    }
    let program =
        Program::new(&["/usr/bin/python3", "-c", "import json, email.parser; print('ok')"]);
    program.check_default_tracer();
    program.check_pages_named();
}

#[test]
fn clang_19_records_libllvm_functions_though_llvm_handles_sigtrap_itself() {
    let Some(clang) = installed("clang-19", "clang-19") else { return };
    let program = Program::new(&[clang.to_str().unwrap(), "--version"]);
    let p = program.check_default_tracer();
    // LLVM's crash handler for SIGTRAP once took the agent's breakpoints and returned past
    // them: the functions after it are recorded now.
    let llvm: Vec<&Value> = p["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["path"].as_str().unwrap().contains("libLLVM"))
        .collect();
    assert!(llvm.iter().any(|m| !m["functions"].as_array().unwrap().is_empty()), "{llvm:?}");
    program.check_pages_named();
}

#[test]
fn perl_runs_unchanged_under_the_profiler_and_every_page_file_is_named() {
    let Some(perl) = installed("perl", "perl") else { return };
    let program = Program::new(&[
        perl.to_str().unwrap(),
        "-MPOSIX",
        "-e",
        "print POSIX::floor(2.5), qq{\\n}",
    ]);
    program.check_default_tracer();
    program.check_pages_named();
}

#[test]
fn a_stripped_git_is_profiled_and_said_to_lack_function_symbols() {
    let Some(git) = installed("git", "git") else { return };
    let program = Program::new(&[git.to_str().unwrap(), "--version"]);
    let p = program.check_default_tracer();
    // Debian's git is stripped but for one exported function: the summary says so.
    let warnings = p["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str().unwrap().contains("without function symbols")),
        "{warnings:?}"
    );
    program.check_pages_named();
}

/// The profile was recorded by the audit tracer, without a fallback: the dynamic loader,
/// which only the ptrace tracer profiles, is not among its modules, and no warning says the
/// program was profiled again.
fn assert_recorded_by_the_audit_tracer(p: &Value, label: &str) {
    let modules = p["modules"].as_array().unwrap();
    assert!(
        !modules.iter().any(|m| m["path"].as_str().unwrap().contains("/ld-linux")),
        "{label}: the loader is profiled, so the ptrace tracer ran"
    );
    let warnings = p["warnings"].as_array().unwrap();
    assert!(
        !warnings.iter().any(|w| w.as_str().unwrap().contains("ptrace")),
        "{label}: {warnings:?}"
    );
}

/// The first touches of `names` (the first name of a function, in any module), in the
/// order given: each is recorded, and each after the one before. Returns the functions'
/// records.
fn assert_first_touch_order<'a>(p: &'a Value, names: &[&str], label: &str) -> Vec<&'a Value> {
    let functions: Vec<&Value> = p["modules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["functions"].as_array().unwrap().iter())
        .collect();
    let found: Vec<&Value> = names
        .iter()
        .map(|name| {
            *functions
                .iter()
                .find(|f| f["names"][0] == *name)
                .unwrap_or_else(|| panic!("{label}: {name} is not in the profile"))
        })
        .collect();
    for pair in found.windows(2) {
        assert!(
            pair[0]["ordinal"].as_u64() < pair[1]["ordinal"].as_u64(),
            "{label}: {} runs before {}",
            pair[0]["names"][0],
            pair[1]["names"][0]
        );
    }
    found
}

/// Node.js's start-up, as far as every build of it names it: `main`, then `node::Start`,
/// which initialises V8 and then the isolate. (Nodesource's `node` has them all in its own
/// symbol table; Debian's calls into libnode.so, which exports them.)
const NODE_START: [&str; 4] = [
    "main",
    "_ZN4node5StartEiPPc",
    "_ZN2v82V810InitializeEi",
    "_ZN2v87Isolate10InitializeEPS0_RKNS0_12CreateParamsE",
];

/// V8 copies its embedded builtins (code in the `node` executable, or in libnode.so) into
/// its code range at start-up. The agent's breakpoints went with them, and the first builtin
/// run from the copy, at an address the agent had no entry for, killed Node.js with SIGTRAP;
/// the default tracer then fell back to ptrace.
#[test]
fn nodejs_runs_to_the_end_under_the_audit_tracer() {
    let Some(node) = installed("node", "nodejs") else { return };
    let node = node.to_str().unwrap();
    let script = "require('http'); require('zlib'); console.log('ok')";
    let program = Program::new(&[node, "-e", script]);
    let label = program.label();
    let p = program.check_default_tracer();
    assert_recorded_by_the_audit_tracer(&p, &label);
    let start = assert_first_touch_order(&p, &NODE_START, &label);
    // All of them on the main thread, which runs JavaScript.
    assert!(start.iter().all(|f| f["tid"] == start[0]["tid"]), "{label}: {start:?}");
    let node_module = p["modules"].as_array().unwrap().iter().find(|m| m["path"] == node);
    assert!(
        node_module.is_some_and(|m| !m["functions"].as_array().unwrap().is_empty()),
        "{label}: functions of {node} are named"
    );
}

/// `--use-largepages=on` makes Node.js copy its text into huge pages and make it read-only
/// again: the agent died of SIGSEGV putting back the next breakpoint's byte. V8 then copies
/// its builtins from that text (there is no file mapping left to map again): under ptrace,
/// the copy carried its breakpoints and Node.js died of SIGTRAP.
#[test]
fn nodejs_moving_its_text_to_large_pages_runs_under_both_tracers() {
    let Some(node) = installed("node", "nodejs") else { return };
    let program = Program::new(&[node.to_str().unwrap(), "--use-largepages=on", "-e", "1"]);
    let label = program.label();
    let p = program.check_default_tracer();
    assert_recorded_by_the_audit_tracer(&p, &label);
    assert_first_touch_order(&p, &NODE_START, &label);
    let (code, _, stderr, p) = program.profile(&["--tracer", "ptrace"], "ptrace");
    assert_eq!(code, Some(0), "{label}: coldstart profile --tracer ptrace: {stderr}");
    assert_eq!(p["stop"]["kind"], "exit", "{label}: {}", p["stop"]);
    assert_eq!(p["stop"]["code"], 0, "{label}");
    assert_first_touch_order(&p, &NODE_START, &label);
}

/// A Java program that keeps the JIT busy and starts a thread of its own.
const JAVA_PROGRAM: &str = r#"
import java.util.*;
import java.util.stream.*;
public class Hello {
    public static void main(String[] args) throws Exception {
        Map<String, Integer> m = new HashMap<>();
        for (int i = 0; i < 200000; i++) m.merge("k" + (i % 1000), i, Integer::sum);
        String s = m.entrySet().stream().sorted(Map.Entry.comparingByKey()).limit(3)
            .map(e -> e.getKey() + "=" + e.getValue()).collect(Collectors.joining(","));
        Thread t = new Thread(() -> System.out.println("from " + Thread.currentThread().getName()));
        t.start();
        t.join();
        System.out.println("hello " + s);
    }
}
"#;

/// OpenJDK's HotSpot: the launcher, the VM it starts in a thread of its own, and the JIT
/// compiler threads, which compile the program's loop.
#[test]
fn openjdk_runs_under_the_audit_tracer_with_its_compiler_threads() {
    let Some(java) = installed("java", "openjdk-17-jre-headless") else { return };
    let java = java.to_str().unwrap();
    let version = Program::new(&[java, "-version"]);
    assert_recorded_by_the_audit_tracer(&version.check_default_tracer(), &version.label());
    // Compiled in memory by the source launcher (javac, running on the same VM), then run.
    let mut program = Program::new(&[]);
    let source = program.dir.path().join("Hello.java");
    std::fs::write(&source, JAVA_PROGRAM).unwrap();
    program.command = vec![java.into(), source.to_str().unwrap().into()];
    let label = program.label();
    let p = program.check_default_tracer();
    assert_recorded_by_the_audit_tracer(&p, &label);
    let vm = assert_first_touch_order(
        &p,
        &[
            "JLI_Launch",
            "JavaMain",
            "JNI_CreateJavaVM",
            "_ZN7Threads9create_vmEP14JavaVMInitArgsPb",
        ],
        &label,
    );
    let compiled = assert_first_touch_order(
        &p,
        &[
            "_ZN7Threads9create_vmEP14JavaVMInitArgsPb",
            "_ZN13CompileBroker25invoke_compiler_on_methodEP11CompileTask",
        ],
        &label,
    );
    assert_ne!(compiled[1]["tid"], vm[3]["tid"], "{label}: compiled in a compiler thread");
}

#[test]
fn firefox_esr_content_processes_are_followed_and_its_stripped_libxul_is_profiled_by_page() {
    let Some(firefox) = installed("firefox-esr", "firefox-esr") else { return };
    let mut program = Program::new(&[]);
    let home = program.dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let shot = program.dir.path().join("shot.png");
    program.command = vec![
        firefox.to_str().unwrap().into(),
        "--headless".into(),
        "--screenshot".into(),
        shot.to_str().unwrap().into(),
        "about:blank".into(),
    ];
    program.env.push(("HOME".into(), home));
    let p = program.check_default_tracer();
    assert!(shot.exists(), "the screenshot was taken under the profiler");
    // Its content processes run the same program: followed by default, and said so.
    let images = p["images"].as_array().unwrap();
    let children =
        images.iter().filter(|i| i["profiled"] == true && i["pid"] != images[0]["pid"]).count();
    assert!(children > 0, "content processes followed: {images:?}");
    // libxul.so is stripped: it is profiled at page level, and the page run gives the share
    // of start-up's CPU time it ran.
    if let Some(p) = program.check_pages_named() {
        let warnings = p["warnings"].as_array().unwrap();
        assert!(
            warnings.iter().any(|w| {
                let w = w.as_str().unwrap();
                w.contains("libxul.so") && w.contains("of the program's CPU time")
            }),
            "{warnings:?}"
        );
    }
}

#[test]
fn python3_through_a_shim_profiles_python_and_order_names_it() {
    // A wrapper script as pyenv's shim is: bash running `pyenv exec`, another bash, which
    // execs the real python.
    let python = Path::new("/usr/bin/python3");
    if !coldstart_testkit::require(
        python.exists(),
        "Debian's /usr/bin/python3 (apt-get install python3)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("python3");
    std::fs::write(
        &shim,
        "#!/bin/bash\nexec /bin/bash -c 'exec /usr/bin/python3 \"$@\"' pyenv-exec \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let program = Program::new(&[shim.to_str().unwrap(), "-c", "print('ok')"]);
    let p = program.check_default_tracer();
    let images = p["images"].as_array().unwrap();
    let root = &images[0]["pid"];
    let last = images.iter().rev().find(|i| i["pid"] == *root && i["profiled"] == true).unwrap();
    assert!(
        Path::new(last["path"].as_str().unwrap())
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("python")),
        "the wrapper's program is profiled: {images:?}"
    );
    let out = Command::cargo_bin("coldstart")
        .unwrap()
        .arg("order")
        .arg(program.dir.path().join("functions.json"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("touched the most")
            && stderr.contains("--module")
            && stderr.contains("python"),
        "order names the module where Python ran: {stderr}"
    );
}
