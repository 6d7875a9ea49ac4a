//! One cgroup per run, so the whole process tree is counted and killed together.
//!
//! A program's start-up is often a tree (a browser starts a dozen processes; a shell script
//! starts the real program). Counting only the root process misses most of it, and killing
//! only the root leaves the rest running into the next run. A fresh cgroup per run fixes both:
//! the child joins it between `fork` and `exec`, every descendant inherits it, the counters
//! are read once at readiness, and at the end the whole cgroup is killed, emptied and removed.
//!
//! Which hierarchy:
//!
//! - **cgroup v2** when its `memory` and `io` controllers can be enabled (listed in the root's
//!   `cgroup.controllers`). Counters: `cpu.stat` (`user_usec`, `system_usec`), `memory.stat`
//!   (`pgmajfault`, `pgfault`), `memory.peak`, `io.stat` (`rbytes`, `rios`). Killed with
//!   `cgroup.kill`.
//! - **cgroup v1** otherwise (hybrid systems, where the v2 tree carries no controller): the
//!   `memory`, `cpuacct` and `blkio` hierarchies, plus `freezer` and `pids` when mounted.
//!   Counters: `cpuacct.usage_user`/`usage_sys`, `memory.stat` (`total_pgmajfault`,
//!   `total_pgfault`), `memory.max_usage_in_bytes`,
//!   `blkio.throttle.io_service_bytes_recursive` and `io_serviced_recursive` (`Read`). Killed by
//!   freezing, sending `SIGKILL` to every member and thawing (a frozen tree cannot fork away
//!   from the kill); without a freezer, by `SIGKILL` over `cgroup.procs` until it is empty.
//!
//! What the counters are good for, checked on a hybrid machine (kernel 6.18, `/dev/vda`,
//! mq-deadline): v1 `blkio.throttle.io_service_bytes_recursive` stays at 0 for a cold run
//! that reads a 16 MiB file (v1 blkio no longer accounts page-cache reads), and the v1
//! `memory.stat` event counters are flushed lazily, so a start-up's few dozen faults can be
//! missing. The launcher therefore takes faults and bytes read from per-task accounting
//! (`/proc/PID/stat`, `/proc/PID/io`, rusage; see [`crate::launch`]) and read requests from
//! the physical devices' `/sys/block/*/stat` (system-wide), and uses the cgroup for
//! membership, killing, CPU time (`cpuacct.usage` is exact) and peak memory. On v2, `io.stat`
//! attributes reads to the cgroup and is used for bytes and requests.
//!
//! Run cgroups are named `coldstart/run-PID-N` (PID of the coldstart process, N the run). A
//! cgroup whose PID is not alive is left over from a crashed run and is removed by
//! [`Hierarchy::detect`]. [`RunCgroup`] kills and removes its cgroup on drop: on `SIGINT`,
//! `SIGTERM` or `SIGHUP` too, since the run's wait ends with
//! [`coldstart_process::cancel::Interrupted`] and returns through it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use coldstart_error::Category;
use coldstart_process::mountinfo::Mount;

use coldstart_formats::measure::Counters;

/// The directory (under each hierarchy's mount point) holding coldstart's run cgroups.
pub const PARENT_NAME: &str = "coldstart";

/// Which cgroup version counts the runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Version 1: a hierarchy per controller.
    V1,
    /// Version 2: the unified hierarchy.
    V2,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

/// Why no cgroup can be used; the launcher then counts with `wait4` rusage.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No hierarchy has the controllers the runs need (the message says what is missing).
    #[error("no usable cgroup hierarchy: {0}")]
    Unavailable(String),
    /// A run's cgroup could not be made.
    #[error(
        "cannot create cgroup {path}: {source} (needs root, or write access to the cgroup tree)"
    )]
    Create {
        /// The cgroup's directory.
        path: PathBuf,
        /// Why it could not be made.
        source: io::Error,
    },
}

impl CgroupError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            CgroupError::Unavailable(_) => Category::Environment,
            CgroupError::Create { .. } => Category::Privilege,
        }
    }
}

