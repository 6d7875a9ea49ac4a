//! Writing the `int3` bytes and putting the original ones back, a run of close entries in
//! one write through `/proc/PID/mem` (one system call per run of pages, not one per byte).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

pub(super) const INT3: u8 = 0xCC;
/// Breakpoints closer than this are written with one system call (the bytes between are
/// written back unchanged); farther apart, each gets its own write, so pages without
/// function entries are neither read nor copied.
const MERGE_GAP: u64 = 512;

#[derive(Clone, Copy)]
pub(super) struct Breakpoint {
    pub module: usize,
    pub function: u32,
    pub orig: u8,
    pub armed: bool,
}

/// Read and write the memory of a traced process (`/proc/PID/mem`); a fake in unit tests.
pub(super) trait Memory {
    fn read_exact_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<()>;
    fn read_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<usize>;
    fn write_all_at(&self, buf: &[u8], addr: u64) -> std::io::Result<()>;
    fn write_at(&self, buf: &[u8], addr: u64) -> std::io::Result<usize> {
        self.write_all_at(buf, addr).map(|()| buf.len())
    }
}

impl Memory for File {
    fn read_exact_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<()> {
        FileExt::read_exact_at(self, buf, addr)
    }
    fn read_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<usize> {
        FileExt::read_at(self, buf, addr)
    }
    fn write_all_at(&self, buf: &[u8], addr: u64) -> std::io::Result<()> {
        FileExt::write_all_at(self, buf, addr)
    }
}

/// Arm `addrs` (run-time address, function index; sorted): close entries are written with one
/// write of the file's bytes (`file`, at `file_offset(address)`) with `int3` at each entry;
/// without file bytes, one byte at a time from memory. Entries already armed, and the
/// rendezvous, keep their `int3` and their recorded original byte.
pub(super) fn write_breakpoints(
    mem: &dyn Memory,
    breakpoints: &mut HashMap<u64, Breakpoint>,
    module: usize,
    addrs: &[(u64, u32)],
    file: Option<&[u8]>,
    file_offset: impl Fn(u64) -> Option<usize>,
    rendezvous: Option<u64>,
) -> std::io::Result<()> {
    let offset = |a: u64| file_offset(a).filter(|&o| file.is_some_and(|f| o < f.len()));
    let sorted: Vec<u64> = addrs.iter().map(|a| a.0).collect();
    for (i, j) in groups(&sorted, MERGE_GAP) {
        let (start, end) = (addrs[i].0, addrs[j - 1].0);
        let span = match (offset(start), offset(end), file) {
            (Some(a), Some(b), Some(bytes)) if b >= a && (b - a) as u64 == end - start => {
                Some(&bytes[a..b + 1])
            }
            _ => None,
        };
        if let Some(span) = span {
            let mut buf = span.to_vec();
            for &(a, f) in &addrs[i..j] {
                let off = (a - start) as usize;
                if Some(a) != rendezvous && !breakpoints.get(&a).is_some_and(|b| b.armed) {
                    breakpoints
                        .insert(a, Breakpoint { module, function: f, orig: buf[off], armed: true });
                }
                buf[off] = INT3;
            }
            if let Some(r) = rendezvous.filter(|&r| r >= start && r <= end) {
                buf[(r - start) as usize] = INT3;
            }
            mem.write_all_at(&buf, start)?;
        } else {
            for &(a, f) in &addrs[i..j] {
                let mut b = [0u8; 1];
                if Some(a) == rendezvous
                    || breakpoints.get(&a).is_some_and(|b| b.armed)
                    || mem.read_exact_at(&mut b, a).is_err()
                {
                    continue;
                }
                if mem.write_all_at(&[INT3], a).is_ok() {
                    breakpoints
                        .insert(a, Breakpoint { module, function: f, orig: b[0], armed: true });
                }
            }
        }
    }
    Ok(())
}

/// Put the original byte of every armed breakpoint back, and `extra` (an address and its
/// byte: the rendezvous), a run of close ones in one write; the breakpoints stay known,
/// disarmed.
pub(super) fn restore_breakpoints(
    mem: &dyn Memory,
    breakpoints: &mut HashMap<u64, Breakpoint>,
    extra: Option<(u64, u8)>,
) {
    let mut writes: Vec<(u64, u8)> =
        breakpoints.iter().filter(|(_, b)| b.armed).map(|(&a, b)| (a, b.orig)).collect();
    writes.extend(extra);
    writes.sort_unstable();
    let sorted: Vec<u64> = writes.iter().map(|w| w.0).collect();
    for (i, j) in groups(&sorted, MERGE_GAP) {
        let start = writes[i].0;
        let end = writes[j - 1].0 + 1;
        let mut buf = vec![0u8; (end - start) as usize];
        if mem.read_exact_at(&mut buf, start).is_ok() {
            for &(a, b) in &writes[i..j] {
                buf[(a - start) as usize] = b;
            }
            let _ = mem.write_all_at(&buf, start);
        }
    }
    for bp in breakpoints.values_mut() {
        bp.armed = false;
    }
}

