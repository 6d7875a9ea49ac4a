//! `coldstart report`: one self-contained HTML page (SVG charts, style and script inline,
//! nothing fetched) of the result files given, and their figures in CSV files beside it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use coldstart_report::{Inputs, Options};

use crate::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "Inputs, recognised by their contents:\n  \
    measure --export-json    start-up in each cache state (the paper's Figure 5)\n  \
    profile -o               page maps of each binary (functions), of each file (--pages)\n  \
    order --evaluate --json  faults and pages of each layout\n  \
    timeline -o              where one start-up's time went\n  \
    experiment -o            Figures 3 and 4, the model against the measurement, auto\n\n\
    Examples:\n  coldstart report measure.json profile-a.json -o report.html\n  \
    coldstart report /var/tmp/coldstart-demo/*.json -o /var/tmp/coldstart-demo/report.html")]
pub struct Args {
    /// Result files: measure, profile, order --evaluate, timeline and experiment JSON.
    #[arg(required = true, value_name = "RESULTS")]
    pub inputs: Vec<PathBuf>,
    /// The HTML file to write; each table goes to OUTPUT-STEM-NAME.csv beside it.
    #[arg(short, long, value_name = "FILE", default_value = "report.html")]
    pub output: PathBuf,
    /// The page's title.
    #[arg(long, default_value = "coldstart report")]
    pub title: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    coldstart_fs::check_writable(&args.output)
        .with_context(|| format!("cannot write -o {}", args.output.display()))
        .map_err(|e| exit::usage(format!("{e:#}: choose another -o")))?;
    let inputs = Inputs::load(&args.inputs)?;
    let when = coldstart_units::now_unix();
    let options = Options {
        title: args.title,
        subtitle: format!(
            "coldstart {} on {}, from {} result file(s)",
            env!("CARGO_PKG_VERSION"),
            hostname(),
            inputs.sources.len(),
        ),
        made_unix: Some(when),
    };
    let report = coldstart_report::render(&inputs, &options);
    let written = coldstart_report::write(&report, &args.output)?;
    for s in &report.sections {
        println!("  {s}");
    }
    for (value, caption) in &report.highlights {
        println!("  {value}: {caption}");
    }
    println!("{}", written[0].display());
    if written.len() > 1 {
        println!("  and {} CSV file(s) beside it", written.len() - 1);
    }
    Ok(exit::SUCCESS)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}
