//! Why a mount, or a prediction, could not be made: one error type for the crate's front
//! ([`crate::mount()`], [`crate::predict()`] and the options they are given), each variant
//! with the category its exit code follows from.

use std::path::PathBuf;

use coldstart_bundle::sign::{KeyError, SignatureError};
use coldstart_bundle::{CacheError, FetchError, HotListError};
use coldstart_error::Category;

use crate::engine::EngineError;
use crate::strategy::Strategy;

/// Why a mount (or a prediction) failed.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The mount point does not exist.
    #[error("mount point {0} does not exist: create an empty directory")]
    Missing(PathBuf),
    /// The mount point is not a directory.
    #[error("mount point {0} is not a directory")]
    NotADirectory(PathBuf),
    /// The mount point is not empty.
    #[error("mount point {0} is not empty: mount on an empty directory")]
    NotEmpty(PathBuf),
    /// Something is mounted on the mount point already.
    #[error("mount point {0} is busy: something is already mounted there; unmount it (fusermount3 -u) or choose another")]
    Busy(PathBuf),
    /// The bundle could not be opened.
    #[error("cannot open {url}: {source}")]
    Open {
        /// The bundle's URL.
        url: String,
        /// Why.
        source: FetchError,
    },
    /// The bundle's manifest could not be fetched.
    #[error("cannot read the bundle's manifest: {}{}", .0, not_found_hint(.0))]
    Manifest(#[source] FetchError),
    /// The chunk cache failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The strategy's fetch before start failed.
    #[error("the {strategy} strategy could not fetch what it needs before start: {source}")]
    Prefetch {
        /// The strategy.
        strategy: Strategy,
        /// What failed.
        source: EngineError,
    },
    /// The FUSE mount failed.
    #[error("cannot mount FUSE on {path}: {cause}; {}", fuse_hint(cause))]
    Fuse {
        /// The mount point.
        path: PathBuf,
        /// The mount's error.
        cause: std::io::Error,
    },
    /// FUSE cannot be used here (no /dev/fuse, no fusermount3, no privilege).
    #[error("cannot mount the bundle: {0}")]
    FuseAccess(#[from] coldstart_sys::fuse::Unusable),
    /// The mount stayed busy at unmount.
    #[error("cannot unmount {0}: it stays busy; run `fusermount3 -u -z {0}`")]
    Unmount(PathBuf),
    /// The watchdog that cleans up after a dead coldstart could not start.
    #[error("cannot start the watchdog that cleans up if coldstart dies (/bin/sh): {0}")]
    Watchdog(#[source] std::io::Error),
    /// `--record`'s hot list could not be written.
    #[error(transparent)]
    Record(#[from] HotListError),
    /// The link could not be measured for `--strategy auto`.
    #[error("cannot measure the link for --strategy auto: {0}; give it with --link-hint BW/LAT")]
    Probe(#[source] FetchError),
    /// No default chunk cache directory: neither HOME nor XDG_CACHE_HOME.
    #[error("no HOME or XDG_CACHE_HOME: give --cache-dir")]
    NoCacheDir,
    /// `--timeout` is not positive.
    #[error("--timeout must be a positive number of seconds")]
    Timeout,
    /// `--retries` is above the most a fetch may make.
    #[error("--retries {0} is more than the {max} a fetch may make", max = coldstart_bundle::remote::MAX_RETRIES)]
    Retries(u32),
    /// `--min-rate` is 0.
    #[error("--min-rate must be at least 1 byte per second")]
    MinRate,
    /// `--record`'s file cannot be written.
    #[error("--record {}: {why}: give a file in an existing directory you may write", path.display())]
    RecordDir {
        /// The file given.
        path: PathBuf,
        /// Why it cannot be written.
        why: String,
    },
    /// Cancelled (a signal).
    #[error("interrupted")]
    Cancelled,
    /// `--link-hint` without `--strategy auto`.
    #[error("--link-hint is for --strategy auto")]
    LinkHintWithoutAuto,
    /// `--local-ms` is out of range.
    #[error("--local-ms must be 0 to 86400000 (a day)")]
    LocalTime,
    /// A read-ahead outside 4 KiB to 1 MiB.
    #[error("a read-ahead is between 4k and 1m")]
    Readahead,
    /// `--trust`'s key could not be read.
    #[error("--trust: {0}")]
    Key(#[source] KeyError),
    /// The bundle's signature could not be fetched.
    #[error("cannot read the bundle's signature: {0}")]
    Signature(#[source] FetchError),
    /// The bundle is not signed by the trusted key.
    #[error("refusing the bundle: {0}")]
    Untrusted(#[from] SignatureError),
}

impl MountError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            MountError::Missing(_)
            | MountError::NotADirectory(_)
            | MountError::NotEmpty(_)
            | MountError::Busy(_)
            | MountError::NoCacheDir
            | MountError::Timeout
            | MountError::Retries(_)
            | MountError::MinRate
            | MountError::RecordDir { .. }
            | MountError::LinkHintWithoutAuto
            | MountError::LocalTime
            | MountError::Readahead => Category::Usage,
            // A URL that names no bundle is bad input, a server that fails the environment's.
            MountError::Open { source, .. } | MountError::Manifest(source) => source.category(),
            MountError::Cache(e) => e.category(),
            MountError::Key(e) => e.category(),
            MountError::Signature(e) => e.category(),
            MountError::Untrusted(e) => e.category(),
            MountError::Record(e) => e.category(),
            MountError::FuseAccess(_) => Category::Privilege,
            MountError::Fuse { cause, .. }
                if cause.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                Category::Privilege
            }
            MountError::Prefetch { .. }
            | MountError::Fuse { .. }
            | MountError::Unmount(_)
            | MountError::Watchdog(_)
            | MountError::Probe(_)
            | MountError::Cancelled => Category::Environment,
        }
    }
}

impl MountError {
    /// Whether the mount (or prediction) stopped because it was cancelled
    /// ([`crate::NetworkRequest::cancel`]), not because something failed.
    pub fn is_cancelled(&self) -> bool {
        match self {
            MountError::Cancelled => true,
            MountError::Open { source, .. }
            | MountError::Manifest(source)
            | MountError::Signature(source)
            | MountError::Probe(source) => source.is_cancelled(),
            MountError::Prefetch { source, .. } => matches!(source, EngineError::Cancelled),
            _ => false,
        }
    }
}

fn not_found_hint(e: &FetchError) -> &'static str {
    if e.is_not_found() {
        "; is this the URL of a bundle written by `coldstart pack` (the directory holding manifest.json)?"
    } else {
        ""
    }
}

/// What to check when mounting failed with `cause`.
fn fuse_hint(cause: &std::io::Error) -> &'static str {
    match cause.kind() {
        std::io::ErrorKind::PermissionDenied => {
            "the user needs read and write access to /dev/fuse and to the mount point, and \
             fusermount3 must be setuid root (Debian's fuse3 package installs it so)"
        }
        _ => "is /dev/fuse there and fusermount3 installed (Debian: fuse3)?",
    }
}
