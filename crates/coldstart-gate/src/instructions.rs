//! The instructions a start-up runs, counted by valgrind where the CPU does not count them.
//!
//! CPU time is what a user waits for, but other work on the machine stretches it: on the
//! project's 2-core machine one other busy job raised the hot CPU time of unchanged start-ups
//! by up to 47%, so a gate on a shared runner cannot tell 20% more CPU work from a busy
//! neighbour by CPU time alone (it says unclear). The instructions a start-up runs are its
//! work, whatever the load: where `perf_event_open` counts them (a hardware counter), every
//! hot run has them; where it does not (a virtual machine without a PMU, as most CI runners
//! are), valgrind's cachegrind counts them (about 2 s for Debian's python3 importing six
//! modules, 6 s for a Node.js script), run to the program's exit, children included. An
//! unchanged Node.js script counted 684.1 to 697.9 million over
//! 30 counts, half of them with one other busy job (its JIT compiler's threads finish at
//! different points of the main thread's work); Debian's python3 154.7 to 155.1 million: the
//! floor of [`crate::noise`] (2%) is above both, and a tenth of the 20% more CPU work a gate
//! must catch. A gate takes one count, and four more only when it is above the limit.
//!
//! On a program with a JIT compiler whose hot code is replaced sooner or later as its threads
//! happen to run (a Node.js script with a hot loop), the counts fall in clusters (773 and 1,100
//! million): counts of a side that move among themselves by more than [`STEADY_RANGE`] are not
//! judged, and say so.
//!
//! The same count simulates the caches (`--cache-sim=yes`, about a fifth longer than counting
//! instructions alone), of a fixed machine so that a count does not depend on the runner's CPU
//! ([`CACHES`]): the cycles the start-up's misses cost ([`Count::miss_cycles`]) are the rest of
//! its work in user space. The instructions and their misses the same, CPU time that rose is the
//! machine's ([`crate::compare`]): on the project's quiet machine the host stretched an
//! unchanged Node.js script's hot CPU time by up to 1.58 times, which no probe of the machine's
//! speed followed well enough to be allowed for.
//!
//! What the count does not see: time in the kernel (the minor faults, the pages touched and the
//! device's reads judge that), and instructions that run faster or slower than before for
//! reasons the simulation does not model (branches, the other hardware thread).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use coldstart_process::held::Spawner;
use coldstart_ready::Ready;

use crate::error::GateError;

/// The `source` of instructions counted by valgrind (hardware counts have none).
pub const VALGRIND: &str = "valgrind";

/// Counts a baseline takes; a gate takes [`FIRST_COUNTS`], and more up to the baseline's only
/// when the first is above the limit (then their median is judged). Five, so that a program
/// whose counts fall in two clusters shows both in its baseline (a Node.js script with a hot
/// loop: 773 and 1,100 million, about one count in three in the lower).
pub const BASELINE_COUNTS: usize = 5;

/// The most a side's counts may move among themselves for them to be judged: on the programs
/// measured, an unchanged one's moved by 1.8% at most (Node.js); a JIT compiler that replaces
/// a hot loop sooner or later moved them by 43% ([`crate::compare`] shows such counts, and
/// leaves CPU work to CPU time).
pub const STEADY_RANGE: f64 = 0.05;
/// Counts a gate takes first.
pub const FIRST_COUNTS: usize = 1;

/// The longest one count may take: valgrind runs a start-up 20 to 60 times slower.
pub const TIMEOUT: Duration = Duration::from_secs(180);

/// The caches valgrind simulates, whatever the runner's CPU (`--I1`, `--D1`, `--LL`: size in
/// bytes, ways, line size): a first level of 32 KiB, 8 ways, each for instructions and data, as
/// most x86-64 and Arm cores have, and a last level of 8 MiB, 16 ways, a CI runner's share.
pub const CACHES: [&str; 3] = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"];

/// What a miss of the first-level caches costs in [`Count::miss_cycles`]: about 10 cycles,
/// as valgrind's manual says of a modern machine.
pub const FIRST_LEVEL_MISS_CYCLES: u64 = 10;
/// What a miss of the last level costs: a reach to memory, up to 200 cycles (valgrind's manual);
/// 100, as KCachegrind's cycle estimate takes it.
pub const LAST_LEVEL_MISS_CYCLES: u64 = 100;

/// One count of a start-up under valgrind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    /// Instructions run (`Ir`).
    pub instructions: u64,
    /// The cycles its cache misses cost: [`FIRST_LEVEL_MISS_CYCLES`] for each first-level miss
    /// (`I1mr`, `D1mr`, `D1mw`), [`LAST_LEVEL_MISS_CYCLES`] for each last-level one (`ILmr`,
    /// `DLmr`, `DLmw`); `None` when the caches were not simulated.
    pub miss_cycles: Option<u64>,
}

