//! The output directory of a pack, and what is beside it while it is written.
//!
//! A pack writes `.NAME.tmp-PID` beside its output `NAME` and renames it into place when done,
//! so a reader sees no bundle or a whole one. Two packs of one output run one at a time: each
//! first takes the output's lock, `.NAME.lock` beside it (an `flock` held while the pack runs,
//! holding its PID), and a second pack is refused at once with the first one's PID, instead of
//! both writing for minutes and all but one failing to rename. The lock rather than "last
//! writer wins": a pack never replaces an existing output (a bundle being served must not
//! change under its readers), so a pack that started a moment later would have been refused
//! anyway; the lock makes concurrent packs behave as if run one after the other.
//!
//! Nothing is left beside the output once a pack ends, whatever the outcome: its temporary
//! directory is removed or renamed, its lock file removed. A pack killed with `SIGKILL` cannot
//! clean up; the next pack of the same output removes what it left (the temporary directories
//! of packs whose process is gone; the lock file, which it takes over).
//!
//! The walk of the input leaves out the output and these files ([`Output::is_own`]), so that
//! `pack DIR -o DIR/bundle` packs DIR without the bundle being written into it.

use std::fs;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::PackError;

/// The output of one pack, claimed: its lock held, its temporary directory made.
#[derive(Debug)]
pub(super) struct Output {
    out: PathBuf,
    tmp: PathBuf,
    lock_path: PathBuf,
    /// Holds the `flock`; closed (released) on drop, after the lock file is removed.
    lock: Option<fs::File>,
    /// The output's directory, canonical, and its name: to recognise them in the input.
    parent: Option<PathBuf>,
    name: String,
}

impl Output {
    /// Claims `out`: takes its lock (a pack of it already running: [`PackError::Busy`]),
    /// refuses an output that exists, removes what killed packs of it left, and makes the
    /// temporary directory.
    pub(super) fn claim(out: &Path) -> Result<Output, PackError> {
        let name = out.file_name().ok_or_else(|| PackError::Exists(out.to_path_buf()))?;
        let name = name.to_string_lossy().into_owned();
        let dir = match out.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let lock_path = dir.join(format!(".{name}.lock"));
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let lock = take_lock(&lock_path, out)?;
        let claimed = Output {
            out: out.to_path_buf(),
            tmp,
            lock_path,
            lock: Some(lock),
            parent: dir.canonicalize().ok(),
            name,
        };
        if out.symlink_metadata().is_ok() {
            return Err(PackError::Exists(out.to_path_buf()));
        }
        claimed.remove_abandoned();
        let _ = fs::remove_dir_all(&claimed.tmp);
        fs::create_dir_all(&claimed.tmp).map_err(claimed.write_err(&claimed.tmp))?;
        Ok(claimed)
    }

    /// A failure to write `path`, a file of the bundle being written, as the output's.
    pub(super) fn write_err(&self, path: &Path) -> impl FnOnce(io::Error) -> PackError + '_ {
        let path = path.to_path_buf();
        move |source| PackError::Write { out: self.out.clone(), path, source }
    }

    /// The temporary directory the bundle is written into.
    pub(super) fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// Renames the written bundle into place.
    pub(super) fn finish(self) -> Result<(), PackError> {
        fs::rename(&self.tmp, &self.out).map_err(|source| match source.raw_os_error() {
            Some(libc::ENOTEMPTY | libc::EEXIST) => PackError::Exists(self.out.clone()),
            _ => PackError::Write { out: self.out.clone(), path: self.tmp.clone(), source },
        })
        // Dropped either way: the temporary directory (if still there) and the lock go.
    }

    /// Whether `abs` (named `name`, in the input) is this output, its temporary directory or
    /// its lock, or those of another pack of the same output.
    pub(super) fn is_own(&self, abs: &Path, name: &str) -> bool {
        let ours = name == self.name
            || name == format!(".{}.lock", self.name)
            || name.starts_with(&format!(".{}.tmp-", self.name));
        ours && self.parent.is_some()
            && abs.parent().and_then(|p| p.canonicalize().ok()) == self.parent
    }

    /// Removes `.NAME.tmp-PID` beside the output whose process is gone (a pack killed with
    /// `SIGKILL`, a crash, a power cut). A pack still running is left alone.
    fn remove_abandoned(&self) {
        let Some(dir) = self.tmp.parent() else { return };
        let prefix = format!(".{}.tmp-", self.name);
        let Ok(items) = fs::read_dir(dir) else { return };
        for item in items.flatten() {
            let file = item.file_name();
            let Some(pid) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else { continue };
            let Ok(pid) = pid.parse::<u32>() else { continue };
            if !coldstart_sys::pid_alive(pid) && item.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = fs::remove_dir_all(item.path());
            }
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.tmp);
        // Removed while still held: a pack that opens it now finds it gone or held.
        let _ = fs::remove_file(&self.lock_path);
        self.lock.take();
    }
}

/// Opens (creating) and locks `path`, writing this process's PID into it. Held by another
/// process: [`PackError::Busy`] with the PID it wrote. A lock file removed by its holder
/// between our open and our lock is opened again.
fn take_lock(path: &Path, out: &Path) -> Result<fs::File, PackError> {
    loop {
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|source| PackError::Write {
                out: out.to_path_buf(),
                path: path.into(),
                source,
            })?;
        // Released when `file` is closed.
        let locked = coldstart_sys::file::lock(&file, coldstart_sys::file::Wait::No)
            .map_err(|source| PackError::Io { path: path.to_path_buf(), source })?;
        if !locked {
            let mut said = String::new();
            let _ = file.read_to_string(&mut said);
            return Err(PackError::Busy { out: out.to_path_buf(), pid: said.trim().parse().ok() });
        }
        // The file we hold must still be the one at `path`.
        let err = |source| PackError::Write { out: out.to_path_buf(), path: path.into(), source };
        let held = file.metadata().map_err(err)?;
        match fs::metadata(path) {
            Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {}
            _ => continue,
        }
        let write = file
            .set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| write!(file, "{}", std::process::id()));
        if let Err(e) = write {
            // Held, so ours to remove: nothing is left.
            let _ = fs::remove_file(path);
            return Err(err(e));
        }
        return Ok(file);
    }
}
