//! Finding and removing what an emulation left behind when its process died.
//!
//! Everything an emulation creates carries `coldstart-storage-PID-N` in its path: the session
//! directory (and so the backing file, `/sys/block/loop*/loop/backing_file`, and the mount
//! point, `/proc/self/mountinfo`) and a scratch cgroup. The session directory also holds a
//! `lock` file the owner keeps `flock`ed. A resource is stale when its owner process is gone or
//! its lock is free; a live run of another process is never touched.

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use coldstart_process::mountinfo::{self, Mount};

use super::loopdev::{attached_loops, parse_dev, strip_deleted, LoopDevice, SYSFS_BLOCK};
use super::throttle::{remove_cgroup_dir, NAME_PREFIX, V1_BLKIO_ROOT};
use super::StorageError;

/// What kind of resource a [`Leftover`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftoverKind {
    /// A mount of an emulated device (or a mount below a session directory).
    Mount,
    /// A loop device whose backing file is in a session directory.
    LoopDevice,
    /// A session directory (`coldstart-storage-PID-N`) in the work directory.
    Directory,
    /// A scratch cgroup (`coldstart-storage-PID-cgN`).
    Cgroup,
}

/// A resource made by a storage emulation, live or stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Its kind.
    pub kind: LeftoverKind,
    /// Mount point, `/dev/loopN`, directory or cgroup directory.
    pub path: PathBuf,
    /// The pid of the process that made it.
    pub owner_pid: u32,
    /// Whether its owner is gone (or has given it up): [`cleanup_stale`] removes these.
    pub stale: bool,
}

impl std::fmt::Display for Leftover {
    /// `stale loop device /dev/loop3 of pid 4242`, for a line in the terminal.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            LeftoverKind::Mount => "mount",
            LeftoverKind::LoopDevice => "loop device",
            LeftoverKind::Directory => "session directory",
            LeftoverKind::Cgroup => "cgroup",
        };
        let state = if self.stale { "stale" } else { "live" };
        write!(f, "{state} {kind} {} of pid {}", self.path.display(), self.owner_pid)
    }
}

/// What [`cleanup_stale`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaleReport {
    /// Everything removed, in the order it was removed.
    pub removed: Vec<Leftover>,
}

/// The owner pid and session directory named by a path that contains a
/// `coldstart-storage-PID-...` component.
pub(crate) fn owner_of(path: &Path) -> Option<(u32, PathBuf)> {
    let mut dir = PathBuf::new();
    for comp in path.components() {
        dir.push(comp);
        let Some(rest) = comp.as_os_str().to_str().and_then(|n| n.strip_prefix(NAME_PREFIX)) else {
            continue;
        };
        if let Some(pid) = rest.split('-').next().and_then(|p| p.parse().ok()) {
            return Some((pid, dir));
        }
    }
    None
}

/// Whether the session in `dir`, made by `pid`, is abandoned.
fn session_stale(pid: u32, dir: &Path) -> bool {
    if !coldstart_sys::pid_alive(pid) {
        return true;
    }
    let Ok(lock) = fs::File::open(dir.join("lock")) else {
        // No lock (yet, or any more): trust the pid.
        return false;
    };
    // SAFETY: flock on a file we own; a free lock means nobody holds the session.
    unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

fn cgroup_roots() -> Vec<PathBuf> {
    let mut roots = vec![PathBuf::from(V1_BLKIO_ROOT), PathBuf::from("/sys/fs/cgroup/unified")];
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        roots.push(PathBuf::from("/sys/fs/cgroup"));
    }
    roots
}

/// Every resource of a storage emulation on this machine: mounts, loop devices, scratch
/// cgroups, and session directories in `work_dir` (when given). Used by [`cleanup_stale`] and
/// by tests that check nothing was left behind.
pub fn find_leftovers(work_dir: Option<&Path>) -> Vec<Leftover> {
    let mut found = Vec::new();
    let mut push = |kind, path: PathBuf, owner: Option<(u32, PathBuf)>| {
        if let Some((pid, dir)) = owner {
            let stale = match kind {
                LeftoverKind::Cgroup => !coldstart_sys::pid_alive(pid),
                _ => session_stale(pid, &dir),
            };
            found.push(Leftover { kind, path, owner_pid: pid, stale });
        }
    };
    let loops: Vec<(String, String)> = attached_loops(Path::new(SYSFS_BLOCK))
        .into_iter()
        .filter(|(_, backing)| owner_of(Path::new(backing)).is_some())
        .collect();
    let loop_devs: Vec<((u32, u32), &str, &str)> = loops
        .iter()
        .filter_map(|(name, backing)| {
            let dev = fs::read_to_string(Path::new(SYSFS_BLOCK).join(name).join("dev")).ok()?;
            Some((parse_dev(&dev)?, name.as_str(), backing.as_str()))
        })
        .collect();
    for Mount { dev, point, .. } in mountinfo::read().unwrap_or_default() {
        let owner = owner_of(&point).or_else(|| {
            let (_, _, backing) = loop_devs.iter().find(|(d, _, _)| *d == dev)?;
            owner_of(Path::new(backing))
        });
        push(LeftoverKind::Mount, point, owner);
    }
    for (name, backing) in &loops {
        push(LeftoverKind::LoopDevice, Path::new("/dev").join(name), owner_of(Path::new(backing)));
    }
    for root in cgroup_roots() {
        for entry in fs::read_dir(&root).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(NAME_PREFIX) && entry.path().is_dir() {
                push(LeftoverKind::Cgroup, entry.path(), owner_of(&entry.path()));
            }
        }
    }
    if let Some(work_dir) = work_dir {
        for entry in fs::read_dir(work_dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(NAME_PREFIX) && entry.path().is_dir() {
                push(LeftoverKind::Directory, entry.path(), owner_of(&entry.path()));
            }
        }
    }
    found
}

