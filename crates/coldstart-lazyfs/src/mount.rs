//! Mounting and unmounting, with the checks a user needs before anything is mounted.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use coldstart_bundle::remote::{get_manifest, open, FetchedManifest};
use coldstart_bundle::start::START_OBJECT;
use coldstart_bundle::{ChunkCache, FetchError};
use fuser::{MountOption, Session, SessionUnmounter};

use crate::auto::{choose, choose_with, ChooseOptions};
use crate::engine::{Engine, EngineOptions, Report, StartFailure, StartFetch};
use crate::error::MountError;
use crate::fs::LazyFs;
use crate::model::{Choice, ManifestCost};
use crate::options::MountOptions;

/// A mounted bundle. Dropping it unmounts.
pub struct Mount {
    engine: Arc<Engine>,
    mountpoint: PathBuf,
    record: Option<PathBuf>,
    unmounter: Option<SessionUnmounter>,
    session: Option<JoinHandle<std::io::Result<()>>>,
    watchdog: Option<Watchdog>,
    choice: Option<Choice>,
    /// Where the manifest came from, and why a preferred copy was not used.
    source: (&'static str, Option<String>),
}

/// Unmounts the mount when the mounting process dies without unmounting it (`kill -9`).
///
/// fusermount3's `auto_unmount` option is not enough: it unmounts only if opening the mount point
/// fails with `ENOTCONN`, and when it looks while the dying process still holds `/dev/fuse` the
/// open fails with `ECONNABORTED` instead, and the mount stays. The watchdog decides from the
/// mount table alone: when its standard input, which only this process holds, reaches end of
/// file and the mount it was given (by mount id and file system type) is still there, it
/// detaches it.
struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

const WATCHDOG: &str = r#"
read -r _ || true
while read -r id _ _ _ _ rest; do
    [ "$id" = "$1" ] || continue
    case "$rest" in
        *" - $3 "*) fusermount3 -u -z -- "$2" || umount -l -- "$2" ;;
    esac
done < /proc/self/mountinfo
"#;

impl Watchdog {
    /// Starts watching the mount on `mountpoint`, which must be mounted now.
    fn start(mountpoint: &Path) -> std::io::Result<Watchdog> {
        let (id, fstype) = mount_entry(mountpoint).ok_or_else(|| {
            std::io::Error::other(format!("{} is not in the mount table", mountpoint.display()))
        })?;
        let mut child = Command::new("/bin/sh")
            .args(["-c", WATCHDOG, "coldstart-unmount-watchdog"])
            .arg(id.to_string())
            .arg(mountpoint.canonicalize()?)
            .arg(fstype)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Out of the terminal's process group: a Ctrl-C reaches only the mounting process,
            // which unmounts itself.
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Tells the watchdog this process is done with the mount, and reaps it.
    fn finish(mut self) {
        drop(self.stdin.take());
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The id and file system type of the mount on `path` (the last one, if mounts are stacked),
/// from `/proc/self/mountinfo`.
fn mount_entry(path: &Path) -> Option<(u64, String)> {
    let path = path.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let id = f.next()?.parse().ok()?;
            let dir = f.nth(3)?;
            let fstype = f.skip_while(|&x| x != "-").nth(1)?;
            Some((id, dir, fstype))
        })
        .filter(|(_, dir, _)| unescape(dir) == path.as_os_str().to_string_lossy())
        .map(|(id, _, fstype)| (id, fstype.to_owned()))
        .next_back()
}

/// Whether `path` is a mount point (it appears in `/proc/self/mountinfo`).
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(path) = path.canonicalize() else { return false };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| unescape(m) == path.as_os_str().to_string_lossy())
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn check_mountpoint(dir: &Path) -> Result<(), MountError> {
    let meta = std::fs::metadata(dir).map_err(|_| MountError::Missing(dir.to_path_buf()))?;
    if !meta.is_dir() {
        return Err(MountError::NotADirectory(dir.to_path_buf()));
    }
    if is_mount_point(dir) {
        return Err(MountError::Busy(dir.to_path_buf()));
    }
    let mut entries = std::fs::read_dir(dir).map_err(|_| MountError::Missing(dir.to_path_buf()))?;
    if entries.next().is_some() {
        return Err(MountError::NotEmpty(dir.to_path_buf()));
    }
    Ok(())
}

