//! A command's name to the file that would run, as `execvp(3)` finds it.
//!
//! A name with a slash is that file; a bare name is looked for in each directory of `PATH` in
//! turn (an empty entry is the current directory), and the first regular file this process
//! may execute is the one. A file found but not executable is passed over, as `execvp`
//! passes it over, and named only when nothing later in `PATH` runs: "not executable" is
//! then the honest reason. Without `PATH`, the C library's default is searched.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use coldstart_error::Category;

/// What `execvp` searches when `PATH` is not set: glibc's `_CS_PATH`.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Why a command names no program that would run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The command is empty.
    #[error("the command is empty")]
    Empty,
    /// A bare name that no directory of `PATH` holds.
    #[error("{} is not in PATH", .0.to_string_lossy())]
    NotInPath(OsString),
    /// A name with a slash that does not exist.
    #[error("{} does not exist", .0.display())]
    Missing(PathBuf),
    /// A name with a slash that is a directory.
    #[error("{} is a directory", .0.display())]
    IsDirectory(PathBuf),
    /// The file found (the first in `PATH` order) is not executable by this process.
    #[error("{} is not executable", .0.display())]
    NotExecutable(PathBuf),
}

impl LookupError {
    /// Every lookup error is the user's input: a command that cannot run.
    pub fn category(&self) -> Category {
        match self {
            LookupError::Empty
            | LookupError::NotInPath(_)
            | LookupError::Missing(_)
            | LookupError::IsDirectory(_)
            | LookupError::NotExecutable(_) => Category::Usage,
        }
    }

    /// What the reason is about: the file found, or the name given when none was.
    pub fn subject(&self) -> String {
        match self {
            LookupError::Empty => String::new(),
            LookupError::NotInPath(name) => name.to_string_lossy().into_owned(),
            LookupError::Missing(p)
            | LookupError::IsDirectory(p)
            | LookupError::NotExecutable(p) => p.display().to_string(),
        }
    }

    /// Why, in words to follow [`subject`](Self::subject): "is not in PATH", "is a directory".
    pub fn reason(&self) -> &'static str {
        match self {
            LookupError::Empty => "is empty",
            LookupError::NotInPath(_) => "is not in PATH",
            LookupError::Missing(_) => "does not exist",
            LookupError::IsDirectory(_) => "is a directory",
            LookupError::NotExecutable(_) => "is not executable",
        }
    }
}

/// The file `execvp` would run for `name`, looked up in this process's `PATH`.
pub fn find_program(name: impl AsRef<OsStr>) -> Result<PathBuf, LookupError> {
    find_in(name.as_ref(), &search_path())
}

/// The directories of `PATH`, in order (the C library's default when it is not set).
pub fn search_path() -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path).collect()
}

/// What a candidate file is.
enum Candidate {
    Runs,
    Missing,
    Directory,
    NotExecutable,
}

fn candidate(path: &Path) -> Candidate {
    match std::fs::metadata(path) {
        Err(_) => Candidate::Missing,
        Ok(m) if m.is_dir() => Candidate::Directory,
        Ok(_) if nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok() => {
            Candidate::Runs
        }
        Ok(_) => Candidate::NotExecutable,
    }
}

/// [`find_program`] with the directories given.
fn find_in(name: &OsStr, dirs: &[PathBuf]) -> Result<PathBuf, LookupError> {
    if name.is_empty() {
        return Err(LookupError::Empty);
    }
    if name.as_encoded_bytes().contains(&b'/') {
        let path = PathBuf::from(name);
        return match candidate(&path) {
            Candidate::Runs => Ok(path),
            Candidate::Missing => Err(LookupError::Missing(path)),
            Candidate::Directory => Err(LookupError::IsDirectory(path)),
            Candidate::NotExecutable => Err(LookupError::NotExecutable(path)),
        };
    }
    let mut not_executable = None;
    for dir in dirs {
        let path = dir.join(name);
        match candidate(&path) {
            Candidate::Runs => return Ok(path),
            Candidate::NotExecutable => {
                not_executable.get_or_insert(path);
            }
            Candidate::Missing | Candidate::Directory => {}
        }
    }
    Err(not_executable
        .map_or_else(|| LookupError::NotInPath(name.into()), LookupError::NotExecutable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(path: &Path, mode: u32) {
        std::fs::write(path, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_first_executable_in_path_order_runs() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        file(&a.path().join("tool"), 0o755);
        file(&b.path().join("tool"), 0o755);
        let dirs = [a.path().to_owned(), b.path().to_owned()];
        assert_eq!(find_in("tool".as_ref(), &dirs), Ok(a.path().join("tool")));
        let dirs = [b.path().to_owned(), a.path().to_owned()];
        assert_eq!(find_in("tool".as_ref(), &dirs), Ok(b.path().join("tool")));
    }

    #[test]
    fn directories_and_files_that_cannot_run_are_passed_over() {
        let (a, b, c) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        std::fs::create_dir(a.path().join("tool")).unwrap();
        file(&b.path().join("tool"), 0o644);
        file(&c.path().join("tool"), 0o755);
        let dirs = [a.path().to_owned(), b.path().to_owned(), c.path().to_owned()];
        assert_eq!(find_in("tool".as_ref(), &dirs), Ok(c.path().join("tool")));
        // Nothing later runs: the file that would not is the reason.
        assert_eq!(
            find_in("tool".as_ref(), &dirs[..2]),
            Err(LookupError::NotExecutable(b.path().join("tool")))
        );
        let not_in_path = find_in("tool".as_ref(), &dirs[..1]).unwrap_err();
        assert_eq!(not_in_path, LookupError::NotInPath("tool".into()));
        assert_eq!(
            format!("{} {}", not_in_path.subject(), not_in_path.reason()),
            "tool is not in PATH"
        );
        let not_executable = find_in("tool".as_ref(), &dirs[..2]).unwrap_err();
        assert_eq!(not_executable.subject(), b.path().join("tool").display().to_string());
    }

    #[test]
    fn a_name_with_a_slash_is_that_file_and_path_is_not_searched() {
        let d = tempfile::tempdir().unwrap();
        file(&d.path().join("tool"), 0o755);
        let dirs = [d.path().to_owned()];
        let named = d.path().join("tool");
        assert_eq!(find_in(named.as_os_str(), &[]), Ok(named.clone()));
        assert_eq!(
            find_in("./tool".as_ref(), &dirs),
            Err(LookupError::Missing("./tool".into())),
            "relative to the current directory, not PATH"
        );
        assert_eq!(
            find_in(d.path().as_os_str(), &dirs),
            Err(LookupError::IsDirectory(d.path().to_owned()))
        );
        file(&d.path().join("data"), 0o600);
        assert_eq!(
            find_in(d.path().join("data").as_os_str(), &dirs),
            Err(LookupError::NotExecutable(d.path().join("data")))
        );
    }

    #[test]
    fn an_empty_path_entry_is_the_current_directory() {
        assert_eq!(std::env::split_paths(":/bin").next(), Some(PathBuf::new()));
        assert_eq!(PathBuf::new().join("tool"), Path::new("tool"));
        assert_eq!(find_in("".as_ref(), &[PathBuf::new()]), Err(LookupError::Empty));
    }

    #[test]
    fn the_shell_is_found_in_this_process_path() {
        let sh = find_program("sh").unwrap();
        assert!(sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(
            find_program("coldstart-no-such-program").unwrap_err().category(),
            Category::Usage
        );
    }
}
