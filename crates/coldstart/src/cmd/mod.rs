//! One module per subcommand: its clap `Args`, the conversion to library options, and printing.

pub mod demo;
pub mod measure;
pub mod profile;
pub mod sample;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Measure(args) => measure::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Sample(args) => sample::run(args),
        Command::Demo(args) => demo::run(args),
    }
}
