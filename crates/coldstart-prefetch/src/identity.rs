//! A file's identity: device, inode, size, modification time, and for ELF files the build-id
//! and where its bytes lie, so that replay checks it with one small read.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use crate::db::FileEntry;

/// The identity of the file at `path` now, or why it has none.
pub fn identify(path: &Path) -> std::io::Result<FileEntry> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let (build_id_offset, build_id) = match build_id_note(&file) {
        Some((off, bytes)) => (Some(off), Some(hex(&bytes))),
        None => (None, None),
    };
    Ok(FileEntry {
        path: path.to_owned(),
        dev: format!("{}:{}", libc::major(meta.dev()), libc::minor(meta.dev())),
        ino: meta.ino(),
        size: meta.len(),
        mtime: meta.mtime(),
        mtime_nsec: meta.mtime_nsec(),
        build_id,
        build_id_offset,
    })
}

/// How a file now compares with its recorded identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// Device, inode, size, mtime and build-id as recorded.
    Same,
    /// Size, mtime (to the nanosecond) and build-id as recorded, on another device or inode:
    /// a copy made with its times kept (a restore, `cp -a`, the storage emulation's copy).
    Moved,
    /// Something that matters changed: what, in words.
    Changed(String),
}

/// Whether the file open as `file` (with `meta`) is the one `entry` names: its size, mtime and
/// build-id (one small read), then whether it still lies where it did.
pub fn compare(entry: &FileEntry, file: &File, meta: &std::fs::Metadata) -> Match {
    match compare_metadata(entry, meta) {
        Match::Changed(why) => Match::Changed(why),
        m => build_id_changed(entry, file).map_or(m, Match::Changed),
    }
}

/// [`compare`] without the build-id: size, mtime, device and inode (no read of the file).
pub fn compare_metadata(entry: &FileEntry, meta: &std::fs::Metadata) -> Match {
    if meta.len() != entry.size {
        return Match::Changed(format!("size {} is now {}", entry.size, meta.len()));
    }
    if (meta.mtime(), meta.mtime_nsec()) != (entry.mtime, entry.mtime_nsec) {
        return Match::Changed("modified since the recording".into());
    }
    let dev = format!("{}:{}", libc::major(meta.dev()), libc::minor(meta.dev()));
    if dev != entry.dev || meta.ino() != entry.ino {
        return Match::Moved;
    }
    Match::Same
}

