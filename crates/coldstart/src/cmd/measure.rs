//! `coldstart measure`.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    Err(crate::exit::usage("`coldstart measure` is not available in this build yet"))
}
