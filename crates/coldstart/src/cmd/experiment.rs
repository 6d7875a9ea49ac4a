//! `coldstart experiment`: the paper's grid run for real (links x strategies x cache states, N
//! starts of a held-out workload each), every start measured beside `predict`'s figure. The
//! grid, its defaults and the order of its steps are `coldstart_experiment`'s; this module
//! parses, draws the progress bar (on a terminal only) and prints the table.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use coldstart_bundle::Cancel;
use coldstart_experiment::{
    CacheState, ExperimentError, ExperimentOptions, GridLink, GridStrategy, Progress,
};
use coldstart_formats::Experiment;

use super::common::network::parse_readahead;
use super::common::signals::{self, Signals};
use crate::exit;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The program's directory is packed into a bundle and served over each link \
    (as `pack`, `serve --link`, `run` and `predict` do); the hot set is recorded from the \
    --profiled command, the measured command is held out.\n\n\
    Examples:\n  coldstart experiment /var/tmp/app -o exp.json --link 20mbit/40ms --profiled 'bin/app a' -- bin/app b\n  \
    coldstart experiment DIR -o grid.json --link 1mbit/50ms --link 20mbit/40ms --strategy \
    original,stream,auto --cache cold --runs 5 -- bin/app\n  \
    (then: coldstart report exp.json -o report.html)"
)]
pub struct Args {
    /// The program's directory: every file under it goes into the bundle.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The result file (format coldstart-experiment), written after every cell; if it holds
    /// part of this experiment already, only the missing cells are measured.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// A link, e.g. 1mbit/50ms, or 56kbit/200ms:1 with its own number of starts per cell
    /// (repeat, or separate with commas) [default: 56kbit, 256kbit,
    /// 1mbit and 3mbit at 10, 50 and 200 ms; 20mbit/40ms; 100mbit/5ms: the paper's grid, hours
    /// for a program of megabytes, whose download alone takes 2.5 minutes a megabyte at 56kbit].
    #[arg(long = "link", value_name = "BW/LAT", value_delimiter = ',')]
    pub links: Vec<String>,
    /// Strategies: original, paged, reordered-paged, reordered, stream, auto, and auto-hint
    /// (auto told the link instead of measuring it) (repeat, or separate with commas)
    /// [default: all of them but auto-hint].
    #[arg(long = "strategy", value_name = "S", value_delimiter = ',')]
    pub strategies: Vec<GridStrategy>,
    /// Cache states: cold (the server's copy evicted) and warm-remote (in the server's page
    /// cache); the local chunk cache is empty in both [default: both].
    #[arg(long = "cache", value_name = "C", value_delimiter = ',')]
    pub caches: Vec<String>,
    /// Starts per cell.
    #[arg(long, default_value_t = coldstart_experiment::DEFAULT_RUNS, value_parser = coldstart_units::count_in::<u32>(1, coldstart_experiment::MAX_RUNS))]
    pub runs: u32,
    /// The command whose reads are the hot set, relative to DIR, as one string split as a shell
    /// would (white space; '...', "..." and \ quote) [default: the measured command, which is
    /// then not held out].
    #[arg(long, value_name = "CMD")]
    pub profiled: Option<String>,
    /// Bytes per chunk of the bundle [default: as `pack`].
    #[arg(long, value_parser = coldstart_units::size_in(1, coldstart_bundle::manifest::MAX_CHUNK_SIZE))]
    pub chunk_size: Option<u64>,
    /// The mount's read-ahead, as `mount --readahead`; by default the mount chooses.
    #[arg(long, value_parser = parse_readahead)]
    pub readahead: Option<u32>,
    /// Where the work directory goes: a new directory in it holds the bundles, chunk caches and
    /// mount points and is removed at the end [default: beside -o].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Measure nothing: predict the cells -o holds again with the model as it is now (each
    /// link and cache state from the miss history of the runs measured before it), and
    /// rewrite the file.
    #[arg(long)]
    pub repredict: bool,
    /// Predict each link a second time with the link measured by `predict` (two probe
    /// requests per link and cache state) besides the link given.
    #[arg(long)]
    pub predict_measured_link: bool,
    /// The measured command, its program relative to DIR.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The bar: estimated seconds of work done out of all, with the time left; without a terminal,
/// a line per step and run.
struct Bar(Option<indicatif::ProgressBar>, super::common::Steps);

impl Progress for Bar {
    fn start(&mut self, total_s: f64, done_s: f64) {
        if let Some(b) = &self.0 {
            b.set_length((total_s * 1e3) as u64);
            b.set_position((done_s * 1e3) as u64);
            b.reset_eta();
            b.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
    }
    fn message(&mut self, text: &str) {
        self.1.say(text);
        if let Some(b) = &self.0 {
            b.set_message(text.to_owned());
        }
    }
    fn advance(&mut self, estimate_s: f64) {
        if let Some(b) = &self.0 {
            b.inc((estimate_s * 1e3) as u64);
        }
    }
}

fn options(args: &Args, cancel: Cancel, work: PathBuf) -> anyhow::Result<ExperimentOptions> {
    let links: Vec<GridLink> = if args.links.is_empty() {
        coldstart_experiment::default_links()
    } else {
        args.links
            .iter()
            .map(|l| {
                coldstart_experiment::grid_link(l).map_err(|e| exit::usage(format!("--link {e}")))
            })
            .collect::<anyhow::Result<_>>()?
    };
    let caches: Vec<CacheState> = if args.caches.is_empty() {
        coldstart_experiment::DEFAULT_CACHES.to_vec()
    } else {
        args.caches
            .iter()
            .map(|c| c.parse().map_err(|e| exit::usage(format!("--cache: {e}"))))
            .collect::<anyhow::Result<_>>()?
    };
    let strategies = if args.strategies.is_empty() {
        coldstart_experiment::default_strategies()
    } else {
        args.strategies.clone()
    };
    let profiled = match &args.profiled {
        Some(p) => words(p).map_err(|e| exit::usage(format!("--profiled: {e}")))?,
        None => args.command.clone(),
    };
    Ok(ExperimentOptions {
        dir: args.dir.clone(),
        command: args.command.clone(),
        profiled,
        links,
        strategies,
        caches,
        runs: args.runs,
        chunk_size: args.chunk_size.unwrap_or_else(coldstart_experiment::default_chunk_size),
        readahead: args.readahead,
        work,
        output: args.output.clone(),
        repredict: args.repredict,
        predict_measured: args.predict_measured_link,
        cancel,
    })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.dir.is_dir() {
        return Err(exit::usage(format!(
            "{} is not a directory: give the program's directory, whose files are packed",
            args.dir.display()
        )));
    }
    coldstart_fs::check_writable(&args.output).map_err(|e| {
        exit::usage(format!("cannot write -o {}: {e}; choose another -o", args.output.display()))
    })?;
    // A directory of its own, so that nothing else in --work-dir is ever removed.
    let base = match &args.work_dir {
        Some(w) => w.clone(),
        None => {
            let parent = args.output.parent().filter(|p| !p.as_os_str().is_empty());
            parent.map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."))
        }
    };
    let work = tempfile::Builder::new().prefix(".coldstart-experiment-").tempdir_in(&base).map_err(
        |e| {
            exit::usage(format!(
                "cannot create a work directory in {}: {e}; give --work-dir an existing, writable directory",
                base.display()
            ))
        },
    )?;
    let cancel = Cancel::new();
    let opts = options(&args, cancel.clone(), work.path().to_owned())?;
    let signals = Signals::start(cancel)?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::with_draw_target(
            Some(0),
            indicatif::ProgressDrawTarget::hidden(),
        );
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "[{bar:30}] {percent:>3}% about {eta} left  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        b
    });
    let mut progress = Bar(bar, super::common::Steps::new("experiment"));
    let result = coldstart_experiment::run(&opts, &mut progress);
    if let Some(b) = &progress.0 {
        b.finish_and_clear();
    }
    drop(work);
    let e = match result {
        Ok(e) => e,
        Err(err) => {
            if let (Some(s), ExperimentError::Interrupted) = (signals.first(), &err) {
                eprintln!(
                    "coldstart: {}: stopped; the cells measured are in {} (run the same command again to go on)",
                    signals::name(s),
                    args.output.display()
                );
                return Ok(signals::exit_code(s));
            }
            return Err(err).with_context(|| format!("experiment on {}", args.dir.display()));
        }
    };
    print_table(&e);
    println!("wrote {}", args.output.display());
    Ok(exit::SUCCESS)
}

