//! Which lld a `link` uses, and whether a binary was linked by it.
//!
//! Debian installs each LLVM release side by side (`/usr/lib/llvm-19/bin/ld.lld`,
//! `/usr/lib/llvm-22/bin/ld.lld`, with `ld.lld-19` and `ld.lld-22` on `PATH`) and no plain
//! `ld.lld`. A compiler driver given `-fuse-ld=lld` runs the first `ld.lld` it finds in its `-B`
//! directories, then its own installation's: clang-19 runs lld 19 unless told otherwise. So
//! `link` passes the directory of the lld it chose ([`Lld::driver_dir`]) with `-B` ahead of
//! the build's own arguments; the linked binary's `.comment` section (`Linker: LLD 22.1.8`)
//! then shows which lld made it ([`linked_by`]; GNU ld writes no such line).
//!
//! lld 20 and later order sections for compression too (balanced partitioning,
//! `--bp-compression-sort`): the sections an order file lists still come first, in its order,
//! and the rest follow in the order that groups similar bytes.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::LayoutError;

/// The first lld release that orders sections for compression (`--bp-compression-sort`).
pub const COMPRESSION_SORT_SINCE: u32 = 20;

/// The LLVM releases looked for under `/usr/lib/llvm-N`, newest first.
fn llvm_releases() -> impl Iterator<Item = u32> {
    (14..=30).rev()
}

/// One lld, found and asked for its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lld {
    /// The executable (`ld.lld`, `ld.lld-22`, `/usr/lib/llvm-22/bin/ld.lld`, ...).
    pub path: PathBuf,
    /// Its version: major, minor, patch (`ld.lld --version`).
    pub version: (u32, u32, u32),
}

impl Lld {
    /// The lld to link with: `wanted` is a major release (`22`: Debian's `ld.lld-22` or
    /// `/usr/lib/llvm-22/bin/ld.lld`) or the path of an lld executable; without it, `ld.lld` on
    /// `PATH`, else the newest `/usr/lib/llvm-N/bin/ld.lld`.
    pub fn find(wanted: Option<&str>) -> Result<Lld, LayoutError> {
        let path = match wanted {
            None => coldstart_process::find_program("ld.lld").ok().or_else(|| {
                llvm_releases()
                    .map(|v| PathBuf::from(format!("/usr/lib/llvm-{v}/bin/ld.lld")))
                    .find(|p| p.is_file())
            }),
            Some(w) if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) => {
                let dir = PathBuf::from(format!("/usr/lib/llvm-{w}/bin/ld.lld"));
                coldstart_process::find_program(format!("ld.lld-{w}"))
                    .ok()
                    .or_else(|| dir.is_file().then_some(dir))
            }
            Some(w) => {
                let p = PathBuf::from(w);
                if !p.is_file() {
                    return Err(LayoutError::Invalid(format!(
                        "--lld {w}: no such file; give a major release (--lld 22) or the path of an ld.lld"
                    )));
                }
                Some(p)
            }
        };
        let Some(path) = path else {
            let package = match wanted {
                Some(w) => format!("lld-{w}"),
                None => "lld-22".to_owned(),
            };
            let what = wanted.map_or("lld".to_owned(), |w| format!("lld {w}"));
            return Err(LayoutError::Tool {
                tool: "ld.lld".into(),
                message: format!(
                    "{what} is not installed: install it (Debian: apt-get install {package})"
                ),
            });
        };
        let version = version_of(&path)?;
        if let Some(w) = wanted.and_then(|w| w.parse::<u32>().ok()) {
            if version.0 != w {
                return Err(LayoutError::Invalid(format!(
                    "--lld {w}: {} is lld {}.{}.{}",
                    path.display(),
                    version.0,
                    version.1,
                    version.2
                )));
            }
        }
        Ok(Lld { path, version })
    }

    /// `22.1.8`.
    pub fn version_string(&self) -> String {
        format!("{}.{}.{}", self.version.0, self.version.1, self.version.2)
    }

    /// Refuse `--bp-compression-sort` for an lld that does not have it, saying what to do.
    pub fn require_compression_sort(&self) -> Result<(), LayoutError> {
        if self.version.0 >= COMPRESSION_SORT_SINCE {
            return Ok(());
        }
        Err(LayoutError::Invalid(format!(
            "--compression-sort needs lld {COMPRESSION_SORT_SINCE} or later; {} is lld {}: install a newer one (Debian: apt-get install lld-22) and pass --lld 22",
            self.path.display(),
            self.version_string()
        )))
    }

    /// The directory to pass with `-B` so a compiler driver runs this lld: the first one
    /// holding it under the name `ld.lld` along its chain of symbolic links
    /// (`/usr/lib/llvm-22/bin` for Debian's `/usr/bin/ld.lld-22`, a link to
    /// `../lib/llvm-22/bin/ld.lld`, itself a link to the multi-call `lld`), else `scratch`,
    /// where it is linked as `ld.lld`. A stable directory keeps a Cargo build's `RUSTFLAGS` the
    /// same from one link to the next (a change rebuilds every crate).
    pub fn driver_dir(&self, scratch: &Path) -> Result<PathBuf, LayoutError> {
        let mut p = self.path.clone();
        for _ in 0..16 {
            if p.file_name().is_some_and(|n| n == "ld.lld") {
                if let Some(dir) = p.parent() {
                    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
                    return std::fs::canonicalize(dir).map_err(|e| LayoutError::io("read", dir, e));
                }
            }
            match std::fs::read_link(&p) {
                Ok(next) => p = p.parent().map_or(next.clone(), |d| d.join(&next)),
                Err(_) => break,
            }
        }
        let real = std::fs::canonicalize(&self.path)
            .map_err(|e| LayoutError::io("read", &self.path, e))?;
        let link = scratch.join("ld.lld");
        std::os::unix::fs::symlink(&real, &link)
            .map_err(|e| LayoutError::io("create", &link, e))?;
        Ok(scratch.to_owned())
    }
}

