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

/// Starts reading `len` bytes of `file` at `offset` into the page cache (`readahead(2)`), as
/// far as the device's read-ahead limit allows in one call; returns without waiting for them.
pub fn readahead(file: &File, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: advice on a descriptor `file` owns; no memory is passed.
    if unsafe { libc::readahead(file.as_raw_fd(), offset as libc::off64_t, len as usize) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Tells the kernel `len` bytes of `file` at `offset` will be needed
/// (`posix_fadvise(POSIX_FADV_WILLNEED)`): it starts reading them.
pub fn will_need(file: &File, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: advice on a descriptor `file` owns; no memory is passed.
    let rc = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_WILLNEED,
        )
    };
    match rc {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// One extent of a file: its offset in the file, its offset on the device, its length.
pub type Extent = (u64, u64, u64);

/// The file's extents (`FS_IOC_FIEMAP`), in file order; empty when the file system has no such
/// call.
pub fn extents(file: &File) -> Vec<Extent> {
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const COUNT: usize = 512;
    #[repr(C)]
    struct Fiemap {
        start: u64,
        length: u64,
        flags: u32,
        mapped: u32,
        count: u32,
        reserved: u32,
        extents: [[u64; 7]; COUNT],
    }
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut m = Fiemap {
            start,
            length: u64::MAX - start,
            flags: 0,
            mapped: 0,
            count: COUNT as u32,
            reserved: 0,
            extents: [[0; 7]; COUNT],
        };
        // SAFETY: the struct is the kernel's `struct fiemap` with COUNT extents after it.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &mut m as *mut Fiemap) };
        if rc != 0 || m.mapped == 0 {
            return out;
        }
        let mut last = false;
        for e in &m.extents[..(m.mapped as usize).min(COUNT)] {
            let (logical, phys, len, flags) = (e[0], e[1], e[2], e[5] as u32);
            out.push((logical, phys, len));
            start = logical + len;
            last |= flags & 1 != 0; // FIEMAP_EXTENT_LAST
        }
        if last || (m.mapped as usize) < COUNT {
            return out;
        }
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
        readahead(&b, 0, 4096).unwrap();
        will_need(&b, 0, 4096).unwrap();
        std::fs::remove_file(&d).unwrap();
    }
}
