//! Every example of every `--help` runs, as written, on real fixtures.
//!
//! The examples are read from the built binary's `--help` (every subcommand, and theirs), so a
//! new example is run without editing this file. Each line is split as a shell would (quotes,
//! `&&`, `> FILE`, a leading `sudo` or `VAR=value`); a trailing `(comment)` is dropped, and
//! `(then: ...)` is an example too. Every example must exit 0, except `verify`, `link` and
//! `gate`, whose exit 1 is a verdict ("the order did not take effect", "slower").
//!
//! What the examples name that does not exist here is replaced, token by token (whole words,
//! or the start of a path), by a fixture:
//!
//! | in the examples | here |
//! | --- | --- |
//! | `./myprog`, `./prog`, `./old`, `./build/myprog`, `./build/app`, `/opt/app/bin/app`, `./sample`, `bin/app` and `{root}/bin/app` run as a command, with `--version` or no arguments | the sample program (`coldstart sample`'s first example), `--workload a` |
//! | the same with `--open big.txt`, `b` or `--workload b`; `./new` | the sample program, `--workload b` |
//! | `./prog`, `./myprog`, `/opt/app`, `/var/tmp/app`, `DIR` named as a file or directory | the sample program, its directory |
//! | `./server` | a script that prints `listening` and waits |
//! | `/var/tmp/...`, `/srv/bundles/app`, `/mnt/app`, `/var/cache/coldstart`, `~` | directories of the test's own |
//! | `http://127.0.0.1:8080/`, `http://bundles.example/app/`, `http://cdn.example/app`, `origin.example:8080` | `coldstart serve` of the bundle the `pack` examples made |
//! | `https://bundles.example/app/` and `ca.pem` | nginx over https serving that bundle, with a certificate from a CA of the test's own |
//! | `s3://my-bundles/...`, `s3://bundles/...`, `http://127.0.0.1:5000` | buckets on moto's S3 server, found through `AWS_ENDPOINT_URL` and the `ci` profile of `~/.aws/config` |
//! | `build/myprog`, `make -B -C build` (`link`, `verify`) | the sample program and its own Makefile; `order.txt` is the order the `order` examples wrote (`prog.order`) |
//! | `target/release/myprog`, `cargo build --release` | a Cargo project of the test's own; its order from a profile of its first build |
//! | `myprog`, `main.c` (`link ... -- clang-19 ...`), `hello.c` | a C program of the test's own; its order from a profile of its first build |
//! | `./myprog` linked with `--emit-relocs` (`bolt`) | the sample program, which is; `order.txt` the `bolt` example's own |
//! | `a.json`, `profile-a.json`, `held-out.json`, `measure.json` | `p.json`, `p.json`, `b.json` (made by the `profile` examples) and a measurement of the sample |
//! | `p.json` of `--module libclang-cpp.so.19.1` | the profile the `clang-19 -c hello.c` example recorded |
//! | `app.bundle`, `p.prefetch`, `release.key.pub` | the bundle at `/srv/bundles/app`, `prog.prefetch` (the `prefetch` examples), `~/.config/coldstart/release.key.pub` (the `key` example) |
//!
//! `python3`, `/usr/bin/python3.11`, `clang-19` and `firefox-esr` are themselves. `coldstart
//! demo` without `--dir` writes where it says, `/var/tmp/coldstart-demo`. A `serve` or `mount`
//! example runs until it is ready (its URL printed; the sample under the mount point), then is
//! stopped with SIGTERM. Each `pack` example starts where no bundle is (pack never replaces
//! one).
//!
//! Run counts are capped so that the whole takes minutes, with every flag still given as
//! written: `--runs` at most 3 (1 for `experiment`, `demo` and `prefetch record`), and `gate`,
//! `experiment` and `demo` are given run counts (`--runs`, `--cold-runs`, `--batch`,
//! `--cold-batch`, `--max-runs`, `--page-profiles`) where the example leaves them at their defaults.
//!
//! Needs root (cgroups, FUSE, tracefs, the page profiler), nginx, openssl, moto_server,
//! clang-19, make, cargo, llvm-bolt-19 and firefox-esr, as `scripts/setup.sh` installs them.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{moto_server, require_program, require_root, KillOnDrop};

