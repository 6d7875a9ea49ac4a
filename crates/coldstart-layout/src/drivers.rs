//! Driving the tools that apply an order: the user's own build with the flags injected
//! (`link`), and llvm-bolt on an already linked binary (`bolt`).
//!
//! `link` sets `CFLAGS`/`CXXFLAGS`/`LDFLAGS` (appending to what the caller has), adds the
//! `-C link-arg=...` flags to `RUSTFLAGS` for Cargo, and puts compiler wrappers for
//! `cc gcc clang c++ g++ clang++` and every versioned `clang-N`/`clang++-N` first on
//! `PATH`: a build that sets its own `CFLAGS` (a Makefile assignment) or a plain compiler
//! line still compiles with function sections and links with lld and the order file. The
//! directory of the lld chosen ([`Lld::driver_dir`]) is given to every link with `-B` ahead
//! of the build's own arguments, so the compiler driver runs it whatever lld it would find
//! itself.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::lld::Lld;
use crate::LayoutError;

/// Compilers wrapped on `PATH` during `link`, besides the versioned `clang-N` and
/// `clang++-N` found there ([`wrapped_compilers`]).
pub const WRAPPED_COMPILERS: [&str; 6] = ["cc", "gcc", "clang", "c++", "g++", "clang++"];

/// Every compiler `link` wraps: [`WRAPPED_COMPILERS`] and the `clang-N`, `clang++-N` on
/// `PATH` (Debian's names for each installed LLVM release; a build configured with
/// `CC=clang-22` calls that name).
pub fn wrapped_compilers() -> Vec<String> {
    let mut names: Vec<String> = WRAPPED_COMPILERS.iter().map(|s| s.to_string()).collect();
    for v in 10..=30 {
        for base in ["clang", "clang++"] {
            let name = format!("{base}-{v}");
            if which(&name).is_some() {
                names.push(name);
            }
        }
    }
    names
}

/// Find an executable on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    coldstart_process::find_program(name).ok()
}

/// The C libraries searched for DT_RELR support, in order.
const LIBC_PATHS: [&str; 4] = [
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/aarch64-linux-gnu/libc.so.6",
    "/lib64/libc.so.6",
    "/usr/lib/libc.so.6",
];

/// Whether this machine's C library loads binaries with packed relative relocations
/// (DT_RELR): glibc 2.36 and later define the `GLIBC_ABI_DT_RELR` version, which lld makes
/// such a binary depend on. `None` when no glibc was found (musl has DT_RELR since 1.2.4;
/// this does not look).
pub fn relr_supported() -> Option<bool> {
    LIBC_PATHS.iter().map(Path::new).find(|p| p.is_file()).map(|p| {
        std::fs::read(p).map(|b| b.windows(17).any(|w| w == b"GLIBC_ABI_DT_RELR")).unwrap_or(false)
    })
}

/// Whether `link` packs relative relocations: as asked, else where the C library supports
/// DT_RELR. With the reason, for the user.
pub fn pack_relocs(asked: Option<bool>) -> (bool, &'static str) {
    match (asked, relr_supported()) {
        (Some(true), _) => (true, "asked for"),
        (Some(false), _) => (false, "turned off"),
        (None, Some(true)) => (true, "the C library here supports DT_RELR (glibc 2.36+)"),
        (None, Some(false)) => (false, "the C library here predates DT_RELR (glibc < 2.36)"),
        (None, None) => (false, "no glibc found to check for DT_RELR"),
    }
}

/// Flags added for a build with `order` (absolute path).
#[derive(Debug, Clone)]
pub struct InjectedFlags {
    /// Given to every compile: each function and object in a section of its own.
    pub compile: Vec<String>,
    /// Given to a link ahead of the build's own arguments: `-B DIR`, so the compiler driver
    /// finds the chosen lld before any other (the first `-B` holding `ld.lld` wins).
    pub link_first: Vec<String>,
    /// Given to a link: lld and the order file.
    pub link: Vec<String>,
    /// The link flags as `rustc` takes them (`-C link-arg=...`).
    pub rust: Vec<String>,
}

impl InjectedFlags {
    /// The flags for `order`, with the compiler driver pointed at `lld_dir` (a directory
    /// holding `ld.lld`) when given.
    pub fn new(order: &Path, lld_dir: Option<&Path>) -> InjectedFlags {
        let link_first: Vec<String> =
            lld_dir.map(|d| format!("-B{}", d.display())).into_iter().collect();
        let link = vec![
            "-fuse-ld=lld".to_owned(),
            format!("-Wl,--symbol-ordering-file={}", order.display()),
            "-Wl,--no-warn-symbol-ordering".to_owned(),
        ];
        let rust = link_first
            .iter()
            .chain(&link)
            .flat_map(|f| ["-C".to_owned(), format!("link-arg={f}")])
            .collect();
        InjectedFlags {
            compile: vec!["-ffunction-sections".into(), "-fdata-sections".into()],
            link_first,
            link,
            rust,
        }
    }

    /// Every link flag, in the order a link gets them around the build's own.
    pub fn all_link(&self) -> Vec<String> {
        self.link_first.iter().chain(&self.link).cloned().collect()
    }
}

/// A prepared build: the command with its environment, and the wrapper directory that
/// lives as long as this value.
pub struct PreparedBuild {
    /// The user's build command, its environment pointing at the wrappers.
    pub command: Command,
    /// The flags the wrappers add.
    pub flags: InjectedFlags,
    _wrappers: tempfile::TempDir,
}

