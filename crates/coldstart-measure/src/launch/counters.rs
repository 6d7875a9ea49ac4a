//! The run's figures: faults, bytes read, CPU and peak memory of the tree (from the cgroup,
//! `/proc` and `wait4` rusage), read requests (from the block devices' statistics) and
//! instructions (`perf_event_open`).
//!
//! Which source gives which figure, and why, is in the [`crate::cgroup`] module docs: per-task
//! accounting for faults and bytes, the physical devices for read requests, the cgroup for CPU
//! time and peak memory, and on cgroup v2 its `io.stat` for bytes and requests.

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use crate::cgroup::RunCgroup;
use coldstart_formats::measure::Counters;

/// The readings taken before the child execs, subtracted from the same readings at readiness.
pub(super) struct Before {
    /// [`disk_reads`].
    disk: Option<u64>,
    /// Reads completed and sectors read by the emulated storage device.
    device: Option<(u64, u64)>,
}

impl Before {
    pub(super) fn read(device_stat: Option<&Path>) -> Before {
        let disk = disk_reads();
        let device = device_stat.and_then(device_reads);
        Before { disk, device }
    }
}

/// The counters of the run at readiness, `wall_s` from exec to readiness: the per-task sums
/// over `members` (and the reaped root's rusage), the block devices' reads since `before`,
/// then what the cgroup counts better, and the instructions.
pub(super) fn at_readiness(
    wall_s: f64,
    members: &[u32],
    root: Option<&libc::rusage>,
    before: &Before,
    device_stat: Option<&Path>,
    cgroup: Option<&RunCgroup>,
    perf: Option<&OwnedFd>,
) -> Counters {
    let mut counters = Counters { wall_s, ..task_counters(members, root) };
    counters.read_requests = since(before.disk, disk_reads());
    // Only this run reads from the emulated device: its counts are exact.
    let device = device_stat.and_then(device_reads);
    counters.storage_read_requests = since(before.device.map(|d| d.0), device.map(|d| d.0));
    counters.storage_read_bytes =
        since(before.device.map(|d| d.1), device.map(|d| d.1)).map(|sectors| sectors * 512);
    if let Some(cg) = cgroup {
        let c = cg.counters();
        // The cgroup's CPU time covers every member, exited or not.
        counters.user_s = c.user_s.or(counters.user_s);
        counters.sys_s = c.sys_s.or(counters.sys_s);
        counters.peak_memory_bytes = c.peak_memory_bytes;
        // v2 attributes block I/O to the cgroup; v1's blkio counts nothing for the page cache
        // on current kernels, so there the per-task sums and the disk counters stay.
        if cg.version() == crate::cgroup::Version::V2 {
            counters.read_bytes = c.read_bytes.or(counters.read_bytes);
            counters.read_requests = c.read_requests.or(counters.read_requests);
        }
    } else {
        counters.peak_memory_bytes = root.map(|ru| ru.ru_maxrss as u64 * 1024);
    }
    counters.instructions = perf.and_then(read_u64);
    counters
}

/// How much a counter grew from `before` to `after`; `None` unless both were read.
fn since(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    Some(after?.saturating_sub(before?))
}

/// An instruction counter on `pid` and its future descendants, user space only, enabled on exec.
pub(super) fn perf_instructions(pid: libc::pid_t) -> Option<OwnedFd> {
    use coldstart_sys::perf;
    let mut attr = perf::Attr::new(perf::TYPE_HARDWARE, perf::COUNT_HW_INSTRUCTIONS);
    attr.flags = perf::FLAG_DISABLED
        | perf::FLAG_INHERIT
        | perf::FLAG_EXCLUDE_KERNEL
        | perf::FLAG_EXCLUDE_HV
        | perf::FLAG_ENABLE_ON_EXEC;
    perf::open(&attr, pid, -1).ok()
}

fn read_u64(fd: &OwnedFd) -> Option<u64> {
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into v.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    (n == 8).then_some(v)
}

