//! Read-only memory maps of files, and the calls made on them: advice, population, locking
//! and residency (`madvise`, `mlock`, `mincore`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `MADV_POPULATE_READ` (Linux 5.14), which the libc crate does not name on every target.
const MADV_POPULATE_READ: i32 = 22;

/// A read-only mapping of part of a file, unmapped on drop. An empty one maps nothing.
pub struct Map {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only; its bytes may be read from any thread, and it is unmapped
// once, by its owner.
unsafe impl Send for Map {}
// SAFETY: as above: nothing writes through a `&Map`.
unsafe impl Sync for Map {}

/// How a [`Map`] shares its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// `MAP_SHARED`: the page cache's own pages (what prefetching and residency need).
    Shared,
    /// `MAP_PRIVATE`: a private view (what a parser borrowing bytes needs).
    Private,
}

/// Advice on how a [`Map`] is read (`madvise`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_RANDOM`: faults read no more than their page (no read-ahead).
    Random,
    /// `MADV_HUGEPAGE`: faults read whole huge-page blocks where the file system can.
    HugePage,
}

impl Map {
    /// Maps `len` bytes of `file` at `offset` (a multiple of the page size); maps only, reads
    /// nothing.
    pub fn new(file: &File, offset: u64, len: usize, sharing: Sharing) -> io::Result<Map> {
        if len == 0 {
            return Ok(Map { ptr: std::ptr::null_mut(), len: 0 });
        }
        let flags = match sharing {
            Sharing::Shared => libc::MAP_SHARED,
            Sharing::Private => libc::MAP_PRIVATE,
        };
        // SAFETY: a fresh read-only mapping of a file the caller holds open; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                flags,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map { ptr, len })
    }

    /// The mapped bytes. Reading one faults its page in from the file.
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: ptr..ptr+len is a live read-only mapping owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it maps nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Advises the kernel how the whole mapping will be read.
    pub fn advise(&self, advice: Advice) -> io::Result<()> {
        let advice = match advice {
            Advice::Random => libc::MADV_RANDOM,
            Advice::HugePage => libc::MADV_HUGEPAGE,
        };
        self.madvise(0, self.len, advice)
    }

    /// Faults in `len` bytes from `from` (a multiple of the page size) with
    /// `MADV_POPULATE_READ`: returns when those pages are in the page cache.
    pub fn populate(&self, from: usize, len: usize) -> io::Result<()> {
        self.madvise(from, len, MADV_POPULATE_READ)
    }

    /// Locks the mapping's pages in memory (`mlock`: which reads them first), until it is
    /// unmapped.
    pub fn lock(&self) -> io::Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: a lock of our own live mapping.
        if unsafe { libc::mlock(self.ptr, self.len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// How many of its pages are in the page cache, and of how many (`mincore`).
    pub fn resident(&self) -> io::Result<(u64, u64)> {
        if self.len == 0 {
            return Ok((0, 0));
        }
        let pages = self.len.div_ceil(crate::page_size() as usize);
        let mut vec = vec![0u8; pages];
        // SAFETY: mincore writes one byte per page of our own mapping into `vec`, `pages` long.
        if unsafe { libc::mincore(self.ptr, self.len, vec.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((vec.iter().filter(|b| *b & 1 != 0).count() as u64, pages as u64))
    }

    fn madvise(&self, from: usize, len: usize, advice: i32) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        if from.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "advice beyond the mapping"));
        }
        // SAFETY: advice on a range within our own live mapping (checked above).
        let rc =
            unsafe { libc::madvise((self.ptr as usize + from) as *mut libc::c_void, len, advice) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl std::fmt::Debug for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Map").field("at", &self.ptr).field("len", &self.len).finish()
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: our own mapping, unmapped once, not used after this.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_is_mapped_read_and_resident_after_populating() {
        let p = std::env::temp_dir().join(format!("coldstart-sys-map-{}", std::process::id()));
        let mut f = File::create(&p).unwrap();
        f.write_all(&vec![7u8; 3 * 4096]).unwrap();
        let f = File::open(&p).unwrap();
        let m = Map::new(&f, 0, 3 * 4096, Sharing::Shared).unwrap();
        assert_eq!(m.bytes()[4096], 7);
        m.populate(0, 3 * 4096).unwrap();
        assert_eq!(m.resident().unwrap(), (3, 3));
        m.advise(Advice::Random).unwrap();
        assert!(m.populate(4096, 3 * 4096).is_err(), "beyond the mapping");
        assert!(Map::new(&f, 0, 0, Sharing::Private).unwrap().bytes().is_empty());
        std::fs::remove_file(&p).unwrap();
    }
}