/// The cgroup hierarchies coldstart uses: the directories under which run cgroups are made.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    /// Which version the directories are of.
    pub version: Version,
    /// `coldstart` directory per controller mount: (controller, dir). For v2 a single entry
    /// with controller `"unified"`.
    parents: Vec<(String, PathBuf)>,
}

fn mounts() -> io::Result<Vec<(String, PathBuf, String)>> {
    Ok(cgroup_mounts(coldstart_process::mountinfo::read()?))
}

/// The cgroup mounts among `mounts`: (fstype, mount point, super options).
fn cgroup_mounts(mounts: Vec<Mount>) -> Vec<(String, PathBuf, String)> {
    mounts
        .into_iter()
        .filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2")
        .map(|m| (m.fstype, m.point, m.super_options))
        .collect()
}

impl Hierarchy {
    /// Find a usable hierarchy: v2 with `memory` and `io`, else v1 with `memory`, `cpuacct`
    /// and `blkio`. Creates the `coldstart` parent directories (which needs root) and removes
    /// run cgroups left behind by a coldstart that is no longer alive.
    pub fn detect() -> Result<Hierarchy, CgroupError> {
        let mounts =
            mounts().map_err(|e| CgroupError::Unavailable(format!("/proc/self/mountinfo: {e}")))?;
        let h = Self::choose(&mounts)?;
        h.create_parents()?;
        // Write access is what creating a run cgroup needs: check it now, not at the first run.
        let probe = h.parents[0].1.join(format!("probe-{}", std::process::id()));
        match fs::create_dir(&probe) {
            Ok(()) => {
                let _ = fs::remove_dir(&probe);
            }
            Err(source) => return Err(CgroupError::Create { path: probe, source }),
        }
        h.clean_stale();
        Ok(h)
    }

    /// Create the `coldstart` parent directories (and, on v2, enable the controllers down to
    /// them). Idempotent.
    fn create_parents(&self) -> Result<(), CgroupError> {
        for dir in self.unique_dirs() {
            if let Err(source) = fs::create_dir(&dir) {
                if source.kind() != io::ErrorKind::AlreadyExists {
                    return Err(CgroupError::Create { path: dir, source });
                }
            }
        }
        if self.version == Version::V2 {
            // Controllers must be enabled on the path down to the run cgroups.
            let root = self.parents[0].1.parent().unwrap_or(Path::new("/")).to_path_buf();
            for dir in [root, self.parents[0].1.clone()] {
                let path = dir.join("cgroup.subtree_control");
                fs::write(&path, "+memory +io")
                    .map_err(|source| CgroupError::Create { path, source })?;
            }
        }
        Ok(())
    }

    /// Remove the `coldstart` parent directories if no run cgroup is left in them (another
    /// coldstart's runs keep them: `rmdir` of a non-empty cgroup fails, and that is fine).
    /// A later [`Hierarchy::create_run`] creates them again.
    pub fn release(&self) {
        for dir in self.unique_dirs() {
            let _ = fs::remove_dir(&dir);
        }
    }

    fn choose(mounts: &[(String, PathBuf, String)]) -> Result<Hierarchy, CgroupError> {
        if let Some((_, v2, _)) = mounts.iter().find(|(t, _, _)| t == "cgroup2") {
            let controllers = fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
            let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
            if has("memory") && has("io") {
                return Ok(Hierarchy {
                    version: Version::V2,
                    parents: vec![("unified".into(), v2.join(PARENT_NAME))],
                });
            }
        }
        let mut parents = Vec::new();
        let mut missing = Vec::new();
        for (ctrl, required) in [
            ("memory", true),
            ("cpuacct", true),
            ("blkio", true),
            ("freezer", false),
            ("pids", false),
        ] {
            let found = mounts
                .iter()
                .find(|(t, _, opts)| t == "cgroup" && opts.split(',').any(|o| o == ctrl));
            match found {
                // Co-mounted controllers (cpu,cpuacct) share one directory; `unique_dirs`
                // makes each directory once.
                Some((_, mp, _)) => parents.push((ctrl.to_string(), mp.join(PARENT_NAME))),
                None if required => missing.push(ctrl),
                None => {}
            }
        }
        if !missing.is_empty() {
            return Err(CgroupError::Unavailable(format!(
                "cgroup v2 has no memory and io controllers and the v1 {} hierarchies are not mounted",
                missing.join(", ")
            )));
        }
        Ok(Hierarchy { version: Version::V1, parents })
    }