/// Prepare `build` (program and arguments) to run with `order` applied, linked by `lld`, and
/// with `extra_link` flags added to every link (for example `-Wl,-z,pack-relative-relocs`).
pub fn prepare_build(
    build: &[String],
    order: &Path,
    lld: &Lld,
    extra_link: &[String],
) -> Result<PreparedBuild, LayoutError> {
    let (program, args) = build
        .split_first()
        .ok_or_else(|| LayoutError::Invalid("no build command given after --".into()))?;
    let order =
        std::fs::canonicalize(order).map_err(|e| LayoutError::io("read order file", order, e))?;
    let wrappers = tempfile::Builder::new()
        .prefix("coldstart-link-")
        .tempdir()
        .map_err(|e| LayoutError::io("create", Path::new("/tmp/coldstart-link-*"), e))?;
    let lld_dir = wrappers.path().join("lld");
    std::fs::create_dir(&lld_dir).map_err(|e| LayoutError::io("create", &lld_dir, e))?;
    let lld_dir = lld.driver_dir(&lld_dir)?;
    let mut flags = InjectedFlags::new(&order, Some(&lld_dir));
    for f in extra_link {
        flags.link.push(f.clone());
        flags.rust.extend(["-C".to_owned(), format!("link-arg={f}")]);
    }
    let old_path = std::env::var_os("PATH").unwrap_or_default();
    for name in wrapped_compilers() {
        let Some(real) = which(&name) else { continue };
        let script = wrapper_script(&real, &flags);
        let path = wrappers.path().join(name);
        std::fs::write(&path, script).map_err(|e| LayoutError::io("write", &path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| LayoutError::io("chmod", &path, e))?;
    }
    let mut path = OsString::from(wrappers.path());
    path.push(":");
    path.push(&old_path);
    let append = |var: &str, add: &[String]| {
        let mut v = std::env::var(var).unwrap_or_default();
        for a in add {
            if !v.is_empty() {
                v.push(' ');
            }
            v.push_str(a);
        }
        v
    };
    let mut command = Command::new(program);
    command.args(args);
    command.env("PATH", path);
    command.env("CFLAGS", append("CFLAGS", &flags.compile));
    command.env("CXXFLAGS", append("CXXFLAGS", &flags.compile));
    command.env("LDFLAGS", append("LDFLAGS", &flags.all_link()));
    command.env("RUSTFLAGS", append("RUSTFLAGS", &flags.rust));
    Ok(PreparedBuild { command, flags, _wrappers: wrappers })
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn wrapper_script(real: &Path, flags: &InjectedFlags) -> String {
    let quoted = |v: &[String]| v.iter().map(|f| shell_quote(f)).collect::<Vec<_>>().join(" ");
    let (compile, first, link) =
        (quoted(&flags.compile), quoted(&flags.link_first), quoted(&flags.link));
    let real = shell_quote(&real.display().to_string());
    format!(
        "#!/bin/sh\n# coldstart link: compile with function sections, link with lld and the order file.\n\
         link=1\nfor a in \"$@\"; do case \"$a\" in -c|-S|-E|-M|-MM|-fsyntax-only|--version|-v|-dumpversion|-dumpmachine|-print-*) link=0;; esac; done\n\
         if [ $link = 1 ]; then exec {real} {first} {compile} \"$@\" {link}; else exec {real} {compile} \"$@\"; fi\n"
    )
}

/// The llvm-bolt executable: `llvm-bolt` on `PATH`, Debian's `llvm-bolt-19`, or LLVM's
/// directory.
pub fn find_bolt() -> Result<PathBuf, LayoutError> {
    if let Some(p) = which("llvm-bolt").or_else(|| which("llvm-bolt-19")) {
        return Ok(p);
    }
    for v in (14..=25).rev() {
        let p = PathBuf::from(format!("/usr/lib/llvm-{v}/bin/llvm-bolt"));
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(LayoutError::Tool {
        tool: "llvm-bolt".into(),
        message: "llvm-bolt is not installed: install it (Debian: apt-get install bolt-19)".into(),
    })
}

/// Rewrite `binary` with the function order in `order` (one name per line) into `out`.
/// Refuses, before running BOLT, a binary without static relocations.
pub fn bolt(
    binary: &Path,
    order: &Path,
    out: &Path,
    has_relocations: bool,
) -> Result<String, LayoutError> {
    if !has_relocations {
        return Err(LayoutError::NoRelocations { binary: binary.to_owned() });
    }
    let bolt = find_bolt()?;
    let tmp_out = out.with_extension("coldstart-tmp");
    let output = Command::new(&bolt)
        .arg(binary)
        .arg("-o")
        .arg(&tmp_out)
        .arg("-reorder-functions=user")
        .arg(format!("-function-order={}", order.display()))
        .output()
        .map_err(|e| LayoutError::Tool {
            tool: bolt.display().to_string(),
            message: e.to_string(),
        })?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        let _ = std::fs::remove_file(&tmp_out);
        return Err(LayoutError::Tool {
            tool: bolt.display().to_string(),
            message: format!("exited with {}:\n{}", output.status, log.trim()),
        });
    }
    std::fs::rename(&tmp_out, out).map_err(|e| LayoutError::io("write", out, e))?;
    Ok(log)
}
