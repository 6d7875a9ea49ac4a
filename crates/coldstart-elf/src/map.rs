//! A read-only memory map of a whole file, so parsing borrows the page cache instead of
//! copying a large library into the heap.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::ElfError;

/// A private read-only mapping of a file (empty files are held as an empty slice).
pub struct Mmap {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and private; sharing the bytes between threads is safe.
unsafe impl Send for Mmap {}
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Map `path` read-only.
    pub fn open(path: &Path) -> Result<Mmap, ElfError> {
        let io = |source| ElfError::io(path, source);
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            // A directory opens, and only its mapping fails (ENODEV).
            return Err(ElfError::Unusable { path: path.to_owned(), problem: "is a directory" });
        }
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len() as usize;
        if len == 0 {
            return Ok(Mmap { ptr: std::ptr::null_mut(), len: 0 });
        }
        // SAFETY: mapping a file we opened, read-only and private; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io(std::io::Error::last_os_error()));
        }
        Ok(Mmap { ptr, len })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: ptr..ptr+len is a live read-only mapping owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: unmapping the mapping created in `open`.
            unsafe {
                libc::munmap(self.ptr, self.len);
            }
        }
    }
}
