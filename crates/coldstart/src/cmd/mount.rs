//! `coldstart mount`: a bundle as a read-only file system until Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use coldstart_bundle::Cancel;
use coldstart_lazyfs::is_mount_point;

use super::common::network::{mount_with_bar, print_report, MountFlags};
use super::common::signals::{self, Signals};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  coldstart mount http://127.0.0.1:8080/ /mnt/app\n  \
    coldstart mount http://bundles.example/app/ /mnt/app --strategy paged --cache-dir /var/cache/coldstart\n  \
    coldstart mount s3://my-bundles/app /mnt/app --endpoint http://127.0.0.1:5000   (an S3-compatible store)")]
pub struct Args {
    /// The bundle: `http[s]://HOST[:PORT]/PATH/[?QUERY]` (as printed by `coldstart serve`; a
    /// query, such as a signed URL's, follows each file's path), `s3://BUCKET/PREFIX` (signed
    /// with the AWS credentials of the environment: docs/network.md) or a directory.
    pub url: String,
    /// An empty directory to mount on.
    pub dir: PathBuf,
    #[command(flatten)]
    pub flags: MountFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cancel = Cancel::new();
    let mut opts = args.flags.options(cancel.clone())?;
    opts.learn = super::common::learn::drawn(&args.flags);
    // A signal while mounting stops every fetch at once.
    let signals = Signals::start(cancel)?;
    let mount = match mount_with_bar(&args.url, &args.dir, opts, &signals, "nothing mounted")? {
        Ok(m) => m,
        Err(code) => return Ok(code),
    };
    signals.report_only();
    if let Some(c) = mount.choice() {
        eprintln!("coldstart: {}", c.summary());
    }
    let strategy = mount.choice().map_or(args.flags.strategy.to_string(), |c| c.chosen.to_string());
    eprintln!(
        "coldstart: mounted {} on {} ({strategy}); Ctrl-C to unmount",
        coldstart_bundle::remote::redact_url(&args.url),
        args.dir.display(),
    );
    // Until a signal (or one that came while mounting), or until someone else unmounts it.
    let mut signalled = signals.first().is_some();
    while !signalled {
        signalled = signals.next(Duration::from_millis(100)).is_some();
        if !is_mount_point(&args.dir) {
            break;
        }
    }
    if signalled {
        // Reads still waiting on the network fail now: the mount is going away.
        mount.cancel();
    }
    let learner = super::common::learn::learner(&mount);
    let (report, result) = mount.close();
    print_report(&report, args.flags.json)?;
    // A mount's start completed when it was unmounted with every read served.
    super::common::learn::write(&args.flags, learner, report.errors == 0 && result.is_ok());
    result?;
    // Unmounted on a signal: coldstart ends as the signal ends a command, with 128 + it.
    Ok(match signals.first() {
        Some(s) => signals::exit_code(s),
        None => crate::exit::SUCCESS,
    })
}
