//! Building: write sources and data into a temporary directory inside the output directory,
//! compile in parallel with clang, link with lld, then move everything into place with the
//! manifest last, so a reader never sees a half-built sample.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::emit::{self, SourceFile};
use crate::manifest::{
    BuildInfo, DataFileInfo, Module, ModuleInfo, Sample, FORMAT, MANIFEST, VERSION,
};
use crate::plan::{Plan, PAGE_SIZE};
use crate::{Config, Error};

/// The C compiler (Debian package `clang-19`).
pub const CC: &str = "clang-19";
/// The linker clang runs for `-fuse-ld=lld` (Debian package `lld-19`).
pub const LLD: &str = "ld.lld-19";

/// Flags of every compile (plus `-fPIE` for the executable, `-fPIC` for the libraries).
pub fn cflags() -> Vec<String> {
    [
        "-O1",
        "-fno-optimize-sibling-calls",
        "-ffunction-sections",
        "-fdata-sections",
        "-D_GNU_SOURCE",
    ]
    .map(String::from)
    .to_vec()
}

/// Flags of every link.
pub fn ldflags() -> Vec<String> {
    ["-fuse-ld=lld", "-Wl,--emit-relocs", "-Wl,--gc-sections", "-Wl,--build-id=sha1"]
        .map(String::from)
        .to_vec()
}

/// Entries of a sample directory that a build replaces (the manifest is handled apart).
const OUTPUTS: [&str; 6] = ["sample", "libcs_a.so", "libcs_b.so", "plugin", "data", "src"];

/// Check that clang-19 and ld.lld-19 can be run.
pub fn check_tools() -> Result<(), Error> {
    for (tool, package) in [(CC, "clang-19"), (LLD, "lld-19")] {
        let ok = Command::new(tool)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !ok {
            return Err(Error::ToolMissing { tool, package });
        }
    }
    Ok(())
}

/// The sources the config generates, by file name (for determinism checks and inspection).
pub fn generate_sources(config: &Config) -> Result<Vec<(String, String)>, Error> {
    config.validate()?;
    let plan = Plan::new(config);
    let sources = emit::sources(&plan);
    let mk = makefile(&sources);
    let mut files: Vec<(String, String)> = sources.into_iter().map(|f| (f.name, f.text)).collect();
    files.push(("Makefile".into(), mk));
    Ok(files)
}

/// What each workload runs at start-up, computed from the config alone (no build): the
/// same [`Workload`](crate::Workload)s that [`build`] writes to the manifest.
pub fn workloads(config: &Config) -> Result<Vec<crate::Workload>, Error> {
    config.validate()?;
    let plan = Plan::new(config);
    Ok(plan.workloads.iter().map(|w| plan.workload_truth(w)).collect())
}

/// FNV-1a (64-bit) over every generated file's name and text: identifies the sources, so a
/// cached build can be reused only when the generator would write the same program.
fn digest(sources: &[SourceFile], makefile: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    for f in sources {
        eat(f.name.as_bytes());
        eat(f.text.as_bytes());
    }
    eat(makefile.as_bytes());
    format!("{h:016x}")
}

/// The sample in `out` if it was built from `config` by this generator (same sources) and its
/// modules are all there; otherwise [`build`] it. Lets many tests share one build: callers in
/// other threads or processes wait for one another (an exclusive `flock` on `OUT.lock`), so
/// none reads or replaces a build another is making.
pub fn build_cached(config: &Config, out: &Path) -> Result<Sample, Error> {
    config.validate()?;
    let lock_path = out.with_extension("lock");
    if let Some(parent) = lock_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(io("create the output directory", parent))?;
    }
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io("open the build lock", &lock_path))?;
    // Released when `lock` is closed at return.
    coldstart_sys::file::lock(&lock, coldstart_sys::file::Wait::Block)
        .map_err(io("lock", &lock_path))?;
    if let Ok(sample) = Sample::load(out) {
        let plan = Plan::new(config);
        let sources = emit::sources(&plan);
        let same = sample.config == *config
            && sample.build.sources_digest == digest(&sources, &makefile(&sources))
            && Module::ALL.iter().all(|m| sample.module_path(*m).is_file());
        if same {
            return Ok(sample);
        }
    }
    build(config, out)
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { what, path, source }
}

