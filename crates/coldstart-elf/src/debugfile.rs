//! Finding a separate debug file, the way gdb does: by build-id under each debug root
//! (`/usr/lib/debug/.build-id/xx/yyyy.debug`), then by `.gnu_debuglink` next to the file, in
//! its `.debug/` directory, and under each debug root plus the file's directory.

use std::path::{Path, PathBuf};

use crate::ElfInfo;

/// Where to look for separate debug files.
#[derive(Debug, Clone)]
pub struct SymbolOptions {
    /// Debug roots, searched in order (default: `/usr/lib/debug`).
    pub debug_roots: Vec<PathBuf>,
    /// Whether to look for a separate debug file at all when `.symtab` is missing.
    pub use_debug_files: bool,
}

impl Default for SymbolOptions {
    fn default() -> Self {
        SymbolOptions { debug_roots: vec![PathBuf::from("/usr/lib/debug")], use_debug_files: true }
    }
}

/// The separate debug file of `info`, if one exists.
pub fn find_debug_file(info: &ElfInfo, options: &SymbolOptions) -> Option<PathBuf> {
    if !options.use_debug_files {
        return None;
    }
    if let Some(id) = info.build_id.as_deref().filter(|id| id.len() >= 2) {
        let hex = crate::hex(id);
        for root in &options.debug_roots {
            let candidate =
                root.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..]));
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    let (name, crc) = info.debuglink.as_ref()?;
    let dir = info.path.parent().unwrap_or(Path::new("/"));
    let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
    let rel = dir.strip_prefix("/").unwrap_or(dir);
    for root in &options.debug_roots {
        candidates.push(root.join(rel).join(name));
    }
    candidates
        .into_iter()
        .find(|c| c.is_file() && c != &info.path && crc32_of(c).is_some_and(|v| v == *crc))
}

/// CRC-32 (the IEEE polynomial, as `.gnu_debuglink` uses) of a whole file.
fn crc32_of(path: &Path) -> Option<u32> {
    let data = std::fs::read(path).ok()?;
    Some(crc32(&data))
}

pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
    }
}
