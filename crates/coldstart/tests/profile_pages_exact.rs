//! Exact page profiles (`coldstart profile --pages`, root): the pages start-up touches, at 4 KiB,
//! each once in first-touch order, whatever the read-ahead of the disk the program is on and
//! whatever the kernel's fault-around maps. Checked against what the sample generator knows
//! (the functions and data pages each workload touches), against the same program on disks
//! with 8 MiB and 4 KiB read-ahead, and against a program that touches one page of a cached
//! file.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use coldstart_sample::{Config, Sample, Size};
use coldstart_storage::{find_leftovers, EmulatedStorage, StorageProfile};
use coldstart_testkit::require_root;
use serde_json::Value;

/// A directory on a disk (a tmpfs `/tmp` would hold the program in memory, where no page is
/// ever read from storage).
fn disk_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

/// Run `coldstart profile` with `flags` on `command`; the profile, stderr and coldstart's pid.
fn profile(out: &Path, flags: &[&str], command: &[&std::ffi::OsStr]) -> (Value, String, u32) {
    let child = Command::cargo_bin("coldstart")
        .unwrap()
        .arg("profile")
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg("--")
        .args(command)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    (serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap(), stderr, pid)
}

/// Pages of each file of a page profile, in first-touch order (each once).
fn pages_by_file(p: &Value) -> HashMap<PathBuf, Vec<u64>> {
    let pages = &p["pages"];
    let files = pages["files"].as_array().unwrap();
    let mut out: HashMap<PathBuf, Vec<u64>> = HashMap::new();
    let mut seen = HashSet::new();
    for a in pages["accesses"].as_array().unwrap() {
        let path =
            PathBuf::from(files[a["file"].as_u64().unwrap() as usize]["path"].as_str().unwrap());
        let first = a["page"].as_u64().unwrap();
        for page in first..first + a["count"].as_u64().unwrap() {
            if seen.insert((path.clone(), page)) {
                out.entry(path.clone()).or_default().push(page);
            }
        }
    }
    out
}

/// Nothing of coldstart `pid`'s private copy is left: no loop device, mount or directory.
fn assert_copy_removed(pid: u32) {
    for dir in ["/dev/shm", "/var/tmp"] {
        let left: Vec<_> = find_leftovers(Some(Path::new(dir)))
            .into_iter()
            .filter(|l| l.owner_pid == pid)
            .collect();
        assert!(left.is_empty(), "coldstart {pid} left {left:?}");
    }
}

/// File pages (offset / 4096) that the bytes `[address, address + size)` of `elf` occupy.
fn pages_of(elf: &coldstart_elf::ElfInfo, address: u64, size: u64) -> BTreeSet<u64> {
    let (Some(first), Some(last)) =
        (elf.vaddr_to_offset(address), elf.vaddr_to_offset(address + size.max(1) - 1))
    else {
        return BTreeSet::new();
    };
    (first / 4096..=last / 4096).collect()
}

/// What the sample's generator knows of one module's code for one workload: the pages of the
/// functions it runs (`truth`), the pages holding code that is not generated (crt, PLT,
/// `.init`, `.fini`), which may share a page with them, and the pages of `.text`.
struct Truth {
    truth: BTreeSet<u64>,
    other_code: BTreeSet<u64>,
    text_pages: BTreeSet<u64>,
}

fn code_truth(
    sample: &Sample,
    w: &coldstart_sample::Workload,
    module: coldstart_sample::Module,
) -> Truth {
    let path = sample.module_path(module);
    let options = coldstart_elf::SymbolOptions { use_debug_files: false, ..Default::default() };
    let elf = coldstart_elf::ElfInfo::open(&path, &options).unwrap();
    let modules = sample.function_modules();
    let generated: HashSet<&str> = sample.functions.iter().map(|f| f.name.as_str()).collect();
    let mut truth = BTreeSet::new();
    let mut other_code = BTreeSet::new();
    for f in &elf.functions {
        if f.names.iter().any(|n| w.startup.contains(n) && modules.get(n.as_str()) == Some(&module))
        {
            truth.extend(pages_of(&elf, f.address, f.size));
        }
        if !f.names.iter().any(|n| generated.contains(n.as_str())) {
            other_code.extend(pages_of(&elf, f.address, f.size));
        }
    }
    for s in elf.sections.iter().filter(|s| s.executable && s.name != ".text") {
        other_code.extend(pages_of(&elf, s.address, s.size));
    }
    let text = elf.section(".text").unwrap();
    let text_pages = pages_of(&elf, text.address, text.size);
    Truth { truth, other_code, text_pages }
}

