//! Read throttling of one block device for one cgroup.
//!
//! cgroup v1 (`blkio` hierarchy) takes one rule per file: `blkio.throttle.read_iops_device` and
//! `blkio.throttle.read_bps_device`, each `MAJ:MIN VALUE` (0 removes the rule). cgroup v2 takes
//! both in `io.max`: `MAJ:MIN rbps=N riops=N` (`max` removes a limit). Both count every bio the
//! processes of the cgroup submit to the device, so each request pays one "seek" of the profile.

use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::{profile::StorageProfile, StorageError};

/// Where the cgroup v1 `blkio` hierarchy is usually mounted.
pub const V1_BLKIO_ROOT: &str = "/sys/fs/cgroup/blkio";
/// Name prefix of every cgroup, directory and backing file this module creates.
pub const NAME_PREFIX: &str = "coldstart-storage-";

/// Which cgroup interface a directory speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// A directory of the v1 `blkio` hierarchy.
    V1Blkio,
    /// A directory of the v2 unified hierarchy with the `io` controller enabled.
    V2,
}

/// The cgroup a run's processes are in, as far as I/O throttling needs it: one directory.
///
/// The launcher passes its run cgroup's `blkio` directory (v1) or its unified directory (v2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupPaths {
    /// The cgroup's directory.
    pub dir: PathBuf,
    /// Its interface.
    pub version: CgroupVersion,
}

/// A throttle rule for a device, in both syntaxes. Pure, so it is unit-tested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleRule {
    /// Major and minor number of the device.
    pub dev: (u32, u32),
    /// Read requests per second; `None`: unlimited.
    pub read_iops: Option<u64>,
    /// Read bytes per second; `None`: unlimited.
    pub read_bps: Option<u64>,
}

impl ThrottleRule {
    /// The rule a profile asks for on device `dev`.
    pub fn for_profile(profile: &StorageProfile, dev: (u32, u32)) -> Self {
        Self { dev, read_iops: profile.read_iops, read_bps: profile.read_bps }
    }

    /// The rule that lifts every limit on `dev`.
    pub fn unlimited(dev: (u32, u32)) -> Self {
        Self { dev, read_iops: None, read_bps: None }
    }

