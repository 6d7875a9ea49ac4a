//! Tracefs, mounted for as long as a coldstart uses it: [`Tracefs`].

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::{err, Mount, TraceError, TRACEFS};

/// The mount source that marks a tracefs as mounted by a coldstart.
pub const SOURCE: &str = "coldstart";
/// `f_type` of tracefs in `statfs`.
const TRACEFS_MAGIC: i64 = 0x7472_6163;

/// The process's users of tracefs and, while there are any, its root held open.
struct Held {
    users: usize,
    root: Option<OwnedFd>,
}

static HELD: Mutex<Held> = Mutex::new(Held { users: 0, root: None });

/// Tracefs, mounted and held while this lives.
///
/// A machine nobody prepared may not have tracefs mounted. Every user of it in a process (an
/// instance, the uprobes of a timeline) holds a `Tracefs`: the first mounts it where it is
/// missing, and the process keeps its root open while anyone holds it, which pins the mount
/// (`umount` fails with `EBUSY` while a file of the mount is open), so nobody unmounts it
/// under a user's feet. When the last user of the process lets go, a tracefs a coldstart
/// mounted (mount source [`SOURCE`] in `/proc/self/mountinfo`) is unmounted, unless another
/// process still holds it open: the last of them unmounts it in turn, and a tracefs that a
/// killed coldstart left mounted goes when the next coldstart is done with it. A tracefs
/// mounted by anyone else stays as it was.
///
/// Mounting happens under an exclusive `flock` of the empty directory tracefs mounts on, so
/// two coldstarts starting at once mount it once. Unmounting needs no lock: the kernel's own
/// busy check decides.
#[derive(Debug)]
pub struct Tracefs(());

impl Tracefs {
    /// Hold tracefs; with [`Mount::IfMissing`] mount it where it is missing, with
    /// [`Mount::Never`] fail instead, saying how to mount it.
    pub fn hold(mount: Mount) -> Result<Tracefs, TraceError> {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if held.users == 0 {
            held.root = Some(pin(mount)?);
        }
        held.users += 1;
        Ok(Tracefs(()))
    }

    /// A file or directory of tracefs (`instances`, `uprobe_events`).
    pub fn path(&self, file: &str) -> PathBuf {
        Path::new(TRACEFS).join(file)
    }
}

impl Clone for Tracefs {
    fn clone(&self) -> Tracefs {
        HELD.lock().unwrap_or_else(PoisonError::into_inner).users += 1;
        Tracefs(())
    }
}

impl Drop for Tracefs {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        held.users -= 1;
        if held.users == 0 {
            drop(held.root.take());
            if mounted_by_coldstart() {
                let c = CString::new(TRACEFS).expect("no NUL in a constant");
                // SAFETY: unmounting a tracefs a coldstart mounted; `EBUSY` (another process
                // holds it, and unmounts it when it is done) leaves it mounted.
                unsafe { libc::umount2(c.as_ptr(), 0) };
            }
        }
    }
}

/// Tracefs's root, opened (and mounted first where it is missing and `mount` allows it).
fn pin(mount: Mount) -> Result<OwnedFd, TraceError> {
    let root = Path::new(TRACEFS);
    // A tracefs unmounted by another process between our mount and our open is mounted again;
    // twice in a row is not a race any more.
    for _ in 0..3 {
        let dir = open_dir(root)?;
        if is_tracefs(&dir) {
            return Ok(dir);
        }
        if mount == Mount::Never {
            return Err(err(
                root,
                "tracefs is not mounted (as root: mount -t tracefs nodev /sys/kernel/tracing)",
            ));
        }
        // `dir` is the empty directory of sysfs that tracefs mounts on: whoever holds its lock
        // mounts, and whoever waited for it finds tracefs mounted.
        // SAFETY: flock of a descriptor we own; the lock goes with it.
        if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(err(root, std::io::Error::last_os_error()));
        }
        if !is_tracefs(&open_dir(root)?) {
            mount_tracefs(root)?;
        }
    }
    Err(err(root, "tracefs was unmounted each time it was mounted (by another program)"))
}

