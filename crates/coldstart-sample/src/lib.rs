//! Generator for the sample program: C sources for a program whose start-up behaves like a
//! large real one, built with clang and lld, plus a manifest of the truth about it.
//!
//! coldstart's profiler, layout and measurement code need a test bed whose start-up is known
//! exactly. Real programs do not say which functions they run at start-up; this one does. From
//! a seed and a [`Config`] the generator writes:
//!
//! - an executable `sample` and two shared libraries of its own, `libcs_a.so` and
//!   `libcs_b.so`, which the executable calls into at start-up;
//! - a plugin, `plugin/libcs_plugin.so`, opened with `dlopen` at start-up;
//! - data files: some read whole with `read(2)`, one mapped and touched at scattered pages;
//! - thousands of distinct `noinline` work functions, of which each workload (`--workload a`,
//!   `--workload b`) runs a hot set scattered through the code (hot functions sit among cold
//!   ones in source and link order, which is what makes layout worth doing); the two hot sets
//!   overlap by a configured share (default 80%);
//! - `sample.json`, the truth: every generated function with its module, and per workload the
//!   first-touch order of the functions it enters (per thread with `--threads N`) and the data
//!   pages it reads. Format: `docs/formats/sample.md`.
//!
//! The program prints `ready` after start-up, writes a byte to the descriptor in
//! `COLDSTART_READY_FD` and creates `COLDSTART_READY_FILE` when set, and exits 0 — or, with
//! `--stay`, waits until killed (`--listen PORT` binds 127.0.0.1:PORT before `ready`).
//!
//! ```no_run
//! use coldstart_sample::{build, Config, Sample, Size};
//! let sample = build(&Config::for_size(Size::Small, 7), "/tmp/sample".as_ref())?;
//! let a = sample.workload("a").unwrap();
//! println!("{} functions at start-up", a.startup.len());
//! let again = Sample::load("/tmp/sample")?;
//! assert_eq!(sample, again);
//! # Ok::<(), coldstart_sample::Error>(())
//! ```

mod builder;
mod config;
mod emit;
mod manifest;
mod plan;
mod rng;

use std::path::PathBuf;

use coldstart_error::Category;

pub use builder::{
    build, build_cached, cflags, check_tools, generate_sources, ldflags, workloads, CC, LLD,
};
pub use config::{Config, Size};
pub use manifest::{
    Access, BuildInfo, DataFileInfo, DataRead, Function, Module, ModuleInfo, Role, Sample,
    ThreadInfo, Workload, FORMAT, MANIFEST, VERSION,
};
pub use plan::{PAGE_SIZE, WORKLOADS};

/// Why generating, building or loading a sample failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config value out of range; the message names the field and the allowed values.
    #[error("invalid sample config: {0}")]
    Config(String),
    /// clang-19 or ld.lld-19 cannot be run.
    #[error("`{tool}` (Debian package {package}) not found: the sample program is built with clang-19 and lld-19; install them with `apt-get install clang-19 lld-19`")]
    ToolMissing {
        /// The program that is missing.
        tool: &'static str,
        /// The Debian package that provides it.
        package: &'static str,
    },
    /// A compile or link step failed.
    #[error("sample build failed at `{step}`: {detail}")]
    Tool {
        /// What was being done.
        step: String,
        /// Exit status and the end of the tool's error output.
        detail: String,
    },
    /// The output directory holds something other than a sample.
    #[error("output directory {0} is not empty and holds no sample.json: choose an empty or new directory")]
    OutputNotEmpty(PathBuf),
    /// A file operation failed.
    #[error("cannot {what}: {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The manifest is not valid JSON of the expected shape.
    #[error("cannot parse sample manifest {path}: {source}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// The manifest has another format name or an unsupported version.
    #[error("{path}: {detail}")]
    Format {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong and what to do.
        detail: String,
    },
}

impl Error {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            Error::Config(_)
            | Error::OutputNotEmpty(_)
            | Error::Manifest { .. }
            | Error::Format { .. } => Category::Usage,
            Error::ToolMissing { .. } => Category::Environment,
            Error::Tool { .. } | Error::Io { .. } => Category::Environment,
        }
    }
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::Error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tool_names_the_debian_package() {
        let e = Error::ToolMissing { tool: CC, package: "clang-19" };
        // Both tools in one line, with nothing from the checkout (an installed coldstart has
        // no scripts/setup.sh beside it).
        assert!(e.to_string().contains("apt-get install clang-19 lld-19"), "{e}");
        assert!(!e.to_string().contains("scripts/"), "{e}");
    }

    #[test]
    fn load_rejects_other_formats_and_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MANIFEST);
        std::fs::write(&path, r#"{"format": "coldstart-sample", "version": 99}"#).unwrap();
        let e = Sample::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("version 99") && e.contains("regenerate"), "{e}");
        std::fs::write(&path, r#"{"format": "coldstart-profile", "version": 1}"#).unwrap();
        let e = Sample::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("coldstart-profile"), "{e}");
        let e = Sample::load(dir.path().join("none")).unwrap_err().to_string();
        assert!(e.contains("coldstart sample -o DIR"), "{e}");
    }
}
