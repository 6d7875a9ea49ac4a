//! Where a baseline was recorded: the machine, the kernel, the disk, and facts the user names
//! (`--env NAME=VALUE`: a compiler's version, a runner image), so that a baseline taken
//! elsewhere is flagged instead of compared blindly.
//!
//! What is compared ([`differences`]): the CPU model and count, the kernel's upstream release
//! ([`upstream_release`]: `6.18.44` of `6.18.44-fc-v1300`; the local version after it, a
//! distribution's or builder's tag, is only noted by [`local_build_note`]), how runs
//! were counted (cgroup v1, v2 or rusage) and as whom (root or not), the read-ahead and kind of
//! the disk holding the program, and every named fact. The host name and the memory are
//! recorded for the reader and not compared (CI runners get a new host name each job). The
//! storage emulation and the cache states are settings of the baseline
//! ([`crate::baseline::Settings`]), compared there.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The facts of a machine that a start-up's figures depend on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// The host name (not compared).
    pub hostname: String,
    /// `model name` of the first CPU in `/proc/cpuinfo`.
    pub cpu_model: String,
    /// CPUs available to coldstart.
    pub cpus: usize,
    /// `MemTotal` (not compared).
    pub memory_bytes: u64,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// How runs were counted: `v1`, `v2` (a cgroup per run) or `rusage`.
    pub cgroup: String,
    pub is_root: bool,
    /// The block device holding the program, `null` when not found (a file system without
    /// one, as tmpfs).
    pub disk: Option<Disk>,
    /// Facts named with `--env NAME=VALUE`.
    #[serde(default)]
    pub facts: BTreeMap<String, String>,
}

/// The block device a program's executable is read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disk {
    /// Its name in `/sys/block` (the whole disk, not the partition).
    pub device: String,
    /// `queue/read_ahead_kb`.
    pub readahead_kb: u64,
    /// `queue/rotational` (many virtual disks say 1 whatever backs them).
    pub rotational: bool,
}

/// One fact that differs between a baseline and now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    /// What differs (`kernel`, `cpu`, `disk read-ahead`, a fact's name, ...).
    pub what: String,
    pub baseline: String,
    pub now: String,
}

impl Environment {
    /// This machine's facts, for a program at `program`. `cgroup` is what the measurement
    /// used; `facts` the user's.
    pub fn collect(program: &Path, cgroup: &str, facts: BTreeMap<String, String>) -> Environment {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':']))
            })
            .unwrap_or("unknown")
            .trim()
            .to_string();
        let memory_bytes = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024);
        Environment {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cgroup: cgroup.to_string(),
            is_root: coldstart_sys::is_root(),
            disk: disk_of(program),
            facts,
        }
    }

    /// A short key naming the comparable environment: two runs whose keys are equal have no
    /// [`differences`]. The history keeps it with each entry.
    pub fn key(&self) -> String {
        let disk = self.disk.as_ref().map_or("none".to_string(), |d| {
            format!("{}k{}", d.readahead_kb, if d.rotational { "r" } else { "" })
        });
        let mut key = format!(
            "kernel={} cpu={} cpus={} cgroup={} root={} disk={}",
            upstream_release(&self.kernel),
            self.cpu_model,
            self.cpus,
            self.cgroup,
            self.is_root,
            disk
        );
        for (k, v) in &self.facts {
            key.push_str(&format!(" {k}={v}"));
        }
        key
    }
}

/// The facts that differ between `base` and `now`.
pub fn differences(base: &Environment, now: &Environment) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut check = |what: &str, b: String, n: String| {
        if b != n {
            out.push(Difference { what: what.to_string(), baseline: b, now: n });
        }
    };
    if upstream_release(&base.kernel) != upstream_release(&now.kernel) {
        check("kernel", base.kernel.clone(), now.kernel.clone());
    }
    check("CPU", base.cpu_model.clone(), now.cpu_model.clone());
    check("CPUs", base.cpus.to_string(), now.cpus.to_string());
    check("counted with", base.cgroup.clone(), now.cgroup.clone());
    check("root", base.is_root.to_string(), now.is_root.to_string());
    let ra =
        |d: &Option<Disk>| d.as_ref().map_or("none".into(), |d| format!("{} KiB", d.readahead_kb));
    check("disk read-ahead", ra(&base.disk), ra(&now.disk));
    let rot = |d: &Option<Disk>| d.as_ref().map_or("none".into(), |d| d.rotational.to_string());
    check("disk rotational", rot(&base.disk), rot(&now.disk));
    let names: std::collections::BTreeSet<&String> =
        base.facts.keys().chain(now.facts.keys()).collect();
    for name in names {
        let get =
            |e: &Environment| e.facts.get(name).cloned().unwrap_or_else(|| "(not given)".into());
        check(name, get(base), get(now));
    }
    out
}

/// The upstream part of a kernel release: `6.18.44` of `6.18.44-fc-v1300` or of
/// `6.18.44+deb13-amd64`, the whole of `6.19.1`. What the page cache, read-ahead and fault
/// handling a gate's figures come from depend on; the local version after it is a build's tag
/// (a virtual machine image may get a new one each boot). Who wants the whole release compared
/// names it as a fact: `--env kernel=$(uname -r)`.
pub fn upstream_release(kernel: &str) -> &str {
    let end = kernel.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(kernel.len());
    match &kernel[..end] {
        "" => kernel,
        v => v,
    }
}

