//! Named exit codes, and the one place where an error becomes one.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | the work ran and found a failure (a regression, a layout that did not take effect, runs that never became ready) |
//! | 2 | bad input: a flag, a file or a command that cannot be used; nothing was run |
//! | 3 | a missing privilege or kernel feature |
//! | 4 | a bundle refused under `--trust`: its signature is missing, by another key, or does not match |
//! | 70 | an internal or environmental error while running |
//!
//! `coldstart gate` exits 0 (not slower), 1 (slower) or 2 when it could not measure, whatever
//! the reason ([`CouldNotMeasure`]): a CI job tells those three apart.
//!
//! Every library error says what kind of failure it is ([`Category`], an exhaustive match in
//! each library); [`code_for`] finds the first error of the chain that knows its category.
//! Commands add context (the flag, the file) with anyhow and never pick a code themselves,
//! except through [`usage`], [`privilege`] and [`environment`] for what they find themselves
//! (a flag, a command that cannot start). A command that ends on a signal exits with 128 plus
//! its number, as a shell reports it.

use std::error::Error;
use std::process::ExitCode;

use coldstart_error::Category;

pub const SUCCESS: ExitCode = ExitCode::SUCCESS;
pub const FAILURE_FOUND: u8 = 1;

/// An error raised by the command line itself, with its category: bad input it checked, or a
/// missing privilege.
#[derive(Debug)]
pub struct Coded {
    pub category: Category,
    pub message: String,
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error for Coded {}

/// Bad input: exit code 2.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    Coded { category: Category::Usage, message: message.into() }.into()
}

/// The environment failed (a server, the network, the machine): exit code 70.
pub fn environment(message: impl Into<String>) -> anyhow::Error {
    Coded { category: Category::Environment, message: message.into() }.into()
}

/// A missing privilege or kernel feature: exit code 3.
#[allow(dead_code)]
pub fn privilege(message: impl Into<String>) -> anyhow::Error {
    Coded { category: Category::Privilege, message: message.into() }.into()
}

/// Marks an error of `coldstart gate`: whatever kept the gate from a verdict (bad input, a
/// missing privilege, a failure of the machine) exits with [`COULD_NOT_MEASURE`], because a CI
/// job tells only three outcomes apart (not slower, slower, could not measure). Its message is
/// empty: [`render`] prints the error it wraps.
#[derive(Debug)]
pub struct CouldNotMeasure;

impl std::fmt::Display for CouldNotMeasure {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }
}

/// The gate's exit code when it could not measure.
pub const COULD_NOT_MEASURE: u8 = 2;

/// `err`, exiting with [`COULD_NOT_MEASURE`] (see [`CouldNotMeasure`]).
pub fn could_not_measure(err: anyhow::Error) -> anyhow::Error {
    err.context(CouldNotMeasure)
}

/// The category of an error: that of the outermost cause that knows its own; an error no
/// library describes (a bare I/O error, say) is internal.
pub fn category(err: &anyhow::Error) -> Category {
    err.chain().find_map(category_of).unwrap_or(Category::Internal)
}

pub fn code_for(err: &anyhow::Error) -> ExitCode {
    if err.downcast_ref::<CouldNotMeasure>().is_some() {
        return ExitCode::from(COULD_NOT_MEASURE);
    }
    ExitCode::from(category(err).exit_code())
}

/// Each library's `error_category`: every library names its own error types.
type Categorize = fn(&(dyn Error + 'static)) -> Option<Category>;
const LIBRARIES: [Categorize; 17] = [
    coldstart_bundle::error_category,
    coldstart_elf::error_category,
    coldstart_experiment::error_category,
    coldstart_formats::error_category,
    coldstart_gate::error_category,
    coldstart_layout::error_category,
    coldstart_lazyfs::error_category,
    coldstart_measure::error_category,
    coldstart_prefetch::error_category,
    coldstart_profile::error_category,
    coldstart_profile_format::error_category,
    coldstart_ready::error_category,
    coldstart_report::error_category,
    coldstart_sample::error_category,
    coldstart_serve::error_category,
    coldstart_storage::error_category,
    coldstart_timeline::error_category,
];

/// The category of one cause: the command line's own ([`Coded`]), or a library's.
fn category_of(cause: &(dyn Error + 'static)) -> Option<Category> {
    if let Some(c) = cause.downcast_ref::<Coded>() {
        return Some(c.category);
    }
    LIBRARIES.iter().find_map(|categorize| categorize(cause))
}

/// The message of an error and its causes, each cause once: a library message that already
/// quotes its source (`cannot read P: No such file`) is not followed by the source again.
pub fn render(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outermost_known_cause_decides() {
        let e: anyhow::Error = coldstart_measure::cache::CacheError::NotRoot.into();
        assert_eq!(category(&e), Category::Privilege);
        let e = e.context("--cache cold");
        assert_eq!(category(&e), Category::Privilege, "context does not hide the category");
        assert_eq!(code_for(&usage("bad flag")), ExitCode::from(2));
        assert_eq!(category(&anyhow::anyhow!("no library said")), Category::Internal);
    }

    #[test]
    fn whatever_keeps_the_gate_from_a_verdict_exits_2() {
        let e: anyhow::Error = coldstart_measure::cache::CacheError::NotRoot.into();
        let e = could_not_measure(e.context("--cache cold"));
        assert_eq!(code_for(&e), ExitCode::from(COULD_NOT_MEASURE));
        assert_eq!(category(&e), Category::Privilege);
        assert!(render(&e).starts_with("--cache cold: "), "{}", render(&e));
    }

    #[test]
    fn a_cause_quoted_by_its_error_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = coldstart_layout::LayoutError::Io { action: "read", path: "/p".into(), source: io };
        let e = anyhow::Error::new(e).context("--binary /p");
        assert_eq!(render(&e), "--binary /p: cannot read /p: No such file");
    }
}
