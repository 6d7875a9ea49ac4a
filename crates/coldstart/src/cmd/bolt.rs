//! `coldstart bolt`: rewrite a linked binary (with `--emit-relocs`) in coldstart's order
//! through llvm-bolt, then verify the result.

use std::path::PathBuf;
use std::process::ExitCode;

use coldstart_layout::binary::Binary;
use coldstart_layout::verify::{expected_names, Expected};

use super::common::check_layout;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  coldstart order p.json --format bolt -o order.txt\n  \
    coldstart bolt ./myprog --order order.txt -o ./myprog.bolt   (myprog linked with -Wl,--emit-relocs)")]
pub struct Args {
    /// The binary to rewrite (linked with -Wl,--emit-relocs).
    pub binary: PathBuf,
    /// The order file (any coldstart format; written for BOLT as one name per line).
    #[arg(long)]
    pub order: PathBuf,
    /// The rewritten binary.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Show BOLT's own output.
    #[arg(long)]
    pub verbose: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let b = Binary::open(&args.binary)?;
    let names = expected_names(Expected::OrderFile(&args.order), &args.binary)?;
    if names.is_empty() {
        return Err(crate::exit::usage(format!(
            "order file {} has no function names: nothing to order (write it with `coldstart order`)",
            args.order.display()
        )));
    }
    // BOLT takes every line as a name: give it a clean list whatever format came in.
    let list = tempfile::NamedTempFile::new()?;
    std::fs::write(list.path(), names.join("\n") + "\n")?;
    let log = coldstart_layout::drivers::bolt(
        &args.binary,
        list.path(),
        &args.output,
        b.info.has_emitted_relocations,
    )?;
    if args.verbose {
        eprint!("{log}");
    }
    eprintln!("coldstart: wrote {}", args.output.display());
    check_layout(&args.output, &names, 4096, false)
}
