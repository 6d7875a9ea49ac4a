//! `coldstart mount`: a bundle as a read-only file system until Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use coldstart_lazyfs::is_mount_point;

use super::common::network::{block_signals, mount_error, print_report, wait_signal, MountFlags};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bundle: `http://HOST[:PORT]/PATH/` (as printed by `coldstart serve`) or a directory.
    pub url: String,
    /// An empty directory to mount on.
    pub dir: PathBuf,
    #[command(flatten)]
    pub flags: MountFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = args.flags.options()?;
    let signals = block_signals();
    let mount = coldstart_lazyfs::mount(&args.url, &args.dir, opts)
        .map_err(|e| mount_error(&args.dir, e))?;
    if let Some(c) = mount.choice() {
        eprintln!("coldstart: {}", c.summary());
    }
    let strategy = mount.choice().map_or(args.flags.strategy.to_string(), |c| c.chosen.to_string());
    eprintln!(
        "coldstart: mounted {} on {} ({strategy}); Ctrl-C to unmount",
        args.url,
        args.dir.display(),
    );
    // Until a signal, or until someone else unmounts it.
    while wait_signal(&signals, Duration::from_millis(500)).is_none() {
        if !is_mount_point(&args.dir) {
            break;
        }
    }
    let report = mount.unmount()?;
    print_report(&report, args.flags.json)?;
    Ok(crate::exit::SUCCESS)
}
