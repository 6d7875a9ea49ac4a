//! Starting the program stopped before its `execve` ([`coldstart_process::held`], held by its
//! own `SIGSTOP`), in its own process group, so the profiler can arm tracing first and can
//! always kill the whole tree.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use coldstart_process::held::{ExecReport, Hold, SpawnError, Spawner, Stage};

use crate::ProfileError;

/// A child stopped (by its own `SIGSTOP`) just before `execve`. The profiler owns it from
/// here: its tree guard kills the group, its loops reap the child.
pub(crate) struct Stopped {
    pub pid: i32,
    pub stdout: Option<File>,
    pub stderr: Option<File>,
    /// Reads the child's `execve` error, if any; closes on a successful exec.
    pub errors: ExecReport,
    /// Readable when the child ends (`None` on a kernel before 5.3).
    pub pidfd: Option<OwnedFd>,
}

/// Find `program` as `execvp` does (a name with a slash is used as is).
pub(crate) fn resolve(program: &OsString) -> Result<PathBuf, ProfileError> {
    coldstart_process::find_program(program)
        .map_err(|e| ProfileError::CommandNotFound { command: e.subject(), why: e.reason() })
}

fn pipe() -> Result<(OwnedFd, OwnedFd), ProfileError> {
    coldstart_sys::pipe(libc::O_CLOEXEC).map_err(|e| ProfileError::os("pipe2", e))
}

/// Start the child held by its own `SIGSTOP`: it joins a new process group, optionally asks to
/// be traced, optionally enters a mount namespace where copies of files cover their originals
/// (`enter`: the exact page run), stops itself, then (when continued) executes `path`.
/// `quiet`: the output not piped goes to `/dev/null`.
#[allow(clippy::too_many_arguments)] // one call site each for the kinds of run
pub(crate) fn spawn_stopped(
    path: &Path,
    command: &[OsString],
    traced: bool,
    pipe_stdout: bool,
    pipe_stderr: bool,
    ready_fd: Option<std::os::fd::BorrowedFd<'_>>,
    extra_env: &[(OsString, OsString)],
    die_with_coldstart: bool,
    enter: Option<&coldstart_storage::EnterHook>,
    quiet: bool,
) -> Result<Stopped, ProfileError> {
    use std::os::fd::AsRawFd;
    let out = if pipe_stdout { Some(pipe()?) } else { None };
    let errp = if pipe_stderr { Some(pipe()?) } else { None };
    // The environment, plus COLDSTART_READY_FD for the `fd` readiness signal and the
    // tracer's own variables (which replace variables of the same name).
    let mut spawner =
        Spawner::new(path, command).hold(Hold::Stop).env_remove(crate::ready::READY_FD_ENV);
    for (k, v) in extra_env {
        spawner = spawner.env(k, v);
    }
    if let Some(fd) = ready_fd {
        // Inherited across exec: the program writes its readiness here.
        let n = fd.as_raw_fd();
        spawner = spawner.env(crate::ready::READY_FD_ENV, n.to_string()).fd(n, fd);
    }
    if traced {
        spawner = spawner.trace();
    }
    if die_with_coldstart {
        // An untraced run is not covered by PTRACE_O_EXITKILL: die with coldstart.
        spawner = spawner.die_with_parent();
    }
    spawner = match (&out, quiet) {
        (Some((_, w)), _) => spawner.fd(1, w.as_fd()),
        (None, true) => spawner.null(1),
        (None, false) => spawner,
    };
    spawner = match (&errp, quiet) {
        (Some((_, w)), _) => spawner.fd(2, w.as_fd()),
        (None, true) => spawner.null(2),
        (None, false) => spawner,
    };
    if let Some(hook) = enter {
        spawner = spawner.hook(hook);
    }
    let held = spawner.spawn().map_err(|e| spawn_error(e, path))?;
    let held = held.disown();
    // The write ends belong to the child now; closing ours lets the readers see EOF.
    let stdout = out.map(|(r, _w)| File::from(r));
    let stderr = errp.map(|(r, _w)| File::from(r));
    Ok(Stopped { pid: held.pid, stdout, stderr, errors: held.report, pidfd: held.pidfd })
}

/// A child's failure before its program ran, as the profile reports it.
fn spawn_error(e: SpawnError, path: &Path) -> ProfileError {
    match e {
        SpawnError::Nul { .. } => ProfileError::Setup("command contains a NUL byte".into()),
        SpawnError::Setup { call, source, .. } => ProfileError::os(call, source),
        SpawnError::Child { stage: Stage::Trace, source, .. } => {
            ProfileError::CannotTrace { source }
        }
        SpawnError::Child { stage: Stage::Hook, source, .. } => ProfileError::Os {
            call: "entering a mount namespace with the files' copies (unshare, mount)",
            source,
        },
        SpawnError::Child { source, .. } => ProfileError::Exec { path: path.to_owned(), source },
    }
}

/// The error a child reported on its error pipe before `execve` succeeded.
pub(crate) fn child_error(errors: &mut ExecReport, path: &Path) -> Option<ProfileError> {
    errors.error().map(|e| spawn_error(e, path))
}