fn open_dir(path: &Path) -> Result<OwnedFd, TraceError> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in a constant");
    // SAFETY: open(2) with a NUL-terminated path; the descriptor is ours.
    let fd =
        unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.kind() == std::io::ErrorKind::NotFound {
            err(path, "missing: this kernel has no tracefs (built without CONFIG_FTRACE?)")
        } else {
            err(path, e)
        });
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn is_tracefs(dir: &OwnedFd) -> bool {
    // SAFETY: fstatfs fills the struct we own.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstatfs(dir.as_raw_fd(), &mut s) } == 0) && s.f_type as i64 == TRACEFS_MAGIC
}

fn mount_tracefs(root: &Path) -> Result<(), TraceError> {
    let c = |s: &str| CString::new(s).expect("no NUL in a constant");
    // SAFETY: mounting tracefs at its standard place with valid C strings, as systemd does
    // (nosuid, nodev, noexec), its source naming coldstart as the one who mounted it.
    let r = unsafe {
        libc::mount(
            c(SOURCE).as_ptr(),
            c(TRACEFS).as_ptr(),
            c("tracefs").as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(err(
            root,
            format!(
                "tracefs is not mounted, and mounting it failed: {e} (as root: mount -t tracefs nodev {TRACEFS})"
            ),
        ));
    }
    Ok(())
}

/// Whether the mount on [`TRACEFS`] (the top one, if mounts are stacked) is a tracefs that a
/// coldstart mounted.
fn mounted_by_coldstart() -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    top_mount(&info, TRACEFS) == Some(("tracefs", SOURCE))
}