/// `ld.lld --version`: "Debian LLD 22.1.8 (compatible with GNU linkers)".
fn version_of(path: &Path) -> Result<(u32, u32, u32), LayoutError> {
    let out = Command::new(path).arg("--version").output().map_err(|e| LayoutError::Tool {
        tool: path.display().to_string(),
        message: e.to_string(),
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_lld_version(&text).ok_or_else(|| LayoutError::Tool {
        tool: path.display().to_string(),
        message: format!("is not lld: `--version` printed {:?}", text.trim()),
    })
}

/// The version after `LLD ` in `text` (lld's `--version`, or a `.comment` section's
/// `Linker: LLD 22.1.8`).
pub fn parse_lld_version(text: &str) -> Option<(u32, u32, u32)> {
    let at = text.find("LLD ")? + 4;
    let word: String = text[at..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    let mut parts = word.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// Which linker made a binary, from its `.comment` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linker {
    /// `Linker: LLD 22.1.8`.
    Lld((u32, u32, u32)),
    /// A `.comment` without lld's line: GNU ld, gold and mold write none, or another name.
    Other,
    /// No `.comment` section (stripped with `--remove-section .comment`).
    Unknown,
}

/// The linker that made `binary`.
pub fn linked_by(binary: &Path) -> Result<Linker, LayoutError> {
    use object::{Object, ObjectSection};
    crate::binary::with_object(binary, |file| {
        let Some(data) = file.section_by_name(".comment").and_then(|s| s.data().ok()) else {
            return Linker::Unknown;
        };
        data.split(|&b| b == 0)
            .filter_map(|s| std::str::from_utf8(s).ok())
            .filter(|s| s.starts_with("Linker:"))
            .find_map(parse_lld_version)
            .map_or(Linker::Other, Linker::Lld)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_the_version_line_and_the_comment_section() {
        assert_eq!(
            parse_lld_version("Debian LLD 22.1.8 (compatible with GNU linkers)\n"),
            Some((22, 1, 8))
        );
        assert_eq!(parse_lld_version("Linker: LLD 19.1.7"), Some((19, 1, 7)));
        assert_eq!(parse_lld_version("LLD 20"), Some((20, 0, 0)));
        assert_eq!(parse_lld_version("GNU ld (GNU Binutils for Debian) 2.40"), None);
    }

    #[test]
    fn compression_sort_is_refused_before_lld_20_with_what_to_do() {
        let old = Lld { path: "/usr/lib/llvm-19/bin/ld.lld".into(), version: (19, 1, 7) };
        let err = old.require_compression_sort().unwrap_err().to_string();
        assert!(err.contains("lld 20 or later") && err.contains("--lld 22"), "{err}");
        let new = Lld { path: "/usr/lib/llvm-22/bin/ld.lld".into(), version: (22, 1, 8) };
        assert!(new.require_compression_sort().is_ok());
    }

    #[test]
    fn the_driver_directory_is_where_a_link_chain_names_it_ld_lld_else_a_scratch_link() {
        let root = tempfile::tempdir().unwrap();
        let (bin, llvm) = (root.path().join("bin"), root.path().join("llvm/bin"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&llvm).unwrap();
        std::fs::write(llvm.join("lld"), "").unwrap();
        std::os::unix::fs::symlink("lld", llvm.join("ld.lld")).unwrap();
        std::os::unix::fs::symlink("../llvm/bin/ld.lld", bin.join("ld.lld-22")).unwrap();
        let scratch = root.path().join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        // Debian's layout: ld.lld-22 -> ../llvm/bin/ld.lld -> lld; the stable directory wins.
        let lld = Lld { path: bin.join("ld.lld-22"), version: (22, 1, 8) };
        assert_eq!(lld.driver_dir(&scratch).unwrap(), std::fs::canonicalize(&llvm).unwrap());
        // A file never named ld.lld is linked under that name in the scratch directory.
        let lld = Lld { path: llvm.join("lld"), version: (22, 1, 8) };
        assert_eq!(lld.driver_dir(&scratch).unwrap(), scratch);
        assert!(scratch.join("ld.lld").exists());
    }

    #[test]
    fn a_missing_path_is_a_usage_error_naming_it() {
        let err = Lld::find(Some("/nonexistent/ld.lld")).unwrap_err();
        assert_eq!(err.category(), coldstart_error::Category::Usage);
        assert!(err.to_string().contains("/nonexistent/ld.lld"), "{err}");
    }
}
