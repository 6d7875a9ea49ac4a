//! Helpers shared by the integration tests of the `coldstart` binary.
//!
//! Each test file is its own crate and uses a part of this module, so the rest is dead code
//! there.
#![allow(dead_code)]

use std::process::{Child, Output};

/// C source, to `concat!` before a fixture's own: the headers it needs, and
/// `int open_beside_exe(const char *name)`, which opens NAME (read-only) in the directory of
/// the executable (found through /proc/self/exe, so it works wherever the program is copied
/// to) and exits 10 when the executable is not found, 11 when NAME is not.
#[allow(unused_macros)]
macro_rules! open_beside_exe_c {
    () => {
        r#"
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static int open_beside_exe(const char *name) {
  char exe[4096]; ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) exit(10);
  exe[n] = 0;
  char path[4200]; snprintf(path, sizeof path, "%s/%s", dirname(exe), name);
  int fd = open(path, O_RDONLY); if (fd < 0) exit(11);
  return fd;
}
"#
    };
}

#[allow(unused_imports)]
pub use coldstart_sys::{is_root, pid_alive};
#[allow(unused_imports)]
pub use coldstart_testkit::{
    cache_lock, require, require_program, require_root, signal, try_signal, CacheLock,
};

/// Runs `coldstart ARGS` in `dir`, to its end.
pub fn coldstart_in(args: &[&str], dir: &std::path::Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// A command's status and both its outputs, for an assertion's message.
pub fn output_text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The command's standard output, after asserting it succeeded (its output in the message).
pub fn check(out: &Output) -> String {
    assert!(
        out.status.success(),
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Runs `coldstart measure ARGS --export-json JSON -- CMD`; returns its output and the report
/// it wrote (`Value::Null` where it wrote none).
pub fn measure_report<S: AsRef<std::ffi::OsStr>>(
    args: &[&str],
    json: &std::path::Path,
    cmd: impl IntoIterator<Item = S>,
) -> (Output, serde_json::Value) {
    use assert_cmd::cargo::CommandCargoExt;
    let out = std::process::Command::cargo_bin("coldstart")
        .unwrap()
        .arg("measure")
        .args(args)
        .arg("--export-json")
        .arg(json)
        .arg("--")
        .args(cmd)
        .output()
        .unwrap();
    let report = std::fs::read_to_string(json)
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    (out, report)
}

/// Runs `coldstart profile FLAGS -o OUT -- CMD`.
pub fn profile_to<S: AsRef<std::ffi::OsStr>>(
    flags: &[&str],
    out: &std::path::Path,
    cmd: impl IntoIterator<Item = S>,
) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .arg("profile")
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg("--")
        .args(cmd)
        .output()
        .unwrap()
}

/// `coldstart order PROFILE --binary BINARY`; the test adds the rest.
pub fn order_for(profile: &std::path::Path, binary: &std::path::Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("coldstart").unwrap();
    cmd.arg("order").arg(profile).arg("--binary").arg(binary);
    cmd
}

/// `coldstart link --order ORDER --binary BINARY`; the test adds the rest (other binaries,
/// `-- BUILD`).
pub fn link_with(order: &std::path::Path, binary: &std::path::Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("coldstart").unwrap();
    cmd.arg("link").arg("--order").arg(order).arg("--binary").arg(binary);
    cmd
}

/// Kills a child process on drop.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `coldstart serve BUNDLE [ARGS]` as a child; returns it and the URL it printed.
pub fn serve(bundle: &std::path::Path, extra: &[&str]) -> (KillOnDrop, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .arg("serve")
        .arg(bundle)
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (KillOnDrop(child), url)
}

/// A profile of `module` in which start-up (`workload`) touched `names` in this order, one
/// every `step_ns`: what the profiler records, less the addresses and sizes (0), which
/// `coldstart order --binary` fills in from the binary.
pub fn touch_profile(
    workload: &str,
    module: &std::path::Path,
    names: &[String],
    step_ns: u64,
) -> coldstart_profile_format::Profile {
    use coldstart_profile_format::{Module, Profile, Stop, Touch};
    let functions = names
        .iter()
        .enumerate()
        .map(|(i, n)| Touch {
            address: 0,
            size: 0,
            names: vec![n.clone()],
            first_touch_ns: step_ns * i as u64,
            pid: 1,
            tid: 1,
            ordinal: i as u64,
            workloads: vec![],
        })
        .collect();
    Profile {
        format: "coldstart-profile".into(),
        version: 1,
        workload: workload.into(),
        command: vec![],
        created_unix: 0,
        duration_ns: 1,
        stop: Stop::Exit { code: 0 },
        modules: vec![Module {
            path: module.to_owned(),
            build_id: None,
            size: 0,
            mtime: 0,
            load_bias: 0,
            symbols: "symtab".into(),
            functions_total: names.len(),
            functions,
        }],
        pages: None,
        warnings: vec![],
        images: Vec::new(),
        workloads: vec![],
    }
}

/// A profile of `workload` of the sample's executable, written to `out`: recorded by
/// `coldstart profile`, or where the profiler cannot run, made from the sample's truth
/// manifest (the executable's functions start-up runs, in order). Where the suite must run
/// whole (`COLDSTART_TESTS_NO_SKIP`), a profiler that fails is a failure.
pub fn sample_profile(sample: &coldstart_sample::Sample, workload: &str, out: &std::path::Path) {
    let recorded = std::process::Command::new(env!("CARGO_BIN_EXE_coldstart"))
        .current_dir(&sample.dir)
        .args(["profile", "--workload", workload, "-o"])
        .arg(out)
        .arg("--")
        .arg(sample.exe())
        .args(["--workload", workload])
        .output()
        .unwrap();
    if recorded.status.success() {
        return;
    }
    let why = format!("{}: {}", recorded.status, String::from_utf8_lossy(&recorded.stderr));
    assert!(!coldstart_testkit::no_skip(), "coldstart profile of the sample failed ({why})");
    eprintln!("profiler unavailable ({why}), using the truth manifest");
    let modules = sample.function_modules();
    let names: Vec<String> = sample
        .workload(workload)
        .unwrap()
        .startup
        .iter()
        .filter(|f| modules.get(f.as_str()) == Some(&coldstart_sample::Module::Exe))
        .cloned()
        .collect();
    touch_profile(workload, &sample.exe(), &names, 1).write(out).unwrap();
}

pub mod faults;
pub mod leftovers;

/// Asserts that a hot run of a measure report read nothing from storage and took no major
/// fault. The hot series holds what its warm-up left cached (`resident_holds`); only when
/// that hold was incomplete, on a machine that reclaims idle page-cache pages on its own
/// (`environment.page_reclaim`: a DAMON `pageout` scheme), may a few pages have to come back:
/// at most 64 faults and 256 KiB, far below what a cold run of any fixture reads.
pub fn assert_hot(report: &serde_json::Value, run: &serde_json::Value) {
    let counter = |name: &str| run["counters"][name].as_u64().unwrap_or(u64::MAX);
    let (faults, bytes) = (counter("major_faults"), counter("read_bytes"));
    let held = report["resident_holds"].as_array().is_some_and(|holds| {
        holds.iter().any(|h| h["cache"] == "hot" && h["incomplete"].is_null() && h["files"] != 0)
    });
    if held || report["environment"]["page_reclaim"].is_null() {
        assert_eq!((faults, bytes), (0, 0), "a hot run faulted or read: {run}");
    } else {
        assert!(
            faults <= 64 && bytes <= 256 << 10,
            "a hot run faulted or read more than {} could take back: {run}",
            report["environment"]["page_reclaim"]
        );
    }
}

/// Whether a server listens on `port` of 127.0.0.1. A connection to a port of the ephemeral
/// range that nobody listens on can be the kernel's TCP simultaneous open with itself (the
/// client given that very port as its own): such a connection is not a server.
pub fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port))
        .is_ok_and(|c| c.local_addr().ok() != c.peer_addr().ok())
}

