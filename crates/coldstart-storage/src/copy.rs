//! Copying a program's files onto the emulated device in their absolute path shape:
//! `/opt/app/bin/x` is stored at `MOUNT/opt/app/bin/x`, so a bind mount of the copy over the
//! original puts it back at the same path.

use std::fs;
use std::io;
use std::os::unix::fs::{lchown, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::StorageError;

/// Canonical absolute paths of `paths`, with any path inside another one dropped (the outer
/// directory is copied and bind-mounted whole), sorted.
pub fn normalize_entries(paths: &[PathBuf]) -> Result<Vec<PathBuf>, StorageError> {
    if paths.is_empty() {
        return Err(StorageError::NothingToCopy);
    }
    let mut canon = Vec::new();
    for p in paths {
        let c = fs::canonicalize(p).map_err(|e| StorageError::io(p, "find the program file", e))?;
        if c == Path::new("/") {
            return Err(StorageError::io(
                p,
                "copy (the whole root file system)",
                io::ErrorKind::InvalidInput.into(),
            ));
        }
        canon.push(c);
    }
    Ok(outermost(canon))
}

/// Sorted, de-duplicated, without paths below another path of the list.
pub(crate) fn outermost(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in paths {
        if !kept.iter().any(|k| p.starts_with(k)) {
            kept.push(p);
        }
    }
    kept
}

/// Where `original` (absolute) lives under `mount`.
pub fn emulated_path(mount: &Path, original: &Path) -> PathBuf {
    mount.join(original.strip_prefix("/").unwrap_or(original))
}

/// Bytes and inodes the copy of `entries` needs (files' sizes, symlinks and directories).
pub fn footprint(entries: &[PathBuf]) -> Result<(u64, u64), StorageError> {
    let mut bytes = 0;
    let mut inodes = 0;
    for e in entries {
        walk(e, &mut |_, meta| {
            inodes += 1;
            if meta.is_file() {
                bytes += meta.len();
            }
            Ok(())
        })?;
    }
    Ok((bytes, inodes))
}

/// Call `f` with every regular file below `path` (or `path` itself) and its length.
pub(crate) fn walk_files(path: &Path, f: &mut dyn FnMut(&Path, u64)) -> Result<(), StorageError> {
    walk(path, &mut |p, meta| {
        if meta.is_file() {
            f(p, meta.len());
        }
        Ok(())
    })
}

fn walk(
    path: &Path,
    f: &mut dyn FnMut(&Path, &fs::Metadata) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let meta = fs::symlink_metadata(path).map_err(|e| StorageError::io(path, "stat", e))?;
    f(path, &meta)?;
    if meta.is_dir() {
        let mut children: Vec<_> = fs::read_dir(path)
            .map_err(|e| StorageError::io(path, "list", e))?
            .map(|r| r.map(|d| d.path()))
            .collect::<Result<_, _>>()
            .map_err(|e| StorageError::io(path, "list", e))?;
        children.sort();
        for c in children {
            walk(&c, f)?;
        }
    }
    Ok(())
}

/// Copy every entry (a file or a directory tree) to its place under `mount`, keeping mode,
/// owner and times (a program may compare modification times: Python's `.pyc` files record
/// their source's); parent directories are made with their originals' mode and owner.
pub fn copy_entries(entries: &[PathBuf], mount: &Path) -> Result<(), StorageError> {
    for entry in entries {
        // Parents first, from the root down.
        let mut ancestors: Vec<&Path> =
            entry.ancestors().skip(1).filter(|a| *a != Path::new("/")).collect();
        ancestors.reverse();
        for a in ancestors {
            let dst = emulated_path(mount, a);
            if !dst.exists() {
                let meta = fs::metadata(a).map_err(|e| StorageError::io(a, "stat", e))?;
                fs::create_dir(&dst).map_err(|e| StorageError::io(&dst, "create", e))?;
                keep_owner_and_mode(&dst, &meta)?;
            }
        }
        walk(entry, &mut |src, meta| copy_one(src, meta, &emulated_path(mount, src)))?;
        // Times last, once a directory has all its children.
        walk(entry, &mut |src, meta| keep_times(&emulated_path(mount, src), meta))?;
    }
    Ok(())
}

/// Give `dst` (not following a symlink) the access and modification times of `meta`.
fn keep_times(dst: &Path, meta: &fs::Metadata) -> Result<(), StorageError> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dst.as_os_str().as_bytes())
        .map_err(|_| StorageError::io(dst, "set times of", io::ErrorKind::InvalidInput.into()))?;
    let times = [
        libc::timespec { tv_sec: meta.atime(), tv_nsec: meta.atime_nsec() },
        libc::timespec { tv_sec: meta.mtime(), tv_nsec: meta.mtime_nsec() },
    ];
    // SAFETY: utimensat with a NUL-terminated path and two timespecs.
    let rc = unsafe {
        libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW)
    };
    if rc != 0 {
        return Err(StorageError::io(dst, "set times of", io::Error::last_os_error()));
    }
    Ok(())
}

