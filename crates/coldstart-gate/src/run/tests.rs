//! The order of steps, with a scripted runner: batches, bounds, flags.

use std::path::Path;

use coldstart_formats::measure::Counters;
use coldstart_formats::stats::Xoshiro256;
use coldstart_measure::CacheState;
use coldstart_storage::StorageProfile;

use super::*;
use crate::compare::history_entry;
use crate::figure::Verdict;
use crate::report::Outcome;

/// Runs whose wall time is `mean + sd x noise` per state, and 12 device reads of 48 KiB
/// (plus `extra_reads`).
struct Script {
    rng: Xoshiro256,
    cold: (f64, f64),
    hot: (f64, f64),
    extra_reads: u64,
    /// The calibration loop's time: `mean + sd x noise`.
    calibration: (f64, f64),
    /// Hot runs' CPU time, `mean + sd x noise` (a mean of 0: not counted).
    cpu: (f64, f64),
    calls: Vec<(Vec<CacheState>, usize)>,
    /// Pages touched per profile.
    pages: f64,
    profiles: Vec<usize>,
    /// Seconds each run of the colder state costs the measurement (a hot run, a tenth).
    run_s: f64,
    /// The functions each function profile runs, in turn (the last one repeated); none: the
    /// runner takes no function profiles.
    functions: Vec<FunctionSet>,
    function_calls: Vec<usize>,
    /// Instructions of each count, `mean + sd x noise` (a mean of 0: none counted), and the
    /// counts asked for in each step.
    instructions: (f64, f64),
    counts: Vec<usize>,
    /// The hot runs' counters have instructions (the CPU counts them).
    counted_by_the_cpu: bool,
    /// Cycles of cache misses of each count, `mean + sd x noise` (a mean of 0: not simulated).
    misses: (f64, f64),
    /// Minor faults of each hot run (0: not counted).
    minor_faults: u64,
}

impl Script {
    fn new(seed: u64, cold: (f64, f64), hot: (f64, f64)) -> Script {
        Script {
            rng: Xoshiro256::new(seed),
            cold,
            hot,
            extra_reads: 0,
            calibration: (0.001, 0.0),
            cpu: (0.0, 0.0),
            calls: Vec::new(),
            pages: 300.0,
            profiles: Vec::new(),
            run_s: 0.0,
            functions: Vec::new(),
            function_calls: Vec::new(),
            instructions: (0.0, 0.0),
            counts: Vec::new(),
            counted_by_the_cpu: false,
            misses: (0.0, 0.0),
            minor_faults: 0,
        }
    }

    /// The same script on a machine whose calibration loop takes `mean + sd x noise`.
    fn calibrated(mut self, calibration: (f64, f64)) -> Script {
        self.calibration = calibration;
        self
    }

    fn normal(&mut self) -> f64 {
        (0..12).map(|_| self.rng.below(1 << 30) as f64 / (1u64 << 30) as f64).sum::<f64>() - 6.0
    }
}

impl Runner for Script {
    fn measure(
        &mut self,
        _plan: &Plan,
        states: &[CacheState],
        runs: usize,
    ) -> Result<Batch, GateError> {
        self.calls.push((states.to_vec(), runs));
        let mut out = Batch { cgroup: "v1".into(), ..Batch::default() };
        for s in states {
            let (mean, sd) = if *s == CacheState::Hot { self.hot } else { self.cold };
            let reads = 12 + self.extra_reads;
            let counters = (0..runs)
                .map(|_| Counters {
                    user_s: (*s == CacheState::Hot && self.cpu.0 > 0.0)
                        .then(|| self.cpu.0 + self.cpu.1 * self.normal()),
                    sys_s: (*s == CacheState::Hot && self.cpu.0 > 0.0).then_some(0.0),
                    wall_s: mean + sd * self.normal(),
                    storage_read_requests: (*s != CacheState::Hot).then_some(reads),
                    storage_read_bytes: (*s != CacheState::Hot).then_some(reads * 4096),
                    read_bytes: Some(500_000 + (self.rng.below(3) as u64) * 100_000),
                    major_faults: Some(5),
                    read_requests: Some(40 + self.rng.below(20) as u64),
                    instructions: (*s == CacheState::Hot && self.counted_by_the_cpu)
                        .then_some(1_000_000),
                    minor_faults: (*s == CacheState::Hot && self.minor_faults > 0)
                        .then_some(self.minor_faults),
                    ..Counters::default()
                })
                .collect();
            out.states.push(StateRuns { counters, excluded: vec![] });
        }
        let (mean, sd) = self.calibration;
        out.calibration = (0..runs * states.len()).map(|_| mean + sd * self.normal()).collect();
        out.seconds = states
            .iter()
            .map(|s| if *s == CacheState::Hot { self.run_s / 10.0 } else { self.run_s } * runs as f64)
            .sum();
        Ok(out)
    }

    fn pages(&mut self, _plan: &Plan, profiles: usize) -> Result<PageCounts, GateError> {
        self.profiles.push(profiles);
        Ok(PageCounts {
            values: vec![self.pages; profiles],
            source: "tracefs".into(),
            ..PageCounts::default()
        })
    }

