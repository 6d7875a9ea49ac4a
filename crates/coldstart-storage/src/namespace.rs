//! Running a program from the emulated device at its original paths.
//!
//! The child gets its own mount namespace (`unshare(CLONE_NEWNS)`), makes every mount in it a
//! slave (`MS_REC | MS_SLAVE`: the host's unmounts still reach it, its own mounts never reach the
//! host), and bind-mounts each copied file or directory over its original. The program's
//! absolute and relative lookups therefore resolve to the copy, while every other process keeps
//! seeing the original files. When the child's last process exits the namespace and its bind
//! mounts vanish with it, so a crash cannot leave these mounts behind.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::StorageError;

/// One bind mount of the child: the copy (`source`) over the original (`target`).
#[derive(Debug, Clone)]
struct Bind {
    source: CString,
    target: CString,
}

/// The `pre_exec` hook. Every string is made before `fork`; the hook itself only makes the
/// system calls `unshare`, `mount`, `access`, `getcwd` and `chdir` (re-entering the working
/// directory through the new mounts), and allocates nothing. An original that no longer exists
/// is left uncovered rather than failing the start.
#[derive(Debug, Clone)]
pub struct EnterHook {
    binds: Vec<Bind>,
}

impl EnterHook {
    /// Prepare binds of `(copy, original)` pairs.
    pub(crate) fn new(pairs: &[(PathBuf, PathBuf)]) -> Result<Self, StorageError> {
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes()).map_err(|_| {
                StorageError::io(
                    p,
                    "use as mount path (contains NUL)",
                    io::ErrorKind::InvalidInput.into(),
                )
            })
        };
        let binds = pairs
            .iter()
            .map(|(source, target)| Ok(Bind { source: c(source)?, target: c(target)? }))
            .collect::<Result<_, StorageError>>()?;
        Ok(Self { binds })
    }

    /// Enter a new mount namespace and bind the copies over the originals. Call in the child,
    /// between `fork` and `exec` (for instance from `CommandExt::pre_exec`).
    pub fn run(&self) -> io::Result<()> {
        // SAFETY: system calls with NUL-terminated strings prepared before the fork.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(io::Error::last_os_error());
            }
            let root = c"/";
            let flags = libc::MS_REC | libc::MS_SLAVE;
            if libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                flags,
                std::ptr::null(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            for b in &self.binds {
                let rc = libc::mount(
                    b.source.as_ptr(),
                    b.target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                );
                if rc != 0 {
                    let e = io::Error::last_os_error();
                    // An original deleted since it was copied (by another process): the
                    // program cannot open it either way, so there is nothing to cover.
                    if e.raw_os_error() == Some(libc::ENOENT)
                        && libc::access(b.target.as_ptr(), libc::F_OK) != 0
                        && *libc::__errno_location() == libc::ENOENT
                    {
                        continue;
                    }
                    return Err(e);
                }
            }
            // `Command` changes directory before its hooks run, so the working directory may
            // be an original that is now covered: look it up again through the new mounts.
            let mut cwd = [0 as libc::c_char; 4096];
            if !libc::getcwd(cwd.as_mut_ptr(), cwd.len()).is_null()
                && libc::chdir(cwd.as_ptr()) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

// SAFETY: `run` makes only the async-signal-safe system calls listed on the type, on strings
// made before the fork, and allocates nothing.
unsafe impl coldstart_process::BeforeExec for EnterHook {
    fn run(&self) -> io::Result<()> {
        EnterHook::run(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn an_original_deleted_since_the_copy_is_skipped_and_the_others_are_covered() {
        if !coldstart_testkit::require_root("binding copies over originals") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (copy, original) = (dir.path().join("copy"), dir.path().join("original"));
        let (copy2, gone) = (dir.path().join("copy2"), dir.path().join("gone"));
        std::fs::write(&copy, "the copy").unwrap();
        std::fs::write(&original, "the original").unwrap();
        std::fs::write(&copy2, "another copy").unwrap();
        let hook = EnterHook::new(&[(copy2, gone.clone()), (copy, original.clone())]).unwrap();
        let mut cat = std::process::Command::new("cat");
        cat.arg(&original);
        // SAFETY: the hook makes only async-signal-safe system calls.
        unsafe { cat.pre_exec(move || hook.run()) };
        let out = cat.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, b"the copy");
        assert!(!gone.exists());
        assert_eq!(std::fs::read(&original).unwrap(), b"the original", "the host keeps its file");
    }

    #[test]
    fn a_missing_copy_still_fails() {
        if !coldstart_testkit::require_root("binding copies over originals") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let original = dir.path().join("original");
        std::fs::write(&original, "the original").unwrap();
        let hook = EnterHook::new(&[(dir.path().join("no-copy"), original)]).unwrap();
        let mut t = std::process::Command::new("true");
        // SAFETY: the hook makes only async-signal-safe system calls.
        unsafe { t.pre_exec(move || hook.run()) };
        assert_eq!(t.status().unwrap_err().raw_os_error(), Some(libc::ENOENT));
    }
}
