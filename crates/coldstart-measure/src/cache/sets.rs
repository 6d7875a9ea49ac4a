//! Which files each cache state evicts.
//!
//! - `selective`: every regular file the discovery run saw, minus files that cannot be evicted
//!   (pseudo file systems, memory-backed file systems, deleted files).
//! - `warm` (the paper's warm-local): the program's own files only. The rule: a discovered file
//!   is kept cached when it is an ELF shared object (`ET_DYN`) whose directory is a system
//!   library directory: `/lib`, `/usr/lib`, `/lib64`, `/usr/lib64`, their multiarch
//!   subdirectories (`/usr/lib/x86_64-linux-gnu`, named `ARCH-linux-ABI`), and every directory
//!   listed in `/etc/ld.so.conf` and the files it includes. Everything else the program read is
//!   evicted, and so is the executable itself. A library in a subdirectory such as
//!   `/usr/lib/firefox/` belongs to its application and is evicted.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

fn is_pseudo_path(path: &Path) -> bool {
    let s = path.to_string_lossy();
    s.ends_with(" (deleted)")
        || s.starts_with("/memfd:")
        || ["/proc", "/sys", "/dev"].iter().any(|root| path.starts_with(root))
        || !path.is_absolute()
}

/// Whether `path` is on a file system whose pages cannot be evicted or that are not files at
/// all (a memory file system).
fn on_unevictable_fs(path: &Path) -> bool {
    coldstart_process::memory_file_system(path).is_ok_and(|m| m.is_some())
}

/// Discovered paths that are evictable regular files, deduplicated by their canonical path
/// (so `/lib/x.so` and `/usr/lib/x.so` on a merged-/usr system count once), in sorted order.
fn evictable_files<'a>(paths: impl IntoIterator<Item = &'a PathBuf>) -> BTreeSet<PathBuf> {
    paths
        .into_iter()
        .filter(|p| !is_pseudo_path(p))
        .filter_map(|p| fs::canonicalize(p).ok())
        .filter(|p| !is_pseudo_path(p))
        .filter(|p| fs::metadata(p).map(|m| m.is_file()).unwrap_or(false))
        .filter(|p| !on_unevictable_fs(p))
        .collect()
}

/// The files the `selective` state evicts: the discovered regular files, deduplicated, with
/// pseudo file systems (`/proc`, `/sys`, `/dev`), memory-backed files (tmpfs, memfd) and
/// deleted files removed. Paths are canonical and sorted.
pub fn selective_set(discovered: &[PathBuf]) -> Vec<PathBuf> {
    evictable_files(discovered).into_iter().collect()
}

/// The files the `warm` state evicts: the program's own files (see the module docs for the
/// rule) plus `exe`. Paths are canonical and sorted.
pub fn warm_set(discovered: &[PathBuf], exe: &Path) -> Vec<PathBuf> {
    warm_set_with(discovered, exe, &LibDirs::system())
}

/// [`warm_set`] with the system library directories given.
pub fn warm_set_with(discovered: &[PathBuf], exe: &Path, lib_dirs: &LibDirs) -> Vec<PathBuf> {
    let exe = exe.to_path_buf();
    evictable_files(discovered.iter().chain(std::iter::once(&exe)))
        .into_iter()
        .filter(|p| !is_system_library(p, lib_dirs))
        .collect()
}

/// Whether `path` is an ELF shared object in a system library directory.
pub fn is_system_library(path: &Path, lib_dirs: &LibDirs) -> bool {
    path.parent().is_some_and(|dir| lib_dirs.contains(dir)) && is_elf_shared_object(path)
}

/// Whether the file starts with an ELF header of type `ET_DYN` (shared objects, and also
/// position-independent executables, which is why the directory matters too).
fn is_elf_shared_object(path: &Path) -> bool {
    let mut header = [0u8; 18];
    let Ok(mut file) = fs::File::open(path) else { return false };
    if file.read_exact(&mut header).is_err() || &header[..4] != b"\x7fELF" {
        return false;
    }
    let e_type = match header[5] {
        1 => u16::from_le_bytes([header[16], header[17]]),
        2 => u16::from_be_bytes([header[16], header[17]]),
        _ => return false,
    };
    e_type == 3 // ET_DYN
}

