//! What several commands share: the page model's flags (`analyze`, `order --evaluate`), the
//! byte-size parser of every size flag (`--page-size`, `--readahead`, `--chunk-size`), how
//! a list of names is shown in one line, and the verification of a layout that `verify`,
//! `link` and `bolt` end with; in [`network`], what `mount`, `run` and `predict` share; in
//! [`signals`], how the commands that clean up wait for SIGINT, SIGTERM and SIGHUP. A command
//! module imports from here, never from another command's module.

pub mod learn;
pub mod network;
pub mod signals;

use std::path::Path;
use std::process::ExitCode;

use coldstart_layout::binary::Binary;
use coldstart_layout::model::{PageModel, ReadAround};
use coldstart_layout::verify::{verify, Verification};

/// Page size, read-ahead window and where the window lies: how a start-up's touched pages
/// become page faults.
#[derive(Debug, Clone, clap::Args)]
pub struct PageModelArgs {
    /// Page size (4k, 16k, 64k).
    #[arg(long, default_value = "4k", value_parser = coldstart_units::size_in(512, 1 << 30))]
    pub page_size: u64,
    /// Read-ahead window around a fault (0 for none).
    #[arg(long, default_value = "128k", value_parser = coldstart_units::size_in(0, 1 << 30))]
    pub readahead: u64,
    /// Where a fault's read-ahead window lies in code: `centred` on the page (the classic
    /// read-around) or `forward` from it (executable mappings on newer kernels, e.g. 6.18).
    #[arg(long, default_value = "centred", value_enum)]
    pub read_around: ReadAroundArg,
}

/// Emulated slow storage for one start-up's runs (`measure`, `timeline`): the profile and
/// where the device's backing file goes. Each command says itself what `--app-dir` copies.
#[derive(Debug, Clone, clap::Args)]
pub struct StorageArgs {
    /// Run on emulated slow storage (needs root): hdd, hdd-seek, emmc, sata-ssd, nvme or
    /// custom:iops=N,bps=N[k|m|g],readahead=N[k|m]. The program's files are copied onto a
    /// throttled loop device (hdd-seek: one whose reads a disk model times by seek distance,
    /// rotation and transfer) and every run sees the copy at the original paths; the I/O wait
    /// is then what a device of that kind costs (docs/storage.md).
    #[arg(long, value_name = "PROFILE")]
    pub storage: Option<String>,
    /// With --storage: where the emulated device's backing file goes (a disk file system).
    #[arg(long, value_name = "WORK", requires = "storage", default_value = coldstart_storage::DEFAULT_WORK_DIR)]
    pub storage_dir: std::path::PathBuf,
}

/// `--read-around`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadAroundArg {
    Centred,
    Forward,
}

impl PageModelArgs {
    /// The model, or a usage error for a zero page size.
    pub fn model(&self) -> anyhow::Result<PageModel> {
        if self.page_size == 0 {
            return Err(crate::exit::usage("--page-size must be more than 0"));
        }
        Ok(PageModel {
            page_size: self.page_size,
            readahead: self.readahead,
            read_around: match self.read_around {
                ReadAroundArg::Centred => ReadAround::Centred,
                ReadAroundArg::Forward => ReadAround::Forward,
            },
        })
    }
}

/// The most runs of one command and cache state any flag may ask for (`--runs`, `--batch`,
/// `--max-runs`, `--warmup`).
pub const MAX_RUNS: u64 = 10_000;

/// A count of runs ([`MAX_RUNS`] at most; `min` 1 where no run would measure nothing).
pub fn runs(min: u64) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    coldstart_units::count_in(min, MAX_RUNS)
}

/// A wait that 0 turns off (`--timeout` of `profile` and `prefetch record`): up to a day.
pub fn wait_timeout(
) -> impl Fn(&str) -> Result<std::time::Duration, String> + Clone + Send + Sync + 'static {
    coldstart_units::duration_in(std::time::Duration::ZERO, coldstart_units::DAY)
}

/// The bound of one run (`--timeout` of `measure`, `timeline`, `gate`): 1 ms to a day.
pub fn run_timeout(
) -> impl Fn(&str) -> Result<std::time::Duration, String> + Clone + Send + Sync + 'static {
    coldstart_units::duration_in(coldstart_units::MILLISECOND, coldstart_units::DAY)
}