fn coldstart() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coldstart"))
}

/// The `--help` text of `coldstart ARGS --help`.
fn help(args: &[&str]) -> String {
    let out = coldstart().args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "{args:?} --help");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a help text lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect()
}

/// The example lines of a help text: the indented lines after `Examples:`.
fn examples_of(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Examples:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_owned())
        .collect()
}

/// Every example of every subcommand's help, once, with the subcommand whose help shows it.
fn all_examples() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |from: &str, text: &str| {
        for e in examples_of(text) {
            if !out.iter().any(|(_, x)| *x == e) {
                out.push((from.to_owned(), e));
            }
        }
    };
    for sub in subcommands(&help(&[])) {
        let text = help(&[&sub]);
        add(&sub, &text);
        for subsub in subcommands(&text) {
            add(&sub, &help(&[&sub, &subsub]));
        }
    }
    out
}

/// Split a line as a shell would: words, single and double quotes.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (_, c) => (cur, any) = (cur + &c.to_string(), true),
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// One command of an example, ready to run.
#[derive(Debug, Default)]
struct Step {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    stdout_to: Option<String>,
}

/// The commands of an example line: its comment dropped, split at `&&`, `sudo`, `VAR=value`
/// and `> FILE` taken out.
fn steps(line: &str) -> Vec<Step> {
    let mut line = line.trim();
    if let Some(then) = line.strip_prefix("(then: ").and_then(|l| l.strip_suffix(')')) {
        line = then;
    }
    // A comment: a parenthesis after two spaces or more, to the end of the line.
    if let Some(at) = line.find("  (") {
        line = line[..at].trim_end();
    }
    line.split(" && ")
        .map(|part| {
            let mut step = Step::default();
            let mut w = words(part).into_iter().peekable();
            while let Some(x) =
                w.next_if(|x| x == "sudo" || (x.contains('=') && !x.starts_with('-')))
            {
                if let Some((k, v)) = x.split_once('=') {
                    step.env.push((k.to_owned(), v.to_owned()));
                }
            }
            while let Some(x) = w.next() {
                if x == ">" {
                    step.stdout_to = w.next();
                } else {
                    step.argv.push(x);
                }
            }
            step
        })
        .collect()
}

/// The fixtures and the substitutions of the module docs.
struct Bed {
    dir: PathBuf,
    sample: PathBuf,
    subst: BTreeMap<String, String>,
    _servers: Vec<KillOnDrop>,
}

/// Program placeholders that run the sample when they are a command.
const PROGRAMS: [&str; 11] = [
    "./myprog",
    "./prog",
    "./old",
    "./new",
    "./build/myprog",
    "./build/app",
    "/opt/app/bin/app",
    "./sample",
    "bin/app",
    "{root}/bin/app",
    "build/myprog",
];

impl Bed {
    fn path(&self, p: &str) -> String {
        self.dir.join(p).to_string_lossy().into_owned()
    }