/// The system library directories, canonicalised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LibDirs {
    dirs: BTreeSet<PathBuf>,
}

impl LibDirs {
    /// `/lib`, `/usr/lib`, `/lib64`, `/usr/lib64`, their multiarch subdirectories, and the
    /// directories of `/etc/ld.so.conf`.
    pub fn system() -> LibDirs {
        let mut dirs = LibDirs::from_roots(["/lib", "/usr/lib", "/lib64", "/usr/lib64"]);
        for dir in ld_so_conf_dirs(Path::new("/etc/ld.so.conf"), 0) {
            dirs.insert(&dir);
        }
        dirs
    }

    /// The given directories and their multiarch subdirectories (`ARCH-linux-ABI`).
    pub fn from_roots<P: AsRef<Path>>(roots: impl IntoIterator<Item = P>) -> LibDirs {
        let mut dirs = LibDirs::default();
        for root in roots {
            let root = root.as_ref();
            dirs.insert(root);
            let Ok(entries) = fs::read_dir(root) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name();
                if is_multiarch_name(&name.to_string_lossy()) {
                    dirs.insert(&entry.path());
                }
            }
        }
        dirs
    }

    /// Add a directory (canonicalised when it exists).
    pub fn insert(&mut self, dir: &Path) {
        self.dirs.insert(fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()));
    }

    /// Whether `dir` (canonicalised) is one of them.
    pub fn contains(&self, dir: &Path) -> bool {
        let dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        self.dirs.contains(&dir)
    }
}

/// `x86_64-linux-gnu`, `aarch64-linux-gnu`, `arm-linux-gnueabihf`, `i386-linux-gnu`, ...
fn is_multiarch_name(name: &str) -> bool {
    let mut parts = name.splitn(3, '-');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(arch), Some("linux"), Some(abi)) if !arch.is_empty() && !abi.is_empty()
    )
}

/// Directories listed in an `ld.so.conf`-style file, following `include GLOB` lines (a glob in
/// the last path component only, as Debian uses: `include /etc/ld.so.conf.d/*.conf`).
pub(crate) fn ld_so_conf_dirs(conf: &Path, depth: usize) -> Vec<PathBuf> {
    let Ok(text) = fs::read_to_string(conf) else { return Vec::new() };
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include").map(str::trim) {
            if depth >= 8 || pattern.is_empty() {
                continue;
            }
            let pattern = if Path::new(pattern).is_absolute() {
                PathBuf::from(pattern)
            } else {
                conf.parent().unwrap_or(Path::new("/")).join(pattern)
            };
            for file in glob_last_component(&pattern) {
                out.extend(ld_so_conf_dirs(&file, depth + 1));
            }
        } else if line.starts_with('/') {
            out.push(PathBuf::from(line));
        }
    }
    out
}

