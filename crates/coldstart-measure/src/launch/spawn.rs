//! Starting the tree: the root held before `exec` in its cgroup ([`coldstart_process::held`]),
//! and the clock the child reads just before `exec`.
//!
//! [`prepare`] does what can fail before `fork` here (resolving the program, opening the
//! pipes and the cgroup's `cgroup.procs` files); [`Prepared::spawn`] starts the child, which
//! joins the cgroup, enters the emulated storage, waits on the *go* pipe, stores the monotonic
//! clock in a shared page and execs. The parent, between `fork` and *go*, attaches the
//! instruction counter and takes the readings that are subtracted at readiness: the wall time
//! and those readings start at the same point for every run.

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use coldstart_process::held::{Held, SpawnError, Spawner};

use super::counters::{self, Before};
use super::{resolve_program, LaunchError, RunSpec};
use crate::cgroup::RunCgroup;
use coldstart_ready::{self as ready, Ready};

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    coldstart_sys::pipe(libc::O_CLOEXEC)
}

/// What the child needs, made before `fork`.
pub(super) struct Prepared {
    program: PathBuf,
    /// The program's standard error, unless a `stderr:` signal reads it.
    stderr_file: Option<coldstart_sys::stderr::StderrFile>,
    /// The pipe of the stream a `stdout:`/`stderr:` signal reads.
    capture: Option<(OwnedFd, OwnedFd)>,
    /// The pipe whose write end is `$COLDSTART_READY_FD` (`--ready fd`).
    ready_pipe: Option<(OwnedFd, OwnedFd)>,
    /// The run cgroup's `cgroup.procs` files, open for writing.
    procs_fds: Vec<OwnedFd>,
}

/// Prepare the run of `spec` in `cgroup`: what can fail before `fork` here.
pub(super) fn prepare(spec: &RunSpec, cgroup: Option<&RunCgroup>) -> Result<Prepared, LaunchError> {
    let program = resolve_program(&spec.argv)?;
    let setup = LaunchError::Setup;
    let capture = match &spec.ready {
        Ready::Stdout(_) | Ready::Stderr(_) => Some(pipe().map_err(setup)?),
        _ => None,
    };
    let stderr_file = match &spec.ready {
        Ready::Stderr(_) => None,
        _ => Some(coldstart_sys::stderr::StderrFile::new().map_err(setup)?),
    };
    let ready_pipe = match &spec.ready {
        Ready::Fd => Some(pipe().map_err(setup)?),
        _ => None,
    };
    let procs_fds: Vec<OwnedFd> = match cgroup {
        Some(cg) => cg
            .procs_files()
            .iter()
            .map(|p| fs::OpenOptions::new().write(true).open(p).map(OwnedFd::from))
            .collect::<io::Result<_>>()
            .map_err(setup)?,
        None => Vec::new(),
    };
    Ok(Prepared { program, stderr_file, capture, ready_pipe, procs_fds })
}

/// The root of a started run, between `exec` and the end of the run.
pub(super) struct Launched {
    pub(super) pid: libc::pid_t,
    /// The root, killed with its group and reaped on drop at the latest.
    pub(super) held: Held,
    /// The clock the child read just before `exec`.
    pub(super) start_ns: u64,
    /// The read end of the captured stream; `None` at its end.
    pub(super) capture: Option<OwnedFd>,
    /// The read end of the `--ready fd` pipe; `None` at its end.
    pub(super) ready_r: Option<OwnedFd>,
    pub(super) marker: Option<ready::FileMarker>,
    /// The file the program's standard error goes to (not with a `stderr:` signal).
    pub(super) stderr_file: Option<coldstart_sys::stderr::StderrFile>,
    /// The instruction counter, when `perf_event_open` works.
    pub(super) perf: Option<OwnedFd>,
    /// The readings taken before `exec`, subtracted at readiness.
    pub(super) before: Before,
}

