//! Loop devices: attach a backing file with direct I/O, check it took, set the read-ahead,
//! detach. Attaching goes through `losetup` (util-linux), which finds a free device and retries
//! when another process takes it first; the result is checked in sysfs.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::StorageError;

/// An attached loop device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopDevice {
    /// `loop3`.
    pub name: String,
    /// `/dev/loop3`.
    pub path: PathBuf,
    /// Major and minor number (`/sys/block/loop3/dev`), as throttle rules name the device.
    pub dev: (u32, u32),
    /// The backing file it was attached to; [`detach`](Self::detach) leaves the device alone
    /// once it is backed by anything else.
    pub backing: PathBuf,
}

/// Where sysfs is, so the scanning code can be tested on a fake tree.
pub(crate) const SYSFS_BLOCK: &str = "/sys/block";

impl LoopDevice {
    /// Attach `backing` to a free loop device with direct I/O on, and verify that
    /// `/sys/block/loopN/loop/dio` reads 1. On failure nothing stays attached.
    pub fn attach_direct_io(backing: &Path) -> Result<Self, StorageError> {
        let out =
            run(Command::new("losetup").args(["--find", "--show", "--direct-io=on"]).arg(backing))?;
        let path = PathBuf::from(out.trim());
        let dev = Self::from_path(&path)?;
        let dio = fs::read_to_string(dev.sys().join("loop/dio")).unwrap_or_default();
        if dio.trim() != "1" {
            let _ = dev.detach();
            return Err(StorageError::NoDirectIo {
                device: path,
                backing: backing.to_owned(),
                dio: dio.trim().to_owned(),
            });
        }
        Ok(dev)
    }

    /// The device at `/dev/loopN`, with its numbers from sysfs.
    pub fn from_path(path: &Path) -> Result<Self, StorageError> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| n.starts_with("loop"))
            .ok_or_else(|| {
                StorageError::io(path, "use as loop device", io::ErrorKind::InvalidInput.into())
            })?
            .to_owned();
        let dev_file = Path::new(SYSFS_BLOCK).join(&name).join("dev");
        let text =
            fs::read_to_string(&dev_file).map_err(|e| StorageError::io(&dev_file, "read", e))?;
        let dev = parse_dev(&text).ok_or_else(|| {
            StorageError::io(&dev_file, "parse", io::ErrorKind::InvalidData.into())
        })?;
        let backing =
            fs::read_to_string(Path::new(SYSFS_BLOCK).join(&name).join("loop/backing_file"))
                .map(|b| PathBuf::from(strip_deleted(b.trim_end())))
                .unwrap_or_default();
        Ok(Self { name, path: path.to_owned(), dev, backing })
    }

    fn sys(&self) -> PathBuf {
        Path::new(SYSFS_BLOCK).join(&self.name)
    }

    /// Set the read-ahead: `/sys/block/loopN/queue/read_ahead_kb`, which is the same setting
    /// `blockdev --setra` changes (in 512-byte sectors); both are read back.
    pub fn set_read_ahead_kb(&self, kb: u64) -> Result<(), StorageError> {
        let path = self.sys().join("queue/read_ahead_kb");
        fs::write(&path, format!("{kb}\n")).map_err(|e| StorageError::io(&path, "write", e))?;
        let (sysfs, sectors) = (self.read_ahead_kb()?, self.read_ahead_sectors()?);
        if sysfs != kb || sectors != kb * 2 {
            return Err(StorageError::ReadAheadNotApplied {
                device: self.path.clone(),
                wanted_kb: kb,
                sysfs_kb: sysfs,
                sectors,
            });
        }
        Ok(())
    }

    /// Say the device is rotational or not (`/sys/block/loopN/queue/rotational`), read back.
    /// The kernel then sets the read-ahead back to the queue's default: set it after.
    pub fn set_rotational(&self, rotational: bool) -> Result<(), StorageError> {
        let path = self.sys().join("queue/rotational");
        let want = if rotational { "1" } else { "0" };
        fs::write(&path, format!("{want}\n")).map_err(|e| StorageError::io(&path, "write", e))?;
        let got = fs::read_to_string(&path).map_err(|e| StorageError::io(&path, "read", e))?;
        if got.trim() != want {
            return Err(StorageError::io(&path, "set", io::ErrorKind::Unsupported.into()));
        }
        Ok(())
    }

    /// `/sys/block/loopN/queue/read_ahead_kb`.
    pub fn read_ahead_kb(&self) -> Result<u64, StorageError> {
        let path = self.sys().join("queue/read_ahead_kb");
        let text = fs::read_to_string(&path).map_err(|e| StorageError::io(&path, "read", e))?;
        text.trim()
            .parse()
            .map_err(|_| StorageError::io(&path, "parse", io::ErrorKind::InvalidData.into()))
    }

    /// The read-ahead in 512-byte sectors as `blockdev --getra` reports it (`BLKRAGET`).
    pub fn read_ahead_sectors(&self) -> Result<u64, StorageError> {
        let f = fs::File::open(&self.path).map_err(|e| StorageError::io(&self.path, "open", e))?;
        let mut sectors: libc::c_long = 0;
        // SAFETY: BLKRAGET writes one long through the pointer.
        let rc = unsafe { libc::ioctl(f.as_raw_fd(), BLKRAGET, &mut sectors) };
        if rc != 0 {
            return Err(StorageError::io(&self.path, "BLKRAGET", io::Error::last_os_error()));
        }
        Ok(sectors as u64)
    }

    /// Drop the device's own buffer cache (`BLKFLSBUF`, as `blockdev --flushbufs`).
    pub fn flush_buffers(&self) -> Result<(), StorageError> {
        let f = fs::File::open(&self.path).map_err(|e| StorageError::io(&self.path, "open", e))?;
        // SAFETY: BLKFLSBUF takes no argument.
        let rc = unsafe { libc::ioctl(f.as_raw_fd(), BLKFLSBUF, 0) };
        if rc != 0 {
            return Err(StorageError::io(&self.path, "BLKFLSBUF", io::Error::last_os_error()));
        }
        Ok(())
    }

    /// The backing file as the kernel reports it (with ` (deleted)` once unlinked).
    pub fn backing_file(&self) -> Option<String> {
        fs::read_to_string(self.sys().join("loop/backing_file"))
            .ok()
            .map(|s| s.trim_end().to_owned())
    }

    /// Detach the device (`losetup -d`). A device in use is detached by the kernel when its
    /// last user closes it.
    pub fn detach(&self) -> Result<(), StorageError> {
        match self.backing_file() {
            Some(now) if Path::new(strip_deleted(&now)) == self.backing => {
                run(Command::new("losetup").arg("-d").arg(&self.path)).map(drop)
            }
            // Already detached, or detached and taken by someone else since.
            _ => Ok(()),
        }
    }
}