fn glob_last_component(pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
        return Vec::new();
    };
    let name = name.to_string_lossy();
    let Some((prefix, suffix)) = name.split_once('*') else {
        return vec![pattern.to_path_buf()];
    };
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.len() >= prefix.len() + suffix.len() && n.starts_with(prefix) && n.ends_with(suffix)
        })
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal little-endian ELF header of the given `e_type`.
    fn elf(e_type: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2; // ELFCLASS64
        h[5] = 1; // ELFDATA2LSB
        h[16..18].copy_from_slice(&e_type.to_le_bytes());
        h
    }

    #[test]
    fn multiarch_names() {
        assert!(is_multiarch_name("x86_64-linux-gnu"));
        assert!(is_multiarch_name("arm-linux-gnueabihf"));
        assert!(!is_multiarch_name("firefox"));
        assert!(!is_multiarch_name("python3-linux"));
    }

    #[test]
    fn warm_set_keeps_system_shared_objects_only() {
        // On disk: files on tmpfs are dropped from every set as unevictable.
        let dir = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let root = dir.path().canonicalize().unwrap();
        let sys = root.join("usr/lib");
        let multi = sys.join("x86_64-linux-gnu");
        let app = sys.join("myapp");
        for d in [&multi, &app] {
            fs::create_dir_all(d).unwrap();
        }
        let libc = multi.join("libc.so.6");
        let app_lib = app.join("libapp.so");
        let data = sys.join("locale-archive");
        let exe = root.join("bin-prog");
        fs::write(&libc, elf(3)).unwrap();
        fs::write(&app_lib, elf(3)).unwrap();
        fs::write(&data, b"not elf").unwrap();
        fs::write(&exe, elf(3)).unwrap();
        let dirs = LibDirs::from_roots([&sys]);
        assert!(dirs.contains(&multi));
        assert!(!dirs.contains(&app));

        let discovered = vec![libc.clone(), app_lib.clone(), data.clone(), sys.clone()];
        let set = warm_set_with(&discovered, &exe, &dirs);
        let mut expected = vec![app_lib, data, exe];
        expected.sort();
        assert_eq!(set, expected);
    }

    #[test]
    fn selective_set_dedups_and_drops_pseudo_and_deleted_files() {
        let dir = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let a = dir.path().join("a");
        fs::write(&a, b"a").unwrap();
        let link = dir.path().join("link-to-a");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        let discovered = vec![
            a.clone(),
            link,
            a.clone(),
            PathBuf::from("/proc/self/maps"),
            PathBuf::from("/dev/null"),
            PathBuf::from("/memfd:wayland (deleted)"),
            PathBuf::from(format!("{} (deleted)", a.display())),
            dir.path().join("missing"),
            dir.path().to_path_buf(),
        ];
        let set = selective_set(&discovered);
        // /var/tmp is normally on disk; where it is tmpfs,
        // the file is rightly dropped as unevictable.
        if on_unevictable_fs(&a) {
            assert!(set.is_empty());
        } else {
            assert_eq!(set, vec![a.canonicalize().unwrap()]);
        }
    }

    #[test]
    fn tmpfs_files_are_not_evictable() {
        if !Path::new("/dev/shm").is_dir() || !on_unevictable_fs(Path::new("/dev/shm")) {
            return; // no tmpfs on /dev/shm here
        }
        let f = tempfile::NamedTempFile::new_in("/dev/shm").unwrap();
        assert!(on_unevictable_fs(f.path()));
    }

    #[test]
    fn ld_so_conf_follows_includes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("conf.d")).unwrap();
        fs::write(d.join("ld.so.conf"), "# comment\ninclude conf.d/*.conf\n/opt/extra/lib\n")
            .unwrap();
        fs::write(d.join("conf.d/a.conf"), "/usr/local/lib  # local\n").unwrap();
        fs::write(d.join("conf.d/b.conf"), "/usr/lib/x86_64-linux-gnu/libfakeroot\n").unwrap();
        fs::write(d.join("conf.d/ignored.txt"), "/nope\n").unwrap();
        assert_eq!(
            ld_so_conf_dirs(&d.join("ld.so.conf"), 0),
            vec![
                PathBuf::from("/usr/local/lib"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libfakeroot"),
                PathBuf::from("/opt/extra/lib"),
            ]
        );
    }

    #[test]
    fn system_lib_dirs_include_the_real_libc_dir() {
        // The directory this very process loaded its C library from, wherever the
        // distribution puts it (a multiarch subdirectory on Debian, /usr/lib64 on Fedora).
        let maps = fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .map(Path::new)
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libc.so")))
            .expect("the test process maps its C library");
        let dir = libc.parent().unwrap();
        assert!(
            LibDirs::system().contains(dir),
            "{} is not a system library directory",
            dir.display()
        );
    }
}