/// Mounts the bundle at `url` (`http://...` or a bundle directory) on the empty directory
/// `mountpoint`. Returns when the strategy's start-up work is done and the tree is visible.
pub fn mount(url: &str, mountpoint: &Path, opts: MountOptions) -> Result<Mount, MountError> {
    check_mountpoint(mountpoint)?;
    let remote: Arc<dyn coldstart_bundle::Remote> =
        Arc::from(open(url, opts.fetch.clone()).map_err(MountError::Manifest)?);
    let t = Instant::now();
    // A hot-set strategy reads the manifest and the hot set in one request (the start object).
    // So does `auto`: it decides once the manifest has arrived (and, without the link given,
    // enough of the hot part to measure the link on), and keeps the request for a hot-set
    // strategy or drops it for another.
    let hot_first = opts.auto.is_some() || opts.strategy.uses_hot_set();
    let sample = opts.auto.as_ref().is_some_and(|a| a.link.is_none());
    let mut start = None;
    let mut probe = None;
    let fetched = if hot_first {
        let fetch = StartFetch::begin(remote.clone(), sample)
            .map_err(|e| MountError::Manifest(FetchError::Io { url: url.to_owned(), source: e }))?;
        match fetch.manifest() {
            Ok(head) => {
                start = Some(fetch);
                probe = head.sample;
                FetchedManifest {
                    manifest: head.manifest,
                    source: START_OBJECT,
                    fallback: None,
                    bytes: head.manifest_bytes,
                }
            }
            Err(StartFailure::Invalid(e)) => {
                return Err(MountError::Manifest(FetchError::Manifest(e)));
            }
            Err(StartFailure::Fallback(why)) => {
                drop(fetch);
                let mut m = get_manifest(remote.as_ref()).map_err(MountError::Manifest)?;
                let why = format!("{}: {why}", remote.describe(START_OBJECT));
                m.fallback = Some(match m.fallback {
                    Some(f) => format!("{why}; {f}"),
                    None => why,
                });
                m
            }
        }
    } else {
        get_manifest(remote.as_ref()).map_err(MountError::Manifest)?
    };
    let manifest_fetch = (fetched.bytes, t.elapsed());
    let (manifest, source) = (fetched.manifest, (fetched.source, fetched.fallback));
    let cache = ChunkCache::open(&opts.cache_dir)?;
    let mut strategy = opts.strategy;
    let choice = match &opts.auto {
        Some(auto) => {
            // Predicted from the mount's start: with the start object, every strategy has paid
            // its request, its manifest and the link sample's hot bytes, and the hot-set
            // strategies' hot set is on its way.
            let received: u64 =
                probe.iter().flat_map(|p| &p.chunks).map(|(c, _)| c.stored_len()).sum();
            let how = ChooseOptions {
                auto: auto.clone(),
                manifest_cost: start.as_ref().map(|_| ManifestCost {
                    bytes: manifest_fetch.0,
                    start_object: true,
                    hot_received: received,
                }),
                manifest_fetch: Some(manifest_fetch),
                connections: opts.fetch.connections,
                readahead: opts.readahead,
                keep_probed: true,
            };
            let c = match probe.take() {
                Some(p) => choose_with(p, &manifest, &cache, &how),
                None => choose(remote.as_ref(), &manifest, &cache, &how)?,
            };
            strategy = c.chosen;
            Some(c)
        }
        None => None,
    };
    let engine = Engine::new(
        manifest,
        remote,
        cache,
        EngineOptions { strategy, read_timeout: opts.read_timeout },
    );
    let started = match start {
        Some(fetch) if strategy.uses_hot_set() => engine.start_from(fetch),
        // `auto` chose `original` or `paged`: dropping the start object's request stops it.
        _ => engine.start(),
    };
    if let Err(source) = started {
        engine.shutdown();
        return Err(MountError::Prefetch { strategy, source });
    }
    let mut options = vec![
        MountOption::FSName("coldstart".into()),
        MountOption::Subtype("coldstart".into()),
        MountOption::RO,
        MountOption::Exec,
        MountOption::DefaultPermissions,
        // Not `AutoUnmount`: the watchdog below does its job, reliably (see `Watchdog`), and
        // without it root mounts directly instead of through a lingering fusermount3.
    ];
    // Other users (root's programs run as a service user, say) may read the files; an
    // unprivileged user may allow that only where /etc/fuse.conf says `user_allow_other`.
    if may_allow_other() {
        options.push(MountOption::AllowOther);
    }
    let fail = |cause| MountError::Fuse { path: mountpoint.to_path_buf(), cause };
    let mut session =
        match Session::new(LazyFs::new(engine.clone(), opts.readahead), mountpoint, &options) {
            Ok(s) => s,
            Err(e) => {
                engine.shutdown();
                return Err(fail(e));
            }
        };
    let unmounter = session.unmount_callable();
    let thread = std::thread::Builder::new()
        .name("coldstart-fuse".into())
        .spawn(move || session.run())
        .map_err(fail)?;
    let mut mount = Mount {
        engine,
        mountpoint: mountpoint.to_path_buf(),
        record: opts.record,
        unmounter: Some(unmounter),
        session: Some(thread),
        watchdog: None,
        choice,
        source,
    };
    // Without the watchdog a `kill -9` could leave the mount behind: fail rather than risk it.
    mount.watchdog = Some(Watchdog::start(mountpoint).map_err(fail)?);
    Ok(mount)
}

