//! `coldstart analyze`: whether a binary's layout costs its start-up (the paper's Tables 2
//! and 3, a per-section breakdown, and what is missing to fix it).

use std::path::PathBuf;
use std::process::ExitCode;

use coldstart_layout::analyze::{analyze, Analysis, Utilization};
use coldstart_layout::binary::Binary;
use coldstart_layout::input::Workload;
use coldstart_layout::model::{PageModel, ReadAround};

use super::common::PageModelArgs;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  coldstart analyze /usr/bin/python3.11\n  \
    coldstart profile -o p.json -- ./myprog --version && coldstart analyze ./myprog --profile p.json\n  \
    coldstart analyze --profile p.json --readahead 128k --read-around forward\n  \
    coldstart analyze ./myprog --profile p.json --json > analysis.json")]
pub struct Args {
    /// The executable or shared library to analyse (without: every module of the profile
    /// that start-up called into, the executable and each of its libraries).
    #[arg(required_unless_present = "profile")]
    pub binary: Option<PathBuf>,
    /// A profile of a start-up of it (without: the static picture only).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// The module of the profile to use (default: the one named like BINARY).
    #[arg(long)]
    pub module: Option<String>,
    #[command(flatten)]
    pub page_model: PageModelArgs,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let model = args.page_model.model()?;
    let workload =
        match &args.profile {
            Some(p) => {
                let ws = Workload::read_profile(p)?;
                Some(ws.into_iter().next().ok_or_else(|| {
                    crate::exit::usage(format!("{} has no workload", p.display()))
                })?)
            }
            None => None,
        };
    let targets: Vec<(PathBuf, Option<String>)> = match (&args.binary, &workload) {
        (Some(b), _) => vec![(b.clone(), args.module.clone())],
        (None, Some(w)) => w
            .modules
            .iter()
            .filter(|m| m.path.is_file() && !m.functions.is_empty())
            .map(|m| (m.path.clone(), Some(m.path.display().to_string())))
            .collect(),
        (None, None) => return Err(crate::exit::usage("give a BINARY or --profile")),
    };
    let mut analyses = Vec::new();
    for (path, module) in targets {
        let binary = Binary::open(&path)?;
        analyses.push(analyze(&binary, workload.as_ref(), module.as_deref(), model)?);
    }
    if args.json {
        if args.binary.is_some() {
            println!("{}", serde_json::to_string_pretty(&analyses[0])?);
        } else {
            println!("{}", serde_json::to_string_pretty(&analyses)?);
        }
    } else {
        let text: Vec<String> = analyses.iter().map(render).collect();
        print!("{}", text.join("\n"));
    }
    Ok(crate::exit::SUCCESS)
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// The tables, as text.
pub fn render(a: &Analysis) -> String {
    let mut out = static_table(a);
    if let Some(u) = &a.utilization {
        out.push_str(&utilization_table(u, &a.model));
    }
    out.push_str(&sections_table(a));
    out.push_str(&notes(a));
    out
}

/// The binary's path, then what it is without a profile: its size, code, functions,
/// relocations and build-id.
fn static_table(a: &Analysis) -> String {
    let s = &a.static_picture;
    let mut out = format!("{}\n", s.path);
    let rows: Vec<(&str, String)> = vec![
        ("file size", coldstart_units::bytes(s.file_bytes)),
        ("position independent", yes(s.position_independent)),
        (
            "code",
            format!(
                "{} in {} of {}",
                coldstart_units::bytes(s.code_bytes),
                coldstart_units::count(s.code_pages, "page"),
                coldstart_units::bytes(a.model.page_size)
            ),
        ),
        ("functions", format!("{} (symbols from {})", s.functions, s.symbols)),
        ("functions in own sections", s.function_sections.clone()),
        ("static relocations kept", yes(s.relocations_kept)),
        (
            ".rela.dyn",
            format!(
                "{} ({}, {} relative)",
                coldstart_units::bytes(s.rela_dyn_bytes),
                coldstart_units::count(s.rela_dyn_entries, "entry"),
                s.rela_dyn_relative
            ),
        ),
        ("DT_RELR (.relr.dyn)", yes(s.relr)),
        ("build-id", s.build_id.clone().unwrap_or_else(|| "none".into())),
    ];
    for (k, v) in rows {
        out.push_str(&format!("  {k:<27} {v}\n"));
    }
    out
}

/// How a profiled start-up uses the code pages under the page model `model`: pages touched,
/// utilization, the file's bytes by use, and the current layout against the ideal one.
fn utilization_table(u: &Utilization, model: &PageModel) -> String {
    let mut out = format!(
        "\nstart-up `{}` (page size {} KiB, read-ahead {} KiB{})\n",
        u.workload,
        model.page_size / 1024,
        model.readahead / 1024,
        if model.read_around == ReadAround::Forward { " forward" } else { "" }
    );
    out.push_str(&format!(
        "  {:<12} {:>8} {:>16} {:>12} {:>12} {:>12}\n",
        "code pages", "total", "touched (share)", "utilization", "used code", "unused code"
    ));
    out.push_str(&format!(
        "  {:<12} {:>8} {:>16} {:>12} {:>12} {:>12}\n",
        "",
        u.code_pages_total,
        format!("{} ({})", u.code_pages_touched, pct(u.touched_share)),
        pct(u.utilization),
        coldstart_units::bytes(u.used_code_bytes),
        coldstart_units::bytes(u.unused_code_bytes)
    ));
    let file = (u.non_code_bytes + u.used_code_bytes + u.unused_code_bytes).max(1) as f64;
    let share = |b: u64| format!("{} ({})", coldstart_units::bytes(b), pct(b as f64 / file));
    out.push_str(&format!(
        "  {:<12} {:>16} {:>16} {:>16}\n",
        "file bytes", "non-code", "used code", "unused code"
    ));
    out.push_str(&format!(
        "  {:<12} {:>16} {:>16} {:>16}\n",
        "",
        share(u.non_code_bytes),
        share(u.used_code_bytes),
        share(u.unused_code_bytes)
    ));
    out.push_str(&format!(
        "  {:<12} {:>8} {:>8} {:>11}\n",
        "layout", "pages", "faults", "pages read"
    ));
    for (name, c) in [("current", &u.current), ("ideal", &u.ideal)] {
        out.push_str(&format!(
            "  {:<12} {:>8} {:>8} {:>11}\n",
            name, c.pages_touched, c.faults, c.pages_read
        ));
    }
    out
}

/// The pages of the file start-up faulted on, by section, with the remedy for each; then
/// how many of them a linker order can move.
fn sections_table(a: &Analysis) -> String {
    let mut out = String::new();
    if !a.sections.is_empty() {
        out.push_str("\npages of the file start-up faulted on and had in memory, by section (4 KiB file pages)\n");
        out.push_str(&format!(
            "  {:<12} {:>8} {:>8} {:>9} {:>9}  remedy\n",
            "section", "in file", "faulted", "in memory", "saving"
        ));
        for r in &a.sections {
            out.push_str(&format!(
                "  {:<12} {:>8} {:>8} {:>9} {:>9}  {}\n",
                r.class.name(),
                r.pages_in_file,
                r.pages_faulted,
                r.pages_read,
                r.predicted_saving,
                r.remedy
            ));
        }
    }
    if let Some(m) = &a.movable {
        out.push_str(&format!(
            "  what a linker order can move: {} (code {}, named data objects {}); {} it cannot (unnamed constants, relocations, unwind tables, headers)\n",
            coldstart_units::count(m.movable(), "page"),
            m.code,
            m.named_data,
            m.fixed
        ));
    }
    out
}

/// What is missing to optimise the layout (a profile, when none was given), and the
/// warnings.
fn notes(a: &Analysis) -> String {
    let s = &a.static_picture;
    let mut out = String::new();
    if a.utilization.is_none() && !s.missing.is_empty() {
        out.push_str("\nmissing to optimise the layout:\n");
    } else if !s.missing.is_empty() {
        out.push_str("\nnotes:\n");
    }
    for m in &s.missing {
        out.push_str(&format!("  - {m}\n"));
    }
    if a.utilization.is_none() {
        out.push_str("  - a profile: run `coldstart profile -o P -- PROGRAM` and `coldstart analyze BINARY --profile P`\n");
    }
    for w in &a.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}
