//! Page profile without root: page-fault samples from `perf_event_open`.
//!
//! Unprivileged users cannot read tracefs, but may count the page faults of their own
//! processes (`perf_event_paranoid` <= 2). A software `page-faults` event with a sample on
//! every fault gives the faulting address and time; `mmap2` records in the same ring buffer
//! say which file (device, inode, path, offset) each address range maps, so an address turns
//! into a file page. This sees page *faults* only: pages mapped by fault-around and pages
//! read with `read(2)` are missing, so the profile is labelled `sampled`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::format::{PageAccess, PageProfile};
use crate::page_files::describe;
use crate::{ProfileError, ProfileOptions};

use crate::ring::{Ring, PAGE, PERF_RECORD_LOST, PERF_RECORD_MMAP2, PERF_RECORD_SAMPLE};

struct Mapping {
    pid: u32,
    start: u64,
    end: u64,
    pgoff: u64,
    file: usize,
}

/// Record page faults of one start-up of the program (killed at readiness).
pub(crate) fn record_pages_perf(
    options: &ProfileOptions,
    path: &Path,
) -> Result<crate::pages::PageRun, ProfileError> {
    let mut launched = crate::launch(options, path, false, &[], None)?;
    let pid = launched.stopped.pid;
    let guard = crate::tree::TreeGuard { pgid: pid, armed: true };
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as i32;
    let rings = (0..cpus).map(|cpu| Ring::open(pid, cpu)).collect::<Result<Vec<_>, _>>()?;
    let sampler = crate::cpu::CpuSampler::start(pid);
    let t0 = coldstart_sys::monotonic_ns();
    // SAFETY: continuing our own stopped child.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let mut records = Vec::new();
    let start = Instant::now();
    let mut warnings = Vec::new();
    loop {
        rings.iter().for_each(|r| r.drain(&mut records));
        if launched.signal.is_raised() {
            break;
        }
        let mut status = 0;
        // SAFETY: polling our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid && (libc::WIFEXITED(status) || libc::WIFSIGNALED(status)) {
            break;
        }
        if options.timeout.is_some_and(|t| start.elapsed() > t) {
            warnings.push("page run: not ready before the timeout; pages so far are kept".into());
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    rings.iter().for_each(|r| r.drain(&mut records));
    drop(rings);
    let cpu = sampler.map(crate::cpu::CpuSampler::finish);
    launched.stop_pollers();
    drop(guard);
    for r in launched.readers.drain(..) {
        let _ = r.join();
    }

    let mut files: Vec<crate::format::PageFile> = Vec::new();
    let mut file_index: HashMap<PathBuf, usize> = HashMap::new();
    let mut maps: Vec<Mapping> = Vec::new();
    let mut accesses = Vec::new();
    let mut lost = 0u64;
    let u32_at = |r: &[u8], o: usize| u32::from_ne_bytes(r[o..o + 4].try_into().unwrap());
    let u64_at = |r: &[u8], o: usize| u64::from_ne_bytes(r[o..o + 8].try_into().unwrap());
    // Mappings first (rings are per CPU), then the samples in time order.
    records.sort_by_key(|r| {
        let sample = u32_at(r, 0) == PERF_RECORD_SAMPLE && r.len() >= 32;
        (sample, if sample { u64_at(r, 16) } else { 0 })
    });
    for rec in &records {
        let kind = u32_at(rec, 0);
        match kind {
            PERF_RECORD_MMAP2 if rec.len() >= 80 => {
                let (p, addr, len, pgoff) =
                    (u32_at(rec, 8), u64_at(rec, 16), u64_at(rec, 24), u64_at(rec, 32));
                let (maj, min, ino) = (u32_at(rec, 40), u32_at(rec, 44), u64_at(rec, 48));
                let name_bytes = &rec[72..];
                let name = &name_bytes
                    [..name_bytes.iter().position(|&b| b == 0).unwrap_or(name_bytes.len())];
                let name = PathBuf::from(String::from_utf8_lossy(name).into_owned());
                if !name.is_absolute() || ino == 0 {
                    continue;
                }
                let fi = *file_index.entry(name.clone()).or_insert_with(|| {
                    files.push(describe(Some(name.clone()), (maj, min, ino)));
                    files.len() - 1
                });
                maps.retain(|m| m.pid != p || m.end <= addr || m.start >= addr + len);
                maps.push(Mapping { pid: p, start: addr, end: addr + len, pgoff, file: fi });
            }
            PERF_RECORD_SAMPLE if rec.len() >= 32 => {
                let (p, time, addr) = (u32_at(rec, 8), u64_at(rec, 16), u64_at(rec, 24));
                if let Some(m) =
                    maps.iter().rev().find(|m| m.pid == p && addr >= m.start && addr < m.end)
                {
                    accesses.push(PageAccess {
                        file: m.file,
                        page: (addr - m.start + m.pgoff) / PAGE as u64,
                        count: 1,
                        t_ns: time.saturating_sub(t0),
                        event: "fault".into(),
                        pid: p as i32,
                    });
                }
            }
            PERF_RECORD_LOST if rec.len() >= 24 => lost += u64_at(rec, 16),
            _ => {}
        }
    }
    if lost > 0 {
        warnings
            .push(format!("perf lost {lost} page-fault samples: the page profile is incomplete"));
    }
    warnings.push(
        "page profile from page-fault samples (not root): fault-around and read(2) pages are not seen; run as root for the complete tracefs profile"
            .into(),
    );
    Ok(crate::pages::PageRun {
        pages: PageProfile {
            source: "perf".into(),
            sampled: true,
            files,
            accesses,
            lost_events: lost,
        },
        warnings,
        cpu,
    })
}
