//! `coldstart link`: run the user's own build with function sections and lld with the
//! order file injected, then verify the result.

use std::path::PathBuf;
use std::process::ExitCode;

use coldstart_layout::drivers::prepare_build;
use coldstart_layout::lld::{linked_by, Linker, Lld};
use coldstart_layout::verify::{expected_names, Expected};

use super::common::{check_layout, order_names_defined};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  coldstart link --order order.txt --binary build/myprog -- make -B -C build\n  \
    coldstart link --order order.txt --binary target/release/myprog -- cargo build --release\n  \
    coldstart link --order order.txt --no-pack-relocs --binary myprog -- clang-19 -O2 -o myprog main.c\n  \
    coldstart link --lld 22 --compression-sort --order order.txt --binary build/myprog -- make -B -C build"
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
    /// The lld to link with: a major release (`22`: Debian's `ld.lld-22`) or the path of an
    /// ld.lld. Default: `ld.lld` on PATH, else the newest `/usr/lib/llvm-N/bin/ld.lld`. Each
    /// `--binary` is checked to have been linked by it.
    #[arg(long, value_name = "VERSION|PATH")]
    pub lld: Option<String>,
    /// Lay out what the order does not list for compression (lld 20+:
    /// `--bp-compression-sort=both`): the listed functions and data come first in the
    /// order's order, the rest so that similar bytes lie together, which a compressed bundle
    /// of the program stores in fewer bytes.
    #[arg(long)]
    pub compression_sort: bool,
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
    let lld = Lld::find(args.lld.as_deref())?;
    let mut extra: Vec<String> =
        if pack { vec!["-Wl,-z,pack-relative-relocs".to_owned()] } else { vec![] };
    if args.compression_sort {
        lld.require_compression_sort()?;
        extra.push("-Wl,--bp-compression-sort=both".to_owned());
    }
    if asked.is_none() {
        eprintln!(
            "coldstart: {} relative relocations: {why}{}",
            if pack { "packing" } else { "not packing" },
            if pack { " (--no-pack-relocs for older C libraries)" } else { "" }
        );
    }
    let mut prepared = prepare_build(&args.build, &args.order, &lld, &extra)?;
    eprintln!(
        "coldstart: building with {} and {} (lld {}, {})",
        prepared.flags.compile.join(" "),
        prepared.flags.all_link().join(" "),
        lld.version_string(),
        lld.path.display()
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
        // A build can bypass the wrappers (a linker named in its own flags, a compiler called by
        // absolute path): the binary's .comment says which linker made it.
        let found = match linked_by(binary)? {
            Linker::Lld(v) if v == lld.version => None,
            Linker::Lld(v) => Some(format!("by lld {}.{}.{}", v.0, v.1, v.2)),
            Linker::Other => Some("by another linker than lld".to_owned()),
            Linker::Unknown => {
                eprintln!(
                    "coldstart: {} has no .comment section to tell which linker made it",
                    binary.display()
                );
                None
            }
        };
        if let Some(found) = found {
            eprintln!(
                "coldstart: {} was linked {found}, not by lld {} ({}): the build chose its own linker; let it link through the compiler driver (cc, clang) without a -fuse-ld or -B of its own",
                binary.display(),
                lld.version_string(),
                lld.path.display()
            );
            code = ExitCode::from(crate::exit::FAILURE_FOUND);
        }
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
