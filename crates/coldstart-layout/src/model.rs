//! The page model: where functions lie in the file under a layout, which pages a
//! start-up sequence touches, and how many major faults demand paging with read-ahead
//! takes to bring them in.
//!
//! Read-ahead model (Linux's read-around for a fault in a file mapping, `mm/filemap.c`
//! `do_sync_mmap_readahead`): a fault on a page that is not in the page cache is one read
//! request that brings in a window of `readahead` bytes centred on the faulting page
//! (`start = page - window/2`, clipped to the mapped range), and counts as one major
//! fault. Pages of that window are then resident: later touches of them cost nothing.
//! A `readahead` of 0 (or one page) means every touched page is its own fault. Fault-around
//! (mapping already-cached neighbours) does no I/O and is not modelled. Asynchronous
//! read-ahead of sequential streams is not modelled either: start-up touches code
//! randomly, which is the case the kernel treats with read-around.
//!
//! Newer kernels read executable mappings differently: for a `VM_EXEC` mapping the window
//! starts at the faulting page and runs forward, clipped to the mapping, with no
//! asynchronous part (the read-around of `do_sync_mmap_readahead` since the "exec memory
//! folio order" change; traced on Linux 6.18, where most code faults read `[p, p + 31]`
//! with 128 KiB read-ahead). [`ReadAround::Forward`] models that; a start-up that walks
//! code downwards then faults on nearly every page.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::Serialize;

/// Where the read-ahead window of a fault lies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadAround {
    /// Centred on the faulting page (the classic mmap read-around).
    #[default]
    Centred,
    /// From the faulting page forward (executable mappings on newer kernels).
    Forward,
}

/// Page size and read-ahead window, in bytes, and where the window lies.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PageModel {
    /// Page size, bytes.
    pub page_size: u64,
    /// Read-ahead window, bytes.
    pub readahead: u64,
    /// Where the window lies around a fault.
    #[serde(default)]
    pub read_around: ReadAround,
}

impl Default for PageModel {
    fn default() -> Self {
        PageModel { page_size: 4096, readahead: 128 * 1024, read_around: ReadAround::Centred }
    }
}

impl PageModel {
    /// The read-ahead window in pages (at least 1).
    pub fn window_pages(&self) -> u64 {
        (self.readahead / self.page_size.max(1)).max(1)
    }

    /// Pages spanned by `[offset, offset + size)`.
    pub fn pages_of(&self, offset: u64, size: u64) -> std::ops::RangeInclusive<u64> {
        let ps = self.page_size.max(1);
        offset / ps..=(offset + size.max(1) - 1) / ps
    }
}

/// What a sequence of page touches costs under a [`PageModel`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Cost {
    /// Distinct pages touched.
    pub pages_touched: u64,
    /// Major faults (read requests).
    pub faults: u64,
    /// Pages read from the file (faults times the window, less overlaps and clipping).
    pub pages_read: u64,
    /// Faults after each tenth of the touches (the page-fault curve), 10 points.
    pub curve: Vec<u64>,
}

/// Simulate demand paging of `touches` (page indexes in touch order) in a file region of
/// pages `[lo, hi)`.
pub fn simulate(touches: &[u64], lo: u64, hi: u64, model: PageModel) -> Cost {
    let w = model.window_pages();
    let mut resident: HashSet<u64> = HashSet::new();
    let mut distinct: HashSet<u64> = HashSet::new();
    let mut cost = Cost::default();
    let n = touches.len();
    let mut next_point = 1;
    for (i, &p) in touches.iter().enumerate() {
        distinct.insert(p);
        if !resident.contains(&p) {
            cost.faults += 1;
            let start = match model.read_around {
                ReadAround::Centred => p.saturating_sub(w / 2).max(lo),
                ReadAround::Forward => p.max(lo),
            };
            let end = (start + w).min(hi.max(p + 1));
            for q in start..end {
                if resident.insert(q) {
                    cost.pages_read += 1;
                }
            }
            resident.insert(p);
        }
        while next_point <= 10 && (i + 1) * 10 >= next_point * n {
            cost.curve.push(cost.faults);
            next_point += 1;
        }
    }
    while cost.curve.len() < 10 {
        cost.curve.push(cost.faults);
    }
    cost.pages_touched = distinct.len() as u64;
    cost
}

/// Where each function lies in the file under one layout.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Name (every alias) -> (file offset, size).
    at: HashMap<String, (u64, u64)>,
    /// The code region of the file, as pages `[lo, hi)`: its first page.
    pub lo: u64,
    /// The page after its last.
    pub hi: u64,
}

/// A function as the binary has it.
#[derive(Debug, Clone)]
pub struct Placed {
    /// Every alias, the preferred first.
    pub names: Vec<String>,
    /// File offset.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

impl Placement {
    /// The binary's own layout.
    pub fn actual(functions: &[Placed], model: PageModel) -> Placement {
        let mut p = Placement::default();
        let (mut lo, mut hi) = (u64::MAX, 0);
        for f in functions {
            for n in &f.names {
                p.at.insert(n.clone(), (f.offset, f.size));
            }
            lo = lo.min(f.offset);
            hi = hi.max(f.offset + f.size);
        }
        if lo == u64::MAX {
            lo = 0;
        }
        p.lo = lo / model.page_size;
        p.hi = hi.div_ceil(model.page_size);
        p
    }