impl std::ops::Add for Count {
    type Output = Count;
    fn add(self, o: Count) -> Count {
        Count {
            instructions: self.instructions + o.instructions,
            miss_cycles: self.miss_cycles.zip(o.miss_cycles).map(|(a, b)| a + b),
        }
    }
}

/// What the counts gave.
#[derive(Debug, Clone, Default)]
pub struct InstructionCounts {
    /// Instructions of each count, the process tree's.
    pub values: Vec<f64>,
    /// The cycles of cache misses of each count ([`Count::miss_cycles`]), where they were
    /// simulated.
    pub miss_cycles: Vec<f64>,
    /// How they were counted ([`VALGRIND`]).
    pub source: String,
    pub warnings: Vec<String>,
    /// How long the counts took, seconds.
    pub seconds: f64,
}

/// Why no count can be taken of a start-up to `ready`, if none can: valgrind missing,
/// or readiness other than the program's exit (valgrind writes its count when the program
/// ends, and a program killed at readiness writes none).
pub fn unavailable(ready: &Ready) -> Option<String> {
    if *ready != Ready::Exit {
        return Some(format!(
            "instructions are not counted: this CPU does not count them, and valgrind counts to the program's \
             exit, not to readiness ({}): CPU work is judged by CPU time alone, which other work on the machine \
             stretches",
            ready
        ));
    }
    if coldstart_process::find_program("valgrind").is_err() {
        return Some(
            "instructions are not counted: this CPU does not count them and valgrind is not installed (Debian: \
             apt-get install valgrind): CPU work is judged by CPU time alone, which other work on the machine \
             stretches"
                .into(),
        );
    }
    None
}

/// Count the instructions of `runs` runs of `command` (in this directory, to its exit) under
/// valgrind. A run that fails to give a count is said in a warning and left out.
pub fn count(command: &[String], runs: usize) -> Result<InstructionCounts, GateError> {
    let start = Instant::now();
    let mut got = InstructionCounts { source: VALGRIND.into(), ..Default::default() };
    for _ in 0..runs {
        match count_once(command)? {
            Ok(n) => {
                got.values.push(n.instructions as f64);
                got.miss_cycles.extend(n.miss_cycles.map(|m| m as f64));
            }
            Err(why) => {
                if !got.warnings.contains(&why) {
                    got.warnings.push(why);
                }
            }
        }
    }
    got.seconds = start.elapsed().as_secs_f64();
    Ok(got)
}

/// One count: `Ok(Err(why))` when valgrind gave none, `Err` when the gate was interrupted.
fn count_once(command: &[String]) -> Result<Result<Count, String>, GateError> {
    let dir =
        tempfile::Builder::new().prefix("coldstart-instructions-").tempdir().map_err(|e| {
            GateError::Invalid(format!("cannot make a directory for valgrind's counts: {e}"))
        })?;
    let out = dir.path().join("cg.%p");
    let log = dir.path().join("valgrind.%p.log");
    let mut argv: Vec<String> = vec![
        "valgrind".into(),
        "--tool=cachegrind".into(),
        "--cache-sim=yes".into(),
        "--trace-children=yes".into(),
        format!("--cachegrind-out-file={}", out.display()),
        format!("--log-file={}", log.display()),
    ];
    argv.extend(CACHES.iter().map(|c| c.to_string()));
    argv.push("--".into());
    argv.extend(command.iter().cloned());
    let mut held = match Spawner::command("valgrind", &argv).null(0).null(1).null(2).spawn() {
        Ok(h) => h,
        Err(e) => {
            return Ok(Err(format!("instructions are not counted: valgrind did not start: {e}")))
        }
    };
    if let Err(e) = held.release() {
        return Ok(Err(format!("instructions are not counted: valgrind did not start: {e}")));
    }
    let deadline = Instant::now() + TIMEOUT;
    let exit = loop {
        if let Some(signal) = coldstart_process::cancel::raised() {
            return Err(GateError::Interrupted { signal });
        }
        match held.wait_timeout(Duration::from_millis(200)) {
            Ok(Some(exit)) => break exit,
            Ok(None) if Instant::now() < deadline => {}
            Ok(None) => {
                return Ok(Err(format!(
                    "instructions are not counted: a start-up under valgrind took more than {} s",
                    TIMEOUT.as_secs()
                )))
            }
            Err(e) => {
                return Ok(Err(format!("instructions are not counted: waiting for valgrind: {e}")))
            }
        }
    };
    // What of the program's group outlives it (a daemon it started) is not its start-up: stopped.
    held.signal_group(libc::SIGKILL);
    if let Some(signal) = exit.signal() {
        return Ok(Err(format!(
            "instructions are not counted: the start-up under valgrind was killed by signal {signal}{}",
            log_tail(dir.path())
        )));
    }
    match total(dir.path()) {
        Some(n) if n.instructions > 0 => Ok(Ok(n)),
        _ => Ok(Err(format!(
            "instructions are not counted: valgrind wrote no count{}",
            log_tail(dir.path())
        ))),
    }
}

