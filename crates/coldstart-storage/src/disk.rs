//! A disk served by this process: the loop device's backing file on a small FUSE file system
//! whose reads take the time a hard disk would ([`crate::seek`]).
//!
//! The loop device (direct I/O) passes each request of its queue, after the block layer merged
//! adjacent ones, as one read of its backing file; the file is opened `FOPEN_DIRECT_IO`, so
//! every read reaches this server and none is served from a host cache of the FUSE file. The
//! drive serves one request at a time, after the model's service time; requests that wait
//! meanwhile (up to [`QUEUE_DEPTH`], SATA's command queue) are served next by whichever the model
//! says is quickest to reach from where the head is, as a disk's command queueing does. A
//! program that waits for each read (a page fault) queues one at a time, and is served in
//! order. The bytes themselves live in a real file in the session directory,
//! mapped and locked in memory as they are touched (`mlock2(MLOCK_ONFAULT)`), so that neither
//! `drop_caches` nor this machine's disk adds its own time to the model's.
//!
//! Writes are not timed (the emulation measures reads), as with the cgroup-throttled profiles.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyWrite, Request, Session, WriteFlags,
};

use crate::seek::{DiskHead, Served};
use crate::StorageError;
use coldstart_formats::measure::SeekModel;

/// The name of the device file on the disk's mount.
pub(crate) const DEVICE_FILE: &str = "device.img";

const ROOT: u64 = 1;
const DEVICE: u64 = 2;
const TTL: Duration = Duration::from_secs(3600);
/// Requests the drive holds at once and chooses among (SATA's native command queue: 32).
pub(crate) const QUEUE_DEPTH: usize = 32;

/// The largest request the server takes: the loop device's requests (up to 1280 KiB) arrive in
/// few pieces.
const MAX_REQUEST: u32 = 1 << 20;

/// What the disk served, by kind of request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Reads that paid a seek and half a revolution.
    pub seeks: u64,
    /// Reads a little ahead on the same track.
    pub track: u64,
    /// Reads served from what the drive had read ahead, or continuing the last one.
    pub buffer: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Time the drive was busy with reads.
    pub busy: Duration,
}

/// The backing file, mapped.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; reads and writes go through `&self` methods that
// copy bytes, and the kernel orders concurrent access to a shared file mapping as it does for
// any process.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(file: &fs::File, len: usize, path: &Path) -> Result<Self, StorageError> {
        // SAFETY: a new shared mapping of a file we opened read-write, `len` bytes long.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(StorageError::io(path, "map", io::Error::last_os_error()));
        }
        let map = Self { ptr: ptr.cast(), len };
        // Pages stay in memory once touched: `drop_caches` before a cold run must not send the
        // disk's reads to this machine's disk.
        // SAFETY: locking our own mapping.
        if unsafe { libc::mlock2(ptr, len, libc::MLOCK_ONFAULT) } != 0 {
            return Err(StorageError::io(
                path,
                "lock in memory (mlock2 MLOCK_ONFAULT)",
                io::Error::last_os_error(),
            ));
        }
        Ok(map)
    }

    fn range(&self, offset: u64, len: usize) -> Option<(usize, usize)> {
        let start = usize::try_from(offset).ok().filter(|&s| s <= self.len)?;
        Some((start, len.min(self.len - start)))
    }

    fn read(&self, offset: u64, len: usize) -> &[u8] {
        let Some((start, n)) = self.range(offset, len) else { return &[] };
        // SAFETY: `start + n` is within the mapping, which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), n) }
    }

    fn write(&self, offset: u64, data: &[u8]) -> usize {
        let Some((start, n)) = self.range(offset, data.len()) else { return 0 };
        // SAFETY: `start + n` is within the mapping, and `data` is not part of it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(start), n) };
        n
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping what `new` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The drive: its head, whether it is busy, and the reads waiting for it.
struct Drive {
    head: DiskHead,
    busy: bool,
    /// The waiting read chosen to go next when the drive became free.
    chosen: Option<u64>,
    next_id: u64,
    /// Each waiting read.
    waiting: Vec<Waiter>,
}

/// A read waiting for the drive, woken alone when the drive chooses it.
struct Waiter {
    id: u64,
    offset: u64,
    len: u64,
    wake: Arc<Condvar>,
}

impl Drive {
    /// The waiting read the model serves soonest from the head's position at `now` (ties: the
    /// one that came first).
    fn quickest(&self, now: Duration) -> Option<&Waiter> {
        self.waiting.iter().min_by_key(|w| (self.head.clone().read(w.offset, w.len, now).0, w.id))
    }
}

struct DiskFs {
    map: Mapping,
    size: u64,
    drive: Mutex<Drive>,
    stats: Arc<Mutex<DiskStats>>,
    epoch: Instant,
}

impl DiskFs {
    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm, size) = match ino {
            ROOT => (FileType::Directory, 0o755, 0),
            DEVICE => (FileType::RegularFile, 0o600, self.size),
            _ => return None,
        };
        let t = SystemTime::UNIX_EPOCH;
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm,
            nlink: if ino == ROOT { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }
}

