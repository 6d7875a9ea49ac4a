//! What several commands share: the page model's flags (`analyze`, `order --evaluate`), the
//! byte-size parser of every size flag (`--page-size`, `--readahead`, `--chunk-size`), and how
//! a list of names is shown in one line; in [`network`], what `mount`, `run` and `predict`
//! share; in [`signals`], how the commands that clean up wait for SIGINT, SIGTERM and
//! SIGHUP. A command module imports from here, never from another command's module.

pub mod network;
pub mod signals;

use coldstart_layout::model::{PageModel, ReadAround};

/// Page size, read-ahead window and where the window lies: how a start-up's touched pages
/// become page faults.
#[derive(Debug, Clone, clap::Args)]
pub struct PageModelArgs {
    /// Page size (4k, 16k, 64k).
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    pub page_size: u64,
    /// Read-ahead window around a fault (0 for none).
    #[arg(long, default_value = "128k", value_parser = parse_size)]
    pub readahead: u64,
    /// Where a fault's read-ahead window lies in code: `centred` on the page (the classic
    /// read-around) or `forward` from it (executable mappings on newer kernels, e.g. 6.18).
    #[arg(long, default_value = "centred", value_enum)]
    pub read_around: ReadAroundArg,
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

pub use coldstart_units::parse_size;

/// The first five names and how many more: a list in one line of a message.
pub fn preview(names: &[String]) -> String {
    let mut s = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 5 {
        s.push_str(&format!(", ... ({} more)", names.len() - 5));
    }
    s
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