/// The file system type and source of the last mount on `point` in a mountinfo text.
fn top_mount<'a>(info: &'a str, point: &str) -> Option<(&'a str, &'a str)> {
    info.lines()
        .filter(|l| l.split(' ').nth(4) == Some(point))
        .filter_map(|l| {
            let (_, after) = l.split_once(" - ")?;
            let mut f = after.split(' ');
            Some((f.next()?, f.next()?))
        })
        .next_back()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// Set in the copy of the test binary [`in_fresh_namespace`] starts.
    const INNER: &str = "COLDSTART_SYS_TEST_IN_NAMESPACE";

    /// Runs `body` as the test `name` (its path in this crate, `tracefs::...`) would run on a
    /// machine where tracefs is not mounted: this test binary runs that test again, alone, in
    /// a private mount namespace (the host's mounts are untouched) with every tracefs mount on
    /// [`TRACEFS`] detached, and that copy runs `body`. Needs root: without it the test skips,
    /// or fails where the suite must run whole.
    pub(crate) fn in_fresh_namespace(name: &str, body: impl FnOnce()) {
        if std::env::var_os(INNER).is_some() {
            assert!(!is_mounted(), "tracefs is not mounted at the start");
            return body();
        }
        if !coldstart_testkit::require_root("a mount namespace, mounting tracefs") {
            return;
        }
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]).env(INNER, "1");
        // SAFETY: only system calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::unshare(libc::CLONE_NEWNS) != 0
                    || libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                while libc::umount2(c"/sys/kernel/tracing".as_ptr(), libc::MNT_DETACH) == 0 {}
                Ok(())
            })
        };
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{name} in a namespace:\n{text}"
        );
    }

    /// Whether tracefs is mounted on [`TRACEFS`] here, and by whom (its mount source).
    pub(crate) fn source() -> Option<String> {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        top_mount(&info, TRACEFS).filter(|(t, _)| *t == "tracefs").map(|(_, s)| s.to_owned())
    }

    fn is_mounted() -> bool {
        source().is_some()
    }

    fn name(test: &str) -> String {
        let path = module_path!().split_once("::").unwrap().1;
        format!("{path}::{test}")
    }

    #[test]
    fn the_top_mount_on_a_point_is_read_with_its_type_and_source() {
        let info = "\
22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
40 22 0:13 / /sys/kernel/tracing rw,relatime shared:7 - tracefs nodev rw
63 40 0:13 / /sys/kernel/tracing rw,nosuid,nodev,noexec,relatime - tracefs coldstart rw
70 22 0:13 / /sys/kernel/tracing/x rw - tracefs coldstart rw
";
        assert_eq!(top_mount(info, TRACEFS), Some(("tracefs", "coldstart")));
        let lower = &info[..info.find("63 ").unwrap()];
        assert_eq!(top_mount(lower, TRACEFS), Some(("tracefs", "nodev")));
        assert_eq!(top_mount(info, "/sys/kernel/debug"), None);
    }

    #[test]
    fn tracefs_is_mounted_once_for_all_its_users_and_unmounted_after_the_last() {
        in_fresh_namespace(
            &name("tracefs_is_mounted_once_for_all_its_users_and_unmounted_after_the_last"),
            || {
                let e = Tracefs::hold(Mount::Never).unwrap_err();
                assert!(
                    e.to_string().contains("mount -t tracefs nodev /sys/kernel/tracing"),
                    "{e}"
                );
                let first = Tracefs::hold(Mount::IfMissing).unwrap();
                assert_eq!(source().as_deref(), Some(SOURCE), "mounted, saying by whom");
                let second = Tracefs::hold(Mount::IfMissing).unwrap();
                let third = second.clone();
                let mounts = || {
                    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
                    info.lines().filter(|l| l.split(' ').nth(4) == Some(TRACEFS)).count()
                };
                assert_eq!(mounts(), 1, "mounted once");
                drop(first);
                drop(third);
                assert!(second.path("instances").is_dir(), "still mounted for the last user");
                drop(second);
                assert_eq!(source(), None, "unmounted after the last user");
            },
        );
    }

    #[test]
    fn tracefs_in_use_by_another_process_or_mounted_by_someone_else_stays() {
        in_fresh_namespace(
            &name("tracefs_in_use_by_another_process_or_mounted_by_someone_else_stays"),
            || {
                let mine = Tracefs::hold(Mount::IfMissing).unwrap();
                // Another process works in it (a coldstart holds its root open the same way).
                let mut other = Command::new("sleep")
                    .arg("60")
                    .current_dir(mine.path("instances"))
                    .spawn()
                    .unwrap();
                drop(mine);
                assert_eq!(
                    source().as_deref(),
                    Some(SOURCE),
                    "not unmounted under the other's feet"
                );
                other.kill().unwrap();
                other.wait().unwrap();
                // The other's last user would unmount it; so does any coldstart done with it.
                drop(Tracefs::hold(Mount::Never).unwrap());
                assert_eq!(source(), None, "a coldstart's tracefs goes with its last user");

                let status = Command::new("mount")
                    .args(["-t", "tracefs", "nodev", TRACEFS])
                    .status()
                    .unwrap();
                assert!(status.success());
                drop(Tracefs::hold(Mount::IfMissing).unwrap());
                assert_eq!(source().as_deref(), Some("nodev"), "someone else's tracefs stays");
            },
        );
    }

    #[test]
    fn of_two_coldstarts_finding_tracefs_missing_at_once_one_mounts_it() {
        in_fresh_namespace(
            &name("of_two_coldstarts_finding_tracefs_missing_at_once_one_mounts_it"),
            || {
                // This test holds the mount point's lock, as a coldstart mounting tracefs does,
                // while another user of tracefs starts.
                let lock = open_dir(Path::new(TRACEFS)).unwrap();
                // SAFETY: flock of a descriptor we own.
                assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
                let waiter =
                    std::thread::spawn(|| Tracefs::hold(Mount::IfMissing).map(|t| t.path("")));
                std::thread::sleep(std::time::Duration::from_millis(300));
                assert!(!waiter.is_finished(), "it waits for the lock");
                mount_tracefs(Path::new(TRACEFS)).unwrap();
                drop(lock);
                waiter.join().unwrap().unwrap();
                let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
                let mounts = info.lines().filter(|l| l.split(' ').nth(4) == Some(TRACEFS)).count();
                assert_eq!(mounts, 0, "mounted once, and unmounted by the last user");
            },
        );
    }
}
