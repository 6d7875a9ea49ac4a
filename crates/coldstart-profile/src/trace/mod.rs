//! The ptrace first-touch profiler: one-shot `int3` breakpoints at every function entry.
//!
//! How it works, in the order things happen:
//!
//! 1. The program is forked stopped before `execve` ([`crate::spawn`]) and traced with
//!    `PTRACE_TRACEME`; options ask for clone, fork, vfork and exec events and kill the tree
//!    if the profiler dies (`PTRACE_O_EXITKILL`).
//! 2. At the exec stop the executable and the dynamic loader are mapped but no code has run.
//!    Their load biases come from the auxiliary vector (`AT_ENTRY`, `AT_BASE`); every function
//!    entry gets an `int3` (but those in code the program copies as data: [`crate::copied`]),
//!    written page run by page run through `/proc/PID/mem` (one read and one write per run of
//!    pages, not one system call per byte).
//! 3. The loader calls `_dl_debug_state` (the `r_debug` rendezvous debuggers use) whenever the
//!    set of libraries changes. A permanent breakpoint there reads `r_debug`; on
//!    `RT_CONSISTENT` the `link_map` chain lists every library with its load bias, and new
//!    ones (start-up libraries and later `dlopen`s alike) are armed before their code runs.
//! 4. On a trap: look the address up, record (module, function, thread, time since exec,
//!    ordinal), put the original byte back, set the instruction pointer back by one and
//!    continue. Each function traps once; a second thread racing into the same entry is
//!    rewound without a record.
//! 5. At readiness (or exit) every thread is stopped, every remaining breakpoint restored and
//!    the tree detached (or killed). A guard kills the tree on any error, so no stopped or
//!    orphaned process is left behind.
//!
//! The files follow those concerns: [`breakpoints`] writes and restores the `int3` bytes,
//! [`loader`] finds the modules (exec, the loader's rendezvous) and arms them, [`trap`] is
//! the hot path of a hit, [`threads`] follows clones, forks and execs and ends the trace;
//! this file holds the state and the event loop that dispatches to them.

mod breakpoints;
mod loader;
mod threads;
mod trap;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coldstart_elf::{ElfInfo, SymbolOptions};

use crate::format::{Fault, Image, Stop, Via};
use crate::modules::{location, profile_modules, ModuleTouches, Traced};
use crate::tree::{signal_name, ChildWake};
use crate::ProfileError;

use breakpoints::{restore_breakpoints, Breakpoint, Memory};
use loader::Rendezvous;

/// Offset of `rip` in `struct user_regs_struct` (x86-64), for PTRACE_PEEKUSER/POKEUSER.
const RIP: usize = 16 * 8;
const RSP: usize = 19 * 8;

/// Options of one traced run.
pub(crate) struct TraceOptions<'a> {
    pub follow_forks: crate::Follow,
    pub follow_exec: bool,
    pub kill_at_ready: bool,
    pub symbols: &'a SymbolOptions,
    pub ready_label: String,
    pub timeout: Option<Duration>,
}

/// A module as loaded somewhere in the tree (one per file and build).
struct ModuleRec {
    touches: ModuleTouches,
    /// The file, mapped: original bytes come from here (the loader has not relocated the
    /// text when a module is armed, so file and memory agree), which spares reading the
    /// program's text back through `/proc/PID/mem`.
    file: Option<Arc<coldstart_elf::Mmap>>,
}

/// One address space (a process image); threads and `vfork` children share it.
struct Space {
    pid: i32,
    mem: Box<dyn Memory>,
    breakpoints: HashMap<u64, Breakpoint>,
    /// Load bias -> module index, for the modules armed here.
    loaded: HashMap<u64, usize>,
    /// Biases of the executable and the loader, which the link map does not list as
    /// libraries (the executable has no name there) and which are never unloaded.
    fixed: Vec<u64>,
    r_debug: Option<u64>,
    rendezvous: Option<Rendezvous>,
    /// A fork child that is not followed: cleaned and detached at its first stop.
    detach_at_first_stop: bool,
    alive: bool,
    /// The program this space runs.
    exe: PathBuf,
    /// The process that forked the process of this space (0 for the command), and the
    /// program it ran then: a child that executes that program again is followed under
    /// [`crate::Follow::Same`].
    parent: i32,
    parent_exe: Option<PathBuf>,
}

impl Space {
    /// Put every original byte back (the rendezvous breakpoint included).
    fn restore_all(&mut self) {
        let rendezvous = self.rendezvous.take();
        restore_breakpoints(
            &*self.mem,
            &mut self.breakpoints,
            rendezvous.map(|r| (r.address, r.orig)),
        );
    }
}

