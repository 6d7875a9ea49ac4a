//! The profile file: format `coldstart-profile`, version 1 (docs/formats/profile.md).
//!
//! This crate is the profile's format alone: the profiler writes it, and `order`, `pack` and
//! every later step read it, without depending on the profiler itself.
//!
//! A profile is plain JSON so people can read it and every later step (order, pack,
//! prefetch) can consume it. It names each module by path *and* content (size, mtime,
//! build-id), so a profile is never silently applied to a different build.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use coldstart_error::Category;
use serde::{Deserialize, Serialize};

/// The format name written in every profile.
pub const FORMAT: &str = "coldstart-profile";
/// The only version this build reads and writes.
pub const VERSION: u32 = 1;

/// One profile: a recorded workload, or several merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`] when written by this build.
    pub version: u32,
    /// The workload label (`--workload`), `merged` for a merge.
    pub workload: String,
    /// The profiled command line (empty for a merge).
    #[serde(default)]
    pub command: Vec<String>,
    /// When the profile was recorded, seconds since the Unix epoch.
    pub created_unix: u64,
    /// Time from exec to the end of profiling (readiness, exit or crash), nanoseconds.
    pub duration_ns: u64,
    /// Why profiling stopped.
    pub stop: Stop,
    /// Modules in the order they were first touched, each with its touched functions in
    /// first-touch order. For a merge: the merged order.
    pub modules: Vec<Module>,
    /// The file pages start-up touched, when recorded (`--pages`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<PageProfile>,
    /// Things the user should know (stripped modules, lost trace events, ...).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The programs the processes of the run ran, in the order they started, and whether
    /// each is in the profile: what was followed and what was not. Empty for a merge (each
    /// workload keeps its own) and in profiles recorded before coldstart said so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    /// For a merge: each input workload, unchanged (so a later step can weigh them or hold
    /// one out). Empty for a recorded profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<Profile>,
}

/// A program one process of the run ran: the command's own, one it executed, or the copy of
/// its parent a forked child is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The process.
    pub pid: i32,
    /// The process that started it (its parent; for the command, coldstart).
    pub parent: i32,
    /// The program file.
    pub path: PathBuf,
    /// How the process came to run it.
    pub via: Via,
    /// Whether the functions it ran are in the profile.
    pub profiled: bool,
}

/// How a process came to run a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// The profiled command itself.
    Start,
    /// It executed the program (`execve`).
    Exec,
    /// It is a forked copy of its parent, running its parent's program.
    Fork,
}

/// Why profiling stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Stop {
    /// The readiness signal fired; the program was detached (and ran on) or killed.
    Ready {
        /// The signal, as given.
        signal: String,
        /// Whether the program was killed (else it ran on, detached).
        killed: bool,
    },
    /// The program exited with this status.
    Exit {
        /// The exit status.
        code: i32,
    },
    /// The program was killed by a signal (a crash: SIGSEGV, SIGABRT, ...).
    Crash {
        /// The signal's name (`SIGSEGV`).
        signal: String,
        /// The process it killed.
        pid: i32,
        /// Where it hit, when known.
        fault: Option<Fault>,
    },
    /// Readiness did not come in time; the program was killed.
    Timeout {
        /// The timeout.
        seconds: f64,
    },
    /// Stops of several workloads (a merge).
    Merged,
}

/// Where a fatal signal hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// The thread the signal hit.
    pub tid: i32,
    /// Instruction pointer at the signal.
    pub ip: u64,
    /// Module and function holding `ip`, when known.
    pub location: Option<String>,
}

/// One ELF module (the executable or a shared library).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Module {
    /// The file.
    pub path: PathBuf,
    /// Its GNU build-id, hex, when it has one.
    pub build_id: Option<String>,
    /// File size in bytes.
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Load address minus linked address, in the first process that loaded it.
    pub load_bias: u64,
    /// Where the symbols came from: `symtab`, `dynsym`, `debug-file:PATH` or `none`.
    pub symbols: String,
    /// Number of functions with a breakpoint (all known functions of the module).
    pub functions_total: usize,
    /// Touched functions in first-touch order.
    pub functions: Vec<Touch>,
}