/// Split sorted addresses into groups `(first, end)` (index ranges) whose neighbours are at
/// most `gap` bytes apart: each group becomes one write.
fn groups(sorted: &[u64], gap: u64) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i + 1;
        while j < sorted.len() && sorted[j] - sorted[j - 1] <= gap {
            j += 1;
        }
        out.push((i, j));
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use super::{groups, restore_breakpoints, write_breakpoints, Memory, INT3};

    /// Process memory as a byte vector at `base`; counts writes.
    struct FakeMemory {
        base: u64,
        bytes: RefCell<Vec<u8>>,
        writes: RefCell<usize>,
    }

    impl Memory for FakeMemory {
        fn read_exact_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<()> {
            let off = addr.checked_sub(self.base).ok_or(std::io::ErrorKind::InvalidInput)? as usize;
            let mem = self.bytes.borrow();
            let src = mem.get(off..off + buf.len()).ok_or(std::io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        }
        fn read_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<usize> {
            self.read_exact_at(buf, addr).map(|()| buf.len())
        }
        fn write_all_at(&self, buf: &[u8], addr: u64) -> std::io::Result<()> {
            let off = addr.checked_sub(self.base).ok_or(std::io::ErrorKind::InvalidInput)? as usize;
            let mut mem = self.bytes.borrow_mut();
            mem.get_mut(off..off + buf.len())
                .ok_or(std::io::ErrorKind::UnexpectedEof)?
                .copy_from_slice(buf);
            *self.writes.borrow_mut() += 1;
            Ok(())
        }
    }

    #[test]
    fn arming_puts_int3_at_every_entry_and_restoring_gives_the_text_back() {
        let text: Vec<u8> = (0..16384u32).map(|i| (i * 7 % 251) as u8 + 1).collect();
        let base = 0x40_0000;
        let mem = FakeMemory { base, bytes: RefCell::new(text.clone()), writes: RefCell::new(0) };
        // Entries: a dense cluster, then sparse ones; file offset = address - base.
        let mut addrs: Vec<(u64, u32)> = (0..50).map(|i| (base + 16 * i, i as u32)).collect();
        addrs.extend((0..5).map(|i| (base + 4096 + 2048 * i, 50 + i as u32)));
        let mut bps = HashMap::new();
        let rendezvous = Some(base + 32);
        write_breakpoints(
            &mem,
            &mut bps,
            0,
            &addrs,
            Some(&text),
            |a| Some((a - base) as usize),
            rendezvous,
        )
        .unwrap();

        let now = mem.bytes.borrow().clone();
        for &(a, _) in &addrs {
            assert_eq!(now[(a - base) as usize], INT3, "{a:#x}");
        }
        assert_eq!(bps.len(), addrs.len() - 1, "the rendezvous is not a one-shot breakpoint");
        for (a, b) in &bps {
            assert_eq!(b.orig, text[(*a - base) as usize]);
        }
        let changed = now.iter().zip(&text).filter(|(x, y)| x != y).count();
        assert_eq!(changed, addrs.len(), "nothing but the entries changed");
        assert_eq!(*mem.writes.borrow(), 1 + 5, "one write for the cluster, one per far entry");

        restore_breakpoints(&mem, &mut bps, rendezvous.map(|r| (r, text[32])));
        assert_eq!(*mem.bytes.borrow(), text);
        assert!(bps.values().all(|b| !b.armed));
    }

    #[test]
    fn without_file_bytes_entries_are_armed_one_by_one_and_unmapped_ones_skipped() {
        let text = vec![0x55u8; 8192];
        let base = 0x1000;
        let mem = FakeMemory { base, bytes: RefCell::new(text.clone()), writes: RefCell::new(0) };
        let addrs = vec![(base + 8, 0), (base + 100, 1), (base + 100_000, 2)];
        let mut bps = HashMap::new();
        write_breakpoints(&mem, &mut bps, 3, &addrs, None, |_| None, None).unwrap();
        assert_eq!(bps.len(), 2, "the unmapped entry is skipped");
        assert_eq!(mem.bytes.borrow()[8], INT3);
        assert_eq!(mem.bytes.borrow()[100], INT3);
        assert!(bps.values().all(|b| b.orig == 0x55 && b.module == 3));
    }

    #[test]
    fn close_entries_share_a_write_far_ones_do_not() {
        assert_eq!(groups(&[], 512), vec![]);
        assert_eq!(groups(&[100], 512), vec![(0, 1)]);
        assert_eq!(groups(&[100, 600, 1200, 5000, 5001], 512), vec![(0, 2), (2, 3), (3, 5)]);
    }

    #[test]
    fn twenty_thousand_small_functions_need_few_writes() {
        // 20,000 functions of 16 bytes each, back to back: one write.
        let dense: Vec<u64> = (0..20_000u64).map(|i| 0x1000 + i * 16).collect();
        assert_eq!(groups(&dense, 512).len(), 1);
        // Large functions (2 KiB apart): one write each, never a read of the text between.
        let sparse: Vec<u64> = (0..100u64).map(|i| 0x1000 + i * 2048).collect();
        assert_eq!(groups(&sparse, 512).len(), 100);
    }
}
