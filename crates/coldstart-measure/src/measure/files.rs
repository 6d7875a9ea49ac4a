//! Which of the files a discovery run found are the program's own: those whose eviction must
//! hold for a run to count. The rest of what it read (system libraries, system-wide data) is
//! shared with every other process on the machine.

use std::path::{Path, PathBuf};

use crate::cache;
use crate::launch::{resolve_program, LaunchError};

/// Directories of configuration and data that every program on the system reads
/// (`/etc/ld.so.cache`, the locale archive, gconv modules, fonts, time zones).
pub const SYSTEM_SHARED_DIRS: [&str; 6] =
    ["/etc", "/usr/share", "/usr/lib/locale", "/var/cache", "/var/lib", "/run"];

/// The executable of `command`, as discovery reports it (canonical where it can be).
pub(super) fn executable(command: &[String]) -> Result<PathBuf, LaunchError> {
    let exe = resolve_program(command)?;
    Ok(std::fs::canonicalize(&exe).unwrap_or(exe))
}

/// The files whose eviction must hold for a run to count: the program's own files
/// ([`cache::warm_set`] of the discovered `files`), without the system-wide data every process
/// reads. Any exec on the machine maps `/etc/ld.so.cache` again a moment after it was evicted,
/// so requiring it to stay out of the cache would exclude runs at random on a busy machine;
/// such files are evicted with the shared libraries (for `selective`) and their residency is
/// reported instead.
pub(super) fn own_files(files: &[PathBuf], exe: &Path) -> Vec<PathBuf> {
    cache::warm_set(files, exe)
        .into_iter()
        .filter(|f| f == exe || !SYSTEM_SHARED_DIRS.iter().any(|d| f.starts_with(d)))
        .collect()
}

/// What `--storage` copies onto the emulated device for `command` when no directory is named:
/// the program's own files of those a discovery found ([`own_files`]), and its executable.
pub(super) fn device_files(
    files: &[PathBuf],
    command: &[String],
) -> Result<Vec<PathBuf>, LaunchError> {
    let exe = executable(command)?;
    let mut own = own_files(files, &exe);
    if !own.contains(&exe) {
        own.push(exe);
    }
    Ok(own)
}
