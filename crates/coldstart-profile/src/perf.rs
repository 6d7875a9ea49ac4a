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
use std::time::Duration;

use crate::format::{PageAccess, PageFile, PageProfile};
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
    let mut warnings = Vec::new();
    launched.poll_until_ready(options.timeout, Duration::from_millis(1), &mut warnings, || {
        rings.iter().for_each(|r| r.drain(&mut records));
        Ok(())
    })?;
    rings.iter().for_each(|r| r.drain(&mut records));
    drop(rings);
    let cpu = sampler.map(crate::cpu::CpuSampler::finish);
    launched.stop_pollers();
    drop(guard);
    for r in launched.readers.drain(..) {
        let _ = r.join();
    }

    let faults = Faults::of(records, t0);
    if faults.lost > 0 {
        warnings.push(format!(
            "perf lost {} page-fault samples: the page profile is incomplete",
            faults.lost
        ));
    }
    warnings.push(
        "page profile from page-fault samples (not root): fault-around and read(2) pages are not seen; run as root for the complete tracefs profile"
            .into(),
    );
    Ok(crate::pages::PageRun {
        pages: PageProfile {
            source: "perf".into(),
            sampled: true,
            files: faults.files,
            accesses: faults.accesses,
            lost_events: faults.lost,
        },
        warnings,
        cpu,
    })
}

/// What the perf records of a run say: the files mapped, each fault in a mapped file as a
/// page access, and the samples lost.
struct Faults {
    files: Vec<PageFile>,
    accesses: Vec<PageAccess>,
    lost: u64,
}

impl Faults {
    /// Decode `records` (from every CPU's ring): the mappings first, then the samples in time
    /// order, each at the page of the file its address maps (times since `t0`).
    fn of(mut records: Vec<Vec<u8>>, t0: u64) -> Faults {
        let mut faults = Faults { files: Vec::new(), accesses: Vec::new(), lost: 0 };
        let mut file_index: HashMap<PathBuf, usize> = HashMap::new();
        let mut maps: Vec<Mapping> = Vec::new();
        records.sort_by_key(|r| {
            let sample = u32_at(r, 0) == PERF_RECORD_SAMPLE && r.len() >= 32;
            (sample, if sample { u64_at(r, 16) } else { 0 })
        });
        for rec in &records {
            match u32_at(rec, 0) {
                PERF_RECORD_MMAP2 if rec.len() >= 80 => {
                    let Some((mut mapping, name, key)) = mmap2(rec) else { continue };
                    let files = &mut faults.files;
                    mapping.file = *file_index.entry(name.clone()).or_insert_with(|| {
                        files.push(describe(Some(name), key));
                        files.len() - 1
                    });
                    maps.retain(|m| {
                        m.pid != mapping.pid || m.end <= mapping.start || m.start >= mapping.end
                    });
                    maps.push(mapping);
                }
                PERF_RECORD_SAMPLE if rec.len() >= 32 => {
                    let (p, time, addr) = (u32_at(rec, 8), u64_at(rec, 16), u64_at(rec, 24));
                    if let Some(m) =
                        maps.iter().rev().find(|m| m.pid == p && addr >= m.start && addr < m.end)
                    {
                        faults.accesses.push(PageAccess {
                            file: m.file,
                            page: (addr - m.start + m.pgoff) / PAGE as u64,
                            count: 1,
                            t_ns: time.saturating_sub(t0),
                            event: "fault".into(),
                            pid: p as i32,
                        });
                    }
                }
                PERF_RECORD_LOST if rec.len() >= 24 => faults.lost += u64_at(rec, 16),
                _ => {}
            }
        }
        faults
    }
}

/// The mapping an `mmap2` record describes (its file not yet numbered), with the file's path
/// and key; none for an anonymous or unnamed mapping.
fn mmap2(rec: &[u8]) -> Option<(Mapping, PathBuf, (u32, u32, u64))> {
    let (pid, addr, len, pgoff) =
        (u32_at(rec, 8), u64_at(rec, 16), u64_at(rec, 24), u64_at(rec, 32));
    let (maj, min, ino) = (u32_at(rec, 40), u32_at(rec, 44), u64_at(rec, 48));
    let name_bytes = &rec[72..];
    let name = &name_bytes[..name_bytes.iter().position(|&b| b == 0).unwrap_or(name_bytes.len())];
    let name = PathBuf::from(String::from_utf8_lossy(name).into_owned());
    if !name.is_absolute() || ino == 0 {
        return None;
    }
    Some((Mapping { pid, start: addr, end: addr + len, pgoff, file: 0 }, name, (maj, min, ino)))
}

/// The native-endian `u32` at `o` in a record.
fn u32_at(r: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(r[o..o + 4].try_into().unwrap())
}

/// The native-endian `u64` at `o` in a record.
fn u64_at(r: &[u8], o: usize) -> u64 {
    u64::from_ne_bytes(r[o..o + 8].try_into().unwrap())
}