    /// `(file, line)` pairs to write for cgroup v1 (`0` clears a limit).
    pub fn v1_lines(&self) -> [(&'static str, String); 2] {
        let (maj, min) = self.dev;
        [
            (
                "blkio.throttle.read_iops_device",
                format!("{maj}:{min} {}", self.read_iops.unwrap_or(0)),
            ),
            (
                "blkio.throttle.read_bps_device",
                format!("{maj}:{min} {}", self.read_bps.unwrap_or(0)),
            ),
        ]
    }

    /// The `io.max` line for cgroup v2 (`max` lifts a limit).
    pub fn v2_line(&self) -> String {
        let (maj, min) = self.dev;
        let show = |v: Option<u64>| v.map_or("max".to_owned(), |v| v.to_string());
        format!("{maj}:{min} rbps={} riops={}", show(self.read_bps), show(self.read_iops))
    }
}

impl CgroupPaths {
    /// A directory of the v1 `blkio` hierarchy, e.g. `/sys/fs/cgroup/blkio/coldstart-run-1`.
    pub fn v1_blkio(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), version: CgroupVersion::V1Blkio }
    }

    /// A directory of the unified (v2) hierarchy whose parent enables `io`.
    pub fn v2(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), version: CgroupVersion::V2 }
    }

    /// Tell the version from the files in `dir` (`io.max` or `blkio.throttle.*`).
    pub fn detect(dir: impl Into<PathBuf>) -> Result<Self, StorageError> {
        let dir = dir.into();
        if dir.join("blkio.throttle.read_iops_device").exists() {
            Ok(Self::v1_blkio(dir))
        } else if dir.join("io.max").exists() {
            Ok(Self::v2(dir))
        } else {
            Err(StorageError::NoIoController { dir })
        }
    }

    /// Write `rule` into the cgroup and read it back.
    pub fn apply(&self, rule: &ThrottleRule) -> Result<(), StorageError> {
        match self.version {
            CgroupVersion::V1Blkio => {
                for (file, line) in rule.v1_lines() {
                    write_control(&self.dir.join(file), &line)?;
                }
            }
            CgroupVersion::V2 => write_control(&self.dir.join("io.max"), &rule.v2_line())?,
        }
        let (maj, min) = rule.dev;
        let to_check: Vec<&str> = match self.version {
            CgroupVersion::V1Blkio => [
                rule.read_iops.map(|_| "blkio.throttle.read_iops_device"),
                rule.read_bps.map(|_| "blkio.throttle.read_bps_device"),
            ]
            .into_iter()
            .flatten()
            .collect(),
            CgroupVersion::V2 if rule.read_iops.is_some() || rule.read_bps.is_some() => {
                vec!["io.max"]
            }
            CgroupVersion::V2 => vec![],
        };
        for file in to_check {
            let path = self.dir.join(file);
            let text = fs::read_to_string(&path).map_err(|e| StorageError::io(&path, "read", e))?;
            let wanted = format!("{maj}:{min} ");
            if !text.lines().any(|l| l.starts_with(&wanted)) {
                return Err(StorageError::ThrottleNotApplied { path, dev: format!("{maj}:{min}") });
            }
        }
        Ok(())
    }

    /// A `pre_exec` hook that moves the calling (child) process into this cgroup by writing `0`
    /// to its `cgroup.procs`. The path is prepared here; the hook only calls `open`, `write` and
    /// `close`, which are async-signal-safe.
    pub fn join_hook(
        &self,
    ) -> Result<impl Fn() -> io::Result<()> + Send + Sync + 'static, StorageError> {
        let procs = self.dir.join("cgroup.procs");
        let path = std::ffi::CString::new(procs.as_os_str().as_bytes())
            .map_err(|_| StorageError::io(&procs, "name", io::ErrorKind::InvalidInput.into()))?;
        Ok(move || {
            // SAFETY: plain system calls on a NUL-terminated path and a static buffer.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0\n".as_ptr().cast(), 2);
                let err = io::Error::last_os_error();
                libc::close(fd);
                if n != 2 {
                    return Err(err);
                }
            }
            Ok(())
        })
    }
}

fn write_control(path: &Path, line: &str) -> Result<(), StorageError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| StorageError::io(path, "open", e))?;
    f.write_all(line.as_bytes())
        .map_err(|e| StorageError::io(path, &format!("write `{line}` to"), e))
}

/// A cgroup made for one emulation session and removed on drop (or [`ScratchCgroup::remove`]).
///
/// For callers that have no cgroup of their own (tests, `coldstart run`). Its name,
/// `coldstart-storage-PID-N`, carries the owner's pid so [`super::cleanup_stale`] can remove
/// it after a crash.
#[derive(Debug)]
pub struct ScratchCgroup {
    paths: CgroupPaths,
    removed: bool,
}

impl ScratchCgroup {
    /// Create `coldstart-storage-PID-cgN` where this machine throttles I/O: under the v1
    /// `blkio` hierarchy if it is mounted, else under the v2 root (enabling `io` in its
    /// `cgroup.subtree_control` if needed).
    pub fn create() -> Result<Self, StorageError> {
        if Path::new(V1_BLKIO_ROOT).join("blkio.throttle.read_iops_device").exists() {
            return Self::create_v1();
        }
        let root = Path::new("/sys/fs/cgroup");
        let controllers = fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "io") {
            return Err(StorageError::NoIoController { dir: root.to_owned() });
        }
        let control = root.join("cgroup.subtree_control");
        let enabled = fs::read_to_string(&control).unwrap_or_default();
        if !enabled.split_whitespace().any(|c| c == "io") {
            write_control(&control, "+io")?;
        }
        Self::create_under(CgroupPaths::v2(root))
    }

    /// Create `coldstart-storage-PID-cgN` under the v1 `blkio` hierarchy.
    pub fn create_v1() -> Result<Self, StorageError> {
        Self::create_under(CgroupPaths::v1_blkio(V1_BLKIO_ROOT))
    }

    /// Create `coldstart-storage-PID-cgN` under `parent` (a v1 `blkio` directory, or a v2
    /// directory whose `cgroup.subtree_control` has `io`).
    pub fn create_under(parent: CgroupPaths) -> Result<Self, StorageError> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        super::require_root()?;
        let name = format!(
            "{NAME_PREFIX}{}-cg{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = parent.dir.join(name);
        fs::create_dir(&dir).map_err(|e| StorageError::io(&dir, "create cgroup", e))?;
        let paths = CgroupPaths { dir, version: parent.version };
        let me = Self { paths, removed: false };
        let check = CgroupPaths::detect(&me.paths.dir)?;
        if check.version != parent.version {
            return Err(StorageError::NoIoController { dir: me.paths.dir.clone() });
        }
        Ok(me)
    }

    /// The cgroup's paths, to pass to [`super::EmulatedStorage::throttle`].
    pub fn paths(&self) -> &CgroupPaths {
        &self.paths
    }

    /// Kill what is left in the cgroup and remove it.
    pub fn remove(mut self) -> Result<(), StorageError> {
        self.removed = true;
        remove_cgroup_dir(&self.paths.dir)
    }
}

