//! The prefetch database and its replay: format `coldstart-prefetch`, version 1
//! (docs/formats/prefetch.md).
//!
//! A database lists the file ranges a start-up read, at page precision, merged into ranges of
//! consecutive pages and put in the order start-up first touched them, with each file's
//! identity (device, inode, size, modification time, and the build-id of an ELF file). It is
//! built from the page profiles of one or more recordings ([`build`]), and replayed before or
//! while the program starts ([`replay`]): files whose identity changed are skipped, the rest
//! read in one sweep.
//!
//! ```no_run
//! use coldstart_prefetch::{replay, Database};
//!
//! let db = Database::read("python3.prefetch".as_ref())?;
//! let options = replay::ReplayOptions::default();
//! let plan = replay::plan(&db, &options);
//! let issued = replay::issue(&plan, &options);
//! println!("{} reads, {} bytes, {} files skipped", issued.requests, issued.bytes, plan.skipped.len());
//! # Ok::<(), coldstart_prefetch::PrefetchError>(())
//! ```

use std::path::PathBuf;

use coldstart_error::Category;

pub mod build;
pub mod db;
pub mod identity;
pub mod replay;

pub use build::{merge, Recording};
pub use db::{Database, FileEntry, Range};

/// Errors reading or writing a database.
#[derive(Debug, thiserror::Error)]
pub enum PrefetchError {
    #[error("cannot read prefetch database {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("prefetch database {path} {problem}: give a database file (`coldstart prefetch record -o DB` writes one)")]
    Unusable { path: PathBuf, problem: &'static str },
    #[error("{path} is not a prefetch database: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("{path} is a `{found}` file, not a `{}` database (record one with `coldstart prefetch record`)", db::FORMAT)]
    WrongFormat { path: PathBuf, found: String },
    #[error("{path} is prefetch database version {found}; this coldstart reads version {} only: record it again with `coldstart prefetch record`", db::VERSION)]
    UnknownVersion { path: PathBuf, found: u32 },
    #[error("{path} is not a valid prefetch database: {why}; record it again with `coldstart prefetch record`")]
    Invalid { path: PathBuf, why: String },
    #[error("{path} is {bytes} bytes, more than any prefetch database coldstart writes ({limit} bytes): refused; record it again")]
    TooLarge { path: PathBuf, bytes: u64, limit: u64 },
    #[error("cannot write prefetch database {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

impl PrefetchError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            PrefetchError::Read { .. }
            | PrefetchError::Unusable { .. }
            | PrefetchError::Parse { .. }
            | PrefetchError::WrongFormat { .. }
            | PrefetchError::UnknownVersion { .. }
            | PrefetchError::Invalid { .. }
            | PrefetchError::TooLarge { .. } => Category::Usage,
            PrefetchError::Write { .. } => Category::Environment,
        }
    }
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::PrefetchError)
}
