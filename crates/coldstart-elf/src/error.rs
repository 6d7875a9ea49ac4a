//! Typed errors: each names the file and says what to do.

use std::path::PathBuf;

use coldstart_error::Category;

/// Why an ELF file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file could not be opened or mapped.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The path is missing, a directory or an empty file.
    #[error(
        "{path} {problem}: give the program's binary, an ELF file (such as /usr/bin/python3.11)"
    )]
    Unusable {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it (`does not exist`, `is a directory`, ...).
        problem: &'static str,
    },
    /// The file is not ELF at all (a script, a text file, an archive).
    #[error("{path} is not an ELF file (no \\x7fELF magic); give the program binary, not a script or wrapper")]
    NotElf {
        /// The file.
        path: PathBuf,
    },
    /// A 32-bit ELF file.
    #[error(
        "{path} is a 32-bit ELF file; coldstart supports 64-bit ELF only (rebuild for x86-64)"
    )]
    Unsupported32Bit {
        /// The file.
        path: PathBuf,
    },
    /// The headers are damaged or truncated.
    #[error("{path} is a malformed ELF file: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What the ELF reader found wrong.
        message: String,
    },
}

impl ElfError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ElfError::Io { .. }
            | ElfError::Unusable { .. }
            | ElfError::NotElf { .. }
            | ElfError::Unsupported32Bit { .. }
            | ElfError::Malformed { .. } => Category::Usage,
        }
    }
}

impl ElfError {
    /// `path`, whose bytes do not start with the ELF magic, as the error that says why: it is
    /// empty, or not ELF.
    pub fn not_elf(path: &std::path::Path, bytes: &[u8]) -> Self {
        match bytes.is_empty() {
            true => ElfError::Unusable { path: path.to_owned(), problem: "is empty" },
            false => ElfError::NotElf { path: path.to_owned() },
        }
    }

    /// The error of reading `path`: the path in words when it is missing or a directory.
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        match coldstart_fs::unusable_input(path) {
            Some(problem) => ElfError::Unusable { path: path.to_owned(), problem },
            None => ElfError::Io { path: path.to_owned(), source },
        }
    }

    pub(crate) fn malformed(path: &std::path::Path, err: impl std::fmt::Display) -> Self {
        ElfError::Malformed { path: path.to_owned(), message: err.to_string() }
    }
}