    fn functions(&mut self, _plan: &Plan, profiles: usize) -> Result<FunctionProfiles, GateError> {
        if self.functions.is_empty() {
            return Ok(FunctionProfiles::default());
        }
        let made: usize = self.function_calls.iter().sum();
        self.function_calls.push(profiles);
        let last = self.functions.len() - 1;
        let sets = (made..made + profiles).map(|i| self.functions[i.min(last)].clone()).collect();
        Ok(FunctionProfiles { sets, ..FunctionProfiles::default() })
    }

    fn instructions(&mut self, _plan: &Plan, runs: usize) -> Result<InstructionCounts, GateError> {
        self.counts.push(runs);
        let (mean, sd) = self.instructions;
        if mean == 0.0 {
            return Ok(InstructionCounts::default());
        }
        let values = (0..runs).map(|_| (mean + sd * self.normal()).round()).collect();
        let (m, msd) = self.misses;
        let miss_cycles = if m > 0.0 {
            (0..runs).map(|_| (m + msd * self.normal()).round()).collect()
        } else {
            vec![]
        };
        Ok(InstructionCounts {
            values,
            miss_cycles,
            source: "valgrind".into(),
            ..InstructionCounts::default()
        })
    }
}

/// A start-up's functions: (module, name, code bytes).
fn functions_of(items: &[(&str, &str, u64)]) -> FunctionSet {
    items.iter().map(|(m, n, s)| ((m.to_string(), n.to_string()), *s)).collect()
}

fn options(storage: StorageChoice) -> GateOptions {
    let mut o = GateOptions::new(vec!["/bin/true".into()]);
    o.states = Some(vec![CacheState::Selective, CacheState::Hot]);
    o.storage = storage;
    o.page_profiles = Some(3);
    o.commit = Some("c0ffee".into());
    o
}

fn emulated() -> StorageChoice {
    StorageChoice::Profile(StorageProfile::hdd())
}

fn record_with(script: &mut Script, o: &GateOptions) -> Baseline {
    record(o, script, &mut |_| {}).unwrap()
}

/// A gate of `script`'s runs against `base` (recorded as `b.json`, without history).
fn gate_with(
    o: &GateOptions,
    base: &Baseline,
    script: &mut Script,
) -> Result<(GateReport, Baseline), GateError> {
    gate(o, base, Path::new("b.json"), None, script, &mut |_| {})
}

#[test]
fn the_same_start_up_is_not_slower_after_one_batch() {
    let o = options(emulated());
    let base = record_with(&mut Script::new(1, (0.040, 0.0005), (0.010, 0.0002)), &o);
    assert_eq!(base.samples(Figure::Time, "selective").unwrap().values.len(), 10);
    assert_eq!(base.samples(Figure::Time, "hot").unwrap().values.len(), 30);
    assert_eq!(base.samples(Figure::PagesTouched, "hot").unwrap().values.len(), 3);
    let mut now = Script::new(2, (0.040, 0.0005), (0.010, 0.0002));
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    assert_eq!(report.verdict, Outcome::NotSlower, "{}", report.to_text());
    // A small batch of the colder state, one of hot runs, one page profile: all agree.
    assert_eq!(now.calls, [(vec![CacheState::Selective], 5), (vec![CacheState::Hot], 10)]);
    assert_eq!(now.profiles, [1]);
    // Emulated: the figures with the host's system libraries are shown, not judged.
    let row = |f: Figure| report.figures.iter().find(|r| r.figure == f).unwrap().clone();
    assert_eq!(row(Figure::ReadBytes).verdict, Verdict::NotCompared);
    assert_eq!(row(Figure::DeviceReadRequests).verdict, Verdict::NotSlower);
}

#[test]
fn a_loaded_machine_is_not_a_regression() {
    // Two test suites on the machine: every start-up 40% longer, and the calibration loop too,
    // though noisily. Taking off only the part of the machine's slowdown its interval made
    // certain (its low end) called this "slower" twice in 20 gate runs.
    let o = options(emulated());
    let mut then = Script::new(1, (0.100, 0.002), (0.020, 0.0005)).calibrated((0.010, 0.0002));
    let base = record_with(&mut then, &o);
    for seed in 2..12 {
        let mut now = Script::new(seed, (0.140, 0.006), (0.028, 0.0015)).calibrated((0.014, 0.004));
        let (report, _) = gate_with(&o, &base, &mut now).unwrap();
        assert_ne!(report.verdict, Outcome::Slower, "{}", report.to_text());
    }
}

#[test]
fn cpu_time_stretched_by_a_busy_machine_is_not_slower_and_on_a_quiet_one_it_is() {
    let o = options(emulated());
    let mut then = Script::new(1, (0.100, 0.002), (0.100, 0.002)).calibrated((0.010, 0.0002));
    then.cpu = (0.080, 0.002);
    let base = record_with(&mut then, &o);
    let cpu_row = |report: &GateReport| {
        report.figures.iter().find(|r| r.figure == Figure::CpuTime && r.state == "hot").cloned()
    };
    // CPU time 35% higher on a machine whose calibration loop runs twice as slow: what one
    // other job did to an unchanged Node.js script. Runs are added, and it is never slower.
    for seed in 2..6 {
        let mut now = Script::new(seed, (0.100, 0.002), (0.200, 0.004)).calibrated((0.020, 0.0004));
        now.cpu = (0.108, 0.002);
        let (report, _) = gate_with(&o, &base, &mut now).unwrap();
        let row = cpu_row(&report).unwrap();
        assert_eq!(row.verdict, Verdict::Unclear, "{}", report.to_text());
        assert_ne!(report.verdict, Outcome::Slower, "{}", report.to_text());
    }
    // The same rise on a machine as fast as at the baseline: slower.
    let mut now = Script::new(9, (0.100, 0.002), (0.135, 0.002)).calibrated((0.010, 0.0002));
    now.cpu = (0.108, 0.002);
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    assert_eq!(cpu_row(&report).unwrap().verdict, Verdict::Slower, "{}", report.to_text());
}