#[test]
fn an_exact_page_profile_holds_the_pages_of_the_functions_and_data_each_workload_touches() {
    if !require_root("exact page profiles (loop device, mount namespace, tracefs)") {
        return;
    }
    let dir = disk_dir();
    let sample =
        coldstart_sample::build(&Config::for_size(Size::Medium, 21), &dir.path().join("s"))
            .unwrap();
    for workload in ["a", "b"] {
        let w = sample.workload(workload).unwrap();
        let mut command = vec![sample.exe().into_os_string()];
        command.extend(w.args.iter().map(Into::into));
        let command: Vec<&std::ffi::OsStr> = command.iter().map(|a| a.as_os_str()).collect();
        let out = dir.path().join(format!("{workload}.json"));
        let (p, _, pid) = profile(&out, &["--pages"], &command);
        assert_copy_removed(pid);
        assert_eq!(p["pages"]["source"], "exact");
        let touched = pages_by_file(&p);
        for info in &sample.modules {
            let path = sample.dir.join(&info.path);
            let Truth { truth, other_code, text_pages } = code_truth(&sample, w, info.module);
            let got: BTreeSet<u64> = touched
                .get(&path)
                .map(|v| v.iter().copied().filter(|p| text_pages.contains(p)).collect())
                .unwrap_or_default();
            let missing: Vec<_> = truth.difference(&got).collect();
            assert!(
                missing.is_empty(),
                "{workload} {}: pages of functions it runs missing: {missing:?}",
                info.path
            );
            let extra: Vec<_> =
                got.difference(&truth).filter(|p| !other_code.contains(p)).collect();
            assert!(
                extra.is_empty(),
                "{workload} {}: {} code pages marked that hold only functions it does not run: {extra:?} ({} pages of its functions)",
                info.path,
                extra.len(),
                truth.len()
            );
        }
        // Data: exactly the pages read or touched, in the order the program touched them.
        for d in &w.data {
            let path = sample.dir.join(&d.path);
            assert_eq!(touched.get(&path), Some(&d.pages), "{workload} {}", d.path);
        }
    }
}

/// One program's page set on a disk of the given read-ahead: the sample copied onto an
/// emulated device, profiled there; paths made relative to the device's mount.
fn page_set_on_a_disk_with(read_ahead: &str, sample: &Sample) -> BTreeSet<(PathBuf, u64)> {
    let profile_of_disk: StorageProfile = format!("custom:readahead={read_ahead}").parse().unwrap();
    let work = disk_dir();
    let disk =
        EmulatedStorage::create(&profile_of_disk, std::slice::from_ref(&sample.dir), work.path())
            .unwrap();
    assert_eq!(
        disk.read_ahead_kb().unwrap() * 1024,
        coldstart_units::parse_size(read_ahead).unwrap()
    );
    let exe = disk.emulated_path(&std::fs::canonicalize(sample.exe()).unwrap());
    let out = work.path().join("p.json");
    let w = sample.workload("a").unwrap();
    let mut command = vec![exe.into_os_string()];
    command.extend(w.args.iter().map(Into::into));
    let command: Vec<&std::ffi::OsStr> = command.iter().map(|a| a.as_os_str()).collect();
    let (p, _, pid) = profile(&out, &["--pages"], &command);
    assert_copy_removed(pid);
    let mount = disk.mount_point().to_owned();
    let set = pages_by_file(&p)
        .into_iter()
        .flat_map(|(path, pages)| {
            let path = match path.strip_prefix(&mount) {
                Ok(rest) => Path::new("/").join(rest),
                Err(_) => path,
            };
            pages.into_iter().map(move |page| (path.clone(), page))
        })
        .collect();
    disk.close().unwrap();
    set
}

#[test]
fn a_page_profile_on_a_disk_with_8_mib_read_ahead_equals_one_taken_at_4_kib() {
    if !require_root("exact page profiles and emulated disks (loop devices)") {
        return;
    }
    let dir = disk_dir();
    let sample =
        coldstart_sample::build(&Config::for_size(Size::Medium, 22), &dir.path().join("s"))
            .unwrap();
    let large = page_set_on_a_disk_with("8m", &sample);
    let small = page_set_on_a_disk_with("4k", &sample);
    let exe = std::fs::canonicalize(sample.exe()).unwrap();
    assert!(large.iter().any(|(p, _)| *p == exe), "the executable's pages are in the profile");
    let only_large: Vec<_> = large.difference(&small).take(10).collect();
    let only_small: Vec<_> = small.difference(&large).take(10).collect();
    assert!(
        only_large.is_empty() && only_small.is_empty(),
        "{} pages at 8 MiB read-ahead, {} at 4 KiB; only at 8 MiB: {only_large:?}; only at 4 KiB: {only_small:?}",
        large.len(),
        small.len()
    );
}

