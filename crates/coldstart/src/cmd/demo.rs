//! `coldstart demo`: the embedded default job.
//!
//! Builds the bundled sample program (a generated C program with two shared libraries of its
//! own, a dlopen'ed plugin and data files, whose start-up behaves like a large program's) and
//! runs the pipeline on it, one step after another, each step the same code path as its own
//! subcommand:
//!
//! 1. `coldstart sample`: generate and build (reused when an identical build is there).
//! 2. `coldstart measure --cache cold,selective,warm,hot`: start-up in every verified cache
//!    state, and the I/O share (cold minus hot).
//!
//! Everything it writes lands in one directory (`--dir`), so a user can open the JSON and
//! rerun any step by hand with the commands it prints.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use coldstart_sample::{Config, Size};

use crate::cmd::measure;
use crate::exit;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Size of the sample program: small, medium or bench (20,000+ functions, 40+ MiB of code;
    /// minutes to build).
    #[arg(long, default_value = "medium", value_parser = ["small", "medium", "bench"])]
    pub size: String,
    /// Where the sample program and the results go. Must be on a disk-backed file system:
    /// pages of tmpfs cannot be evicted, so cold start-up could not be measured there.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp/coldstart-demo")]
    pub dir: PathBuf,
    /// Measured runs per cache state.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub runs: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.runs == 0 {
        return Err(exit::usage("--runs must be at least 1"));
    }
    let size = Size::parse(&args.size).map_err(|e| exit::usage(e.to_string()))?;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create --dir {}", args.dir.display()))?;
    if is_tmpfs(&args.dir) {
        return Err(exit::usage(format!(
            "--dir {} is on tmpfs, whose pages cannot be evicted: give a directory on a disk, \
             e.g. --dir /var/tmp/coldstart-demo",
            args.dir.display()
        )));
    }
    let sample_dir = args.dir.join(format!("sample-{}", args.size));

    println!("== 1. sample program ({} size) in {}", args.size, sample_dir.display());
    let config = Config::for_size(size, 1);
    let sample = coldstart_sample::build_cached(&config, &sample_dir)
        .with_context(|| format!("cannot build the sample program in {}", sample_dir.display()))?;
    let workload = sample.workload("a").context("the sample program has no workload `a`")?;
    let mut command = vec![sample.exe().to_string_lossy().into_owned()];
    command.extend(workload.args.iter().cloned());
    println!(
        "   {} functions, {:.1} MiB of code; workload a enters {} of them at start-up",
        sample.functions.len(),
        sample.text_bytes() as f64 / (1 << 20) as f64,
        workload.startup.len(),
    );

    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let caches = if root { "cold,selective,warm,hot" } else { "selective,warm,hot" };
    let json = args.dir.join("measure.json");
    println!("\n== 2. start-up in each cache state");
    println!(
        "   coldstart measure --cache {caches} --runs {} --export-json {} -- {}",
        args.runs,
        json.display(),
        command.join(" ")
    );
    if !root {
        println!("   (not root: `cold` needs root to drop the page cache; skipped)");
    }
    println!();
    let code = measure::run(measure::Args {
        cache: caches.to_string(),
        ready: "exit".to_string(),
        runs: args.runs,
        warmup: 1,
        timeout: 60.0,
        export_json: Some(json.clone()),
        export_csv: None,
        export_markdown: None,
        compare: false,
        command,
    })?;
    println!("\nResults: {}", json.display());
    Ok(code)
}

/// Whether `dir` lives on tmpfs or ramfs (whose pages can never be evicted).
fn is_tmpfs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a zeroed out-struct.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    matches!(st.f_type as i64, TMPFS_MAGIC | RAMFS_MAGIC)
}
