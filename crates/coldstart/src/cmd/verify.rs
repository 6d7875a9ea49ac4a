//! `coldstart verify`: did the order take effect in this binary? Exit 1 if not.

use std::path::PathBuf;
use std::process::ExitCode;

use coldstart_layout::verify::{expected_names, Expected};

use super::common::check_layout;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  coldstart verify build/myprog --order order.txt\n  \
    coldstart verify build/myprog --profile p.json --json")]
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
    #[arg(long, default_value = "4k", value_parser = coldstart_units::size_in(512, 1 << 30))]
    pub page_size: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.page_size == 0 {
        return Err(crate::exit::usage("--page-size must be more than 0"));
    }
    let from = match (&args.order, &args.profile) {
        (Some(order), _) => Expected::OrderFile(order),
        (None, Some(path)) => Expected::Profile { path, module: args.module.as_deref() },
        (None, None) => return Err(crate::exit::usage("give --profile or --order")),
    };
    let expected = expected_names(from, &args.binary)?;
    check_layout(&args.binary, &expected, args.page_size, args.json)
}
