//! The command line. Only this module (and the `Args` structs of each `cmd` module) knows
//! about clap; each command converts its arguments into a library's options struct before
//! any work starts.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser, Subcommand};

use crate::cmd;

#[derive(Debug, Parser)]
#[command(name = "coldstart", version, about = "Measure, profile and fix program start-up", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a command many times in a known, verified cache state and report start-up latency and I/O.
    Measure(cmd::measure::Args),
    /// Record the first-touch order of functions and file pages during start-up.
    Profile(cmd::profile::Args),
    /// Generate and build the sample program (a test bed whose start-up behaves like a large program).
    Sample(cmd::sample::Args),
    /// Chunk a program's files into a static, content-addressed bundle with its hot set first.
    Pack(cmd::pack::Args),
    /// Make the ed25519 key pair that signs bundles (`pack --sign`, `mount --trust`).
    Key(cmd::key::Args),
    /// Serve a bundle over HTTP with Range, optionally through an emulated network link.
    Serve(cmd::serve::Args),
    /// Upload a bundle to an S3 bucket: only the objects it lacks, the manifest and start object last.
    Publish(cmd::publish::Args),
    /// Present a bundle as a read-only file system that fetches on demand, until Ctrl-C.
    Mount(cmd::mount::Args),
    /// Mount a bundle in a temporary directory, run a command from it, unmount and report.
    Run(cmd::run::Args),
    /// Predict each network strategy's start-up time for a bundle on the measured or given link.
    Predict(cmd::predict::Args),
    /// How much of each code page start-up uses; the pages and faults an ideal layout needs.
    Analyze(cmd::analyze::Args),
    /// Turn profiles into a function order for lld, gold, GNU ld, ld64 or BOLT.
    Order(cmd::order::Args),
    /// Run a build with function sections and lld with the order file, then verify.
    Link(cmd::link::Args),
    /// Rewrite a binary linked with --emit-relocs in the order through llvm-bolt, then verify.
    Bolt(cmd::bolt::Args),
    /// Check where the ordered functions ended up; exit 1 if the order did not take effect.
    Verify(cmd::verify::Args),
    /// Where one start-up's time goes: phases, I/O wait and the files that cost most, from the kernel's tracepoints.
    Timeline(cmd::timeline::Args),
    /// The paper's grid run for real: links x strategies x cache states, each cell measured beside the model's prediction.
    Experiment(cmd::experiment::Args),
    /// One self-contained HTML report (SVG charts, CSV beside it) of measure, profile, order, timeline and experiment results.
    Report(cmd::report::Args),
    /// Record the file ranges a start-up reads into a prefetch database; show or merge databases.
    Prefetch(cmd::prefetch::Args),
    /// Start a command while the ranges of its prefetch database are read in one sweep.
    Launch(cmd::launch::Args),
    /// Compare a start-up with a stored baseline and fail CI on a real regression.
    Gate(cmd::gate::Args),
    /// Run the pipeline on the bundled sample program and print what it found.
    Demo(cmd::demo::Args),
}

impl Command {
    /// Runs the command the line names.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Measure(args) => {
                check_launch_options(args.launch_options.as_deref())?;
                cmd::measure::run(args)
            }
            Command::Profile(args) => cmd::profile::run(args),
            Command::Sample(args) => cmd::sample::run(args),
            Command::Pack(args) => cmd::pack::run(args),
            Command::Key(args) => cmd::key::run(args),
            Command::Serve(args) => cmd::serve::run(args),
            Command::Publish(args) => cmd::publish::run(args),
            Command::Mount(args) => cmd::mount::run(args),
            Command::Run(args) => cmd::run::run(args),
            Command::Predict(args) => cmd::predict::run(args),
            Command::Demo(args) => cmd::demo::run(args),
            Command::Gate(args) => cmd::gate::run(args),
            Command::Analyze(args) => cmd::analyze::run(args),
            Command::Order(args) => cmd::order::run(args),
            Command::Link(args) => cmd::link::run(args),
            Command::Bolt(args) => cmd::bolt::run(args),
            Command::Verify(args) => cmd::verify::run(args),
            Command::Report(args) => cmd::report::run(args),
            Command::Timeline(args) => cmd::timeline::run(args),
            Command::Experiment(args) => cmd::experiment::run(args),
            Command::Prefetch(args) => cmd::prefetch::run(args),
            Command::Launch(args) => cmd::launch::run(args),
        }
    }
}

/// `measure --launch-options`, parsed as `launch` will parse them, so that an option `launch`
/// does not take is bad input before anything runs, not runs that fail one by one.
fn check_launch_options(extra: Option<&str>) -> anyhow::Result<()> {
    let Some(extra) = extra else { return Ok(()) };
    let argv = ["coldstart", "launch", "--prefetch", "DB"]
        .into_iter()
        .chain(extra.split_whitespace())
        .chain(["--", "true"]);
    match Cli::try_parse_from(argv) {
        Ok(_) => Ok(()),
        Err(e) => {
            let first = e.render().to_string();
            let first = first.lines().next().unwrap_or("").trim_start_matches("error: ").to_owned();
            Err(crate::exit::usage(format!(
                "--launch-options '{extra}': {first} (see coldstart launch --help)"
            )))
        }
    }
}