/// One touched function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Touch {
    /// Entry address as linked (add `load_bias` for the run-time address).
    pub address: u64,
    /// Size in bytes, as the symbol gives it.
    pub size: u64,
    /// Raw names of every symbol at this address (aliases), the preferred one first.
    pub names: Vec<String>,
    /// Nanoseconds from exec to the first call.
    pub first_touch_ns: u64,
    /// The process that called it first.
    pub pid: i32,
    /// The thread that called it first.
    pub tid: i32,
    /// Position in the first-touch order over all modules, from 0.
    pub ordinal: u64,
    /// For a merge: the workloads that touched the function.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<String>,
}

/// `pages.source` of an exact page profile: traced on a private copy of the files start-up
/// reads, with read-ahead off; each 4 KiB page start-up touched once, at its first touch.
pub const SOURCE_EXACT: &str = "exact";
/// `pages.source` of a page profile traced where the files are: what the page cache brought
/// in, read-ahead and fault-around included.
pub const SOURCE_TRACEFS: &str = "tracefs";
/// `pages.source` of sampled page faults (without root).
pub const SOURCE_PERF: &str = "perf";
/// `pages.source` of a merge of profiles recorded in different ways.
pub const SOURCE_MERGED: &str = "merged";

/// File pages touched during start-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageProfile {
    /// How the pages were recorded, and so how far they can be trusted: [`SOURCE_EXACT`],
    /// [`SOURCE_TRACEFS`], [`SOURCE_PERF`], or for a merge the source its inputs share, else
    /// [`SOURCE_MERGED`].
    pub source: String,
    /// Whether `accesses` is a sample rather than every access.
    pub sampled: bool,
    /// The files the accesses name (`accesses[].file` indexes this).
    pub files: Vec<PageFile>,
    /// Page accesses in order.
    pub accesses: Vec<PageAccess>,
    /// Events the kernel dropped (ring buffer overruns); 0 when complete.
    #[serde(default)]
    pub lost_events: u64,
}

impl PageProfile {
    /// Whether the pages are exactly those start-up touched, at 4 KiB, each once in
    /// first-touch order (see [`SOURCE_EXACT`]); files the exact run found outside its copy
    /// are named in the profile's warnings.
    pub fn is_exact(&self) -> bool {
        self.source == SOURCE_EXACT
    }
}

/// A file named by path and content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageFile {
    /// The file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Its GNU build-id, hex, for an ELF file that has one.
    pub build_id: Option<String>,
    /// Device (`major:minor`) the trace named it by.
    pub dev: String,
    /// Inode the trace named it by.
    pub ino: u64,
}

/// Pages of one ELF section that start-up touched (computed from a page profile and the
/// file, see `coldstart_profile::pages::section_pages`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionPages {
    /// The section (`.text`, `.rodata`, ...).
    pub name: String,
    /// Pages the section spans in the file.
    pub pages: u64,
    /// Of those, pages touched.
    pub touched: u64,
}

/// One page access.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageAccess {
    /// Index into `files`.
    pub file: usize,
    /// Page index in the file (offset / 4096).
    pub page: u64,
    /// Number of consecutive pages (fault-around maps several at once).
    #[serde(default = "one")]
    pub count: u64,
    /// Nanoseconds from exec.
    pub t_ns: u64,
    /// `fault`, `map` (fault-around) or `read` (added to the page cache). In an exact
    /// profile: `fault` (first touched through a mapping) or `read` (first touched by
    /// `read(2)` or by the kernel for the program, as `execve` does).
    pub event: String,
    /// The process it happened in.
    pub pid: i32,
}

fn one() -> u64 {
    1
}