/// A sysfs backing-file name without the ` (deleted)` the kernel appends once it is unlinked.
pub(crate) fn strip_deleted(name: &str) -> &str {
    name.strip_suffix(" (deleted)").unwrap_or(name)
}

// From <linux/fs.h>: _IO(0x12, 99) and _IO(0x12, 97).
const BLKRAGET: libc::c_ulong = 0x1263;
const BLKFLSBUF: libc::c_ulong = 0x1261;

/// `7:3\n` -> `(7, 3)`.
pub(crate) fn parse_dev(text: &str) -> Option<(u32, u32)> {
    let (maj, min) = text.trim().split_once(':')?;
    Some((maj.parse().ok()?, min.parse().ok()?))
}

/// Every attached loop device under `sys_block` with its backing file.
pub(crate) fn attached_loops(sys_block: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(sys_block) else { return found };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        if let Ok(backing) = fs::read_to_string(entry.path().join("loop/backing_file")) {
            found.push((name, backing.trim_end().to_owned()));
        }
    }
    found.sort();
    found
}

/// Run a command, returning stdout, or an error with its stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<String, StorageError> {
    let shown = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|e| StorageError::Command {
        command: shown.clone(),
        detail: format!("cannot start it: {e} (is util-linux / e2fsprogs installed?)"),
    })?;
    if !out.status.success() {
        return Err(StorageError::Command {
            command: shown,
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_dev_reads_sysfs_numbers() {
        assert_eq!(parse_dev("7:12\n"), Some((7, 12)));
        assert_eq!(parse_dev("259:0"), Some((259, 0)));
        assert_eq!(parse_dev("7"), None);
        assert_eq!(parse_dev("a:b"), None);
    }

    #[test]
    fn strip_deleted_gives_the_path_the_device_was_attached_to() {
        assert_eq!(strip_deleted("/var/tmp/s/backing.img (deleted)"), "/var/tmp/s/backing.img");
        assert_eq!(strip_deleted("/var/tmp/s/backing.img"), "/var/tmp/s/backing.img");
    }

    #[test]
    fn attached_loops_lists_only_loops_with_backing_files() {
        let tmp = tempfile::tempdir().unwrap();
        let mk = |name: &str, backing: Option<&str>| {
            let d = tmp.path().join(name).join("loop");
            fs::create_dir_all(&d).unwrap();
            if let Some(b) = backing {
                fs::write(d.join("backing_file"), format!("{b}\n")).unwrap();
            }
        };
        mk("loop0", Some("/var/tmp/coldstart-storage-1-0/backing.img (deleted)"));
        mk("loop1", None);
        mk("vda", Some("/nope"));
        mk("loop7", Some("/srv/other.img"));
        assert_eq!(
            attached_loops(tmp.path()),
            vec![
                (
                    "loop0".to_owned(),
                    "/var/tmp/coldstart-storage-1-0/backing.img (deleted)".to_owned()
                ),
                ("loop7".to_owned(), "/srv/other.img".to_owned()),
            ]
        );
    }
}
