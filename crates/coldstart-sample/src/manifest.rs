//! The truth manifest, `sample.json`: what was built and what each workload runs at start-up.
//!
//! Other crates' tests compare what they observe (a profile, a page trace, a layout) against
//! this file, so it states exactly the generated functions each workload enters, in first-touch
//! order per thread, and the data pages it reads. Format: docs/formats/sample.md.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::Error;

/// The `format` field of the manifest.
pub const FORMAT: &str = "coldstart-sample";
/// The manifest version this crate writes and reads.
pub const VERSION: u32 = 1;
/// The manifest's file name inside a sample directory.
pub const MANIFEST: &str = "sample.json";

/// The four modules of the sample program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Module {
    /// The executable, `sample`.
    Exe,
    /// The first shared library, `libcs_a.so` (linked, loaded by the dynamic loader).
    Liba,
    /// The second shared library, `libcs_b.so`.
    Libb,
    /// The plugin, `plugin/libcs_plugin.so`, opened with `dlopen` at start-up.
    Plugin,
}

impl Module {
    /// All modules, in manifest order.
    pub const ALL: [Module; 4] = [Module::Exe, Module::Liba, Module::Libb, Module::Plugin];

    /// The short name used in function names and the manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Module::Exe => "exe",
            Module::Liba => "liba",
            Module::Libb => "libb",
            Module::Plugin => "plugin",
        }
    }

    /// Path of the module's file relative to the sample directory.
    pub fn file(self) -> &'static str {
        match self {
            Module::Exe => "sample",
            Module::Liba => "libcs_a.so",
            Module::Libb => "libcs_b.so",
            Module::Plugin => "plugin/libcs_plugin.so",
        }
    }
}

/// What a function is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Generated filler whose placement layout is about (hot in some workload, or cold).
    Work,
    /// The program's own machinery: `main`, workload drivers, data and plugin loading, threads.
    Driver,
}

/// How a data file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// `read(2)` of the whole file.
    Read,
    /// `mmap(2)` and one byte touched in each listed page.
    Mmap,
}

/// One generated function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Function {
    /// Symbol name (unique across modules).
    pub name: String,
    /// Module that defines it.
    pub module: Module,
    /// Work or driver.
    pub role: Role,
}

/// One built module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInfo {
    /// Which module.
    pub module: Module,
    /// File path relative to the sample directory.
    pub path: String,
    /// Size of its `.text` section in bytes.
    pub text_bytes: u64,
    /// Generated functions it defines (work and driver).
    pub functions: usize,
}

/// One data file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFileInfo {
    /// Path relative to the sample directory.
    pub path: String,
    /// How workloads read it.
    pub access: Access,
    /// Size in bytes.
    pub size: u64,
}

/// Data one workload reads at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataRead {
    /// Path relative to the sample directory.
    pub path: String,
    /// Read whole, or mapped and touched.
    pub access: Access,
    /// Pages (of `page_size` bytes) in the order the program touches them; for `read`, every
    /// page of the file in order.
    pub pages: Vec<u64>,
}

/// How `--threads N` distributes the thread groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// Number of thread groups per workload, and the largest N accepted.
    pub groups: usize,
    /// Entry function of worker thread t (0-based), `cs_thread_entry_t`.
    pub entries: Vec<String>,
}

/// One workload: a command-line mode and what its start-up runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// `a`, `b`.
    pub name: String,
    /// Arguments that select it (`--workload a`).
    pub args: Vec<String>,
    /// Generated functions entered at start-up without `--threads`, in first-touch order.
    pub startup: Vec<String>,
    /// The main thread's part, in first-touch order (the same with or without `--threads`).
    pub main_thread: Vec<String>,
    /// Thread groups in first-touch order, each starting with its driver `cs_group_W_G`.
    /// Without `--threads` they run on the main thread after `main_thread`, in this order.
    pub thread_groups: Vec<Vec<String>>,
    /// Data files read, in order.
    pub data: Vec<DataRead>,
}

impl Workload {
    /// First-touch order per thread when run with `--threads n` (`1 <= n <= groups`):
    /// element 0 is the main thread, element t (1..=n) is worker thread t-1, which runs
    /// `cs_thread_entry_{t-1}` and then groups t-1, t-1+n, t-1+2n, ... in that order.
    /// The order between threads is not defined.
    pub fn threads(&self, info: &ThreadInfo, n: usize) -> Result<Vec<Vec<String>>, Error> {
        if n == 0 || n > info.groups {
            return Err(Error::Config(format!(
                "--threads {n}: the sample program accepts 1 to {} threads",
                info.groups
            )));
        }
        let mut out = vec![self.main_thread.clone()];
        for t in 0..n {
            let mut list = vec![info.entries[t].clone()];
            for g in (t..self.thread_groups.len()).step_by(n) {
                list.extend(self.thread_groups[g].iter().cloned());
            }
            out.push(list);
        }
        Ok(out)
    }

    /// The set of functions entered at start-up (the same with or without threads, except
    /// the thread entry functions).
    pub fn startup_set(&self) -> HashSet<&str> {
        self.startup.iter().map(String::as_str).collect()
    }
}

