//! The order of a gate's steps, apart from running anything: a [`Runner`] measures (the
//! Linux one in [`crate::linux`], a scripted one in tests), and this module decides what to
//! measure, how many runs, and what the figures say.
//!
//! **Recording** (`--update`): the colder state's runs ([`GateOptions::baseline_cold_runs`]),
//! the hot runs ([`GateOptions::baseline_runs`]), then the page profiles, the function
//! profiles and, where the CPU does not count instructions, counts of them under valgrind
//! ([`GateOptions::instruction_counts`]), each step's cost kept; the result is a [`Baseline`].
//!
//! **Gating**: first the command, program and working directory are checked against the
//! baseline's ([`crate::identity`]): another one is refused before anything runs. Then it is
//! measured exactly as the baseline was (its cache states, storage, readiness; a flag asking
//! for something else is refused), spending runs where the verdict is unclear:
//!
//! 1. a small batch of the colder state (5 runs: on the emulated disk each costs a read per
//!    10 ms), a batch of hot runs (10), one exact page profile, and, where the baseline
//!    counted instructions under valgrind, one count ([`crate::instructions`]);
//! 2. more page profiles, up to the baseline's number, only while they disagree with the
//!    baseline or with each other; more counts, up to the baseline's, only when the first is
//!    above its limit;
//! 3. nothing more once a steady figure is slower;
//! 4. another batch of a state while its time is unclear, up to the bound the time rule sets
//!    ([`crate::time::run_bound`]); cold time that the device's reads explain is settled
//!    without more runs ([`crate::compare`]);
//! 5. within `--budget` ([`crate::budget`]).
//!
//! The steady figures use every run. When the environment differs from the baseline's, the
//! first steps are all that run and nothing is compared.

use std::path::Path;

use coldstart_formats::measure::Counters;
use coldstart_measure::CacheState;

use crate::baseline::{Baseline, Calibration, Samples, FORMAT, VERSION};
use crate::budget::Clock;
pub use crate::budget::Costs;
use crate::compare::{compare, Rules};
use crate::environment::Environment;
use crate::error::GateError;
use crate::figure::{Figure, Verdict};
use crate::functions::{self, FunctionSet};
use crate::history::Entry;
use crate::identity;
use crate::instructions::{self, InstructionCounts};
pub use crate::plan::{
    default_profile, detect_commit, plan_for_record, plan_from_baseline, settings_key, GateOptions,
    Plan, StorageChoice, BASELINE_FUNCTION_PROFILES, FIRST_FUNCTION_PROFILES, FIRST_PAGE_PROFILES,
};
use crate::report::GateReport;

/// The counted runs of one cache state in one batch.
#[derive(Debug, Clone, Default)]
pub struct StateRuns {
    /// The counters of the runs that counted.
    pub counters: Vec<Counters>,
    /// Why the others were excluded.
    pub excluded: Vec<String>,
}

/// What one measurement gave: per cache state asked for, in that order.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub states: Vec<StateRuns>,
    /// The calibration loop's time after each measured run.
    pub calibration: Vec<f64>,
    /// How many copies of the loop ran at once (0: one).
    pub calibration_threads: usize,
    /// How runs were counted (`v1`, `v2`, `rusage`).
    pub cgroup: String,
    pub warnings: Vec<String>,
    /// How long the measurement took, seconds.
    pub seconds: f64,
}

/// What the page profiles gave.
#[derive(Debug, Clone, Default)]
pub struct PageCounts {
    /// Pages touched, per profile.
    pub values: Vec<f64>,
    /// The profiles' `pages.source`.
    pub source: String,
    /// Whether the profiles were samples (perf, without root): then they are not steady.
    pub sampled: bool,
    pub warnings: Vec<String>,
    /// How long the profiles took, seconds.
    pub seconds: f64,
}

/// What the function profiles gave: the functions each ran, by name.
#[derive(Debug, Clone, Default)]
pub struct FunctionProfiles {
    pub sets: Vec<FunctionSet>,
    pub warnings: Vec<String>,
    /// How long the profiles took, seconds.
    pub seconds: f64,
}

