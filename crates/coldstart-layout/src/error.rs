//! Typed errors: each names the file or option involved and says what to do.

use std::path::PathBuf;

use coldstart_error::Category;

/// Why a layout step failed.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// A file could not be read or written.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done (`read`, `write`, ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// An input file is missing, a directory or empty.
    #[error("{what} {path} {problem}: {hint}")]
    Unusable {
        /// What the file is (`profile`, `binary`, ...).
        what: &'static str,
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
        /// What to give instead.
        hint: &'static str,
    },
    /// A profile could not be parsed.
    #[error("{path} is not a usable coldstart profile: {message}")]
    Profile {
        /// The profile.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A profile of an unknown format version.
    #[error("{path} is profile version {found}; this coldstart reads version 1 only: re-record it with `coldstart profile`")]
    ProfileVersion {
        /// The profile.
        path: PathBuf,
        /// Its `version` field.
        found: u32,
    },
    /// The ELF file could not be read.
    #[error(transparent)]
    Elf(#[from] coldstart_elf::ElfError),
    /// No module of the profile matches the binary or the `--module` given.
    #[error("no module named {wanted} in the profile (modules: {available}); pass --module with one of them")]
    NoSuchModule {
        /// The module asked for.
        wanted: String,
        /// The profile's modules.
        available: String,
    },
    /// The profile touched no function of the chosen module.
    #[error("the profile has no touched functions for {module}: was it recorded with symbols (not stripped)?")]
    EmptyOrder {
        /// The module.
        module: String,
    },
    /// An order format that the named linker cannot take.
    #[error("{linker} cannot take a function order: {reason}. Instead: {alternative}")]
    UnsupportedLinker {
        /// The linker.
        linker: String,
        /// Why it cannot.
        reason: String,
        /// What to use instead.
        alternative: String,
    },
    /// The binary has no static relocations, which BOLT needs.
    #[error("{0} has no static relocations (it was not linked with --emit-relocs): BOLT can move functions only when it can fix every reference to them, as the paper's own rewriting tool could. Relink with -Wl,--emit-relocs (or use `coldstart link`, which relinks with the order directly)", .binary.display())]
    NoRelocations {
        /// The binary.
        binary: PathBuf,
    },
    /// An external tool (llvm-bolt, the user's build) could not be run or failed.
    #[error("{tool} failed: {message}")]
    Tool {
        /// The tool.
        tool: String,
        /// What failed, with its output.
        message: String,
    },
    /// Bad option value.
    #[error("{0}")]
    Invalid(String),
}

impl LayoutError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            LayoutError::Invalid(_)
            | LayoutError::NoSuchModule { .. }
            | LayoutError::UnsupportedLinker { .. }
            | LayoutError::Profile { .. }
            | LayoutError::Unusable { .. }
            | LayoutError::ProfileVersion { .. }
            | LayoutError::EmptyOrder { .. }
            | LayoutError::NoRelocations { .. } => Category::Usage,
            LayoutError::Elf(e) => e.category(),
            // Reading is of the user's inputs; writing and tools are the machine's.
            LayoutError::Io { action, .. } if action.starts_with("read") => Category::Usage,
            LayoutError::Io { .. } | LayoutError::Tool { .. } => Category::Environment,
        }
    }
}

impl LayoutError {
    pub(crate) fn io(action: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        match (action, coldstart_fs::unusable_text_input(path, &source)) {
            ("read order file", Some(problem)) => LayoutError::Unusable {
                what: "order file",
                path: path.to_owned(),
                problem,
                hint: "give the file `coldstart order -o FILE` wrote",
            },
            ("read profile", Some(problem)) => LayoutError::unusable_profile(path, problem),
            _ => LayoutError::Io { action, path: path.to_owned(), source },
        }
    }

    /// A profile that is missing, a directory or empty.
    pub(crate) fn unusable_profile(path: &std::path::Path, problem: &'static str) -> Self {
        LayoutError::Unusable {
            what: "profile",
            path: path.to_owned(),
            problem,
            hint: "give a profile file (`coldstart profile -o P.json` writes one)",
        }
    }
}
