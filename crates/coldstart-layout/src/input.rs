//! The input of every layout step: per workload, the functions start-up touched in each
//! module, in first-touch order, and (when recorded) the file pages it touched.
//!
//! This is deliberately smaller than the profile file: the ordering algorithms, the
//! evaluation and the verification only need names, sizes and order, so they can be fed
//! from a recorded profile ([`Workload::read_profile`]) or built by hand in tests.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::LayoutError;

/// One workload: what one start-up touched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// A label (`a`, `open-file`, ...).
    pub name: String,
    /// Weight when several workloads are merged (1.0 unless told otherwise).
    pub weight: f64,
    /// The modules whose functions it touched.
    pub modules: Vec<ModuleTouches>,
    /// File pages start-up touched, per file, in first-touch order (empty when the profile
    /// has no page data).
    #[serde(default)]
    pub pages: Vec<FilePages>,
}

/// The touched functions of one module (the executable or a library).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleTouches {
    /// The module.
    pub path: PathBuf,
    /// Its GNU build-id, hex, as the profile recorded it.
    pub build_id: Option<String>,
    /// Touched functions in first-touch order.
    pub functions: Vec<Touched>,
}

/// One touched function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Touched {
    /// Raw (mangled) names of the symbols at its entry, the preferred one first.
    pub names: Vec<String>,
    /// Entry address as linked.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Nanoseconds from exec to the first call.
    pub first_touch_ns: u64,
}

impl Touched {
    /// The name the function is known by in orders (its preferred symbol).
    pub fn name(&self) -> &str {
        self.names.first().map(String::as_str).unwrap_or("")
    }
}

/// Pages of one file start-up touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePages {
    /// The file.
    pub path: PathBuf,
    /// Page indexes (file offset / 4096) in memory for start-up: faulted, mapped around a
    /// fault, or read; first-touch order, no repeats.
    pub pages: Vec<u64>,
    /// The pages start-up itself faulted on (a subset of `pages`), first-touch order.
    #[serde(default)]
    pub faulted: Vec<u64>,
}

impl Workload {
    /// The module matching `binary`: same path, else same file name; `module` (a path or a
    /// file name) overrides the choice. Without either match, an error lists the modules.
    pub fn module(
        &self,
        binary: Option<&Path>,
        module: Option<&str>,
    ) -> Result<&ModuleTouches, LayoutError> {
        find_module(&self.modules, binary, module)
    }

    /// The touched pages of the file `path` (matched by path, else file name).
    pub fn pages_of(&self, path: &Path) -> Option<&FilePages> {
        self.pages
            .iter()
            .find(|p| p.path == path)
            .or_else(|| self.pages.iter().find(|p| p.path.file_name() == path.file_name()))
    }

    /// Read a `coldstart-profile` file. A merged profile with its input workloads kept
    /// yields one workload per input; any other profile yields one.
    pub fn read_profile(path: &Path) -> Result<Vec<Workload>, LayoutError> {
        let profile =
            coldstart_profile_format::Profile::read(path).map_err(|e| profile_error(path, e))?;
        Ok(Workload::from_profile(profile))
    }

    /// Parse a profile's JSON text; `path` names it in errors.
    pub fn from_profile_json(path: &Path, text: &str) -> Result<Vec<Workload>, LayoutError> {
        let profile = coldstart_profile_format::Profile::from_json(path, text)
            .map_err(|e| profile_error(path, e))?;
        Ok(Workload::from_profile(profile))
    }

    /// The adapter from the profile format: the one place that knows its fields.
    pub fn from_profile(profile: coldstart_profile_format::Profile) -> Vec<Workload> {
        if !profile.workloads.is_empty() {
            return profile.workloads.into_iter().flat_map(Workload::from_profile).collect();
        }
        let modules = profile
            .modules
            .into_iter()
            .map(|m| ModuleTouches {
                path: m.path,
                build_id: m.build_id,
                functions: m
                    .functions
                    .into_iter()
                    .filter(|t| !t.names.is_empty())
                    .map(|t| Touched {
                        names: t.names,
                        address: t.address,
                        size: t.size,
                        first_touch_ns: t.first_touch_ns,
                    })
                    .collect(),
            })
            .collect();
        let mut pages = Vec::new();
        if let Some(p) = profile.pages {
            // Per file: every page in memory, and the pages start-up faulted on.
            type Seen = (Vec<u64>, std::collections::HashSet<u64>);
            let mut per_file: std::collections::BTreeMap<usize, (Seen, Seen)> =
                std::collections::BTreeMap::new();
            for a in &p.accesses {
                let (all, faulted) = per_file.entry(a.file).or_default();
                // The format bounds every access (`MAX_FILE_SIZE`).
                for page in a.page..a.page.saturating_add(a.count.max(1)) {
                    if all.1.insert(page) {
                        all.0.push(page);
                    }
                    if a.event == "fault" && faulted.1.insert(page) {
                        faulted.0.push(page);
                    }
                }
            }
            for (file, ((list, _), (faulted, _))) in per_file {
                if let Some(f) = p.files.get(file) {
                    pages.push(FilePages { path: f.path.clone(), pages: list, faulted });
                }
            }
        }
        vec![Workload {
            name: if profile.workload.is_empty() { "workload".into() } else { profile.workload },
            weight: 1.0,
            modules,
            pages,
        }]
    }
}

