//! `coldstart link`: run the user's own build with function sections and lld with the
//! order file injected, then verify the result.

use std::path::PathBuf;
use std::process::ExitCode;

use coldstart_layout::binary::Binary;
use coldstart_layout::drivers::prepare_build;
use coldstart_layout::verify::{expected_names, split_defined, Expected};

use super::common::check_layout;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  coldstart link --order order.txt --binary build/myprog -- make -B -C build\n  \
    coldstart link --order order.txt --binary target/release/myprog -- cargo build --release\n  \
    coldstart link --order order.txt --pack-relocs --binary myprog -- clang -O2 -o myprog main.c"
)]
pub struct Args {
    /// The order file (lld format: `coldstart order --format lld`).
    #[arg(long)]
    pub order: PathBuf,
    /// The binary the build produces, to verify after it (skipped without it).
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// Verify against this profile instead of the order file.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Also pack relative relocations (`-z pack-relative-relocs`, DT_RELR): a PIE's loader
    /// then reads a few bytes per page of pointers instead of 24 bytes per pointer.
    #[arg(long)]
    pub pack_relocs: bool,
    /// The build command: make, cmake --build, a compiler line, cargo build, ...
    #[arg(last = true, required = true)]
    pub build: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let extra: Vec<String> =
        if args.pack_relocs { vec!["-Wl,-z,pack-relative-relocs".to_owned()] } else { vec![] };
    let mut prepared = prepare_build(&args.build, &args.order, &extra)?;
    eprintln!(
        "coldstart: building with {} and {}",
        prepared.flags.compile.join(" "),
        prepared.flags.link.join(" ")
    );
    let status = prepared
        .command
        .status()
        .map_err(|e| crate::exit::usage(format!("cannot run `{}`: {e}", args.build[0])))?;
    if !status.success() {
        anyhow::bail!(
            "the build `{}` failed ({status}); its output is above",
            args.build.join(" ")
        );
    }
    let Some(binary) = &args.binary else {
        eprintln!("coldstart: built; pass --binary OUT to verify the layout (or run `coldstart verify OUT --order {}`)", args.order.display());
        return Ok(crate::exit::SUCCESS);
    };
    let expected = match &args.profile {
        Some(path) => expected_names(Expected::Profile { path, module: None }, binary)?,
        None => {
            // One order file may serve every module of the build: check the names this
            // binary defines (with --profile, every name of its module counts, missing ones
            // included).
            let names = expected_names(Expected::OrderFile(&args.order), binary)?;
            let (mine, other) = split_defined(&Binary::open(binary)?, names);
            if !other.is_empty() {
                eprintln!(
                    "coldstart: {} names of the order are not in {} (other modules of the build, or inlined); use --profile to count them",
                    other.len(),
                    binary.display()
                );
            }
            mine
        }
    };
    check_layout(binary, &expected, 4096, false)
}