/// Errors reading, checking or writing a profile.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The file could not be read.
    #[error("cannot read profile {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The path is missing, a directory or empty.
    #[error(
        "profile {path} {problem}: give a profile file (`coldstart profile -o P.json` writes one)"
    )]
    Unusable {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The file is not JSON of a profile.
    #[error("{path} is not a coldstart profile: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the JSON parser found.
        source: serde_json::Error,
    },
    /// The file is of another format.
    #[error("{path} is a `{found}` file, not a `{FORMAT}` profile")]
    WrongFormat {
        /// The file.
        path: PathBuf,
        /// Its `format` field.
        found: String,
    },
    /// The profile is of a version this build does not read.
    #[error("{path} is profile version {found}; this coldstart reads version {VERSION} only: re-record it with `coldstart profile` or use a matching coldstart")]
    UnknownVersion {
        /// The file.
        path: PathBuf,
        /// Its `version` field.
        found: u32,
    },
    /// Writing the profile failed.
    #[error("cannot write profile {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why writing failed.
        source: std::io::Error,
    },
    /// The output cannot be written to at all (checked before profiling).
    #[error("cannot write the profile to {path}: {source}; choose another -o")]
    Unwritable {
        /// The output.
        path: PathBuf,
        /// Why it cannot be written.
        source: std::io::Error,
    },
    /// The profile was recorded for another build of the binary.
    #[error("profile was recorded for {module} with build-id {expected}, but {binary} has build-id {found}: it is a different build; re-run `coldstart profile` on this build")]
    BuildIdMismatch {
        /// The module of the profile.
        module: PathBuf,
        /// The binary given.
        binary: PathBuf,
        /// The module's build-id in the profile.
        expected: String,
        /// The binary's build-id.
        found: String,
    },
    /// No module of the profile is the binary.
    #[error("profile has no module named like {binary}; it was recorded for other programs")]
    ModuleNotInProfile {
        /// The binary given.
        binary: PathBuf,
    },
    /// The profiles cannot be merged (the message says why).
    #[error("cannot merge: {0}")]
    Merge(String),
    /// The profile breaks a rule of the format.
    #[error("{path} is not a valid coldstart profile: {detail}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Which rule, and where.
        detail: String,
    },
}

/// The largest file a profile may name: 64 GiB.
pub const MAX_FILE_SIZE: u64 = 64 << 30;
/// The largest function a profile may name: 1 GiB.
pub const MAX_FUNCTION_SIZE: u64 = 1 << 30;

impl FormatError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            FormatError::Read { .. }
            | FormatError::Unusable { .. }
            | FormatError::Parse { .. }
            | FormatError::WrongFormat { .. }
            | FormatError::UnknownVersion { .. }
            | FormatError::BuildIdMismatch { .. }
            | FormatError::ModuleNotInProfile { .. }
            | FormatError::Merge(_)
            | FormatError::Invalid { .. }
            | FormatError::Unwritable { .. } => Category::Usage,
            FormatError::Write { .. } => Category::Environment,
        }
    }
}

impl Profile {
    /// Read and validate a profile.
    pub fn read(path: &Path) -> Result<Profile, FormatError> {
        let unusable = |problem| FormatError::Unusable { path: path.to_owned(), problem };
        let text =
            std::fs::read_to_string(path).map_err(
                |source| match coldstart_fs::unusable_text_input(path, &source) {
                    Some(problem) => unusable(problem),
                    None => FormatError::Read { path: path.to_owned(), source },
                },
            )?;
        if text.trim().is_empty() {
            return Err(unusable("is empty"));
        }
        Profile::from_json(path, &text)
    }

    /// Parse a profile; `path` names it in errors. The format and version are checked
    /// before the rest, so an unknown version says so instead of a field error.
    pub fn from_json(path: &Path, text: &str) -> Result<Profile, FormatError> {
        #[derive(Deserialize)]
        struct Head {
            format: Option<String>,
            version: Option<u32>,
        }
        let head: Head = serde_json::from_str(text)
            .map_err(|source| FormatError::Parse { path: path.to_owned(), source })?;
        let format = head.format.unwrap_or_default();
        if format != FORMAT {
            return Err(FormatError::WrongFormat { path: path.to_owned(), found: format });
        }
        let version = head.version.unwrap_or(0);
        if version != VERSION {
            return Err(FormatError::UnknownVersion { path: path.to_owned(), found: version });
        }
        let profile: Profile = serde_json::from_str(text)
            .map_err(|source| FormatError::Parse { path: path.to_owned(), source })?;
        profile
            .check_sizes()
            .map_err(|detail| FormatError::Invalid { path: path.to_owned(), detail })?;
        Ok(profile)
    }

