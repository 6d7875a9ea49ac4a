//! The kernel-facing side: fuser's [`Filesystem`] over the inode table and the engine.
//!
//! fuser delivers requests on one thread; reads go to a small pool of workers and are answered
//! from there, so a miss waiting on the network does not hold up lookups or reads of cached
//! chunks. Files are opened with `FOPEN_KEEP_CACHE` and attributes are cached for an hour:
//! the tree never changes while mounted, so the kernel's page cache serves repeated reads.
//! Modes, modification times (as packed: a program that caches what it derives from a file,
//! as Python does its `.pyc`, compares them) and symbolic links are the manifest's.
//!
//! **Passthrough.** A file whose chunks are all in the chunk cache when it is first opened is
//! handed to the kernel as a verified local copy (`Engine::local_copy`) with FUSE passthrough
//! (Linux 6.9 and later; registering the copy needs `CAP_SYS_ADMIN`): its reads and page
//! faults then go to that file, at local speed, and never reach this process. The choice is
//! made once per file and mount (the kernel refuses to mix passthrough and normal opens of
//! one inode), and not at all while recording (`--record` must see every read) or where the
//! kernel or the privilege is missing (then every file is read through the engine, as
//! before).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use coldstart_bundle::EntryKind;
use fuser::{
    AccessFlags, BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};

use crate::engine::Engine;
use crate::tree::{Ino, Tree};

const TTL: Duration = Duration::from_secs(3600);
const WORKERS: usize = 8;

type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct LazyFs {
    engine: Arc<Engine>,
    tree: Arc<Tree>,
    uid: u32,
    gid: u32,
    jobs: Option<mpsc::Sender<Job>>,
    readahead: u32,
    /// Whether to try passthrough (asked for, and the kernel took it at init).
    passthrough: Arc<AtomicBool>,
    /// Per inode, once decided: the backing file's id (passthrough) or `None` (through the
    /// engine). Kept until unmount: every open of the inode must use the same.
    backing: Arc<Mutex<HashMap<u64, Option<Arc<BackingId>>>>>,
}