/// A command line split into words as a shell would, without expansions: white space
/// separates, '...' and "..." quote, a backslash quotes the next character.
fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => out.extend(word.take()),
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some('\\') if c == '"' => w.extend(chars.next()),
                        Some(x) => w.push(x),
                        None => return Err(format!("`{line}`: a quote {c} is not closed")),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    if out.is_empty() {
        return Err("the command is empty".into());
    }
    Ok(out)
}

fn print_table(e: &Experiment) {
    println!(
        "{:<14} {:<12} {:<16} {:>10} {:>10} {:>7} {:>11} {:>8} {:>9}",
        "link",
        "cache",
        "strategy",
        "measured",
        "predicted",
        "error",
        "bytes",
        "requests",
        "stalled"
    );
    let s = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3} s"));
    for c in &e.cells {
        let startup = c.startup_s();
        let err = match (startup, c.predicted_s) {
            (Some(m), Some(p)) if m > 0.0 => format!("{:+.0}%", (p / m - 1.0) * 100.0),
            _ => "-".into(),
        };
        let strategy = match c.chosen() {
            Some(ch) => format!("{} ({ch})", c.strategy),
            None => c.strategy.clone(),
        };
        println!(
            "{:<14} {:<12} {:<16} {:>10} {:>10} {:>7} {:>11.0} {:>8.0} {:>9}",
            c.link.label,
            c.cache,
            strategy,
            s(startup),
            s(c.predicted_s),
            err,
            c.bytes_fetched().unwrap_or(0.0),
            c.requests().unwrap_or(0.0),
            s(c.stall_s()),
        );
    }
    for w in &e.warnings {
        eprintln!("coldstart: warning: {w}");
    }
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn the_profiled_command_is_split_as_a_shell_would() {
        assert_eq!(words("sample --workload a").unwrap(), ["sample", "--workload", "a"]);
        assert_eq!(
            words(r#"bin/python3 -c 'import json' "a b" c\ d ''"#).unwrap(),
            ["bin/python3", "-c", "import json", "a b", "c d", ""]
        );
        assert!(words("bin/app 'open").unwrap_err().contains("not closed"));
        assert!(words("  ").is_err());
    }
}