/// The count of every process valgrind followed: the sum of the `summary:` lines of the count
/// files in `dir`.
fn total(dir: &Path) -> Option<Count> {
    let mut sum = Count { instructions: 0, miss_cycles: Some(0) };
    let mut any = false;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        if !entry.file_name().to_string_lossy().starts_with("cg.") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).ok()?;
        if let Some(n) = summary(&text) {
            sum = sum + n;
            any = true;
        }
    }
    any.then_some(sum)
}

/// The count of one cachegrind file: its `summary:` line, read by its `events:` line (the
/// misses only when the caches were simulated).
pub fn summary(text: &str) -> Option<Count> {
    let events: Vec<&str> =
        text.lines().find_map(|l| l.strip_prefix("events:"))?.split_whitespace().collect();
    let values: Vec<u64> = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("summary:"))?
        .split_whitespace()
        .map(|v| v.parse().ok())
        .collect::<Option<Vec<u64>>>()?;
    // A file may leave out the trailing zeros of a line of costs.
    let event = |name: &str| -> Option<u64> {
        let i = events.iter().position(|e| *e == name)?;
        Some(values.get(i).copied().unwrap_or(0))
    };
    let weighted = |names: [&str; 3], cycles: u64| -> Option<u64> {
        names.iter().map(|n| event(n)).sum::<Option<u64>>().map(|m| m * cycles)
    };
    let instructions = event("Ir").filter(|_| !values.is_empty())?;
    let first = weighted(["I1mr", "D1mr", "D1mw"], FIRST_LEVEL_MISS_CYCLES);
    let last = weighted(["ILmr", "DLmr", "DLmw"], LAST_LEVEL_MISS_CYCLES);
    Some(Count { instructions, miss_cycles: first.zip(last).map(|(a, b)| a + b) })
}

/// `: ` and the last line valgrind logged that says what went wrong, if any.
fn log_tail(dir: &Path) -> String {
    let logs: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    for path in logs.iter().filter(|p| p.to_string_lossy().ends_with(".log")) {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let said = text
            .lines()
            .map(|l| l.split_once("== ").map_or(l, |(_, rest)| rest).trim())
            .filter(|l| !l.is_empty())
            .rfind(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("error")
                    || l.contains("unhandled")
                    || l.contains("fatal")
                    || l.contains("signal")
            });
        if let Some(line) = said {
            return format!(": {line}");
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_is_the_count() {
        let text = "desc: I1 cache: 32768 B\ncmd: /usr/bin/node app.js\nevents: Ir\nfl=a.c\nfn=f\n242 11\nsummary: 689608874\n";
        assert_eq!(summary(text), Some(Count { instructions: 689_608_874, miss_cycles: None }));
        assert_eq!(summary("events: Ir\n"), None);
        assert_eq!(summary("events: Ir\nsummary: many\n"), None);
        assert_eq!(summary("summary: 12\n"), None);
    }

    #[test]
    fn misses_cost_ten_cycles_in_the_first_level_and_a_hundred_in_the_last() {
        let text =
            "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\nsummary: 1000 400 200 3 5 7 1 2 0\n";
        let c = summary(text).unwrap();
        assert_eq!(c.instructions, 1000);
        assert_eq!(c.miss_cycles, Some((3 + 5 + 7) * 10 + (1 + 2) * 100));
        // Trailing zeros left out are zeros.
        let short =
            "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\nsummary: 1000 400 200 3 5 7 1 2\n";
        assert_eq!(summary(short), Some(c));
    }

    #[test]
    fn a_readiness_other_than_exit_is_said() {
        let why = unavailable(&Ready::Tcp(8080)).unwrap();
        assert!(why.contains("tcp:8080"), "{why}");
        assert!(why.contains("to the program's exit"), "{why}");
    }

    #[test]
    fn the_count_of_every_process_followed_is_summed() {
        let dir = tempfile::tempdir().unwrap();
        let events = "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n";
        std::fs::write(dir.path().join("cg.10"), format!("{events}summary: 100 0 0 1 0 0 0 0 0\n"))
            .unwrap();
        std::fs::write(dir.path().join("cg.11"), format!("{events}summary: 23 0 0 0 0 0 1 0 0\n"))
            .unwrap();
        std::fs::write(dir.path().join("valgrind.10.log"), "==10== done\n").unwrap();
        assert_eq!(total(dir.path()), Some(Count { instructions: 123, miss_cycles: Some(110) }));
    }
}
