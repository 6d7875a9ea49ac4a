//! The page run: the method that records a start-up's pages, chosen from the options and the
//! privileges at hand (exact on a private copy, traced, or sampled with perf), with tracefs held
//! for as long as the methods that trace need it.

use std::path::Path;

use crate::pages::{tracefs_err, PageRun, PagesError};
use crate::{PageMethod, ProfileError, ProfileOptions};

/// Record the pages of one start-up of the program (killed at readiness), by the method the
/// options ask for.
pub(crate) fn record(options: &ProfileOptions, path: &Path) -> Result<PageRun, ProfileError> {
    let root = coldstart_sys::is_root();
    // The exact method traces twice: tracefs is mounted (where missing) once for both.
    let _tracefs = match options.page_method {
        PageMethod::Auto | PageMethod::Exact | PageMethod::Traced if root => Some(
            coldstart_sys::tracefs::Tracefs::hold(coldstart_sys::tracefs::Mount::IfMissing)
                .map_err(tracefs_err)?,
        ),
        _ => None,
    };
    match options.page_method {
        PageMethod::Auto if root => crate::exact::record(options, path),
        PageMethod::Auto | PageMethod::Sampled => crate::perf::record_pages_perf(options, path),
        PageMethod::Exact | PageMethod::Traced if !root => {
            Err(PagesError::NeedsRoot { method: options.page_method.to_string() }.into())
        }
        PageMethod::Exact => crate::exact::record(options, path),
        PageMethod::Traced => crate::pages::record_traced(options, path),
    }
}