/// What measures for a gate.
pub trait Runner {
    /// `runs` measured runs of each of `states`, in that order, as `plan` says.
    fn measure(
        &mut self,
        plan: &Plan,
        states: &[CacheState],
        runs: usize,
    ) -> Result<Batch, GateError>;
    /// `profiles` page profiles of the start-up, with the program's files cached.
    fn pages(&mut self, plan: &Plan, profiles: usize) -> Result<PageCounts, GateError>;
    /// `profiles` function profiles of the start-up: the functions each ran. A runner that
    /// cannot take them returns none (then new functions are not compared).
    fn functions(&mut self, _plan: &Plan, _profiles: usize) -> Result<FunctionProfiles, GateError> {
        Ok(FunctionProfiles::default())
    }
    /// `runs` counts of the instructions the start-up runs, where the hot runs' counters have
    /// none ([`crate::instructions`]). A runner that cannot count returns none, with a warning
    /// that says why.
    fn instructions(&mut self, _plan: &Plan, _runs: usize) -> Result<InstructionCounts, GateError> {
        Ok(InstructionCounts::default())
    }
}

/// What a gate tells its caller while it works.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A step begins (`cold: 5 runs, about 35 s`), or the gate ends (`not slower in 84 s`).
    Step(String),
}

/// The runs gathered so far.
#[derive(Debug, Default)]
struct Gathered {
    /// Per state of the plan: counted runs, runs made, exclusion reasons.
    counted: Vec<Vec<Counters>>,
    made: Vec<usize>,
    excluded: Vec<Vec<String>>,
    calibration: Vec<f64>,
    calibration_threads: usize,
    cgroup: String,
    pages: Option<PageCounts>,
    /// The functions each function profile ran.
    functions: Vec<FunctionSet>,
    /// Instructions counted apart from the runs (valgrind), when the runs' counters have none.
    instructions: Option<InstructionCounts>,
    warnings: Vec<String>,
}

impl Gathered {
    fn new(plan: &Plan) -> Gathered {
        let n = plan.states.len();
        Gathered {
            counted: vec![Vec::new(); n],
            made: vec![0; n],
            excluded: vec![Vec::new(); n],
            ..Gathered::default()
        }
    }

    fn add(&mut self, plan: &Plan, states: &[CacheState], runs: usize, batch: Batch) {
        for (state, got) in states.iter().zip(batch.states) {
            if let Some(i) = plan.states.iter().position(|s| s == state) {
                self.made[i] += runs;
                self.counted[i].extend(got.counters);
                self.excluded[i].extend(got.excluded);
            }
        }
        self.calibration.extend(batch.calibration);
        self.calibration_threads = batch.calibration_threads.max(1);
        self.cgroup = batch.cgroup;
        // A later batch repeats the first one's warnings with other numbers: one of each kind.
        let kind =
            |w: &str| -> String { w.chars().filter(|c| !c.is_ascii_digit()).take(60).collect() };
        for w in batch.warnings {
            if !self.warnings.iter().any(|x| kind(x) == kind(&w)) {
                self.warnings.push(w);
            }
        }
    }

    /// Page counts of more profiles.
    fn add_pages(&mut self, counts: PageCounts) {
        match &mut self.pages {
            None => self.pages = Some(counts),
            Some(p) => {
                p.values.extend(counts.values);
                p.sampled |= counts.sampled;
                p.source = counts.source;
                for w in counts.warnings {
                    if !p.warnings.contains(&w) {
                        p.warnings.push(w);
                    }
                }
            }
        }
    }

    /// The sets of more function profiles.
    fn add_functions(&mut self, profiles: FunctionProfiles) {
        self.functions.extend(profiles.sets);
        for w in profiles.warnings {
            if !self.warnings.contains(&w) {
                self.warnings.push(w);
            }
        }
    }

