//! `coldstart order`: profiles in, an order file for a linker (or BOLT) out; with
//! `--evaluate`, every algorithm scored on a held-out start-up first.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use coldstart_layout::binary::Binary;
use coldstart_layout::input::Workload;
use coldstart_layout::model::ReadAround;
use coldstart_layout::order::{Algorithm, Order, Unprofiled};
use coldstart_layout::request::{OrderOutcome, OrderRequest};
use coldstart_layout::writers::{Format, WriteReport};
use coldstart_layout::{evaluate, writers};

use super::common::{preview, PageModelArgs};

#[derive(Debug, clap::Args)]
#[command(after_help = "Without --module or --binary the profile's first executable is ordered; \
    a warning names the module that touched the most functions when that is another (the \
    executable was a wrapper or a driver over libraries).\n\nExamples:\n  \
    coldstart order p.json -o prog.order\n  \
    coldstart order a.json b.json --algorithm merged --weights 3,1 -o prog.order\n  \
    coldstart order p.json --binary ./prog --evaluate held-out.json -o prog.order\n  \
    coldstart order p.json --module libclang-cpp.so.19.1 --format bolt -o clang.order\n  \
    coldstart order p.json --all-modules --binary ./prog --data -o prog.order\n  \
    coldstart order p.json --binary ./prog --if-decayed -o prog.order")]
pub struct Args {
    /// Profiles (`coldstart profile -o P`), one per workload.
    #[arg(required = true)]
    pub profiles: Vec<PathBuf>,
    /// Where to write the order file (standard output if absent).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Order-file format: lld, gold, gnu-ld (binutils 2.43+), ld64 or bolt.
    #[arg(long, default_value = "lld")]
    pub format: String,
    /// first-touch, merged or cluster (default: first-touch, or the best of --evaluate).
    #[arg(long)]
    pub algorithm: Option<String>,
    /// Weights of the profiles for `merged`, comma separated, in the order given.
    #[arg(long, value_delimiter = ',')]
    pub weights: Vec<f64>,
    /// Order this module only (path or file name). Default: every module outside the
    /// system library directories (the executable and the program's own libraries) in one
    /// file; each link takes the names it defines.
    #[arg(long, conflicts_with = "all_modules")]
    pub module: Option<String>,
    /// Every module of the program (the default; kept for scripts).
    #[arg(long, hide = true)]
    pub all_modules: bool,
    /// Where the functions no profile touched go: `callees` (the ones the touched functions
    /// call, found by decoding their calls, right after them, likeliest first), `references`
    /// (the same counting function pointers and vtables the code refers to), `siblings`
    /// (callees, then the other implementations of the trait and virtual methods start-up
    /// ran) or `input` (where the linker puts them). Default: callees, or the best of
    /// --evaluate.
    #[arg(long, value_name = "PLACEMENT")]
    pub unprofiled: Option<String>,
    /// The binary the order is for: reports ambiguous static names and names it lacks;
    /// needed by --evaluate.
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// Also order data objects (.rodata, .data.rel.ro, .data) by the first touch of their
    /// pages; needs --binary and a profile recorded with --pages; build with -fdata-sections.
    /// The default whenever the profile has page data for the executable: --binary, else the
    /// file at the profiled path when it is the build profiled.
    #[arg(long, conflicts_with = "no_data")]
    pub data: bool,
    /// Never order data objects.
    #[arg(long)]
    pub no_data: bool,
    /// A held-out profile: score the default layout, every algorithm and the ideal on it.
    #[arg(long, value_name = "HOLDOUT")]
    pub evaluate: Option<PathBuf>,
    /// The page model of --evaluate.
    #[command(flatten)]
    pub page_model: PageModelArgs,
    /// Print the evaluation as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write -o only when it has decayed: when --binary (this build, linked with the order
    /// now at -o) reads more than --decay-bar times the code pages for the first profile's
    /// start-up (a profile of this build) than the start-up's own order would (the page
    /// model). Otherwise keep the file as it is. For a closed loop in CI that commits the
    /// order file and orders again only when the program has drifted from it.
    #[arg(long, requires_all = ["binary", "output"])]
    pub if_decayed: bool,
    /// The bar of --if-decayed: pages read as linked over pages read in the start-up's own
    /// order.
    #[arg(long, default_value_t = 1.3, requires = "if_decayed", value_name = "RATIO")]
    pub decay_bar: f64,
}