    fn unique_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for (_, d) in &self.parents {
            if !dirs.contains(d) {
                dirs.push(d.clone());
            }
        }
        dirs
    }

    fn dir_of(&self, ctrl: &str) -> Option<&Path> {
        self.parents.iter().find(|(c, _)| c == ctrl).map(|(_, d)| d.as_path())
    }

    /// Kill and remove run cgroups whose coldstart process is gone.
    fn clean_stale(&self) {
        let mut stale = Vec::new();
        for dir in self.unique_dirs() {
            let Ok(entries) = fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = owner_pid(&name) {
                    if !coldstart_sys::pid_alive(pid) && !stale.contains(&name) {
                        stale.push(name);
                    }
                }
            }
        }
        for name in stale {
            let cg = RunCgroup { hierarchy: self.clone(), name, removed: false };
            let _ = cg.destroy();
        }
    }

    /// Create the cgroup of the next run of this process (numbered across all executors of
    /// the process, so two never share one).
    pub fn create_run(&self) -> Result<RunCgroup, CgroupError> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let name = format!("run-{}-{n}", std::process::id());
        let cg = RunCgroup { hierarchy: self.clone(), name, removed: false };
        // If creating a later directory fails, dropping `cg` removes the ones already made.
        for dir in cg.dirs() {
            let mut made = fs::create_dir(&dir);
            if matches!(&made, Err(e) if e.kind() == io::ErrorKind::NotFound) {
                // The parent was released (by this process or another coldstart) since
                // `detect`: make it again.
                self.create_parents()?;
                made = fs::create_dir(&dir);
            }
            if let Err(source) = made {
                if source.kind() != io::ErrorKind::AlreadyExists {
                    return Err(CgroupError::Create { path: dir, source });
                }
            }
        }
        Ok(cg)
    }
}

fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("run-")?;
    rest.split('-').next()?.parse().ok()
}

/// The cgroup of one run. Dropping it kills every member and removes the directories.
#[derive(Debug)]
pub struct RunCgroup {
    hierarchy: Hierarchy,
    name: String,
    removed: bool,
}