    /// More counts of instructions.
    fn add_instructions(&mut self, counts: InstructionCounts) {
        for w in &counts.warnings {
            if !self.warnings.contains(w) {
                self.warnings.push(w.clone());
            }
        }
        match &mut self.instructions {
            None => self.instructions = Some(counts),
            Some(c) => {
                c.values.extend(counts.values);
                c.miss_cycles.extend(counts.miss_cycles);
            }
        }
    }

    /// Whether the hot runs' counters have instructions (the CPU counted them).
    fn counted_by_the_cpu(&self, plan: &Plan) -> bool {
        plan.states
            .iter()
            .zip(&self.counted)
            .any(|(s, runs)| *s == CacheState::Hot && runs.iter().any(|c| c.instructions.is_some()))
    }

    /// Fail when a state has no counted run.
    fn check(&self, plan: &Plan) -> Result<(), GateError> {
        for (i, state) in plan.states.iter().enumerate() {
            if self.counted[i].is_empty() {
                let mut reasons = self.excluded[i].clone();
                reasons.dedup();
                reasons.truncate(2);
                return Err(GateError::NoRunCounted {
                    state: state.to_string(),
                    reasons: reasons.join("; "),
                });
            }
        }
        Ok(())
    }

    /// The measurement as a baseline (what `--update` writes, and what a gate compares).
    fn to_baseline(
        &self,
        plan: &Plan,
        env: &Environment,
        commit: Option<String>,
        warnings: &[String],
    ) -> Baseline {
        let mut figures = Vec::new();
        for (i, state) in plan.states.iter().enumerate() {
            figures.extend(figures_of(*state, &self.counted[i]));
        }
        if let Some(p) = self.pages.as_ref().filter(|p| !p.sampled && !p.values.is_empty()) {
            figures.push(Samples {
                figure: Figure::PagesTouched,
                state: CacheState::Hot.to_string(),
                values: p.values.clone(),
                source: Some(p.source.clone()),
            });
        }
        if let Some(c) = self.instructions.as_ref().filter(|c| !c.values.is_empty()) {
            if !figures.iter().any(|s| s.figure == Figure::Instructions) {
                figures.push(Samples {
                    figure: Figure::Instructions,
                    state: CacheState::Hot.to_string(),
                    values: c.values.clone(),
                    source: Some(c.source.clone()),
                });
                // The misses of the same counts, when every count simulated the caches.
                if c.miss_cycles.len() == c.values.len() {
                    figures.push(Samples {
                        figure: Figure::MissCycles,
                        state: CacheState::Hot.to_string(),
                        values: c.miss_cycles.clone(),
                        source: Some(c.source.clone()),
                    });
                }
            }
        }
        // What new code the baseline's own profiles show against each other: the noise a gate
        // of a new build allows for.
        let noise = functions::leave_one_out(&self.functions);
        if !noise.is_empty() {
            figures.push(Samples {
                figure: Figure::NewFunctionBytes,
                state: CacheState::Hot.to_string(),
                values: noise,
                source: None,
            });
        }
        let mut all_warnings: Vec<String> = warnings.to_vec();
        all_warnings.extend(self.warnings.iter().cloned());
        // The runs' "not counted" is answered by the counts valgrind took.
        if self.instructions.as_ref().is_some_and(|c| !c.values.is_empty()) {
            all_warnings
                .retain(|w| !w.starts_with("instructions are not counted: perf_event_open"));
        }
        if let Some(p) = &self.pages {
            all_warnings.extend(p.warnings.iter().cloned());
        }
        all_warnings.dedup();
        Baseline {
            format: FORMAT.into(),
            version: VERSION,
            created_unix: coldstart_units::now_unix(),
            coldstart: env!("CARGO_PKG_VERSION").into(),
            commit,
            command: plan.command.clone(),
            settings: plan.settings(),
            environment: env.clone(),
            figures,
            calibration: (!self.calibration.is_empty()).then(|| Calibration {
                build: build().into(),
                rounds: crate::baseline::CALIBRATION_ROUNDS,
                values: self.calibration.clone(),
                threads: self.calibration_threads.max(1),
            }),
            warnings: all_warnings,
            program: None,
            cwd: None,
            functions: (!self.functions.is_empty())
                .then(|| functions::FunctionRuns::of(&self.functions)),
            costs: None,
        }
    }
}

