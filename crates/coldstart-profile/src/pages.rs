//! File pages touched during start-up, from the kernel's `filemap` tracepoints.

use std::path::Path;

use crate::format::PageProfile;
use crate::{ProfileError, ProfileOptions};

/// Why the page trace could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum PagesError {
    #[error("--pages needs root (tracefs); run coldstart as root")]
    NotRoot,
    #[error("tracefs: {0}")]
    Tracefs(String),
}

/// Record the pages of one start-up of the program.
pub(crate) fn record_pages(
    _options: &ProfileOptions,
    _path: &Path,
) -> Result<(PageProfile, Vec<String>), ProfileError> {
    Err(PagesError::Tracefs("page profiles are not available yet".into()).into())
}