#[test]
fn pages_that_fault_around_maps_are_not_counted() {
    if !require_root("exact page profiles (loop device, mount namespace, tracefs)") {
        return;
    }
    let dir = disk_dir();
    // Touch one page in the middle of a 64-page file through a mapping.
    let prog = coldstart_testkit::compile_c(
        dir.path(),
        "touch_one",
        r#"
        #include <fcntl.h>
        #include <sys/mman.h>
        int main(int argc, char **argv) {
            int fd = open(argv[1], O_RDONLY);
            if (fd < 0) return 1;
            volatile char *p = mmap(0, 64 * 4096, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) return 2;
            return p[37 * 4096] == 'z' ? 3 : 0;
        }
        "#,
        &[],
    );
    let data = dir.path().join("data");
    std::fs::write(&data, vec![b'a'; 64 * 4096]).unwrap();
    // Cached whole: fault-around would map the cached neighbours of page 37.
    std::fs::read(&data).unwrap();
    let (p, _, _) =
        profile(&dir.path().join("p.json"), &["--pages"], &[prog.as_os_str(), data.as_os_str()]);
    let touched = pages_by_file(&p);
    assert_eq!(touched.get(&std::fs::canonicalize(&data).unwrap()), Some(&vec![37]));
}

/// Whether a process runs `prog` from the private copy (its mount namespace has a copy
/// bind-mounted over `prog`).
fn runs_from_a_copy(prog: &Path) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    let prog = prog.to_str().unwrap();
    procs.flatten().any(|e| {
        let exe = std::fs::read_link(e.path().join("exe")).ok();
        exe.as_deref() == Some(Path::new(prog))
            && std::fs::read_to_string(e.path().join("mountinfo"))
                .is_ok_and(|m| m.lines().any(|l| l.split(' ').nth(4) == Some(prog)))
    })
}

fn start_profile_until_it_runs_from_a_copy(dir: &Path, prog: &Path) -> std::process::Child {
    let mut child = Command::cargo_bin("coldstart")
        .unwrap()
        .args(["profile", "--pages", "--ready", "stdout:up", "-o"])
        .arg(dir.join("p.json"))
        .arg("--")
        .arg(prog)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !runs_from_a_copy(prog) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).ok();
            panic!(
                "coldstart profile ended ({status}) before the program ran from a copy:\n{stderr}"
            );
        }
        if start.elapsed().as_secs() >= 60 {
            child.kill().ok();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the exact page run did not start within 60 s:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

#[test]
fn an_interrupted_or_killed_exact_page_run_leaves_no_copy_behind() {
    if !require_root("exact page profiles (loop device, mount namespace, tracefs)") {
        return;
    }
    let dir = disk_dir();
    let prog = coldstart_testkit::compile_c(
        dir.path(),
        "up_then_sleep",
        // Ready at once, except on the private copy: there it never becomes ready, so the
        // exact page run stays on the copy until the signal (a run that became ready would be
        // ended within milliseconds, faster than this test could see it).
        r#"
        #include <limits.h>
        #include <stdio.h>
        #include <string.h>
        #include <unistd.h>
        static int on_a_copy(void) {
            char self[PATH_MAX], line[8192];
            ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
            if (n < 0) return 0;
            self[n] = 0;
            FILE *f = fopen("/proc/self/mountinfo", "r");
            if (!f) return 0;
            int found = 0;
            while (!found && fgets(line, sizeof line, f)) {
                char *field = strtok(line, " ");
                for (int i = 0; field && i < 4; i++) field = strtok(NULL, " ");
                found = field && strcmp(field, self) == 0;
            }
            fclose(f);
            return found;
        }
        int main(void) {
            if (!on_a_copy()) { puts("up"); fflush(stdout); }
            sleep(120);
            return 0;
        }
        "#,
        &[],
    );
    let prog = std::fs::canonicalize(prog).unwrap();
    let mine = |pid: u32| -> Vec<_> {
        ["/dev/shm", "/var/tmp"]
            .iter()
            .flat_map(|d| find_leftovers(Some(Path::new(d))))
            .filter(|l| l.owner_pid == pid)
            .collect()
    };

    // Ctrl-C: the program is killed and the copy removed before coldstart exits.
    let mut child = start_profile_until_it_runs_from_a_copy(dir.path(), &prog);
    let pid = child.id();
    assert!(!mine(pid).is_empty(), "the copy exists while the run is on it");
    coldstart_testkit::signal(pid, libc::SIGINT);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGINT));
    assert!(!runs_from_a_copy(&prog), "the program was killed");
    assert_eq!(mine(pid), Vec::new());

    // SIGKILL leaves the copy; the next exact page profile removes it.
    let mut child = start_profile_until_it_runs_from_a_copy(dir.path(), &prog);
    let killed = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!mine(killed).is_empty(), "a killed coldstart cannot clean up");
    let echo = Path::new("/bin/echo");
    profile(&dir.path().join("next.json"), &["--pages"], &[echo.as_os_str()]);
    assert_eq!(mine(killed), Vec::new(), "removed by the next exact page profile");
    // The killed coldstart could not end its program either.
    kill_every(&prog);
}