impl Filesystem for DiskFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(MAX_REQUEST);
        let _ = config.set_max_readahead(0);
        // The loop device's reads are asynchronous: let as many wait as the drive holds.
        let _ = config.set_max_background(QUEUE_DEPTH as u16);
        let _ = config.set_congestion_threshold(QUEUE_DEPTH as u16);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match (parent.0, name == DEVICE_FILE) {
            (ROOT, true) => reply.entry(&TTL, &self.attr(DEVICE).expect("device"), Generation(0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match ino.0 {
            // Every read comes here: no page cache of the device file on the host.
            DEVICE => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            _ => reply.error(Errno::EISDIR),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        raise_priority();
        let (start, done, served) = {
            let mut drive = self.drive.lock().unwrap_or_else(|p| p.into_inner());
            let id = drive.next_id;
            drive.next_id += 1;
            let wake = Arc::new(Condvar::new());
            drive.waiting.push(Waiter { id, offset, len: size.into(), wake: wake.clone() });
            // Go at once to an idle drive; else wait until the drive, free again, chooses this
            // read as the one it reaches soonest of those waiting, and wakes it alone (waking
            // every waiter would cost the host's time, which the model counts as the drive's).
            while drive.busy || drive.chosen.is_some_and(|c| c != id) {
                drive = wake.wait(drive).unwrap_or_else(|p| p.into_inner());
            }
            drive.waiting.retain(|w| w.id != id);
            drive.busy = true;
            drive.chosen = None;
            let now = self.epoch.elapsed();
            let start = now.max(drive.head.free_at());
            let (done, served) = drive.head.read(offset, size.into(), now);
            (start, done, served)
        };
        let data = self.map.read(offset, size as usize);
        {
            let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            match served {
                Served::Seek => s.seeks += 1,
                Served::Track => s.track += 1,
                Served::Buffer => s.buffer += 1,
            }
            s.bytes += data.len() as u64;
            s.busy += done.saturating_sub(start);
        }
        if let Some(wait) = done.checked_sub(self.epoch.elapsed()) {
            std::thread::sleep(wait);
        }
        let next = {
            let mut drive = self.drive.lock().unwrap_or_else(|p| p.into_inner());
            drive.busy = false;
            let next = drive.quickest(self.epoch.elapsed()).map(|w| (w.id, w.wake.clone()));
            drive.chosen = next.as_ref().map(|n| n.0);
            next
        };
        if let Some((_, wake)) = next {
            wake.notify_one();
        }
        reply.data(data);
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.drive.lock().unwrap_or_else(|p| p.into_inner()).head.wrote(offset, data.len() as u64);
        match self.map.write(offset, data) {
            0 if !data.is_empty() => reply.error(Errno::ENOSPC),
            n => reply.written(n as u32),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // The bytes are in the shared mapping already; the emulated disk has no power to lose.
        reply.ok()
    }
}

/// Give the calling server thread a higher priority than the processes it serves (nice -10), once:
/// a disk's service takes no CPU from the host, and a server thread waiting behind other
/// builds for a core would add that wait to every read. Not fatal if refused.
fn raise_priority() {
    thread_local! {
        static RAISED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    RAISED.with(|raised| {
        if !raised.replace(true) {
            // SAFETY: setpriority on this thread's own id.
            unsafe {
                let tid = libc::gettid();
                libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, -10);
            }
        }
    });
}

/// The FUSE file system serving the device file, and its thread.
#[derive(Debug)]
pub(crate) struct ModelledDisk {
    mountpoint: PathBuf,
    thread: Option<JoinHandle<io::Result<()>>>,
    stats: Arc<Mutex<DiskStats>>,
}

impl ModelledDisk {
    /// Serve `backing` (a file of the device's size) as `MOUNTPOINT/device.img` with the
    /// model's timing. `mountpoint` must be an empty directory.
    pub(crate) fn start(
        backing: &Path,
        mountpoint: &Path,
        model: SeekModel,
    ) -> Result<Self, StorageError> {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(backing)
            .map_err(|e| StorageError::io(backing, "open", e))?;
        let size = file.metadata().map_err(|e| StorageError::io(backing, "stat", e))?.len();
        let len = usize::try_from(size)
            .map_err(|_| StorageError::io(backing, "map", io::ErrorKind::FileTooLarge.into()))?;
        let map = Mapping::new(&file, len, backing)?;
        let stats = Arc::new(Mutex::new(DiskStats::default()));
        let fs = DiskFs {
            map,
            size,
            drive: Mutex::new(Drive {
                head: DiskHead::new(model, size),
                busy: false,
                chosen: None,
                next_id: 0,
                waiting: Vec::new(),
            }),
            stats: stats.clone(),
            epoch: Instant::now(),
        };
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            MountOption::FSName("coldstart-disk".into()),
            MountOption::Subtype("coldstart-disk".into()),
            MountOption::RW,
            MountOption::NoExec,
            MountOption::NoSuid,
            MountOption::NoDev,
        ];
        // A thread per request the drive may hold; each waits in `read` for its turn.
        config.n_threads = Some(QUEUE_DEPTH);
        let session = Session::new(fs, mountpoint, &config).map_err(|e| {
            StorageError::io(
                mountpoint,
                "mount hdd-seek's disk (a FUSE file system: is /dev/fuse there? `modprobe fuse`, \
                 or use --storage hdd) on",
                e,
            )
        })?;
        let thread = std::thread::Builder::new()
            .name("coldstart-disk".into())
            .spawn(move || session.run())
            .map_err(|e| StorageError::io(mountpoint, "start the server of", e))?;
        Ok(Self { mountpoint: mountpoint.to_owned(), thread: Some(thread), stats })
    }

    /// The file to attach the loop device to.
    pub(crate) fn device_file(&self) -> PathBuf {
        self.mountpoint.join(DEVICE_FILE)
    }

    /// What the disk has served so far.
    pub(crate) fn stats(&self) -> DiskStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Unmount and end the server. Call after the loop device is detached: a device still in
    /// use (its last user has not closed it yet) keeps the mount busy, and it is then detached
    /// lazily with the server left running until the kernel lets it go.
    pub(crate) fn stop(&mut self) -> Result<(), StorageError> {
        let result = crate::unmount(&self.mountpoint, true);
        if let Some(thread) = self.thread.take() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
        result
    }
}

impl Drop for ModelledDisk {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn drive(waiting: &[(u64, u64)]) -> Drive {
        let mut head = DiskHead::new(SeekModel::desktop_7200(), 1 << 30);
        head.read(100 * MIB, 4096, Duration::ZERO);
        Drive {
            head,
            busy: false,
            chosen: None,
            next_id: waiting.len() as u64,
            waiting: waiting
                .iter()
                .enumerate()
                .map(|(i, &(offset, len))| Waiter {
                    id: i as u64,
                    offset,
                    len,
                    wake: Arc::new(Condvar::new()),
                })
                .collect(),
        }
    }

    #[test]
    fn the_drive_serves_next_the_queued_read_it_reaches_soonest() {
        let now = Duration::from_millis(20);
        // Far away first, then the read that continues the last one, then a near one.
        let d = drive(&[(900 * MIB, 4096), (100 * MIB + 4096, 8192), (120 * MIB, 4096)]);
        assert_eq!(d.quickest(now).map(|w| w.id), Some(1));
        // Without the read in line, the nearer of the two seeks.
        let d = drive(&[(900 * MIB, 4096), (120 * MIB, 4096)]);
        assert_eq!(d.quickest(now).map(|w| w.id), Some(1));
        // Equally quick: the one that came first.
        let d = drive(&[(300 * MIB, 4096), (300 * MIB, 4096)]);
        assert_eq!(d.quickest(now).map(|w| w.id), Some(0));
        assert!(drive(&[]).quickest(now).is_none());
    }

    #[test]
    fn a_disk_that_cannot_be_mounted_says_where_and_what_to_do() {
        let tmp = tempfile::tempdir().unwrap();
        let backing = tmp.path().join("backing.img");
        fs::File::create(&backing).unwrap().set_len(1 << 20).unwrap();
        let missing = tmp.path().join("no-such-dir");
        let e = ModelledDisk::start(&backing, &missing, SeekModel::desktop_7200()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("no-such-dir") && text.contains("FUSE"), "{text}");
        assert!(text.contains("--storage hdd"), "{text}");
        assert!(!missing.exists());
    }
}