/// A start-up on a busy machine: CPU time 35% higher, the calibration loop twice as slow (what
/// one other job did to an unchanged Node.js script), and `instructions` counted.
fn busy_gate_counting(instructions: f64, seed: u64) -> (GateReport, Script) {
    busy_gate_counting_from((690e6, 1e6), instructions, seed)
}

/// The same, from a baseline whose counts are `mean + sd x noise`.
fn busy_gate_counting_from(
    then_counts: (f64, f64),
    instructions: f64,
    seed: u64,
) -> (GateReport, Script) {
    let o = options(emulated());
    let mut then = Script::new(1, (0.100, 0.002), (0.100, 0.002)).calibrated((0.010, 0.0002));
    then.cpu = (0.080, 0.002);
    then.instructions = then_counts;
    let base = record_with(&mut then, &o);
    assert_eq!(then.counts, [instructions::BASELINE_COUNTS]);
    let b = base.samples(Figure::Instructions, "hot").unwrap();
    assert_eq!((b.values.len(), b.source.as_deref()), (5, Some("valgrind")));
    let mut now = Script::new(seed, (0.100, 0.002), (0.200, 0.004)).calibrated((0.020, 0.0004));
    now.cpu = (0.108, 0.002);
    now.instructions = (instructions, 1e6);
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    (report, now)
}

#[test]
fn cpu_time_stretched_by_a_busy_machine_is_settled_by_the_same_instructions() {
    for seed in 2..6 {
        let (report, now) = busy_gate_counting(690e6, seed);
        let cpu = report.figures.iter().find(|r| r.figure == Figure::CpuTime).unwrap();
        assert_eq!(cpu.verdict, Verdict::NotSlower, "{}", report.to_text());
        assert!(
            cpu.note.as_deref().unwrap().contains("instructions are not more"),
            "{:?}",
            cpu.note
        );
        assert_eq!(report.verdict, Outcome::NotSlower, "{}", report.to_text());
        // One count, and it agreed.
        assert_eq!(now.counts, [instructions::FIRST_COUNTS]);
    }
}

#[test]
fn twenty_percent_more_instructions_are_slower_on_a_busy_machine() {
    let (report, now) = busy_gate_counting(828e6, 2);
    let row = report.figures.iter().find(|r| r.figure == Figure::Instructions).unwrap();
    assert_eq!(row.verdict, Verdict::Slower, "{}", report.to_text());
    assert_eq!(report.verdict, Outcome::Slower, "{}", report.to_text());
    // The first count above the limit: the rest of the baseline's number, their median judged.
    assert_eq!(now.counts, [1, 4]);
    assert_eq!(row.steady.as_ref().unwrap().n_now, 5);
    // 1% more is within the noise of a count.
    let (report, _) = busy_gate_counting(697e6, 3);
    let row = report.figures.iter().find(|r| r.figure == Figure::Instructions).unwrap();
    assert_eq!(row.verdict, Verdict::NotSlower, "{}", report.to_text());
}

#[test]
fn counts_that_move_among_themselves_are_not_judged_and_do_not_settle_cpu_time() {
    // A JIT compiler that replaces a hot loop sooner or later: counts of 773 and 1,100 million.
    let (report, _) = busy_gate_counting_from((900e6, 150e6), 900e6, 2);
    let row = report.figures.iter().find(|r| r.figure == Figure::Instructions).unwrap();
    assert_eq!(row.verdict, Verdict::NotCompared, "{}", report.to_text());
    assert!(row.note.as_deref().unwrap().contains("not steady on this program"), "{:?}", row.note);
    let cpu = report.figures.iter().find(|r| r.figure == Figure::CpuTime).unwrap();
    assert_eq!(cpu.verdict, Verdict::Unclear, "{}", report.to_text());
}

#[test]
fn hot_time_of_the_same_work_waiting_no_longer_is_not_slower_and_more_waiting_is() {
    // The sample's 1.2 ms hot start ran 11% slower on a quiet machine, its instructions the
    // same and its CPU time 11% higher, while the calibration loop ran no slower.
    let o = options(emulated());
    let mut then = Script::new(1, (0.092, 0.001), (0.0012, 0.00002));
    then.cpu = (0.0012, 0.00002);
    then.instructions = (239_683.0, 0.0);
    let base = record_with(&mut then, &o);
    let time_row = |report: &GateReport| {
        report
            .figures
            .iter()
            .find(|r| r.figure == Figure::Time && r.state == "hot")
            .cloned()
            .unwrap()
    };
    let mut now = Script::new(2, (0.092, 0.001), (0.00134, 0.00002));
    now.cpu = (0.00134, 0.00002);
    now.instructions = (239_683.0, 0.0);
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    let row = time_row(&report);
    assert_eq!(row.verdict, Verdict::NotSlower, "{}", report.to_text());
    assert!(row.note.as_deref().unwrap().contains("the same work"), "{:?}", row.note);
    assert_eq!(report.verdict, Outcome::NotSlower, "{}", report.to_text());
    // The same CPU time, but 0.3 ms more off the CPU (a wait added): slower.
    let mut now = Script::new(3, (0.092, 0.001), (0.0015, 0.00002));
    now.cpu = (0.0012, 0.00002);
    now.instructions = (239_683.0, 0.0);
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    assert_eq!(time_row(&report).verdict, Verdict::Slower, "{}", report.to_text());
}