fn copy_one(src: &Path, meta: &fs::Metadata, dst: &Path) -> Result<(), StorageError> {
    // A signal stops the copy between two files (the emulation's Drop removes what was made).
    coldstart_process::cancel::check()?;
    let ft = meta.file_type();
    if ft.is_dir() {
        fs::create_dir(dst).map_err(|e| StorageError::io(dst, "create", e))?;
    } else if ft.is_file() {
        fs::copy(src, dst).map_err(|e| StorageError::io(src, "copy", e))?;
    } else if ft.is_symlink() {
        let target = fs::read_link(src).map_err(|e| StorageError::io(src, "read link", e))?;
        std::os::unix::fs::symlink(&target, dst)
            .map_err(|e| StorageError::io(dst, "create link", e))?;
        return lchown(dst, Some(meta.uid()), Some(meta.gid()))
            .map_err(|e| StorageError::io(dst, "chown", e));
    } else {
        return Err(StorageError::io(
            src,
            "copy (not a file, directory or symlink)",
            io::ErrorKind::Unsupported.into(),
        ));
    }
    keep_owner_and_mode(dst, meta)
}

fn keep_owner_and_mode(dst: &Path, meta: &fs::Metadata) -> Result<(), StorageError> {
    lchown(dst, Some(meta.uid()), Some(meta.gid()))
        .map_err(|e| StorageError::io(dst, "chown", e))?;
    fs::set_permissions(dst, fs::Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(|e| StorageError::io(dst, "chmod", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outermost_drops_nested_and_duplicate_paths() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            outermost(vec![
                p("/opt/app/bin/x"),
                p("/opt/app"),
                p("/usr/lib/libz.so"),
                p("/opt/app"),
                p("/opt/apple")
            ]),
            vec![p("/opt/app"), p("/opt/apple"), p("/usr/lib/libz.so")]
        );
    }

    #[test]
    fn emulated_path_keeps_the_absolute_shape() {
        assert_eq!(
            emulated_path(Path::new("/m"), Path::new("/opt/app/bin/x")),
            PathBuf::from("/m/opt/app/bin/x")
        );
    }

    #[test]
    fn copy_keeps_tree_modes_and_links() {
        let src = tempfile::tempdir().unwrap();
        let app = src.path().join("app");
        fs::create_dir_all(app.join("bin")).unwrap();
        fs::write(app.join("bin/x"), b"#!/bin/sh\n").unwrap();
        fs::set_permissions(app.join("bin/x"), fs::Permissions::from_mode(0o751)).unwrap();
        std::os::unix::fs::symlink("bin/x", app.join("x-link")).unwrap();
        let lone = src.path().join("lone.txt");
        fs::write(&lone, b"lone").unwrap();

        let entries = normalize_entries(&[app.join("bin/x"), app.clone(), lone.clone()]).unwrap();
        assert_eq!(entries.len(), 2);
        let (bytes, inodes) = footprint(&entries).unwrap();
        assert_eq!(bytes, 10 + 4);
        assert_eq!(inodes, 5); // app, bin, x, x-link, lone.txt

        let mount = tempfile::tempdir().unwrap();
        copy_entries(&entries, mount.path()).unwrap();
        let app_c = fs::canonicalize(&app).unwrap();
        let x = emulated_path(mount.path(), &app_c.join("bin/x"));
        assert_eq!(fs::read(&x).unwrap(), b"#!/bin/sh\n");
        assert_eq!(fs::metadata(&x).unwrap().mode() & 0o777, 0o751);
        let link = emulated_path(mount.path(), &app_c.join("x-link"));
        assert_eq!(fs::read_link(link).unwrap(), PathBuf::from("bin/x"));
        let lone_c = emulated_path(mount.path(), &fs::canonicalize(&lone).unwrap());
        assert_eq!(fs::read(lone_c).unwrap(), b"lone");
    }

    /// A copy with a new modification time made Python find every `.pyc` stale (it compares
    /// the source's mtime recorded in the `.pyc` with the `.py`): it compiled its modules
    /// again and read other pages than it would.
    #[test]
    fn copies_keep_their_modification_time() {
        let src = tempfile::tempdir().unwrap();
        let file = src.path().join("mod.py");
        fs::write(&file, b"x = 1\n").unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_600_000_000, 123);
        fs::File::options().write(true).open(&file).unwrap().set_modified(old).unwrap();
        let entries = normalize_entries(std::slice::from_ref(&file)).unwrap();
        let mount = tempfile::tempdir().unwrap();
        copy_entries(&entries, mount.path()).unwrap();
        let copy = emulated_path(mount.path(), &entries[0]);
        assert_eq!(fs::metadata(copy).unwrap().modified().unwrap(), old);
    }

    #[test]
    fn missing_file_is_named() {
        let e = normalize_entries(&[PathBuf::from("/no/such/program")]).unwrap_err().to_string();
        assert!(e.contains("/no/such/program"), "{e}");
    }
}