impl LazyFs {
    /// `passthrough`: try to hand fully cached files to the kernel (see the module's
    /// documentation).
    pub(crate) fn new(engine: Arc<Engine>, readahead: u32, passthrough: bool) -> LazyFs {
        let tree = Arc::new(Tree::new(engine.manifest()));
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..WORKERS {
            let rx = rx.clone();
            let _ =
                std::thread::Builder::new().name(format!("coldstart-read-{i}")).spawn(move || {
                    loop {
                        let job = rx.lock().unwrap().recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                });
        }
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        LazyFs {
            engine,
            tree,
            uid,
            gid,
            jobs: Some(tx),
            readahead,
            passthrough: Arc::new(AtomicBool::new(passthrough)),
            backing: Arc::default(),
        }
    }

    fn attr(&self, ino: Ino) -> Option<FileAttr> {
        let node = self.tree.get(ino)?;
        let (kind, perm, size, nlink, time) = match node.entry {
            None => (FileType::Directory, 0o755, 0, 2, UNIX_EPOCH),
            Some(i) => {
                let e = &self.engine.manifest().files[i];
                let kind = match e.kind {
                    EntryKind::Dir => FileType::Directory,
                    EntryKind::File => FileType::RegularFile,
                    EntryKind::Symlink => FileType::Symlink,
                };
                let nlink = if e.kind == EntryKind::Dir { 2 } else { 1 };
                (kind, e.mode as u16, e.size, nlink, mtime(e.mtime, e.mtime_nsec))
            }
        };
        Some(FileAttr {
            ino: INodeNo(ino.0),
            size,
            blocks: size.div_ceil(512),
            atime: time,
            mtime: time,
            ctime: time,
            crtime: time,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// Runs `job` on a worker (or here, if the workers are gone).
    fn submit(&self, job: Job) {
        match &self.jobs {
            Some(tx) => {
                if let Err(mpsc::SendError(job)) = tx.send(job) {
                    job();
                }
            }
            None => job(),
        }
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        // Closing the channel ends the workers once the queued reads are answered.
        self.jobs.take();
    }
}

/// Opens manifest file `file` (inode `ino`) for the kernel: with passthrough to its local
/// copy when it can and may, else read through the engine.
fn open_file(
    engine: &Engine,
    passthrough: &AtomicBool,
    backing: &Mutex<HashMap<u64, Option<Arc<BackingId>>>>,
    ino: u64,
    file: usize,
    reply: ReplyOpen,
) {
    let keep = FopenFlags::FOPEN_KEEP_CACHE;
    if !passthrough.load(Ordering::Relaxed) {
        return reply.opened(FileHandle(0), keep);
    }
    // Held while deciding, so that two first opens of one inode agree.
    let mut map = backing.lock().unwrap();
    let id = match map.get(&ino) {
        Some(decided) => decided.clone(),
        None => {
            let id = engine.local_copy(file).and_then(|copy| match reply.open_backing(&copy) {
                Ok(id) => Some(Arc::new(id)),
                Err(_) => {
                    // No privilege or no kernel support: not for any file of this mount.
                    passthrough.store(false, Ordering::Relaxed);
                    None
                }
            });
            map.insert(ino, id.clone());
            id
        }
    };
    drop(map);
    match id {
        Some(id) => {
            engine.note_passthrough();
            reply.opened_passthrough(FileHandle(0), FopenFlags::empty(), &id)
        }
        None => reply.opened(FileHandle(0), keep),
    }
}

impl Filesystem for LazyFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(self.readahead);
        let wanted = self.passthrough.load(Ordering::Relaxed)
            && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            // Backing files may be on a stacked file system themselves (overlayfs).
            && config.set_max_stack_depth(2).is_ok();
        self.passthrough.store(wanted, Ordering::Relaxed);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = name.to_str().and_then(|n| self.tree.lookup(Ino(parent.0), n));
        match found.and_then(|ino| self.attr(ino)) {
            Some(attr) => reply.entry(&TTL, &attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(Ino(ino.0)) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let target = self
            .tree
            .get(Ino(ino.0))
            .and_then(|n| n.entry)
            .and_then(|i| self.engine.manifest().files[i].target.as_deref());
        match target {
            Some(t) => reply.data(t.as_bytes()),
            None => reply.error(Errno::EINVAL),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        let node = self.tree.get(Ino(ino.0));
        match node.map(|n| (n.kind, n.entry)) {
            Some((EntryKind::File, Some(file))) => {
                self.engine.note_open();
                let (engine, passthrough, backing) =
                    (self.engine.clone(), self.passthrough.clone(), self.backing.clone());
                // Making a local copy reads the file's chunks: not on the kernel's thread.
                self.submit(Box::new(move || {
                    open_file(&engine, &passthrough, &backing, ino.0, file, reply)
                }));
            }
            Some((EntryKind::Dir, _)) => reply.error(Errno::EISDIR),
            Some((EntryKind::Symlink, _)) => reply.error(Errno::ELOOP),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(file) = self.tree.get(Ino(ino.0)).and_then(|n| n.entry) else {
            return reply.error(Errno::ENOENT);
        };
        let engine = self.engine.clone();
        self.submit(Box::new(move || match engine.read(file, offset, size) {
            Ok(data) => reply.data(&data),
            Err(_) => reply.error(Errno::EIO),
        }));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(node) = self.tree.get(Ino(ino.0)) else { return reply.error(Errno::ENOENT) };
        if node.kind != EntryKind::Dir {
            return reply.error(Errno::ENOTDIR);
        }
        let mut entries: Vec<(u64, FileType, &str)> =
            vec![(ino.0, FileType::Directory, "."), (node.parent.0, FileType::Directory, "..")];
        for (name, child) in &node.children {
            let kind = match self.tree.get(*child).map(|n| n.kind) {
                Some(EntryKind::Dir) => FileType::Directory,
                Some(EntryKind::Symlink) => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            entries.push((child.0, kind, name));
        }
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) {
            reply.error(Errno::EROFS)
        } else {
            reply.ok()
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let (bytes, _) = self.engine.manifest().total_bytes();
        reply.statfs(bytes.div_ceil(4096), 0, 0, self.tree.len() as u64, 0, 4096, 255, 4096);
    }
}

/// A manifest's modification time as the kernel is told it (before the epoch too).
fn mtime(secs: i64, nsec: u32) -> SystemTime {
    let nsec = Duration::from_nanos(nsec.min(999_999_999) as u64);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64) + nsec
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nsec
    }
}