impl Drop for ScratchCgroup {
    fn drop(&mut self) {
        if !self.removed {
            let _ = remove_cgroup_dir(&self.paths.dir);
        }
    }
}

/// SIGKILL every process of the cgroup at `dir`, then `rmdir` it (retrying while the killed
/// processes exit). A missing directory is not an error.
pub(crate) fn remove_cgroup_dir(dir: &Path) -> Result<(), StorageError> {
    for attempt in 0..200 {
        if !dir.exists() {
            return Ok(());
        }
        if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) with a pid read from the cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if attempt == 199 => return Err(StorageError::io(dir, "remove cgroup", e)),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_rules_name_the_device_and_clear_with_zero() {
        let hdd = StorageProfile::hdd();
        let rule = ThrottleRule::for_profile(&hdd, (7, 3));
        assert_eq!(
            rule.v1_lines(),
            [
                ("blkio.throttle.read_iops_device", "7:3 100".to_owned()),
                ("blkio.throttle.read_bps_device", "7:3 120000000".to_owned()),
            ]
        );
        let off = ThrottleRule::unlimited((7, 3));
        assert_eq!(off.v1_lines()[0].1, "7:3 0");
        assert_eq!(off.v1_lines()[1].1, "7:3 0");
    }

    #[test]
    fn v2_rule_uses_max_for_missing_limits() {
        let p: StorageProfile = "custom:iops=300".parse().unwrap();
        assert_eq!(ThrottleRule::for_profile(&p, (259, 1)).v2_line(), "259:1 rbps=max riops=300");
        assert_eq!(ThrottleRule::unlimited((7, 0)).v2_line(), "7:0 rbps=max riops=max");
    }

    #[test]
    fn detect_tells_versions_apart_and_apply_writes_files() {
        let tmp = tempfile::tempdir().unwrap();
        let v1 = tmp.path().join("v1");
        fs::create_dir(&v1).unwrap();
        for f in ["blkio.throttle.read_iops_device", "blkio.throttle.read_bps_device"] {
            fs::write(v1.join(f), "").unwrap();
        }
        let v2 = tmp.path().join("v2");
        fs::create_dir(&v2).unwrap();
        fs::write(v2.join("io.max"), "").unwrap();
        assert_eq!(CgroupPaths::detect(&v1).unwrap().version, CgroupVersion::V1Blkio);
        assert_eq!(CgroupPaths::detect(&v2).unwrap().version, CgroupVersion::V2);
        let none = tmp.path().join("none");
        fs::create_dir(&none).unwrap();
        let e = CgroupPaths::detect(&none).unwrap_err().to_string();
        assert!(e.contains("io"), "{e}");

        // A regular file keeps what was written, so apply's read-back sees the rule.
        let rule = ThrottleRule::for_profile(&StorageProfile::hdd(), (7, 1));
        CgroupPaths::v2(&v2).apply(&rule).unwrap();
        assert_eq!(fs::read_to_string(v2.join("io.max")).unwrap(), "7:1 rbps=120000000 riops=100");
        CgroupPaths::v1_blkio(&v1).apply(&rule).unwrap();
        assert_eq!(
            fs::read_to_string(v1.join("blkio.throttle.read_bps_device")).unwrap(),
            "7:1 120000000"
        );
    }
}