    /// `argv` with the placeholders replaced (see the module docs), for an example of
    /// `from`.
    fn substitute(&self, from: &str, argv: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut command_at = false;
        let mut i = 0;
        while i < argv.len() {
            let a = argv[i].as_str();
            if a == "--" || a == ":::" {
                out.push(a.to_owned());
                command_at = true;
                i += 1;
                continue;
            }
            // A program of the sample's, run as a command: the rest of the command is its
            // arguments, mapped to a workload.
            let base = a.split_whitespace().next().unwrap_or(a);
            let program_here = PROGRAMS.contains(&base)
                && (command_at || a.contains(' '))
                && !(from == "link" && a == "build/myprog");
            if program_here {
                // A quoted command is one word; else the command runs to `:::` or the end.
                let mut rest: Vec<&str> = a.split_whitespace().skip(1).collect();
                let end = match a.contains(' ') {
                    true => i + 1,
                    false => argv[i + 1..]
                        .iter()
                        .position(|x| x == ":::")
                        .map_or(argv.len(), |p| i + 1 + p),
                };
                rest.extend(argv[i + 1..end].iter().map(String::as_str));
                let b = base == "./new" || rest.iter().any(|r| *r == "b" || *r == "--open");
                let workload = if b { "--workload b" } else { "--workload a" };
                let program = if base.starts_with("{root}") {
                    "{root}/sample".to_owned()
                } else if from == "experiment" {
                    "sample".to_owned()
                } else {
                    self.sample.to_string_lossy().into_owned()
                };
                if a.contains(' ') {
                    out.push(format!("{program} {workload}"));
                } else {
                    out.push(program);
                    out.extend(workload.split(' ').map(str::to_owned));
                }
                command_at = false;
                i = end;
                continue;
            }
            command_at = false;
            let prev = if i > 0 { argv[i - 1].as_str() } else { "" };
            match self.subst.get(&format!("{from} {prev} {a}")) {
                Some(s) => out.push(s.clone()),
                None => out.push(self.word(from, a)),
            }
            i += 1;
        }
        out
    }

    /// One word: a placeholder file, directory or URL replaced (whole, or as the start of a
    /// path).
    fn word(&self, from: &str, a: &str) -> String {
        let key = format!("{from} {a}");
        if let Some(s) = self.subst.get(&key).or_else(|| self.subst.get(a)) {
            return s.clone();
        }
        let mut best: Option<(&String, &String)> = None;
        for (k, v) in &self.subst {
            let prefix = k.ends_with('/') || k.ends_with(':');
            if (prefix && a.starts_with(k.as_str())) && best.is_none_or(|(b, _)| k.len() > b.len())
            {
                best = Some((k, v));
            }
        }
        match best {
            Some((k, v)) => format!("{v}{}", &a[k.len()..]),
            None if a.starts_with("~/") => self.path(&format!("home/{}", &a[2..])),
            None => a.to_owned(),
        }
    }
}

