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
/// system calls `unshare`, `mount`, `getcwd` and `chdir` (re-entering the working directory
/// through the new mounts), and allocates nothing.
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
                    return Err(io::Error::last_os_error());
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
