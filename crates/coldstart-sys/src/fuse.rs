//! Whether this process may mount a FUSE file system, asked before any work a failed mount
//! would waste, and if not, what it lacks and how to get it.
//!
//! A mount needs `/dev/fuse`, readable and writable by the user. A process with
//! `CAP_SYS_ADMIN` (root) then mounts itself; any other goes through `fusermount3`, which must
//! be installed and setuid root. The helper is found where the FUSE library looks for it:
//! `FUSERMOUNT_PATH`, else `fusermount3` or `fusermount` on `PATH`, in `/sbin` or in `/bin`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The FUSE device.
pub const DEVICE: &str = "/dev/fuse";

/// What keeps this process from mounting a FUSE file system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unusable {
    /// `/dev/fuse` is not there, or no driver answers it (the error).
    NoDevice(String),
    /// `/dev/fuse` may not be opened for reading and writing by this user.
    Device {
        /// This user's id.
        uid: u32,
        /// The error opening it.
        error: String,
    },
    /// A user without `CAP_SYS_ADMIN` needs `fusermount3`, and none is installed.
    NoHelper,
    /// The `fusermount3` found is not setuid root.
    HelperNotSetuid(PathBuf),
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::NoDevice(e) => write!(
                f,
                "{DEVICE} is not usable ({e}): load the module (`modprobe fuse`), or in a \
                 container give it the device (`--device /dev/fuse`)"
            ),
            Unusable::Device { uid, error } => write!(
                f,
                "{DEVICE} cannot be opened for reading and writing by this user (uid {uid}: \
                 {error}): run as root, or give users access to it (`chmod 0666 {DEVICE}`, as \
                 Debian has it)"
            ),
            Unusable::NoHelper => f.write_str(
                "a user without CAP_SYS_ADMIN mounts through fusermount3, which is not \
                 installed: install it (Debian: `apt-get install fuse3`), or run as root",
            ),
            Unusable::HelperNotSetuid(p) => write!(
                f,
                "{} is not setuid root, so this user cannot mount with it: run `chmod u+s {}` \
                 as root (Debian's fuse3 package installs it so), or run as root",
                p.display(),
                p.display()
            ),
        }
    }
}

impl std::error::Error for Unusable {}

/// Whether this process may mount a FUSE file system (the module's documentation).
pub fn check() -> Result<(), Unusable> {
    open_device()?;
    if has_sys_admin() {
        return Ok(());
    }
    let helper = helper().ok_or(Unusable::NoHelper)?;
    let meta = std::fs::metadata(&helper).map_err(|_| Unusable::NoHelper)?;
    if meta.uid() != 0 || meta.mode() & libc::S_ISUID == 0 {
        return Err(Unusable::HelperNotSetuid(helper));
    }
    Ok(())
}

/// Opens and closes `/dev/fuse` for reading and writing, as a mount will.
fn open_device() -> Result<(), Unusable> {
    let path = CString::new(DEVICE).expect("no NUL");
    // SAFETY: open a path we own as a C string; the descriptor is closed at once below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: the descriptor opened above, closed once.
        unsafe { libc::close(fd) };
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => {
            // SAFETY: getuid has no preconditions and cannot fail.
            let uid = unsafe { libc::getuid() };
            Err(Unusable::Device { uid, error: e.to_string() })
        }
        Some(libc::ENOENT | libc::ENODEV | libc::ENXIO) => Err(Unusable::NoDevice(e.to_string())),
        // Another error is the mount's to say.
        _ => Ok(()),
    }
}

/// Whether the effective capabilities hold `CAP_SYS_ADMIN` (`CapEff` of
/// `/proc/self/status`; root's when that cannot be read).
fn has_sys_admin() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:"));
    match eff.and_then(|v| u64::from_str_radix(v.trim(), 16).ok()) {
        Some(caps) => caps & (1 << CAP_SYS_ADMIN) != 0,
        None => crate::is_root(),
    }
}

/// The mount helper the FUSE library would run, if there is one.
fn helper() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FUSERMOUNT_PATH") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let names = ["fusermount3", "fusermount"];
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(["/sbin", "/bin"].map(PathBuf::from));
    dirs.flat_map(|d| names.map(|n| d.join(n))).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else { return false };
    // SAFETY: access on a path we own as a C string.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_says_what_to_do_in_one_line() {
        let all = [
            Unusable::NoDevice("No such file or directory (os error 2)".into()),
            Unusable::Device { uid: 1000, error: "Permission denied (os error 13)".into() },
            Unusable::NoHelper,
            Unusable::HelperNotSetuid("/usr/bin/fusermount3".into()),
        ];
        for u in all {
            let text = u.to_string();
            assert!(!text.contains('\n'), "{text}");
            assert!(text.contains("run as root") || text.contains("modprobe"), "{text}");
        }
    }
}