/// A hot start on a quiet machine whose host stretches its CPU time by `stretch` while the
/// calibration loop runs as fast as at the baseline (what the project's machine did to an
/// unchanged Node.js script: +27% to +37%), the time off the CPU the same plus `wait`; its
/// counts and faults the baseline's times `work` (instructions, cycles of misses, faults).
fn host_stretched_gate(stretch: f64, wait: f64, work: (f64, f64, f64), seed: u64) -> GateReport {
    let o = options(emulated());
    let mut then = Script::new(1, (0.100, 0.002), (0.100, 0.002)).calibrated((0.010, 0.0002));
    then.cpu = (0.085, 0.002);
    then.instructions = (690e6, 1e6);
    then.misses = (51.5e6, 0.1e6);
    then.minor_faults = 3207;
    let base = record_with(&mut then, &o);
    for f in [Figure::MissCycles, Figure::MinorFaults] {
        assert!(base.samples(f, "hot").is_some(), "{f} not in the baseline");
    }
    let cpu = 0.085 * stretch;
    let mut now =
        Script::new(seed, (0.100, 0.002), (0.015 + cpu + wait, 0.002)).calibrated((0.010, 0.0002));
    now.cpu = (cpu, 0.002);
    now.instructions = (690e6 * work.0, 1e6);
    now.misses = (51.5e6 * work.1, 0.1e6);
    now.minor_faults = (3207.0 * work.2) as u64;
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    report
}

fn hot_row(report: &GateReport, figure: Figure) -> crate::report::Row {
    report.figures.iter().find(|r| r.figure == figure && r.state == "hot").cloned().unwrap()
}

#[test]
fn cpu_time_the_host_stretched_is_settled_by_the_same_work_and_more_work_is_not() {
    for seed in 2..6 {
        let report = host_stretched_gate(1.35, 0.0, (1.0, 1.0, 1.0), seed);
        let cpu = hot_row(&report, Figure::CpuTime);
        assert_eq!(cpu.verdict, Verdict::NotSlower, "{}", report.to_text());
        let note = cpu.note.as_deref().unwrap();
        assert!(
            note.contains("the same work") && note.contains("cycles of cache misses"),
            "{note}"
        );
        // Hot time too: the same work, no longer off the CPU.
        assert_eq!(
            hot_row(&report, Figure::Time).verdict,
            Verdict::NotSlower,
            "{}",
            report.to_text()
        );
        assert_eq!(report.verdict, Outcome::NotSlower, "{}", report.to_text());
    }
    // More misses (the same instructions walking memory the caches do not hold), more faults
    // (memory the kernel must map): slower, and CPU time not settled.
    for (work, figure, seed) in
        [((1.0, 1.3, 1.0), Figure::MissCycles, 2), ((1.0, 1.0, 1.2), Figure::MinorFaults, 3)]
    {
        let report = host_stretched_gate(1.35, 0.0, work, seed);
        let text = report.to_text();
        assert_eq!(hot_row(&report, figure).verdict, Verdict::Slower, "{text}");
        assert_ne!(hot_row(&report, Figure::CpuTime).verdict, Verdict::NotSlower, "{text}");
        assert_eq!(report.verdict, Outcome::Slower, "{text}");
    }
    // A wait added to the same work: hot time slower.
    let report = host_stretched_gate(1.0, 0.03, (1.0, 1.0, 1.0), 4);
    assert_eq!(hot_row(&report, Figure::Time).verdict, Verdict::Slower, "{}", report.to_text());
    // CPU time more than twice the baseline's is judged as measured, whatever the counts say.
    let report = host_stretched_gate(2.4, 0.0, (1.0, 1.0, 1.0), 5);
    assert_eq!(hot_row(&report, Figure::CpuTime).verdict, Verdict::Slower, "{}", report.to_text());
}

#[test]
fn a_count_the_budget_has_no_room_for_is_not_taken_and_that_is_said() {
    let o = options(emulated());
    let mut then = Script::new(1, (0.100, 0.002), (0.100, 0.002));
    then.instructions = (690e6, 1e6);
    let mut base = record_with(&mut then, &o);
    // A count took 30 s when the baseline was recorded (a large program under valgrind).
    base.costs.as_mut().unwrap().instructions_s = Some(30.0);
    let mut o = o;
    o.budget = Some(std::time::Duration::from_secs(10));
    let mut now = Script::new(2, (0.100, 0.002), (0.100, 0.002));
    now.instructions = (690e6, 1e6);
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    assert!(now.counts.is_empty(), "{:?}", now.counts);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("instructions were not counted") && w.contains("30 s")),
        "{:?}",
        report.warnings
    );
    let row = report.figures.iter().find(|r| r.figure == Figure::Instructions).unwrap();
    assert_eq!(row.verdict, Verdict::NotCompared);
}

