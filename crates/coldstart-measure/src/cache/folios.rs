//! Large folios: pages held by a neighbour.
//!
//! The page cache keeps a file in *folios* of 1 to 512 pages (the kernel reads ahead into large
//! folios where the file system supports them, as ext4 and XFS do), and eviction drops whole
//! folios: a folio of which one page is mapped stays resident with all its pages. So a page
//! outside every range another process maps is still held when it shares a folio with a page
//! inside one (the end of an ELF file past its last segment, read with the segment before it,
//! is the common case). Where folios begin and end is visible only to root, through
//! `/proc/kpageflags` (`KPF_COMPOUND_HEAD` and `KPF_COMPOUND_TAIL`) at the page frame numbers
//! `/proc/self/pagemap` gives for a mapping of the file; without it, such pages count as an
//! eviction that failed.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::mapping::Mapping;
use super::pages::PageSet;
use coldstart_sys::page_size;

const KPF_COMPOUND_HEAD: u64 = 1 << 15;
const KPF_COMPOUND_TAIL: u64 = 1 << 16;
/// The largest folio the page cache uses (order 9 on x86-64: 2 MiB).
const MAX_FOLIO_PAGES: u64 = 512;

fn read_u64s(file: &File, index: u64, count: usize) -> io::Result<Vec<u64>> {
    let mut buf = vec![0u8; count * 8];
    let n = file.read_at(&mut buf, index * 8)?;
    Ok(buf[..n - n % 8]
        .chunks_exact(8)
        .map(|w| u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
        .collect())
}

/// Of the pages of `file` that are `resident` (one `mincore` byte per page) and outside
/// `mapped` (the pages other processes map), those that share a folio with a page in `mapped`.
/// Empty when folios cannot be seen (not root, no `/proc/kpageflags`).
pub(super) fn held_by_folio(file: &File, resident: &[u8], mapped: &PageSet) -> io::Result<PageSet> {
    let mut held = PageSet::new();
    let candidates: Vec<u64> = (0..resident.len() as u64)
        .filter(|&p| resident[p as usize] & 1 != 0)
        .filter(|&p| !mapped.contains(p))
        .collect();
    if candidates.is_empty() || mapped.is_empty() {
        return Ok(held);
    }
    let Ok(kpageflags) = File::open("/proc/kpageflags") else { return Ok(held) };
    let pagemap = File::open("/proc/self/pagemap")?;
    let ps = page_size();
    let map = Mapping::new(file, resident.len() * ps as usize)?;
    // SAFETY: advice on our own mapping: a fault reads only the faulting page.
    unsafe { libc::madvise(map.addr, map.len, libc::MADV_RANDOM) };
    let first_vpage = map.addr as u64 / ps;
    let mut covered_to = 0u64;
    for p in candidates {
        if p < covered_to {
            continue;
        }
        // SAFETY: `p` is a page of the mapping; the page is resident, so reading it maps it
        // without I/O (a page evicted since `mincore` is read back: one page, with MADV_RANDOM).
        unsafe { std::ptr::read_volatile((map.addr as *const u8).add((p * ps) as usize)) };
        let Some(&entry) = read_u64s(&pagemap, first_vpage + p, 1)?.first() else { continue };
        let pfn = entry & ((1 << 55) - 1);
        if entry >> 63 == 0 || pfn == 0 {
            continue;
        }
        let back = pfn.min(MAX_FOLIO_PAGES - 1);
        let flags = read_u64s(&kpageflags, pfn - back, back as usize + 1)?;
        let Some(&own) = flags.last() else { continue };
        if own & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL) == 0 {
            continue; // a folio of one page
        }
        let Some(head_back) = flags.iter().rev().position(|f| f & KPF_COMPOUND_HEAD != 0) else {
            continue;
        };
        let head_pfn = pfn - head_back as u64;
        let Some(start) = p.checked_sub(head_back as u64) else { continue };
        let after = read_u64s(&kpageflags, head_pfn + 1, MAX_FOLIO_PAGES as usize - 1)?;
        let tails = after.iter().take_while(|f| *f & KPF_COMPOUND_TAIL != 0).count() as u64;
        let folio = PageSet::from_ranges([(start, start + 1 + tails)]);
        covered_to = start + 1 + tails;
        if !folio.intersect(mapped).is_empty() {
            held.extend(&folio);
        }
    }
    Ok(held)
}