fn profile_error(path: &Path, e: coldstart_profile_format::FormatError) -> LayoutError {
    match e {
        coldstart_profile_format::FormatError::UnknownVersion { found, .. } => {
            LayoutError::ProfileVersion { path: path.to_owned(), found }
        }
        coldstart_profile_format::FormatError::Read { source, .. } => {
            LayoutError::io("read profile", path, source)
        }
        coldstart_profile_format::FormatError::Unusable { problem, .. } => {
            LayoutError::unusable_profile(path, problem)
        }
        coldstart_profile_format::FormatError::Parse { source, .. } => {
            LayoutError::Profile { path: path.to_owned(), message: format!("not JSON ({source})") }
        }
        other => LayoutError::Profile { path: path.to_owned(), message: other.to_string() },
    }
}

/// Find a module by `--module` (path or file name), else by the binary's path or file
/// name, else (no binary given) the executable: the first module not named like a shared
/// object (`*.so*`), or the first module.
pub fn find_module<'a>(
    modules: &'a [ModuleTouches],
    binary: Option<&Path>,
    module: Option<&str>,
) -> Result<&'a ModuleTouches, LayoutError> {
    let names =
        || modules.iter().map(|m| m.path.display().to_string()).collect::<Vec<_>>().join(", ");
    if let Some(wanted) = module {
        return modules
            .iter()
            .find(|m| m.path == Path::new(wanted))
            .or_else(|| modules.iter().find(|m| m.path.file_name().is_some_and(|f| f == wanted)))
            .ok_or_else(|| LayoutError::NoSuchModule {
                wanted: wanted.to_owned(),
                available: names(),
            });
    }
    if let Some(binary) = binary {
        let canonical = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.to_owned());
        return modules
            .iter()
            .find(|m| m.path == canonical || m.path == binary)
            .or_else(|| modules.iter().find(|m| m.path.file_name() == binary.file_name()))
            .ok_or_else(|| LayoutError::NoSuchModule {
                wanted: binary.display().to_string(),
                available: names(),
            });
    }
    // The executable: modules are listed in first-touch order, so the dynamic loader often
    // comes first; the executable is the first module not named like a shared object.
    let is_shared = |m: &&ModuleTouches| {
        m.path.file_name().is_some_and(|f| f.to_string_lossy().contains(".so"))
    };
    modules
        .iter()
        .find(|m| !is_shared(m))
        .or_else(|| modules.first())
        .ok_or_else(|| LayoutError::NoSuchModule { wanted: "(any)".into(), available: names() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = r#"{
      "format": "coldstart-profile", "version": 1, "workload": "a",
      "created_unix": 0, "duration_ns": 1, "stop": {"kind": "exit", "code": 0},
      "modules": [
        {"path": "/tmp/prog", "build_id": "ab", "size": 1, "mtime": 0, "load_bias": 0,
         "symbols": "symtab", "functions_total": 2, "functions": [
          {"address": 4096, "size": 10, "names": ["main"], "first_touch_ns": 5, "pid": 1, "tid": 1, "ordinal": 0},
          {"address": 8192, "size": 20, "names": ["helper", "helper_alias"], "first_touch_ns": 9, "pid": 1, "tid": 1, "ordinal": 1}
        ]}
      ],
      "pages": {"source": "tracefs", "sampled": false,
        "files": [{"path": "/tmp/prog", "size": 1, "mtime": 0, "build_id": null, "dev": "0:1", "ino": 1}],
        "accesses": [{"file": 0, "page": 3, "count": 2, "t_ns": 1, "event": "fault", "pid": 1},
                     {"file": 0, "page": 4, "t_ns": 2, "event": "fault", "pid": 1}]}
    }"#;

    #[test]
    fn a_profile_becomes_one_workload_with_pages_deduplicated() {
        let w = Workload::from_profile_json(Path::new("p.json"), PROFILE).unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].name, "a");
        let m = w[0].module(Some(Path::new("/elsewhere/prog")), None).unwrap();
        assert_eq!(m.functions.iter().map(Touched::name).collect::<Vec<_>>(), ["main", "helper"]);
        assert_eq!(w[0].pages[0].pages, [3, 4]);
        assert_eq!(w[0].pages[0].faulted, [3, 4]);
    }

    #[test]
    fn without_a_binary_the_executable_is_chosen_over_the_loader() {
        let m = |p: &str| ModuleTouches { path: p.into(), build_id: None, functions: vec![] };
        let modules = [m("/lib/ld-linux-x86-64.so.2"), m("/lib/libc.so.6"), m("/usr/bin/prog")];
        assert_eq!(find_module(&modules, None, None).unwrap().path, Path::new("/usr/bin/prog"));
    }

    #[test]
    fn an_unknown_version_is_refused_by_name() {
        let text = PROFILE.replace("\"version\": 1", "\"version\": 7");
        let err = Workload::from_profile_json(Path::new("p.json"), &text).unwrap_err();
        assert!(err.to_string().contains("version 7"), "{err}");
    }

    #[test]
    fn a_missing_module_lists_the_ones_there() {
        let w = Workload::from_profile_json(Path::new("p.json"), PROFILE).unwrap();
        let err = w[0].module(None, Some("libfoo.so")).unwrap_err();
        assert!(err.to_string().contains("/tmp/prog"), "{err}");
    }
}