impl Cli {
    /// Parse the command line, or exit with clap's message; a command to run given without
    /// `--` gets a tip that shows it after `--`.
    pub fn parse_args() -> Cli {
        Cli::try_parse_from(std::env::args_os())
            .unwrap_or_else(|e| with_separator_tip(e, std::env::args_os().collect()).exit())
    }
}

/// `err` with a tip to put the command after `--` when it is an unexpected argument of a
/// subcommand that runs a command (one whose last argument is the command, as `measure`'s).
fn with_separator_tip(mut err: clap::Error, argv: Vec<OsString>) -> clap::Error {
    if err.kind() != ErrorKind::UnknownArgument {
        return err;
    }
    let Some(ContextValue::String(bad)) = err.get(ContextKind::InvalidArg).cloned() else {
        return err;
    };
    if bad.starts_with('-') {
        return err;
    }
    let words: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut cmd = Cli::command();
    let mut path = vec!["coldstart".to_string()];
    for w in words.iter().skip(1) {
        match cmd.find_subcommand(w) {
            Some(sub) => {
                path.push(w.clone());
                cmd = sub.clone();
            }
            None if w == &bad => break,
            None => {}
        }
    }
    if !cmd.get_arguments().any(|a| a.is_last_set()) {
        return err;
    }
    let at = words.iter().position(|w| w == &bad).unwrap_or(words.len());
    let before: Vec<&String> = words[1..at].iter().filter(|w| !path[1..].contains(w)).collect();
    let mut example = path.join(" ");
    for w in before
        .iter()
        .map(|w| w.as_str())
        .chain(["--"])
        .chain(words[at..].iter().map(|w| w.as_str()))
    {
        example.push(' ');
        example.push_str(&shell_word(w));
    }
    err.insert(
        ContextKind::Suggested,
        ContextValue::StyledStrs(vec![
            format!("the command to run goes after `--`: {example}").into()
        ]),
    );
    err
}

/// `w` as a shell would need it typed: quoted when it has spaces or shell characters.
fn shell_word(w: &str) -> String {
    if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tip(argv: &[&str]) -> String {
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        let err = Cli::try_parse_from(&argv).unwrap_err();
        with_separator_tip(err, argv).render().to_string()
    }

    #[test]
    fn a_command_without_the_separator_is_shown_after_it() {
        let t = tip(&["coldstart", "measure", "--runs", "2", "/usr/bin/node", "app.js"]);
        assert!(t.contains("coldstart measure --runs 2 -- /usr/bin/node app.js"), "{t}");
        let t =
            tip(&["coldstart", "prefetch", "record", "-o", "x.db", "python3", "-c", "import json"]);
        assert!(t.contains("coldstart prefetch record -o x.db -- python3 -c 'import json'"), "{t}");
        for sub in ["profile", "timeline", "gate", "launch", "link"] {
            let t = tip(&["coldstart", sub, "/usr/bin/node"]);
            assert!(t.contains(&format!("coldstart {sub} -- /usr/bin/node")), "{sub}: {t}");
        }
        let t = tip(&["coldstart", "experiment", "-o", "e.json", "dir", "./prog"]);
        assert!(t.contains("coldstart experiment -o e.json dir -- ./prog"), "{t}");
        let t = tip(&["coldstart", "run", "http://127.0.0.1:1/b", "/usr/bin/node"]);
        assert!(t.contains("coldstart run http://127.0.0.1:1/b -- /usr/bin/node"), "{t}");
        // A command that runs nothing gets clap's message alone.
        let t = tip(&["coldstart", "analyze", "a", "b"]);
        assert!(!t.contains("after `--`"), "{t}");
    }

    /// One name for JSON output: `--export-json FILE` beside the text (measure, gate, run),
    /// `--json` for JSON instead of the text, `-o` for the artifact; the gate's old names still
    /// parse, unlisted.
    #[test]
    fn the_gates_old_output_names_are_hidden_aliases() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Gate(g) => (g.export_json, g.export_markdown),
            _ => unreachable!(),
        };
        let new = ["coldstart", "gate", "--baseline", "b.json", "--export-json", "r.json"];
        let old =
            ["coldstart", "gate", "--baseline", "b.json", "--json", "r.json", "--markdown", "s.md"];
        assert_eq!(parse(&new).0, Some("r.json".into()));
        assert_eq!(parse(&old), (Some("r.json".into()), Some("s.md".into())));
        let help =
            Cli::command().find_subcommand_mut("gate").unwrap().render_long_help().to_string();
        assert!(help.contains("--export-json") && help.contains("--export-markdown"), "{help}");
        assert!(!help.contains("--json") && !help.contains("--markdown "), "{help}");
    }
}