/// `release` or `debug`: how this coldstart was built (the calibration loop's speed depends
/// on it).
pub fn build() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The figures of one state's counted runs: time in every state, the I/O figures in a colder
/// one, the work (CPU time, instructions, minor faults) hot. A figure no run measured is left
/// out (not available here).
/// How a figure's value is read from a run's counters.
type Reader = fn(&Counters) -> Option<f64>;

fn figures_of(state: CacheState, runs: &[Counters]) -> Vec<Samples> {
    let mut list: Vec<(Figure, Reader)> = vec![(Figure::Time, |c| Some(c.wall_s))];
    if state == CacheState::Hot {
        list.push((Figure::CpuTime, |c| Some(c.user_s? + c.sys_s?)));
        list.push((Figure::Instructions, |c| c.instructions.map(|v| v as f64)));
        list.push((Figure::MinorFaults, |c| c.minor_faults.map(|v| v as f64)));
    } else {
        list.push((Figure::DeviceReadBytes, |c| c.storage_read_bytes.map(|v| v as f64)));
        list.push((Figure::DeviceReadRequests, |c| c.storage_read_requests.map(|v| v as f64)));
        list.push((Figure::ReadBytes, |c| c.read_bytes.map(|v| v as f64)));
        list.push((Figure::ReadRequests, |c| c.read_requests.map(|v| v as f64)));
        list.push((Figure::MajorFaults, |c| c.major_faults.map(|v| v as f64)));
    }
    list.into_iter()
        .filter_map(|(figure, get)| {
            let values: Vec<f64> = runs.iter().filter_map(get).collect();
            (!values.is_empty()).then(|| Samples {
                figure,
                state: state.to_string(),
                values,
                source: None,
            })
        })
        .collect()
}

/// Record a baseline: the colder state's runs, then the hot runs, then the page profiles,
/// with what each step cost (a gate plans its steps with it).
pub fn record(
    opts: &GateOptions,
    runner: &mut dyn Runner,
    progress: &mut dyn FnMut(Progress),
) -> Result<Baseline, GateError> {
    let (plan, warnings) = plan_for_record(opts)?;
    let program = identity::program_of(&plan.command)?;
    let mut got = Gathered::new(&plan);
    let mut clock = Clock::new(None, Costs::default());
    for &state in &plan.states {
        let runs =
            if state == CacheState::Hot { opts.baseline_runs } else { opts.baseline_cold_runs };
        measure_step(&plan, runner, &mut got, &mut clock, progress, state, runs, "")?;
    }
    got.check(&plan)?;
    if plan.page_profiles > 0 {
        profile_step(&plan, runner, &mut got, &mut clock, progress, plan.page_profiles)?;
    }
    functions_step(&plan, runner, &mut got, &mut clock, progress, BASELINE_FUNCTION_PROFILES)?;
    if opts.instruction_counts > 0 && !got.counted_by_the_cpu(&plan) {
        instructions_step(&plan, runner, &mut got, &mut clock, progress, opts.instruction_counts)?;
    }
    let env = Environment::collect(Path::new(&program.path), &got.cgroup, opts.facts.clone());
    let commit = opts.commit.clone().or_else(detect_commit);
    let mut base = got.to_baseline(&plan, &env, commit, &warnings);
    base.program = Some(program);
    base.cwd = identity::cwd();
    base.costs = Some(clock.costs.clone());
    progress(Progress::Step(format!("recorded in {}", seconds(clock.spent))));
    Ok(base)
}