    /// The layout a linker would give with `order` first (each function aligned to
    /// `align` bytes), then every other function in its current address order, from the
    /// start of the current code.
    pub fn ordered(
        functions: &[Placed],
        order: &[String],
        align: u64,
        model: PageModel,
    ) -> Placement {
        let by_name: HashMap<&str, usize> = functions
            .iter()
            .enumerate()
            .flat_map(|(i, f)| f.names.iter().map(move |n| (n.as_str(), i)))
            .collect();
        let mut sequence = Vec::with_capacity(functions.len());
        let mut used = vec![false; functions.len()];
        for name in order {
            if let Some(&i) = by_name.get(name.as_str()) {
                if !used[i] {
                    used[i] = true;
                    sequence.push(i);
                }
            }
        }
        let mut rest: Vec<usize> = (0..functions.len()).filter(|&i| !used[i]).collect();
        rest.sort_by_key(|&i| functions[i].offset);
        sequence.extend(rest);
        let start = functions.iter().map(|f| f.offset).min().unwrap_or(0);
        let mut cursor = start;
        let mut p = Placement::default();
        for i in sequence {
            let f = &functions[i];
            cursor = cursor.next_multiple_of(align.max(1));
            for n in &f.names {
                p.at.insert(n.clone(), (cursor, f.size));
            }
            cursor += f.size;
        }
        p.lo = start / model.page_size;
        p.hi = cursor.div_ceil(model.page_size).max(p.lo + 1);
        p
    }

    /// The file range of a function by any of its names.
    pub fn get(&self, names: &[String]) -> Option<(u64, u64)> {
        names.iter().find_map(|n| self.at.get(n).copied())
    }

    /// The page touches of a first-touch sequence of functions (each function's pages, in
    /// order), and how many functions of the sequence the layout does not have.
    pub fn touches(&self, sequence: &[Vec<String>], model: PageModel) -> (Vec<u64>, usize) {
        let mut out = Vec::new();
        let mut missing = 0;
        for names in sequence {
            match self.get(names) {
                Some((off, size)) => out.extend(model.pages_of(off, size)),
                None => missing += 1,
            }
        }
        (out, missing)
    }

    /// Bytes of the given functions that fall in each touched page.
    pub fn used_bytes_per_page(
        &self,
        sequence: &[Vec<String>],
        model: PageModel,
    ) -> HashMap<u64, u64> {
        let mut used: HashMap<u64, u64> = HashMap::new();
        let mut seen: BTreeSet<(u64, u64)> = BTreeSet::new();
        let ps = model.page_size;
        for names in sequence {
            let Some((off, size)) = self.get(names) else { continue };
            if !seen.insert((off, size)) {
                continue;
            }
            for page in model.pages_of(off, size) {
                let a = off.max(page * ps);
                let b = (off + size).min((page + 1) * ps);
                *used.entry(page).or_default() += b.saturating_sub(a);
            }
        }
        used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: PageModel =
        PageModel { page_size: 4096, readahead: 4 * 4096, read_around: ReadAround::Centred };

    #[test]
    fn a_fault_reads_a_window_centred_on_the_page() {
        // Window of 4 pages around page 10: 8..12, so 9 and 11 are free; 12 faults and
        // reads 10..14, of which 12 and 13 are new.
        let c = simulate(&[10, 9, 11, 12], 0, 100, M);
        assert_eq!(c.faults, 2);
        assert_eq!(c.pages_touched, 4);
        assert_eq!(c.pages_read, 6);
    }

    #[test]
    fn a_forward_window_reads_from_the_page_on_so_walking_down_faults_every_page() {
        let f = PageModel { read_around: ReadAround::Forward, ..M };
        // Up: 10 reads 10..14, so 11..13 are free.
        let up = simulate(&[10, 11, 12, 13], 0, 100, f);
        assert_eq!((up.faults, up.pages_read), (1, 4));
        // Down: each page is below every window read so far.
        let down = simulate(&[13, 12, 11, 10], 0, 100, f);
        assert_eq!((down.faults, down.pages_read), (4, 7));
        // Centred, the same walk down is two faults.
        assert_eq!(simulate(&[13, 12, 11, 10], 0, 100, M).faults, 2);
        // Clipped at the end of the region.
        assert_eq!(simulate(&[98], 0, 100, f).pages_read, 2);
    }

    #[test]
    fn the_window_is_clipped_to_the_region() {
        let c = simulate(&[0], 0, 2, M);
        assert_eq!((c.faults, c.pages_read), (1, 2));
    }

    #[test]
    fn without_readahead_every_page_faults() {
        let m = PageModel { readahead: 0, ..M };
        let c = simulate(&[1, 2, 3, 2], 0, 10, m);
        assert_eq!((c.faults, c.pages_touched), (3, 3));
        assert_eq!(c.curve.len(), 10);
        assert_eq!(*c.curve.last().unwrap(), 3);
    }

    #[test]
    fn ordering_packs_the_listed_functions_at_the_start() {
        let fs: Vec<Placed> = (0..8)
            .map(|i| Placed {
                names: vec![format!("f{i}")],
                offset: 0x1000 + i * 0x1000,
                size: 0x800,
            })
            .collect();
        let p = Placement::ordered(&fs, &["f7".into(), "f3".into()], 16, M);
        assert_eq!(p.get(&["f7".into()]), Some((0x1000, 0x800)));
        assert_eq!(p.get(&["f3".into()]), Some((0x1800, 0x800)));
        let seq = vec![vec!["f7".to_string()], vec!["f3".to_string()]];
        let (touches, missing) = p.touches(&seq, M);
        assert_eq!((touches, missing), (vec![1, 1], 0));
    }
}