#[test]
fn instructions_the_cpu_counts_are_not_counted_again() {
    let o = options(emulated());
    let mut then = Script::new(1, (0.100, 0.002), (0.100, 0.002));
    then.counted_by_the_cpu = true;
    then.instructions = (690e6, 1e6);
    let base = record_with(&mut then, &o);
    assert!(then.counts.is_empty(), "{:?}", then.counts);
    assert_eq!(base.samples(Figure::Instructions, "hot").unwrap().source, None);
    let mut now = Script::new(2, (0.100, 0.002), (0.100, 0.002));
    now.counted_by_the_cpu = true;
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    assert!(now.counts.is_empty(), "{:?}", now.counts);
    assert_eq!(report.verdict, Outcome::NotSlower, "{}", report.to_text());
}

#[test]
fn a_cold_start_of_a_few_reads_is_settled_by_them_on_a_machine_faster_than_at_the_baseline() {
    // The sample: 12 reads of the emulated disk (120 ms at 100 a second) in 92 ms, its baseline
    // recorded while the machine ran its calibration loop 36% slower than now. Cold time the
    // same, the machine faster: a CPU-bound start-up would have been faster, so the time rule
    // alone cannot say not slower; the reads, not slower, take all of it.
    let o = options(emulated());
    let mut then = Script::new(1, (0.092, 0.001), (0.002, 0.0001)).calibrated((0.0136, 0.0002));
    let base = record_with(&mut then, &o);
    // Hot runs, computing, are faster with the machine.
    let mut now = Script::new(2, (0.092, 0.001), (0.0013, 0.0001)).calibrated((0.010, 0.0002));
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    let cold =
        report.figures.iter().find(|r| r.figure == Figure::Time && r.state == "selective").unwrap();
    assert_eq!(cold.verdict, Verdict::NotSlower, "{}", report.to_text());
    assert!(
        cold.note.as_deref().unwrap().starts_with("explained by the device"),
        "{:?}",
        cold.note
    );
    assert_eq!(report.verdict, Outcome::NotSlower, "{}", report.to_text());
}

#[test]
fn a_calibration_on_another_number_of_cpus_is_not_compared_and_that_is_said() {
    // A baseline whose loop ran on one CPU (recorded before it ran on all of them), and a
    // machine now twice as slow: the loop's times are not comparable, so no allowance is
    // made, and the report says to record the baseline again.
    let o = options(emulated());
    let mut then = Script::new(1, (0.100, 0.002), (0.020, 0.0005)).calibrated((0.010, 0.0002));
    let mut base = record_with(&mut then, &o);
    assert_eq!(base.calibration.as_ref().unwrap().threads, 1);
    base.calibration.as_mut().unwrap().threads = 2;
    let mut now = Script::new(2, (0.100, 0.002), (0.020, 0.0005)).calibrated((0.020, 0.0002));
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    assert!(report.machine.is_none(), "{:?}", report.machine);
    assert!(
        report.warnings.iter().any(|w| w.contains("calibration loop is not this coldstart's")
            && w.contains("on 2 CPUs; now")
            && w.contains("--update")),
        "{:?}",
        report.warnings
    );
}

/// A gate 30% slower on a machine whose calibration says 25% slower, noisily, with `pages`
/// touched now (the baseline's: 300).
fn machine_in_the_way(o: &GateOptions, pages: f64) -> (GateReport, Script) {
    let mut then = Script::new(1, (0.100, 0.002), (0.100, 0.002)).calibrated((0.010, 0.0001));
    let base = record_with(&mut then, o);
    let mut now = Script::new(2, (0.130, 0.002), (0.130, 0.002)).calibrated((0.0125, 0.003));
    now.pages = pages;
    let (report, _) = gate_with(o, &base, &mut now).unwrap();
    (report, now)
}

#[test]
fn runs_are_added_while_the_machines_own_slowdown_is_in_the_way() {
    // 30% slower on a machine whose calibration says 25% slower, noisily: unclear after the
    // first batch, which the rank test alone thought enough (a 20% regression under a test
    // suite stayed unclear after 10 runs).
    let o = options(emulated());
    let (report, now) = machine_in_the_way(&o, 300.0);
    assert!(now.calls.len() > 2, "{:?}\n{}", now.calls, report.to_text());
    for state in [CacheState::Selective, CacheState::Hot] {
        let runs: usize = now.calls.iter().filter(|c| c.0 == [state]).map(|c| c.1).sum();
        assert!(runs <= o.time.max_runs, "{state}: {runs}");
    }
}

#[test]
fn a_gate_stopped_by_a_slower_steady_figure_does_not_say_runs_were_added() {
    // The machine in the way of the time, as above, and 5 more pages touched: the gate stops
    // after the first batch, and the time's note says how many runs it made, not that runs
    // were added up to --max-runs.
    let o = options(emulated());
    let (report, now) = machine_in_the_way(&o, 305.0);
    assert_eq!(report.verdict, Outcome::Slower, "{}", report.to_text());
    assert_eq!(now.calls.len(), 2, "{:?}", now.calls);
    let notes: Vec<&str> = report
        .figures
        .iter()
        .filter(|r| r.figure.is_time())
        .filter_map(|r| r.note.as_deref())
        .filter(|n| n.contains("could explain it"))
        .collect();
    assert!(!notes.is_empty(), "{}", report.to_text());
    for n in notes {
        assert!(n.contains(" runs were made; more, up to --max-runs 60, would narrow that"), "{n}");
        assert!(!n.contains("runs were added"), "{n}");
    }
}