/// A free TCP port on 127.0.0.1 (free when asked; bound by whoever takes it next), never one
/// this test process was given before: two tests that ask at once would otherwise be given
/// the same port by the kernel, and one test's client would talk to the other's server.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The inodes of the sockets listening on `port` (IPv4 and IPv6, any address).
fn listeners(port: u16) -> Vec<String> {
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let Some(local_port) = f.get(1).and_then(|a| a.rsplit(':').next()) else { continue };
            let listening = f.get(3) == Some(&"0A");
            if listening && u16::from_str_radix(local_port, 16) == Ok(port) {
                found.extend(f.get(9).map(|i| i.to_string()));
            }
        }
    }
    found
}

/// Whether process `pid` itself holds a socket listening on `port`: a server that was given
/// a free port can find another process of the machine on it (free when asked, taken by
/// whoever binds it next), and a client would then talk to that process.
pub fn listens(pid: u32, port: u16) -> bool {
    let inodes = listeners(port);
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|l| {
            let l = l.to_string_lossy();
            inodes.iter().any(|i| l == format!("socket:[{i}]"))
        })
    })
}

/// Starts `cmd`, a server that is to listen on `port`, and waits until that very process
/// does: at most `limit`. Err when it exits first (the port taken by another process).
fn try_start(
    cmd: &mut std::process::Command,
    port: u16,
    limit: std::time::Duration,
    what: &str,
) -> Result<KillOnDrop, String> {
    let mut guard = KillOnDrop(cmd.spawn().unwrap_or_else(|e| panic!("cannot start {what}: {e}")));
    let t = std::time::Instant::now();
    while !listens(guard.0.id(), port) {
        if let Some(status) = guard.0.try_wait().unwrap() {
            return Err(format!("{what} exited before it listened on port {port} ({status})"));
        }
        assert!(t.elapsed() < limit, "{what} did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(guard)
}

/// Starts `cmd`, a server that is to listen on `port` of 127.0.0.1, and waits until it does:
/// at most `limit`, then fails with "`what` did not start". It is killed on drop.
pub fn start_server(
    cmd: &mut std::process::Command,
    port: u16,
    limit: std::time::Duration,
    what: &str,
) -> KillOnDrop {
    try_start(cmd, port, limit, what).unwrap_or_else(|e| panic!("{e}"))
}

/// Starts the server `cmd(port)` makes, on a free port of 127.0.0.1, and waits until it
/// listens there (at most `limit`); returns it (killed on drop) and the port. A server that
/// exits first, its port taken by another process of the machine since it was free, is
/// started again on another port, up to three times.
pub fn server_on_free_port(
    mut cmd: impl FnMut(u16) -> std::process::Command,
    limit: std::time::Duration,
    what: &str,
) -> (KillOnDrop, u16) {
    let mut tried = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        match try_start(&mut cmd(port), port, limit, what) {
            Ok(guard) => return (guard, port),
            Err(e) => tried.push(e),
        }
    }
    panic!("{}", tried.join("; "))
}

/// moto's server (`moto_server`, installed by scripts/setup.sh) on a free port of 127.0.0.1,
/// in its own process group, logging to `dir/moto.log`.
pub fn moto_server(dir: &std::path::Path) -> (KillOnDrop, u16) {
    use std::os::unix::process::CommandExt;
    let what = format!("moto (see {})", dir.join("moto.log").display());
    let moto = |port: u16| {
        let log = std::fs::File::create(dir.join("moto.log")).unwrap();
        let mut cmd = std::process::Command::new("moto_server");
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .current_dir(dir)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0);
        cmd
    };
    server_on_free_port(moto, std::time::Duration::from_secs(60), &what)
}

