//! Slow storage emulation: reproduce a cold start on an HDD, eMMC or SATA SSD on any machine.
//!
//! A ground-floor crate: `coldstart measure --storage` runs programs on it, and the page
//! profiler copies the files a start-up reads onto it (read-ahead off) to record the pages
//! that start-up touches, whatever the host's read-ahead.
//!
//! A fast NVMe disk with a large read-ahead hides almost everything a cold start costs on the
//! devices users have. This crate puts a program's files on a device that behaves like a slow
//! one, so a CI runner can show what a laptop with a spinning disk will see:
//!
//! 1. a sparse backing file in a session directory `WORK_DIR/coldstart-storage-PID-N/`,
//! 2. attached to a loop device **with direct I/O** (`/sys/block/loopN/loop/dio` = 1), so the
//!    host never serves a read from its own cache of the backing file,
//! 3. formatted ext4 (`-E lazy_itable_init=0,lazy_journal_init=0`: no background
//!    initialisation disturbs the runs) and mounted at `SESSION/mnt`,
//! 4. the program's files copied in their absolute path shape (`/opt/app/bin/x` at
//!    `MOUNT/opt/app/bin/x`), the device's read-ahead set to the profile's (and its rotational
//!    flag: a hard disk is, flash is not), and the copy's page cache dropped (unmount, `BLKFLSBUF`, mount again),
//! 5. each run's child enters a mount namespace where the copies are bind-mounted over the
//!    originals ([`EmulatedStorage::enter`]), and the run's cgroup gets read IOPS and bytes/s
//!    limits on the loop device ([`EmulatedStorage::throttle`]).
//!
//! The `hdd-seek` profile times reads by a disk's mechanics instead of the cgroup's limits:
//! the loop device's backing file is then `SESSION/disk/device.img` on a FUSE file system this
//! process serves, which answers each read after the time the [`seek`] model gives it (a seek
//! by distance and half a revolution, or only the transfer for a read in line).
//!
//! Teardown ([`EmulatedStorage::close`], or `Drop`) lifts the limits, unmounts, detaches the
//! loop device and deletes the session directory. After a crash or `SIGKILL`,
//! [`cleanup_stale`] (called by [`EmulatedStorage::create`]) removes what the dead process left.
//!
//! # Ctrl-C
//!
//! `Drop` only runs if the process unwinds. A caller must therefore not die of `SIGINT`,
//! `SIGTERM` or `SIGHUP` while an [`EmulatedStorage`] lives: block those signals (or install a
//! handler that only sets a flag) before creating it, let the run loop notice the signal, kill
//! the run's cgroup, and return an error so the emulation is dropped. The child gets the
//! terminal's `SIGINT` itself. `coldstart measure` does just that, through the one
//! cancellation model of `coldstart_process::cancel`. Anything that still escapes (`SIGKILL`, a panic with
//! `panic=abort`, a power cut) is handled by [`cleanup_stale`] on the next start.
//!
//! # Example
//!
//! ```no_run
//! use std::os::unix::process::CommandExt;
//! use std::path::{Path, PathBuf};
//! use coldstart_storage::{EmulatedStorage, ScratchCgroup, StorageProfile};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let profile: StorageProfile = "hdd".parse()?;
//! let storage = EmulatedStorage::create(&profile, &[PathBuf::from("/opt/app")], Path::new("/var/tmp"))?;
//! let cgroup = ScratchCgroup::create()?;
//! storage.throttle(cgroup.paths())?;
//! let (join, enter) = (cgroup.paths().join_hook()?, storage.enter()?);
//! let mut cmd = std::process::Command::new("/opt/app/bin/app");
//! // SAFETY: both hooks only make async-signal-safe system calls.
//! unsafe { cmd.pre_exec(move || { join()?; enter() }) };
//! let status = cmd.status()?;
//! storage.close()?;
//! cgroup.remove()?;
//! # let _ = status; Ok(()) }
//! ```

mod copy;
mod disk;
mod loopdev;
mod namespace;
mod profile;
pub mod seek;
mod stale;
mod throttle;

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use coldstart_error::Category;

pub use disk::DiskStats;
pub use loopdev::LoopDevice;
pub use namespace::EnterHook;
pub use profile::{ParseProfileError, StorageProfile, BUILTIN_PROFILES, DEFAULT_READAHEAD_KB};