    /// Checks every size and count the readers are sized by, so that none can make them
    /// allocate or loop without bound: a file at most [`MAX_FILE_SIZE`], a page access of at
    /// most the pages of such a file and within 2^64 bytes, a function at most
    /// [`MAX_FUNCTION_SIZE`] and within 2^64, an access naming a file of the profile.
    fn check_sizes(&self) -> Result<(), String> {
        let modules = self.modules.iter().chain(self.workloads.iter().flat_map(|w| &w.modules));
        for m in modules {
            for t in &m.functions {
                if t.size > MAX_FUNCTION_SIZE || t.address.checked_add(t.size).is_none() {
                    return Err(format!(
                        "function {} at {:#x} is {} bytes: a function is at most {MAX_FUNCTION_SIZE} bytes and ends below 2^64",
                        t.names.first().map_or("?", String::as_str),
                        t.address,
                        t.size
                    ));
                }
            }
        }
        let Some(pages) = &self.pages else { return Ok(()) };
        if let Some(f) = pages.files.iter().find(|f| f.size > MAX_FILE_SIZE) {
            return Err(format!(
                "{} is {} bytes: a profiled file is at most {MAX_FILE_SIZE} bytes",
                f.path.display(),
                f.size
            ));
        }
        for a in &pages.accesses {
            if a.file >= pages.files.len() {
                return Err(format!("a page access names file {}, not in the profile", a.file));
            }
            // What readers loop over is the count; the first page may lie far out (a disk's
            // block device, whose pages are its blocks), within 2^64 bytes.
            let most = MAX_FILE_SIZE / 4096;
            if a.count > most {
                return Err(format!(
                    "a page access of {} pages: at most {most} pages ({MAX_FILE_SIZE} bytes)",
                    a.count
                ));
            }
            if a.page.checked_add(a.count).is_none_or(|end| end > u64::MAX / 4096) {
                return Err(format!(
                    "a page access of {} pages from page {} ends past 2^64 bytes",
                    a.count, a.page
                ));
            }
        }
        Ok(())
    }

    /// Write atomically (see [`coldstart_fs`]: `/dev/null` and pipes are written into).
    pub fn write(&self, path: &Path) -> Result<(), FormatError> {
        coldstart_fs::write_atomic_with(path, |w| {
            serde_json::to_writer_pretty(&mut *w, self).map_err(std::io::Error::other)?;
            w.write_all(b"\n")
        })
        .map_err(|source| FormatError::Write { path: path.to_owned(), source })
    }

    /// Check, before recording, that [`write`](Profile::write) will be able to write `path`
    /// (its directory exists and takes a new file; it is not a directory), so that a bad `-o`
    /// is refused before the program runs rather than after.
    pub fn check_writable(path: &Path) -> Result<(), FormatError> {
        coldstart_fs::check_writable(path)
            .map_err(|source| FormatError::Unwritable { path: path.to_owned(), source })
    }

    /// Check that the module of this profile recorded for `binary` (matched by path, else
    /// by file name) is the same build as `binary` now.
    pub fn check_build_id(&self, binary: &Path) -> Result<&Module, FormatError> {
        let canonical = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.to_owned());
        let module = self
            .modules
            .iter()
            .find(|m| m.path == canonical || m.path == binary)
            .or_else(|| self.modules.iter().find(|m| m.path.file_name() == binary.file_name()))
            .ok_or_else(|| FormatError::ModuleNotInProfile { binary: binary.to_owned() })?;
        let found = coldstart_elf::ElfInfo::open(
            binary,
            &coldstart_elf::SymbolOptions { use_debug_files: false, ..Default::default() },
        )
        .ok()
        .and_then(|i| i.build_id_hex());
        if module.build_id != found {
            return Err(FormatError::BuildIdMismatch {
                module: module.path.clone(),
                binary: binary.to_owned(),
                expected: module.build_id.clone().unwrap_or_else(|| "(none)".into()),
                found: found.unwrap_or_else(|| "(none)".into()),
            });
        }
        Ok(module)
    }

    /// All touched functions over every module, in first-touch order (by ordinal).
    pub fn first_touch_order(&self) -> Vec<(&Module, &Touch)> {
        let mut all: Vec<(&Module, &Touch)> =
            self.modules.iter().flat_map(|m| m.functions.iter().map(move |t| (m, t))).collect();
        all.sort_by_key(|(_, t)| t.ordinal);
        all
    }
}