/// With --if-decayed: whether the order at -o still holds for `binary` (then nothing is
/// written). Says which, with the figures.
fn order_still_holds(
    args: &Args,
    binary: &Binary,
    workloads: &[Workload],
    model: coldstart_layout::model::PageModel,
) -> anyhow::Result<bool> {
    if !(args.decay_bar.is_finite() && args.decay_bar >= 1.0) {
        return Err(crate::exit::usage(format!(
            "--decay-bar {}: give a ratio of 1 or more (1.3: 30% more pages than a fresh order)",
            args.decay_bar
        )));
    }
    let out = args.output.as_deref().expect("clap requires -o with --if-decayed");
    if !out.exists() {
        eprintln!("coldstart: {} does not exist yet: writing the first order", out.display());
        return Ok(false);
    }
    let first = workloads.first().context("no workload in the profiles")?;
    let d = evaluate::decay(binary, first, args.module.as_deref(), model)?;
    let held = !d.decayed(args.decay_bar);
    eprintln!(
        "coldstart: {} as linked reads {} in {} for `{}`, {:.2}x the {} of its own order (bar {}x): {}",
        binary.info.path.display(),
        coldstart_units::count(d.current.pages_read, "code page"),
        coldstart_units::count(d.current.faults, "fault"),
        d.workload,
        d.ratio(),
        d.ideal.pages_read,
        args.decay_bar,
        if held {
            format!("the order holds; {} kept as it is", out.display())
        } else {
            format!("the order has decayed; writing a new one to {}", out.display())
        }
    );
    Ok(held)
}

/// What the untouched functions an order lists are to the touched ones.
fn untouched_placed(unprofiled: Unprofiled) -> &'static str {
    match unprofiled {
        Unprofiled::Input | Unprofiled::Callees => "that they call",
        Unprofiled::References => "that they call or refer to",
        Unprofiled::Siblings => {
            "that they call, then their siblings (other implementations of their methods)"
        }
    }
}

