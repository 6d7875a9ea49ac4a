//! Calls on open files that std does not make (at the workspace's Rust version): advisory
//! locks, dropping a file's pages from the page cache, and flushing every file system.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Whether [`lock`] waits for a lock another process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Block until the lock is free.
    Block,
    /// Return `Ok(false)` at once when another process holds it.
    No,
}

/// An exclusive advisory lock on `file` (`flock`), held until [`unlock`] or until every
/// descriptor of this open file is closed. `Ok(false)`: another process holds it (only with
/// [`Wait::No`]).
pub fn lock(file: &File, wait: Wait) -> io::Result<bool> {
    let op = match wait {
        Wait::Block => libc::LOCK_EX,
        Wait::No => libc::LOCK_EX | libc::LOCK_NB,
    };
    loop {
        // SAFETY: flock on a descriptor `file` owns for the duration of the call.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if wait == Wait::No => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Releases the lock of [`lock`].
pub fn unlock(file: &File) -> io::Result<()> {
    // SAFETY: flock on a descriptor `file` owns for the duration of the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel to drop `file`'s clean pages from the page cache
/// (`posix_fadvise(POSIX_FADV_DONTNEED)`): advice, so pages that are dirty or mapped stay.
pub fn drop_cached(file: &File) -> io::Result<()> {
    // SAFETY: advice on a descriptor `file` owns; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    match rc {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Writes every file system's dirty data out (`sync`), so that dropping the page cache
/// afterwards drops it all.
pub fn sync_all() {
    // SAFETY: sync has no preconditions and cannot fail.
    unsafe { libc::sync() };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_held_by_another_open_file_is_refused_without_waiting_then_granted() {
        let d = std::env::temp_dir().join(format!("coldstart-sys-lock-{}", std::process::id()));
        let a = File::create(&d).unwrap();
        let b = File::open(&d).unwrap();
        assert!(lock(&a, Wait::No).unwrap());
        assert!(!lock(&b, Wait::No).unwrap(), "a second open file is refused");
        unlock(&a).unwrap();
        assert!(lock(&b, Wait::No).unwrap());
        drop_cached(&b).unwrap();
        std::fs::remove_file(&d).unwrap();
    }
}