/// A note when the baseline's kernel is another build of the same upstream release (compared,
/// and said).
pub fn local_build_note(base: &Environment, now: &Environment) -> Option<String> {
    (base.kernel != now.kernel
        && upstream_release(&base.kernel) == upstream_release(&now.kernel))
    .then(|| {
        format!(
            "the baseline's kernel was {}, this one is {}: another build of the same release, compared \
             (name the whole release with --env kernel=$(uname -r) to refuse that)",
            base.kernel, now.kernel
        )
    })
}

/// The whole disk holding `path` (through symlinks), from `/sys/dev/block/MAJ:MIN`.
pub fn disk_of(path: &Path) -> Option<Disk> {
    let resolved = std::fs::canonicalize(path).ok()?;
    let dev = std::fs::metadata(&resolved).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    // A partition's queue is its disk's.
    let whole: PathBuf =
        if sys.join("partition").exists() { sys.parent()?.to_path_buf() } else { sys };
    let read = |f: &str| std::fs::read_to_string(whole.join("queue").join(f)).ok();
    Some(Disk {
        device: whole.file_name()?.to_string_lossy().into_owned(),
        readahead_kb: read("read_ahead_kb")?.trim().parse().ok()?,
        rotational: read("rotational")?.trim() == "1",
    })
}

/// The Linux default read-ahead: a disk reading ahead more hides what users with the default
/// see.
pub const DEFAULT_READAHEAD_KB: u64 = coldstart_storage::DEFAULT_READAHEAD_KB;

/// Whether a cold start on `disk` hides what users with slow storage see, and why: a
/// read-ahead larger than the default makes one request read what would take several (and
/// reads pages start-up never needs at no visible cost), and a solid-state disk serves a read
/// in microseconds. `None`: it does not hide it (a rotational disk with the default
/// read-ahead), or there is no disk to look at.
pub fn hides_cold_start(disk: Option<&Disk>) -> Option<String> {
    let d = disk?;
    if d.readahead_kb > DEFAULT_READAHEAD_KB {
        return Some(format!(
            "{} reads ahead {} KiB, which hides the requests and faults of a cold start with the usual {} KiB",
            d.device, d.readahead_kb, DEFAULT_READAHEAD_KB
        ));
    }
    if !d.rotational {
        return Some(format!(
            "{} is a solid-state disk, which serves a cold start's reads too fast to see them in time",
            d.device
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Environment {
        Environment {
            hostname: "a".into(),
            cpu_model: "Xeon".into(),
            cpus: 2,
            memory_bytes: 1 << 30,
            kernel: "6.18.44".into(),
            cgroup: "v1".into(),
            is_root: true,
            disk: Some(Disk { device: "vda".into(), readahead_kb: 8192, rotational: true }),
            facts: BTreeMap::new(),
        }
    }

    #[test]
    fn another_kernel_or_disk_is_a_difference_and_the_host_name_is_not() {
        let base = env();
        let mut now = env();
        now.hostname = "runner-42".into();
        now.memory_bytes = 2 << 30;
        assert!(differences(&base, &now).is_empty());
        assert_eq!(base.key(), now.key());
        now.kernel = "6.19.1".into();
        now.disk.as_mut().unwrap().readahead_kb = 128;
        let d = differences(&base, &now);
        let what: Vec<&str> = d.iter().map(|d| d.what.as_str()).collect();
        assert_eq!(what, ["kernel", "disk read-ahead"]);
        assert_eq!(d[0].baseline, "6.18.44");
        assert_ne!(base.key(), now.key());
    }

    /// Regression: this project's CI machine gets a new kernel build tag each boot
    /// (`6.18.44-fc-v669`, then `-v1300`), which made every dogfooding gate unclear.
    #[test]
    fn another_build_of_the_same_kernel_release_is_compared_and_noted() {
        let mut base = env();
        base.kernel = "6.18.44-fc-v669".into();
        let mut now = env();
        now.kernel = "6.18.44-fc-v1300".into();
        assert!(differences(&base, &now).is_empty());
        assert_eq!(base.key(), now.key());
        assert!(local_build_note(&base, &now).unwrap().contains("6.18.44-fc-v669"));
        now.kernel = "6.18.45-fc-v1300".into();
        assert_eq!(differences(&base, &now)[0].what, "kernel");
        assert_eq!(local_build_note(&base, &now), None);
        assert_eq!(upstream_release("6.1.0-28-amd64"), "6.1.0");
        assert_eq!(upstream_release("6.18.44+deb13-amd64"), "6.18.44");
        assert_eq!(upstream_release("weird"), "weird");
    }

    #[test]
    fn named_facts_are_compared_both_ways() {
        let mut base = env();
        base.facts.insert("cc".into(), "clang 19.1.7".into());
        let mut now = env();
        assert_eq!(differences(&base, &now)[0].now, "(not given)");
        now.facts.insert("cc".into(), "clang 19.1.7".into());
        assert!(differences(&base, &now).is_empty());
    }

    #[test]
    fn a_large_read_ahead_or_a_solid_state_disk_hides_cold_start() {
        let d = |readahead_kb, rotational| Disk { device: "x".into(), readahead_kb, rotational };
        assert!(hides_cold_start(Some(&d(8192, true))).unwrap().contains("8192 KiB"));
        assert!(hides_cold_start(Some(&d(128, false))).unwrap().contains("solid-state"));
        assert_eq!(hides_cold_start(Some(&d(128, true))), None);
        assert_eq!(hides_cold_start(None), None);
    }

    #[test]
    fn this_machine_is_described() {
        let e = Environment::collect(Path::new("/bin/sh"), "v1", BTreeMap::new());
        assert!(!e.kernel.is_empty());
        assert!(e.cpus >= 1);
    }
}