pub use stale::{cleanup_stale, find_leftovers, Leftover, LeftoverKind, StaleReport};
pub use throttle::{
    CgroupPaths, CgroupVersion, ScratchCgroup, ThrottleRule, NAME_PREFIX, V1_BLKIO_ROOT,
};

/// Where session directories go unless the caller says otherwise: a disk file system (the
/// backing file needs `O_DIRECT`) that survives no reboot-sensitive state.
pub const DEFAULT_WORK_DIR: &str = "/var/tmp";

/// Everything that can go wrong while emulating storage, each saying what to do.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// Not running as root.
    #[error(
        "slow storage emulation needs root (it attaches a loop device, mounts a file system and \
         sets cgroup I/O limits): run the same command with sudo, or leave out --storage to \
         measure on this machine's own disk"
    )]
    NotRoot,
    /// A system call or file operation failed.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// The file, directory or device.
        path: PathBuf,
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An external tool (losetup, mkfs.ext4) failed.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status and stderr.
        detail: String,
    },
    /// The loop device came up without direct I/O.
    #[error(
        "loop device {} has no direct I/O (/sys/block/.../loop/dio = `{dio}`), so the host would \
         serve reads from its cache of {}: put the work directory on a disk file system that \
         supports O_DIRECT (ext4, xfs, btrfs; not overlayfs or NFS)",
        device.display(), backing.display()
    )]
    NoDirectIo {
        /// The device.
        device: PathBuf,
        /// Its backing file.
        backing: PathBuf,
        /// What sysfs says.
        dio: String,
    },
    /// The read-ahead did not take.
    #[error(
        "read-ahead of {} is {sysfs_kb} KiB ({sectors} sectors) after setting {wanted_kb} KiB: \
         is udev or another tool resetting it?",
        device.display()
    )]
    ReadAheadNotApplied {
        /// The device.
        device: PathBuf,
        /// The profile's read-ahead.
        wanted_kb: u64,
        /// `read_ahead_kb` read back.
        sysfs_kb: u64,
        /// `BLKRAGET` read back.
        sectors: u64,
    },
    /// A cgroup directory has no I/O throttling files.
    #[error(
        "cgroup {} has neither blkio.throttle.* (v1) nor io.max (v2): use a directory of the \
         blkio hierarchy, or enable the io controller (`echo +io > PARENT/cgroup.subtree_control`)",
        dir.display()
    )]
    NoIoController {
        /// The cgroup directory.
        dir: PathBuf,
    },
    /// The kernel accepted a throttle rule but does not show it.
    #[error("throttle rule for device {dev} does not appear in {}: is blk-throttle enabled in this kernel (CONFIG_BLK_DEV_THROTTLING)?", path.display())]
    ThrottleNotApplied {
        /// The control file.
        path: PathBuf,
        /// `MAJ:MIN`.
        dev: String,
    },
    /// No files were given.
    #[error("no program files given to put on emulated storage")]
    NothingToCopy,
    /// The work directory is inside a directory to copy.
    #[error(
        "work directory {} is inside {}, which is to be copied: choose a work directory outside \
         the program's files",
        work_dir.display(), entry.display()
    )]
    WorkDirInsideProgram {
        /// The work directory.
        work_dir: PathBuf,
        /// The program directory that contains it.
        entry: PathBuf,
    },
    /// A signal came while the emulation was being built ([`coldstart_process::cancel`]):
    /// what was made is undone.
    #[error(transparent)]
    Interrupted(#[from] coldstart_process::cancel::Interrupted),
}

impl StorageError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            StorageError::NotRoot => Category::Privilege,
            StorageError::NothingToCopy | StorageError::WorkDirInsideProgram { .. } => {
                Category::Usage
            }
            StorageError::Io { .. }
            | StorageError::Command { .. }
            | StorageError::NoDirectIo { .. }
            | StorageError::ReadAheadNotApplied { .. }
            | StorageError::NoIoController { .. }
            | StorageError::ThrottleNotApplied { .. } => Category::Environment,
            StorageError::Interrupted(e) => e.category(),
        }
    }
}

impl StorageError {
    pub(crate) fn io(path: &Path, what: &str, source: io::Error) -> Self {
        Self::Io { path: path.to_owned(), what: what.to_owned(), source }
    }
}

/// The error for a process that is not root, if it is not.
pub fn require_root() -> Result<(), StorageError> {
    if !coldstart_sys::is_root() {
        return Err(StorageError::NotRoot);
    }
    Ok(())
}

