//! Why an experiment stopped, and what kind of failure that is.

use std::path::PathBuf;

use coldstart_error::Category;

/// Why an experiment stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The options do not make a grid (the message says why).
    #[error("{0}")]
    Usage(String),
    /// The result file to resume holds another experiment.
    #[error(
        "{path} holds another experiment ({why}): give another -o, or remove it to start again"
    )]
    Other {
        /// The result file.
        path: PathBuf,
        /// How it differs from this one.
        why: String,
    },
    /// The result file could not be read or written.
    #[error(transparent)]
    Results(#[from] coldstart_formats::ResultsError),
    /// The program's directory could not be packed.
    #[error("packing {dir}: {source}")]
    Pack {
        /// The directory.
        dir: PathBuf,
        /// Why packing failed.
        source: coldstart_bundle::PackError,
    },
    /// The hot list could not be made.
    #[error("hot list {path}: {source}")]
    HotList {
        /// The profile the hot list is made from.
        path: PathBuf,
        /// Why it could not be made.
        source: coldstart_bundle::HotListError,
    },
    /// The bundle could not be served.
    #[error("serving the bundle: {0}")]
    Serve(#[from] coldstart_serve::ServeError),
    /// A mount failed.
    #[error("{what}: {source}")]
    Mount {
        /// What was being done.
        what: String,
        /// Why the mount failed.
        source: coldstart_lazyfs::MountError,
    },
    /// Another file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the file.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A signal stopped it; the cells measured so far are kept.
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
