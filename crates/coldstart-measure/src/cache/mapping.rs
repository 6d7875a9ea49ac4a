//! A shared read-only mapping of a whole file, unmapped on drop: what `mincore(2)`, the
//! folio lookup and the resident hold look at a file's page-cache pages through.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use coldstart_sys::page_size;

#[derive(Debug)]
pub(super) struct Mapping {
    pub addr: *mut libc::c_void,
    pub len: usize,
}

impl Mapping {
    /// Map the first `len` bytes of `file` (not empty). Maps only: no page is touched.
    pub fn new(file: &File, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared read-only mapping of an open file.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { addr, len })
    }

    /// One byte per page from `mincore(2)`: bit 0 set when the page is in the page cache.
    pub fn mincore(&self) -> io::Result<Vec<u8>> {
        let mut vec = vec![0u8; self.len.div_ceil(page_size() as usize)];
        // SAFETY: the mapping is live and `vec` has one byte per page of it.
        if unsafe { libc::mincore(self.addr, self.len, vec.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping, not used after this (munmap also unlocks it).
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

// SAFETY: the pointer names a mapping owned by this value alone; only Drop unmaps it.
unsafe impl Send for Mapping {}