/// A progress bar of bytes on standard error, when it is a terminal (and nothing otherwise):
/// `what` before it. It is drawn from its first [`show_bytes`], so work that reports none
/// shows none.
pub fn byte_bar(what: &str, total: u64) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::hidden(),
    );
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    b.set_prefix(what.to_owned());
    Some(b)
}

/// Shows `done` of `total` bytes on a [`byte_bar`].
pub fn show_bytes(bar: &indicatif::ProgressBar, done: u64, total: u64) {
    bar.set_length(total);
    bar.set_position(done);
    if bar.is_hidden() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    }
}

/// How a long command says what it is doing: on a terminal, its progress bar (drawn by the
/// command); elsewhere (a CI log, a pipe, a file) one line per step on standard error,
/// `coldstart measure: cold: run 3 of 10: 812.3 ms`, so that minutes of work are never silent.
pub struct Steps {
    command: &'static str,
    lines: bool,
}

impl Steps {
    /// The steps of `command`: lines when standard error is not a terminal.
    pub fn new(command: &'static str) -> Steps {
        use std::io::IsTerminal;
        Steps { command, lines: !std::io::stderr().is_terminal() }
    }

    /// Whether steps are said as lines (no progress bar).
    pub fn as_lines(&self) -> bool {
        self.lines
    }

    /// Say one step, as a line, when there is no bar.
    pub fn say(&self, step: impl std::fmt::Display) {
        if self.lines {
            eprintln!("coldstart {}: {step}", self.command);
        }
    }
}

/// The first five names and how many more: a list in one line of a message.
pub fn preview(names: &[String]) -> String {
    let mut s = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 5 {
        s.push_str(&format!(", ... ({} more)", names.len() - 5));
    }
    s
}

/// Verify that the order `expected` took effect in `binary` and print the verification (text
/// or JSON); the exit code says whether it did.
/// The names of the order file `order` that `binary` defines: one order file serves every
/// module of a build, and each link takes its own names. Says how many it left to the other
/// modules.
pub fn order_names_defined(order: &Path, binary: &Path) -> anyhow::Result<Vec<String>> {
    use coldstart_layout::verify::{expected_names, has_module_sections, split_defined, Expected};
    let names = expected_names(Expected::OrderFile(order), binary)?;
    // coldstart's lld files name each module's part: those names are the binary's own, and
    // the ones it lacks are missing.
    let text = std::fs::read_to_string(order).unwrap_or_default();
    if has_module_sections(&text) {
        return Ok(names);
    }
    let (mine, other) = split_defined(&Binary::open(binary)?, names);
    if !other.is_empty() {
        eprintln!(
            "coldstart: {} names of the order are not in {} (other modules of the build, or inlined); use --profile to count them",
            other.len(),
            binary.display()
        );
    }
    Ok(mine)
}

pub fn check_layout(
    binary: &Path,
    expected: &[String],
    page_size: u64,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let b = Binary::open(binary)?;
    let v = verify(&b, expected, PageModel { page_size, readahead: 0, ..PageModel::default() });
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", render_verification(binary, &v));
    }
    Ok(if v.took_effect {
        crate::exit::SUCCESS
    } else {
        ExitCode::from(crate::exit::FAILURE_FOUND)
    })
}

fn render_verification(binary: &Path, v: &Verification) -> String {
    let mut out = format!(
        "{}: {} of {} ordered functions placed; they span {} pages (ideal {}); {} of {} neighbours in order\n",
        binary.display(),
        v.placed,
        v.expected,
        v.span_pages,
        v.ideal_pages,
        v.in_order_pairs,
        v.pairs
    );
    if !v.missing.is_empty() {
        out.push_str(&format!(
            "  not placed (missing: inlined, renamed or removed): {}\n",
            preview(&v.missing)
        ));
    }
    for group in &v.folded {
        out.push_str(&format!("  folded into one body: {}\n", group.join(", ")));
    }
    match &v.reason {
        None => out.push_str("  the order took effect\n"),
        Some(r) => out.push_str(&format!("  the order did NOT take effect: {r}\n")),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_page_size_is_refused() {
        let args =
            PageModelArgs { page_size: 0, readahead: 0, read_around: ReadAroundArg::Centred };
        assert!(args.model().unwrap_err().to_string().contains("--page-size"));
    }
}
