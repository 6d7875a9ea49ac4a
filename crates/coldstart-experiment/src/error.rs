//! Why an experiment stopped, and what kind of failure that is.

use std::path::PathBuf;

use coldstart_error::Category;

/// Why an experiment stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error("{0}")]
    Usage(String),
    #[error(
        "{path} holds another experiment ({why}): give another -o, or remove it to start again"
    )]
    Other { path: PathBuf, why: String },
    #[error(transparent)]
    Results(#[from] coldstart_formats::ResultsError),
    #[error("packing {dir}: {source}")]
    Pack { dir: PathBuf, source: coldstart_bundle::PackError },
    #[error("hot list {path}: {source}")]
    HotList { path: PathBuf, source: coldstart_bundle::HotListError },
    #[error("serving the bundle: {0}")]
    Serve(#[from] coldstart_serve::ServeError),
    #[error("{what}: {source}")]
    Mount { what: String, source: coldstart_lazyfs::MountError },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("interrupted: the cells measured so far are kept")]
    Interrupted,
}

impl ExperimentError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ExperimentError::Usage(_) | ExperimentError::Other { .. } => Category::Usage,
            ExperimentError::Results(e) => e.category(),
            ExperimentError::Pack { source, .. } => source.category(),
            ExperimentError::HotList { source, .. } => source.category(),
            ExperimentError::Serve(e) => e.category(),
            ExperimentError::Mount { source, .. } => source.category(),
            ExperimentError::Io { .. } | ExperimentError::Interrupted => Category::Environment,
        }
    }
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ExperimentError {
    let what = what.into();
    move |source| ExperimentError::Io { what, source }
}
