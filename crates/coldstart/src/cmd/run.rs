//! `coldstart run`: mount a bundle in a temporary directory, run a command from it, unmount,
//! and report what the network did.
//!
//! The command refers to the mounted tree through `{root}`, replaced in every argument by the
//! mount point (`coldstart run URL -- {root}/bin/app --flag`); it also runs with the mount
//! point as its working directory and `COLDSTART_ROOT` set to it.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::common::network::{block_signals, mount_error, print_report, wait_signal, MountFlags};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bundle: `http://HOST[:PORT]/PATH/` (as printed by `coldstart serve`) or a directory.
    pub url: String,
    #[command(flatten)]
    pub flags: MountFlags,
    /// The command; `{root}` in any argument is replaced by the mount point.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = args.flags.options()?;
    let signals = block_signals();
    let tmp = tempfile::Builder::new()
        .prefix("coldstart-run-")
        .tempdir()
        .context("cannot create a temporary mount point")?;
    let root = tmp.path().join("root");
    std::fs::create_dir(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let mount =
        coldstart_lazyfs::mount(&args.url, &root, opts).map_err(|e| mount_error(&root, e))?;
    if let Some(c) = mount.choice() {
        eprintln!("coldstart: {}", c.summary());
    }
    let root_str = root.to_str().context("the temporary directory's path is not UTF-8")?;
    let argv: Vec<String> = args.command.iter().map(|a| a.replace("{root}", root_str)).collect();
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).current_dir(&root).env("COLDSTART_ROOT", &root);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    let status = match spawned {
        Ok(mut child) => {
            // Forward SIGINT, SIGTERM and SIGHUP to the command; we unmount once it is gone.
            let pid = child.id() as i32;
            let done = Arc::new(AtomicBool::new(false));
            let got = Arc::new(AtomicI32::new(0));
            let forward = {
                let (done, got) = (done.clone(), got.clone());
                std::thread::spawn(move || {
                    while !done.load(Ordering::SeqCst) {
                        if let Some(s) = wait_signal(&signals, Duration::from_millis(10)) {
                            got.store(s, Ordering::SeqCst);
                            // SAFETY: signalling our own child.
                            unsafe { libc::kill(pid, s) };
                        }
                    }
                })
            };
            let status = child.wait();
            done.store(true, Ordering::SeqCst);
            let _ = forward.join();
            Some(status.with_context(|| format!("cannot wait for {}", argv[0]))?)
        }
        Err(e) => {
            eprintln!("coldstart: cannot start {}: {e}", argv[0]);
            None
        }
    };
    let report = mount.unmount()?;
    print_report(&report, args.flags.json)?;
    if report.errors > 0 {
        eprintln!(
            "coldstart: {} reads failed with EIO; last: {}",
            report.errors,
            report.last_error.as_deref().unwrap_or("unknown")
        );
    }
    let Some(status) = status else {
        return Err(crate::exit::usage(format!(
            "cannot run `{}` from the bundle: check the path (use {{root}}/...)",
            argv[0]
        )));
    };
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    if code != 0 {
        eprintln!("coldstart: `{}` failed: {status}", argv.join(" "));
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}