/// Remove what crashed or killed emulations left behind: unmount their mounts (deepest first),
/// detach their loop devices, delete their session directories in `work_dir` (and the ones
/// their loop devices name), remove their scratch cgroups. Live emulations of running
/// processes are left alone. Call it before creating an emulation.
pub fn cleanup_stale(work_dir: &Path) -> Result<StaleReport, StorageError> {
    super::require_root()?;
    let mut report = StaleReport::default();
    let stale: Vec<Leftover> =
        find_leftovers(Some(work_dir)).into_iter().filter(|l| l.stale).collect();
    let mut mounts: Vec<&Leftover> =
        stale.iter().filter(|l| l.kind == LeftoverKind::Mount).collect();
    mounts.sort_by_key(|l| std::cmp::Reverse(l.path.components().count()));
    for m in mounts {
        super::unmount(&m.path, true)?;
        report.removed.push(m.clone());
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for l in stale.iter().filter(|l| l.kind == LeftoverKind::LoopDevice) {
        let dev = LoopDevice::from_path(&l.path)?;
        if let Some(backing) = dev.backing_file() {
            if let Some((_, dir)) = owner_of(Path::new(strip_deleted(&backing))) {
                dirs.push(dir);
            }
        }
        dev.detach()?;
        report.removed.push(l.clone());
    }
    dirs.extend(stale.iter().filter(|l| l.kind == LeftoverKind::Directory).map(|l| l.path.clone()));
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        if dir.exists() {
            // The mount point is empty once unmounted; never follow into a still-mounted one.
            if is_mount_point_below(&dir) {
                continue;
            }
            fs::remove_dir_all(&dir).map_err(|e| StorageError::io(&dir, "remove", e))?;
            let pid = owner_of(&dir).map_or(0, |(p, _)| p);
            report.removed.push(Leftover {
                kind: LeftoverKind::Directory,
                path: dir,
                owner_pid: pid,
                stale: true,
            });
        }
    }
    for l in stale.iter().filter(|l| l.kind == LeftoverKind::Cgroup) {
        remove_cgroup_dir(&l.path)?;
        report.removed.push(l.clone());
    }
    Ok(report)
}

fn is_mount_point_below(dir: &Path) -> bool {
    mountinfo::read().unwrap_or_default().iter().any(|m| m.point.starts_with(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_is_read_from_the_session_component() {
        assert_eq!(
            owner_of(Path::new("/var/tmp/coldstart-storage-4242-3/backing.img")),
            Some((4242, PathBuf::from("/var/tmp/coldstart-storage-4242-3")))
        );
        assert_eq!(
            owner_of(Path::new("/sys/fs/cgroup/blkio/coldstart-storage-17-cg0")),
            Some((17, PathBuf::from("/sys/fs/cgroup/blkio/coldstart-storage-17-cg0")))
        );
        assert_eq!(owner_of(Path::new("/var/tmp/coldstart-storage-x/backing.img")), None);
        assert_eq!(
            owner_of(Path::new("/var/tmp/coldstart-storage-tmp/coldstart-storage-5-0/mnt")),
            Some((5, PathBuf::from("/var/tmp/coldstart-storage-tmp/coldstart-storage-5-0")))
        );
        assert_eq!(owner_of(Path::new("/srv/disk.img")), None);
    }

    #[test]
    fn leftovers_read_well() {
        let l = Leftover {
            kind: LeftoverKind::LoopDevice,
            path: PathBuf::from("/dev/loop3"),
            owner_pid: 4242,
            stale: true,
        };
        assert_eq!(l.to_string(), "stale loop device /dev/loop3 of pid 4242");
    }

    #[test]
    fn a_dead_owner_makes_a_session_stale() {
        // pid 0 never has a /proc entry.
        assert!(session_stale(0, Path::new("/nonexistent")));
        let tmp = tempfile::tempdir().unwrap();
        let me = std::process::id();
        // Live owner without a lock file: not stale.
        assert!(!session_stale(me, tmp.path()));
        // Live owner, lock held by another open file description: not stale.
        let lock = fs::File::create(tmp.path().join("lock")).unwrap();
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        assert!(!session_stale(me, tmp.path()));
        drop(lock);
        // Lock released: the session was given up.
        assert!(session_stale(me, tmp.path()));
    }
}