impl RunCgroup {
    /// The run cgroup's directory in every hierarchy it spans.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.hierarchy.unique_dirs().into_iter().map(|d| d.join(&self.name)).collect()
    }

    /// The name (`run-PID-N`), which appears in `/proc/PID/cgroup` of its members.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which cgroup version counts the runs.
    pub fn version(&self) -> Version {
        self.hierarchy.version
    }

    /// The `cgroup.procs` files a new member writes `0` into to join (one per hierarchy).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs().into_iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// The directory whose I/O limits apply to the run, for emulated storage
    /// ([`coldstart_storage::CgroupPaths`]): the `blkio` directory on v1, the unified one on v2.
    pub fn io_paths(&self) -> Option<coldstart_storage::CgroupPaths> {
        use coldstart_storage::CgroupPaths;
        match self.hierarchy.version {
            Version::V2 => Some(CgroupPaths::v2(self.hierarchy.parents[0].1.join(&self.name))),
            Version::V1 => {
                Some(CgroupPaths::v1_blkio(self.hierarchy.dir_of("blkio")?.join(&self.name)))
            }
        }
    }

    fn file(&self, ctrl: &str, name: &str) -> Option<PathBuf> {
        let dir = match self.hierarchy.version {
            Version::V2 => self.hierarchy.parents[0].1.as_path(),
            Version::V1 => self.hierarchy.dir_of(ctrl)?,
        };
        Some(dir.join(&self.name).join(name))
    }

    fn read(&self, ctrl: &str, name: &str) -> Option<String> {
        fs::read_to_string(self.file(ctrl, name)?).ok()
    }

    /// Process ids in the cgroup now.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for f in self.procs_files() {
            if let Ok(t) = fs::read_to_string(&f) {
                for p in t.split_whitespace().filter_map(|p| p.parse().ok()) {
                    if !pids.contains(&p) {
                        pids.push(p);
                    }
                }
            }
        }
        pids
    }

    /// Read the counters of the tree (children included): CPU time, faults, bytes read, read
    /// requests and peak memory, each `None` when the hierarchy lacks its file. The other
    /// figures (wall time, instructions, ...) are not the cgroup's and stay at their defaults.
    pub fn counters(&self) -> Counters {
        match self.hierarchy.version {
            Version::V1 => {
                let ns =
                    |n: &str| self.read("cpuacct", n).and_then(|t| t.trim().parse::<u64>().ok());
                let mem = self.read("memory", "memory.stat").unwrap_or_default();
                let (user_s, sys_s) = match (
                    ns("cpuacct.usage"),
                    ns("cpuacct.usage_user"),
                    ns("cpuacct.usage_sys"),
                ) {
                    (Some(total), Some(u), Some(s)) => {
                        let (u, s) = split_cpu(total, u, s);
                        (Some(u as f64 / 1e9), Some(s as f64 / 1e9))
                    }
                    _ => (None, None),
                };
                Counters {
                    user_s,
                    sys_s,
                    major_faults: keyed(&mem, "total_pgmajfault"),
                    minor_faults: keyed(&mem, "total_pgfault").map(|all| {
                        all.saturating_sub(keyed(&mem, "total_pgmajfault").unwrap_or(0))
                    }),
                    read_bytes: self
                        .read("blkio", "blkio.throttle.io_service_bytes_recursive")
                        .map(|t| blkio_reads(&t)),
                    read_requests: self
                        .read("blkio", "blkio.throttle.io_serviced_recursive")
                        .map(|t| blkio_reads(&t)),
                    peak_memory_bytes: self
                        .read("memory", "memory.max_usage_in_bytes")
                        .and_then(|t| t.trim().parse().ok()),
                    ..Counters::default()
                }
            }
            Version::V2 => {
                let cpu = self.read("cpu", "cpu.stat").unwrap_or_default();
                let mem = self.read("memory", "memory.stat").unwrap_or_default();
                let io = self.read("io", "io.stat");
                Counters {
                    user_s: keyed(&cpu, "user_usec").map(|v| v as f64 / 1e6),
                    sys_s: keyed(&cpu, "system_usec").map(|v| v as f64 / 1e6),
                    major_faults: keyed(&mem, "pgmajfault"),
                    minor_faults: keyed(&mem, "pgfault")
                        .map(|all| all.saturating_sub(keyed(&mem, "pgmajfault").unwrap_or(0))),
                    read_bytes: io.as_deref().map(|t| io_stat_sum(t, "rbytes")),
                    read_requests: io.as_deref().map(|t| io_stat_sum(t, "rios")),
                    peak_memory_bytes: self
                        .read("memory", "memory.peak")
                        .and_then(|t| t.trim().parse().ok()),
                    ..Counters::default()
                }
            }
        }
    }

    /// Kill every member and wait until the cgroup is empty (at most `limit`).
    pub fn kill_all(&self, limit: Duration) -> io::Result<()> {
        let start = Instant::now();
        match self.hierarchy.version {
            Version::V2 => {
                if let Some(f) = self.file("", "cgroup.kill") {
                    let _ = fs::write(f, "1");
                }
            }
            Version::V1 => {
                if let Some(state) = self.file("freezer", "freezer.state") {
                    // Freeze so nothing forks between listing and killing, kill, thaw so the
                    // SIGKILLs are delivered.
                    if fs::write(&state, "FROZEN").is_ok() {
                        while start.elapsed() < limit {
                            match fs::read_to_string(&state) {
                                Ok(s) if s.trim() == "FROZEN" => break,
                                Ok(_) => std::thread::sleep(Duration::from_micros(200)),
                                Err(_) => break,
                            }
                        }
                        self.signal_all();
                        let _ = fs::write(&state, "THAWED");
                    }
                }
            }
        }
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(io::Error::other(format!(
                    "processes {pids:?} of cgroup {} survived SIGKILL for {limit:?}",
                    self.name
                )));
            }
            self.signal_all();
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    fn signal_all(&self) {
        for pid in self.pids() {
            // SAFETY: kill(2) with a pid read from the cgroup; a recycled pid cannot be
            // in this cgroup, so only members are signalled.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
    }

    /// Kill everything, then remove the directories. Idempotent.
    pub fn destroy(mut self) -> io::Result<()> {
        self.destroy_inner()
    }

    fn destroy_inner(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        let killed = self.kill_all(Duration::from_secs(5));
        let mut result = killed;
        for dir in self.dirs() {
            let start = Instant::now();
            loop {
                match fs::remove_dir(&dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    // Members that were just killed leave the cgroup a moment later.
                    Err(e) if start.elapsed() < Duration::from_secs(2) => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => {
                        result = result.and(Err(io::Error::new(
                            e.kind(),
                            format!("cannot remove cgroup {}: {e}", dir.display()),
                        )));
                        break;
                    }
                }
            }
        }
        self.removed = true;
        result
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        let _ = self.destroy_inner();
    }
}