impl Mount {
    /// What `--strategy auto` chose, if it was asked.
    pub fn choice(&self) -> Option<&Choice> {
        self.choice.as_ref()
    }

    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The statistics so far.
    pub fn report(&self) -> Report {
        let mut report = self.engine.report();
        report.manifest_source = self.source.0.to_owned();
        report.manifest_fallback = self.source.1.clone();
        report
    }

    /// Unmounts, writes the `--record` file and returns the statistics.
    pub fn unmount(mut self) -> Result<Report, MountError> {
        self.teardown()?;
        if let Some(path) = self.record.take() {
            self.engine.write_record(&path)?;
        }
        let mut report = self.report();
        report.auto = self.choice.clone();
        Ok(report)
    }

    fn teardown(&mut self) -> Result<(), MountError> {
        let Some(mut unmounter) = self.unmounter.take() else { return Ok(()) };
        // Unmount directly when we may (root), else through fusermount3. Lazily if a process still
        // has files open, so that nothing is left mounted.
        if is_mount_point(&self.mountpoint) {
            detach(&self.mountpoint);
        }
        let _ = unmounter.unmount();
        let session = self.session.take();
        let ended = |s: &Option<JoinHandle<_>>| s.as_ref().map_or(true, |h| h.is_finished());
        let t = Instant::now();
        while !ended(&session) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.engine.shutdown();
        if let Some(h) = session.filter(|h| h.is_finished()) {
            let _ = h.join();
        }
        let stuck = is_mount_point(&self.mountpoint);
        // If it is still mounted, the watchdog detaches it once this process is gone.
        if !stuck {
            if let Some(w) = self.watchdog.take() {
                w.finish();
            }
        }
        if stuck {
            return Err(MountError::Unmount(self.mountpoint.clone()));
        }
        Ok(())
    }
}

fn may_allow_other() -> bool {
    coldstart_sys::is_root()
        || std::fs::read_to_string("/etc/fuse.conf")
            .is_ok_and(|c| c.lines().any(|l| l.trim() == "user_allow_other"))
}

/// Unmounts `dir`: `umount2` (lazily if busy) when privileged, else `fusermount3 -u -z`.
fn detach(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return };
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return;
    }
    // SAFETY: as above.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return;
    }
    let _ = Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(dir)
        .stderr(std::process::Stdio::null())
        .status();
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape(r"/tmp/tab\011x\134y"), "/tmp/tab\tx\\y");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/trailing\04"), r"/trailing\04");
    }

    #[test]
    fn a_missing_or_non_directory_mount_point_is_named() {
        let d = tempfile::tempdir().unwrap();
        let err = check_mountpoint(&d.path().join("nope")).unwrap_err();
        assert!(matches!(err, MountError::Missing(_)));
        std::fs::write(d.path().join("f"), b"").unwrap();
        let err = check_mountpoint(&d.path().join("f")).unwrap_err();
        assert!(matches!(err, MountError::NotADirectory(_)));
        assert!(check_mountpoint(d.path()).is_err(), "not empty");
        std::fs::remove_file(d.path().join("f")).unwrap();
        assert!(check_mountpoint(d.path()).is_ok());
        assert!(is_mount_point(Path::new("/")));
        assert_eq!(mount_entry(d.path()), None);
        let (_, fstype) = mount_entry(Path::new("/proc")).unwrap();
        assert_eq!(fstype, "proc");
    }
}