/// Send SIGKILL to every process running `prog`.
fn kill_every(prog: &Path) {
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if std::fs::read_link(e.path().join("exe")).ok().as_deref() == Some(prog) {
            // It may have ended since: nothing to kill then.
            let _ = coldstart_testkit::try_signal(pid, libc::SIGKILL);
        }
    }
}

/// Empty the page cache (all of it: the traced method's cold start).
fn drop_all_caches() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

/// `coldstart profile` with `flags`: seconds of the whole command and the pages by file.
fn timed(
    out: &Path,
    flags: &[&str],
    command: &[&std::ffi::OsStr],
) -> (f64, HashMap<PathBuf, Vec<u64>>) {
    let start = std::time::Instant::now();
    let (p, _, _) = profile(out, flags, command);
    let seconds = start.elapsed().as_secs_f64();
    (seconds, if p["pages"].is_null() { HashMap::new() } else { pages_by_file(&p) })
}

fn count(pages: &HashMap<PathBuf, Vec<u64>>, file: Option<&Path>) -> usize {
    pages.iter().filter(|(p, _)| file.is_none_or(|f| *p == f)).map(|(_, v)| v.len()).sum()
}

/// Pages marked by `--pages=traced` (what `--pages` was) and by the exact method, each after a
/// cold and a warm start, against the sample's truth, and what each costs.
#[test]
#[ignore = "benchmark (drops the whole page cache; builds the benchmark-size sample); run with --ignored --nocapture"]
fn bench_exact_pages() {
    let dir = std::env::var_os("COLDSTART_BENCH_SAMPLE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/coldstart-bench-sample"));
    let config = Config::for_size(Size::Bench, 1);
    let sample = coldstart_sample::build_cached(&config, &dir).unwrap();
    let work = disk_dir();
    let os = |s: &str| std::ffi::OsString::from(s);
    let mut programs: Vec<(String, Vec<std::ffi::OsString>, Option<&coldstart_sample::Workload>)> =
        Vec::new();
    for w in &sample.workloads {
        let mut command = vec![sample.exe().into_os_string()];
        command.extend(w.args.iter().map(Into::into));
        programs.push((format!("bench-size sample, workload {}", w.name), command, Some(w)));
    }
    programs.push((
        "`/usr/bin/python3 -c 'import json'`".into(),
        vec![os("/usr/bin/python3"), os("-c"), os("import json")],
        None,
    ));
    if let Some(clang) = coldstart_testkit::which("clang-19") {
        programs.push((
            "`clang-19 --version`".into(),
            vec![clang.into_os_string(), os("--version")],
            None,
        ));
    }
    if let Some(firefox) = coldstart_testkit::which("firefox-esr") {
        let profile_dir = work.path().join("firefox-profile");
        std::fs::create_dir(&profile_dir).unwrap();
        programs.push((
            "`firefox-esr --headless --screenshot`".into(),
            vec![
                firefox.into_os_string(),
                os("--headless"),
                os("-no-remote"),
                os("-profile"),
                profile_dir.into_os_string(),
                os("--screenshot"),
                work.path().join("shot.png").into_os_string(),
                os("data:text/html,<h1>coldstart</h1>"),
            ],
            None,
        ));
    }
    println!(
        "| program | file | traced, cold | traced, warm | exact, cold | exact, warm | truth |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut times = Vec::new();
    for (label, command, workload) in &programs {
        let command: Vec<&std::ffi::OsStr> = command.iter().map(|a| a.as_os_str()).collect();
        let out = work.path().join("p.json");
        drop_all_caches();
        let (t_traced_cold, traced_cold) = timed(&out, &["--pages=traced"], &command);
        let (t_traced_warm, traced_warm) = timed(&out, &["--pages=traced"], &command);
        drop_all_caches();
        let (t_exact_cold, exact_cold) = timed(&out, &["--pages"], &command);
        let (t_exact_warm, exact_warm) = timed(&out, &["--pages"], &command);
        let (t_none, _) = timed(&out, &[], &command);
        let exe = std::fs::canonicalize(command[0]).unwrap();
        // The file with the most pages touched, when it is not the executable (libLLVM).
        let biggest = exact_cold
            .iter()
            .max_by_key(|(_, v)| v.len())
            .map(|(p, _)| p.clone())
            .filter(|p| *p != exe);
        let same = |a: &HashMap<PathBuf, Vec<u64>>, b: &HashMap<PathBuf, Vec<u64>>| {
            let set = |m: &HashMap<PathBuf, Vec<u64>>| -> BTreeSet<(PathBuf, u64)> {
                m.iter().flat_map(|(p, v)| v.iter().map(move |x| (p.clone(), *x))).collect()
            };
            if set(a) == set(b) {
                ""
            } else {
                " (differs)"
            }
        };
        let row = |name: &str, file: Option<&Path>, truth: String| {
            println!(
                "| {label} | {name} | {} | {} | {} | {}{} | {truth} |",
                count(&traced_cold, file),
                count(&traced_warm, file),
                count(&exact_cold, file),
                count(&exact_warm, file),
                same(&exact_cold, &exact_warm),
            );
        };
        row("all files", None, String::new());
        row(
            &format!("`{}`", exe.file_name().unwrap().to_string_lossy()),
            Some(&exe),
            String::new(),
        );
        if let Some(b) = &biggest {
            row(&format!("`{}`", b.file_name().unwrap().to_string_lossy()), Some(b), String::new());
        }
        if let Some(w) = workload {
            let t = code_truth(&sample, w, coldstart_sample::Module::Exe);
            let code = |m: &HashMap<PathBuf, Vec<u64>>| {
                m.get(&exe).map_or(0, |v| v.iter().filter(|p| t.text_pages.contains(p)).count())
            };
            println!(
                "| {label} | `.text` of `sample` | {} | {} | {} | {} | {} pages hold the functions it runs |",
                code(&traced_cold),
                code(&traced_warm),
                code(&exact_cold),
                code(&exact_warm),
                t.truth.len()
            );
            let data: usize = w.data.iter().map(|d| d.pages.len()).sum();
            let data_of = |m: &HashMap<PathBuf, Vec<u64>>| -> usize {
                w.data.iter().map(|d| m.get(&sample.dir.join(&d.path)).map_or(0, Vec::len)).sum()
            };
            println!(
                "| {label} | data files | {} | {} | {} | {} | {data} pages read or touched |",
                data_of(&traced_cold),
                data_of(&traced_warm),
                data_of(&exact_cold),
                data_of(&exact_warm)
            );
        }
        times.push((
            label.clone(),
            t_none,
            t_traced_cold,
            t_traced_warm,
            t_exact_cold,
            t_exact_warm,
        ));
    }
    println!();
    println!("| program | no `--pages` | `--pages=traced`, cold | warm | `--pages` (exact), cold | warm |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (label, none, tc, tw, ec, ew) in times {
        println!("| {label} | {none:.2} s | {tc:.2} s | {tw:.2} s | {ec:.2} s | {ew:.2} s |");
    }
}

#[test]
fn an_unknown_page_method_or_a_missing_pages_dir_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.json");
    for (flags, says) in [
        (&["--pages=all"][..], "unknown page method `all`"),
        (
            &["--pages", "--pages-dir", "/no/such/dir"][..],
            "--pages-dir /no/such/dir: not a directory",
        ),
    ] {
        let o = Command::cargo_bin("coldstart")
            .unwrap()
            .arg("profile")
            .args(flags)
            .arg("-o")
            .arg(&out)
            .args(["--", "/bin/true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
        assert!(!out.exists(), "nothing written");
    }
}