/// Read every profile into workloads, applying `weights` in order.
fn read_workloads(profiles: &[PathBuf], weights: &[f64]) -> anyhow::Result<Vec<Workload>> {
    if !weights.is_empty() && weights.len() != profiles.len() {
        return Err(crate::exit::usage(format!(
            "--weights has {} values for {} profiles: give one weight per profile",
            weights.len(),
            profiles.len()
        )));
    }
    let mut out = Vec::new();
    for (i, p) in profiles.iter().enumerate() {
        let mut ws = Workload::read_profile(p)?;
        if let Some(w) = weights.get(i) {
            if !(w.is_finite() && *w >= 0.0) {
                return Err(crate::exit::usage(format!(
                    "--weights: `{w}` is not a weight (a number >= 0)"
                )));
            }
            for x in &mut ws {
                x.weight = *w;
            }
        }
        out.extend(ws);
    }
    Ok(out)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let format = writers::parse_format(&args.format)?;
    if format == writers::Format::GnuLd {
        note_old_gnu_ld();
    }
    let algorithm: Option<Algorithm> =
        args.algorithm.as_deref().map(str::parse).transpose().map_err(crate::exit::usage)?;
    let unprofiled: Option<Unprofiled> =
        args.unprofiled.as_deref().map(str::parse).transpose().map_err(crate::exit::usage)?;
    let workloads = read_workloads(&args.profiles, &args.weights)?;
    let model = args.page_model.model()?;
    let binary = match &args.binary {
        Some(b) => Some(Binary::open(b).with_context(|| format!("--binary {}", b.display()))?),
        None => None,
    };
    if let (true, Some(b)) = (args.if_decayed, &binary) {
        if order_still_holds(&args, b, &workloads, model)? {
            return Ok(crate::exit::SUCCESS);
        }
    }
    let mut request = OrderRequest::new(workloads, binary.as_ref());
    request.module = args.module.clone();
    request.all_modules = args.all_modules;
    request.algorithm = algorithm;
    request.unprofiled = unprofiled;
    request.data = if args.data {
        Some(true)
    } else if args.no_data {
        Some(false)
    } else {
        None
    };
    request.holdout = args.evaluate.as_deref();
    request.model = model;
    request.format = format;
    if !args.all_modules {
        warn_another_build(&request);
    }
    let evaluation = request.evaluate()?;
    if let Some(e) = &evaluation {
        if args.json {
            println!("{}", serde_json::to_string_pretty(e)?);
        } else {
            print_evaluation(e);
        }
    }
    let outcome = request.order(evaluation)?;
    say_how_untouched_were_placed(&outcome);
    if args.module.is_none() && args.binary.is_none() && !args.all_modules {
        warn_busier_module(&request, &outcome.order);
    }
    match &args.output {
        Some(path) => {
            coldstart_layout::write_atomic(path, outcome.text.as_bytes())?;
            say_written(path, &request, &outcome, format);
        }
        None if args.evaluate.is_none() => print!("{}", outcome.text),
        None => {}
    }
    warn_left_out(&args, &outcome.report, format);
    Ok(crate::exit::SUCCESS)
}

/// Note that the GNU ld here is too old for its order file, when it is.
fn note_old_gnu_ld() {
    if let Some((major, minor)) = writers::gnu_ld_version() {
        if (major, minor) < (2, 43) {
            eprintln!(
                "coldstart: note: the GNU ld here is {major}.{minor}; --section-ordering-file needs 2.43 or later (use --format lld or gold on this machine)"
            );
        }
    }
}

/// Warn of each profile recorded from another build of the binary than the one given.
fn warn_another_build(request: &OrderRequest) {
    for w in request.another_build() {
        eprintln!(
            "coldstart: warning: the profile `{}` was recorded from another build of {} (build-id {}; this one is {}): functions it names may have moved, been renamed or gone; profile this build again",
            w.workload,
            w.path.display(),
            w.profiled,
            w.found
        );
    }
}

/// Say where the untouched functions went when a cross-validation chose it, and warn of the
/// modules whose call graph could not be read.
fn say_how_untouched_were_placed(outcome: &OrderOutcome) {
    if let Some(cv) = &outcome.cross_validation {
        eprintln!(
            "coldstart: untouched functions {}: each of the {} workloads held out in turn took {} faults with the callees placed, {} without",
            if cv.best() == Unprofiled::Callees { "after their callers" } else { "left in input order" },
            cv.folds,
            cv.callees_faults,
            cv.input_faults
        );
    }
    for (path, why) in &outcome.unread {
        eprintln!(
            "coldstart: warning: no call graph for {} ({why}): its untouched functions stay where the linker puts them",
            path.display()
        );
    }
}

/// Warn when another module than the profile's first executable, which was ordered, touched
/// the most functions (the executable was a wrapper or a driver over libraries).
fn warn_busier_module(request: &OrderRequest, order: &Order) {
    let ordered: Vec<PathBuf> = order.runs.iter().map(|r| r.path.clone()).collect();
    let Some(b) = request.busier_module(&order.module, &ordered) else { return };
    let file = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let (wrapper, busiest) =
        (file(&b.ordered).unwrap_or_default(), file(&b.busiest).unwrap_or_default());
    let what = if b.busiest_ordered {
        format!("it is ordered too; if {wrapper} is a wrapper (a script's interpreter, env, a shim), order only that module with --module {busiest}")
    } else {
        format!("it is not ordered (a system library); if {wrapper} is a driver over libraries or a wrapper, order that module with --module {busiest}")
    };
    eprintln!(
        "coldstart: warning: ordered {}, the profile's first executable, which touched {} functions; {} touched the most ({}): {what}",
        b.ordered.display(),
        b.ordered_touched,
        b.busiest.display(),
        b.busiest_touched,
    );
}