/// A built sample program and the truth about it, as read from `sample.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The directory the sample lives in, absolute (not stored; set by [`Sample::load`] and
    /// [`build`](crate::build)).
    #[serde(skip)]
    pub dir: PathBuf,
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// The config it was generated from (includes the seed).
    pub config: Config,
    /// Page size the data pages are counted in.
    pub page_size: u64,
    /// The compiler and flags used (`src/Makefile` rebuilds with them).
    pub build: BuildInfo,
    /// The built modules.
    pub modules: Vec<ModuleInfo>,
    /// Every generated function (work and driver), in source order per module.
    pub functions: Vec<Function>,
    /// The data files.
    pub data_files: Vec<DataFileInfo>,
    /// How `--threads` maps groups to threads.
    pub threads: ThreadInfo,
    /// The workloads.
    pub workloads: Vec<Workload>,
}

/// How the sample was compiled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildInfo {
    /// The C compiler.
    pub cc: String,
    /// Flags of every compile.
    pub cflags: Vec<String>,
    /// Flags of every link.
    pub ldflags: Vec<String>,
    /// Digest (FNV-1a 64, hex) of the generated sources and Makefile.
    pub sources_digest: String,
}

impl Sample {
    /// Read `DIR/sample.json`, checking format and version.
    pub fn load(dir: impl AsRef<Path>) -> Result<Sample, Error> {
        let dir = dir.as_ref();
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            what: "read the sample manifest (build the sample with `coldstart sample -o DIR`)",
            path: path.clone(),
            source,
        })?;
        #[derive(Deserialize)]
        struct Head {
            format: String,
            version: u32,
        }
        let head: Head = serde_json::from_str(&text)
            .map_err(|source| Error::Manifest { path: path.clone(), source })?;
        if head.format != FORMAT {
            return Err(Error::Format {
                path,
                detail: format!("format is `{}`, expected `{FORMAT}`", head.format),
            });
        }
        if head.version != VERSION {
            return Err(Error::Format {
                path,
                detail: format!(
                    "version {} is not supported (this coldstart reads version {VERSION}); regenerate the sample",
                    head.version
                ),
            });
        }
        let mut sample: Sample =
            serde_json::from_str(&text).map_err(|source| Error::Manifest { path, source })?;
        sample.dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        Ok(sample)
    }

    /// Absolute path of a module's file.
    pub fn module_path(&self, module: Module) -> PathBuf {
        self.dir.join(module.file())
    }

    /// Path of the executable.
    pub fn exe(&self) -> PathBuf {
        self.module_path(Module::Exe)
    }

    /// Copy the files the program needs to run (executable, libraries, plugin, data and
    /// `sample.json`; not its sources) into `dest`, as a user would ship them: the directory
    /// `coldstart experiment` packs. Returns `dest`'s sample.
    pub fn install(&self, dest: &Path) -> Result<Sample, Error> {
        fn copy(from: &Path, to: &Path) -> std::io::Result<()> {
            if from.is_dir() {
                std::fs::create_dir_all(to)?;
                for e in std::fs::read_dir(from)? {
                    let e = e?;
                    copy(&e.path(), &to.join(e.file_name()))?;
                }
                Ok(())
            } else {
                std::fs::copy(from, to).map(drop)
            }
        }
        let _ = std::fs::remove_dir_all(dest);
        std::fs::create_dir_all(dest).map_err(|source| Error::Io {
            what: "create the directory to install the sample in",
            path: dest.to_owned(),
            source,
        })?;
        for name in ["sample", "libcs_a.so", "libcs_b.so", "plugin", "data", MANIFEST] {
            copy(&self.dir.join(name), &dest.join(name)).map_err(|source| Error::Io {
                what: "copy the sample's files",
                path: self.dir.join(name),
                source,
            })?;
        }
        Sample::load(dest)
    }

    /// A workload by name.
    pub fn workload(&self, name: &str) -> Option<&Workload> {
        self.workloads.iter().find(|w| w.name == name)
    }

    /// A command that runs the program in `workload` (no readiness options set).
    pub fn command(&self, workload: &str) -> Result<Command, Error> {
        let w = self.workload(workload).ok_or_else(|| {
            Error::Config(format!(
                "no workload `{workload}` in the sample (it has {})",
                self.workloads.iter().map(|w| w.name.as_str()).collect::<Vec<_>>().join(", ")
            ))
        })?;
        let mut cmd = Command::new(self.exe());
        cmd.args(&w.args);
        Ok(cmd)
    }

    /// Module of every generated function, by name. Symbols not in this map (crt and
    /// linker-made functions such as `_start`, `_init`, `frame_dummy`) are not generated and
    /// are outside the truth.
    pub fn function_modules(&self) -> HashMap<&str, Module> {
        self.functions.iter().map(|f| (f.name.as_str(), f.module)).collect()
    }

    /// Work functions both workloads run over the mean size of the two start-up sets
    /// (work functions only; the two sets have equal size by construction).
    pub fn overlap(&self, a: &str, b: &str) -> Option<f64> {
        let work: HashSet<&str> = self
            .functions
            .iter()
            .filter(|f| f.role == Role::Work)
            .map(|f| f.name.as_str())
            .collect();
        fn set<'s>(w: &'s Workload, work: &HashSet<&str>) -> HashSet<&'s str> {
            w.startup.iter().map(String::as_str).filter(|n| work.contains(n)).collect()
        }
        let sa = set(self.workload(a)?, &work);
        let sb = set(self.workload(b)?, &work);
        let mean = (sa.len() + sb.len()) as f64 / 2.0;
        Some(sa.intersection(&sb).count() as f64 / mean.max(1.0))
    }

    /// Total `.text` bytes of all modules.
    pub fn text_bytes(&self) -> u64 {
        self.modules.iter().map(|m| m.text_bytes).sum()
    }
}