/// Split the exact total CPU time by the tick-sampled user/system ratio, as the kernel's
/// `cputime_adjust` does for rusage: `cpuacct.usage` is exact (scheduler runtime) but
/// `usage_user`/`usage_sys` only advance on timer ticks, so a start-up of a few milliseconds
/// would otherwise show no CPU at all.
fn split_cpu(total: u64, user_ticks: u64, sys_ticks: u64) -> (u64, u64) {
    match (user_ticks, sys_ticks) {
        (_, 0) => (total, 0),
        (0, _) => (0, total),
        (u, s) => {
            let user = (total as u128 * u as u128 / (u as u128 + s as u128)) as u64;
            (user, total - user)
        }
    }
}

fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Sum the `Read` lines of a v1 blkio file (`MAJ:MIN Read N`).
fn blkio_reads(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, op, n) = (f.next()?, f.next()?, f.next()?);
            (op == "Read").then(|| n.parse::<u64>().ok()).flatten()
        })
        .sum()
}

/// Sum a key over the devices of a v2 `io.stat` (`MAJ:MIN rbytes=N wbytes=N rios=N ...`).
fn io_stat_sum(text: &str, key: &str) -> u64 {
    text.lines()
        .flat_map(|l| l.split_whitespace().skip(1))
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == key)
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup_mounts_in_mountinfo() {
        let text = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct
40 25 0:35 / /sys/fs/cgroup/unified rw,relatime shared:11 - cgroup2 cgroup2 rw
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
";
        let m = cgroup_mounts(coldstart_process::mountinfo::parse(text));
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].1, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(m[1].2, "rw,cpu,cpuacct");
        assert_eq!(m[2].0, "cgroup2");
    }

    #[test]
    fn reads_v1_and_v2_counter_formats() {
        let blkio =
            "254:0 Read 8192\n254:0 Write 4096\n253:0 Read 4096\n254:0 Total 12288\nTotal 16384\n";
        assert_eq!(blkio_reads(blkio), 12288);
        let io =
            "254:0 rbytes=4096 wbytes=0 rios=1 wios=0\n253:0 rbytes=8192 wbytes=1 rios=2 wios=0\n";
        assert_eq!(io_stat_sum(io, "rbytes"), 12288);
        assert_eq!(io_stat_sum(io, "rios"), 3);
        let mem = "pgfault 100\npgmajfault 3\ntotal_pgmajfault 7\n";
        assert_eq!(keyed(mem, "pgmajfault"), Some(3));
        assert_eq!(keyed(mem, "total_pgmajfault"), Some(7));
        assert_eq!(keyed(mem, "missing"), None);
        assert_eq!(split_cpu(1000, 0, 0), (1000, 0));
        assert_eq!(split_cpu(1000, 0, 4), (0, 1000));
        assert_eq!(split_cpu(1000, 3, 1), (750, 250));
    }

    #[test]
    fn recognises_its_run_cgroups_by_owner() {
        assert_eq!(owner_pid("run-1234-7"), Some(1234));
        assert_eq!(owner_pid("probe-1"), None);
        assert_eq!(owner_pid("other"), None);
    }
}