#[test]
fn a_far_function_is_slower_through_the_exact_pages_and_a_page_that_comes_and_goes_is_not() {
    let o = options(emulated());
    let base = record_with(&mut Script::new(1, (0.040, 0.0005), (0.010, 0.0002)), &o);
    // One page more: threads and time-dependent paths make a page or two come and go on an
    // unchanged program (the noise model's allowance).
    let mut now = Script::new(3, (0.040, 0.0005), (0.010, 0.0002));
    now.pages = 301.0;
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    assert_ne!(report.verdict, Outcome::Slower, "{}", report.to_text());
    // One more function called at start-up, 5 pages placed far from the touched code: the
    // device reads the same (its read-ahead brings the pages with others on a large
    // program), the exact pages see it.
    let mut now = Script::new(3, (0.040, 0.0005), (0.010, 0.0002));
    now.pages = 305.0;
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    assert_eq!(report.verdict, Outcome::Slower, "{}", report.to_text());
    assert!(
        report.reasons.iter().any(|r| r.starts_with("pages touched, hot: 300 -> 305")),
        "{:?}",
        report.reasons
    );
    // A page profile above its limit is confirmed by the baseline's number of them, and then
    // nothing more is measured: more runs cannot make a steady figure less slower.
    assert_eq!(now.profiles, [1, 2]);
    assert_eq!(now.calls.len(), 2, "{:?}", now.calls);
    assert!(report.fails(crate::report::Policy::default()));
}

#[test]
fn unclear_time_adds_batches_up_to_the_bound_and_no_further() {
    let mut o = options(emulated());
    o.time.max_runs = 40;
    let base = record_with(&mut Script::new(1, (0.040, 0.004), (0.010, 0.0002)), &o);
    // 6% slower cold with 10% noise: the rank test cannot settle it within 40 runs.
    let mut now = Script::new(4, (0.0424, 0.004), (0.010, 0.0002));
    let mut steps = Vec::new();
    let (report, m) =
        gate(&o, &base, Path::new("b.json"), None, &mut now, &mut |p| steps.push(p)).unwrap();
    let runs: usize =
        now.calls.iter().filter(|c| c.0.contains(&CacheState::Selective)).map(|c| c.1).sum();
    assert!(runs > 10 && runs <= 40, "{:?}", now.calls);
    assert_eq!(m.samples(Figure::Time, "selective").unwrap().values.len(), runs);
    // Hot was settled by the first batch and measured no more.
    assert_eq!(now.calls.iter().filter(|c| c.0.contains(&CacheState::Hot)).count(), 1);
    // The colder state's batches are its own, of 5 runs.
    assert!(now.calls.iter().filter(|c| c.0 == [CacheState::Selective]).all(|c| c.1 <= 5));
    let cold =
        report.figures.iter().find(|r| r.figure == Figure::Time && r.state == "selective").unwrap();
    assert_ne!(cold.verdict, Verdict::Slower, "{cold:?}");
    assert!(steps.iter().any(|Progress::Step(s)| s.contains("more")), "{steps:?}");
}

#[test]
fn cheap_runs_go_past_the_bound_while_time_is_unclear_and_dear_ones_stop_there() {
    let mut o = options(emulated());
    o.time.max_runs = 40;
    o.page_profiles = Some(0);
    // A tight hot baseline sizes the bound at a few runs; the runs now are ten times as
    // spread (a busy machine) and 4% slower, so 10 runs leave hot time unclear.
    let hot_runs = |run_s: f64| {
        let mut then = Script::new(1, (0.040, 0.0005), (0.010, 0.0001));
        then.run_s = run_s;
        let base = record_with(&mut then, &o);
        let mut now = Script::new(7, (0.040, 0.0005), (0.0104, 0.001));
        now.run_s = run_s;
        let (report, _) = gate_with(&o, &base, &mut now).unwrap();
        let hot: usize =
            now.calls.iter().filter(|c| c.0.contains(&CacheState::Hot)).map(|c| c.1).sum();
        let row = report.figures.iter().find(|r| r.figure == Figure::Time && r.state == "hot");
        (hot, row.unwrap().clone())
    };
    // Hot runs of 1 ms: 30 more cost 0.03 s, so they are made.
    let (cheap, row) = hot_runs(0.01);
    assert!(cheap > 10 && cheap <= 40, "{cheap} hot runs: {row:?}");
    assert_ne!(row.verdict, Verdict::Slower, "{row:?}");
    // Hot runs of 2 s: 30 more would cost a minute, so the bound holds.
    let (dear, row) = hot_runs(20.0);
    assert_eq!(dear, 10, "{row:?}");
    assert_eq!(row.verdict, Verdict::Unclear, "{row:?}");
}

