//! The hot list: the byte ranges of a program's files that start-up reads, in first-touch order.
//!
//! It is the input `pack` uses to build the hot set, and the output of a mount's `--record`, so
//! a bundle can be re-packed from what a real start actually read (the way eStargz builds its
//! prefetch list). Page profiles from `coldstart profile` are converted to this form.
//!
//! ```json
//! {"format": "coldstart-hot-list", "version": 1,
//!  "touches": [{"path": "bin/app", "offset": 0, "length": 4096}]}
//! ```

use std::path::Path;

use coldstart_error::Category;
use serde::{Deserialize, Serialize};

/// The `format` name of a hot list.
pub const FORMAT: &str = "coldstart-hot-list";
/// The hot-list version this build reads and writes.
pub const VERSION: u32 = 1;

/// Byte ranges in first-touch order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotList {
    pub format: String,
    pub version: u32,
    pub touches: Vec<Touch>,
}

impl Default for HotList {
    fn default() -> Self {
        HotList { format: FORMAT.into(), version: VERSION, touches: Vec::new() }
    }
}

/// One range of one file, relative to the packed directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Touch {
    pub path: String,
    pub offset: u64,
    pub length: u64,
}

/// Why a hot list could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HotListError {
    #[error("cannot read hot list {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("cannot write hot list {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("hot list {path} is not valid JSON: {}", crate::manifest::shown(&source.to_string()))]
    Json { path: String, source: serde_json::Error },
    #[error("hot list {path} has format `{}`, not `{FORMAT}`", crate::manifest::shown(format))]
    Format { path: String, format: String },
    #[error("hot list {path} is version {version}; this build reads version {VERSION}")]
    Version { path: String, version: u32 },
}

impl HotListError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            HotListError::Read { .. }
            | HotListError::Json { .. }
            | HotListError::Format { .. }
            | HotListError::Version { .. } => Category::Usage,
            HotListError::Write { .. } => Category::Environment,
        }
    }
}

impl HotList {
    /// Reads and checks a hot list file.
    pub fn read(path: &Path) -> Result<HotList, HotListError> {
        let p = path.display().to_string();
        let bytes =
            std::fs::read(path).map_err(|source| HotListError::Read { path: p.clone(), source })?;
        HotList::parse(&p, &bytes)
    }

    /// Reads and checks a hot list's bytes; `path` names it in errors.
    pub fn parse(path: &str, bytes: &[u8]) -> Result<HotList, HotListError> {
        let p = path.to_owned();
        let list: HotList = serde_json::from_slice(bytes)
            .map_err(|source| HotListError::Json { path: p.clone(), source })?;
        if list.format != FORMAT {
            return Err(HotListError::Format { path: p, format: list.format });
        }
        if list.version != VERSION {
            return Err(HotListError::Version { path: p, version: list.version });
        }
        Ok(list)
    }

    /// Writes the list atomically (temporary file, then rename), with
    /// [`coldstart_fs::write_atomic`]: a device or pipe such as `/dev/null` is written into,
    /// never replaced.
    pub fn write(&self, path: &Path) -> Result<(), HotListError> {
        let p = path.display().to_string();
        let mut bytes = serde_json::to_vec_pretty(self).expect("a hot list serialises");
        bytes.push(b'\n');
        coldstart_fs::write_atomic(path, &bytes)
            .map_err(|source| HotListError::Write { path: p, source })
    }
}
