//! The profile's modules, built the same way by both function tracers: one record per file
//! and build (however often it is loaded), each function recorded at its first call, modules
//! listed in the order of their first touch. Kept apart from the tracers so that a profile
//! reads the same whichever tracer made it.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use coldstart_elf::{ElfInfo, SymbolSource};

use crate::copied::copied_code;
use crate::format::{Module, Stop, Touch};

/// What a tracer returns.
pub(crate) struct Traced {
    pub modules: Vec<Module>,
    pub stop: Stop,
    pub duration_ns: u64,
    pub warnings: Vec<String>,
    /// What the processes ran, and what of it was profiled.
    pub images: Vec<crate::format::Image>,
    /// The modules without function symbols (profiled at page level only).
    pub unsymbolized: Vec<Unsymbolized>,
}

/// A module being recorded (one per file and build).
pub(crate) struct ModuleTouches {
    pub info: Arc<ElfInfo>,
    /// Its code the program copies as data ([`copied_code`]): no breakpoint goes there.
    pub copied: Range<u64>,
    mtime: i64,
    load_bias: u64,
    touched: Vec<bool>,
    order: Vec<Touch>,
    first_ordinal: u64,
}

impl ModuleTouches {
    /// The module `info` read from `path`, loaded at `load_bias`; nothing touched yet.
    pub fn new(info: Arc<ElfInfo>, path: &Path, load_bias: u64) -> ModuleTouches {
        ModuleTouches {
            touched: vec![false; info.functions.len()],
            mtime: mtime_of(path),
            copied: copied_code(&info, path),
            info,
            load_bias,
            order: Vec::new(),
            first_ordinal: u64::MAX,
        }
    }

    /// Whether the function `function` (an index of `info.functions`) was recorded.
    pub fn touched(&self, function: usize) -> bool {
        self.touched[function]
    }

    /// Record the first call of `function` (not [`touched`](Self::touched) yet): the
    /// `ordinal`-th touch of the run, `first_touch_ns` after exec, by thread `tid` of `pid`.
    pub fn record(
        &mut self,
        function: usize,
        ordinal: u64,
        first_touch_ns: u64,
        pid: i32,
        tid: i32,
    ) {
        self.touched[function] = true;
        let f = &self.info.functions[function];
        self.first_ordinal = self.first_ordinal.min(ordinal);
        self.order.push(Touch {
            address: f.address,
            size: f.size,
            names: f.names.clone(),
            first_touch_ns,
            pid,
            tid,
            ordinal,
            workloads: Vec::new(),
        });
    }

    /// The profile's record of the module, its functions in first-touch order (taken out).
    fn take_module(&mut self) -> Module {
        let info = &self.info;
        Module {
            path: info.path.clone(),
            build_id: info.build_id_hex(),
            size: info.size,
            mtime: self.mtime,
            load_bias: self.load_bias,
            symbols: symbols_label(&info.symbol_source),
            functions_total: info
                .functions
                .iter()
                .filter(|f| !self.copied.contains(&f.address))
                .count(),
            functions: std::mem::take(&mut self.order),
        }
    }
}

/// The profile's modules, in the order of their first touch (modules touched alike keep
/// the order they were loaded in).
pub(crate) fn profile_modules<'a>(
    records: impl IntoIterator<Item = &'a mut ModuleTouches>,
) -> Vec<Module> {
    let mut records: Vec<&mut ModuleTouches> = records.into_iter().collect();
    records.sort_by_key(|r| r.first_ordinal);
    records.into_iter().map(ModuleTouches::take_module).collect()
}

/// The `symbols` field of a profile module: where its function names come from.
fn symbols_label(source: &SymbolSource) -> String {
    match source {
        SymbolSource::Symtab => "symtab".into(),
        SymbolSource::Dynsym => "dynsym".into(),
        SymbolSource::DebugFile(p) => format!("debug-file:{}", p.display()),
        SymbolSource::None => "none".into(),
    }
}

/// A module with code but (next to) no function symbols: profiled at page level only.
#[derive(Debug, Clone)]
pub(crate) struct Unsymbolized {
    pub path: std::path::PathBuf,
    /// Functions its symbols name.
    pub functions: usize,
    /// Bytes of code (executable sections).
    pub code: u64,
}

/// Whether `info` is such a module: it has a page of code or more, and its function symbols
/// cover under 1% of it. A stripped file has none; a stripped shared library keeps the few
/// functions it exports in `.dynsym` (Firefox's `libxul.so`: 2 for 118 MiB of code, `git`: 1
/// for 2.7 MiB), where a library with an exported API covers 6% or more (cairo 6.5%, most
/// 20-70%).
pub(crate) fn unsymbolized(info: &ElfInfo, path: &Path) -> Option<Unsymbolized> {
    let code: u64 = info.sections.iter().filter(|s| s.executable).map(|s| s.size).sum();
    let covered: u64 = info.functions.iter().map(|f| f.size).sum();
    let bare = info.symbol_source == SymbolSource::None || covered.saturating_mul(100) < code;
    (bare && code >= coldstart_elf::PAGE_SIZE).then(|| Unsymbolized {
        path: path.to_owned(),
        functions: info.functions.len(),
        code,
    })
}

/// The warning for a module without function symbols, which is profiled at page level only.
/// (A data-only library, a few bytes of crt code, has nothing to profile.)
pub(crate) fn stripped_warning(info: &ElfInfo, path: &Path) -> Option<String> {
    let u = unsymbolized(info, path)?;
    let what = if u.functions == 0 {
        "has no function symbols (stripped, no debug file)".to_string()
    } else {
        format!(
            "has function symbols for {} functions only, for {:.1} MiB of code (stripped but for a few exported functions, no debug file)",
            u.functions,
            u.code as f64 / 1048576.0
        )
    };
    Some(format!(
        "{} {what}: profiled at page level only (use --pages); \
         to get symbols install its -dbgsym package (apt-get install PACKAGE-dbgsym from the debian-debug archive) \
         or fetch them with debuginfod (debuginfod-find debuginfo {})",
        path.display(),
        info.build_id_hex().unwrap_or_else(|| "BUILD-ID".into())
    ))
}

/// Where a crash happened, for its report: `PATH: function` of the function of `info`
/// holding `offset` (an address less the module's load bias).
pub(crate) fn location(info: &ElfInfo, offset: u64) -> Option<String> {
    let f = info.function_at(offset)?;
    Some(format!("{}: {}", info.path.display(), coldstart_elf::demangle(&f.names[0])))
}

fn mtime_of(path: &Path) -> i64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| m.mtime()).unwrap_or(0)
}