/// Faults, bytes read and CPU summed over processes: each live member's own figures plus
/// those of the children it reaped (`/proc/PID/stat`, `/proc/PID/io`), plus the root's
/// `wait4` rusage once it has been reaped (which again includes its reaped children).
///
/// Per-task accounting is exact to the event, unlike the cgroup v1 `memory.stat` event
/// counters, which the kernel flushes lazily (a small start-up's few dozen faults can be
/// missing from them). What it misses: a process that exited and was reaped by init (a
/// daemon's double fork) before readiness.
fn task_counters(members: &[u32], root: Option<&libc::rusage>) -> Counters {
    let (mut major_faults, mut minor_faults, mut read_bytes) = (0u64, 0u64, 0u64);
    let (mut user_s, mut sys_s) = (0f64, 0f64);
    if let Some(ru) = root {
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        major_faults += ru.ru_majflt as u64;
        minor_faults += ru.ru_minflt as u64;
        read_bytes += ru.ru_inblock as u64 * 512;
        user_s += tv(ru.ru_utime);
        sys_s += tv(ru.ru_stime);
    }
    // SAFETY: sysconf is always safe.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    for pid in members {
        if let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) {
            let f = parse_stat(&stat);
            let n = |i: usize| f.get(i).copied().unwrap_or(0);
            // minflt, cminflt, majflt, cmajflt, utime, stime, cutime, cstime.
            minor_faults += n(7) + n(8);
            major_faults += n(9) + n(10);
            user_s += (n(11) + n(13)) as f64 / hz;
            sys_s += (n(12) + n(14)) as f64 / hz;
        }
        if let Ok(io) = fs::read_to_string(format!("/proc/{pid}/io")) {
            read_bytes += io
                .lines()
                .find_map(|l| {
                    l.strip_prefix("read_bytes: ").and_then(|v| v.trim().parse::<u64>().ok())
                })
                .unwrap_or(0);
        }
    }
    Counters {
        major_faults: Some(major_faults),
        minor_faults: Some(minor_faults),
        read_bytes: Some(read_bytes),
        user_s: Some(user_s),
        sys_s: Some(sys_s),
        ..Counters::default()
    }
}

/// The numeric fields of `/proc/PID/stat` after the command name, 0-based from the state
/// (which parses as 0).
fn parse_stat(stat: &str) -> Vec<u64> {
    let Some((_, rest)) = stat.rsplit_once(')') else { return Vec::new() };
    rest.split_whitespace().map(|v| v.parse::<u64>().unwrap_or(0)).collect()
}

/// Field 1 of a `/sys/block/NAME/stat` file: reads completed.
fn reads_completed(stat: &Path) -> Option<u64> {
    fs::read_to_string(stat).ok()?.split_whitespace().next()?.parse().ok()
}

/// Fields 1 and 3 of a `/sys/block/NAME/stat` file: reads completed and sectors (of 512
/// bytes, whatever the device's own sector size) read.
fn device_reads(stat: &Path) -> Option<(u64, u64)> {
    let text = fs::read_to_string(stat).ok()?;
    let f: Vec<u64> =
        text.split_whitespace().take(3).map(|v| v.parse().ok()).collect::<Option<_>>()?;
    Some((*f.first()?, *f.get(2)?))
}

/// Reads completed by the physical block devices (`/sys/block/*/stat`, first field), summed.
///
/// These are system-wide: they count every process's reads during the run, so on a busy
/// machine they are an upper bound for the run's read requests. Virtual devices (loop, zram,
/// device-mapper) are left out: their reads reach a physical device and would count twice.
fn disk_reads() -> Option<u64> {
    let mut total = None;
    for e in fs::read_dir("/sys/block").ok()?.flatten() {
        let dir = e.path();
        if !dir.join("device").exists() {
            continue;
        }
        if let Some(v) = reads_completed(&dir.join("stat")) {
            *total.get_or_insert(0) += v;
        }
    }
    total
}
