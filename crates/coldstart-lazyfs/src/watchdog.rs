//! The watchdog that cleans up after a mounting process that died without unmounting.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::mount::unescape;

/// Cleans up after the mounting process if it dies without unmounting (`kill -9`, an abort).
///
/// fusermount3's `auto_unmount` option is not enough: it unmounts only if opening the mount point
/// fails with `ENOTCONN`, and when it looks while the dying process still holds `/dev/fuse` the
/// open fails with `ECONNABORTED` instead, and the mount stays. Nor is unmounting: a process
/// that holds `/dev/fuse` too (a command forked by `run` and still in `exec`, reading its
/// executable from the mount) waits for an answer nobody will give, in state D, and keeps the
/// connection alive.
///
/// The watchdog is a shell whose standard input is a pipe only this process writes to (a
/// command started on the mount closes its copy before `exec`: [`crate::Mount::spawn`]). It reads
/// lines: `pgid N` (a process group to kill), `rmdir PATH` (a directory to remove), `done`
/// (this process unmounted: nothing to do). At end of file without `done` this process is
/// gone, and the watchdog kills the process group, aborts the FUSE connection
/// (`/sys/fs/fuse/connections/N/abort`: every blocked read fails at once, so every process can
/// exit), detaches the mount (if the mount table still shows it, by id, device and type) and
/// removes the directories.
pub(crate) struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

const WATCHDOG: &str = r#"
id=$1 dir=$2 fstype=$3 conn=$4
set --
pg=
while IFS= read -r line; do
    case $line in
        done) exit 0 ;;
        "pgid "*) pg=${line#pgid } ;;
        "rmdir "*) set -- "$@" "${line#rmdir }" ;;
    esac
done
[ -n "$pg" ] && kill -s KILL -- "-$pg" 2>/dev/null
while read -r mid _ dev _ _ rest; do
    [ "$mid" = "$id" ] && [ "$dev" = "0:$conn" ] || continue
    case "$rest" in
        *" - $fstype "*)
            echo 1 > "/sys/fs/fuse/connections/$conn/abort" 2>/dev/null
            fusermount3 -u -z -- "$dir" 2>/dev/null || umount -l -- "$dir" ;;
    esac
done < /proc/self/mountinfo
for d in "$@"; do rmdir -- "$d" 2>/dev/null; done
exit 0
"#;

impl Watchdog {
    /// Starts watching the mount on `mountpoint`, which must be mounted now.
    pub(crate) fn start(mountpoint: &Path) -> std::io::Result<Watchdog> {
        let entry = mount_entry(mountpoint).ok_or_else(|| {
            std::io::Error::other(format!("{} is not in the mount table", mountpoint.display()))
        })?;
        let conn = entry.dev.strip_prefix("0:").ok_or_else(|| {
            std::io::Error::other(format!(
                "{} has device {}, not a FUSE connection",
                mountpoint.display(),
                entry.dev
            ))
        })?;
        let mut child = Command::new("/bin/sh")
            .args(["-c", WATCHDOG, "coldstart-unmount-watchdog"])
            .arg(entry.id.to_string())
            .arg(mountpoint.canonicalize()?)
            .arg(&entry.fstype)
            .arg(conn)
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

    /// The descriptor of the pipe to the watchdog, which a forked child must close.
    pub(crate) fn fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.stdin.as_ref().map(|s| s.as_raw_fd())
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
    pub(crate) fn finish(mut self) {
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

/// A mount's line in `/proc/self/mountinfo`: what the watchdog finds it by.
#[derive(Debug, PartialEq)]
pub(crate) struct MountEntry {
    id: u64,
    /// `major:minor` of its device; for FUSE, `0:N` with N the connection's number.
    dev: String,
    fstype: String,
}

/// The mount on `path` (the last one, if mounts are stacked), from `/proc/self/mountinfo`.
pub(crate) fn mount_entry(path: &Path) -> Option<MountEntry> {
    let path = path.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let id = f.next()?.parse().ok()?;
            let dev = f.nth(1)?;
            let dir = f.nth(1)?;
            let fstype = f.skip_while(|&x| x != "-").nth(1)?;
            Some((MountEntry { id, dev: dev.to_owned(), fstype: fstype.to_owned() }, dir))
        })
        .filter(|(_, dir)| unescape(dir) == path.as_os_str().to_string_lossy())
        .map(|(e, _)| e)
        .next_back()
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
        assert!(proc.dev.contains(':'), "{proc:?}");
    }
}
