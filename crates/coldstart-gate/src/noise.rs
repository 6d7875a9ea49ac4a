//! The noise model: what moves each steady figure of a program that did not change, by how
//! much, and the floors the steady rule takes from it (docs/gate.md, "The noise model").
//!
//! The baseline's own spread is measured on the machine as it was while the baseline ran; a
//! gate runs later, on a machine as busy as CI makes it. What moves each figure then:
//!
//! - **reads of the emulated device**: read-ahead and the merging of concurrent faults into
//!   one request depend on timing. Node.js's cold runs fell in two clusters, 608 and about 670
//!   to 724 reads, which of the two most runs of a series land in moving with the load (+19%
//!   between the clusters); on a quiet machine a series stays within 1%.
//! - **bytes read from the emulated device**: the same read-ahead windows, a few of them more
//!   or less: within 1% in the recordings, +0.8% (24.8 to 25.0 MiB) on a 35 MB program with
//!   other work on the machine.
//! - **the whole-tree figures** (bytes read, read requests, major faults on this machine's
//!   disk): the system libraries other processes keep cached or read back.
//! - **pages touched**, from exact page profiles: threads, a JIT compiler and time-dependent
//!   paths make a page or two come and go (Node.js: 4,689 to 4,691 over six profiles, quiet and
//!   with one busy job).
//! - **new functions run** (when the build changed): the functions threads, timers and JIT
//!   compilers make come and go between runs, learned from the baseline's own profiles (each
//!   against the others), with a floor of two pages (8 KiB) as for pages touched; none came
//!   and went in 5 profiles each of Node.js and of the 47 MB sample.
//! - **instructions**: moved by nothing the load does, but by time-dependent paths (when a JIT
//!   compiler's thread finishes, timers, hash seeds): an unchanged Node.js script counted
//!   685.3 to 697.9 million under valgrind over 15 counts on the quiet machine, 684.1 to 693.7
//!   million over 15 with one busy job (1.8% and 1.4%); Debian's python3 154.7 to 155.1
//!   million (0.3%); a C program the same to the instruction ([`crate::instructions`]).
//! - **cycles of cache misses** (valgrind's cache simulation, with the instructions): the same
//!   paths, and where the program's memory lands (address-space randomisation moves it across
//!   the simulated caches' sets): the Node.js script's first-level misses moved by 0.12% and its
//!   last-level ones by 0.51% over 3 counts on the quiet machine (0.05% and 1.41% with one busy
//!   job), Debian's python3's by 0.43% and 0.00%.
//! - **minor faults** (hot): the pages the kernel maps for start-up, the same each run unless
//!   the work changes: the Node.js script 3,187 to 3,204 over the 30 hot runs of its baseline
//!   (`bench/gate-verdicts.sh`, its `baselines/node.txt`).

use serde::{Deserialize, Serialize};

use crate::figure::Figure;

/// The least change of CPU time a gate calls slower: other work on the machine's CPUs makes a
/// start-up's own CPU time longer too (caches and the other hardware thread shared). One busy
/// job raised the median hot CPU time of an unchanged Node.js script by 11.8% and of Debian's
/// python3 importing json, decimal and email by 11.7% (95% interval +8.9% to +13.7%) on the
/// project's 2-core machine; 20% more CPU work must still fail. On a machine busier than at the
/// baseline the square root of its slowdown is allowed for as well (`compare::cpu_allowance`).
pub const CPU_TIME_FLOOR: f64 = 0.15;

/// What moves a steady figure of an unchanged program, as a floor under its limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FigureNoise {
    /// A rise up to this share of the baseline's median is never slower.
    pub floor: f64,
    /// A rise up to this many of the figure's units is never slower.
    pub allowance: f64,
    /// Its runs fall in clusters whose shares move with the machine's timing: the baseline's
    /// upper cluster ([`crate::steady::UPPER`]) is within the limit.
    pub clusters: bool,
}

impl FigureNoise {
    /// No floor: the baseline's own spread alone sets the limit.
    pub const NONE: FigureNoise = FigureNoise { floor: 0.0, allowance: 0.0, clusters: false };

    /// The model of `figure`.
    pub fn of(figure: Figure) -> FigureNoise {
        match figure {
            // Above the distance between the two clusters (+19%): what reads of the device
            // catch is a change of how start-up reads (scattered over more of a file), which
            // moves them by more; one far function is caught by the exact pages.
            Figure::DeviceReadRequests => {
                FigureNoise { floor: 0.20, allowance: 1.0, clusters: true }
            }
            // Three times the largest move seen under load (+0.8%), a third of the 10% more
            // bytes a gate must catch.
            Figure::DeviceReadBytes => FigureNoise { floor: 0.03, allowance: 0.0, clusters: true },
            Figure::ReadBytes | Figure::ReadRequests | Figure::MajorFaults => {
                FigureNoise { floor: 0.10, allowance: 0.0, clusters: true }
            }
            // Two pages, or 0.05% of a large program's: one far function (5 pages) is caught.
            Figure::PagesTouched => FigureNoise { floor: 0.0005, allowance: 2.0, clusters: false },
            // Two pages of code, as pages touched allows; the baseline's own profiles set more
            // where functions come and go. One far function (18 KB) is caught.
            Figure::NewFunctionBytes => {
                FigureNoise { floor: 0.0, allowance: 8192.0, clusters: false }
            }
            // Above the largest range seen on an unchanged program (1.8%), a tenth of the 20%
            // more CPU work a gate must catch; and at least 100,000 instructions (about 50 us),
            // below which no change of a small program's start-up is worth a red build (a
            // 124,056-instruction C program that draws a random number: +8,764).
            Figure::Instructions => {
                FigureNoise { floor: 0.02, allowance: 100_000.0, clusters: false }
            }
            // Four times the largest move seen (the last level's 1.41% with one busy job, of
            // which the weighted sum moves less); and 100,000 cycles, as for instructions.
            Figure::MissCycles => {
                FigureNoise { floor: 0.03, allowance: 100_000.0, clusters: false }
            }
            // Far above the 0.5% an unchanged start-up's move, as for the whole tree's figures:
            // huge pages the kernel finds or not for memory a program asks them for move them
            // on a machine short of free memory. What they must show is the kernel's work grown
            // when CPU time is settled by the work (`compare`), and 10% more faults cost a
            // start-up about 1% of its CPU time (the Node.js script: 3,207 faults, 85 ms).
            Figure::MinorFaults => FigureNoise { floor: 0.10, allowance: 16.0, clusters: false },
            Figure::Time | Figure::CpuTime => FigureNoise::NONE,
        }
    }
}