/// Run `argv` to its end (bounded), with its stdout to `stdout_to`; its exit code and output.
fn run(bed: &Bed, step: &Step, argv: &[String]) -> (Option<i32>, String) {
    let mut cmd = if argv[0] == "coldstart" { coldstart() } else { Command::new(&argv[0]) };
    cmd.args(&argv[1..]).current_dir(&bed.dir).env("HOME", bed.dir.join("home"));
    // The empty HOME keeps rustup's toolchains where they are.
    if let Some(home) = std::env::var_os("HOME") {
        let home = PathBuf::from(home);
        for (var, dir) in [("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")] {
            if std::env::var_os(var).is_none() {
                cmd.env(var, home.join(dir));
            }
        }
    }
    cmd.env("AWS_CONFIG_FILE", bed.dir.join("home/.aws/config"));
    cmd.env("AWS_SHARED_CREDENTIALS_FILE", bed.dir.join("home/.aws/credentials"));
    for (k, v) in &step.env {
        cmd.env(k, v);
    }
    match &step.stdout_to {
        Some(f) => cmd.stdout(std::fs::File::create(bed.dir.join(f)).unwrap()),
        None => cmd.stdout(Stdio::piped()),
    };
    let out = cmd.stderr(Stdio::piped()).output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// Start a command that serves until stopped (`serve`, `mount`), wait until it is ready
/// (`serve`: it printed its URL; `mount`: `ready` holds), stop it with SIGTERM (as a service
/// manager stops it) and wait for its end.
fn run_until_ready(bed: &Bed, argv: &[String], ready: impl Fn() -> bool) -> (Option<i32>, String) {
    let serve = argv[1] == "serve";
    let mut child = coldstart()
        .args(&argv[1..])
        .current_dir(&bed.dir)
        .env("HOME", bed.dir.join("home"))
        .env("AWS_CONFIG_FILE", bed.dir.join("home/.aws/config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", bed.dir.join("home/.aws/credentials"))
        .stdout(if serve { Stdio::piped() } else { Stdio::null() })
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if serve {
        use std::io::BufRead;
        let mut line = String::new();
        let _ = std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        let printed = line.starts_with("http://");
        common::signal(child.id(), libc::SIGTERM);
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        return match printed {
            true => (Some(0), text),
            false => (out.status.code(), format!("printed no URL: {text}")),
        };
    }
    let t = Instant::now();
    while !ready() && t.elapsed() < Duration::from_secs(30) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let was_ready = ready();
    common::signal(child.id(), libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    match was_ready {
        true => (Some(0), text),
        false => (out.status.code(), format!("never ready: {text}")),
    }
}

/// Cap the run counts of `argv` (module docs).
fn cap_runs(argv: &mut Vec<String>) {
    let sub = argv.get(1).cloned().unwrap_or_default();
    let cap = match sub.as_str() {
        "experiment" | "demo" | "prefetch" => 1,
        _ => 3,
    };
    for i in 1..argv.len() {
        if argv[i - 1] == "--runs" {
            if let Ok(n) = argv[i].parse::<usize>() {
                argv[i] = n.min(cap).to_string();
            }
        }
    }
    let has = |f: &str| argv.iter().any(|a| a == f);
    let mut add = Vec::new();
    match sub.as_str() {
        "gate" if has("--update") => {
            add.extend(["--runs", "3", "--cold-runs", "3", "--page-profiles", "1"])
        }
        "gate" => add.extend(["--batch", "3", "--cold-batch", "3", "--max-runs", "3"]),
        "experiment" | "demo" if !has("--runs") => add.extend(["--runs", "1"]),
        _ => {}
    }
    if !add.is_empty() {
        let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
        for (k, a) in add.into_iter().enumerate() {
            argv.insert(at + k, a.to_owned());
        }
    }
}

/// Each subcommand's examples run in this order (files made by one are used by the next);
/// within a subcommand, in the help's order.
const ORDER: [&str; 23] = [
    "sample",
    "profile",
    "prefetch",
    "launch",
    "measure",
    "order",
    "analyze",
    "bolt",
    "link",
    "verify",
    "pack",
    "key",
    "serve",
    "run",
    "mount",
    "predict",
    "publish",
    "timeline",
    "experiment",
    "gate",
    "demo",
    "report",
    "-",
];

fn rank(from: &str, example: &str) -> (usize, bool) {
    // `pack --hot-list hot.json` needs the hot list `run --record` writes.
    let pos = ORDER.iter().position(|o| *o == from).unwrap_or(ORDER.len() - 1);
    match example.contains("--hot-list hot.json") {
        true => (ORDER.iter().position(|o| *o == "run").unwrap(), true),
        false => (pos, false),
    }
}

#[test]
fn every_example_of_every_help_runs() {
    if !require_root("cgroups, FUSE, tracefs and the page profiler")
        || !require_program("nginx", "nginx-light")
        || !require_program("openssl", "openssl")
        || !require_program("moto_server", "moto (pip)")
        || !require_program("llvm-bolt-19", "bolt-19")
        || !require_program("firefox-esr", "firefox-esr")
    {
        return;
    }
    let _lock = common::cache_lock();
    let started = Instant::now();
    let scratch =
        tempfile::Builder::new().prefix("coldstart-help-").tempdir_in("/var/tmp").unwrap();
    let mut bed = fixtures::prepare(scratch.path());
    let mut examples = all_examples();
    assert!(examples.len() > 60, "examples found: {examples:?}");
    examples.sort_by_key(|(from, e)| rank(from, e));
    let mut failed = Vec::new();
    for (from, example) in &examples {
        if fixtures::before(&mut bed, from, example).is_err() {
            failed.push(format!("{example}: its fixture could not be made"));
            continue;
        }
        for step in steps(example) {
            let mut argv = bed.substitute(from, &step.argv);
            if argv.first().is_some_and(|a| a.contains('*'))
                || argv.iter().any(|a| a.contains("/*."))
            {
                argv = fixtures::glob(argv);
            }
            cap_runs(&mut argv);
            let t = Instant::now();
            let (code, out) = match argv.get(1).map(String::as_str) {
                Some("serve") => run_until_ready(&bed, &argv, || true),
                Some("mount") => {
                    let mnt = PathBuf::from(&argv[3]);
                    run_until_ready(&bed, &argv, || mnt.join("sample").exists())
                }
                _ => run(&bed, &step, &argv),
            };
            let verdict =
                matches!(argv.get(1).map(String::as_str), Some("verify" | "link" | "gate"));
            let ok = code == Some(0) || (verdict && code == Some(1));
            eprintln!(
                "{} {:.1} s: {example}\n    ran: {}",
                if ok { "ok  " } else { "FAIL" },
                t.elapsed().as_secs_f64(),
                argv.join(" ")
            );
            if !ok {
                let tail: Vec<&str> = out.lines().rev().take(8).collect();
                eprintln!("    exit {code:?}, its output:\n{out}");
                failed.push(format!(
                    "{example}\n    ran: {}\n    exit {code:?}: {}",
                    argv.join(" "),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n      ")
                ));
                break;
            }
        }
        fixtures::after(&mut bed, example);
    }
    eprintln!("{} examples in {:.0} s", examples.len(), started.elapsed().as_secs_f64());
    assert!(failed.is_empty(), "examples that did not run:\n{}", failed.join("\n"));
}

mod fixtures {
    use super::*;

    fn sh(dir: &Path, script: &str) -> Result<(), String> {
        let out = Command::new("sh").args(["-ec", script]).current_dir(dir).output().unwrap();
        match out.status.success() {
            true => Ok(()),
            false => Err(format!("{script}: {}", String::from_utf8_lossy(&out.stderr))),
        }
    }

    /// `DIR/*.json` expanded.
    pub fn glob(argv: Vec<String>) -> Vec<String> {
        let mut out = Vec::new();
        for a in argv {
            match a.rsplit_once("/*") {
                Some((dir, suffix)) => {
                    let mut found: Vec<String> = std::fs::read_dir(dir)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path().to_string_lossy().into_owned())
                        .filter(|p| p.ends_with(suffix))
                        .collect();
                    found.sort();
                    out.extend(found);
                }
                None => out.push(a),
            }
        }
        out
    }

    /// The directories, the server script, the C and Cargo programs, the AWS settings.
    pub fn prepare(dir: &Path) -> Bed {
        for d in
            ["home/.aws", "home/.config/coldstart", "var-tmp", "srv/bundles", "mnt/app", "cache"]
        {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let p = |s: &str| dir.join(s).to_string_lossy().into_owned();
        std::fs::write(dir.join("server"), "#!/bin/sh\necho listening\nexec sleep 30\n").unwrap();
        sh(dir, "chmod +x server").unwrap();
        std::fs::write(dir.join("hello.c"), "int main(void) { return 0; }\n").unwrap();
        std::fs::write(dir.join("main.c"), C_PROGRAM).unwrap();
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(
            dir.join("Cargo.toml"),
            "[package]\nname = \"myprog\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n",
        )
        .unwrap();
        std::fs::write(dir.join("src/main.rs"), RUST_PROGRAM).unwrap();
        let sample = dir.join("var-tmp/sample/sample");
        let mut subst: BTreeMap<String, String> = BTreeMap::new();
        let mut set = |k: &str, v: String| {
            subst.insert(k.to_owned(), v);
        };
        set("/var/tmp/", p("var-tmp/"));
        set("/srv/bundles/", p("srv/bundles/"));
        set("/mnt/app", p("mnt/app"));
        set("/var/cache/coldstart", p("cache"));
        set("/opt/app", p("var-tmp/sample"));
        set("DIR", p("var-tmp/sample"));
        set("./prog", sample.to_string_lossy().into_owned());
        set("./myprog", sample.to_string_lossy().into_owned());
        set("./myprog.bolt", p("myprog.bolt"));
        set("app.bundle", p("srv/bundles/app"));
        set("a.json", "p.json".into());
        set("profile-a.json", "p.json".into());
        set("held-out.json", "b.json".into());
        set("/var/tmp/app", p("var-tmp/sample"));
        set("p.prefetch", "prog.prefetch".into());
        set("release.key.pub", p("home/.config/coldstart/release.key.pub"));
        set("link order.txt", "prog.order".into());
        set("verify order.txt", "prog.order".into());
        set("link build/myprog", sample.to_string_lossy().into_owned());
        set("verify build/myprog", sample.to_string_lossy().into_owned());
        set("link -C build", p("var-tmp/sample/src"));
        set("link myprog", p("myprog"));
        Bed { dir: dir.to_owned(), sample, subst, _servers: Vec::new() }
    }

    /// What an example needs made just before it.
    pub fn before(bed: &mut Bed, from: &str, example: &str) -> Result<(), String> {
        let cs = env!("CARGO_BIN_EXE_coldstart");
        let dir = bed.dir.clone();
        if example.contains("cargo build --release") {
            // The program linked once, profiled, ordered: the order the example links with.
            sh(
                &dir,
                &format!(
                "cargo build --release -q && {cs} profile -o rust.json -- target/release/myprog \
                 && {cs} order rust.json -o rust.order"
            ),
            )?;
            bed.subst.insert("link order.txt".into(), bed.path("rust.order"));
        } else if example.contains("clang-19 -O2 -o myprog main.c") {
            sh(&dir, &format!(
                "clang-19 -O2 -ffunction-sections -o myprog main.c && {cs} profile -o c.json -- ./myprog \
                 && {cs} order c.json -o c.order"
            ))?;
            bed.subst.insert("link order.txt".into(), bed.path("c.order"));
        } else if from == "link" {
            bed.subst.insert("link order.txt".into(), "prog.order".into());
        }
        if example.contains("measure.json") && !dir.join("measure.json").exists() {
            let sample = bed.sample.display();
            sh(
                &dir,
                &format!(
                    "{cs} measure --runs 2 --export-json measure.json -- {sample} --workload a"
                ),
            )?;
        }
        if example.contains("--module libclang-cpp.so.19.1") {
            bed.subst.insert("order p.json".into(), "clang.json".into());
        } else {
            bed.subst.remove("order p.json");
        }
        if example.starts_with("coldstart pack ") || example.contains(" && coldstart pack ") {
            // Each pack writes a new bundle where the last one was: pack never replaces one.
            let _ = std::fs::remove_dir_all(dir.join("srv/bundles/app"));
        }
        let needs_url =
            ["http://", "https://", "s3://", "origin.example"].iter().any(|u| example.contains(u));
        if needs_url && !bed.subst.contains_key("http://127.0.0.1:8080/") {
            servers(bed)?;
        }
        Ok(())
    }

    /// What an example made that a later one reads under another name.
    pub fn after(bed: &mut Bed, example: &str) {
        if example.contains("clang-19 -c hello.c") {
            let _ = std::fs::copy(bed.dir.join("p.json"), bed.dir.join("clang.json"));
        }
        if example.starts_with("coldstart demo") {
            let _ = std::fs::remove_dir_all(bed.dir.join("var-tmp/coldstart-demo/sample-medium"));
        }
    }

    /// The bundle served over http (coldstart serve) and https (nginx), and moto's buckets
    /// holding it.
    fn servers(bed: &mut Bed) -> Result<(), String> {
        let bundle = bed.dir.join("srv/bundles/app");
        let (serve, url) = common::serve(&bundle, &[]);
        bed._servers.push(serve);
        let url = format!("{}/", url.trim_end_matches('/'));
        let hostport = url.trim_start_matches("http://").trim_end_matches('/').to_owned();
        for k in ["http://127.0.0.1:8080/", "http://bundles.example/app/", "http://cdn.example/app"]
        {
            bed.subst.insert(k.into(), url.clone());
        }
        bed.subst.insert("origin.example:8080".into(), hostport);
        let certs = bed.dir.join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let ca = common::certificates(&certs);
        let (nginx, port) = common::nginx(&bed.dir, |port| {
            format!(
                "listen 127.0.0.1:{port} ssl;\nssl_certificate {c}/server.pem;\nssl_certificate_key {c}/server.key;\nroot {b};",
                c = certs.display(),
                b = bundle.display()
            )
        });
        bed._servers.push(nginx);
        bed.subst
            .insert("https://bundles.example/app/".into(), format!("https://127.0.0.1:{port}/"));
        bed.subst.insert("ca.pem".into(), ca.to_string_lossy().into_owned());
        // moto: the buckets, the `ci` profile and the default one.
        let (moto, port) = moto_server(&bed.dir);
        bed._servers.push(moto);
        let endpoint = format!("http://127.0.0.1:{port}");
        for bucket in ["my-bundles", "bundles"] {
            create_bucket(port, bucket)?;
        }
        let aws = bed.dir.join("home/.aws");
        std::fs::write(
            aws.join("config"),
            format!("[default]\nregion = us-east-1\nendpoint_url = {endpoint}\n[profile ci]\nregion = us-east-1\nendpoint_url = {endpoint}\n"),
        )
        .unwrap();
        std::fs::write(
            aws.join("credentials"),
            "[default]\naws_access_key_id = test\naws_secret_access_key = test\n[ci]\naws_access_key_id = test\naws_secret_access_key = test\n",
        )
        .unwrap();
        bed.subst.insert("http://127.0.0.1:5000".into(), endpoint);
        // Publish once, so that the examples that read the buckets before `publish`'s find it.
        for target in ["s3://my-bundles/app/1.4", "s3://my-bundles/app"] {
            let out = coldstart()
                .args(["publish", &bundle.to_string_lossy(), target])
                .env("AWS_CONFIG_FILE", aws.join("config"))
                .env("AWS_SHARED_CREDENTIALS_FILE", aws.join("credentials"))
                .output()
                .unwrap();
            if !out.status.success() {
                return Err(format!("publish {target}: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
        Ok(())
    }

    /// `PUT /BUCKET` on moto, whose S3 takes any signature until its IAM is switched on.
    fn create_bucket(port: u16, bucket: &str) -> Result<(), String> {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        let auth = "AWS4-HMAC-SHA256 Credential=k/20250101/us-east-1/s3/aws4_request, \
                    SignedHeaders=host, Signature=0";
        write!(
            c,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: {auth}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        c.read_to_string(&mut answer).map_err(|e| e.to_string())?;
        match answer.starts_with("HTTP/1.1 200") {
            true => Ok(()),
            false => Err(format!("create bucket {bucket}: {answer}")),
        }
    }

    /// A C program whose start-up calls a few functions: a program to link with an order.
    const C_PROGRAM: &str = r#"#include <stdio.h>
__attribute__((noinline)) int one(int x) { return x * 3 + 1; }
__attribute__((noinline)) int two(int x) { return one(x) ^ 0x55; }
__attribute__((noinline)) int three(int x) { return two(x) + one(x); }
__attribute__((noinline)) int unused(int x) { return x - 7; }
int main(int argc, char **argv) { (void)argv; printf("%d\n", three(argc)); return argc > 5 ? unused(argc) : 0; }
"#;

    /// A Rust program whose start-up calls a few functions.
    const RUST_PROGRAM: &str = r#"#[inline(never)]
fn one(x: u64) -> u64 { x.wrapping_mul(3) + 1 }
#[inline(never)]
fn two(x: u64) -> u64 { one(x) ^ 0x55 }
fn main() {
    let n = std::env::args().count() as u64;
    println!("{}", two(n) + one(n));
}
"#;
}