/// Generate and build the sample program into `out` (created if missing); returns its truth.
///
/// `out` must be missing, empty, or hold an earlier sample (which is replaced).
pub fn build(config: &Config, out: &Path) -> Result<Sample, Error> {
    config.validate()?;
    check_tools()?;
    fs::create_dir_all(out).map_err(io("create the output directory", out))?;
    let entries: Vec<String> = fs::read_dir(out)
        .map_err(io("list the output directory", out))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with(".cs-build-"))
        .collect();
    if !entries.is_empty() && !entries.iter().any(|n| n == MANIFEST) {
        return Err(Error::OutputNotEmpty(out.to_path_buf()));
    }

    let tmp = TempDir(out.join(format!(".cs-build-{}", std::process::id())));
    let _ = fs::remove_dir_all(&tmp.0);
    let src = tmp.0.join("src");
    for dir in [&src, &tmp.0.join("data"), &tmp.0.join("plugin")] {
        fs::create_dir_all(dir).map_err(io("create a build directory", dir))?;
    }

    let plan = Plan::new(config);
    let sources = emit::sources(&plan);
    for f in &sources {
        let p = src.join(&f.name);
        fs::write(&p, &f.text).map_err(io("write a generated source", &p))?;
    }
    let mk = src.join("Makefile");
    let mk_text = makefile(&sources);
    fs::write(&mk, &mk_text).map_err(io("write the Makefile", &mk))?;
    let sources_digest = digest(&sources, &mk_text);
    let mut data_files = Vec::new();
    for d in &plan.data {
        let p = tmp.0.join(&d.path);
        fs::write(&p, &d.bytes).map_err(io("write a data file", &p))?;
        data_files.push(DataFileInfo {
            path: d.path.clone(),
            access: d.access,
            size: d.bytes.len() as u64,
        });
    }

    compile_all(&src, &sources)?;
    link_all(&src, &sources)?;

    let functions = plan.function_table();
    let mut modules = Vec::new();
    for module in Module::ALL {
        let path = tmp.0.join(module.file());
        modules.push(ModuleInfo {
            module,
            path: module.file().to_string(),
            text_bytes: text_size(&path)?,
            functions: functions.iter().filter(|f| f.module == module).count(),
        });
    }
    let mut sample = Sample {
        dir: out.to_path_buf(),
        format: FORMAT.into(),
        version: VERSION,
        config: config.clone(),
        page_size: PAGE_SIZE,
        build: BuildInfo { cc: CC.into(), cflags: cflags(), ldflags: ldflags(), sources_digest },
        modules,
        functions,
        data_files,
        threads: plan.thread_info(),
        workloads: plan.workloads.iter().map(|w| plan.workload_truth(w)).collect(),
    };
    let json = serde_json::to_string_pretty(&sample).expect("the manifest serialises");
    let tmp_manifest = tmp.0.join(MANIFEST);
    fs::write(&tmp_manifest, json + "\n").map_err(io("write the manifest", &tmp_manifest))?;

    // Move into place: the old manifest goes first and the new one comes last, so a
    // directory with a manifest always holds a complete build.
    let manifest = out.join(MANIFEST);
    if manifest.exists() {
        fs::remove_file(&manifest).map_err(io("remove the old manifest", &manifest))?;
    }
    for name in OUTPUTS {
        let to = out.join(name);
        if to.is_dir() && !to.is_symlink() {
            fs::remove_dir_all(&to).map_err(io("remove an old build output", &to))?;
        } else if to.symlink_metadata().is_ok() {
            fs::remove_file(&to).map_err(io("remove an old build output", &to))?;
        }
        let from = tmp.0.join(name);
        fs::rename(&from, &to).map_err(io("move a build output into place", &to))?;
    }
    fs::rename(&tmp_manifest, &manifest).map_err(io("move the manifest into place", &manifest))?;
    sample.dir = out.canonicalize().unwrap_or_else(|_| out.to_path_buf());
    Ok(sample)
}