/// A failed start as measure reports it: every failure of the child is the program's.
fn launch_error(e: SpawnError) -> LaunchError {
    match e {
        SpawnError::Nul { what } => {
            LaunchError::Setup(io::Error::other(format!("{what} contains a NUL byte")))
        }
        SpawnError::Setup { source, .. } => LaunchError::Setup(source),
        SpawnError::Child { program, source, .. } => LaunchError::Exec { path: program, source },
    }
}

impl Prepared {
    /// Start the child held in the cgroup, take the readings, let it exec; see the module docs.
    /// `perf_supported` remembers whether the instruction counter could be attached (it is not
    /// tried again once it failed).
    pub(super) fn spawn(
        self,
        spec: &RunSpec,
        enter: Option<&coldstart_storage::EnterHook>,
        device_stat: Option<&Path>,
        perf_supported: &mut Option<bool>,
    ) -> Result<Launched, LaunchError> {
        let ready = &spec.ready;
        let mut spawner = Spawner::new(&self.program, &spec.argv).exec_clock().null(0);
        spawner = match (ready, &self.capture) {
            (Ready::Stdout(_), Some((_, w))) => spawner.fd(1, w.as_fd()),
            _ => spawner.null(1),
        };
        spawner = match (ready, &self.capture, &self.stderr_file) {
            (Ready::Stderr(_), Some((_, w)), _) => spawner.fd(2, w.as_fd()),
            (_, _, Some(f)) => spawner.fd(2, f.as_fd()),
            _ => spawner.null(2),
        };
        for (k, v) in &spec.env {
            spawner = spawner.env(k, v);
        }
        if let Some((_, w)) = &self.ready_pipe {
            let fd: RawFd = w.as_raw_fd();
            spawner = spawner.env(ready::READY_FD_ENV, fd.to_string()).fd(fd, w.as_fd());
        }
        if let Some(cwd) = &spec.cwd {
            spawner = spawner.current_dir(cwd);
        }
        for fd in &self.procs_fds {
            spawner = spawner.join_cgroup(fd.as_fd());
        }
        // Emulated storage: a private mount namespace with the copies over the originals; the
        // hook enters the working directory again through the new mounts.
        if let Some(enter) = enter {
            spawner = spawner.hook(enter);
        }

        let held = spawner.spawn().map_err(launch_error)?;
        let pid = held.pid();
        drop(self.procs_fds);
        let perf = if *perf_supported != Some(false) {
            let p = counters::perf_instructions(pid);
            *perf_supported = Some(p.is_some());
            p
        } else {
            None
        };
        let before = Before::read(device_stat);
        let marker = match ready {
            Ready::File(p) => Some(ready::FileMarker::before(p)),
            _ => None,
        };
        // The write ends belong to the child now.
        let mut launched = Launched {
            pid,
            held,
            start_ns: 0,
            capture: self.capture.map(|(r, _w)| r),
            ready_r: self.ready_pipe.map(|(r, _w)| r),
            marker,
            stderr_file: self.stderr_file,
            perf,
            before,
        };
        // Let the child exec.
        launched.held.release().map_err(launch_error)?;
        launched.start_ns = launched.held.exec_clock_ns().unwrap_or_default();
        launched.held.pidfd().map_err(LaunchError::Setup)?;
        Ok(launched)
    }
}

impl Launched {
    /// Readable when the root exits (checked at spawn).
    pub(super) fn pidfd(&self) -> RawFd {
        self.held.pidfd().map_or(-1, |fd| fd.as_raw_fd())
    }

    /// Kill the whole tree (the cgroup, or without one the process group) and reap the root.
    pub(super) fn kill_tree(&mut self, cgroup: Option<&RunCgroup>) -> Result<(), LaunchError> {
        if let Some(cg) = cgroup {
            cg.kill_all(std::time::Duration::from_secs(5)).map_err(LaunchError::Setup)?;
        } else {
            self.held.signal_group(libc::SIGKILL);
        }
        let _ = self.held.wait();
        Ok(())
    }

    /// The exit code or the signal of the reaped root.
    pub(super) fn code_signal(&self) -> (Option<i32>, Option<i32>) {
        self.held.exit().map_or((None, None), |e| (e.code(), e.signal()))
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        self.held.kill();
    }
}
