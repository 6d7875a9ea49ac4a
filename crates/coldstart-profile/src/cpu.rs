//! Where the program's CPU time goes, by file, from samples: how much of start-up ran in
//! modules that have no function symbols.
//!
//! The function tracers see a function only where a symbol names its entry; a module
//! without symbols (a stripped `libxul.so` lists 2 functions for 118 MiB of code) is
//! profiled at page level only, and the profile alone cannot say how much of start-up that
//! leaves out. A `task-clock` event sampled every 250 µs of CPU time, inherited by every
//! thread and child of the program, gives the instruction pointer of each sample; `mmap2`
//! and `fork` records in the same rings say which file each address maps. The kernel's time
//! is left out.
//!
//! The page run is the one sampled: it runs the program without breakpoints. A perf event on
//! the process made the function run's traps slower (the 20,000-function profile took 10%
//! longer under the audit tracer, twice as long under ptrace, where every trap is two
//! context switches).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use coldstart_sys::perf;

use crate::ring::{Ring, PERF_RECORD_LOST, PERF_RECORD_MMAP2, PERF_RECORD_SAMPLE};

/// `PERF_COUNT_SW_TASK_CLOCK`.
const COUNT_SW_TASK_CLOCK: u64 = 1;
/// `PERF_SAMPLE_IP`.
const SAMPLE_IP: u64 = 1 << 0;
/// The `task` bit of `perf_event_attr`: fork and exit records.
const FLAG_TASK: u64 = 1 << 13;
const PERF_RECORD_FORK: u32 = 7;
/// CPU time between samples, nanoseconds.
pub(crate) const PERIOD_NS: u64 = 250_000;

/// A sampler of one program's CPU time; [`CpuSampler::finish`] stops it.
pub(crate) struct CpuSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Vec<u8>>>>,
}

impl Drop for CpuSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Samples by the file their instruction pointer was in.
#[derive(Debug, Default)]
pub(crate) struct CpuSamples {
    pub by_file: HashMap<PathBuf, u64>,
    /// Samples in user space, attributed to a file or not (anonymous code, the vdso).
    pub total: u64,
    /// Samples the kernel could not write (the rings were full).
    pub lost: u64,
}

impl CpuSampler {
    /// Sample `pid` (stopped before its `execve`) and what it starts, from its exec on.
    /// `None` when perf events are not allowed (`perf_event_paranoid`) or not there.
    pub(crate) fn start(pid: i32) -> Option<CpuSampler> {
        let mut attr = perf::Attr::new(perf::TYPE_SOFTWARE, COUNT_SW_TASK_CLOCK);
        attr.sample_period = PERIOD_NS;
        attr.sample_type = SAMPLE_IP | perf::SAMPLE_TID | perf::SAMPLE_TIME;
        attr.flags = perf::FLAG_DISABLED
            | perf::FLAG_INHERIT
            | perf::FLAG_EXCLUDE_KERNEL
            | perf::FLAG_EXCLUDE_HV
            | perf::FLAG_MMAP
            | FLAG_TASK
            | perf::FLAG_ENABLE_ON_EXEC
            | perf::FLAG_SAMPLE_ID_ALL
            | perf::FLAG_MMAP2
            | perf::FLAG_USE_CLOCKID;
        attr.clockid = libc::CLOCK_MONOTONIC;
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as i32;
        let rings: Vec<Ring> =
            (0..cpus).map(|cpu| Ring::open_with(&attr, pid, cpu)).collect::<Result<_, _>>().ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        let thread = std::thread::Builder::new()
            .name("coldstart-cpu".into())
            .spawn(move || {
                let mut records = Vec::new();
                loop {
                    let stopping = done.load(Ordering::Acquire);
                    rings.iter().for_each(|r| r.drain(&mut records));
                    if stopping {
                        return records;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
            .ok()?;
        Some(CpuSampler { stop, thread: Some(thread) })
    }

    /// Stop sampling and attribute the samples.
    pub(crate) fn finish(mut self) -> CpuSamples {
        self.stop.store(true, Ordering::Release);
        let records = self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default();
        attribute(records)
    }
}

/// One mapping of a file into a process.
struct Mapping {
    pid: u32,
    start: u64,
    end: u64,
    file: usize,
}

/// The samples of `records` (of every CPU) by file, records replayed in time order.
fn attribute(mut records: Vec<Vec<u8>>) -> CpuSamples {
    let u32_at = |r: &[u8], o: usize| u32::from_ne_bytes(r[o..o + 4].try_into().unwrap());
    let u64_at = |r: &[u8], o: usize| u64::from_ne_bytes(r[o..o + 8].try_into().unwrap());
    // A sample's time is its own field; other records carry it last (`sample_id_all`).
    records.retain(|r| r.len() >= 16);
    records.sort_by_key(|r| match u32_at(r, 0) {
        PERF_RECORD_SAMPLE if r.len() >= 32 => u64_at(r, 24),
        _ => u64_at(r, r.len() - 8),
    });
    let mut files: Vec<PathBuf> = Vec::new();
    let mut index: HashMap<PathBuf, usize> = HashMap::new();
    let mut maps: Vec<Mapping> = Vec::new();
    let mut counts: HashMap<usize, u64> = HashMap::new();
    let mut out = CpuSamples::default();
    for rec in &records {
        match u32_at(rec, 0) {
            PERF_RECORD_MMAP2 if rec.len() >= 80 => {
                let (pid, addr, len) = (u32_at(rec, 8), u64_at(rec, 16), u64_at(rec, 24));
                let name = &rec[72..];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                let path = PathBuf::from(String::from_utf8_lossy(name).into_owned());
                maps.retain(|m| m.pid != pid || m.end <= addr || m.start >= addr + len);
                if path.is_absolute() {
                    let file = *index.entry(path.clone()).or_insert_with(|| {
                        files.push(path);
                        files.len() - 1
                    });
                    maps.push(Mapping { pid, start: addr, end: addr + len, file });
                }
            }
            PERF_RECORD_FORK if rec.len() >= 32 => {
                let (pid, ppid) = (u32_at(rec, 8), u32_at(rec, 12));
                if pid != ppid {
                    // A new process: a copy of its parent's mappings.
                    let copied: Vec<Mapping> = maps
                        .iter()
                        .filter(|m| m.pid == ppid)
                        .map(|m| Mapping { pid, start: m.start, end: m.end, file: m.file })
                        .collect();
                    maps.extend(copied);
                }
            }
            PERF_RECORD_SAMPLE if rec.len() >= 32 => {
                let (ip, pid) = (u64_at(rec, 8), u32_at(rec, 16));
                out.total += 1;
                if let Some(m) =
                    maps.iter().rev().find(|m| m.pid == pid && ip >= m.start && ip < m.end)
                {
                    *counts.entry(m.file).or_default() += 1;
                }
            }
            PERF_RECORD_LOST if rec.len() >= 24 => out.lost += u64_at(rec, 16),
            _ => {}
        }
    }
    out.by_file = counts.into_iter().map(|(f, n)| (files[f].clone(), n)).collect();
    out
}