/// nginx in the foreground, configured in `dir/nginx`, with one `server` block whose body
/// `server(port)` writes (its `listen` and `root` included); returns its guard and its port
/// once it accepts connections.
pub fn nginx(dir: &std::path::Path, server: impl Fn(u16) -> String) -> (KillOnDrop, u16) {
    use std::time::Duration;
    let conf_dir = dir.join("nginx");
    std::fs::create_dir_all(conf_dir.join("tmp")).unwrap();
    let what = format!("nginx (Debian: nginx-light; see {})", conf_dir.display());
    let nginx = |port: u16| {
        let conf = format!(
            r#"daemon off;
master_process off;
user root;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    keepalive_requests 100000;
    server {{
{server}
    }}
}}
"#,
            d = conf_dir.display(),
            server = server(port),
        );
        std::fs::write(conf_dir.join("nginx.conf"), conf).unwrap();
        let mut cmd = std::process::Command::new("nginx");
        cmd.arg("-p")
            .arg(&conf_dir)
            .arg("-c")
            .arg(conf_dir.join("nginx.conf"))
            .stderr(std::process::Stdio::null());
        cmd
    };
    server_on_free_port(nginx, Duration::from_secs(10), &what)
}

/// `openssl ARGS` in `dir`, asserting it succeeded.
pub fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl").current_dir(dir).args(args).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA (`dir/ca.pem`) and a server certificate for 127.0.0.1 and localhost signed by it
/// (`dir/server.pem`, `dir/server.key`), made with openssl; returns the CA's path.
pub fn certificates(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=coldstart test CA",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
    dir.join("ca.pem")
}

/// A tmpfs of `kib` KiB mounted at a new directory (root), unmounted on drop: a small file
/// system to fill up.
pub struct SmallFs(pub std::path::PathBuf);

impl SmallFs {
    pub fn mount(at: &std::path::Path, kib: u64) -> SmallFs {
        std::fs::create_dir_all(at).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "coldstart-test"])
            .arg(at)
            .status()
            .unwrap();
        assert!(ok.success(), "cannot mount a tmpfs on {}", at.display());
        SmallFs(at.to_path_buf())
    }

    /// Fills it: a file of every block left.
    pub fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join(".filler")).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
    }

    /// What is in it, but the filler.
    pub fn contents(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".filler")
            .collect();
        v.sort();
        v
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A directory to work in (mount points, the commands' `TMPDIR` in its `tmp`, caches,
/// outputs); whatever a failed test left in it is cleaned up on drop. Each test file adds the
/// methods of its own.
pub struct Scratch(pub tempfile::TempDir);

impl Scratch {
    pub fn new() -> Scratch {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("tmp")).unwrap();
        Scratch(d)
    }

    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }
}