fn seconds(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

/// One measurement of `runs` runs of `state`, said before it starts, with its cost learned.
#[allow(clippy::too_many_arguments)]
fn measure_step(
    plan: &Plan,
    runner: &mut dyn Runner,
    got: &mut Gathered,
    clock: &mut Clock,
    progress: &mut dyn FnMut(Progress),
    state: CacheState,
    runs: usize,
    why: &str,
) -> Result<(), GateError> {
    let about = about(clock.costs.run(state), runs);
    progress(Progress::Step(format!("{state}: {runs} runs{why}{about}")));
    let batch = runner.measure(plan, &[state], runs)?;
    clock.ran(state, runs, batch.seconds);
    got.add(plan, &[state], runs, batch);
    Ok(())
}

/// `, about 3.1 s` for `n` steps of `each` seconds; nothing where a step's cost is not known.
fn about(each: Option<f64>, n: usize) -> String {
    each.map_or(String::new(), |c| format!(", about {}", seconds(c * n as f64)))
}

/// `n` more exact page profiles.
fn profile_step(
    plan: &Plan,
    runner: &mut dyn Runner,
    got: &mut Gathered,
    clock: &mut Clock,
    progress: &mut dyn FnMut(Progress),
    n: usize,
) -> Result<(), GateError> {
    let about = about(clock.costs.profile(), n);
    let noun = if n == 1 { "profile" } else { "profiles" };
    progress(Progress::Step(format!("pages touched: {n} exact page {noun}{about}")));
    let counts = runner.pages(plan, n)?;
    clock.profiled(n, counts.seconds);
    got.add_pages(counts);
    Ok(())
}

/// Function profiles: the functions each ran, by name, for new code run
/// ([`crate::functions`]).
fn functions_step(
    plan: &Plan,
    runner: &mut dyn Runner,
    got: &mut Gathered,
    clock: &mut Clock,
    progress: &mut dyn FnMut(Progress),
    n: usize,
) -> Result<(), GateError> {
    let about = about(clock.costs.functions_s, n);
    let noun = if n == 1 { "profile" } else { "profiles" };
    progress(Progress::Step(format!("functions run: {n} function {noun}{about}")));
    let profiles = runner.functions(plan, n)?;
    clock.profiled_functions(n, profiles.seconds);
    got.add_functions(profiles);
    Ok(())
}

/// `n` counts of the instructions start-up runs, under valgrind.
fn instructions_step(
    plan: &Plan,
    runner: &mut dyn Runner,
    got: &mut Gathered,
    clock: &mut Clock,
    progress: &mut dyn FnMut(Progress),
    n: usize,
) -> Result<(), GateError> {
    let about = about(clock.costs.instructions_s, n);
    let noun = if n == 1 { "count" } else { "counts" };
    progress(Progress::Step(format!("instructions: {n} {noun} under valgrind{about}")));
    let counts = runner.instructions(plan, n)?;
    clock.counted(n, counts.seconds);
    got.add_instructions(counts);
    Ok(())
}

/// The counts of instructions a baseline took apart from its runs (valgrind's), if any.
fn counts_of(base: &Baseline) -> usize {
    base.figures
        .iter()
        .find(|s| s.figure == Figure::Instructions && s.source.is_some())
        .map_or(0, |s| s.values.len())
}

/// The new code the measurement's function profiles ran against the baseline's, as the
/// measurement's `new_function_bytes` (one value per profile), and the line naming the new
/// functions of the last profile; nothing without profiles on both sides.
fn judge_new_code(base: &Baseline, got: &Gathered, m: &mut Baseline) -> Option<String> {
    m.figures.retain(|s| s.figure != Figure::NewFunctionBytes);
    let runs = base.functions.as_ref()?;
    let news: Vec<functions::NewCode> =
        got.functions.iter().map(|set| functions::new_code(runs, set)).collect();
    if news.is_empty() {
        return None;
    }
    m.figures.push(Samples {
        figure: Figure::NewFunctionBytes,
        state: CacheState::Hot.to_string(),
        values: news.iter().map(|n| n.bytes as f64).collect(),
        source: None,
    });
    // The profile whose new code is the median's, or the larger of the middle two.
    let mut order: Vec<&functions::NewCode> = news.iter().collect();
    order.sort_by_key(|n| n.bytes);
    Some(functions::describe(order[order.len() / 2])).filter(|d| !d.is_empty())
}

/// Whether a gate compares new code run: the program is another build than the baseline's
/// (allowed by `--new-build`), whose function profiles the baseline kept. A baseline of the
/// same build is compared by its exact pages; one recorded without function profiles is said.
fn new_build(base: &Baseline, program: &identity::Program, notes: &mut Vec<String>) -> bool {
    let changed = base.program.as_ref().is_some_and(|b| b.build_id != program.build_id);
    if changed && base.functions.is_none() {
        notes.push(
            "the program is another build, and the baseline keeps no function profiles (recorded by an older \
             coldstart): new functions run are not compared, and pages touched can move by a few pages either \
             way across a relink; record the baseline again with --update"
                .into(),
        );
    }
    changed && base.functions.is_some()
}

/// The first steps of a gate, each as small as the budget needs: a batch of each state, then
/// the first page profiles, for a new build the first function profiles, and the first count
/// of instructions where the baseline counted them under valgrind (if the budget leaves room).
#[allow(clippy::too_many_arguments)]
fn first_steps(
    opts: &GateOptions,
    plan: &Plan,
    runner: &mut dyn Runner,
    got: &mut Gathered,
    clock: &mut Clock,
    progress: &mut dyn FnMut(Progress),
    compare_functions: bool,
    counts_most: usize,
) -> Result<(), GateError> {
    let profiles_first = plan.page_profiles.min(FIRST_PAGE_PROFILES);
    let mut first: Vec<(CacheState, usize)> = plan
        .states
        .iter()
        .map(|&s| (s, if s == CacheState::Hot { opts.first_runs } else { opts.cold_first_runs }))
        .collect();
    clock.shrink(&mut first, profiles_first.min(1));
    for &(state, runs) in &first {
        measure_step(plan, runner, got, clock, progress, state, runs, "")?;
    }
    got.check(plan)?;
    if profiles_first > 0 {
        let n = if clock.allows_profiles(profiles_first) { profiles_first } else { 1 };
        profile_step(plan, runner, got, clock, progress, n)?;
    }
    if compare_functions {
        functions_step(plan, runner, got, clock, progress, FIRST_FUNCTION_PROFILES)?;
    }
    if counts_most > 0 {
        let n = counts_most.min(instructions::FIRST_COUNTS);
        if clock.allows_counts(n) {
            instructions_step(plan, runner, got, clock, progress, n)?;
        } else {
            got.warnings.push(format!(
                "instructions were not counted: a count under valgrind took {} when the baseline was \
                 recorded, more than the --budget left",
                seconds(clock.costs.instructions_s.unwrap_or(0.0))
            ));
        }
    }
    Ok(())
}

/// The note on the new-functions row: why the baseline's own build is not judged by it, or
/// the functions that are new.
fn note_new_code(report: &mut GateReport, compare_functions: bool, named: &Option<String>) {
    let Some(row) = report.figures.iter_mut().find(|r| r.figure == Figure::NewFunctionBytes) else {
        return;
    };
    if !compare_functions {
        row.note = Some(
            "the baseline's build: the exact pages judge it; taken for a new build (--new-build)"
                .into(),
        );
    } else if row.note.is_none() {
        row.note.clone_from(named);
    }
}

/// Gate a start-up against `base` (read from `path`): refuse another command, program or
/// directory; measure as the baseline was measured, spending runs where the verdict is unclear
/// and within the budget; compare; look for drift in `history`. Returns the report and the
/// measurement (for the history).
pub fn gate(
    opts: &GateOptions,
    base: &Baseline,
    path: &Path,
    history: Option<&[Entry]>,
    runner: &mut dyn Runner,
    progress: &mut dyn FnMut(Progress),
) -> Result<(GateReport, Baseline), GateError> {
    let plan = plan_from_baseline(opts, base, path)?;
    let program = identity::program_of(&plan.command)?;
    let cwd = identity::cwd();
    let mut notes = identity::check(
        identity::Side {
            command: &base.command,
            program: base.program.as_ref(),
            cwd: base.cwd.as_deref(),
        },
        identity::Side { command: &plan.command, program: Some(&program), cwd: cwd.as_deref() },
        path,
        opts.allow,
    )?;
    let rules = Rules::of(opts);
    let commit = opts.commit.clone().or_else(detect_commit);
    let mut got = Gathered::new(&plan);
    let mut clock = Clock::new(opts.budget, base.costs.clone().unwrap_or_default());

    let compare_functions = new_build(base, &program, &mut notes);
    let counts_most = counts_of(base);
    first_steps(
        opts,
        &plan,
        runner,
        &mut got,
        &mut clock,
        progress,
        compare_functions,
        counts_most,
    )?;
    let functions_most = base.functions.as_ref().map_or(0, |f| f.profiles);
    let env = Environment::collect(Path::new(&program.path), &got.cgroup, opts.facts.clone());
    let measured = |got: &Gathered| {
        let mut m = got.to_baseline(&plan, &env, commit.clone(), &[]);
        m.program = Some(program.clone());
        m.cwd = cwd.clone();
        let named = judge_new_code(base, got, &mut m);
        (m, named)
    };
    let judged = |now: &Baseline, named: &Option<String>| {
        let mut report = compare(base, now, path, &rules, history);
        note_new_code(&mut report, compare_functions, named);
        report
    };
    let (mut now, mut named) = measured(&got);
    let mut report = judged(&now, &named);
    let mut ran_out = Vec::new();
    while report.environment_differences.is_empty() {
        let most = Most { functions: functions_most, counts: counts_most };
        let steps = next_steps(&report, &plan, &got, opts, most, &clock.costs);
        if steps.is_empty() {
            break;
        }
        let mut added = false;
        for step in steps {
            match step {
                Step::Profiles(n) if clock.allows_profiles(n) => {
                    profile_step(&plan, runner, &mut got, &mut clock, progress, n)?;
                    added = true;
                }
                Step::Functions(n) if clock.allows_function_profiles(n) => {
                    functions_step(&plan, runner, &mut got, &mut clock, progress, n)?;
                    added = true;
                }
                Step::Runs(state, runs, why) if clock.allows_runs(state, runs) => {
                    measure_step(&plan, runner, &mut got, &mut clock, progress, state, runs, &why)?;
                    added = true;
                }
                Step::Counts(n) if clock.allows_counts(n) => {
                    instructions_step(&plan, runner, &mut got, &mut clock, progress, n)?;
                    added = true;
                }
                Step::Profiles(_) => ran_out.push("pages touched".to_string()),
                Step::Counts(_) => ran_out.push("instructions".to_string()),
                Step::Functions(_) => ran_out.push("new functions run".to_string()),
                Step::Runs(state, ..) => ran_out.push(format!("time, {state}")),
            }
        }
        if !added {
            break;
        }
        (now, named) = measured(&got);
        report = judged(&now, &named);
    }
    if !ran_out.is_empty() {
        ran_out.dedup();
        let budget = opts.budget.map_or(0.0, |b| b.as_secs_f64());
        notes.push(format!(
            "the --budget of {} ran out after {}: {} could have used more runs",
            seconds(budget),
            seconds(clock.spent),
            ran_out.join(", ")
        ));
    }
    report.warnings.extend(notes);
    report.elapsed_s = Some(clock.spent);
    progress(Progress::Step(format!("{} in {}", report.verdict.label(), seconds(clock.spent))));
    Ok((report, now))
}

/// A step a gate may add.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// More exact page profiles.
    Profiles(usize),
    /// More function profiles.
    Functions(usize),
    /// More counts of instructions.
    Counts(usize),
    /// More runs of a state, and why.
    Runs(CacheState, usize, String),
}

