//! Mounting and unmounting, with the checks a user needs before anything is mounted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use coldstart_bundle::remote::{get_manifest, open, redact_url, FetchedManifest};
use coldstart_bundle::start::START_OBJECT;
use coldstart_bundle::{ChunkCache, FetchError};
use coldstart_process::held::{SpawnError, Spawner};
use fuser::{MountOption, Session, SessionACL, SessionUnmounter};

use crate::auto::{choose, choose_with, ChooseOptions};
use crate::engine::{Engine, EngineOptions, Report, StartFailure, StartFetch};
use crate::error::MountError;
use crate::fs::LazyFs;
use crate::group::Group;
use crate::history::{HeldOutRun, History};
use crate::model::{Choice, ManifestCost};
use crate::options::{default_readahead, read_timeout, MountOptions};
use crate::watchdog::Watchdog;

/// A mounted bundle. Dropping it unmounts.
pub struct Mount {
    engine: Arc<Engine>,
    mountpoint: PathBuf,
    record: Option<PathBuf>,
    unmounter: Option<SessionUnmounter>,
    session: Option<JoinHandle<std::io::Result<()>>>,
    /// The FUSE connection's number (`/sys/fs/fuse/connections/N`), once known.
    connection: Option<u32>,
    watchdog: Option<Watchdog>,
    choice: Option<Choice>,
    /// Where the manifest came from, and why a preferred copy was not used.
    source: (&'static str, Option<String>),
    /// The kernel's read-ahead on the mount, as given or chosen.
    readahead: u32,
    /// Where this bundle's misses outside its hot set are kept, at unmount (a bundle with a
    /// hot set), and the manifest's bytes.
    history: Option<PathBuf>,
    manifest_bytes: u64,
    /// The SHA-256 of the bundle's `manifest.json`: its identity in a learn record.
    manifest_sha256: [u8; 32],
    /// Whether it was mounted for a learn record ([`MountOptions::learn`]).
    learn: bool,
}

/// What a mount's learn record is made from (`--learn`): kept apart from the [`Mount`], so
/// that the record can be made after the unmount, when the program can read no more.
pub struct Learner {
    engine: Arc<Engine>,
    bundle: coldstart_bundle::Sha256Hex,
}

impl Learner {
    /// The record of the pieces the program read outside the hot set
    /// ([`coldstart_bundle::learn`]); `completed`: whether the start ran to its end.
    pub fn record(&self, completed: bool) -> coldstart_bundle::learn::Record {
        coldstart_bundle::learn::Record::of_reads(
            self.engine.manifest(),
            self.bundle.clone(),
            &self.engine.strategy().to_string(),
            completed,
            &self.engine.outside_reads(),
        )
    }
}

/// Whether `path` is a mount point (it appears in `/proc/self/mountinfo`).
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(path) = path.canonicalize() else { return false };
    coldstart_process::mountinfo::read().is_ok_and(|m| m.iter().any(|m| m.point == path))
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
    // A URL or path that names no bundle is said first; then, before any fetch, what keeps
    // this user from mounting, and what to do.
    let remote: Arc<dyn coldstart_bundle::Remote> =
        Arc::from(open(url, opts.fetch.clone()).map_err(MountError::Manifest)?);
    coldstart_sys::fuse::check()?;
    // Before anything that may take long: if this process dies from here on, the watchdog
    // cleans up (the directories it is given now, the mount once there is one).
    let mut watchdog = Watchdog::start(&opts.remove_on_death).map_err(MountError::Watchdog)?;
    let t = Instant::now();
    // Under --trust the signature is fetched beside the manifest, not after it.
    let signature = (!opts.trust.is_empty()).then(|| {
        let remote = remote.clone();
        std::thread::spawn(move || coldstart_bundle::sign::fetch_signature(remote.as_ref()))
    });
    // A hot-set strategy reads the manifest and the hot set in one request (the start object).
    // So does `auto`: it decides once the manifest has arrived (and, without the link given,
    // enough of the hot part to measure the link on), and keeps the request for a hot-set
    // strategy or drops it for another.
    let hot_first = opts.auto.is_some() || opts.strategy.uses_hot_set();
    let sample = opts.auto.as_ref().is_some_and(|a| a.link.is_none());
    let mut start = None;
    let mut probe = None;
    let fetched = if hot_first {
        let fetch = StartFetch::begin(remote.clone(), sample).map_err(|e| {
            MountError::Manifest(FetchError::Io { url: redact_url(url), source: e })
        })?;
        match fetch.manifest() {
            Ok(head) => {
                start = Some(fetch);
                probe = head.sample;
                FetchedManifest {
                    manifest: head.manifest,
                    source: START_OBJECT,
                    fallback: None,
                    bytes: head.manifest_bytes,
                    sha256: head.manifest_sha256,
                }
            }
            Err(StartFailure::Invalid(e)) => {
                return Err(MountError::Manifest(FetchError::Manifest(e)));
            }
            Err(StartFailure::Refused(e)) => return Err(MountError::Manifest(e)),
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
    if let Some(signature) = signature {
        // Before the engine exists: no byte of this bundle reaches a program unless it checks.
        let fetched_sig = signature.join().expect("the signature fetch does not panic");
        let fetched_sig = fetched_sig.map_err(MountError::Signature)?;
        let url = remote.describe(coldstart_bundle::sign::SIGNATURE);
        coldstart_bundle::sign::check(fetched_sig.as_deref(), &url, &fetched.sha256, &opts.trust)?;
    }
    let manifest_fetch = (fetched.bytes, t.elapsed());
    let (manifest, source) = (fetched.manifest, (fetched.source, fetched.fallback));
    let cache = ChunkCache::open(&opts.cache_dir)?;
    let history = (!manifest.hot.chunks.is_empty())
        .then(|| crate::history::path(&opts.cache_dir, &fetched.sha256));
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
                // What the model assumes of `paged`: the read-ahead it would mount with.
                readahead: opts.readahead.unwrap_or(crate::options::PAGE_READAHEAD),
                keep_probed: true,
                history: history.as_deref().map(History::read).unwrap_or_default(),
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
    let readahead = opts.readahead.unwrap_or_else(|| {
        let all_cached = strategy != crate::Strategy::Original
            && opts.record.is_none()
            && manifest.files.iter().flat_map(|e| &e.chunks).all(|c| cache.contains(&c.sha256));
        default_readahead(strategy, opts.record.is_some(), all_cached)
    });
    let read_timeout = opts.read_timeout.unwrap_or_else(|| read_timeout(&opts.fetch, &manifest));
    let engine_opts = EngineOptions { strategy, read_timeout, progress: opts.progress.clone() };
    let engine = Engine::new(manifest, remote, cache, engine_opts);
    let started = match start {
        Some(fetch) if strategy.uses_hot_set() => engine.start_from(fetch),
        // `auto` chose `original` or `paged`: dropping the start object's request stops it,
        // and frees its connection before the strategy asks for one (with one connection,
        // `original` would wait for it for ever).
        other => {
            drop(other);
            engine.start()
        }
    };
    if let Err(source) = started {
        engine.shutdown();
        return Err(MountError::Prefetch { strategy, source });
    }
    let mut config = fuser::Config::default();
    config.mount_options = vec![
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
        config.acl = SessionACL::All;
    }
    let fail = |cause| MountError::Fuse { path: mountpoint.to_path_buf(), cause };
    // Passthrough needs every read to bypass the engine: not while recording or learning.
    let fs = LazyFs::new(engine.clone(), readahead, opts.record.is_none() && !opts.learn);
    let mut session = match Session::new(fs, mountpoint, &config) {
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
        connection: None,
        watchdog: None,
        choice,
        source,
        readahead,
        history,
        manifest_bytes: manifest_fetch.0,
        manifest_sha256: fetched.sha256,
        learn: opts.learn,
    };
    // Without the watchdog a `kill -9` could leave the mount behind: fail rather than risk it.
    mount.connection = Some(watchdog.watch(mountpoint).map_err(fail)?);
    mount.watchdog = Some(watchdog);
    Ok(mount)
}

impl Mount {
    /// What `--strategy auto` chose, if it was asked.
    pub fn choice(&self) -> Option<&Choice> {
        self.choice.as_ref()
    }

    /// Whether it was mounted for a learn record ([`MountOptions::learn`]).
    pub fn learning(&self) -> bool {
        self.learn
    }

    /// What this mount's learn record is made from ([`Learner`]).
    pub fn learner(&self) -> Learner {
        let hex: String = self.manifest_sha256.iter().map(|b| format!("{b:02x}")).collect();
        Learner {
            engine: self.engine.clone(),
            bundle: coldstart_bundle::Sha256Hex::new(hex).expect("64 hex digits"),
        }
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
        report.readahead = self.readahead;
        report.other_bytes =
            report.bytes_fetched.saturating_sub(report.hot_request_bytes + self.manifest_bytes);
        report
    }

    /// Unmounts, writes the `--record` file and returns the statistics.
    pub fn unmount(self) -> Result<Report, MountError> {
        let (report, result) = self.close();
        result.map(|()| report)
    }

    /// Unmounts and writes the `--record` file; returns the statistics, which are there even
    /// when unmounting or writing failed, and what failed.
    pub fn close(mut self) -> (Report, Result<(), MountError>) {
        let mut result = self.teardown();
        if let Some(path) = self.record.take() {
            if let Err(e) = self.engine.write_record(&path) {
                result = result.and(Err(e.into()));
            }
        }
        let mut report = self.report();
        report.auto = self.choice.clone();
        // A start that ended cleanly is one more figure for the next prediction; not being
        // able to keep it loses nothing this mount did.
        if let (Some(path), Ok(()), 0) = (&self.history, &result, report.errors) {
            let run = HeldOutRun {
                strategy: self.engine.strategy(),
                misses: report.held_out_misses,
                bytes: report.held_out_bytes,
                other_bytes: report.other_bytes,
            };
            let _ = History::append(path, run);
        }
        (report, result)
    }

    /// Stops every fetch at once: a read that needs the network fails with `EIO` instead of
    /// waiting (what is cached still reads), and background work stops. For a mount whose
    /// user is going away (a signal).
    pub fn cancel(&self) {
        self.engine.cancel();
    }

    /// Starts `command` on the mount, held before `exec` in a process group of its own (its id
    /// is the command's pid), with no signal blocked. The mount's watchdog is told the group
    /// before the command runs, and kills it if this process dies; the command closes its copy
    /// of the pipe to the watchdog before `exec`, so that a command stuck in `exec` on a read
    /// from the mount does not hide this process's death from it. Returns once the command
    /// runs, or with the error of its `exec`.
    pub fn spawn(&self, command: Spawner<'_>) -> std::io::Result<Group> {
        let watchdog = self.watchdog.as_ref();
        let command = match watchdog.and_then(Watchdog::pipe) {
            Some(fd) => command.close(fd),
            None => command,
        };
        let mut held = command.spawn().map_err(spawn_error)?;
        if let Some(w) = watchdog {
            w.tell_group(held.pid());
        }
        held.release().map_err(spawn_error)?;
        Ok(Group { held })
    }

    fn teardown(&mut self) -> Result<(), MountError> {
        let Some(mut unmounter) = self.unmounter.take() else { return Ok(()) };
        // Nobody waits for the mount's fetches any more: a read still being served, a miss's
        // window or the background stream end now (within the fetcher's poll), not when their
        // transfer would have (seconds on a slow link, which the unmount waited for).
        self.engine.cancel();
        let session = self.session.take();
        let ended = |s: &Option<JoinHandle<_>>| s.as_ref().is_none_or(|h| h.is_finished());
        // A session that has ended no longer holds its connection's number: it may be another
        // mount's by now.
        detach(&self.mountpoint, self.connection.filter(|_| !ended(&session)));
        let _ = unmounter.unmount();
        let t = Instant::now();
        while !ended(&session) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.engine.shutdown();
        if let Some(h) = session.filter(|h| h.is_finished()) {
            let _ = h.join();
        }
        let stuck = is_mount_point(&self.mountpoint);
        if let Some(w) = self.watchdog.take() {
            if stuck {
                // It detaches the mount once this process is gone: keep its pipe open till then.
                std::mem::forget(w);
            } else {
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

/// Unmounts `dir` and ends its FUSE connection `conn`, so that the session ends now.
///
/// Unmounting alone does not end the connection: the kernel ends it with the file system,
/// when its last mount goes, and the mount in this namespace need not be the last. A process
/// that entered a mount namespace of its own while the bundle was mounted (a container, a
/// sandbox, `unshare --mount`: other users' work on a shared machine) holds a copy of the
/// mount for as long as it lives, and a lazy unmount leaves the file system to the processes
/// that still have files open on it. The session would wait in its read of `/dev/fuse` for
/// them, and their reads would go to an engine about to stop. So the connection is aborted
/// with the unmount: every read still waiting, or still to come through a copy, fails at once
/// (`ENOTCONN`), as it would once this process has closed `/dev/fuse`.
///
/// Privileged: one `umount2(MNT_FORCE | MNT_DETACH)` (a forced unmount of FUSE aborts the
/// connection; detached even while busy, so that nothing is left mounted). Otherwise the
/// connection's `abort` file in the FUSE control file system (it belongs to the user who
/// mounted), where that is mounted, and `fusermount3 -u -z`.
fn detach(dir: &Path, conn: Option<u32>) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return };
    // SAFETY: a valid NUL-terminated path.
    if is_mount_point(dir)
        && unsafe { libc::umount2(c.as_ptr(), libc::MNT_FORCE | libc::MNT_DETACH) } == 0
    {
        return;
    }
    if let Some(n) = conn {
        let _ = std::fs::write(format!("/sys/fs/fuse/connections/{n}/abort"), "1");
    }
    if !is_mount_point(dir) {
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

/// A command that could not be started, as `std::process::Command` reports it: the error of
/// its `exec` (`EIO` for a file the mount could not read), or of the call that failed.
fn spawn_error(e: SpawnError) -> std::io::Error {
    match e {
        SpawnError::Child { source, .. } | SpawnError::Setup { source, .. } => source,
        nul @ SpawnError::Nul { .. } => {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, nul.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