/// Unmount `path`, retrying for a second while it is busy; then, if `lazy`, detach it lazily
/// (it goes once its last user does). Not mounted is not an error.
pub(crate) fn unmount(path: &Path, lazy: bool) -> Result<(), StorageError> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| StorageError::io(path, "unmount", io::ErrorKind::InvalidInput.into()))?;
    for attempt in 0..50 {
        // SAFETY: umount2 with a NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::ENOENT) => return Ok(()),
            Some(libc::EBUSY) if attempt < 49 => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Some(libc::EBUSY) if !lazy => {
                return Err(StorageError::io(
                    path,
                    "unmount (busy: a process still uses the emulated files; end the run first)",
                    e,
                ))
            }
            Some(libc::EBUSY) => {
                // SAFETY: as above; a lazy detach frees the mount once its last user goes.
                if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
                    return Ok(());
                }
                return Err(StorageError::io(path, "unmount", io::Error::last_os_error()));
            }
            _ => return Err(StorageError::io(path, "unmount", e)),
        }
    }
    Ok(())
}

fn mount_ext4(device: &Path, target: &Path) -> Result<(), StorageError> {
    let dev =
        std::ffi::CString::new(device.as_os_str().as_bytes()).expect("device path has no NUL");
    let tgt = std::ffi::CString::new(target.as_os_str().as_bytes())
        .map_err(|_| StorageError::io(target, "mount on", io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: mount(2) with NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            dev.as_ptr(),
            tgt.as_ptr(),
            c"ext4".as_ptr(),
            libc::MS_NOATIME,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(StorageError::io(
            target,
            &format!("mount {} on", device.display()),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// A program's files on an emulated slow device. See the [module docs](self).
#[derive(Debug)]
pub struct EmulatedStorage {
    profile: StorageProfile,
    session: PathBuf,
    mount: PathBuf,
    entries: Vec<PathBuf>,
    device: Option<LoopDevice>,
    disk: Option<disk::ModelledDisk>,
    mounted: bool,
    lock: Option<fs::File>,
    throttled: Mutex<Vec<CgroupPaths>>,
}

impl EmulatedStorage {
    /// Put `paths` (files and directories, copied recursively; symlinks are resolved to what
    /// they name) on a new emulated device of `profile`, with the session directory in
    /// `work_dir` (for example [`DEFAULT_WORK_DIR`]). Removes stale sessions of dead processes
    /// first. Needs root. On error nothing is left behind.
    pub fn create(
        profile: &StorageProfile,
        paths: &[PathBuf],
        work_dir: &Path,
    ) -> Result<Self, StorageError> {
        require_root()?;
        let entries = copy::normalize_entries(paths)?;
        let work_dir = fs::canonicalize(work_dir)
            .map_err(|e| StorageError::io(work_dir, "use as work directory", e))?;
        if let Some(entry) = entries.iter().find(|e| work_dir.starts_with(e)) {
            return Err(StorageError::WorkDirInsideProgram { work_dir, entry: entry.clone() });
        }
        cleanup_stale(&work_dir)?;

        let session = new_session_dir(&work_dir)?;
        let mut me = Self {
            profile: profile.clone(),
            mount: session.join("mnt"),
            session,
            entries,
            device: None,
            disk: None,
            mounted: false,
            lock: None,
            throttled: Mutex::new(Vec::new()),
        };
        // From here on, Drop undoes whatever was done if a step fails.
        me.build()?;
        Ok(me)
    }

    /// [`create`](Self::create) for one application directory (`--app-dir`).
    pub fn create_for_dir(
        profile: &StorageProfile,
        app_dir: &Path,
        work_dir: &Path,
    ) -> Result<Self, StorageError> {
        Self::create(profile, &[app_dir.to_owned()], work_dir)
    }

    fn build(&mut self) -> Result<(), StorageError> {
        self.lock = Some(create_locked(&self.session.join("lock"))?);
        fs::create_dir(&self.mount).map_err(|e| StorageError::io(&self.mount, "create", e))?;

        let (bytes, inodes) = copy::footprint(&self.entries)?;
        let size = backing_size(bytes, inodes);
        let backing = self.session.join("backing.img");
        let f = fs::File::create(&backing).map_err(|e| StorageError::io(&backing, "create", e))?;
        f.set_len(size).map_err(|e| StorageError::io(&backing, "size", e))?;
        drop(f);

        // A modelled disk serves the backing file through FUSE; the loop device reads it there.
        let device_file = match self.profile.seek {
            Some(model) => {
                let dir = self.session.join("disk");
                fs::create_dir(&dir).map_err(|e| StorageError::io(&dir, "create", e))?;
                let disk = disk::ModelledDisk::start(&backing, &dir, model)?;
                let file = disk.device_file();
                self.disk = Some(disk);
                file
            }
            None => backing.clone(),
        };
        coldstart_process::cancel::check()?;
        let device = LoopDevice::attach_direct_io(&device_file)?;
        self.device = Some(device.clone());
        loopdev::run(
            std::process::Command::new("mkfs.ext4")
                .args(["-q", "-b", "4096", "-m", "0", "-L", "coldstart"])
                .args(["-E", "lazy_itable_init=0,lazy_journal_init=0"])
                .args(["-N", &(inodes * 2 + 1024).to_string()])
                .arg(&device.path),
        )?;
        coldstart_process::cancel::check()?;
        mount_ext4(&device.path, &self.mount)?;
        self.mounted = true;
        copy::copy_entries(&self.entries, &self.mount)?;
        coldstart_process::cancel::check()?;
        // The flag first: writing it makes the kernel apply the queue's limits again, which
        // sets the read-ahead back to its default (2.5 MiB on a loop device).
        if let Some(rotational) = self.profile.rotational() {
            device.set_rotational(rotational)?;
        }
        device.set_read_ahead_kb(self.profile.readahead_kb)?;
        self.drop_caches()?;
        // The loop device reads its backing file with O_DIRECT; drop any host pages of it that
        // predate the attach anyway.
        if let Ok(f) = fs::File::open(&backing) {
            // SAFETY: advice on our own file.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
        Ok(())
    }

    /// Drop every cached page of the copy: sync, unmount, flush the device's buffers
    /// (`BLKFLSBUF`), mount again. Inodes and directories are then cold too. Call between runs
    /// for a cold start, when no process of a run is alive (a live run's namespace keeps the
    /// file system, and its cache, alive).
    pub fn drop_caches(&mut self) -> Result<(), StorageError> {
        let device = self.device.clone().expect("a built emulation has a device");
        if self.mounted {
            // syncfs via an open directory of the file system.
            let dir = fs::File::open(&self.mount)
                .map_err(|e| StorageError::io(&self.mount, "open", e))?;
            // SAFETY: syncfs on an open descriptor.
            unsafe { libc::syncfs(dir.as_raw_fd()) };
            drop(dir);
            unmount(&self.mount, false)?;
            self.mounted = false;
        }
        device.flush_buffers()?;
        mount_ext4(&device.path, &self.mount)?;
        self.mounted = true;
        Ok(())
    }

    /// The profile.
    pub fn profile(&self) -> &StorageProfile {
        &self.profile
    }

    /// The loop device.
    pub fn device(&self) -> &LoopDevice {
        self.device.as_ref().expect("a built emulation has a device")
    }

    /// Where the emulated file system is mounted (`SESSION/mnt`).
    pub fn mount_point(&self) -> &Path {
        &self.mount
    }

    /// The session directory (`WORK_DIR/coldstart-storage-PID-N`).
    pub fn session_dir(&self) -> &Path {
        &self.session
    }

    /// The canonical paths that were copied and are bind-mounted in [`enter`](Self::enter).
    pub fn entries(&self) -> &[PathBuf] {
        &self.entries
    }

    /// Where `original` (an absolute path) is stored on the emulated device.
    pub fn emulated_path(&self, original: &Path) -> PathBuf {
        copy::emulated_path(&self.mount, original)
    }

    /// What the modelled disk has served so far (seeks, reads from its buffer, bytes, busy
    /// time); `None` for a cgroup-throttled profile.
    pub fn disk_stats(&self) -> Option<DiskStats> {
        self.disk.as_ref().map(|d| d.stats())
    }

    /// The device's current read-ahead in KiB (`/sys/block/loopN/queue/read_ahead_kb`).
    pub fn read_ahead_kb(&self) -> Result<u64, StorageError> {
        self.device().read_ahead_kb()
    }

    /// A hook for `std::os::unix::process::CommandExt::pre_exec` that runs the child from
    /// the emulated device at the original paths: a new mount namespace, mounts made slaves
    /// (`MS_REC | MS_SLAVE`), each copied entry bind-mounted over its original. The host does
    /// not see these mounts; they vanish when the child's last process exits.
    ///
    /// All paths are turned into C strings here, before `fork`; the hook makes only
    /// async-signal-safe system calls (`unshare`, `mount`). Combine with the cgroup's
    /// [`CgroupPaths::join_hook`] in one `pre_exec` closure.
    pub fn enter(
        &self,
    ) -> Result<impl Fn() -> io::Result<()> + Send + Sync + 'static, StorageError> {
        let hook = self.enter_hook()?;
        Ok(move || hook.run())
    }

    /// The same as [`enter`](Self::enter), as a named type.
    pub fn enter_hook(&self) -> Result<EnterHook, StorageError> {
        let pairs: Vec<(PathBuf, PathBuf)> =
            self.entries.iter().map(|e| (self.emulated_path(e), e.clone())).collect();
        EnterHook::new(&pairs)
    }

    /// Limit reads of the loop device by the processes of `cgroup` to the profile's IOPS and
    /// bytes per second (`blkio.throttle.read_iops_device` / `read_bps_device` on v1, `io.max`
    /// on v2). Does nothing for an unthrottled profile (`nvme`). The limit is lifted at
    /// [`close`](Self::close) if the cgroup still exists.
    pub fn throttle(&self, cgroup: &CgroupPaths) -> Result<(), StorageError> {
        if !self.profile.is_throttled() {
            return Ok(());
        }
        cgroup.apply(&ThrottleRule::for_profile(&self.profile, self.device().dev))?;
        self.throttled.lock().unwrap_or_else(|p| p.into_inner()).push(cgroup.clone());
        Ok(())
    }

    /// Lift the limits [`throttle`](Self::throttle) set on `cgroup`.
    pub fn unthrottle(&self, cgroup: &CgroupPaths) -> Result<(), StorageError> {
        let mut list = self.throttled.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|c| c != cgroup);
        if !cgroup.dir.exists() {
            return Ok(());
        }
        cgroup.apply(&ThrottleRule::unlimited(self.device().dev))
    }

    /// Random 4 KiB reads per second this machine serves through the emulated device without
    /// a throttle: `reads` `O_DIRECT` reads of distinct random pages of the largest copied file,
    /// from the calling process (which must not be in a throttled cgroup). `None` when no copied
    /// file has 16 pages, and for a modelled disk (`hdd-seek`). The emulation can only slow a device down: compare the result with
    /// the profile with [`fidelity_warning`].
    pub fn host_random_read_iops(&self, reads: usize) -> Result<Option<f64>, StorageError> {
        if self.disk.is_some() {
            // Its reads take the model's time, not this machine's.
            return Ok(None);
        }
        let mut largest: Option<(u64, PathBuf)> = None;
        for e in &self.entries {
            copy::walk_files(&self.emulated_path(e), &mut |p, len| {
                if largest.as_ref().is_none_or(|(l, _)| len > *l) {
                    largest = Some((len, p.to_owned()));
                }
            })?;
        }
        let Some((len, path)) = largest.filter(|(l, _)| *l >= 16 * 4096) else { return Ok(None) };
        let f = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .map_err(|e| StorageError::io(&path, "open with O_DIRECT", e))?;
        let pages = (len / 4096) as usize;
        let reads = reads.clamp(1, pages);
        let layout = std::alloc::Layout::from_size_align(4096, 4096).expect("page layout");
        // SAFETY: an aligned page for O_DIRECT, freed below.
        let buf = unsafe { std::alloc::alloc(layout) };
        let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ len;
        let stride = (pages / reads).max(1);
        let start = std::time::Instant::now();
        let mut result = Ok(());
        for i in 0..reads {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // One page from each of `reads` equal slices: distinct, and spread over the file.
            let page = (i * stride + (x as usize % stride)).min(pages - 1);
            // SAFETY: reading one page into our aligned buffer.
            let n = unsafe {
                libc::pread(f.as_raw_fd(), buf.cast(), 4096, (page * 4096) as libc::off_t)
            };
            if n != 4096 {
                result = Err(StorageError::io(&path, "read", io::Error::last_os_error()));
                break;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(buf, layout) };
        result?;
        Ok(Some(reads as f64 / secs.max(1e-9)))
    }

    /// Tear down: lift the limits, unmount, detach the loop device, delete the session
    /// directory. The first error is returned after every step has been tried.
    pub fn close(mut self) -> Result<(), StorageError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), StorageError> {
        let mut first: Option<StorageError> = None;
        let mut note = |r: Result<(), StorageError>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        let cgroups =
            std::mem::take(&mut *self.throttled.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(dev) = &self.device {
            for cg in cgroups.iter().filter(|c| c.dir.exists()) {
                note(cg.apply(&ThrottleRule::unlimited(dev.dev)));
            }
        }
        if self.mounted {
            note(unmount(&self.mount, true));
            self.mounted = false;
        }
        if let Some(dev) = self.device.take() {
            note(dev.detach());
        }
        if let Some(mut disk) = self.disk.take() {
            note(disk.stop());
        }
        if self.session.exists() {
            note(
                fs::remove_dir_all(&self.session)
                    .map_err(|e| StorageError::io(&self.session, "remove", e)),
            );
        }
        self.lock = None;
        first.map_or(Ok(()), Err)
    }
}

impl Drop for EmulatedStorage {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// A warning when this machine cannot emulate `profile`: its disk serves `host_iops` random
/// reads per second through the loop device (see
/// [`EmulatedStorage::host_random_read_iops`]), less than twice what the profile allows, so runs
/// would be slower than the device they stand for.
pub fn fidelity_warning(profile: &StorageProfile, host_iops: f64) -> Option<String> {
    let wanted = profile.read_iops? as f64;
    (host_iops < 2.0 * wanted).then(|| {
        format!(
            "this machine's disk serves only {host_iops:.0} random reads/s through the loop device, \
             and the `{profile}` profile allows {wanted:.0}: start-up will be slower than on that \
             device; put the work directory on a faster disk or on tmpfs (e.g. /dev/shm)"
        )
    })
}

/// A new `coldstart-storage-PID-N` directory in `work_dir`.
fn new_session_dir(work_dir: &Path) -> Result<PathBuf, StorageError> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    loop {
        let dir = work_dir.join(format!(
            "{NAME_PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(StorageError::io(&dir, "create", e)),
        }
    }
}

/// Create the session's lock file at `path`, locked before it has its name: another
/// process's [`cleanup_stale`] that opens `path` finds it held, never free (a lock file that
/// appeared unlocked would be judged abandoned, and a prober holding it for a moment would make
/// this `flock` fail).
fn create_locked(path: &Path) -> Result<fs::File, StorageError> {
    let unnamed = path.with_extension("new");
    let lock = fs::File::create(&unnamed).map_err(|e| StorageError::io(&unnamed, "create", e))?;
    // SAFETY: flock on a file only this process has opened so far; held until the session is
    // torn down.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(StorageError::io(&unnamed, "lock", io::Error::last_os_error()));
    }
    fs::rename(&unnamed, path).map_err(|e| StorageError::io(path, "create", e))?;
    Ok(lock)
}

/// Size of the backing file for `bytes` of file data in `inodes` files: the data with a
/// quarter more for ext4's block rounding and metadata, a block per inode, and 64 MiB for the
/// journal and the inode tables; in whole MiB.
fn backing_size(bytes: u64, inodes: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    let raw = bytes + bytes / 4 + inodes * 8192 + 64 * MIB;
    raw.div_ceil(MIB) * MIB
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::StorageError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backing_size_leaves_room_for_metadata() {
        assert_eq!(backing_size(0, 0), 64 << 20);
        let s = backing_size(100 << 20, 1000);
        assert!(s >= (100 << 20) + (100 << 20) / 4 + (64 << 20));
        assert_eq!(s % (1 << 20), 0);
    }

    #[test]
    fn fidelity_warning_only_when_the_host_is_too_slow() {
        let emmc = StorageProfile::emmc();
        let w = fidelity_warning(&emmc, 900.0).unwrap();
        assert!(w.contains("900") && w.contains("emmc") && w.contains("/dev/shm"), "{w}");
        assert_eq!(fidelity_warning(&emmc, 50_000.0), None);
        assert_eq!(fidelity_warning(&StorageProfile::nvme(), 10.0), None);
    }

    #[test]
    fn not_root_error_says_what_to_run() {
        let text = StorageError::NotRoot.to_string();
        assert!(
            text.contains("needs root") && text.contains("sudo") && text.contains("--storage"),
            "{text}"
        );
    }
}