/// Merge recorded profiles into one.
///
/// Each input keeps its data under `workloads`. The merged order ranks every function by
/// its *earliest normalised rank*: in a workload that touched n functions, the function at
/// ordinal k has rank k / n (0 = first, towards 1 = last). A function's merged rank is the
/// smallest rank it has in any workload; ties go to the function more workloads touched,
/// then to the earlier workload in argument order. So what any workload needs first comes
/// first, and workloads of different length weigh alike. Pages are merged by the same rule
/// (the rank of the access that brought the page; equal ranks by file, then page).
pub fn merge(inputs: Vec<Profile>) -> Result<Profile, FormatError> {
    if inputs.is_empty() {
        return Err(FormatError::Merge("no profiles given".into()));
    }
    // Flatten already-merged inputs into their workloads.
    let mut workloads = Vec::new();
    for p in inputs {
        if p.workloads.is_empty() {
            workloads.push(p);
        } else {
            workloads.extend(p.workloads);
        }
    }
    check_same_builds(&workloads)?;
    let modules = merge_functions(&workloads);
    let pages = merge_pages(&workloads);
    let mut warnings: Vec<String> = Vec::new();
    for w in &workloads {
        for warning in &w.warnings {
            if !warnings.contains(warning) {
                warnings.push(warning.clone());
            }
        }
    }
    Ok(Profile {
        format: FORMAT.into(),
        version: VERSION,
        workload: "merged".into(),
        command: Vec::new(),
        created_unix: coldstart_units::now_unix(),
        duration_ns: workloads.iter().map(|w| w.duration_ns).max().unwrap_or(0),
        stop: Stop::Merged,
        modules,
        pages,
        warnings,
        images: Vec::new(),
        workloads,
    })
}

