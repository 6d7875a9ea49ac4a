//! `coldstart`: measure, profile and fix program start-up.
//!
//! This binary is a thin layer over the library crates: it parses the command line once
//! (`cli`), turns it into each library's options, runs the work and prints results. Every
//! error is printed once, with its chain of causes, and maps to a named exit code.

mod cli;
mod cmd;
mod exit;

use std::process::ExitCode;

fn main() -> ExitCode {
    reset_sigpipe();
    let cli = cli::Cli::parse_args();
    match cli.command.run() {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return exit::SUCCESS;
            }
            eprintln!("coldstart: error: {}", exit::render(&err));
            exit::code_for(&err)
        }
    }
}

/// A closed pipe (`coldstart measure ... | head`) is not an error.
fn reset_sigpipe() {
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
