//! Named exit codes.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | the work ran and found a failure (a regression, a layout that did not take effect, runs that never became ready) |
//! | 2 | bad input: a flag, a file or a command that cannot be used; nothing was run |
//! | 3 | a missing privilege or kernel feature |
//! | 70 | an internal or environmental error while running |

use std::process::ExitCode;

pub const SUCCESS: ExitCode = ExitCode::SUCCESS;
pub const FAILURE_FOUND: u8 = 1;
pub const USAGE: u8 = 2;
pub const PRIVILEGE: u8 = 3;
pub const SOFTWARE: u8 = 70;

/// An error that carries its exit code: raised by the command modules for bad input and
/// missing privileges, so `main` can map it without inspecting message text.
#[derive(Debug)]
pub struct Coded {
    pub code: u8,
    pub message: String,
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// Bad input: exit code 2.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    Coded { code: USAGE, message: message.into() }.into()
}

/// A missing privilege or kernel feature: exit code 3.
#[allow(dead_code)]
pub fn privilege(message: impl Into<String>) -> anyhow::Error {
    Coded { code: PRIVILEGE, message: message.into() }.into()
}

pub fn code_for(err: &anyhow::Error) -> ExitCode {
    let code = err
        .chain()
        .find_map(|cause| cause.downcast_ref::<Coded>().map(|c| c.code))
        .unwrap_or(SOFTWARE);
    ExitCode::from(code)
}
