//! Record every run of an unchanged program as a gate measures it, for the noise model.
//!
//! ```text
//! noise-record --program NAME --disturbance NAME --description TEXT \
//!     [--batches 4] [--runs 5] [--profiles 6] -o FILE -- CMD...
//! ```
//!
//! BATCHES measurements of RUNS cold and RUNS hot runs each (each its own discovery and
//! emulated device, as a gate's batches), with coldstart's calibration loop after every run,
//! then PROFILES exact page profiles one by one, and the time each step took. Written as a
//! `coldstart-gate-noise` recording ([`coldstart_gate::replay`]). Needs root. The disturbance
//! is the caller's to start and stop (`bench/gate-noise.sh`); this only names it.

use std::time::Instant;

use coldstart_gate::linux::LinuxRunner;
use coldstart_gate::replay::{RecordedBatch, Recording, Run, FORMAT, VERSION};
use coldstart_gate::run::{plan_for_record, Runner};
use coldstart_gate::GateOptions;
use coldstart_measure::CacheState;

fn load() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn fail(msg: &str) -> ! {
    eprintln!("noise-record: {msg}");
    std::process::exit(2);
}

fn main() {
    let (mut program, mut disturbance, mut description, mut out) =
        (String::new(), String::new(), String::new(), String::new());
    let (mut batches, mut runs, mut profiles) = (4usize, 5usize, 6usize);
    let mut args = std::env::args().skip(1);
    let mut command = Vec::new();
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| fail(&format!("{a} needs a value")));
        match a.as_str() {
            "--program" => program = value(),
            "--disturbance" => disturbance = value(),
            "--description" => description = value(),
            "-o" => out = value(),
            "--batches" => batches = value().parse().unwrap_or_else(|_| fail("--batches N")),
            "--runs" => runs = value().parse().unwrap_or_else(|_| fail("--runs N")),
            "--profiles" => profiles = value().parse().unwrap_or_else(|_| fail("--profiles N")),
            "--" => {
                command = args.by_ref().collect();
                break;
            }
            other => fail(&format!("unknown argument {other}")),
        }
    }
    if command.is_empty() || out.is_empty() || program.is_empty() || disturbance.is_empty() {
        fail("usage: noise-record --program NAME --disturbance NAME -o FILE -- CMD...");
    }
    if command[0].contains('/') {
        if let Ok(abs) = std::path::absolute(&command[0]) {
            command[0] = abs.to_string_lossy().into_owned();
        }
    }
    let _caught = coldstart_process::cancel::catch()
        .unwrap_or_else(|e| fail(&format!("cannot install the signal handler: {e}")));
    let mut opts = GateOptions::new(command.clone());
    opts.states = Some(vec![CacheState::Cold, CacheState::Hot]);
    opts.page_profiles = Some(profiles);
    let (plan, _) = plan_for_record(&opts).unwrap_or_else(|e| fail(&e.to_string()));
    let created_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let before = load();
    let mut runner = LinuxRunner::new();
    let mut recorded = Vec::new();
    for b in 0..batches {
        let start = Instant::now();
        let batch = runner
            .measure(&plan, &[CacheState::Cold, CacheState::Hot], runs)
            .unwrap_or_else(|e| fail(&e.to_string()));
        let seconds = start.elapsed().as_secs_f64();
        let runs_of =
            |i: usize| batch.states[i].counters.iter().map(Run::from).collect::<Vec<Run>>();
        let r = RecordedBatch {
            cold: runs_of(0),
            hot: runs_of(1),
            calibration: batch.calibration.clone(),
            seconds,
        };
        eprintln!(
            "noise-record: {program} {disturbance}: batch {} of {batches}: {:.1} s, device reads {:?}",
            b + 1,
            seconds,
            r.cold.iter().map(|c| c.device_read_requests.unwrap_or(0)).collect::<Vec<_>>()
        );
        recorded.push(r);
    }
    let (mut pages, mut pages_seconds, mut source) = (Vec::new(), Vec::new(), String::new());
    for _ in 0..profiles {
        let start = Instant::now();
        let p = runner.pages(&plan, 1).unwrap_or_else(|e| fail(&e.to_string()));
        pages_seconds.push(start.elapsed().as_secs_f64());
        pages.extend(p.values);
        source = p.source;
    }
    eprintln!("noise-record: {program} {disturbance}: pages touched {pages:?}");
    let recording = Recording {
        format: FORMAT.into(),
        version: VERSION,
        program,
        disturbance,
        description,
        command,
        storage: plan.storage.clone(),
        load: (before, load()),
        created_unix,
        batches: recorded,
        pages,
        pages_source: source,
        pages_seconds,
    };
    let mut text = serde_json::to_string(&recording).unwrap_or_else(|e| fail(&e.to_string()));
    text.push('\n');
    coldstart_fs::write_atomic(std::path::Path::new(&out), text.as_bytes())
        .unwrap_or_else(|e| fail(&format!("cannot write {out}: {e}")));
}
