//! `coldstart`: measure, profile and fix program start-up.
//!
//! This binary is a thin layer over the library crates: it parses the command line once
//! (`cli`), turns it into each library's options, runs the work and prints results. Every
//! error is printed once, with its chain of causes, and maps to a named exit code.
//!
//! A command that must clean up when `SIGINT`, `SIGTERM` or `SIGHUP` ends it catches them
//! ([`coldstart_process::cancel`]): its work returns an error through its guards, which
//! remove what it made, and the process exits here with 128 + the signal.

mod cli;
mod cmd;
mod exit;

use std::process::ExitCode;

fn main() -> ExitCode {
    coldstart_process::forward::default_sigpipe();
    let cli = cli::Cli::parse_args();
    match cli.command.run() {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return exit::SUCCESS;
            }
            eprintln!("coldstart: error: {}", exit::render(&err));
            // Whatever error the work ended with after a signal, the signal ended it.
            match coldstart_process::cancel::raised() {
                Some(signal) => ExitCode::from(coldstart_process::cancel::exit_code(signal)),
                None => exit::code_for(&err),
            }
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
