//! Starting the program stopped before its `execve`, in its own process group, so the
//! profiler can arm tracing first and can always kill the whole tree.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::ProfileError;

/// A child stopped (by its own `SIGSTOP`) just before `execve`.
pub(crate) struct Stopped {
    pub pid: i32,
    pub stdout: Option<File>,
    pub stderr: Option<File>,
    /// Reads the child's `execve` error, if any; closes on a successful exec.
    pub errors: File,
}

/// Find `program` like the shell does (a name with a slash is used as is).
pub(crate) fn resolve(program: &OsString) -> Result<PathBuf, ProfileError> {
    let p = Path::new(program);
    if p.as_os_str().as_bytes().contains(&b'/') {
        return if p.is_file() {
            Ok(p.to_owned())
        } else {
            let why = coldstart_fs::unusable_input(p).unwrap_or("is not a file");
            Err(ProfileError::CommandNotFound { command: p.display().to_string(), why })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(p)).find(|c| c.is_file()).ok_or_else(|| {
        ProfileError::CommandNotFound { command: p.display().to_string(), why: "is not in PATH" }
    })
}

fn cstring(s: &[u8]) -> Result<CString, ProfileError> {
    CString::new(s).map_err(|_| ProfileError::Setup("command contains a NUL byte".into()))
}

fn pipe() -> Result<(OwnedFd, OwnedFd), ProfileError> {
    coldstart_sys::pipe(libc::O_CLOEXEC).map_err(|e| ProfileError::os("pipe2", e))
}

/// Fork; the child joins a new process group, optionally asks to be traced, optionally enters
/// a mount namespace where copies of files cover their originals (`enter`: the exact page
/// run), stops itself, then (when continued) executes `path`. `quiet`: the output not piped
/// goes to `/dev/null`.
#[allow(clippy::too_many_arguments)] // one call site each for the kinds of run
pub(crate) fn spawn_stopped(
    path: &Path,
    command: &[OsString],
    traced: bool,
    pipe_stdout: bool,
    pipe_stderr: bool,
    ready_fd: Option<i32>,
    extra_env: &[(OsString, OsString)],
    die_with_coldstart: bool,
    enter: Option<&coldstart_storage::EnterHook>,
    quiet: bool,
) -> Result<Stopped, ProfileError> {
    use std::os::fd::AsRawFd;
    let c_path = cstring(path.as_os_str().as_bytes())?;
    let c_args: Vec<CString> =
        command.iter().map(|a| cstring(a.as_bytes())).collect::<Result<_, _>>()?;
    let mut argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // The environment, plus COLDSTART_READY_FD for the `fd` readiness signal and the
    // tracer's own variables (which replace variables of the same name).
    let mut env: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| k != crate::ready::READY_FD_ENV)
        .filter(|(k, _)| !extra_env.iter().any(|(e, _)| e == k))
        .chain(extra_env.iter().cloned())
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    if let Some(fd) = ready_fd {
        env.push(cstring(format!("{}={fd}", crate::ready::READY_FD_ENV).as_bytes())?);
    }
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let (err_r, err_w) = pipe()?;
    let out = if pipe_stdout { Some(pipe()?) } else { None };
    let errp = if pipe_stderr { Some(pipe()?) } else { None };
    let out_w = out.as_ref().map(|p| p.1.as_raw_fd());
    let errp_w = errp.as_ref().map(|p| p.1.as_raw_fd());
    let err_fd = err_w.as_raw_fd();
    let devnull = if quiet {
        Some(
            File::options()
                .write(true)
                .open("/dev/null")
                .map_err(|e| ProfileError::os("open /dev/null", e))?,
        )
    } else {
        None
    };
    let null_fd = devnull.as_ref().map(|f| f.as_raw_fd());

    // SAFETY: between fork and exec the child only calls async-signal-safe functions on
    // memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(ProfileError::os("fork", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // Child.
        unsafe {
            let fail = |stage: u8| -> ! {
                let errno = *libc::__errno_location();
                let msg = [stage, errno as u8, (errno >> 8) as u8, 0];
                libc::write(err_fd, msg.as_ptr().cast(), 4);
                libc::_exit(127)
            };
            libc::setpgid(0, 0);
            if traced && libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != 0 {
                fail(1);
            }
            if die_with_coldstart {
                // An untraced run is not covered by PTRACE_O_EXITKILL: die with coldstart.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            }
            if let Some(fd) = out_w.or(null_fd) {
                libc::dup2(fd, 1);
            }
            if let Some(fd) = errp_w.or(null_fd) {
                libc::dup2(fd, 2);
            }
            if let Some(fd) = ready_fd {
                // Inherited across exec: the program writes its readiness here.
                libc::fcntl(fd, libc::F_SETFD, 0);
            }
            // Only system calls on strings prepared before the fork (async-signal-safe).
            if enter.is_some_and(|hook| hook.run().is_err()) {
                fail(3);
            }
            libc::raise(libc::SIGSTOP);
            libc::execve(c_path.as_ptr(), argv.as_ptr(), envp.as_ptr());
            fail(2);
        }
    }
    drop(err_w);
    // The write ends belong to the child now; closing ours lets the readers see EOF.
    let stdout = out.map(|(r, _w)| File::from(r));
    let stderr = errp.map(|(r, _w)| File::from(r));
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED | libc::__WALL) };
    let mut errors = File::from(err_r);
    if r != pid || !libc::WIFSTOPPED(status) {
        return Err(child_error(&mut errors, path).unwrap_or(ProfileError::Setup(format!(
            "{} did not start (wait status {status:#x})",
            path.display()
        ))));
    }
    Ok(Stopped { pid, stdout, stderr, errors })
}

/// The error a child reported on its error pipe before `execve` succeeded.
pub(crate) fn child_error(errors: &mut File, path: &Path) -> Option<ProfileError> {
    let mut msg = [0u8; 4];
    if errors.read_exact(&mut msg).is_err() {
        return None;
    }
    let errno = i32::from(msg[1]) | (i32::from(msg[2]) << 8);
    let source = std::io::Error::from_raw_os_error(errno);
    Some(match msg[0] {
        1 => ProfileError::CannotTrace { source },
        3 => ProfileError::Os {
            call: "entering a mount namespace with the files' copies (unshare, mount)",
            source,
        },
        _ => ProfileError::Exec { path: path.to_owned(), source },
    })
}
