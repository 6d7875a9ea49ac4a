//! One module per subcommand: its clap `Args`, the conversion to library options, and printing.

pub mod analyze;
pub mod bolt;
pub mod common;
pub mod demo;
pub mod experiment;
pub mod gate;
pub mod key;
pub mod launch;
pub mod link;
pub mod measure;
pub mod mount;
pub mod order;
pub mod pack;
pub mod predict;
pub mod prefetch;
pub mod profile;
pub mod publish;
pub mod report;
pub mod run;
pub mod sample;
pub mod serve;
pub mod timeline;
pub mod verify;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Measure(args) => measure::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Sample(args) => sample::run(args),
        Command::Pack(args) => pack::run(args),
        Command::Key(args) => key::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Publish(args) => publish::run(args),
        Command::Mount(args) => mount::run(args),
        Command::Run(args) => run::run(args),
        Command::Predict(args) => predict::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Gate(args) => gate::run(args),
        Command::Analyze(args) => analyze::run(args),
        Command::Order(args) => order::run(args),
        Command::Link(args) => link::run(args),
        Command::Bolt(args) => bolt::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Report(args) => report::run(args),
        Command::Timeline(args) => timeline::run(args),
        Command::Experiment(args) => experiment::run(args),
        Command::Prefetch(args) => prefetch::run(args),
        Command::Launch(args) => launch::run(args),
    }
}
