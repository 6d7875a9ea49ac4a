//! The kernel-facing side: fuser's [`Filesystem`] over the inode table and the engine.
//!
//! fuser delivers requests on one thread; reads go to a small pool of workers and are answered
//! from there, so a miss waiting on the network does not hold up lookups or reads of cached
//! chunks. Files are opened with `FOPEN_KEEP_CACHE` and attributes are cached for an hour:
//! the tree never changes while mounted, so the kernel's page cache serves repeated reads.
//! Modes, modification times (as packed: a program that caches what it derives from a file,
//! as Python does its `.pyc`, compares them) and symbolic links are the manifest's.

use std::ffi::OsStr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use coldstart_bundle::EntryKind;
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, Request,
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
}

impl LazyFs {
    pub(crate) fn new(engine: Arc<Engine>, readahead: u32) -> LazyFs {
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
        LazyFs { engine, tree, uid, gid, jobs: Some(tx), readahead }
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
            ino: ino.0,
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
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        // Closing the channel ends the workers once the queued reads are answered.
        self.jobs.take();
    }
}

impl Filesystem for LazyFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        let _ = config.set_max_readahead(self.readahead);
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let found = name.to_str().and_then(|n| self.tree.lookup(Ino(parent), n));
        match found.and_then(|ino| self.attr(ino)) {
            Some(attr) => reply.entry(&TTL, &attr, 0),
            None => reply.error(libc::ENOENT),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.attr(Ino(ino)) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(libc::ENOENT),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let target = self
            .tree
            .get(Ino(ino))
            .and_then(|n| n.entry)
            .and_then(|i| self.engine.manifest().files[i].target.as_deref());
        match target {
            Some(t) => reply.data(t.as_bytes()),
            None => reply.error(libc::EINVAL),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(libc::EROFS);
        }
        match self.tree.get(Ino(ino)).map(|n| n.kind) {
            Some(EntryKind::File) => {
                self.engine.note_open();
                reply.opened(0, fuser::consts::FOPEN_KEEP_CACHE)
            }
            Some(EntryKind::Dir) => reply.error(libc::EISDIR),
            Some(EntryKind::Symlink) => reply.error(libc::ELOOP),
            None => reply.error(libc::ENOENT),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let Some(file) = self.tree.get(Ino(ino)).and_then(|n| n.entry) else {
            return reply.error(libc::ENOENT);
        };
        let engine = self.engine.clone();
        let job: Job = Box::new(move || match engine.read(file, offset.max(0) as u64, size) {
            Ok(data) => reply.data(&data),
            Err(_) => reply.error(libc::EIO),
        });
        match &self.jobs {
            Some(tx) => {
                if let Err(mpsc::SendError(job)) = tx.send(job) {
                    job();
                }
            }
            None => job(),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let Some(node) = self.tree.get(Ino(ino)) else { return reply.error(libc::ENOENT) };
        if node.kind != EntryKind::Dir {
            return reply.error(libc::ENOTDIR);
        }
        let mut entries: Vec<(u64, FileType, &str)> =
            vec![(ino, FileType::Directory, "."), (node.parent.0, FileType::Directory, "..")];
        for (name, child) in &node.children {
            let kind = match self.tree.get(*child).map(|n| n.kind) {
                Some(EntryKind::Dir) => FileType::Directory,
                Some(EntryKind::Symlink) => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            entries.push((child.0, kind, name));
        }
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(ino, (i + 1) as i64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, mask: i32, reply: ReplyEmpty) {
        if mask & libc::W_OK != 0 {
            reply.error(libc::EROFS)
        } else {
            reply.ok()
        }
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
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
