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
    /// The file could not be read.
    #[error("cannot read prefetch database {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The path is missing, a directory or empty.
    #[error("prefetch database {path} {problem}: give a database file (`coldstart prefetch record -o DB` writes one)")]
    Unusable {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The file is not JSON of a database.
    #[error("{path} is not a prefetch database: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the JSON parser found.
        source: serde_json::Error,
    },
    /// The file is of another format.
    #[error("{path} is a `{found}` file, not a `{}` database (record one with `coldstart prefetch record`)", db::FORMAT)]
    WrongFormat {
        /// The file.
        path: PathBuf,
        /// Its `format` field.
        found: String,
    },
    /// The database is of a version this build does not read.
    #[error("{path} is prefetch database version {found}; this coldstart reads version {} only: record it again with `coldstart prefetch record`", db::VERSION)]
    UnknownVersion {
        /// The file.
        path: PathBuf,
        /// Its `version` field.
        found: u32,
    },
    /// The database breaks a rule of the format.
    #[error("{path} is not a valid prefetch database: {why}; record it again with `coldstart prefetch record`")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Which rule, and where.
        why: String,
    },
    /// The file is larger than any database coldstart writes.
    #[error("{path} is {bytes} bytes, more than any prefetch database coldstart writes ({limit} bytes): refused; record it again")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The largest database coldstart writes, bytes.
        limit: u64,
    },
    /// Writing the database failed.
    #[error("cannot write prefetch database {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why writing failed.
        source: std::io::Error,
    },
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