struct Thread {
    space: usize,
    /// Process (thread group) id.
    tgid: i32,
    seen: bool,
    /// Its first stop came before the event that created it; it waits stopped.
    early: bool,
    /// Single-stepping over the re-armed rendezvous breakpoint.
    stepping: bool,
    /// Sent SIGSTOP to quiesce, not yet seen.
    stop_pending: bool,
    stopped: bool,
}

pub(crate) struct Tracer<'a> {
    opts: TraceOptions<'a>,
    root: i32,
    t0: Instant,
    modules: Vec<ModuleRec>,
    module_by_key: HashMap<(PathBuf, Option<Vec<u8>>), usize>,
    info_cache: HashMap<PathBuf, Arc<ElfInfo>>,
    spaces: Vec<Space>,
    threads: HashMap<i32, Thread>,
    ordinal: u64,
    warnings: Vec<String>,
    last_fault: Option<Fault>,
    recording: bool,
    /// What the processes ran, and whether it is profiled.
    images: Vec<Image>,
    unsymbolized: Vec<crate::modules::Unsymbolized>,
}

#[inline]
fn ptrace(
    req: libc::c_uint,
    pid: i32,
    addr: usize,
    data: usize,
) -> Result<libc::c_long, std::io::Error> {
    // SAFETY: plain ptrace requests on our tracees; PEEK results are checked through errno.
    unsafe {
        *libc::__errno_location() = 0;
        let r = libc::ptrace(req, pid, addr, data);
        if r == -1 && *libc::__errno_location() != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(r)
    }
}

#[inline]
fn cont(tid: i32, sig: i32) {
    let _ = ptrace(libc::PTRACE_CONT, tid, 0, sig as usize);
}

