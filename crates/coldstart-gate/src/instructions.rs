//! The instructions a start-up runs, counted by valgrind where the CPU does not count them.
//!
//! CPU time is what a user waits for, but other work on the machine stretches it: on the
//! project's 2-core machine one other busy job raised the hot CPU time of unchanged start-ups
//! by up to 47%, so a gate on a shared runner cannot tell 20% more CPU work from a busy
//! neighbour by CPU time alone (it says unclear). The instructions a start-up runs are its
//! work, whatever the load: where `perf_event_open` counts them (a hardware counter), every
//! hot run has them; where it does not (a virtual machine without a PMU, as most CI runners
//! are), valgrind's cachegrind counts them (`--cache-sim=no`: the instructions only, about 2 s
//! for Debian's python3 importing six modules, 5 s for a Node.js script), run to the program's
//! exit, children included. An unchanged Node.js script counted 684.1 to 697.9 million over
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
//! What the count does not see: time in the kernel (page faults, system calls; the pages
//! touched and the device's reads judge those), and instructions that run faster or slower
//! than before (a count that stayed the same while the CPU time rose is the machine's, within
//! its slowdown, [`crate::compare`]).

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

/// What the counts gave.
#[derive(Debug, Clone, Default)]
pub struct InstructionCounts {
    /// Instructions of each count, the process tree's.
    pub values: Vec<f64>,
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
            Ok(n) => got.values.push(n as f64),
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
fn count_once(command: &[String]) -> Result<Result<u64, String>, GateError> {
    let dir =
        tempfile::Builder::new().prefix("coldstart-instructions-").tempdir().map_err(|e| {
            GateError::Invalid(format!("cannot make a directory for valgrind's counts: {e}"))
        })?;
    let out = dir.path().join("cg.%p");
    let log = dir.path().join("valgrind.%p.log");
    let mut argv: Vec<String> = vec![
        "valgrind".into(),
        "--tool=cachegrind".into(),
        "--cache-sim=no".into(),
        "--trace-children=yes".into(),
        format!("--cachegrind-out-file={}", out.display()),
        format!("--log-file={}", log.display()),
        "--".into(),
    ];
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
        Some(n) if n > 0 => Ok(Ok(n)),
        _ => Ok(Err(format!(
            "instructions are not counted: valgrind wrote no count{}",
            log_tail(dir.path())
        ))),
    }
}

/// The instructions of every process valgrind followed: the sum of the `summary:` lines of
/// the count files in `dir`.
fn total(dir: &Path) -> Option<u64> {
    let mut sum = 0u64;
    let mut any = false;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        if !entry.file_name().to_string_lossy().starts_with("cg.") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).ok()?;
        if let Some(n) = summary(&text) {
            sum += n;
            any = true;
        }
    }
    any.then_some(sum)
}

/// The instructions of one cachegrind file run with `--cache-sim=no`: its `summary:` line.
pub fn summary(text: &str) -> Option<u64> {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
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
        assert_eq!(summary(text), Some(689_608_874));
        assert_eq!(summary("events: Ir\n"), None);
        assert_eq!(summary("summary: many\n"), None);
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
        std::fs::write(dir.path().join("cg.10"), "events: Ir\nsummary: 100\n").unwrap();
        std::fs::write(dir.path().join("cg.11"), "events: Ir\nsummary: 23\n").unwrap();
        std::fs::write(dir.path().join("valgrind.10.log"), "==10== done\n").unwrap();
        assert_eq!(total(dir.path()), Some(123));
    }
}
