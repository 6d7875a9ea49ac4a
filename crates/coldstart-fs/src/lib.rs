//! Writing the files coldstart produces (profiles, orders, reports, bundle manifests), and
//! saying in words why a file given as input cannot be read ([`unusable_input`]).
//!
//! Every output is written atomically: a temporary file in the destination's directory,
//! `fsync`, `rename` over the destination, `fsync` of the directory. A reader sees the old
//! file or the new one, never half of one, and a failure leaves the old file and no
//! temporary behind.
//!
//! A rename replaces whatever directory entry is at the destination, which is right for a
//! regular file and wrong for everything else a user may name as an output:
//!
//! - `-o /dev/null`, `-o /dev/stdout` or a named pipe: renaming over `/dev/null` would replace
//!   the device with a regular file for the whole machine. Those are opened and written
//!   directly (there is nothing to be atomic about).
//! - A symlink to a regular file: the file it points to is replaced, and the link is kept.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What keeps `path` from being read as an input file, in words that follow its name in a
/// message ("/tmp does not exist", "/tmp is a directory", "p.json is empty"): `None` for a
/// file with contents, and for any other failure, which reading it will name.
pub fn unusable_input(path: &Path) -> Option<&'static str> {
    match fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some("does not exist"),
        Ok(m) if m.is_dir() => Some("is a directory"),
        Ok(m) if m.is_file() && m.len() == 0 => Some("is empty"),
        _ => None,
    }
}

/// [`unusable_input`], or for an input that reading as text failed with `err`: a binary file
/// where text was expected.
pub fn unusable_text_input(path: &Path, err: &io::Error) -> Option<&'static str> {
    match err.kind() {
        io::ErrorKind::InvalidData => Some("is a binary file, not text"),
        _ => unusable_input(path),
    }
}

/// Write `bytes` to `path` as described in the crate documentation.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// Like [`write_atomic`], with the contents produced by `fill` writing into the file.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    if let Ok(meta) = fs::metadata(path) {
        if !meta.is_file() {
            if meta.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is a directory", path.display()),
                ));
            }
            // A device, a pipe or a socket: write into it, never replace it.
            let mut f = OpenOptions::new().write(true).open(path)?;
            fill(&mut f)?;
            return f.flush();
        }
    }
    let target = resolve_symlinks(path)?;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{}: not a file name", path.display()))
    })?;
    // A file replaced keeps its permissions; a new one gets the usual 0666 less the umask.
    let mode = fs::metadata(&target).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0o666);
    let tmp = dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), unique()));

    /// Removes the temporary file unless it was renamed into place.
    struct TmpGuard<'a>(&'a Path, bool);
    impl Drop for TmpGuard<'_> {
        fn drop(&mut self) {
            if !self.1 {
                let _ = fs::remove_file(self.0);
            }
        }
    }

    let file = OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
    let mut guard = TmpGuard(&tmp, false);
    let mut w = io::BufWriter::new(file);
    fill(&mut w)?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    if mode != 0o666 {
        // `mode` went through the umask; a replaced file keeps exactly what it had.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
    }
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, &target)?;
    guard.1 = true;
    // Make the rename itself durable; not every file system allows syncing a directory.
    if let Ok(d) = fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Check, before any work, that [`write_atomic`] will be able to write `path`: it is not a
/// directory, and a temporary file can be created (and is removed again) in the directory that
/// will hold it. A device or a socket is checked by opening it for writing; a named pipe is
/// taken as it is (opening it would wait for a reader). The error names what failed.
pub fn check_writable(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let named =
        |e: io::Error, what: &Path| io::Error::new(e.kind(), format!("{}: {e}", what.display()));
    if let Ok(meta) = fs::metadata(path) {
        if meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is a directory", path.display()),
            ));
        }
        if meta.file_type().is_fifo() {
            return Ok(());
        }
        if !meta.is_file() {
            return OpenOptions::new().write(true).open(path).map(drop).map_err(|e| named(e, path));
        }
    }
    let target = resolve_symlinks(path)?;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{}: no such directory", dir.display()),
        ));
    }
    let probe = dir.join(format!(".coldstart-check.{}.tmp", unique()));
    OpenOptions::new().write(true).create_new(true).open(&probe).map_err(|e| named(e, &dir))?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// Follow `path` through symlinks to the entry that should be replaced (which need not exist
/// yet: a dangling link names the file to create).
fn resolve_symlinks(path: &Path) -> io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = fs::read_link(&p)?;
                p = match p.parent() {
                    Some(parent) if to.is_relative() => parent.join(to),
                    _ => to,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: too many levels of symbolic links", path.display()),
    ))
}

/// A name part unique on this host for the life of the process: for temporary files beside an
/// output, which two processes or two threads never share.
pub fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn check_writable_accepts_what_write_atomic_writes_and_names_what_it_cannot() {
        let d = tempfile::tempdir().unwrap();
        check_writable(&d.path().join("new.json")).unwrap();
        check_writable(Path::new("/dev/null")).unwrap();
        let missing = d.path().join("no-such-dir").join("p.json");
        let err = check_writable(&missing).unwrap_err().to_string();
        assert!(err.contains("no-such-dir"), "{err}");
        let err = check_writable(d.path()).unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
        // /proc takes no new files, not even from root.
        let err = check_writable(Path::new("/proc/coldstart-p.json")).unwrap_err().to_string();
        assert!(err.starts_with("/proc:"), "{err}");
        assert!(leftovers(d.path()).is_empty());
    }

    #[test]
    fn replaces_a_file_keeping_its_mode_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.json");
        write_atomic(&p, b"one").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o640);
        assert!(leftovers(d.path()).is_empty());
    }

    #[test]
    fn a_failed_fill_keeps_the_old_file_and_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out");
        write_atomic(&p, b"old").unwrap();
        let err = write_atomic_with(&p, |w| {
            w.write_all(b"partial")?;
            Err(io::Error::other("serialiser failed"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "serialiser failed");
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert!(leftovers(d.path()).is_empty());
    }

    #[test]
    fn dev_null_stays_a_device() {
        write_atomic(Path::new("/dev/null"), b"discarded").unwrap();
        let meta = fs::metadata("/dev/null").unwrap();
        assert!(meta.file_type().is_char_device());
    }

    #[test]
    fn a_named_pipe_is_written_into_not_replaced() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success(), "mkfifo {}", fifo.display());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read(fifo).unwrap())
        };
        write_atomic(&fifo, b"through the pipe").unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
    }

    #[test]
    fn a_symlink_keeps_pointing_at_the_replaced_file() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real.txt");
        let link = d.path().join("link.txt");
        fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink("real.txt", &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
        // A dangling link names the file to create.
        let dangling = d.path().join("dangling");
        std::os::unix::fs::symlink("created.txt", &dangling).unwrap();
        write_atomic(&dangling, b"made").unwrap();
        assert_eq!(fs::read(d.path().join("created.txt")).unwrap(), b"made");
    }

    #[test]
    fn a_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let err = write_atomic(d.path(), b"x").unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }
}
