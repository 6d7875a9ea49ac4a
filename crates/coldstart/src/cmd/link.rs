//! `coldstart link`: run the user's own build with function sections and lld with the
//! order file injected, then verify the result.

use std::path::PathBuf;
use std::process::ExitCode;

use coldstart_layout::drivers::prepare_build;
use coldstart_layout::verify::{expected_names, Expected};

use super::common::{check_layout, order_names_defined};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  coldstart link --order order.txt --binary build/myprog -- make -B -C build\n  \
    coldstart link --order order.txt --binary target/release/myprog -- cargo build --release\n  \
    coldstart link --order order.txt --no-pack-relocs --binary myprog -- clang-19 -O2 -o myprog main.c"
)]
pub struct Args {
    /// The order file (lld format: `coldstart order --format lld`).
    #[arg(long)]
    pub order: PathBuf,
    /// A binary the build produces, to verify after it (skipped without it); repeat it for
    /// each module the order covers (the executable and its own libraries).
    #[arg(long)]
    pub binary: Vec<PathBuf>,
    /// Verify against this profile instead of the order file.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Pack relative relocations (`-z pack-relative-relocs`, DT_RELR): a PIE's loader then
    /// reads a few bytes per page of pointers instead of 24 bytes per pointer. The default
    /// where this machine's C library supports it (glibc 2.36+).
    #[arg(long, conflicts_with = "no_pack_relocs")]
    pub pack_relocs: bool,
    /// Leave relative relocations as they are (for a C library older than glibc 2.36 on the
    /// machines the program runs on).
    #[arg(long)]
    pub no_pack_relocs: bool,
    /// The build command: make, cmake --build, a compiler line, cargo build, ...
    #[arg(last = true, required = true)]
    pub build: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let asked = if args.pack_relocs {
        Some(true)
    } else if args.no_pack_relocs {
        Some(false)
    } else {
        None
    };
    let (pack, why) = coldstart_layout::drivers::pack_relocs(asked);
    let extra: Vec<String> =
        if pack { vec!["-Wl,-z,pack-relative-relocs".to_owned()] } else { vec![] };
    if asked.is_none() {
        eprintln!(
            "coldstart: {} relative relocations: {why}{}",
            if pack { "packing" } else { "not packing" },
            if pack { " (--no-pack-relocs for older C libraries)" } else { "" }
        );
    }
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
    if args.binary.is_empty() {
        eprintln!("coldstart: built; pass --binary OUT to verify the layout (or run `coldstart verify OUT --order {}`)", args.order.display());
        return Ok(crate::exit::SUCCESS);
    }
    let mut code = crate::exit::SUCCESS;
    for binary in &args.binary {
        let expected = match &args.profile {
            Some(path) => expected_names(Expected::Profile { path, module: None }, binary)?,
            // One order file may serve every module of the build: check the names this
            // binary defines (with --profile, every name of its module counts, missing ones
            // included).
            None => order_names_defined(&args.order, binary)?,
        };
        let c = check_layout(binary, &expected, 4096, false)?;
        if c != crate::exit::SUCCESS {
            code = c;
        }
    }
    Ok(code)
}
