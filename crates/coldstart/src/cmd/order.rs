//! `coldstart order`: profiles in, an order file for a linker (or BOLT) out; with
//! `--evaluate`, every algorithm scored on a held-out start-up first.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use coldstart_layout::binary::Binary;
use coldstart_layout::input::{find_module, Workload};
use coldstart_layout::model::ReadAround;
use coldstart_layout::order::{compute, Algorithm, ClusterOptions};
use coldstart_layout::symbols::Bindings;
use coldstart_layout::{evaluate, writers};

use super::common::{preview, PageModelArgs};

#[derive(Debug, clap::Args)]
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
    /// The module to order (path or file name; default: the executable).
    #[arg(long, conflicts_with = "all_modules")]
    pub module: Option<String>,
    /// Order every module outside the system library directories (the executable and the
    /// program's own libraries) in one file; each link takes the names it defines.
    #[arg(long)]
    pub all_modules: bool,
    /// The binary the order is for: reports ambiguous static names and names it lacks;
    /// needed by --evaluate.
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// Also order data objects (.rodata, .data.rel.ro, .data) by the first touch of their
    /// pages; needs --binary and a profile recorded with --pages; build with -fdata-sections.
    #[arg(long)]
    pub data: bool,
    /// A held-out profile: score the default layout, every algorithm and the ideal on it.
    #[arg(long, value_name = "HOLDOUT")]
    pub evaluate: Option<PathBuf>,
    /// The page model of --evaluate.
    #[command(flatten)]
    pub page_model: PageModelArgs,
    /// Print the evaluation as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Read every profile into workloads, applying `weights` in order.
pub fn read_workloads(profiles: &[PathBuf], weights: &[f64]) -> anyhow::Result<Vec<Workload>> {
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
        if let Some((major, minor)) = writers::gnu_ld_version() {
            if (major, minor) < (2, 43) {
                eprintln!(
                    "coldstart: note: the GNU ld here is {major}.{minor}; --section-ordering-file needs 2.43 or later (use --format lld or gold on this machine)"
                );
            }
        }
    }
    let algorithm: Option<Algorithm> =
        args.algorithm.as_deref().map(str::parse).transpose().map_err(crate::exit::usage)?;
    let mut workloads = read_workloads(&args.profiles, &args.weights)?;
    let model = args.page_model.model()?;
    let binary = match &args.binary {
        Some(b) => Some(Binary::open(b).with_context(|| format!("--binary {}", b.display()))?),
        None => None,
    };
    if let Some(b) = &binary {
        b.fill_sizes(&mut workloads);
    }
    let module = args.module.clone().or_else(|| {
        args.binary.as_ref().and_then(|b| b.file_name()).map(|f| f.to_string_lossy().into_owned())
    });
    if !args.all_modules {
        warn_another_build(&workloads, binary.as_ref(), args.binary.as_deref(), module.as_deref());
    }
    let mut chosen = algorithm.unwrap_or(Algorithm::FirstTouch);
    if let Some(holdout) = &args.evaluate {
        let Some(binary) = &binary else {
            return Err(crate::exit::usage(
                "--evaluate needs --binary: the layouts are evaluated on the binary's functions",
            ));
        };
        let held = Workload::read_profile(holdout)?;
        let held = held
            .first()
            .ok_or_else(|| crate::exit::usage("the held-out profile has no workload"))?;
        let e = evaluate::evaluate(
            binary,
            &workloads,
            held,
            module.as_deref(),
            ClusterOptions::default(),
            model,
        )?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&e)?);
        } else {
            print_evaluation(&e);
        }
        if algorithm.is_none() {
            chosen = e.best;
        }
    }
    let mut order = if args.all_modules {
        coldstart_layout::order::compute_all(&workloads, chosen, ClusterOptions::default())
    } else {
        compute(&workloads, module.as_deref(), chosen, ClusterOptions::default())
    }?;
    if args.data {
        let Some(b) = &args.binary else {
            return Err(crate::exit::usage(
                "--data needs --binary: data objects are found in the binary's symbols",
            ));
        };
        let pages = workloads.iter().find_map(|w| w.pages_of(b)).ok_or_else(|| {
            crate::exit::usage(format!(
                "the profile has no page data for {}: record it with `coldstart profile --pages`",
                b.display()
            ))
        })?;
        let symbols = coldstart_layout::data::data_symbols(b)?;
        // Pages start-up faulted on, when the trace has them: pages merely read ahead or
        // mapped around a fault were not touched.
        let touched = if pages.faulted.is_empty() { &pages.pages } else { &pages.faulted };
        order.data = coldstart_layout::data::order_data(&symbols, touched);
    }
    let bindings = match &args.binary {
        Some(b) => Some(Bindings::read(b)?),
        None => None,
    };
    let (text, report) = writers::write(&order, format, bindings.as_ref());
    match &args.output {
        Some(path) => {
            coldstart_layout::write_atomic(path, text.as_bytes())?;
            let of = if args.all_modules {
                format!("{} and its own libraries", order.module.display())
            } else {
                order.module.display().to_string()
            };
            eprintln!(
                "coldstart: wrote {} functions ({} KiB) of {} in {} order to {} ({} format; use {})",
                report.written,
                order.bytes() / 1024,
                of,
                chosen.name(),
                path.display(),
                format.name(),
                format.flag(&path.display().to_string())
            );
        }
        None if args.evaluate.is_none() => print!("{text}"),
        None => {}
    }
    if args.data {
        eprintln!(
            "coldstart: {} hot data objects written after the functions",
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
    Ok(crate::exit::SUCCESS)
}

/// Warns when a profile names the module being ordered by another build-id than the file's
/// (`--binary`, else the file at the profiled path): the order is by names, which another
/// build may have moved, renamed or dropped.
fn warn_another_build(
    workloads: &[Workload],
    binary: Option<&Binary>,
    binary_path: Option<&std::path::Path>,
    module: Option<&str>,
) {
    let mut warned = std::collections::HashSet::new();
    for w in workloads {
        let Ok(m) = find_module(&w.modules, binary_path, module) else { continue };
        let Some(want) = m.build_id.as_deref() else { continue };
        let (path, have) = match binary {
            Some(b) => (binary_path.unwrap_or(&m.path).to_path_buf(), b.info.build_id_hex()),
            None => match Binary::open(&m.path) {
                Ok(b) => (m.path.clone(), b.info.build_id_hex()),
                Err(_) => continue,
            },
        };
        if let Some(have) = have.filter(|h| h != want) {
            if warned.insert((path.clone(), want.to_owned())) {
                eprintln!(
                    "coldstart: warning: the profile `{}` was recorded from another build of {} (build-id {want}; this one is {have}): functions it names may have moved, been renamed or gone; profile this build again",
                    w.name,
                    path.display()
                );
            }
        }
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
        "{:<12} {:>8} {:>8} {:>11}  fault curve (each tenth of start-up)",
        "layout", "pages", "faults", "pages read"
    );
    for r in &e.rows {
        let curve = r.cost.curve.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
        println!(
            "{:<12} {:>8} {:>8} {:>11}  {curve}",
            r.layout, r.cost.pages_touched, r.cost.faults, r.cost.pages_read
        );
    }
    if e.unknown_functions > 0 {
        println!(
            "({} held-out functions are not in the binary and are not counted)",
            e.unknown_functions
        );
    }
    println!("best algorithm: {}", e.best.name());
}