/// Runs past the time rule's bound are added to an unclear time while all of them up to
/// [`crate::time::TimeRule::max_runs`] would take no longer than this, in seconds. The bound comes from the
/// baseline's spread, and a busy machine spreads the runs now wider: Debian's python3 (hot
/// runs of 25 ms) was left unclear on CPU time after 10 runs, in 7 s, under one other job.
pub const CHEAP_RUNS_S: f64 = 15.0;

/// What to measure next, from the report so far: nothing once a steady figure is slower
/// (more runs cannot make it less so), more page profiles while they disagree with the
/// baseline or among themselves, and a batch of each state whose time is unclear, up to the
/// bound the time rule sets, or up to the most runs when those cost little ([`CHEAP_RUNS_S`]).
/// The most function profiles and counts of instructions a gate makes: the baseline's.
#[derive(Debug, Clone, Copy, Default)]
struct Most {
    functions: usize,
    counts: usize,
}

fn next_steps(
    report: &GateReport,
    plan: &Plan,
    got: &Gathered,
    opts: &GateOptions,
    most: Most,
    costs: &Costs,
) -> Vec<Step> {
    let made_profiles = got.pages.as_ref().map_or(0, |p| p.values.len());
    let mut steps = Vec::new();
    // New code above its limit in a profile: more profiles, up to the baseline's number, so
    // that a function that only sometimes runs does not decide (their median is judged).
    if let Some(row) = report.figures.iter().find(|r| r.figure == Figure::NewFunctionBytes) {
        let made = got.functions.len();
        if row.verdict == Verdict::Slower && made < most.functions {
            steps.push(Step::Functions(most.functions - made));
            return steps;
        }
    }
    // Instructions or their misses above the limit in the first count: more, up to the
    // baseline's number, and their median is judged.
    let counted = |f: Figure| report.figures.iter().find(|r| r.figure == f);
    if counted(Figure::Instructions)
        .into_iter()
        .chain(counted(Figure::MissCycles))
        .any(|r| r.verdict == Verdict::Slower)
    {
        let made = got.instructions.as_ref().map_or(0, |c| c.values.len());
        if made < most.counts {
            steps.push(Step::Counts(most.counts - made));
            return steps;
        }
    }
    if let Some(row) = report.figures.iter().find(|r| r.figure == Figure::PagesTouched) {
        let values = got.pages.as_ref().map(|p| p.values.as_slice()).unwrap_or(&[]);
        let agree = values.windows(2).all(|w| w[0] == w[1])
            && row.limit.is_none_or(|l| values.iter().all(|v| *v <= l));
        if !agree && made_profiles < plan.page_profiles {
            steps.push(Step::Profiles(plan.page_profiles - made_profiles));
            return steps;
        }
    }
    let steady_slower =
        report.figures.iter().any(|r| r.verdict == Verdict::Slower && !r.figure.is_time());
    if steady_slower {
        return steps;
    }
    for (i, state) in plan.states.iter().enumerate() {
        let name = state.to_string();
        // The state's time, or (hot) its CPU time, unclear: the larger bound of the two.
        let bound = report
            .figures
            .iter()
            .filter(|r| r.figure.is_time() && r.state == name && r.verdict == Verdict::Unclear)
            .filter_map(|r| r.runs)
            .max_by_key(|b| b.runs);
        let Some(bound) = bound else { continue };
        let batch = if *state == CacheState::Hot { opts.first_runs } else { opts.cold_first_runs };
        let most = opts.time.max_runs.max(bound.runs);
        let cheap = costs
            .run(*state)
            .is_some_and(|c| c * most.saturating_sub(got.made[i]) as f64 <= CHEAP_RUNS_S);
        let until = if cheap { most } else { bound.runs };
        if got.made[i] < until {
            let runs = batch.min(until - got.made[i]);
            steps.push(Step::Runs(
                *state,
                runs,
                format!(" more (time unclear after {})", got.made[i]),
            ));
        }
    }
    steps
}

#[cfg(test)]
mod tests;