impl<'a> Tracer<'a> {
    /// Take over a child stopped before exec (traced with TRACEME), let it exec, arm it.
    pub(crate) fn start(
        opts: TraceOptions<'a>,
        pid: i32,
        errors: &mut coldstart_process::held::ExecReport,
        path: &Path,
    ) -> Result<Tracer<'a>, ProfileError> {
        let options = libc::PTRACE_O_TRACECLONE
            | libc::PTRACE_O_TRACEFORK
            | libc::PTRACE_O_TRACEVFORK
            | libc::PTRACE_O_TRACEEXEC
            | libc::PTRACE_O_EXITKILL;
        ptrace(libc::PTRACE_SETOPTIONS, pid, 0, options as usize)
            .map_err(|e| ProfileError::os("PTRACE_SETOPTIONS", e))?;
        cont(pid, 0);
        let mut status = 0;
        // SAFETY: waiting for our own traced child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        let exec_event = libc::WIFSTOPPED(status) && (status >> 16) == libc::PTRACE_EVENT_EXEC;
        if r != pid || !exec_event {
            return Err(crate::spawn::child_error(errors, path).unwrap_or_else(|| {
                ProfileError::Setup(format!(
                    "{} did not reach exec (status {status:#x})",
                    path.display()
                ))
            }));
        }
        let mut tracer = Tracer {
            opts,
            root: pid,
            t0: Instant::now(),
            modules: Vec::new(),
            module_by_key: HashMap::new(),
            info_cache: HashMap::new(),
            spaces: Vec::new(),
            threads: HashMap::new(),
            ordinal: 0,
            warnings: Vec::new(),
            last_fault: None,
            recording: true,
            images: Vec::new(),
            unsymbolized: Vec::new(),
        };
        let space = tracer.new_space_at_exec(pid)?;
        tracer.spaces[space].parent = std::process::id() as i32;
        tracer.images.push(Image {
            pid,
            parent: std::process::id() as i32,
            path: tracer.spaces[space].exe.clone(),
            via: Via::Start,
            profiled: true,
        });
        tracer.threads.insert(
            pid,
            Thread {
                space,
                tgid: pid,
                seen: true,
                early: false,
                stepping: false,
                stop_pending: false,
                stopped: false,
            },
        );
        cont(pid, 0);
        Ok(tracer)
    }

    /// Run until readiness, exit, crash or timeout; then detach or kill.
    pub(crate) fn run(
        mut self,
        ready_flag: &AtomicBool,
        ready_fd: Option<i32>,
    ) -> Result<Traced, ProfileError> {
        let deadline = self.opts.timeout.map(|t| Instant::now() + t);
        let wake = ChildWake::new();
        let stop = loop {
            if let Err(interrupted) = crate::interrupt::check() {
                self.finish(true)?;
                return Err(interrupted);
            }
            if ready_flag.load(Ordering::Relaxed) {
                let killed = self.opts.kill_at_ready;
                self.finish(killed)?;
                break Stop::Ready { signal: self.opts.ready_label.clone(), killed };
            }
            let mut status = 0;
            // SAFETY: waiting for any of our tracees without blocking.
            let tid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) };
            if tid < 0 {
                // No children left.
                break Stop::Exit { code: 0 };
            }
            if tid == 0 {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    self.finish(true)?;
                    break Stop::Timeout {
                        seconds: self.opts.timeout.unwrap_or_default().as_secs_f64(),
                    };
                }
                wake.wait(ready_fd, 100);
                continue;
            }
            if let Some(stop) = self.handle(tid, status)? {
                // The root is gone: let followed children go.
                if self.threads.values().any(|t| !t.stopped) {
                    let kill = self.opts.kill_at_ready;
                    self.finish(kill)?;
                }
                break stop;
            }
        };
        let duration_ns = self.t0.elapsed().as_nanos() as u64;
        let modules = profile_modules(self.modules.iter_mut().map(|m| &mut m.touches));
        Ok(Traced {
            modules,
            stop,
            duration_ns,
            warnings: self.warnings,
            images: self.images,
            unsymbolized: self.unsymbolized,
        })
    }

    /// Handle one wait status. Returns the stop reason when the root process ended.
    fn handle(&mut self, tid: i32, status: i32) -> Result<Option<Stop>, ProfileError> {
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            if let Some(t) = self.threads.remove(&tid) {
                if let Some(sp) = self.spaces.get_mut(t.space).filter(|sp| sp.pid == tid) {
                    sp.alive = false;
                }
            }
            if tid == self.root {
                if libc::WIFEXITED(status) {
                    return Ok(Some(Stop::Exit { code: libc::WEXITSTATUS(status) }));
                }
                let sig = libc::WTERMSIG(status);
                return Ok(Some(Stop::Crash {
                    signal: signal_name(sig),
                    pid: tid,
                    fault: self.last_fault.clone(),
                }));
            }
            return Ok(None);
        }
        if !libc::WIFSTOPPED(status) {
            return Ok(None);
        }
        let sig = libc::WSTOPSIG(status);
        let event = status >> 16;
        if let std::collections::hash_map::Entry::Vacant(slot) = self.threads.entry(tid) {
            // A new thread or child whose creation event we have not seen yet: it is
            // reported with its first stop (SIGSTOP); the event assigns its space.
            slot.insert(Thread {
                space: usize::MAX,
                tgid: tid,
                seen: true,
                early: true,
                stepping: false,
                stop_pending: false,
                stopped: false,
            });
            return Ok(None);
        }
        if event != 0 {
            self.handle_event(tid, event)?;
            return Ok(None);
        }
        let t = self.threads.get_mut(&tid).expect("known thread");
        if t.stop_pending && sig == libc::SIGSTOP {
            t.stop_pending = false;
            t.stopped = true;
            return Ok(None);
        }
        if !t.seen && sig == libc::SIGSTOP {
            t.seen = true;
            let space = t.space;
            if space != usize::MAX && self.spaces[space].detach_at_first_stop {
                self.clean_and_detach(space, tid);
            } else {
                cont(tid, 0);
            }
            return Ok(None);
        }
        if sig == libc::SIGTRAP {
            self.handle_trap(tid)?;
            return Ok(None);
        }
        if matches!(sig, libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGABRT)
        {
            let ip = ptrace(libc::PTRACE_PEEKUSER, tid, RIP, 0).unwrap_or(0) as u64;
            let location = self.locate(self.threads[&tid].space, ip);
            self.last_fault = Some(Fault { tid, ip, location });
        }
        if matches!(sig, libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
            // A group-stop (the stop signal was already delivered) reports the same signal
            // again; GETSIGINFO fails there. Injecting it again would loop, so resume.
            let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::uninit();
            // SAFETY: GETSIGINFO writes one siginfo_t.
            let r = unsafe { libc::ptrace(libc::PTRACE_GETSIGINFO, tid, 0, info.as_mut_ptr()) };
            if r < 0 {
                cont(tid, 0);
                return Ok(None);
            }
        }
        // Not ours: pass the signal on unchanged.
        cont(tid, sig);
        Ok(None)
    }

    fn locate(&self, space: usize, ip: u64) -> Option<String> {
        let sp = self.spaces.get(space)?;
        sp.loaded
            .iter()
            .find_map(|(&bias, &m)| location(&self.modules[m].touches.info, ip.wrapping_sub(bias)))
    }
}