/// Why the file's build-id is not the recorded one (`None`: it is, or none was recorded):
/// one small read at the recorded offset.
pub fn build_id_changed(entry: &FileEntry, file: &File) -> Option<String> {
    let (Some(id), Some(off)) = (&entry.build_id, entry.build_id_offset) else { return None };
    let mut buf = vec![0u8; id.len() / 2];
    match file.read_exact_at(&mut buf, off) {
        Ok(()) if hex(&buf) == *id => None,
        Ok(()) => Some(format!("build-id is no longer {id}")),
        Err(e) => Some(format!("build-id unreadable: {e}")),
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The file offset and bytes of the GNU build-id note of an ELF file (32 or 64 bit, little or
/// big endian), found through the program headers' `PT_NOTE` segments.
fn build_id_note(file: &File) -> Option<(u64, Vec<u8>)> {
    let mut ident = [0u8; 64];
    file.read_exact_at(&mut ident, 0).ok()?;
    if &ident[..4] != b"\x7fELF" {
        return None;
    }
    let is64 = ident[4] == 2;
    let le = ident[5] == 1;
    let u16_at = |b: &[u8], o: usize| {
        let a = [b[o], b[o + 1]];
        if le {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    };
    let u32_at = |b: &[u8], o: usize| {
        let a = [b[o], b[o + 1], b[o + 2], b[o + 3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let u64_at = |b: &[u8], o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        if le {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    };
    let (phoff, phentsize, phnum) = if is64 {
        (u64_at(&ident, 32), u16_at(&ident, 54) as u64, u16_at(&ident, 56) as u64)
    } else {
        (u32_at(&ident, 28) as u64, u16_at(&ident, 42) as u64, u16_at(&ident, 44) as u64)
    };
    // Each entry must hold the fields read from it (a smaller one was read past the table).
    let least = if is64 { 56 } else { 32 };
    if phentsize < least || phnum > 256 {
        return None;
    }
    let mut table = vec![0u8; (phentsize * phnum) as usize];
    file.read_exact_at(&mut table, phoff).ok()?;
    for i in 0..phnum as usize {
        let ph = &table[i * phentsize as usize..];
        const PT_NOTE: u32 = 4;
        if u32_at(ph, 0) != PT_NOTE {
            continue;
        }
        let (offset, size) = if is64 {
            (u64_at(ph, 8), u64_at(ph, 32))
        } else {
            (u32_at(ph, 4) as u64, u32_at(ph, 16) as u64)
        };
        if size > 1 << 16 {
            continue;
        }
        let mut notes = vec![0u8; size as usize];
        file.read_exact_at(&mut notes, offset).ok()?;
        let mut at = 0usize;
        while at + 12 <= notes.len() {
            let namesz = u32_at(&notes, at) as usize;
            let descsz = u32_at(&notes, at + 4) as usize;
            let kind = u32_at(&notes, at + 8);
            let name_at = at + 12;
            let desc_at = name_at + namesz.next_multiple_of(4);
            let next = desc_at + descsz.next_multiple_of(4);
            if desc_at + descsz > notes.len() {
                break;
            }
            const NT_GNU_BUILD_ID: u32 = 3;
            if kind == NT_GNU_BUILD_ID && &notes[name_at..name_at + namesz] == b"GNU\0" {
                return Some((offset + desc_at as u64, notes[desc_at..desc_at + descsz].to_vec()));
            }
            at = next;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_id_of_this_test_binary_is_found_where_it_lies() {
        let exe = std::env::current_exe().unwrap();
        let entry = identify(&exe).unwrap();
        let id = entry.build_id.clone().expect("rustc links a build-id");
        let off = entry.build_id_offset.unwrap();
        let mut buf = vec![0u8; id.len() / 2];
        File::open(&exe).unwrap().read_exact_at(&mut buf, off).unwrap();
        assert_eq!(hex(&buf), id);
        let f = File::open(&exe).unwrap();
        assert_eq!(compare(&entry, &f, &f.metadata().unwrap()), Match::Same);
    }

    #[test]
    fn a_different_build_id_is_a_change() {
        let exe = std::env::current_exe().unwrap();
        let mut entry = identify(&exe).unwrap();
        let id = entry.build_id.as_mut().unwrap();
        let flipped = if id.starts_with('0') { "1" } else { "0" };
        id.replace_range(0..1, flipped);
        let f = File::open(&exe).unwrap();
        assert!(
            matches!(compare(&entry, &f, &f.metadata().unwrap()), Match::Changed(w) if w.contains("build-id"))
        );
    }

    #[test]
    fn a_copy_with_its_times_kept_is_moved_and_a_touched_one_changed() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, b"hello").unwrap();
        let entry = identify(&a).unwrap();
        assert_eq!(entry.build_id, None);
        let b = dir.path().join("b");
        std::fs::copy(&a, &b).unwrap();
        let f = File::open(&b).unwrap();
        f.set_modified(std::fs::metadata(&a).unwrap().modified().unwrap()).unwrap();
        assert_eq!(compare(&entry, &f, &f.metadata().unwrap()), Match::Moved);
        let f = File::options().write(true).open(&b).unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
        assert!(matches!(compare(&entry, &f, &f.metadata().unwrap()), Match::Changed(_)));
    }

    #[test]
    fn program_headers_too_small_for_their_fields_are_no_build_id_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        for (entsize, num) in [(1u16, 10u16), (8, 256), (55, 3), (0, 1)] {
            let mut b = exe.clone();
            b[54..56].copy_from_slice(&entsize.to_le_bytes());
            b[56..58].copy_from_slice(&num.to_le_bytes());
            let path = dir.path().join("bad");
            std::fs::write(&path, &b).unwrap();
            assert_eq!(identify(&path).unwrap().build_id, None, "{entsize} x {num}");
        }
    }
}