fn pic(module: Module) -> &'static str {
    if module == Module::Exe {
        "-fPIE"
    } else {
        "-fPIC"
    }
}

fn object(name: &str) -> String {
    format!("{}.o", name.trim_end_matches(".c"))
}

fn run(cmd: &mut Command, step: &str) -> Result<(), Error> {
    let out = cmd.output().map_err(|e| Error::Tool {
        step: step.to_string(),
        detail: format!("cannot run {:?}: {e}", cmd.get_program()),
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        return Err(Error::Tool {
            step: step.to_string(),
            detail: format!(
                "{}: {}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ),
        });
    }
    Ok(())
}

/// Compile every unit on all cores.
fn compile_all(src: &Path, sources: &[SourceFile]) -> Result<(), Error> {
    let units: Vec<&SourceFile> = sources.iter().filter(|f| f.module.is_some()).collect();
    let jobs = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..jobs.min(units.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= units.len() || failure.lock().unwrap().is_some() {
                    break;
                }
                let u = units[i];
                let mut cmd = Command::new(CC);
                cmd.current_dir(src)
                    .args(cflags())
                    .arg(pic(u.module.expect("units have a module")))
                    .args(["-c", &u.name, "-o", &object(&u.name)]);
                if let Err(e) = run(&mut cmd, &format!("compile {}", u.name)) {
                    *failure.lock().unwrap() = Some(e);
                }
            });
        }
    });
    match failure.into_inner().unwrap() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn objects_of(sources: &[SourceFile], module: Module) -> Vec<String> {
    sources.iter().filter(|f| f.module == Some(module)).map(|f| object(&f.name)).collect()
}

/// Link arguments per module, relative to `src/`: (module, output, arguments after flags).
fn link_steps(sources: &[SourceFile]) -> Vec<(Module, String, Vec<String>)> {
    let mut steps = Vec::new();
    for (module, soname) in [
        (Module::Liba, "libcs_a.so"),
        (Module::Libb, "libcs_b.so"),
        (Module::Plugin, "libcs_plugin.so"),
    ] {
        let mut args = vec!["-shared".to_string(), format!("-Wl,-soname,{soname}")];
        args.push("-o".into());
        args.push(format!("../{}", module.file()));
        args.extend(objects_of(sources, module));
        steps.push((module, format!("../{}", module.file()), args));
    }
    let mut args = vec!["-o".to_string(), "../sample".to_string()];
    args.extend(objects_of(sources, Module::Exe));
    args.extend(
        ["-L..", "-lcs_a", "-lcs_b", "-ldl", "-pthread", "-Wl,-rpath,$ORIGIN"].map(String::from),
    );
    steps.push((Module::Exe, "../sample".into(), args));
    steps
}