/// Say what the order file written to `path` holds, and how to give it to the linker.
fn say_written(path: &Path, request: &OrderRequest, outcome: &OrderOutcome, format: Format) {
    let (order, report) = (&outcome.order, &outcome.report);
    let modules = request.ordered_modules();
    let of = if modules.len() > 1 {
        format!("{} and {} more modules of the program", order.module.display(), modules.len() - 1)
    } else {
        order.module.display().to_string()
    };
    let untouched = order.functions.len().saturating_sub(order.touched());
    eprintln!(
        "coldstart: wrote {} ({}) of {}: {} touched, in {} order, then {} untouched {}; to {} ({} format; use {})",
        coldstart_units::count(report.written as u64, "function"),
        coldstart_units::bytes(order.bytes()),
        of,
        order.touched(),
        outcome.chosen.name(),
        untouched,
        untouched_placed(order.unprofiled),
        path.display(),
        format.name(),
        format.flag(&path.display().to_string())
    );
}

/// Say what the order file holds besides functions, and warn of the names it left out or
/// could not pin to one definition.
fn warn_left_out(args: &Args, report: &WriteReport, format: Format) {
    if report.data_written > 0 || args.data {
        eprintln!(
            "coldstart: {} hot data objects written after the functions (--no-data to leave them out)",
            report.data_written
        );
    }
    if report.data_not_written > 0 {
        eprintln!(
            "coldstart: note: {} data objects left out: BOLT moves code only; relink with lld (--format lld) to order data",
            report.data_not_written
        );
    }
    if !report.ambiguous.is_empty() {
        eprintln!(
            "coldstart: warning: {} static names are defined more than once in the binary; the linker moves every copy: {}",
            report.ambiguous.len(),
            preview(&report.ambiguous)
        );
    }
    if !report.not_in_binary.is_empty() {
        eprintln!(
            "coldstart: warning: {} names are not in the binary (inlined, renamed or another build): {}",
            report.not_in_binary.len(),
            preview(&report.not_in_binary)
        );
    }
    if !report.skipped.is_empty() {
        eprintln!(
            "coldstart: warning: {} names cannot be written in {} format (glob or space characters): {}",
            report.skipped.len(),
            format.name(),
            preview(&report.skipped)
        );
    }
}

fn print_evaluation(e: &evaluate::Evaluation) {
    println!(
        "held-out workload `{}`, page size {} KiB, read-ahead {} KiB{}",
        e.holdout,
        e.model.page_size / 1024,
        e.model.readahead / 1024,
        if e.model.read_around == ReadAround::Forward { " forward" } else { "" }
    );
    println!(
        "{:<26} {:>8} {:>8} {:>11}  fault curve (each tenth of start-up)",
        "layout", "pages", "faults", "pages read"
    );
    for r in &e.rows {
        let curve = r.cost.curve.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
        println!(
            "{:<26} {:>8} {:>8} {:>11}  {curve}",
            r.layout, r.cost.pages_touched, r.cost.faults, r.cost.pages_read
        );
    }
    if e.unknown_functions > 0 {
        println!(
            "({} held-out functions are not in the binary and are not counted)",
            e.unknown_functions
        );
    }
    println!(
        "best: {}{}",
        e.best.name(),
        match e.best_unprofiled {
            Unprofiled::Input => String::new(),
            other => format!(" + {}", other.name()),
        }
    );
}
