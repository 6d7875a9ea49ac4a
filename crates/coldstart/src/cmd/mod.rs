//! One module per subcommand: its clap `Args`, the conversion to library options, and printing.

pub mod analyze;
pub mod bolt;
pub mod demo;
pub mod link;
pub mod measure;
pub mod order;
pub mod profile;
pub mod sample;
pub mod verify;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Measure(args) => measure::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Sample(args) => sample::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Analyze(args) => analyze::run(args),
        Command::Order(args) => order::run(args),
        Command::Link(args) => link::run(args),
        Command::Bolt(args) => bolt::run(args),
        Command::Verify(args) => verify::run(args),
    }
}
