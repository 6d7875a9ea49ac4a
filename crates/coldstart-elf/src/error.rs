//! Typed errors: each names the file and says what to do.

use std::path::PathBuf;

use coldstart_error::Category;

/// Why an ELF file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file could not be opened or mapped.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not ELF at all (a script, a text file, an archive).
    #[error("{path} is not an ELF file (no \\x7fELF magic); give the program binary, not a script or wrapper")]
    NotElf { path: PathBuf },
    /// A 32-bit ELF file.
    #[error(
        "{path} is a 32-bit ELF file; coldstart supports 64-bit ELF only (rebuild for x86-64)"
    )]
    Unsupported32Bit { path: PathBuf },
    /// The headers are damaged or truncated.
    #[error("{path} is a malformed ELF file: {message}")]
    Malformed { path: PathBuf, message: String },
}

impl ElfError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ElfError::Io { .. }
            | ElfError::NotElf { .. }
            | ElfError::Unsupported32Bit { .. }
            | ElfError::Malformed { .. } => Category::Usage,
        }
    }
}

impl ElfError {
    pub(crate) fn malformed(path: &std::path::Path, err: impl std::fmt::Display) -> Self {
        ElfError::Malformed { path: path.to_owned(), message: err.to_string() }
    }
}