#[test]
fn the_budget_shrinks_the_first_batches_stops_adding_and_says_what_it_left_unclear() {
    let mut o = options(emulated());
    o.time.max_runs = 40;
    o.page_profiles = Some(0);
    let mut then = Script::new(1, (0.040, 0.004), (0.010, 0.0002));
    then.run_s = 2.0;
    let base = record_with(&mut then, &o);
    assert_eq!(base.costs.as_ref().and_then(|c| c.run(CacheState::Selective)), Some(2.0));
    // Unclear cold time, as in the test above, which would add batches up to 40 runs; each
    // cold run costs 2 s, and the gate may take 9 s.
    o.budget = Some(std::time::Duration::from_secs(9));
    let mut now = Script::new(4, (0.0424, 0.004), (0.010, 0.0002));
    now.run_s = 2.0;
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    // The first cold batch shrank from 5 runs to 3 (6 s, and 2 s for 10 hot runs), and no
    // batch was added.
    assert_eq!(now.calls, [(vec![CacheState::Selective], 3), (vec![CacheState::Hot], 10)]);
    let spent = report.elapsed_s.unwrap();
    assert!(spent <= 9.0, "{spent}");
    let cold =
        report.figures.iter().find(|r| r.figure == Figure::Time && r.state == "selective").unwrap();
    assert_eq!(cold.verdict, Verdict::Unclear, "{}", report.to_text());
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("--budget of 9.0 s ran out") && w.contains("time, selective")),
        "{:?}",
        report.warnings
    );
}

#[test]
fn a_baseline_from_another_kernel_is_flagged_and_not_compared() {
    let o = options(emulated());
    let mut base = record_with(&mut Script::new(1, (0.040, 0.0005), (0.010, 0.0002)), &o);
    base.environment.kernel = "5.10.0-other".into();
    let mut now = Script::new(2, (0.080, 0.0005), (0.010, 0.0002)); // twice as slow
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    assert_eq!(report.verdict, Outcome::Unclear);
    assert_eq!(report.environment_differences[0].what, "kernel");
    assert!(report.figures.iter().all(|r| r.verdict == Verdict::NotCompared));
    assert!(report.reasons[0].contains("5.10.0-other"), "{:?}", report.reasons);
    assert_eq!(now.calls.len(), 2, "only the first batch of each state runs");
}

#[test]
fn a_gate_measures_as_its_baseline_did_or_refuses() {
    let o = options(emulated());
    let base = record_with(&mut Script::new(1, (0.040, 0.0005), (0.010, 0.0002)), &o);
    let mut asked = options(StorageChoice::Off);
    let e = gate_with(&asked, &base, &mut Script::new(2, (0.04, 0.0), (0.01, 0.0))).unwrap_err();
    assert!(e.to_string().contains("--storage") && e.to_string().contains("hdd"), "{e}");
    asked = options(StorageChoice::Auto);
    asked.states = Some(vec![CacheState::Hot]);
    let e = gate_with(&asked, &base, &mut Script::new(2, (0.04, 0.0), (0.01, 0.0))).unwrap_err();
    assert!(e.to_string().contains("--cache"), "{e}");
    assert_eq!(e.category(), coldstart_error::Category::Usage);
}

#[test]
fn on_this_disk_the_whole_tree_reads_are_judged_but_not_the_whole_machine_requests() {
    let o = options(StorageChoice::Off);
    let base = record_with(&mut Script::new(1, (0.040, 0.0005), (0.010, 0.0002)), &o);
    let (report, _) =
        gate_with(&o, &base, &mut Script::new(2, (0.04, 0.0005), (0.01, 0.0002))).unwrap();
    let row = |f: Figure| report.figures.iter().find(|r| r.figure == f).unwrap().clone();
    assert_ne!(row(Figure::ReadBytes).verdict, Verdict::NotCompared);
    assert_eq!(row(Figure::ReadRequests).verdict, Verdict::NotCompared);
    assert!(row(Figure::ReadRequests).note.unwrap().contains("whole machine"));
}

#[test]
fn a_rise_over_the_history_is_drift() {
    let o = options(emulated());
    let base = record_with(&mut Script::new(1, (0.040, 0.0002), (0.010, 0.0001)), &o);
    // Thirty runs, each 0.4% slower than the one before, every one within 5% of the last.
    let mut history = Vec::new();
    for i in 0..30 {
        let mut s =
            Script::new(10 + i, (0.040 * (1.0 + 0.004 * i as f64), 0.0002), (0.010, 0.0001));
        let (r, m) =
            gate(&o, &base, Path::new("b.json"), Some(&history), &mut s, &mut |_| {}).unwrap();
        history.push(history_entry(&m, r.verdict.label()));
    }
    let mut s = Script::new(99, (0.040 * 1.12, 0.0002), (0.010, 0.0001));
    let (r, _) = gate(&o, &base, Path::new("b.json"), Some(&history), &mut s, &mut |_| {}).unwrap();
    let d = r
        .drift
        .iter()
        .find(|d| d.figure == Figure::Time)
        .unwrap_or_else(|| panic!("{}", r.to_text()));
    assert!(d.now > d.then * 1.05, "{d:?}");
    assert_eq!(r.history_entries, Some(30));
    assert!(r.to_text().contains("Drift: time"), "{}", r.to_text());
    assert!(!r.fails(crate::report::Policy::default()) || r.verdict == Outcome::Slower);
    assert!(r.fails(crate::report::Policy { drift_fails: true, ..Default::default() }));
}

