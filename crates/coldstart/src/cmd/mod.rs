//! One module per subcommand: its clap `Args`, the conversion to library options, and printing.

pub mod demo;
pub mod measure;
pub mod mount;
pub mod pack;
pub mod profile;
pub mod run;
pub mod sample;
pub mod serve;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Measure(args) => measure::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Sample(args) => sample::run(args),
        Command::Pack(args) => pack::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Mount(args) => mount::run(args),
        Command::Run(args) => run::run(args),
        Command::Demo(args) => demo::run(args),
    }
}
