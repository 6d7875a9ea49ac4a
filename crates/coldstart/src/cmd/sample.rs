//! `coldstart sample`: generate and build the sample program.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use coldstart_sample::{Config, Size};

/// Generate and build the sample program and its truth manifest (sample.json).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  coldstart sample -o /var/tmp/sample\n  \
    coldstart sample --size medium --seed 2 -o /var/tmp/sample-medium")]
pub struct Args {
    /// Size preset: small (tests), medium, bench (20,000+ functions, 40+ MiB of code).
    #[arg(long, default_value = "small", value_parser = ["small", "medium", "bench"])]
    size: String,
    /// Seed of every random choice; the same seed gives the same sources.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Number of work functions (overrides the preset).
    #[arg(long, value_parser = coldstart_units::count_in::<usize>(40, 1_000_000))]
    functions: Option<usize>,
    /// Statements per function body (overrides the preset).
    #[arg(long, value_parser = coldstart_units::count_in::<usize>(1, 10_000))]
    body: Option<usize>,
    /// Share of a workload's start-up functions the other workload also runs (0.7-0.9 typical).
    #[arg(long, value_parser = coldstart_units::number_in(0.0, 1.0))]
    overlap: Option<f64>,
    /// Share of each module's functions a workload runs at start-up.
    #[arg(long, value_parser = coldstart_units::number_in(0.0, 0.5))]
    hot_fraction: Option<f64>,
    /// Functions only one workload runs come in runs of this many neighbours (1 = scattered).
    #[arg(long, value_parser = coldstart_units::count_in::<usize>(1, 1_000_000))]
    unique_run: Option<usize>,
    /// Output directory (created; replaced if it holds an earlier sample).
    #[arg(short, long)]
    output: PathBuf,
}

impl Args {
    fn to_config(&self) -> anyhow::Result<Config> {
        let size = Size::parse(&self.size).map_err(|e| crate::exit::usage(e.to_string()))?;
        let mut c = Config::for_size(size, self.seed);
        if let Some(n) = self.functions {
            c.functions = n;
        }
        if let Some(n) = self.body {
            c.body_statements = n;
        }
        if let Some(x) = self.overlap {
            c.overlap = x;
        }
        if let Some(x) = self.hot_fraction {
            c.hot_fraction = x;
        }
        if let Some(n) = self.unique_run {
            c.unique_run = n;
        }
        c.validate().map_err(|e| crate::exit::usage(e.to_string()))?;
        Ok(c)
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = args.to_config()?;
    let started = Instant::now();
    let sample = coldstart_sample::build(&config, &args.output)
        .with_context(|| format!("cannot build the sample program in {}", args.output.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    let hot: Vec<String> =
        sample.workloads.iter().map(|w| format!("{}={}", w.name, w.startup.len())).collect();
    let overlap = sample.overlap("a", "b").unwrap_or(0.0);
    println!(
        "sample: {} functions, {:.1} MiB code, start-up functions {}, overlap a/b {:.0}%, built in {:.1}s: {}",
        sample.functions.len(),
        sample.text_bytes() as f64 / (1024.0 * 1024.0),
        hot.join(" "),
        overlap * 100.0,
        seconds,
        args.output.display()
    );
    Ok(crate::exit::SUCCESS)
}