/// The functions an unchanged start-up runs: a thread's 3 KiB come and go between runs.
fn start_up_functions() -> Vec<FunctionSet> {
    let common = [("app", "main", 200), ("app", "init", 4000), ("libc.so.6", "malloc", 900)];
    let mut with_thread = common.to_vec();
    with_thread.push(("app", "worker", 3000));
    vec![functions_of(&with_thread), functions_of(&common), functions_of(&with_thread)]
}

#[test]
fn a_new_build_is_judged_by_the_functions_it_runs_and_the_same_build_is_not() {
    let o = options(emulated());
    let mut then = Script::new(1, (0.040, 0.0005), (0.010, 0.0002));
    then.functions = start_up_functions();
    let base = record_with(&mut then, &o);
    assert_eq!(then.function_calls, [3]);
    let runs = base.functions.clone().unwrap();
    assert_eq!((runs.profiles, runs.functions.len()), (3, 4));
    // The thread's function was in two profiles of three: no profile's new code against the
    // others'.
    assert_eq!(base.samples(Figure::NewFunctionBytes, "hot").unwrap().values, [0.0; 3]);

    // The same build: its exact pages judge it, no function profile is taken.
    let mut same = Script::new(2, (0.040, 0.0005), (0.010, 0.0002));
    same.functions = start_up_functions();
    let (report, _) = gate_with(&o, &base, &mut same).unwrap();
    assert!(same.function_calls.is_empty(), "{:?}", same.function_calls);
    let shown = report.figures.iter().find(|r| r.figure == Figure::NewFunctionBytes).unwrap();
    assert_eq!(shown.verdict, Verdict::NotCompared);
    assert!(shown.note.as_ref().unwrap().contains("--new-build"), "{:?}", shown.note);

    // A new build (`--new-build`): another build-id in the baseline stands for it.
    let mut old = base.clone();
    old.program.as_mut().unwrap().build_id = Some("0ld".into());
    let mut o = o.clone();
    o.allow.new_build = true;
    let row = |r: &GateReport| {
        r.figures.iter().find(|r| r.figure == Figure::NewFunctionBytes).unwrap().clone()
    };

    // Relinked, the same functions run (one resized, the thread's absent): not slower, after
    // one function profile.
    let mut relinked = Script::new(3, (0.040, 0.0005), (0.010, 0.0002));
    relinked.functions = vec![functions_of(&[
        ("app", "main", 200),
        ("app", "init", 4100),
        ("libc.so.6", "malloc", 900),
    ])];
    let (report, _) = gate_with(&o, &old, &mut relinked).unwrap();
    assert_eq!(report.verdict, Outcome::NotSlower, "{}", report.to_text());
    assert_eq!((row(&report).verdict, row(&report).now), (Verdict::NotSlower, Some(0.0)));
    assert_eq!(relinked.function_calls, [1]);

    // One more function of 18 KB called at start-up, wherever the linker put it: slower,
    // confirmed by as many profiles as the baseline has, and named.
    let mut far = Script::new(4, (0.040, 0.0005), (0.010, 0.0002));
    let mut set = start_up_functions()[0].clone();
    set.insert(("app".into(), "cs_exe_far".into()), 18_028);
    far.functions = vec![set];
    let (report, _) = gate_with(&o, &old, &mut far).unwrap();
    assert_eq!(report.verdict, Outcome::Slower, "{}", report.to_text());
    assert_eq!(row(&report).verdict, Verdict::Slower);
    assert_eq!(far.function_calls, [1, 2]);
    assert!(row(&report).note.unwrap().contains("cs_exe_far (17.6 KiB, app)"));
    assert!(
        report.reasons.iter().any(|r| r.starts_with("new functions run, hot: 0 B -> 17.6 KiB")),
        "{:?}",
        report.reasons
    );
    // Slower on a steady figure: no more runs for time.
    assert_eq!(far.calls.len(), 2, "{:?}", far.calls);

    // A function that ran in one profile now and not in the next two is not the verdict.
    let mut once = Script::new(5, (0.040, 0.0005), (0.010, 0.0002));
    let mut odd = start_up_functions()[1].clone();
    odd.insert(("app".into(), "on_timer".into()), 12_000);
    once.functions = vec![odd, start_up_functions()[1].clone()];
    let (report, _) = gate_with(&o, &old, &mut once).unwrap();
    assert_eq!(row(&report).verdict, Verdict::NotSlower, "{}", report.to_text());
    assert_eq!(once.function_calls, [1, 2]);
}

#[test]
fn a_new_build_against_a_baseline_without_function_profiles_says_so() {
    let o = options(emulated());
    let mut base = record_with(&mut Script::new(1, (0.040, 0.0005), (0.010, 0.0002)), &o);
    assert!(base.functions.is_none());
    base.program.as_mut().unwrap().build_id = Some("0ld".into());
    let mut o = o.clone();
    o.allow.new_build = true;
    let mut now = Script::new(2, (0.040, 0.0005), (0.010, 0.0002));
    now.functions = start_up_functions();
    let (report, _) = gate_with(&o, &base, &mut now).unwrap();
    assert!(now.function_calls.is_empty());
    assert!(
        report.warnings.iter().any(|w| w.contains("keeps no function profiles")),
        "{:?}",
        report.warnings
    );
}
