//! `coldstart verify`: did the order take effect in this binary? Exit 1 if not.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use coldstart_layout::binary::Binary;
use coldstart_layout::input::Workload;
use coldstart_layout::model::PageModel;
use coldstart_layout::verify::{parse_order_file, verify, Verification};

use super::common::{parse_size, preview};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The linked or rewritten binary.
    pub binary: PathBuf,
    /// The profile the order was made from (its first-touch order is expected).
    #[arg(long, conflicts_with = "order", required_unless_present = "order")]
    pub profile: Option<PathBuf>,
    /// Or the order file itself (any format coldstart writes).
    #[arg(long)]
    pub order: Option<PathBuf>,
    /// The module of the profile (default: the one named like BINARY).
    #[arg(long)]
    pub module: Option<String>,
    /// Page size of the span figures (4k, 16k, 64k).
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    pub page_size: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The expected names: from an order file, or from a profile's module.
pub fn expected_names(
    profile: Option<&Path>,
    order: Option<&Path>,
    binary: &Path,
    module: Option<&str>,
) -> anyhow::Result<Vec<String>> {
    if let Some(o) = order {
        let text = std::fs::read_to_string(o).map_err(|e| {
            crate::exit::usage(format!("cannot read order file {}: {e}", o.display()))
        })?;
        return Ok(parse_order_file(&text));
    }
    let p = profile.ok_or_else(|| crate::exit::usage("give --profile or --order"))?;
    let ws = Workload::read_profile(p)?;
    let w =
        ws.first().ok_or_else(|| crate::exit::usage(format!("{} has no workload", p.display())))?;
    let m = w.module(Some(binary), module)?;
    Ok(m.functions.iter().map(|t| t.name().to_owned()).collect())
}

/// Verify and print; the exit code says whether the order took effect.
pub fn check(
    binary: &Path,
    expected: &[String],
    page_size: u64,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let b = Binary::open(binary)?;
    let v = verify(&b, expected, PageModel { page_size, readahead: 0, ..PageModel::default() });
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", render(binary, &v));
    }
    Ok(if v.took_effect {
        crate::exit::SUCCESS
    } else {
        ExitCode::from(crate::exit::FAILURE_FOUND)
    })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.page_size == 0 {
        return Err(crate::exit::usage("--page-size must be more than 0"));
    }
    let expected = expected_names(
        args.profile.as_deref(),
        args.order.as_deref(),
        &args.binary,
        args.module.as_deref(),
    )?;
    check(&args.binary, &expected, args.page_size, args.json)
}

fn render(binary: &Path, v: &Verification) -> String {
    let mut out = format!(
        "{}: {} of {} ordered functions placed; they span {} pages (ideal {}); {} of {} neighbours in order\n",
        binary.display(),
        v.placed,
        v.expected,
        v.span_pages,
        v.ideal_pages,
        v.in_order_pairs,
        v.pairs
    );
    if !v.missing.is_empty() {
        out.push_str(&format!(
            "  not placed (missing: inlined, renamed or removed): {}\n",
            preview(&v.missing)
        ));
    }
    for group in &v.folded {
        out.push_str(&format!("  folded into one body: {}\n", group.join(", ")));
    }
    match &v.reason {
        None => out.push_str("  the order took effect\n"),
        Some(r) => out.push_str(&format!("  the order did NOT take effect: {r}\n")),
    }
    out
}
