//! `coldstart bolt`: rewrite a linked binary (with `--emit-relocs`) in coldstart's order
//! through llvm-bolt, then verify the result.

use std::path::PathBuf;
use std::process::ExitCode;

use coldstart_layout::binary::Binary;
use coldstart_layout::verify::parse_order_file;

#[derive(Debug, clap::Args)]
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
    let text = std::fs::read_to_string(&args.order).map_err(|e| {
        crate::exit::usage(format!("cannot read order file {}: {e}", args.order.display()))
    })?;
    let names = parse_order_file(&text);
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
    super::verify::check(&args.output, &names, 4096, false)
}
