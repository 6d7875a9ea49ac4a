//! What a coldstart command may leave behind, looked for after it ended: mounts, processes,
//! temporary directories, cgroups, tracefs instances and loop devices. A test gives the
//! directory it worked in (the mount points, `TMPDIR` of the commands and everything they were
//! given lie under it) and the process ids of the coldstart commands it started.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Everything found that belongs to the commands: each as one line saying what and where.
pub fn leftovers(dir: &Path, pids: &[u32]) -> Vec<String> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let prefix = dir.display().to_string();
    let mut found = Vec::new();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for m in info.lines().filter_map(|l| l.split(' ').nth(4)) {
        if m.starts_with(&prefix) {
            found.push(format!("mount {m}"));
        }
    }
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
        if matches!(state, Some('Z') | Some('X') | None) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let cwd = std::fs::read_link(entry.path().join("cwd")).unwrap_or_default();
        let ours = pids.contains(&pid);
        if ours || cmdline.contains(&prefix) || cwd.starts_with(&dir) {
            found.push(format!("process {pid} ({}) in state {state:?}: {cmdline}", comm(pid)));
        }
    }
    for tmp in [dir.clone(), dir.join("tmp")] {
        for e in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("coldstart-run-") || name.contains(".tmp-") {
                found.push(format!("temporary {}", e.path().display()));
            }
        }
    }
    for pid in pids {
        for h in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
            let parent = h.path().join("coldstart");
            for c in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
                if c.file_name().to_string_lossy().starts_with(&format!("run-{pid}-")) {
                    found.push(format!("cgroup {}", c.path().display()));
                }
            }
        }
        let instance = Path::new("/sys/kernel/tracing/instances").join(format!("coldstart-{pid}"));
        if instance.exists() {
            found.push(format!("tracefs instance {}", instance.display()));
        }
    }
    for b in std::fs::read_dir("/sys/block").into_iter().flatten().flatten() {
        let backing = std::fs::read_to_string(b.path().join("loop/backing_file"));
        if backing.is_ok_and(|f| f.starts_with(&prefix)) {
            found.push(format!("loop device {}", b.file_name().to_string_lossy()));
        }
    }
    found
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_owned()
}

/// [`leftovers`], given up to `within` to go away (a process is reaped, a lazy unmount ends).
pub fn after(dir: &Path, pids: &[u32], within: Duration) -> Vec<String> {
    let t = Instant::now();
    loop {
        let found = leftovers(dir, pids);
        if found.is_empty() || t.elapsed() >= within {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes what [`leftovers`] finds under `dir`, so that one failed test does not break the
/// machine for the next: processes are killed, FUSE connections aborted (the FUSE control file
/// system mounted for it where it is missing, and unmounted after), mounts detached.
pub fn clean(dir: &Path) {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let prefix = dir.display().to_string();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let ctl = "/sys/fs/fuse/connections";
    let mut mounted_ctl = false;
    for l in info.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() > 4 && f[4].starts_with(&prefix) {
            if let Some((_, minor)) = f[2].split_once(':') {
                let abort = format!("{ctl}/{minor}/abort");
                if !mounted_ctl && !Path::new(&abort).exists() {
                    mounted_ctl = Command::new("mount")
                        .args(["-t", "fusectl", "fusectl", ctl])
                        .status()
                        .is_ok_and(|s| s.success());
                }
                let _ = std::fs::write(abort, "1");
            }
            let _ = Command::new("umount").args(["-l", f[4]]).status();
        }
    }
    if mounted_ctl {
        let _ = Command::new("umount").arg(ctl).status();
    }
    for found in leftovers(&dir, &[]) {
        if let Some(pid) = found.strip_prefix("process ").and_then(|r| r.split(' ').next()) {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
    }
}
