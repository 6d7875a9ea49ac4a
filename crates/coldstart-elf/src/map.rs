//! A read-only memory map of a whole file, so parsing borrows the page cache instead of
//! copying a large library into the heap.

use std::fs::File;
use std::path::Path;

use coldstart_sys::map::{Map, Sharing};

use crate::ElfError;

/// A private read-only mapping of a file (empty files are held as an empty slice).
pub struct Mmap(Map);

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
        Map::new(&file, 0, len, Sharing::Private).map(Mmap).map_err(io)
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        self.0.bytes()
    }
}