/// Refuse workloads of different builds: modules are the same module when path and build-id
/// agree; the same path with another build-id means the inputs are from different builds.
fn check_same_builds(workloads: &[Profile]) -> Result<(), FormatError> {
    let mut build_of: HashMap<PathBuf, Option<String>> = HashMap::new();
    for w in workloads {
        for m in &w.modules {
            if let Some(prev) = build_of.insert(m.path.clone(), m.build_id.clone()) {
                if prev != m.build_id {
                    return Err(FormatError::Merge(format!(
                        "{} has build-id {} in one profile and {} in workload `{}`: profiles of different builds cannot be merged",
                        m.path.display(),
                        prev.unwrap_or_else(|| "(none)".into()),
                        m.build_id.clone().unwrap_or_else(|| "(none)".into()),
                        w.workload
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The modules of all `workloads` with their functions in merged order ([`merge`]'s rule),
/// each touch naming the workloads that made it; modules in the order of their first
/// function, those with none last.
fn merge_functions(workloads: &[Profile]) -> Vec<Module> {
    struct Entry {
        module: usize,
        touch: Touch,
        rank: f64,
        first_workload: usize,
        count: usize,
    }
    let mut modules: Vec<Module> = Vec::new();
    let mut module_index: HashMap<PathBuf, usize> = HashMap::new();
    let mut entries: Vec<Entry> = Vec::new();
    let mut entry_index: HashMap<(usize, u64), usize> = HashMap::new();
    for (wi, w) in workloads.iter().enumerate() {
        let n = w.modules.iter().map(|m| m.functions.len()).sum::<usize>().max(1) as f64;
        for (m, t) in w.first_touch_order() {
            let mi = *module_index.entry(m.path.clone()).or_insert_with(|| {
                modules.push(Module { functions: Vec::new(), ..m.clone() });
                modules.len() - 1
            });
            let rank = t.ordinal as f64 / n;
            match entry_index.get(&(mi, t.address)) {
                Some(&ei) => {
                    let e = &mut entries[ei];
                    e.count += 1;
                    e.touch.workloads.push(w.workload.clone());
                    if rank < e.rank {
                        e.rank = rank;
                    }
                    e.touch.first_touch_ns = e.touch.first_touch_ns.min(t.first_touch_ns);
                }
                None => {
                    let mut touch = t.clone();
                    touch.workloads = vec![w.workload.clone()];
                    entry_index.insert((mi, t.address), entries.len());
                    entries.push(Entry { module: mi, touch, rank, first_workload: wi, count: 1 });
                }
            }
        }
    }
    entries.sort_by(|a, b| {
        a.rank
            .total_cmp(&b.rank)
            .then(b.count.cmp(&a.count))
            .then(a.first_workload.cmp(&b.first_workload))
            .then(a.touch.ordinal.cmp(&b.touch.ordinal))
    });
    let mut module_order = Vec::new();
    for (ordinal, e) in entries.into_iter().enumerate() {
        let mut touch = e.touch;
        touch.ordinal = ordinal as u64;
        if modules[e.module].functions.is_empty() {
            module_order.push(e.module);
        }
        modules[e.module].functions.push(touch);
    }
    for (i, _) in modules.iter().enumerate() {
        if !module_order.contains(&i) {
            module_order.push(i);
        }
    }
    let mut slots: Vec<Option<Module>> = modules.into_iter().map(Some).collect();
    module_order.into_iter().filter_map(|i| slots[i].take()).collect()
}

fn merge_pages(workloads: &[Profile]) -> Option<PageProfile> {
    let with_pages: Vec<&PageProfile> = workloads.iter().filter_map(|w| w.pages.as_ref()).collect();
    if with_pages.is_empty() {
        return None;
    }
    let mut files: Vec<PageFile> = Vec::new();
    let mut ranked: HashMap<(usize, u64), (f64, PageAccess)> = HashMap::new();
    for pages in &with_pages {
        let n = pages.accesses.len().max(1) as f64;
        for (k, a) in pages.accesses.iter().enumerate() {
            let f = &pages.files[a.file];
            let fi = match files.iter().position(|x| x.path == f.path && x.build_id == f.build_id) {
                Some(i) => i,
                None => {
                    files.push(f.clone());
                    files.len() - 1
                }
            };
            for page in a.page..a.page + a.count.max(1) {
                let rank = k as f64 / n;
                let access = PageAccess { file: fi, page, count: 1, ..a.clone() };
                ranked
                    .entry((fi, page))
                    .and_modify(|e| {
                        if rank < e.0 {
                            *e = (rank, access.clone());
                        }
                    })
                    .or_insert((rank, access));
            }
        }
    }
    let mut accesses: Vec<(f64, PageAccess)> = ranked.into_values().collect();
    accesses.sort_by(|a, b| {
        a.0.total_cmp(&b.0).then(a.1.file.cmp(&b.1.file)).then(a.1.page.cmp(&b.1.page))
    });
    // One way of recording stays named; a mixture is `merged` (exact no longer).
    let first = &with_pages[0].source;
    let source = if with_pages.iter().all(|p| &p.source == first) {
        first.clone()
    } else {
        SOURCE_MERGED.into()
    };
    Some(PageProfile {
        source,
        sampled: with_pages.iter().any(|p| p.sampled),
        files,
        accesses: accesses.into_iter().map(|(_, a)| a).collect(),
        lost_events: with_pages.iter().map(|p| p.lost_events).sum(),
    })
}

/// Small profiles for the tests of this crate and of the crates that read profiles (feature
/// `testing`).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;

    /// A profile of one workload: `modules`, no pages, run `prog` for 1 ns and exited 0.
    pub fn profile(workload: &str, modules: Vec<Module>) -> Profile {
        Profile {
            format: FORMAT.into(),
            version: VERSION,
            workload: workload.into(),
            command: vec!["prog".into()],
            created_unix: 0,
            duration_ns: 1,
            stop: Stop::Exit { code: 0 },
            modules,
            pages: None,
            warnings: vec![],
            images: vec![],
            workloads: vec![],
        }
    }

    /// Page faults at time 0 by pid 1, from `(file, page, count)`.
    pub fn faults(accesses: &[(usize, u64, u64)]) -> Vec<PageAccess> {
        accesses
            .iter()
            .map(|&(file, page, count)| PageAccess {
                file,
                page,
                count,
                t_ns: 0,
                event: "fault".into(),
                pid: 1,
            })
            .collect()
    }
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::FormatError)
}

#[cfg(test)]
mod tests;