fn link_all(src: &Path, sources: &[SourceFile]) -> Result<(), Error> {
    let steps = link_steps(sources);
    let (libs, exe): (Vec<_>, Vec<_>) = steps.into_iter().partition(|s| s.0 != Module::Exe);
    let results: Vec<Result<(), Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = libs
            .iter()
            .map(|(module, _, args)| {
                s.spawn(move || {
                    let mut cmd = Command::new(CC);
                    cmd.current_dir(src).args(ldflags()).args(args);
                    run(&mut cmd, &format!("link {}", module.file()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("link thread")).collect()
    });
    results.into_iter().collect::<Result<Vec<()>, Error>>()?;
    for (module, _, args) in exe {
        let mut cmd = Command::new(CC);
        cmd.current_dir(src).args(ldflags()).args(&args);
        run(&mut cmd, &format!("link {}", module.file()))?;
    }
    Ok(())
}

/// The Makefile in `src/`: the same commands the builder runs, so a user (or `coldstart
/// link`) can rebuild with extra `CFLAGS`/`LDFLAGS`, e.g. a symbol ordering file.
fn makefile(sources: &[SourceFile]) -> String {
    let mut s = String::from("# Generated by `coldstart sample`. Rebuild the sample in place:\n");
    s.push_str("#   make -C src -B -j2 [CFLAGS=...] [LDFLAGS=...] [LDFLAGS_EXE=...]\n");
    s.push_str(
        "# CFLAGS and LDFLAGS (from the command line or the environment) are added after the\n",
    );
    s.push_str(
        "# sample's own flags; LDFLAGS_EXE, LDFLAGS_LIBA, LDFLAGS_LIBB and LDFLAGS_PLUGIN\n",
    );
    s.push_str("# apply to one module's link only (e.g. -Wl,--symbol-ordering-file=FILE).\n");
    s.push_str("# CC defaults to clang-19; set it to use a wrapper.\n\n");
    s.push_str(&format!("ifeq ($(origin CC),default)\nCC = {CC}\nendif\n"));
    s.push_str(&format!("CS_CFLAGS = {}\n", cflags().join(" ")));
    s.push_str(&format!("CS_LDFLAGS = {}\n\n", ldflags().join(" ")));
    let steps = link_steps(sources);
    let outputs: Vec<&str> = steps.iter().map(|s| s.1.as_str()).collect();
    s.push_str(&format!(".PHONY: all clean\nall: {}\n\n", outputs.join(" ")));
    for f in sources.iter().filter(|f| f.module.is_some()) {
        let m = f.module.expect("filtered");
        s.push_str(&format!(
            "{}: {} cs.h decls.h\n\t$(CC) $(CS_CFLAGS) {} $(CFLAGS) -c {} -o $@\n\n",
            object(&f.name),
            f.name,
            pic(m),
            f.name
        ));
    }
    for (module, output, args) in &steps {
        let objs = objects_of(sources, *module);
        let mut deps = objs.join(" ");
        if *module == Module::Exe {
            deps.push_str(" ../libcs_a.so ../libcs_b.so");
        }
        let args: Vec<String> = args.iter().map(|a| a.replace("$ORIGIN", "'$$ORIGIN'")).collect();
        s.push_str(&format!(
            "{output}: {deps}\n\t@mkdir -p $(dir $@)\n\t$(CC) $(CS_LDFLAGS) $(LDFLAGS) $(LDFLAGS_{}) {}\n\n",
            module.as_str().to_uppercase(),
            args.join(" ")
        ));
    }
    s.push_str("clean:\n\trm -f *.o\n");
    s
}

/// Size of the `.text` section of an ELF file.
fn text_size(path: &Path) -> Result<u64, Error> {
    use object::{Object, ObjectSection};
    let bytes = fs::read(path).map_err(io("read a built module", path))?;
    let file = object::File::parse(&*bytes).map_err(|e| Error::Tool {
        step: format!("read {}", path.display()),
        detail: e.to_string(),
    })?;
    Ok(file.section_by_name(".text").map(|s| s.size()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makefile_lists_every_unit_and_module() {
        let plan = Plan::new(&Config::default());
        let sources = emit::sources(&plan);
        let mk = makefile(&sources);
        for f in sources.iter().filter(|f| f.module.is_some()) {
            assert!(mk.contains(&format!("{}: {}", object(&f.name), f.name)), "{}", f.name);
        }
        for m in Module::ALL {
            assert!(mk.contains(&format!("../{}:", m.file())), "{m:?}");
        }
        assert!(mk.contains("'$$ORIGIN'"));
    }
}
