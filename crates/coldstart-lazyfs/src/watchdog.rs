//! The watchdog that cleans up after a mounting process that died without unmounting.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use coldstart_process::mountinfo::{self, Mount};

/// Cleans up after the mounting process if it dies without unmounting (`kill -9`, an abort).
///
/// fusermount3's `auto_unmount` option is not enough: it unmounts only if opening the mount point
/// fails with `ENOTCONN`, and when it looks while the dying process still holds `/dev/fuse` the
/// open fails with `ECONNABORTED` instead, and the mount stays. Nor is unmounting: a process
/// that holds `/dev/fuse` too (a command forked by `run` and still in `exec`, reading its
/// executable from the mount) waits for an answer nobody will give, in state D, and keeps the
/// connection alive.
///
/// The watchdog is a shell, started before the manifest is fetched, whose standard input is a
/// pipe only this process writes to (a command started on the mount closes its copy before
/// `exec`: [`crate::Mount::spawn`]). It reads lines: `rmdir PATH` (a directory to remove),
/// `mount ID N TYPE PATH` (the mount, once there is one), `pgid N` (a process group to kill),
/// `done` (this process cleaned up: nothing to do). At end of file without `done` this process
/// is gone, and the watchdog kills the process group, aborts the FUSE connection
/// (`/sys/fs/fuse/connections/N/abort`: every blocked read fails at once, so every process can
/// exit), detaches the mount (if the mount table still shows it, by id, device and type) and
/// removes the directories. Where the FUSE control file system is not mounted (a freshly
/// booted machine mounts it only when something asks), the watchdog mounts it for the abort
/// and unmounts it after.
pub(crate) struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

const WATCHDOG: &str = r#"
set --
pg= id= conn= fstype= dir=
ctl=/sys/fs/fuse/connections
abort() {
    echo 1 > "$ctl/$1/abort" 2>/dev/null && return
    mount -t fusectl coldstart "$ctl" 2>/dev/null || return
    echo 1 > "$ctl/$1/abort" 2>/dev/null
    umount "$ctl" 2>/dev/null
}
while IFS= read -r line; do
    case $line in
        done) exit 0 ;;
        "pgid "*) pg=${line#pgid } ;;
        "rmdir "*) set -- "$@" "${line#rmdir }" ;;
        "mount "*)
            rest=${line#mount }
            id=${rest%% *}; rest=${rest#* }
            conn=${rest%% *}; rest=${rest#* }
            fstype=${rest%% *}; dir=${rest#* } ;;
    esac
done
[ -n "$pg" ] && kill -s KILL -- "-$pg" 2>/dev/null
if [ -n "$id" ]; then
    while read -r mid _ dev _ _ rest; do
        [ "$mid" = "$id" ] && [ "$dev" = "0:$conn" ] || continue
        case "$rest" in
            *" - $fstype "*)
                abort "$conn"
                fusermount3 -u -z -- "$dir" 2>/dev/null || umount -l -- "$dir" ;;
        esac
    done < /proc/self/mountinfo
fi
for d in "$@"; do rmdir -- "$d" 2>/dev/null; done
exit 0
"#;

impl Watchdog {
    /// Starts a watchdog for this process, before anything is mounted: if the process dies,
    /// it removes the empty directories `dirs`, in order (a temporary mount point and its
    /// parent). [`Watchdog::watch`] gives it the mount once there is one.
    pub(crate) fn start(dirs: &[std::path::PathBuf]) -> std::io::Result<Watchdog> {
        let mut child = Command::new("/bin/sh")
            .args(["-c", WATCHDOG, "coldstart-unmount-watchdog"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Out of the terminal's process group: a Ctrl-C reaches only the mounting process,
            // which unmounts itself.
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        let mut w = Watchdog { child, stdin };
        for d in dirs {
            w.tell_path("rmdir", d)?;
        }
        Ok(w)
    }

    /// Tells the watchdog the mount on `mountpoint` (mounted now), by id, connection, file
    /// system type and path, so that it aborts and detaches exactly that mount. Returns the
    /// FUSE connection's number (the minor of the mount's device).
    pub(crate) fn watch(&mut self, mountpoint: &Path) -> std::io::Result<u32> {
        let entry = mount_entry(mountpoint).ok_or_else(|| {
            std::io::Error::other(format!("{} is not in the mount table", mountpoint.display()))
        })?;
        let (0, conn) = entry.dev else {
            return Err(std::io::Error::other(format!(
                "{} has device {}:{}, not a FUSE connection",
                mountpoint.display(),
                entry.dev.0,
                entry.dev.1
            )));
        };
        let what = format!("mount {} {conn} {}", entry.id, entry.fstype);
        self.tell_path(&what, &mountpoint.canonicalize()?)?;
        Ok(conn)
    }

    /// Tells `what PATH`; a path the watchdog cannot be told (a newline in it, not UTF-8) is
    /// an error.
    fn tell_path(&mut self, what: &str, path: &Path) -> std::io::Result<()> {
        let p = path.to_str().filter(|p| !p.contains('\n')).ok_or_else(|| {
            std::io::Error::other(format!("{}: a path the watchdog cannot be told", path.display()))
        })?;
        self.tell(&format!("{what} {p}"));
        Ok(())
    }

    /// The pipe to the watchdog, which a forked child must close.
    pub(crate) fn pipe(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.stdin.as_ref().map(|s| s.as_fd())
    }

    /// Tells the watchdog the process group to kill should this process die (`pgid N`).
    pub(crate) fn tell_group(&self, pgid: i32) {
        use std::io::Write;
        if let Some(mut s) = self.stdin.as_ref() {
            let _ = s.write_all(format!("pgid {pgid}\n").as_bytes());
        }
    }

    /// Tells the watchdog one line (see [`Watchdog`]); a line with a newline in it is not sent.
    pub(crate) fn tell(&mut self, line: &str) {
        use std::io::Write;
        if line.contains('\n') {
            return;
        }
        if let Some(s) = self.stdin.as_mut() {
            let _ = s.write_all(format!("{line}\n").as_bytes());
        }
    }

    /// Tells the watchdog this process is done with the mount, and reaps it.
    pub(crate) fn finish(self) {
        drop(self);
    }
}

impl Drop for Watchdog {
    /// What [`Watchdog::finish`] does: a watchdog is never dropped while this process still
    /// needs it (a mount that could not be detached keeps its watchdog to the end).
    fn drop(&mut self) {
        self.tell("done");
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

/// The mount on `path` (the last one, if mounts are stacked), from `/proc/self/mountinfo`:
/// the watchdog finds it by its id, its device and its type.
pub(crate) fn mount_entry(path: &Path) -> Option<Mount> {
    let path = path.canonicalize().ok()?;
    mountinfo::read().ok()?.into_iter().rfind(|m| m.point == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_is_found_by_its_path_with_its_device_and_type() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(mount_entry(d.path()), None);
        let proc = mount_entry(Path::new("/proc")).unwrap();
        assert_eq!(proc.fstype, "proc");
        assert_eq!(proc.point, Path::new("/proc"), "{proc:?}");
    }
}
